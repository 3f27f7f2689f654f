/* Validators of the flags and environment variables both daemons take
 * (kdev-plugin, kdev-dra-plugin): log level and format, durations in
 * seconds, Kubernetes names, non-empty paths. Each prints nothing itself
 * unless it says so; the usage errors' wording stays that of the daemons'
 * --help (tests/integration/docs_help.py). */
#ifndef KDEV_COMMON_FLAGS_H
#define KDEV_COMMON_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/export.h"
#include "common/log.h"

/* --log-level |v| of program |prog|: on success sets *level and returns
 * true; otherwise prints "<prog>: invalid --log-level \"<v>\": want debug,
 * info, warn or error" to stderr and returns false. */
KDEV_API bool kdev_flag_log_level(const char *prog, const char *v, enum kdev_log_level *level);

/* --log-format |v| of program |prog|: on success sets *json and returns
 * true; otherwise prints "<prog>: invalid --log-format \"<v>\": want text or
 * json" to stderr and returns false. */
KDEV_API bool kdev_flag_log_format(const char *prog, const char *v, bool *json);

/* Parses |text| as seconds (strtod: fractions and exponents allowed, the
 * whole string) in 0 < s <= |max|. Returns true with *seconds set, false
 * (*seconds untouched) otherwise; the caller words the error. */
KDEV_API bool kdev_seconds_parse(const char *text, double max, double *seconds);

/* Parses |text| as whole decimal seconds (digits only, no sign, no spaces)
 * in |min|..|max|. Returns true with *seconds set, false otherwise. */
KDEV_API bool kdev_whole_seconds_parse(const char *text, unsigned long long min,
                                       unsigned long long max, unsigned long long *seconds);

/* Whether |s| is a Kubernetes DNS subdomain (IsDNS1123Subdomain,
 * k8s.io/apimachinery/pkg/util/validation: lower-case alphanumeric labels,
 * '-' inside a label, '.' between labels) of 1 to |max| characters: object
 * names such as node names (253), DRA driver names (63). */
KDEV_API bool kdev_dns_subdomain(const char *s, size_t max);

/* A flag whose value names a path or a file: the name (without "--") and
 * the value, NULL when the flag was not given. */
struct kdev_flag_path {
        const char *flag;
        const char *value;
};

/* Checks that none of the |n| |paths| given is the empty string. Returns
 * true, or prints "<prog>: --<flag> must not be empty" for the first empty
 * one to stderr and returns false. */
KDEV_API bool kdev_flag_paths_nonempty(const char *prog, const struct kdev_flag_path *paths,
                                       size_t n);

/* getopt_long codes of the flags both daemons take, above any program's
 * own codes. Each daemon spells the entries in its own option table
 * ({"log-level", required_argument, NULL, KDEV_FLAG_LOG_LEVEL},
 * {"log-format", ...}, {"help", ..., 'h'}, {"version", ...}), where
 * tests/integration/docs_help.py reads them. */
enum {
        KDEV_FLAG_LOG_LEVEL = 0x1000,
        KDEV_FLAG_LOG_FORMAT,
        KDEV_FLAG_VERSION,
};

/* What the flags both daemons take set. */
struct kdev_flag_common {
        enum kdev_log_level level; /* --log-level (default KDEV_LOG_INFO) */
        bool json;                 /* --log-format json */
};

/* Handles getopt_long's |c| with |arg| when it is a common flag of program
 * |prog|: --log-level and --log-format into |out| (a bad value printed as
 * kdev_flag_log_level / kdev_flag_log_format do), -h/--help (|usage|
 * printed to stdout), --version ("<prog> <version>" on stdout). Returns -1
 * when |c| is not a common flag, 1 when it was taken, 0 when the program
 * is to exit 0 (help, version), 2 for a usage error. */
KDEV_API int kdev_flag_common(const char *prog, int c, const char *arg,
                              struct kdev_flag_common *out, void (*usage)(FILE *f));

/* With |status| -1 (no usage error yet): an argument left at argv[optind]
 * is a usage error, printed as "<prog>: unexpected argument \"<arg>\"" on
 * stderr. Returns the status (2 then, else |status|). */
KDEV_API int kdev_flag_no_operands(const char *prog, int status, int argc, char **argv, int optind);

/* Ends the flag parsing of program |prog|: with |status| 2 (a usage error)
 * prints "Run '<prog> --help' for the options." on stderr. Returns
 * |status|. */
KDEV_API int kdev_flag_finish(const char *prog, int status);

#endif /* KDEV_COMMON_FLAGS_H */
