/* Shared helpers of the kdevctl subcommands: option parsing, common options
 * (-o, --timeout), error lines and exit statuses, aligned tables, socket
 * paths, and one-call unary RPCs with protobuf-c messages.
 *
 * Exit statuses (src/kubelet/cmds.h): 0 success, 1 failure, 2 usage error.
 * Error lines go to stderr as "kdevctl CMD: message"; RPC failures as
 * "kdevctl CMD: rpc error: code = NotFound desc = message", the text grpc-go
 * clients print (status.Error's String(), codes.Code.String() names).
 *
 * These functions print (they are the executable's presentation layer, not
 * library code) but never exit.
 */
#ifndef KDEV_KUBELET_CLI_H
#define KDEV_KUBELET_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "common/err.h"
#include "common/export.h"

#define KDEV_CLI_OK 0
#define KDEV_CLI_FAIL 1
#define KDEV_CLI_USAGE 2

/* kubelet's device plugin directory (k8s.io/kubelet constants.go
 * DevicePluginPath, without the trailing slash). */
#define KDEV_CLI_DEVICE_PLUGIN_DIR "/var/lib/kubelet/device-plugins"
#define KDEV_CLI_KUBELET_SOCKET_NAME "kubelet.sock"

/* Device plugin method paths (k8s.io/kubelet api_grpc.pb.go). */
#define KDEV_DP_GET_OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define KDEV_DP_LIST_AND_WATCH "/v1beta1.DevicePlugin/ListAndWatch"
#define KDEV_DP_GET_PREFERRED "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define KDEV_DP_ALLOCATE "/v1beta1.DevicePlugin/Allocate"
#define KDEV_DP_PRE_START "/v1beta1.DevicePlugin/PreStartContainer"

/* Default RPC timeout of the unary commands, seconds. */
#define KDEV_CLI_DEFAULT_TIMEOUT_S 10

/* ---- option parsing ---------------------------------------------------- */

/* id passed to the callback for a positional argument. */
#define KDEV_CLI_POSITIONAL (-1)

struct kdev_cli_opt {
        const char *name; /* long name without "--", e.g. "timeout" */
        char short_name;  /* e.g. 'o', or 0 for none */
        bool has_value;   /* takes a value: "--name V", "--name=V", "-o V", "-oV" */
        int id;           /* passed to the callback; >= 0 */
};

/* Receives options and positionals in command-line order: |id| is the
 * option's id (|value| NULL for options without a value) or
 * KDEV_CLI_POSITIONAL with the argument in |value|. Returns 0, or a negative
 * errno with |err| holding the usage message to print. */
typedef int (*kdev_cli_arg_fn)(int id, const char *value, void *user_data, struct kdev_err *err);

/* Parses |argv|[1..|argc|-1] (argv[0] is the subcommand name) against |opts|
 * (|n_opts| entries). "--" ends the options (everything after it is
 * positional); "-" alone is positional. "-h"/"--help" anywhere before "--"
 * wins over every other argument. Returns 0 after passing every argument to
 * |fn|, 1 when help was asked for (nothing passed to |fn|), or -EINVAL with
 * |err| set: unknown option, missing value, value given to a flag, or the
 * callback's error. */
KDEV_API int kdev_cli_parse(int argc, char **argv, const struct kdev_cli_opt *opts, size_t n_opts,
                            kdev_cli_arg_fn fn, void *user_data, struct kdev_err *err);

enum kdev_cli_output {
        KDEV_CLI_OUTPUT_TABLE = 0,
        KDEV_CLI_OUTPUT_JSON,
};

/* Parses an -o value: "table" or "json". Returns 0 or -EINVAL with |err|. */
KDEV_API int kdev_cli_parse_output(const char *text, enum kdev_cli_output *out,
                                   struct kdev_err *err);

/* Largest duration option accepted, seconds (one year). */
#define KDEV_CLI_MAX_SECONDS 31536000

/* Parses a duration option in seconds, integer or fractional ("10", "0.5",
 * 0 to KDEV_CLI_MAX_SECONDS; no sign, no blanks, no unit) into milliseconds
 * in |*ms| (a positive fraction rounds up to >= 1 ms). |what| names the
 * option in the message ("--hold"); |zero| (may be NULL) says what 0 means.
 * Returns 0, or -EINVAL with |err| set to
 * 'invalid --hold "x" (want seconds such as 2 or 0.5, from 0 to 31536000; 0 = ZERO)'
 * (without "; 0 = ZERO" when |zero| is NULL). */
KDEV_API int kdev_cli_parse_seconds(const char *text, const char *what, const char *zero,
                                    uint64_t *ms, struct kdev_err *err);

/* kdev_cli_parse_seconds() for --timeout (0 = no deadline). Returns 0 or
 * -EINVAL with |err|. */
KDEV_API int kdev_cli_parse_timeout(const char *text, uint64_t *ms, struct kdev_err *err);

/* Parses a decimal integer in [|min|, |max|] named |what| in the message.
 * Returns 0 or -EINVAL with |err|. */
KDEV_API int kdev_cli_parse_int(const char *text, const char *what, long long min, long long max,
                                long long *out, struct kdev_err *err);

/* A growable list of strings (owned copies). */
struct kdev_cli_strv {
        char **v;
        size_t n;
};

/* Appends the comma-separated items of |text| ("a,b,c") to |sv|. An empty
 * item ("a,,b", "", "a,") is an error naming |what|. Returns 0, -EINVAL or
 * -ENOMEM with |err|. */
KDEV_API int kdev_cli_strv_add_list(struct kdev_cli_strv *sv, const char *text, const char *what,
                                    struct kdev_err *err);

/* Appends a copy of |s|. Returns 0 or -ENOMEM. */
KDEV_API int kdev_cli_strv_add(struct kdev_cli_strv *sv, const char *s);

/* Frees the strings and the array; leaves |sv| empty. NULL-safe. */
KDEV_API void kdev_cli_strv_clear(struct kdev_cli_strv *sv);

/* Joins |sv| with |sep| into a malloc'ed string ("" when empty); NULL on
 * allocation failure. */
KDEV_API char *kdev_cli_strv_join(char *const *v, size_t n, const char *sep);

/* ---- messages and exit statuses ---------------------------------------- */

/* Prints "kdevctl CMD: MESSAGE" and "Run 'kdevctl CMD --help' for usage." to
 * stderr; returns KDEV_CLI_USAGE. */
KDEV_API int kdev_cli_usage_error(const char *cmd, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Prints "kdevctl CMD: MESSAGE" to stderr; returns KDEV_CLI_FAIL. */
KDEV_API int kdev_cli_fail(const char *cmd, const char *fmt,
                           ...) __attribute__((format(printf, 2, 3)));


/* Prints "kdevctl CMD: rpc error: code = NAME desc = MESSAGE" to stderr;
 * returns KDEV_CLI_FAIL. */
KDEV_API int kdev_cli_rpc_error(const char *cmd, int status, const char *message);

/* ---- sockets ------------------------------------------------------------ */

/* Resolves a SOCKET argument: a value containing '/' or naming an existing
 * file is used as is; a bare name that does not exist in the current
 * directory is taken from KDEV_CLI_DEVICE_PLUGIN_DIR ("vendor.sock" ->
 * "/var/lib/kubelet/device-plugins/vendor.sock"). Returns a malloc'ed path or
 * NULL on allocation failure. */
KDEV_API char *kdev_cli_socket_path(const char *arg);

/* Checks, before dialling, that |path| (symbolic links followed) is a Unix
 * socket. Returns 0 when it is; otherwise a negative errno with |err| set:
 * -ENOENT "no such socket PATH" (missing, or a dangling link), -ENOTSOCK
 * "PATH is not a socket (it is a directory)" (or "a regular file", ... as
 * kdev_file_type_name() in common/file.h names it), or stat's errno as
 * "PATH: strerror". Does not tell whether anyone listens
 * (kdev_cli_probe_socket()). */
KDEV_API int kdev_cli_check_socket(const char *path, struct kdev_err *err);

enum kdev_cli_sock_state {
        KDEV_CLI_SOCK_LIVE = 0,  /* something accepted (or queued) the connection */
        KDEV_CLI_SOCK_DEAD,      /* the socket file exists but nobody listens */
        KDEV_CLI_SOCK_ERROR,     /* could not test: path too long, permission... */
};

/* Tests whether a server listens on the Unix socket |path| with a
 * non-blocking connect() that is closed at once. Stores the errno of a failed
 * test in |*errnum| (0 when live) when |errnum| is not NULL. */
KDEV_API enum kdev_cli_sock_state kdev_cli_probe_socket(const char *path, int *errnum);

/* ---- RPC ----------------------------------------------------------------- */

/* Checks |path| with kdev_cli_check_socket(), then calls the unary |method|
 * on the socket |path| with |req|, waiting at most |timeout_ms| (0 = no
 * deadline), and unpacks the answer as |resp_desc| into
 * |*resp| (free with protobuf_c_message_free_unpacked(*resp, NULL)). A
 * response with status OK but no message fails as grpc-go's client does
 * ("rpc error: code = Internal desc = unary call returned no message"). On failure
 * prints the error line for |cmd| (rpc error, connection or decoding
 * failure, not a socket) and returns KDEV_CLI_FAIL; returns KDEV_CLI_OK on success. When
 * |quiet| is true nothing is printed and the message (with the rpc error
 * prefix where it applies) goes to |err| instead. */
KDEV_API int kdev_cli_unary(const char *cmd, const char *path, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, uint64_t timeout_ms,
                            ProtobufCMessage **resp, bool quiet, struct kdev_err *err);

/* Prints |msg| as indented proto3 JSON (pbjson) and a newline to stdout.
 * Returns KDEV_CLI_OK, or KDEV_CLI_FAIL after printing the error for |cmd|. */
KDEV_API int kdev_cli_print_json(const char *cmd, const ProtobufCMessage *msg);

/* Prints the JSON value |j| (its reference is taken: decref'ed here, NULL
 * counts as out of memory) indented by 2, keys in insertion order, and a
 * newline to stdout. Returns KDEV_CLI_OK, or KDEV_CLI_FAIL after printing
 * "kdevctl CMD: out of memory". */
KDEV_API int kdev_cli_print_json_value(const char *cmd, json_t *j);

/* ---- tables -------------------------------------------------------------- */

/* Rows of text cells printed with aligned columns: each column as wide as
 * its widest cell (counted in UTF-8 code points), columns separated by three
 * spaces, no trailing blanks (kubectl's layout). Header row first. */
struct kdev_cli_table;

/* Creates a table with |ncols| columns (1..16) and the given header cells
 * (exactly |ncols| const char * arguments). NULL on allocation failure. */
KDEV_API struct kdev_cli_table *kdev_cli_table_new(size_t ncols, ...);

/* Appends a row of exactly ncols const char * cells (copied; NULL prints as
 * "-"). Returns 0 or -ENOMEM. */
KDEV_API int kdev_cli_table_add(struct kdev_cli_table *t, ...);

/* Appends a row from an array of ncols cells. Returns 0 or -ENOMEM. */
KDEV_API int kdev_cli_table_add_v(struct kdev_cli_table *t, const char *const *cells);

/* Number of data rows (without the header). */
KDEV_API size_t kdev_cli_table_rows(const struct kdev_cli_table *t);

/* Prints every row to |f|, each line prefixed with |indent| (may be NULL). */
KDEV_API void kdev_cli_table_print(const struct kdev_cli_table *t, FILE *f, const char *indent);

/* Frees |t|. NULL-safe. */
KDEV_API void kdev_cli_table_free(struct kdev_cli_table *t);

#endif /* KDEV_KUBELET_CLI_H */
