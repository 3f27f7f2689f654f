/* Shared helpers of the kdevctl subcommands. See cli.h. */
#include "kubelet/cli.h"

#include "common/file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kubelet/pbjson.h"
#include "rpc/rpc.h"

/* ---- option parsing ---------------------------------------------------- */

static bool is_help(const char *a)
{
        return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

static const struct kdev_cli_opt *find_long(const struct kdev_cli_opt *opts, size_t n,
                                            const char *name, size_t len)
{
        for (size_t i = 0; i < n; i++) {
                if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
                        return &opts[i];
        }
        return NULL;
}

static const struct kdev_cli_opt *find_short(const struct kdev_cli_opt *opts, size_t n, char c)
{
        for (size_t i = 0; i < n; i++) {
                if (opts[i].short_name && opts[i].short_name == c)
                        return &opts[i];
        }
        return NULL;
}

int kdev_cli_parse(int argc, char **argv, const struct kdev_cli_opt *opts, size_t n_opts,
                   kdev_cli_arg_fn fn, void *user_data, struct kdev_err *err)
{
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--") == 0)
                        break;
                if (is_help(argv[i]))
                        return 1;
        }
        bool only_positional = false;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                int rc;
                if (only_positional || a[0] != '-' || a[1] == '\0') {
                        rc = fn(KDEV_CLI_POSITIONAL, a, user_data, err);
                        if (rc < 0)
                                return rc;
                        continue;
                }
                if (strcmp(a, "--") == 0) {
                        only_positional = true;
                        continue;
                }
                const struct kdev_cli_opt *o;
                const char *value = NULL;
                if (a[1] == '-') {
                        const char *name = a + 2;
                        const char *eq = strchr(name, '=');
                        size_t len = eq ? (size_t)(eq - name) : strlen(name);
                        o = find_long(opts, n_opts, name, len);
                        if (!o)
                                return kdev_err_set(err, EINVAL, "unknown option --%.*s", (int)len,
                                                    name);
                        if (eq && !o->has_value)
                                return kdev_err_set(err, EINVAL, "option --%s takes no value",
                                                    o->name);
                        if (eq)
                                value = eq + 1;
                } else {
                        o = find_short(opts, n_opts, a[1]);
                        if (!o)
                                return kdev_err_set(err, EINVAL, "unknown option -%c", a[1]);
                        if (a[2] != '\0') {
                                if (!o->has_value)
                                        return kdev_err_set(err, EINVAL,
                                                            "option -%c takes no value", a[1]);
                                value = a + 2;
                        }
                }
                if (o->has_value && !value) {
                        if (i + 1 >= argc)
                                return kdev_err_set(err, EINVAL, "option --%s needs a value",
                                                    o->name);
                        value = argv[++i];
                }
                rc = fn(o->id, value, user_data, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

int kdev_cli_parse_output(const char *text, enum kdev_cli_output *out, struct kdev_err *err)
{
        if (strcmp(text, "table") == 0)
                *out = KDEV_CLI_OUTPUT_TABLE;
        else if (strcmp(text, "json") == 0)
                *out = KDEV_CLI_OUTPUT_JSON;
        else
                return kdev_err_set(err, EINVAL,
                                    "invalid output format \"%s\" (want table or json)", text);
        return 0;
}

int kdev_cli_parse_seconds(const char *text, const char *what, const char *zero, uint64_t *ms,
                           struct kdev_err *err)
{
        char *end;
        if (!*text || isspace((unsigned char)*text) || *text == '-' || *text == '+')
                goto bad;
        errno = 0;
        double s = strtod(text, &end);
        if (*end || errno || !isfinite(s) || s < 0 || s > KDEV_CLI_MAX_SECONDS)
                goto bad;
        double m = s * 1000.0;
        uint64_t whole = (uint64_t)m;
        *ms = (double)whole < m ? whole + 1 : whole; /* round up: 0.0001 s -> 1 ms */
        return 0;
bad:
        return kdev_err_set(err, EINVAL,
                            "invalid %s \"%s\" (want seconds such as 2 or 0.5, from 0 to %d%s%s)",
                            what, text, KDEV_CLI_MAX_SECONDS, zero ? "; 0 = " : "",
                            zero ? zero : "");
}

int kdev_cli_parse_timeout(const char *text, uint64_t *ms, struct kdev_err *err)
{
        return kdev_cli_parse_seconds(text, "--timeout", "none", ms, err);
}

int kdev_cli_parse_int(const char *text, const char *what, long long min, long long max,
                       long long *out, struct kdev_err *err)
{
        char *end;
        errno = 0;
        if (!*text || isspace((unsigned char)*text))
                goto bad;
        long long v = strtoll(text, &end, 10);
        if (*end || errno || v < min || v > max)
                goto bad;
        *out = v;
        return 0;
bad:
        return kdev_err_set(err, EINVAL, "invalid %s \"%s\" (want an integer from %lld to %lld)",
                            what, text, min, max);
}

int kdev_cli_strv_add(struct kdev_cli_strv *sv, const char *s)
{
        char *copy = strdup(s);
        char **nv = realloc(sv->v, (sv->n + 1) * sizeof(*nv));
        if (!copy || !nv) {
                free(copy);
                if (nv)
                        sv->v = nv;
                return -ENOMEM;
        }
        sv->v = nv;
        sv->v[sv->n++] = copy;
        return 0;
}

int kdev_cli_strv_add_list(struct kdev_cli_strv *sv, const char *text, const char *what,
                           struct kdev_err *err)
{
        const char *p = text;
        for (;;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                if (len == 0)
                        return kdev_err_set(err, EINVAL, "empty device ID in %s \"%s\"", what,
                                            text);
                char *item = strndup(p, len);
                if (!item || kdev_cli_strv_add(sv, item) < 0) {
                        free(item);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                free(item);
                if (!comma)
                        return 0;
                p = comma + 1;
        }
}

void kdev_cli_strv_clear(struct kdev_cli_strv *sv)
{
        if (!sv)
                return;
        for (size_t i = 0; i < sv->n; i++)
                free(sv->v[i]);
        free(sv->v);
        sv->v = NULL;
        sv->n = 0;
}

char *kdev_cli_strv_join(char *const *v, size_t n, const char *sep)
{
        size_t len = 1, sl = strlen(sep);
        for (size_t i = 0; i < n; i++)
                len += strlen(v[i]) + (i ? sl : 0);
        char *out = malloc(len);
        if (!out)
                return NULL;
        char *p = out;
        for (size_t i = 0; i < n; i++) {
                if (i) {
                        memcpy(p, sep, sl);
                        p += sl;
                }
                size_t l = strlen(v[i]);
                memcpy(p, v[i], l);
                p += l;
        }
        *p = '\0';
        return out;
}

/* ---- messages and exit statuses ---------------------------------------- */

int kdev_cli_usage_error(const char *cmd, const char *fmt, ...)
{
        va_list ap;
        fprintf(stderr, "kdevctl %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nRun 'kdevctl %s --help' for usage.\n", cmd);
        return KDEV_CLI_USAGE;
}

int kdev_cli_fail(const char *cmd, const char *fmt, ...)
{
        va_list ap;
        fprintf(stderr, "kdevctl %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return KDEV_CLI_FAIL;
}

int kdev_cli_rpc_error(const char *cmd, int status, const char *message)
{
        char name[32];
        return kdev_cli_fail(cmd, "rpc error: code = %s desc = %s",
                             kdev_rpc_code_name(status, name, sizeof(name)),
                             message ? message : "");
}

/* ---- sockets ------------------------------------------------------------ */

char *kdev_cli_socket_path(const char *arg)
{
        struct stat st;
        if (strchr(arg, '/') || lstat(arg, &st) == 0)
                return strdup(arg);
        size_t len = strlen(KDEV_CLI_DEVICE_PLUGIN_DIR) + 1 + strlen(arg) + 1;
        char *p = malloc(len);
        if (p)
                snprintf(p, len, "%s/%s", KDEV_CLI_DEVICE_PLUGIN_DIR, arg);
        return p;
}

int kdev_cli_check_socket(const char *path, struct kdev_err *err)
{
        struct stat st;
        if (stat(path, &st) < 0) {
                int e = errno;
                if (e == ENOENT)
                        return kdev_err_set(err, ENOENT, "no such socket %s", path);
                return kdev_err_set(err, e, "%s: %s", path, strerror(e));
        }
        if (!S_ISSOCK(st.st_mode))
                return kdev_err_set(err, ENOTSOCK, "%s is not a socket (it is %s)", path,
                                    kdev_file_type_name(st.st_mode));
        return 0;
}

enum kdev_cli_sock_state kdev_cli_probe_socket(const char *path, int *errnum)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int e = 0;
        enum kdev_cli_sock_state st = KDEV_CLI_SOCK_LIVE;
        if (strlen(path) >= sizeof(sa.sun_path)) {
                e = ENAMETOOLONG;
                st = KDEV_CLI_SOCK_ERROR;
                goto out;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
                e = errno;
                st = KDEV_CLI_SOCK_ERROR;
                goto out;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                e = errno;
                if (e == EAGAIN || e == EINPROGRESS) {
                        e = 0; /* listener with a full backlog: alive */
                } else if (e == ECONNREFUSED || e == ENOENT) {
                        st = KDEV_CLI_SOCK_DEAD;
                } else {
                        st = KDEV_CLI_SOCK_ERROR;
                }
        }
        close(fd);
out:
        if (errnum)
                *errnum = e;
        return st;
}

/* ---- RPC ----------------------------------------------------------------- */

int kdev_cli_unary(const char *cmd, const char *path, const char *method,
                   const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc,
                   uint64_t timeout_ms, ProtobufCMessage **resp, bool quiet, struct kdev_err *err)
{
        static const uint8_t empty[1];
        struct kdev_err local = {0};
        uint8_t *out = NULL, *in = NULL;
        size_t out_len = protobuf_c_message_get_packed_size(req), in_len = 0;
        int ret = KDEV_CLI_FAIL;
        *resp = NULL;
        if (kdev_cli_check_socket(path, &local) < 0)
                goto done;
        out = malloc(out_len ? out_len : 1);
        if (!out) {
                kdev_err_set(&local, ENOMEM, "out of memory");
                goto done;
        }
        protobuf_c_message_pack(req, out);
        int rc = kdev_rpc_unary_sync(path, method, out, out_len, timeout_ms, &in, &in_len, &local);
        if (rc < 0) {
                if (!local.msg[0])
                        kdev_err_set(&local, -rc, "%s: %s", path, strerror(-rc));
                goto done;
        }
        if (rc != KDEV_RPC_OK) {
                char name[32];
                char desc[KDEV_ERR_MSG_MAX];
                snprintf(desc, sizeof(desc), "%s", local.msg);
                kdev_err_set(&local, EPROTO, "rpc error: code = %s desc = %s",
                             kdev_rpc_code_name(rc, name, sizeof(name)), desc);
                goto done;
        }
        *resp = protobuf_c_message_unpack(resp_desc, NULL, in_len, in ? in : empty);
        if (!*resp) {
                kdev_err_set(&local, EBADMSG, "cannot decode the %s response (%zu bytes)",
                             resp_desc->name, in_len);
                goto done;
        }
        ret = KDEV_CLI_OK;
done:
        free(out);
        free(in);
        if (ret != KDEV_CLI_OK) {
                if (!quiet)
                        kdev_cli_fail(cmd, "%s", local.msg);
                if (err)
                        *err = local;
        }
        return ret;
}

int kdev_cli_print_json(const char *cmd, const ProtobufCMessage *msg)
{
        struct kdev_err err = {0};
        char *text = kdev_pbjson_dumps(msg, &err);
        if (!text)
                return kdev_cli_fail(cmd, "cannot print the response as JSON: %s", err.msg);
        fputs(text, stdout);
        free(text);
        return KDEV_CLI_OK;
}

int kdev_cli_print_json_value(const char *cmd, json_t *j)
{
        char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(j);
        if (!text)
                return kdev_cli_fail(cmd, "out of memory");
        printf("%s\n", text);
        free(text);
        return KDEV_CLI_OK;
}

/* ---- tables -------------------------------------------------------------- */

#define TABLE_MAX_COLS 16

struct kdev_cli_table {
        size_t ncols;
        size_t nrows; /* including the header */
        char **cells; /* nrows * ncols */
};

static int table_add_row(struct kdev_cli_table *t, const char *const *cells)
{
        char **nc = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(char *));
        if (!nc)
                return -ENOMEM;
        t->cells = nc;
        char **row = nc + t->nrows * t->ncols;
        for (size_t i = 0; i < t->ncols; i++) {
                row[i] = strdup(cells[i] ? cells[i] : "-");
                if (!row[i]) {
                        for (size_t k = 0; k < i; k++)
                                free(row[k]);
                        return -ENOMEM;
                }
        }
        t->nrows++;
        return 0;
}

struct kdev_cli_table *kdev_cli_table_new(size_t ncols, ...)
{
        const char *hdr[TABLE_MAX_COLS];
        if (ncols == 0 || ncols > TABLE_MAX_COLS)
                return NULL;
        struct kdev_cli_table *t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        t->ncols = ncols;
        va_list ap;
        va_start(ap, ncols);
        for (size_t i = 0; i < ncols; i++)
                hdr[i] = va_arg(ap, const char *);
        va_end(ap);
        if (table_add_row(t, hdr) < 0) {
                kdev_cli_table_free(t);
                return NULL;
        }
        return t;
}

int kdev_cli_table_add(struct kdev_cli_table *t, ...)
{
        const char *cells[TABLE_MAX_COLS];
        va_list ap;
        va_start(ap, t);
        for (size_t i = 0; i < t->ncols; i++)
                cells[i] = va_arg(ap, const char *);
        va_end(ap);
        return table_add_row(t, cells);
}

int kdev_cli_table_add_v(struct kdev_cli_table *t, const char *const *cells)
{
        return table_add_row(t, cells);
}

size_t kdev_cli_table_rows(const struct kdev_cli_table *t)
{
        return t->nrows - 1;
}

/* Display width: UTF-8 code points (continuation bytes do not count). */
static size_t text_width(const char *s)
{
        size_t w = 0;
        for (; *s; s++) {
                if (((unsigned char)*s & 0xC0) != 0x80)
                        w++;
        }
        return w;
}

void kdev_cli_table_print(const struct kdev_cli_table *t, FILE *f, const char *indent)
{
        size_t width[TABLE_MAX_COLS] = {0};
        for (size_t r = 0; r < t->nrows; r++) {
                for (size_t c = 0; c < t->ncols; c++) {
                        size_t w = text_width(t->cells[r * t->ncols + c]);
                        if (w > width[c])
                                width[c] = w;
                }
        }
        for (size_t r = 0; r < t->nrows; r++) {
                /* pad every cell but the last, then drop trailing blanks (empty last cells) */
                size_t line_len = 0;
                for (size_t c = 0; c < t->ncols; c++)
                        line_len += strlen(t->cells[r * t->ncols + c]) + width[c] + 3;
                char *line = malloc(line_len + 1);
                if (!line)
                        return;
                size_t n = 0;
                for (size_t c = 0; c < t->ncols; c++) {
                        const char *cell = t->cells[r * t->ncols + c];
                        size_t l = strlen(cell);
                        memcpy(line + n, cell, l);
                        n += l;
                        if (c + 1 < t->ncols) {
                                for (size_t k = text_width(cell); k < width[c] + 3; k++)
                                        line[n++] = ' ';
                        }
                }
                while (n > 0 && line[n - 1] == ' ')
                        n--;
                line[n] = '\0';
                fprintf(f, "%s%s\n", indent ? indent : "", line);
                free(line);
        }
}

void kdev_cli_table_free(struct kdev_cli_table *t)
{
        if (!t)
                return;
        for (size_t i = 0; i < t->nrows * t->ncols; i++)
                free(t->cells[i]);
        free(t->cells);
        free(t);
}
