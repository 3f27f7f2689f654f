/* kube module without a server: base64, kubeconfig variants, in-cluster
 * configuration, request paths, shapes, backoff and error mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/kube.h"
#include "kube/kube_internal.h"

#define CA_PEM "-----BEGIN CERTIFICATE-----\nQ0EtUEVN\n-----END CERTIFICATE-----\n"
#define CERT_PEM "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
#define KEY_PEM "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n"

static char tmpdir[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(p);
}

static int setup(void **state)
{
        (void)state;
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/kdev-kubecfg-XXXXXX");
        return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        return nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_file(const char *name, const char *text)
{
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static int parse(struct kdev_kube_config *cfg, const char *text, const char *ctx,
                 struct kdev_err *err)
{
        return kdev_kube_config_parse(cfg, text, strlen(text), "kc.yaml", tmpdir, ctx, err);
}

/* --- base64 ---------------------------------------------------------------------- */

static void test_base64(void **state)
{
        (void)state;
        char *out;
        size_t n;
        assert_int_equal(kdev_kube_base64_decode("aGVsbG8=", 8, &out, &n), 0);
        assert_int_equal(n, 5);
        assert_string_equal(out, "hello");
        free(out);
        assert_int_equal(kdev_kube_base64_decode("aGVs\nbG8", 8, &out, &n), 0);
        assert_string_equal(out, "hello");
        free(out);
        assert_int_equal(kdev_kube_base64_decode("+/+/", 4, &out, &n), 0);
        assert_int_equal(n, 3);
        assert_memory_equal(out, "\xfb\xff\xbf", 3);
        free(out);
        assert_int_equal(kdev_kube_base64_decode("", 0, &out, &n), 0);
        assert_int_equal(n, 0);
        free(out);
        assert_int_equal(kdev_kube_base64_decode("aGVsbG8==", 9, &out, &n), -EINVAL);
        assert_null(out);
        assert_int_equal(kdev_kube_base64_decode("aG*s", 4, &out, &n), -EINVAL);
        assert_int_equal(kdev_kube_base64_decode("aGVsb", 5, &out, &n), -EINVAL);
        assert_int_equal(kdev_kube_base64_decode("aG=s", 4, &out, &n), -EINVAL);
}

/* --- kubeconfig ------------------------------------------------------------------ */

static const char KC_TOKEN[] =
        "apiVersion: v1\n"
        "kind: Config\n"
        "current-context: dev\n"
        "preferences: {}\n"
        "clusters:\n"
        "- name: c1\n"
        "  cluster:\n"
        "    server: https://10.1.2.3:6443/\n"
        "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClEwRXRVRVZOCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K\n" /* CA_PEM */
        "    certificate-authority: does-not-exist.crt\n"
        "- name: c2\n"
        "  cluster:\n"
        "    server: http://127.0.0.1:8080\n"
        "    insecure-skip-tls-verify: true\n"
        "users:\n"
        "- name: u1\n"
        "  user:\n"
        "    token: \"abc.def\"\n"
        "    tokenFile: ignored-because-token-wins\n"
        "- name: u2\n"
        "  user:\n"
        "    client-certificate: certs/client.crt\n"
        "    client-key: certs/client.key\n"
        "contexts:\n"
        "- name: dev\n"
        "  context:\n"
        "    cluster: c1\n"
        "    user: u1\n"
        "    namespace: gpus\n"
        "- name: other\n"
        "  context: {cluster: c2, user: u2}\n";

static void test_kubeconfig_token(void **state)
{
        (void)state;
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};
        assert_int_equal(parse(&cfg, KC_TOKEN, NULL, &err), 0);
        assert_string_equal(cfg.server, "https://10.1.2.3:6443");
        assert_string_equal(cfg.token, "abc.def");
        assert_null(cfg.token_file);
        assert_string_equal(cfg.ca_pem, CA_PEM);
        assert_int_equal(cfg.ca_len, strlen(CA_PEM));
        assert_null(cfg.cert_pem);
        assert_null(cfg.key_pem);
        assert_false(cfg.insecure);
        assert_string_equal(cfg.namespace, "gpus");
        assert_string_equal(cfg.context, "dev");
        kdev_kube_config_free(&cfg);
        assert_null(cfg.server);
}

static void test_kubeconfig_client_cert_files(void **state)
{
        (void)state;
        char dir[300];
        snprintf(dir, sizeof(dir), "%s/certs", tmpdir);
        mkdir(dir, 0700);
        write_file("certs/client.crt", CERT_PEM);
        write_file("certs/client.key", KEY_PEM);
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};
        assert_int_equal(parse(&cfg, KC_TOKEN, "other", &err), 0);
        assert_string_equal(cfg.server, "http://127.0.0.1:8080");
        assert_true(cfg.insecure);
        assert_null(cfg.token);
        assert_null(cfg.ca_pem);
        assert_string_equal(cfg.cert_pem, CERT_PEM);
        assert_int_equal(cfg.cert_len, strlen(CERT_PEM));
        assert_string_equal(cfg.key_pem, KEY_PEM);
        assert_null(cfg.namespace);
        assert_string_equal(cfg.context, "other");
        kdev_kube_config_free(&cfg);
}

static void test_kubeconfig_file_on_disk(void **state)
{
        (void)state;
        write_file("tok", "  file-token\n\n");
        write_file("ca.pem", CA_PEM);
        write_file("kubeconfig",
                   "current-context: x\n"
                   "clusters: [{name: k, cluster: {server: 'https://[fd00::1]:443', "
                   "certificate-authority: ca.pem}}]\n"
                   "users: [{name: u, user: {tokenFile: tok, client-certificate-data: "
                   "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClEwVlNWQT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K, client-key-data: "
                   "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tClMwVloKLS0tLS1FTkQgUFJJVkFURSBLRVktLS0tLQo=}}]\n"
                   "contexts: [{name: x, context: {cluster: k, user: u}}]\n");
        char path[300], tokpath[300];
        snprintf(path, sizeof(path), "%s/kubeconfig", tmpdir);
        snprintf(tokpath, sizeof(tokpath), "%s/tok", tmpdir);
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};
        assert_int_equal(kdev_kube_config_load(&cfg, path, &err), 0);
        assert_string_equal(cfg.server, "https://[fd00::1]:443");
        assert_string_equal(cfg.token, "file-token");
        assert_string_equal(cfg.token_file, tokpath);
        assert_string_equal(cfg.ca_pem, CA_PEM);
        assert_string_equal(cfg.cert_pem, CERT_PEM);
        assert_string_equal(cfg.key_pem, KEY_PEM);
        kdev_kube_config_free(&cfg);
}

struct bad_case {
        const char *text;
        const char *ctx;
        int rc;
        const char *msg;
};

static void test_kubeconfig_errors(void **state)
{
        (void)state;
        static const char base[] =
                "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
                "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
        char buf[8][1024];
        snprintf(buf[0], sizeof(buf[0]), "%s", base);
        snprintf(buf[1], sizeof(buf[1]), "current-context: x\n%s", base);
        snprintf(buf[2], sizeof(buf[2]),
                 "current-context: x\n%susers: [{name: u, user: {exec: {command: aws}}}]\n",
                 base);
        snprintf(buf[3], sizeof(buf[3]),
                 "current-context: x\n%susers: [{name: u, user: {client-certificate-data: "
                 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClEwVlNWQT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K}}]\n",
                 base);
        snprintf(buf[4], sizeof(buf[4]),
                 "current-context: x\n%susers: [{name: u, user: {client-key-data: 'a*b'}}]\n",
                 base);
        snprintf(buf[5], sizeof(buf[5]),
                 "current-context: x\n%susers: [{name: u, user: {token: [1]}}]\n", base);
        const struct bad_case cases[] = {
                {buf[0], NULL, -ENOENT, "kc.yaml: no current-context and no context given"},
                {buf[0], "nope", -ENOENT, "kc.yaml: context \"nope\" not found in contexts"},
                {buf[1], NULL, -ENOENT, "kc.yaml: user \"u\" not found in users"},
                {buf[2], NULL, -ENOTSUP,
                 "kc.yaml: user \"u\": `exec` is not supported (use a token or a client "
                 "certificate)"},
                {buf[3], NULL, -EINVAL,
                 "kc.yaml: user \"u\": a client certificate needs its key and a key its "
                 "certificate"},
                {buf[4], NULL, -EINVAL, "kc.yaml:4:43: user.client-key-data: invalid base64"},
                {buf[5], NULL, -EINVAL, "kc.yaml:4:33: user.token: expected a string, got a sequence"},
                {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n", NULL,
                 -ENOENT, "kc.yaml: cluster \"c\" not found in clusters"},
                {"current-context: x\nclusters: [{name: c, cluster: {server: 'ftp://h'}}]\n"
                 "contexts: [{name: x, context: {cluster: c}}]\n",
                 NULL, -EINVAL,
                 "kc.yaml:2:40: cluster.server: \"ftp://h\" is not an http:// or https:// URL"},
                {"current-context: x\nclusters: [{name: c, cluster: {}}]\n"
                 "contexts: [{name: x, context: {cluster: c}}]\n",
                 NULL, -EINVAL, "kc.yaml: cluster \"c\" has no server"},
                {"a: [1,\n", NULL, -EINVAL,
                 "kc.yaml:2:1: did not find expected node content"},
                {"- 1\n", NULL, -EINVAL, "kc.yaml:1:1: top level: expected a mapping, got a sequence"},
                {"current-context: x\ncontexts: {name: x}\n", NULL, -EINVAL,
                 "kc.yaml:2:11: contexts: expected a sequence, got a mapping"},
                {"current-context: x\ncontexts: [[x]]\n", NULL, -EINVAL,
                 "kc.yaml:2:12: contexts[0]: expected a mapping, got a sequence"},
                {"current-context: x\ncontexts: [{name: x, context: [c]}]\n", NULL, -EINVAL,
                 "kc.yaml:2:31: context: expected a mapping, got a sequence"},
                {"", NULL, -EINVAL, "kc.yaml: empty document"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_kube_config cfg;
                struct kdev_err err = {0};
                int rc = parse(&cfg, cases[i].text, cases[i].ctx, &err);
                if (rc != cases[i].rc || strcmp(err.msg, cases[i].msg) != 0)
                        print_error("case %zu: rc %d msg \"%s\"\n", i, rc, err.msg);
                assert_int_equal(rc, cases[i].rc);
                assert_string_equal(err.msg, cases[i].msg);
                kdev_kube_config_free(&cfg);
        }
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};
        char path[300];
        snprintf(path, sizeof(path), "%s/absent", tmpdir);
        assert_int_equal(kdev_kube_config_kubeconfig(&cfg, path, NULL, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "absent: cannot read: No such file or directory"));
        kdev_kube_config_free(&cfg);
}

/* --- in-cluster ------------------------------------------------------------------ */

static void test_in_cluster(void **state)
{
        (void)state;
        char sa[300];
        snprintf(sa, sizeof(sa), "%s/sa", tmpdir);
        mkdir(sa, 0700);
        write_file("sa/token", "eyJhbGciOi.token \n");
        write_file("sa/ca.crt", CA_PEM);
        write_file("sa/namespace", "kube-system\n");
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};

        unsetenv("KUBERNETES_SERVICE_HOST");
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), -ENOENT);
        assert_string_equal(err.msg, "not running in a cluster: KUBERNETES_SERVICE_HOST and "
                                     "KUBERNETES_SERVICE_PORT must be defined");
        kdev_kube_config_free(&cfg);

        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), 0);
        assert_string_equal(cfg.server, "https://10.96.0.1:443");
        assert_string_equal(cfg.token, "eyJhbGciOi.token");
        char tf[320];
        snprintf(tf, sizeof(tf), "%s/token", sa);
        assert_string_equal(cfg.token_file, tf);
        assert_string_equal(cfg.ca_pem, CA_PEM);
        assert_string_equal(cfg.namespace, "kube-system");
        assert_null(cfg.context);
        kdev_kube_config_free(&cfg);

        setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), 0);
        assert_string_equal(cfg.server, "https://[fd00::1]:6443");
        kdev_kube_config_free(&cfg);

        write_file("sa/token", " \n");
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), -EINVAL);
        assert_string_equal(strstr(err.msg, "token: the token is empty"),
                            "token: the token is empty");
        kdev_kube_config_free(&cfg);

        snprintf(tf, sizeof(tf), "%s/token", sa);
        unlink(tf);
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "/sa/token: cannot read: No such file or directory"));
        kdev_kube_config_free(&cfg);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
}

/* --- client without requests ------------------------------------------------------ */

static struct kdev_kube *client(const char *version, unsigned backoff, unsigned max)
{
        struct kdev_kube_config cfg = {.server = (char *)"http://127.0.0.1:1"};
        struct kdev_kube_opts o = {.version = version, .backoff_ms = backoff,
                                   .backoff_max_ms = max};
        struct kdev_err err = {0};
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, &err);
        assert_non_null(k);
        return k;
}

static void test_new_errors(void **state)
{
        (void)state;
        struct kdev_kube_config cfg = {.server = (char *)"http://x"};
        struct kdev_kube_opts o = {.version = "v1alpha3"};
        struct kdev_err err = {0};
        assert_null(kdev_kube_new(&cfg, &o, &err));
        assert_int_equal(err.code, EINVAL);
        assert_string_equal(err.msg, "API server client: resource.k8s.io version \"v1alpha3\" "
                                     "is not supported (v1 or v1beta1)");
        struct kdev_kube_config none = {0};
        assert_null(kdev_kube_new(&none, NULL, &err));
        assert_string_equal(err.msg, "API server client: no server configured");
}

static void test_paths(void **state)
{
        (void)state;
        struct kdev_kube *k = client(NULL, 0, 0);
        struct kdev_err err = {0};
        char p[512];
        assert_string_equal(kdev_kube_version(k), "v1");
        assert_string_equal(kdev_kube_api_version(k), "resource.k8s.io/v1");
        assert_int_equal(kdev_kube_path(k, p, sizeof(p), NULL, "nodes", "node-1", NULL, &err),
                         strlen("/api/v1/nodes/node-1"));
        assert_string_equal(p, "/api/v1/nodes/node-1");
        kdev_kube_path(k, p, sizeof(p), NULL, "nodes", NULL, NULL, &err);
        assert_string_equal(p, "/api/v1/nodes");
        kdev_kube_path(k, p, sizeof(p), NULL, "resourceslices", NULL, NULL, &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices");
        kdev_kube_path(k, p, sizeof(p), NULL, "resourceslices", "s-1", NULL, &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices/s-1");
        kdev_kube_path(k, p, sizeof(p), "default", "resourceclaims", "gpu-claim", "status", &err);
        assert_string_equal(p,
                            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"
                            "gpu-claim/status");
        assert_int_equal(kdev_kube_path(k, p, sizeof(p), NULL, "nodes", "../x", NULL, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "name \"../x\" is not a valid name (lower-case letters, "
                                     "digits, '-' and '.', at most 253)");
        assert_int_equal(kdev_kube_path(k, p, sizeof(p), "a?b", "resourceclaims", "c", NULL,
                                        &err),
                         -EINVAL);
        assert_int_equal(kdev_kube_path(k, p, 10, NULL, "nodes", "node-1", NULL, &err),
                         -ENAMETOOLONG);

        kdev_kube_slices_path(k, p, sizeof(p), "node-1", "gpu.nvidia.com", &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                               "spec.nodeName%3Dnode-1%2Cspec.driver%3Dgpu.nvidia.com");
        kdev_kube_slices_path(k, p, sizeof(p), "node-1", NULL, &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                               "spec.nodeName%3Dnode-1");
        kdev_kube_slices_path(k, p, sizeof(p), NULL, "gpu.nvidia.com", &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                               "spec.driver%3Dgpu.nvidia.com");
        kdev_kube_slices_path(k, p, sizeof(p), NULL, NULL, &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices");
        assert_int_equal(kdev_kube_slices_path(k, p, sizeof(p), "Node_1", NULL, &err), -EINVAL);
        kdev_kube_free(k);

        k = client("v1beta1", 0, 0);
        kdev_kube_path(k, p, sizeof(p), NULL, "resourceslices", NULL, NULL, &err);
        assert_string_equal(p, "/apis/resource.k8s.io/v1beta1/resourceslices");
        assert_string_equal(kdev_kube_api_version(k), "resource.k8s.io/v1beta1");
        kdev_kube_free(k);
}

static void test_backoff(void **state)
{
        (void)state;
        struct kdev_kube *k = client(NULL, 100, 1000);
        assert_int_equal(kdev_kube_backoff_ms(k, 1, 0), 100);
        assert_int_equal(kdev_kube_backoff_ms(k, 2, 0), 200);
        assert_int_equal(kdev_kube_backoff_ms(k, 3, 0), 400);
        assert_int_equal(kdev_kube_backoff_ms(k, 4, 0), 800);
        assert_int_equal(kdev_kube_backoff_ms(k, 5, 0), 1000);
        assert_int_equal(kdev_kube_backoff_ms(k, 60, 0), 1000);
        assert_int_equal(kdev_kube_backoff_ms(k, 1, 2), 1000); /* Retry-After, capped */
        kdev_kube_free(k);
        k = client(NULL, 0, 0); /* defaults 200 / 5000 */
        assert_int_equal(kdev_kube_backoff_ms(k, 1, 0), 200);
        assert_int_equal(kdev_kube_backoff_ms(k, 1, 2), 2000);
        assert_int_equal(kdev_kube_backoff_ms(k, 6, 0), 5000);
        kdev_kube_free(k);
}

static void test_error_mapping(void **state)
{
        (void)state;
        assert_int_equal(kdev_kube_status_errno(400, NULL), EINVAL);
        assert_int_equal(kdev_kube_status_errno(422, "Invalid"), EINVAL);
        assert_int_equal(kdev_kube_status_errno(401, NULL), EACCES);
        assert_int_equal(kdev_kube_status_errno(403, NULL), EPERM);
        assert_int_equal(kdev_kube_status_errno(404, NULL), ENOENT);
        assert_int_equal(kdev_kube_status_errno(405, NULL), EOPNOTSUPP);
        assert_int_equal(kdev_kube_status_errno(409, "AlreadyExists"), EEXIST);
        assert_int_equal(kdev_kube_status_errno(409, "Conflict"), ESTALE);
        assert_int_equal(kdev_kube_status_errno(409, NULL), ESTALE);
        assert_int_equal(kdev_kube_status_errno(410, NULL), ESTALE);
        assert_int_equal(kdev_kube_status_errno(429, NULL), EAGAIN);
        assert_int_equal(kdev_kube_status_errno(503, NULL), EAGAIN);
        assert_int_equal(kdev_kube_status_errno(418, NULL), EPROTO);
        assert_int_equal(kdev_kube_curl_errno(CURLE_COULDNT_CONNECT), ECONNREFUSED);
        assert_int_equal(kdev_kube_curl_errno(CURLE_OPERATION_TIMEDOUT), ETIMEDOUT);
        assert_int_equal(kdev_kube_curl_errno(CURLE_GOT_NOTHING), ECONNRESET);
        assert_int_equal(kdev_kube_curl_errno(CURLE_PEER_FAILED_VERIFICATION), EKEYREJECTED);
        assert_int_equal(kdev_kube_curl_errno(CURLE_URL_MALFORMAT), EIO);
        assert_string_equal(kdev_kube_status_text(409), "Conflict");
        assert_string_equal(kdev_kube_status_text(299), "");
}

static void test_shapes(void **state)
{
        (void)state;
        struct kdev_kube *b = client("v1beta1", 0, 0), *v1 = client(NULL, 0, 0);
        const char *slice_v1 =
                "{\"metadata\":{\"name\":\"s\"},\"spec\":{\"driver\":\"d\",\"devices\":["
                "{\"name\":\"gpu-0\",\"attributes\":{\"index\":{\"int\":0}},"
                "\"capacity\":{\"memory\":{\"value\":\"80Gi\"}}}]}}";
        json_t *s = json_loads(slice_v1, 0, NULL);
        assert_int_equal(kdev_kube_slice_to_wire(b, s), 0);
        char *txt = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(txt,
                            "{\"apiVersion\":\"resource.k8s.io/v1beta1\","
                            "\"kind\":\"ResourceSlice\","
                            "\"metadata\":{\"name\":\"s\"},\"spec\":{\"devices\":[{\"basic\":{"
                            "\"attributes\":{\"index\":{\"int\":0}},\"capacity\":{\"memory\":{"
                            "\"value\":\"80Gi\"}}},\"name\":\"gpu-0\"}],\"driver\":\"d\"}}");
        free(txt);
        assert_int_equal(kdev_kube_slice_from_wire(b, s), 0);
        json_t *want = json_loads(slice_v1, 0, NULL);
        json_object_set_new(want, "apiVersion", json_string("resource.k8s.io/v1"));
        json_object_set_new(want, "kind", json_string("ResourceSlice"));
        assert_true(json_equal(s, want));
        /* v1: only apiVersion and kind */
        assert_int_equal(kdev_kube_slice_to_wire(v1, s), 0);
        assert_true(json_equal(s, want));
        json_decref(s);
        json_decref(want);

        json_t *c = json_loads("{\"spec\":{\"devices\":{\"requests\":["
                               "{\"name\":\"gpu\",\"deviceClassName\":\"gpu.nvidia.com\","
                               "\"count\":2},{\"name\":\"x\",\"firstAvailable\":[]}]}}}",
                               0, NULL);
        assert_int_equal(kdev_kube_claim_from_wire(b, c), 0);
        txt = json_dumps(json_object_get(c, "spec"), JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(txt, "{\"devices\":{\"requests\":[{\"exactly\":{\"count\":2,"
                                 "\"deviceClassName\":\"gpu.nvidia.com\"},\"name\":\"gpu\"},"
                                 "{\"firstAvailable\":[],\"name\":\"x\"}]}}");
        free(txt);
        assert_string_equal(json_string_value(json_object_get(c, "apiVersion")),
                            "resource.k8s.io/v1");
        json_decref(c);

        json_t *node = json_loads("{\"metadata\":{\"name\":\"n1\",\"uid\":\"u-1\"}}", 0, NULL);
        json_t *ref = kdev_kube_node_owner_ref(node);
        txt = json_dumps(ref, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(txt, "{\"apiVersion\":\"v1\",\"controller\":true,\"kind\":\"Node\","
                                 "\"name\":\"n1\",\"uid\":\"u-1\"}");
        free(txt);
        json_decref(ref);
        json_object_del(json_object_get(node, "metadata"), "uid");
        assert_null(kdev_kube_node_owner_ref(node));
        json_decref(node);
        kdev_kube_free(b);
        kdev_kube_free(v1);
}

static void test_request_bad_path(void **state)
{
        (void)state;
        struct kdev_kube *k = client(NULL, 0, 0);
        struct kdev_err err = {0};
        json_t *out = (json_t *)1;
        assert_int_equal(kdev_kube_request(k, "GET", "api/v1/nodes", NULL, &out, &err),
                         -EINVAL);
        assert_null(out);
        assert_string_equal(err.msg, "GET api/v1/nodes: the path must start with '/'");
        kdev_kube_free(k);
}

/* The kubeconfig and the files it names are read with the bounded reader: a
 * FIFO, a device (a link to /dev/zero), a directory or an oversized file is
 * refused at once with the kind and, for named files, the key. */
static void test_odd_files(void **state)
{
        (void)state;
        char fifo[300], zero[300], dir[300], big[300], kc[300], want[1200];
        snprintf(fifo, sizeof(fifo), "%s/odd.fifo", tmpdir);
        snprintf(zero, sizeof(zero), "%s/zero", tmpdir);
        snprintf(dir, sizeof(dir), "%s/odd.dir", tmpdir);
        snprintf(big, sizeof(big), "%s/big", tmpdir);
        snprintf(kc, sizeof(kc), "%s/kc-odd.yaml", tmpdir);
        assert_int_equal(mkfifo(fifo, 0600), 0);
        assert_int_equal(symlink("/dev/zero", zero), 0);
        assert_int_equal(mkdir(dir, 0700), 0);
        FILE *f = fopen(big, "w");
        assert_non_null(f);
        assert_int_equal(ftruncate(fileno(f), KDEV_KUBE_PEM_FILE_MAX + 1), 0);
        fclose(f);
        const struct {
                const char *path;
                int rc;
                const char *what;
        } cases[] = {
                {fifo, -EINVAL, "is not a regular file (a FIFO)"},
                {zero, -EINVAL, "is not a regular file (a character device)"},
                {dir, -EISDIR, "is not a regular file (a directory)"},
                {big, -EFBIG, NULL},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_kube_config cfg;
                struct kdev_err err = {0};
                /* the kubeconfig itself */
                assert_int_equal(kdev_kube_config_kubeconfig(&cfg, cases[i].path, NULL, &err),
                                 cases[i].rc);
                if (cases[i].what)
                        snprintf(want, sizeof(want), "%s: %s", cases[i].path, cases[i].what);
                else
                        snprintf(want, sizeof(want), "%s: the kubeconfig is larger than 1048576 "
                                 "bytes", cases[i].path);
                assert_string_equal(err.msg, want);
                kdev_kube_config_free(&cfg);
                /* as its certificate-authority */
                char text[1024];
                snprintf(text, sizeof(text),
                         "current-context: x\n"
                         "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                         "users: [{name: u, user: {token: t}}]\n"
                         "clusters:\n"
                         "- {name: c, cluster: {certificate-authority: %s, server: 'https://h'}}\n",
                         cases[i].path);
                write_file("kc-odd.yaml", text);
                assert_int_equal(kdev_kube_config_kubeconfig(&cfg, kc, NULL, &err), cases[i].rc);
                if (cases[i].what)
                        snprintf(want, sizeof(want),
                                 "%s:5:46: cluster.certificate-authority: %s: %s", kc,
                                 cases[i].path, cases[i].what);
                else
                        snprintf(want, sizeof(want),
                                 "%s:5:46: cluster.certificate-authority: %s: the CA file is "
                                 "larger than 1048576 bytes", kc, cases[i].path);
                assert_string_equal(err.msg, want);
                kdev_kube_config_free(&cfg);
        }
}

/* PEM contents are checked at load: certificate-authority(-data) and
 * client-certificate(-data) must hold a CERTIFICATE block, client-key(-data)
 * a PRIVATE KEY block; a missing file names the key, with line:column. */
static void test_kubeconfig_pem_checks(void **state)
{
        (void)state;
        struct kdev_kube_config cfg;
        struct kdev_err err = {0};
        write_file("notpem.crt", "hello\n");
        write_file("good.crt", CA_PEM);
        write_file("good.key", KEY_PEM);
        char nf[600], bad[600];
        snprintf(nf, sizeof(nf),
                 "kc.yaml:5:46: cluster.certificate-authority: /nonexistent/ca.crt: cannot "
                 "read: No such file or directory");
        snprintf(bad, sizeof(bad),
                 "kc.yaml:5:46: cluster.certificate-authority: %s/notpem.crt: not a PEM "
                 "certificate (no -----BEGIN CERTIFICATE----- block)", tmpdir);
        const char *head = "current-context: x\n"
                           "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                           "users: [{name: u, user: {token: t}}]\n"
                           "clusters:\n"
                           "- {name: c, cluster: {";
        const struct {
                const char *tail;
                int rc;
                const char *msg;
        } cases[] = {
                {"certificate-authority: /nonexistent/ca.crt, server: 'https://h'}}\n", -ENOENT,
                 nf},
                {"certificate-authority: notpem.crt, server: 'https://h'}}\n", -EINVAL, bad},
                {"certificate-authority-data: anVzdCBzb21lIGJ5dGVz, server: 'https://h'}}\n", -EINVAL,
                 "kc.yaml:5:51: cluster.certificate-authority-data: not a PEM certificate (no "
                 "-----BEGIN CERTIFICATE----- block)"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char text[1024];
                snprintf(text, sizeof(text), "%s%s", head, cases[i].tail);
                assert_int_equal(parse(&cfg, text, NULL, &err), cases[i].rc);
                assert_string_equal(err.msg, cases[i].msg);
                kdev_kube_config_free(&cfg);
        }
        /* client certificate and key */
        const char *users[][2] = {
                {"{client-certificate: notpem.crt, client-key: good.key}", bad},
                {"{client-certificate: good.crt, client-key: good.crt}", bad},
                {"{client-certificate-data: anVzdCBzb21lIGJ5dGVz, client-key: good.key}",
                 "kc.yaml:3:51: user.client-certificate-data: not a PEM certificate (no "
                 "-----BEGIN CERTIFICATE----- block)"},
        };
        char m0[600], m1[600];
        snprintf(m0, sizeof(m0),
                 "kc.yaml:3:46: user.client-certificate: %s/notpem.crt: not a PEM certificate "
                 "(no -----BEGIN CERTIFICATE----- block)", tmpdir);
        snprintf(m1, sizeof(m1),
                 "kc.yaml:3:68: user.client-key: %s/good.crt: not a PEM private key (no "
                 "-----BEGIN ... PRIVATE KEY----- block)", tmpdir);
        users[0][1] = m0;
        users[1][1] = m1;
        for (size_t i = 0; i < 3; i++) {
                char text[1024];
                snprintf(text, sizeof(text),
                         "current-context: x\n"
                         "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                         "users: [{name: u, user: %s}]\n"
                         "clusters: [{name: c, cluster: {server: 'https://h'}}]\n", users[i][0]);
                assert_int_equal(parse(&cfg, text, NULL, &err), -EINVAL);
                assert_string_equal(err.msg, users[i][1]);
                kdev_kube_config_free(&cfg);
        }
        /* accepted: good files */
        assert_int_equal(parse(&cfg,
                               "current-context: x\n"
                               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                               "users: [{name: u, user: {client-certificate: good.crt, "
                               "client-key: good.key}}]\n"
                               "clusters: [{name: c, cluster: {server: 'https://h', "
                               "certificate-authority: good.crt}}]\n",
                               NULL, &err),
                         0);
        assert_string_equal(cfg.ca_pem, CA_PEM);
        assert_string_equal(cfg.key_pem, KEY_PEM);
        kdev_kube_config_free(&cfg);
        /* in-cluster ca.crt */
        char sa[600];
        snprintf(sa, sizeof(sa), "%s/sa2", tmpdir);
        assert_int_equal(mkdir(sa, 0700), 0);
        write_file("sa2/token", "tok\n");
        write_file("sa2/ca.crt", "not pem\n");
        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), -EINVAL);
        char want[700];
        snprintf(want, sizeof(want),
                 "%s/ca.crt: not a PEM certificate (no -----BEGIN CERTIFICATE----- block)", sa);
        assert_string_equal(err.msg, want);
        kdev_kube_config_free(&cfg);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_base64),
                cmocka_unit_test(test_kubeconfig_token),
                cmocka_unit_test(test_kubeconfig_client_cert_files),
                cmocka_unit_test(test_kubeconfig_file_on_disk),
                cmocka_unit_test(test_kubeconfig_errors),
                cmocka_unit_test(test_in_cluster),
                cmocka_unit_test(test_new_errors),
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_backoff),
                cmocka_unit_test(test_error_mapping),
                cmocka_unit_test(test_shapes),
                cmocka_unit_test(test_request_bad_path),
                cmocka_unit_test(test_kubeconfig_pem_checks),
                cmocka_unit_test(test_odd_files),
        };
        int rc = cmocka_run_group_tests(tests, setup, teardown);
        kdev_kube_global_cleanup();
        return rc;
}
