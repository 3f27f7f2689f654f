/* API server configuration: in-cluster service account and kubeconfig files
 * (see kube.h). Follows client-go's rest.InClusterConfig and clientcmd. */
#include "kube/kube.h"

#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Reads the text file |path| of |kind| (at most |max| bytes) into a
 * NUL-terminated buffer (kdev_file_read). */
static int read_file(const char *path, const char *kind, size_t max, char **out,
                     size_t *out_len, struct kdev_err *err)
{
        return kdev_file_read(path, kind, max, KDEV_FILE_TEXT, out, out_len, err);
}

/* Whether |pem| holds a PEM block of a certificate (|key| false: BEGIN
 * CERTIFICATE ... END CERTIFICATE) or of a private key (BEGIN [RSA |EC ]PRIVATE
 * KEY ... END ...PRIVATE KEY). NULL on success, else what is missing. */
static const char *pem_problem(const char *pem, bool key)
{
        if (!key) {
                const char *b = strstr(pem, "-----BEGIN CERTIFICATE-----");
                if (!b || !strstr(b, "-----END CERTIFICATE-----"))
                        return "not a PEM certificate (no -----BEGIN CERTIFICATE----- block)";
                return NULL;
        }
        for (const char *b = strstr(pem, "-----BEGIN "); b; b = strstr(b + 1, "-----BEGIN ")) {
                const char *eol = strstr(b + 11, "-----");
                const char *k = strstr(b + 11, "PRIVATE KEY-----");
                if (eol && k && k + 11 == eol && strstr(eol, "-----END "))
                        return NULL;
        }
        return "not a PEM private key (no -----BEGIN ... PRIVATE KEY----- block)";
}

/* Trims ASCII whitespace at both ends of a token read from a file and checks
 * it holds no control characters (it goes into an HTTP header). */
static int clean_token(char *tok, const char *what, struct kdev_err *err)
{
        size_t n = strlen(tok);
        while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t' || tok[n - 1] == '\n' ||
                         tok[n - 1] == '\r'))
                tok[--n] = '\0';
        size_t s = 0;
        while (tok[s] == ' ' || tok[s] == '\t' || tok[s] == '\n' || tok[s] == '\r')
                s++;
        memmove(tok, tok + s, n - s + 1);
        if (tok[0] == '\0')
                return kdev_err_set(err, EINVAL, "%s: the token is empty", what);
        for (const unsigned char *p = (const unsigned char *)tok; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return kdev_err_set(err, EINVAL,
                                            "%s: the token contains a control character", what);
        return 0;
}

void kdev_kube_config_free(struct kdev_kube_config *cfg)
{
        if (!cfg)
                return;
        free(cfg->server);
        if (cfg->token) {
                explicit_bzero(cfg->token, strlen(cfg->token));
                free(cfg->token);
        }
        free(cfg->token_file);
        free(cfg->ca_pem);
        free(cfg->cert_pem);
        if (cfg->key_pem) {
                explicit_bzero(cfg->key_pem, cfg->key_len);
                free(cfg->key_pem);
        }
        free(cfg->namespace);
        free(cfg->context);
        memset(cfg, 0, sizeof(*cfg));
}

int kdev_kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len)
{
        *out = NULL;
        *out_len = 0;
        char *buf = malloc(len / 4 * 3 + 4);
        if (!buf)
                return -ENOMEM;
        uint32_t acc = 0;
        size_t nbits = 0, n = 0, chars = 0, pad = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)in[i];
                int v;
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
                        continue;
                if (c == '=') {
                        pad++;
                        continue;
                }
                if (pad)
                        goto bad; /* data after padding */
                if (c >= 'A' && c <= 'Z')
                        v = c - 'A';
                else if (c >= 'a' && c <= 'z')
                        v = c - 'a' + 26;
                else if (c >= '0' && c <= '9')
                        v = c - '0' + 52;
                else if (c == '+')
                        v = 62;
                else if (c == '/')
                        v = 63;
                else
                        goto bad;
                chars++;
                acc = (acc << 6) | (uint32_t)v;
                nbits += 6;
                if (nbits >= 8) {
                        nbits -= 8;
                        buf[n++] = (char)((acc >> nbits) & 0xff);
                }
        }
        if (chars % 4 == 1 || pad > 2 || (pad && (chars + pad) % 4 != 0))
                goto bad;
        buf[n] = '\0';
        *out = buf;
        *out_len = n;
        return 0;
bad:
        free(buf);
        return -EINVAL;
}

/* --- in-cluster ---------------------------------------------------------------- */

int kdev_kube_config_in_cluster(struct kdev_kube_config *cfg, const char *sa_dir,
                                struct kdev_err *err)
{
        memset(cfg, 0, sizeof(*cfg));
        if (!sa_dir)
                sa_dir = KDEV_KUBE_SA_DIR;
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !*host || !port || !*port)
                return kdev_err_set(err, ENOENT,
                                    "not running in a cluster: KUBERNETES_SERVICE_HOST and "
                                    "KUBERNETES_SERVICE_PORT must be defined");
        bool v6 = strchr(host, ':') != NULL;
        if (asprintf(&cfg->server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                     port) < 0) {
                cfg->server = NULL;
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        char path[4096];
        size_t len;
        snprintf(path, sizeof(path), "%s/token", sa_dir);
        int rc =
                read_file(path, "token file", KDEV_KUBE_TOKEN_FILE_MAX, &cfg->token, &len, err);
        if (rc < 0)
                return rc;
        rc = clean_token(cfg->token, path, err);
        if (rc < 0)
                return rc;
        cfg->token_file = strdup(path);
        snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
        rc = read_file(path, "CA file", KDEV_KUBE_PEM_FILE_MAX, &cfg->ca_pem, &cfg->ca_len,
                       err);
        if (rc < 0)
                return rc;
        const char *bad = pem_problem(cfg->ca_pem, false);
        if (bad)
                return kdev_err_set(err, EINVAL, "%s: %s", path, bad);
        snprintf(path, sizeof(path), "%s/namespace", sa_dir);
        if (access(path, F_OK) == 0) {
                rc = read_file(path, "namespace file", KDEV_KUBE_NAMESPACE_FILE_MAX,
                               &cfg->namespace, &len, err);
                if (rc < 0)
                        return rc;
                cfg->namespace[strcspn(cfg->namespace, " \t\r\n")] = '\0';
        }
        if (!cfg->token_file)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

/* --- kubeconfig ---------------------------------------------------------------- */

struct kc {
        yaml_document_t doc;
        const char *display;
        const char *base_dir;
        struct kdev_err *err;
};

static int kc_fail(struct kc *c, const yaml_node_t *n, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int kc_fail(struct kc *c, const yaml_node_t *n, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (n)
                return kdev_err_set(c->err, EINVAL, "%s:%zu:%zu: %s", c->display,
                                    n->start_mark.line + 1, n->start_mark.column + 1, msg);
        return kdev_err_set(c->err, EINVAL, "%s: %s", c->display, msg);
}

static yaml_node_t *kc_node(struct kc *c, yaml_node_item_t id)
{
        return yaml_document_get_node(&c->doc, id);
}

/* Scalar text of |n| or NULL when |n| is not a scalar (or is null / "~"). */
static const char *kc_str(const yaml_node_t *n)
{
        if (!n || n->type != YAML_SCALAR_NODE)
                return NULL;
        const char *s = (const char *)n->data.scalar.value;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || s[0] == '\0'))
                return NULL;
        return s;
}

/* Value of |key| in mapping |map| (NULL when absent or |map| not a mapping). */
static yaml_node_t *kc_get(struct kc *c, yaml_node_t *map, const char *key)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                const char *k = kc_str(kc_node(c, p->key));
                if (k && strcmp(k, key) == 0)
                        return kc_node(c, p->value);
        }
        return NULL;
}

/* The YAML kind of |n| with its article, for "expected a mapping, got a
 * sequence" (the YAML counterpart of common/json.h's JSON type names). */
static const char *yaml_kind(const yaml_node_t *n)
{
        switch (n->type) {
        case YAML_MAPPING_NODE: return "a mapping";
        case YAML_SEQUENCE_NODE: return "a sequence";
        case YAML_SCALAR_NODE: return "a scalar";
        default: return "nothing";
        }
}

/* Reads string field |key| of |map|: 0 and *out = NULL when absent or null,
 * -EINVAL when it is not a scalar. */
static int kc_field(struct kc *c, yaml_node_t *map, const char *key, const char *what,
                    const char **out)
{
        *out = NULL;
        yaml_node_t *n = kc_get(c, map, key);
        if (!n)
                return 0;
        if (n->type != YAML_SCALAR_NODE)
                return kc_fail(c, n, "%s.%s: expected a string, got %s", what, key,
                               yaml_kind(n));
        *out = kc_str(n);
        return 0;
}

/* Finds the entry named |name| in the list |key| ("clusters", "users",
 * "contexts") and returns its |inner| mapping ("cluster", "user", "context"). */
static int kc_find(struct kc *c, yaml_node_t *root, const char *key, const char *inner,
                   const char *name, yaml_node_t **out)
{
        *out = NULL;
        yaml_node_t *list = kc_get(c, root, key);
        if (list && list->type != YAML_SEQUENCE_NODE)
                return kc_fail(c, list, "%s: expected a sequence, got %s", key,
                               yaml_kind(list));
        if (list) {
                for (yaml_node_item_t *i = list->data.sequence.items.start;
                     i < list->data.sequence.items.top; i++) {
                        yaml_node_t *e = kc_node(c, *i);
                        if (e && e->type != YAML_MAPPING_NODE)
                                return kc_fail(c, e, "%s[%td]: expected a mapping, got %s", key,
                                               i - list->data.sequence.items.start,
                                               yaml_kind(e));
                        const char *n = kc_str(kc_get(c, e, "name"));
                        if (n && strcmp(n, name) == 0) {
                                yaml_node_t *m = kc_get(c, e, inner);
                                if (m && m->type != YAML_MAPPING_NODE)
                                        return kc_fail(c, m, "%s: expected a mapping, got %s", inner,
                                                       yaml_kind(m));
                                *out = m;
                                return 0;
                        }
                }
        }
        char what[64];
        snprintf(what, sizeof(what), "%s", inner);
        return kdev_err_set(c->err, ENOENT, "%s: %s \"%s\" not found in %s", c->display, what,
                            name, key);
}

/* Loads a file named in the kubeconfig (relative to base_dir). */
static int kc_load_file(struct kc *c, const char *name, char **out, size_t *len)
{
        char path[4096];
        if (name[0] == '/' || !c->base_dir)
                snprintf(path, sizeof(path), "%s", name);
        else
                snprintf(path, sizeof(path), "%s/%s", c->base_dir, name);
        int rc = read_file(path, "token file", KDEV_KUBE_TOKEN_FILE_MAX, out, len, c->err);
        if (rc < 0)
                return kdev_err_wrap(c->err, "%s", c->display);
        return 0;
}

/* Reads the -data (base64) form, or else the file form, of a PEM field
 * (|key|: a private key, else certificates) and checks it holds PEM. */
static int kc_pem(struct kc *c, yaml_node_t *map, const char *what, const char *data_key,
                  const char *file_key, bool key, char **out, size_t *len)
{
        const char *data, *file;
        int rc = kc_field(c, map, data_key, what, &data);
        if (rc < 0)
                return rc;
        rc = kc_field(c, map, file_key, what, &file);
        if (rc < 0)
                return rc;
        if (data) {
                rc = kdev_kube_base64_decode(data, strlen(data), out, len);
                if (rc == -ENOMEM)
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                if (rc < 0)
                        return kc_fail(c, kc_get(c, map, data_key), "%s.%s: invalid base64",
                                       what, data_key);
                const char *bad = pem_problem(*out, key);
                if (bad)
                        return kc_fail(c, kc_get(c, map, data_key), "%s.%s: %s", what, data_key,
                                       bad);
                return 0;
        }
        if (!file)
                return 0;
        yaml_node_t *fn = kc_get(c, map, file_key);
        char path[4096];
        if (file[0] == '/' || !c->base_dir)
                snprintf(path, sizeof(path), "%s", file);
        else
                snprintf(path, sizeof(path), "%s/%s", c->base_dir, file);
        struct kdev_err ferr = {0};
        const char *kind = strcmp(file_key, "client-key") == 0           ? "client key file"
                           : strcmp(file_key, "client-certificate") == 0 ? "client certificate file"
                                                                         : "CA file";
        rc = read_file(path, kind, KDEV_KUBE_PEM_FILE_MAX, out, len, &ferr);
        if (rc == -ENOMEM)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_err_set(c->err, -rc, "%s:%zu:%zu: %s.%s: %s", c->display,
                                    fn->start_mark.line + 1, fn->start_mark.column + 1, what,
                                    file_key, ferr.msg);
        const char *bad = pem_problem(*out, key);
        if (bad)
                return kc_fail(c, fn, "%s.%s: %s: %s", what, file_key, path, bad);
        return 0;
}

static int kc_dup(struct kc *c, char **dst, const char *s)
{
        if (!s)
                return 0;
        *dst = strdup(s);
        if (!*dst)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        return 0;
}

static int kc_resolve(struct kc *c, struct kdev_kube_config *cfg, const char *context)
{
        yaml_node_t *root = yaml_document_get_root_node(&c->doc);
        if (!root)
                return kc_fail(c, NULL, "empty document");
        if (root->type != YAML_MAPPING_NODE)
                return kc_fail(c, root, "top level: expected a mapping, got %s", yaml_kind(root));
        const char *ctx_name = context;
        int rc;
        if (!ctx_name) {
                rc = kc_field(c, root, "current-context", "", &ctx_name);
                if (rc < 0)
                        return rc;
                if (!ctx_name)
                        return kdev_err_set(c->err, ENOENT,
                                            "%s: no current-context and no context given",
                                            c->display);
        }
        yaml_node_t *ctx, *cluster, *user = NULL;
        rc = kc_find(c, root, "contexts", "context", ctx_name, &ctx);
        if (rc < 0)
                return rc;
        const char *cluster_name, *user_name, *ns;
        if ((rc = kc_field(c, ctx, "cluster", "context", &cluster_name)) < 0 ||
            (rc = kc_field(c, ctx, "user", "context", &user_name)) < 0 ||
            (rc = kc_field(c, ctx, "namespace", "context", &ns)) < 0)
                return rc;
        if (!cluster_name)
                return kdev_err_set(c->err, ENOENT, "%s: context \"%s\" names no cluster",
                                    c->display, ctx_name);
        rc = kc_find(c, root, "clusters", "cluster", cluster_name, &cluster);
        if (rc < 0)
                return rc;
        if (user_name) {
                rc = kc_find(c, root, "users", "user", user_name, &user);
                if (rc < 0)
                        return rc;
        }
        if ((rc = kc_dup(c, &cfg->context, ctx_name)) < 0 ||
            (rc = kc_dup(c, &cfg->namespace, ns)) < 0)
                return rc;

        /* cluster */
        const char *server, *insecure;
        if ((rc = kc_field(c, cluster, "server", "cluster", &server)) < 0 ||
            (rc = kc_field(c, cluster, "insecure-skip-tls-verify", "cluster", &insecure)) < 0)
                return rc;
        if (!server)
                return kdev_err_set(c->err, EINVAL, "%s: cluster \"%s\" has no server",
                                    c->display, cluster_name);
        if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
                return kc_fail(c, kc_get(c, cluster, "server"),
                               "cluster.server: \"%s\" is not an http:// or https:// URL",
                               server);
        if ((rc = kc_dup(c, &cfg->server, server)) < 0)
                return rc;
        size_t sl = strlen(cfg->server);
        while (sl > 0 && cfg->server[sl - 1] == '/')
                cfg->server[--sl] = '\0';
        cfg->insecure = insecure && strcmp(insecure, "true") == 0;
        rc = kc_pem(c, cluster, "cluster", "certificate-authority-data", "certificate-authority",
                    false, &cfg->ca_pem, &cfg->ca_len);
        if (rc < 0)
                return rc;
        if (!user)
                return 0;

        /* user */
        static const char *const unsupported[] = {"exec", "auth-provider", "username",
                                                  "password"};
        for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
                if (kc_get(c, user, unsupported[i]))
                        return kdev_err_set(c->err, ENOTSUP,
                                            "%s: user \"%s\": `%s` is not supported (use a "
                                            "token or a client certificate)",
                                            c->display, user_name, unsupported[i]);
        const char *token, *token_file;
        if ((rc = kc_field(c, user, "token", "user", &token)) < 0 ||
            (rc = kc_field(c, user, "tokenFile", "user", &token_file)) < 0)
                return rc;
        if (token) {
                if ((rc = kc_dup(c, &cfg->token, token)) < 0)
                        return rc;
                rc = clean_token(cfg->token, c->display, c->err);
                if (rc < 0)
                        return rc;
        } else if (token_file) {
                size_t len;
                rc = kc_load_file(c, token_file, &cfg->token, &len);
                if (rc < 0)
                        return rc;
                rc = clean_token(cfg->token, token_file, c->err);
                if (rc < 0)
                        return rc;
                char path[4096];
                if (token_file[0] == '/' || !c->base_dir)
                        snprintf(path, sizeof(path), "%s", token_file);
                else
                        snprintf(path, sizeof(path), "%s/%s", c->base_dir, token_file);
                if ((rc = kc_dup(c, &cfg->token_file, path)) < 0)
                        return rc;
        }
        rc = kc_pem(c, user, "user", "client-certificate-data", "client-certificate",
                    false, &cfg->cert_pem, &cfg->cert_len);
        if (rc < 0)
                return rc;
        rc = kc_pem(c, user, "user", "client-key-data", "client-key", true, &cfg->key_pem,
                    &cfg->key_len);
        if (rc < 0)
                return rc;
        if (!cfg->cert_pem != !cfg->key_pem)
                return kdev_err_set(c->err, EINVAL,
                                    "%s: user \"%s\": a client certificate needs its key and a "
                                    "key its certificate",
                                    c->display, user_name);
        return 0;
}

int kdev_kube_config_parse(struct kdev_kube_config *cfg, const char *text, size_t len,
                           const char *display, const char *base_dir, const char *context,
                           struct kdev_err *err)
{
        memset(cfg, 0, sizeof(*cfg));
        struct kc c = {.display = display ? display : "kubeconfig", .base_dir = base_dir,
                       .err = err};
        yaml_parser_t parser;
        if (!yaml_parser_initialize(&parser))
                return kdev_err_set(err, ENOMEM, "out of memory");
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &c.doc)) {
                int rc = kdev_err_set(err, EINVAL, "%s:%zu:%zu: %s", c.display,
                                      parser.problem_mark.line + 1,
                                      parser.problem_mark.column + 1,
                                      parser.problem ? parser.problem : "YAML error");
                yaml_parser_delete(&parser);
                return rc;
        }
        yaml_parser_delete(&parser);
        int rc = kc_resolve(&c, cfg, context);
        yaml_document_delete(&c.doc);
        return rc;
}

int kdev_kube_config_kubeconfig(struct kdev_kube_config *cfg, const char *path,
                                const char *context, struct kdev_err *err)
{
        memset(cfg, 0, sizeof(*cfg));
        char *text;
        size_t len;
        int rc = read_file(path, "kubeconfig", KDEV_KUBE_KUBECONFIG_MAX, &text, &len, err);
        if (rc < 0)
                return rc;
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        const char *base = NULL;
        if (slash == dir)
                base = "/";
        else if (slash) {
                *slash = '\0';
                base = dir;
        }
        rc = kdev_kube_config_parse(cfg, text, len, path, base, context, err);
        free(text);
        return rc;
}

int kdev_kube_config_load(struct kdev_kube_config *cfg, const char *kubeconfig,
                          struct kdev_err *err)
{
        if (kubeconfig)
                return kdev_kube_config_kubeconfig(cfg, kubeconfig, NULL, err);
        return kdev_kube_config_in_cluster(cfg, NULL, err);
}
