/* kube client against the stand-in API server (tests/kubeapi/server.py, run
 * with /usr/bin/python3): slice CRUD, field selectors, generateName, claims,
 * v1beta1, 409 retries, 429/500 retries with backoff, server down and back,
 * token, client certificate, CA, in-cluster and kubeconfig end to end.
 * Skipped (cmocka skip) when /usr/bin/python3 or openssl is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kube/kube.h"

#define PY "/usr/bin/python3"
#define SERVER KDEV_SOURCE_DIR "/tests/kubeapi/server.py"
#define TOKEN "s3cret-token"

struct srv {
        pid_t pid;
        int in_fd; /* server's stdin: closing it stops the server */
        json_t *info;
        struct kdev_kube *admin;
};

static struct srv plain, tls;
static char tmpdir[256];
static bool have_tools;

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(p);
}

static const char *info_str(const struct srv *s, const char *key)
{
        return json_string_value(json_object_get(s->info, key));
}

static int start_server(struct srv *s, const char *const *extra)
{
        int in[2], out[2];
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
                return -1;
        const char *argv[16] = {PY, SERVER};
        size_t n = 2;
        for (; extra && *extra && n < 15; extra++)
                argv[n++] = *extra;
        argv[n] = NULL;
        s->pid = fork();
        if (s->pid < 0)
                return -1;
        if (s->pid == 0) {
                dup2(in[0], 0);
                dup2(out[1], 1);
                execv(PY, (char *const *)argv);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        s->in_fd = in[1];
        char line[4096];
        size_t len = 0;
        /* one JSON line; generous timeout for a loaded machine (openssl keys) */
        for (;;) {
                struct pollfd p = {.fd = out[0], .events = POLLIN};
                if (poll(&p, 1, 60000) <= 0)
                        break;
                ssize_t r = read(out[0], line + len, sizeof(line) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                if (memchr(line, '\n', len) || len == sizeof(line) - 1)
                        break;
        }
        close(out[0]);
        line[len] = '\0';
        s->info = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        if (!s->info)
                return -1;
        struct kdev_kube_config cfg = {.server = (char *)info_str(s, "admin_url")};
        struct kdev_kube_opts o = {.attempts = 1};
        s->admin = kdev_kube_new(&cfg, &o, NULL);
        return s->admin ? 0 : -1;
}

static void stop_server(struct srv *s)
{
        if (s->pid <= 0)
                return;
        close(s->in_fd);
        kill(s->pid, SIGTERM);
        /* A stand-in that does not exit within 20 s gets its threads dumped
         * (faulthandler on SIGUSR1, to this test's output) and is killed, so
         * that it cannot hold the suite. */
        int st = 0;
        pid_t w = 0;
        for (int i = 0; i < 200 && (w = waitpid(s->pid, &st, WNOHANG)) == 0; i++)
                usleep(100000);
        if (w == 0) {
                fprintf(stderr, "stand-in API server %d did not exit on SIGTERM; its threads:\n",
                        (int)s->pid);
                kill(s->pid, SIGUSR1);
                usleep(500000);
                kill(s->pid, SIGKILL);
                waitpid(s->pid, NULL, 0);
        }
        json_decref(s->info);
        kdev_kube_free(s->admin);
        memset(s, 0, sizeof(*s));
}

static int group_setup(void **state)
{
        (void)state;
        have_tools = access(PY, X_OK) == 0 && system("openssl version >/dev/null 2>&1") == 0;
        if (!have_tools)
                return 0;
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/kdev-kube-XXXXXX");
        if (!mkdtemp(tmpdir))
                return -1;
        char tlsdir[300];
        snprintf(tlsdir, sizeof(tlsdir), "%s/tls", tmpdir);
        const char *a1[] = {"--token", TOKEN, NULL};
        const char *a2[] = {"--token", TOKEN, "--tls", tlsdir, NULL};
        if (start_server(&plain, a1) < 0 || start_server(&tls, a2) < 0)
                return -1;
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        stop_server(&plain);
        stop_server(&tls);
        if (tmpdir[0])
                nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        kdev_kube_global_cleanup();
        return 0;
}

#define NEED_TOOLS()                                                                     \
        do {                                                                             \
                if (!have_tools) {                                                       \
                        print_message("no /usr/bin/python3 or openssl: skipped\n");      \
                        skip();                                                          \
                }                                                                        \
        } while (0)

static struct kdev_kube *client_for(const struct srv *s, const char *version,
                                    const char *token, unsigned attempts)
{
        struct kdev_kube_config cfg = {.server = (char *)info_str(s, "url"),
                                       .token = (char *)token};
        struct kdev_kube_opts o = {.version = version, .attempts = attempts, .backoff_ms = 10,
                                   .backoff_max_ms = 100, .timeout_ms = 20000};
        struct kdev_err err = {0};
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, &err);
        assert_non_null(k);
        return k;
}

static void admin(const struct srv *s, const char *method, const char *path, const char *body,
                  json_t **out)
{
        json_t *b = body ? json_loads(body, 0, NULL) : NULL;
        assert_true(!body || b);
        struct kdev_err err = {0};
        int rc = kdev_kube_request(s->admin, method, path, b, out, &err);
        if (rc < 0)
                print_error("admin %s %s: %s\n", method, path, err.msg);
        assert_int_equal(rc, 0);
        json_decref(b);
}

/* The API requests seen since the last call, as "METHOD status" words. */
static void requests(const struct srv *s, char *buf, size_t size)
{
        json_t *r;
        admin(s, "GET", "/_admin/requests", NULL, &r);
        admin(s, "DELETE", "/_admin/requests", NULL, NULL);
        size_t i, n = 0;
        json_t *e;
        buf[0] = '\0';
        json_array_foreach(json_object_get(r, "items"), i, e) {
                n += (size_t)snprintf(buf + n, size - n, "%s%s %lld", n ? " " : "",
                                      json_string_value(json_object_get(e, "method")),
                                      json_integer_value(json_object_get(e, "status")));
        }
        json_decref(r);
}

static json_t *slice(const char *gen, const char *node, const char *driver, const char *dev)
{
        json_t *s = json_pack("{s:{s:s}, s:{s:s, s:s, s:{s:s, s:i, s:i}, s:[{s:s, s:{s:{s:i}}}]}}",
                              "metadata", "generateName", gen, "spec", "driver", driver,
                              "nodeName", node, "pool", "name", node, "generation", 1,
                              "resourceSliceCount", 1, "devices", "name", dev, "attributes",
                              "index", "int", 0);
        assert_non_null(s);
        return s;
}

static const char *meta(const json_t *o, const char *key)
{
        return json_string_value(json_object_get(json_object_get(o, "metadata"), key));
}

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- CRUD --------------------------------------------------------------------- */

static void test_slices_crud(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        admin(&plain, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"crud-n1\"}}",
              NULL);

        json_t *node;
        assert_int_equal(kdev_kube_get_node(k, "crud-n1", &node, &err), 0);
        json_t *owner = kdev_kube_node_owner_ref(node);
        assert_non_null(owner);
        assert_string_equal(json_string_value(json_object_get(owner, "uid")), meta(node, "uid"));
        json_decref(node);

        /* generateName */
        json_t *s1 = slice("crud-n1-gpu.example.com-", "crud-n1", "gpu.example.com", "gpu-0");
        json_object_set_new(json_object_get(s1, "metadata"), "ownerReferences",
                            json_pack("[o]", owner));
        json_t *c1;
        assert_int_equal(kdev_kube_create_slice(k, s1, &c1, &err), 0);
        const char *name = meta(c1, "name");
        assert_int_equal(strlen(name), strlen("crud-n1-gpu.example.com-") + 5);
        assert_memory_equal(name, "crud-n1-gpu.example.com-", strlen("crud-n1-gpu.example.com-"));
        assert_non_null(meta(c1, "uid"));
        assert_string_equal(json_string_value(json_object_get(c1, "apiVersion")),
                            "resource.k8s.io/v1");
        assert_null(json_object_get(s1, "apiVersion")); /* the caller's object is untouched */
        json_t *s2 = slice("crud-", "crud-n1", "other.example.com", "dev-0");
        json_t *s3 = slice("crud-", "crud-n2", "gpu.example.com", "gpu-0");
        assert_int_equal(kdev_kube_create_slice(k, s2, NULL, &err), 0);
        assert_int_equal(kdev_kube_create_slice(k, s3, NULL, &err), 0);

        /* explicit name, and AlreadyExists */
        json_t *s4 = slice("x-", "crud-n2", "other.example.com", "d");
        json_object_set_new(json_object_get(s4, "metadata"), "name", json_string("crud-fixed"));
        assert_int_equal(kdev_kube_create_slice(k, s4, NULL, &err), 0);
        assert_int_equal(kdev_kube_create_slice(k, s4, NULL, &err), -EEXIST);
        assert_string_equal(err.msg, "POST /apis/resource.k8s.io/v1/resourceslices: 409 "
                                     "Conflict: resourceslices.resource.k8s.io \"crud-fixed\" "
                                     "already exists");

        /* field selectors */
        json_t *items;
        assert_int_equal(kdev_kube_list_slices(k, "crud-n1", "gpu.example.com", &items, &err), 1);
        assert_string_equal(meta(json_array_get(items, 0), "name"), name);
        assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "kind")),
                            "ResourceSlice");
        json_decref(items);
        assert_int_equal(kdev_kube_list_slices(k, "crud-n1", NULL, &items, &err), 2);
        json_decref(items);
        assert_int_equal(kdev_kube_list_slices(k, NULL, "gpu.example.com", &items, &err), 2);
        json_decref(items);
        assert_int_equal(kdev_kube_list_slices(k, "crud-n3", NULL, &items, &err), 0);
        json_decref(items);

        /* update: resourceVersion moves; a stale one is a 409 */
        json_t *upd = json_deep_copy(c1);
        json_object_set_new(json_object_get(json_object_get(upd, "spec"), "pool"), "generation",
                            json_integer(2));
        json_t *u1;
        assert_int_equal(kdev_kube_update_slice(k, upd, &u1, &err), 0);
        assert_true(atoll(meta(u1, "resourceVersion")) > atoll(meta(c1, "resourceVersion")));
        assert_int_equal(json_integer_value(json_object_get(
                                 json_object_get(json_object_get(u1, "spec"), "pool"),
                                 "generation")),
                         2);
        assert_int_equal(kdev_kube_update_slice(k, upd, NULL, &err), -ESTALE);
        char want[512];
        snprintf(want, sizeof(want),
                 "PUT /apis/resource.k8s.io/v1/resourceslices/%s: 409 Conflict: Operation "
                 "cannot be fulfilled on resourceslices.resource.k8s.io \"%s\": the object has "
                 "been modified; please apply your changes to the latest version and try again",
                 name, name);
        assert_string_equal(err.msg, want);
        json_object_del(json_object_get(upd, "metadata"), "resourceVersion");
        assert_int_equal(kdev_kube_update_slice(k, upd, NULL, &err), -EINVAL);

        /* delete with preconditions, then for real; 404 after */
        assert_int_equal(kdev_kube_delete_slice(k, name, "wrong-uid", NULL, &err), -ESTALE);
        assert_non_null(strstr(err.msg, "409 Conflict: Precondition failed: UID in precondition: "
                                        "wrong-uid"));
        assert_int_equal(kdev_kube_delete_slice(k, name, meta(c1, "uid"),
                                                meta(c1, "resourceVersion"), &err),
                         -ESTALE);
        assert_int_equal(kdev_kube_delete_slice(k, name, meta(u1, "uid"),
                                                meta(u1, "resourceVersion"), &err),
                         0);
        assert_int_equal(kdev_kube_delete_slice(k, name, NULL, NULL, &err), -ENOENT);
        snprintf(want, sizeof(want),
                 "DELETE /apis/resource.k8s.io/v1/resourceslices/%s: 404 Not Found: "
                 "resourceslices.resource.k8s.io \"%s\" not found",
                 name, name);
        assert_string_equal(err.msg, want);
        assert_int_equal(kdev_kube_last_status(k), 404);
        assert_int_equal(kdev_kube_last_attempts(k), 1);

        /* DELETE collection by field selector */
        assert_int_equal(kdev_kube_delete_slices(k, "crud-n2", NULL, &err), 2);
        assert_int_equal(kdev_kube_delete_slices(k, "crud-n2", NULL, &err), 0);
        assert_int_equal(kdev_kube_delete_slices(k, "crud-n1", "other.example.com", &err), 1);
        assert_int_equal(kdev_kube_list_slices(k, "crud-n1", NULL, &items, &err), 0);
        json_decref(items);
        assert_int_equal(kdev_kube_delete_slices(k, NULL, NULL, &err), -EINVAL);

        json_decref(s1);
        json_decref(s2);
        json_decref(s3);
        json_decref(s4);
        json_decref(c1);
        json_decref(u1);
        json_decref(upd);
        kdev_kube_free(k);
}

static void test_list_pages(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        const int n = KDEV_KUBE_LIST_LIMIT + 7;
        for (int i = 0; i < n; i++) {
                json_t *s = slice("page-", "page-node", "gpu.example.com", "gpu-0");
                assert_int_equal(kdev_kube_create_slice(k, s, NULL, &err), 0);
                json_decref(s);
        }
        admin(&plain, "DELETE", "/_admin/requests", NULL, NULL);
        json_t *items;
        assert_int_equal(kdev_kube_list_slices(k, "page-node", NULL, &items, &err), n);
        json_decref(items);
        char log[256];
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200");
        assert_int_equal(kdev_kube_delete_slices(k, "page-node", NULL, &err), n);
        kdev_kube_free(k);
}

/* --- claims, nodes, v1beta1 -------------------------------------------------------- */

static const char CLAIM[] =
        "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\","
        "\"metadata\":{\"name\":\"gpu-claim\",\"namespace\":\"team-a\"},"
        "\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":{"
        "\"deviceClassName\":\"gpu.nvidia.com\"}}]}},"
        "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":\"gpu\","
        "\"driver\":\"gpu.nvidia.com\",\"pool\":\"node-1\",\"device\":\"gpu-0\"}]},"
        "\"nodeSelector\":{\"nodeSelectorTerms\":[{\"matchFields\":[{\"key\":\"metadata.name\","
        "\"operator\":\"In\",\"values\":[\"node-1\"]}]}]}},"
        "\"reservedFor\":[{\"resource\":\"pods\",\"name\":\"pod0\",\"uid\":\"p-1\"}]}}";

static void test_claims_and_versions(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        admin(&plain, "POST", "/_admin/objects", CLAIM, NULL);
        const char *versions[] = {"v1", "v1beta1"};
        for (int v = 0; v < 2; v++) {
                struct kdev_kube *k = client_for(&plain, versions[v], TOKEN, 3);
                json_t *c;
                assert_int_equal(kdev_kube_get_claim(k, "team-a", "gpu-claim", &c, &err), 0);
                json_t *r = json_array_get(json_object_get(json_object_get(json_object_get(
                        json_object_get(c, "status"), "allocation"), "devices"), "results"), 0);
                assert_string_equal(json_string_value(json_object_get(r, "device")), "gpu-0");
                assert_string_equal(json_string_value(json_object_get(r, "pool")), "node-1");
                json_t *req = json_array_get(json_object_get(json_object_get(
                        json_object_get(c, "spec"), "devices"), "requests"), 0);
                assert_string_equal(json_string_value(json_object_get(
                                            json_object_get(req, "exactly"), "deviceClassName")),
                                    "gpu.nvidia.com");
                assert_null(json_object_get(req, "deviceClassName"));
                assert_string_equal(json_string_value(json_object_get(c, "apiVersion")),
                                    "resource.k8s.io/v1");
                json_decref(c);
                assert_int_equal(kdev_kube_get_claim(k, "team-a", "absent", &c, &err), -ENOENT);
                char want[256];
                snprintf(want, sizeof(want),
                         "GET /apis/resource.k8s.io/%s/namespaces/team-a/resourceclaims/absent: "
                         "404 Not Found: resourceclaims.resource.k8s.io \"absent\" not found",
                         versions[v]);
                assert_string_equal(err.msg, want);
                kdev_kube_free(k);
        }

        /* a v1beta1 client writes slices the server stores as v1 and reads back v1 */
        struct kdev_kube *b = client_for(&plain, "v1beta1", TOKEN, 3);
        json_t *s = slice("beta-", "beta-node", "gpu.example.com", "gpu-7"), *c;
        assert_int_equal(kdev_kube_create_slice(b, s, &c, &err), 0);
        json_t *dev = json_array_get(json_object_get(json_object_get(c, "spec"), "devices"), 0);
        assert_null(json_object_get(dev, "basic"));
        assert_non_null(json_object_get(dev, "attributes"));
        char path[512];
        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1beta1/resourceslices/%s",
                 meta(c, "name"));
        json_t *raw;
        assert_int_equal(kdev_kube_request(b, "GET", path, NULL, &raw, &err), 0);
        dev = json_array_get(json_object_get(json_object_get(raw, "spec"), "devices"), 0);
        assert_string_equal(json_string_value(json_object_get(dev, "name")), "gpu-7");
        assert_non_null(json_object_get(json_object_get(dev, "basic"), "attributes"));
        json_decref(raw);
        json_t *items;
        assert_int_equal(kdev_kube_list_slices(b, "beta-node", NULL, &items, &err), 1);
        dev = json_array_get(json_object_get(json_object_get(json_array_get(items, 0), "spec"),
                                             "devices"),
                             0);
        assert_null(json_object_get(dev, "basic"));
        json_decref(items);
        assert_int_equal(kdev_kube_delete_slices(b, "beta-node", NULL, &err), 1);
        json_decref(s);
        json_decref(c);
        kdev_kube_free(b);

        /* nodes: 404 */
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(k, "no-such-node", &n, &err), -ENOENT);
        assert_string_equal(err.msg, "GET /api/v1/nodes/no-such-node: 404 Not Found: "
                                     "nodes \"no-such-node\" not found");
        kdev_kube_free(k);
}

/* --- 409 conflicts ------------------------------------------------------------------ */

struct mut {
        struct kdev_kube *other; /* writes behind our back */
        int calls;
        int interfere;           /* how many calls interfere */
        bool unchanged;
};

static int mutate(json_t *obj, void *arg, struct kdev_err *err)
{
        struct mut *m = arg;
        m->calls++;
        if (m->unchanged)
                return KDEV_KUBE_UNCHANGED;
        if (m->calls <= m->interfere) {
                /* someone else updates the object between our GET and PUT */
                json_t *copy = json_deep_copy(obj);
                json_object_set_new(json_object_get(copy, "metadata"), "labels",
                                    json_pack("{s:i}", "other", m->calls));
                int rc = kdev_kube_update_slice(m->other, copy, NULL, err);
                json_decref(copy);
                if (rc < 0)
                        return rc;
        }
        json_t *pool = json_object_get(json_object_get(obj, "spec"), "pool");
        json_object_set_new(pool, "generation",
                            json_integer(json_integer_value(json_object_get(pool, "generation")) +
                                         1));
        return 0;
}

static void test_update_conflict_retry(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_kube *other = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        json_t *s = slice("conflict-", "conflict-node", "gpu.example.com", "gpu-0"), *c;
        assert_int_equal(kdev_kube_create_slice(k, s, &c, &err), 0);
        char path[512];
        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/resourceslices/%s",
                 meta(c, "name"));
        char log[256];
        requests(&plain, log, sizeof(log));

        /* two conflicts, then success: both writers' changes are kept */
        struct mut m = {.other = other, .interfere = 2};
        json_t *out;
        assert_int_equal(kdev_kube_update_retry(k, path, mutate, &m, &out, &err), 0);
        assert_int_equal(m.calls, 3);
        assert_int_equal(json_integer_value(json_object_get(
                                 json_object_get(json_object_get(out, "spec"), "pool"),
                                 "generation")),
                         2);
        assert_int_equal(json_integer_value(json_object_get(
                                 json_object_get(json_object_get(out, "metadata"), "labels"),
                                 "other")),
                         2);
        json_decref(out);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 200 PUT 200 PUT 409 GET 200 PUT 200 PUT 409 GET 200 "
                                 "PUT 200");

        /* conflicts that never end: conflict_retries (5) re-reads, then -ESTALE */
        m = (struct mut){.other = other, .interfere = 100};
        assert_int_equal(kdev_kube_update_retry(k, path, mutate, &m, &out, &err), -ESTALE);
        assert_null(out);
        assert_int_equal(m.calls, 6);
        assert_string_equal(strstr(err.msg, "update gave up after 6 conflicts: PUT "),
                            err.msg);
        requests(&plain, log, sizeof(log));

        /* unchanged: no PUT */
        m = (struct mut){.unchanged = true};
        assert_int_equal(kdev_kube_update_retry(k, path, mutate, &m, &out, &err), 0);
        assert_non_null(out);
        json_decref(out);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 200");

        /* 404 passes through */
        m = (struct mut){0};
        assert_int_equal(kdev_kube_update_retry(k, "/apis/resource.k8s.io/v1/resourceslices/"
                                                   "gone",
                                                mutate, &m, NULL, &err),
                         -ENOENT);
        assert_int_equal(m.calls, 0);
        assert_int_equal(kdev_kube_delete_slices(k, "conflict-node", NULL, &err), 1);
        json_decref(s);
        json_decref(c);
        kdev_kube_free(k);
        kdev_kube_free(other);
}

/* --- retries ------------------------------------------------------------------------ */

static void test_retry_5xx_429(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 4);
        struct kdev_err err = {0};
        char log[256];
        admin(&plain, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"retry-n\"}}",
              NULL);
        requests(&plain, log, sizeof(log));

        admin(&plain, "POST", "/_admin/faults", "{\"status\":500,\"count\":2}", NULL);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(k, "retry-n", &n, &err), 0);
        json_decref(n);
        assert_int_equal(kdev_kube_last_attempts(k), 3);
        assert_int_equal(kdev_kube_last_status(k), 200);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 500 GET 500 GET 200");

        /* 503 and 429, the POST is retried too */
        admin(&plain, "POST", "/_admin/faults",
              "{\"status\":503,\"count\":1,\"method\":\"POST\"}", NULL);
        admin(&plain, "POST", "/_admin/faults",
              "{\"status\":429,\"count\":1,\"method\":\"POST\"}", NULL);
        json_t *s = slice("retry-", "retry-n", "gpu.example.com", "gpu-0");
        assert_int_equal(kdev_kube_create_slice(k, s, NULL, &err), 0);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "POST 503 POST 429 POST 201");

        /* Retry-After: 1 s is honoured (capped at backoff_max_ms, 2000 here) */
        struct kdev_kube_config cfg = {.server = (char *)info_str(&plain, "url"),
                                       .token = (char *)TOKEN};
        struct kdev_kube_opts o = {.attempts = 3, .backoff_ms = 10, .backoff_max_ms = 2000};
        struct kdev_kube *ra = kdev_kube_new(&cfg, &o, &err);
        admin(&plain, "POST", "/_admin/faults", "{\"status\":429,\"count\":1,\"retry_after\":1}",
              NULL);
        double t0 = now_s();
        assert_int_equal(kdev_kube_get_node(ra, "retry-n", &n, &err), 0);
        double dt = now_s() - t0;
        json_decref(n);
        assert_true(dt >= 0.95);
        assert_int_equal(kdev_kube_last_attempts(ra), 2);
        kdev_kube_free(ra);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 429 GET 200");

        /* retries spent */
        admin(&plain, "POST", "/_admin/faults", "{\"status\":500,\"count\":10}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "retry-n", &n, &err), -EAGAIN);
        assert_null(n);
        assert_string_equal(err.msg, "GET /api/v1/nodes/retry-n: 500 Internal Server Error: "
                                     "injected fault: 500 (after 4 attempts)");
        admin(&plain, "DELETE", "/_admin/faults", NULL, NULL);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 500 GET 500 GET 500 GET 500");

        /* a dropped connection is retried (a fresh client: on a kept-alive connection
         * curl itself retries once on a new one) */
        struct kdev_kube *fresh = client_for(&plain, NULL, TOKEN, 4);
        admin(&plain, "POST", "/_admin/faults", "{\"mode\":\"reset\",\"count\":1}", NULL);
        assert_int_equal(kdev_kube_get_node(fresh, "retry-n", &n, &err), 0);
        json_decref(n);
        assert_int_equal(kdev_kube_last_attempts(fresh), 2);
        kdev_kube_free(fresh);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET -1 GET 200");

        /* 4xx are not retried */
        assert_int_equal(kdev_kube_get_node(k, "absent", &n, &err), -ENOENT);
        assert_int_equal(kdev_kube_last_attempts(k), 1);
        assert_int_equal(kdev_kube_delete_slices(k, "retry-n", NULL, &err), 1);
        json_decref(s);
        kdev_kube_free(k);
}

struct abort_run {
        struct kdev_kube *k;
        int rc;
        struct kdev_err err;
};

static void *abort_thread(void *arg)
{
        struct abort_run *r = arg;
        json_t *n = NULL;
        r->rc = kdev_kube_get_node(r->k, "abort-n", &n, &r->err);
        json_decref(n);
        return NULL;
}

/* kdev_kube_abort from another thread stops a request the server holds, and
 * every later request fails at once. */
static void test_abort(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct abort_run r = {.k = client_for(&plain, NULL, TOKEN, 5)};
        admin(&plain, "POST", "/_admin/delay", "{\"seconds\":60,\"path\":\"/api/v1/nodes/abort-n\"}",
              NULL);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, abort_thread, &r), 0);
        long long held = 0;
        for (int i = 0; i < 2000 && held < 1; i++) {
                json_t *d;
                admin(&plain, "GET", "/_admin/delay", NULL, &d);
                held = json_integer_value(json_object_get(d, "waiting"));
                json_decref(d);
                if (held < 1)
                        usleep(10000);
        }
        assert_int_equal(held, 1);
        double t0 = now_s();
        kdev_kube_abort(r.k);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_true(now_s() - t0 < 5.0);
        assert_int_equal(r.rc, -ECANCELED);
        assert_string_equal(r.err.msg, "GET /api/v1/nodes/abort-n: cancelled");
        json_t *n = NULL;
        struct kdev_err err = {0};
        assert_int_equal(kdev_kube_get_node(r.k, "other", &n, &err), -ECANCELED);
        assert_null(n);
        assert_string_equal(err.msg, "GET /api/v1/nodes/other: cancelled");
        admin(&plain, "DELETE", "/_admin/delay", NULL, NULL);
        requests(&plain, (char[256]){0}, 256);
        kdev_kube_free(r.k);
        kdev_kube_abort(NULL);
}

static void test_server_down_and_back(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        admin(&plain, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"down-n\"}}", NULL);
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(k, "down-n", &n, &err), 0); /* connection kept */
        json_decref(n);

        /* down for good: connection errors once the retries are spent */
        admin(&plain, "POST", "/_admin/down", "{}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "down-n", &n, &err), -ECONNREFUSED);
        assert_int_equal(kdev_kube_last_attempts(k), 3);
        assert_int_equal(kdev_kube_last_status(k), 0);
        char want[128];
        snprintf(want, sizeof(want), "GET %s/api/v1/nodes/down-n: Couldn't connect to server",
                 info_str(&plain, "url"));
        assert_memory_equal(err.msg, want, strlen(want));
        assert_non_null(strstr(err.msg, " (after 3 attempts)"));
        admin(&plain, "POST", "/_admin/up", "{}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "down-n", &n, &err), 0);
        json_decref(n);
        kdev_kube_free(k);

        /* down for 1 s while the client retries: it gets through */
        struct kdev_kube_config cfg = {.server = (char *)info_str(&plain, "url"),
                                       .token = (char *)TOKEN};
        struct kdev_kube_opts o = {.attempts = 60, .backoff_ms = 50, .backoff_max_ms = 200};
        k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "down-n", &n, &err), 0);
        json_decref(n);
        admin(&plain, "POST", "/_admin/down", "{\"seconds\":1.0}", NULL);
        double t0 = now_s();
        assert_int_equal(kdev_kube_get_node(k, "down-n", &n, &err), 0);
        json_decref(n);
        assert_true(now_s() - t0 >= 0.5);
        assert_true(kdev_kube_last_attempts(k) > 1);
        kdev_kube_free(k);
}

/* --- authentication and TLS ------------------------------------------------------------ */

static void test_token(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        struct kdev_kube *k = client_for(&plain, NULL, "wrong", 3);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(k, "x", &n, &err), -EACCES);
        char want401[160];
        snprintf(want401, sizeof(want401), "GET %s/api/v1/nodes/x: 401 Unauthorized: Unauthorized",
                 info_str(&plain, "url"));
        assert_string_equal(err.msg, want401);
        assert_int_equal(kdev_kube_last_attempts(k), 1);
        kdev_kube_free(k);
        k = client_for(&plain, NULL, NULL, 3);
        assert_int_equal(kdev_kube_get_node(k, "x", &n, &err), -EACCES);
        kdev_kube_free(k);
}

static char *slurp(const char *path, size_t *len)
{
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char *buf = calloc(1, 65536);
        *len = fread(buf, 1, 65535, f);
        fclose(f);
        return buf;
}

static void test_tls(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        admin(&tls, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"tls-n\"}}", NULL);
        struct kdev_kube_config cfg = {.server = (char *)info_str(&tls, "url"),
                                       .token = (char *)TOKEN};
        struct kdev_kube_opts o = {.attempts = 2, .backoff_ms = 10};
        json_t *n;

        /* the test CA is not in the system store */
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "tls-n", &n, &err), -EKEYREJECTED);
        kdev_kube_free(k);

        /* with the CA */
        cfg.ca_pem = slurp(info_str(&tls, "ca"), &cfg.ca_len);
        k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "tls-n", &n, &err), 0);
        assert_string_equal(meta(n, "name"), "tls-n");
        json_decref(n);
        kdev_kube_free(k);

        /* client certificate instead of the token */
        cfg.token = NULL;
        k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "tls-n", &n, &err), -EACCES);
        kdev_kube_free(k);
        cfg.cert_pem = slurp(info_str(&tls, "client_cert"), &cfg.cert_len);
        cfg.key_pem = slurp(info_str(&tls, "client_key"), &cfg.key_len);
        k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "tls-n", &n, &err), 0);
        json_decref(n);
        kdev_kube_free(k);

        /* insecure-skip-tls-verify without the CA */
        free(cfg.ca_pem);
        cfg.ca_pem = NULL;
        cfg.ca_len = 0;
        cfg.insecure = true;
        k = kdev_kube_new(&cfg, &o, &err);
        assert_int_equal(kdev_kube_get_node(k, "tls-n", &n, &err), 0);
        json_decref(n);
        kdev_kube_free(k);
        free(cfg.cert_pem);
        free(cfg.key_pem);
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_in_cluster_end_to_end(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        char sa[300], p[400], cmd[1024];
        snprintf(sa, sizeof(sa), "%s/sa", tmpdir);
        mkdir(sa, 0700);
        snprintf(p, sizeof(p), "%s/token", sa);
        write_text(p, TOKEN "\n");
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s/ca.crt'", info_str(&tls, "ca"), sa);
        assert_int_equal(system(cmd), 0);
        setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
        char port[16];
        snprintf(port, sizeof(port), "%lld",
                 json_integer_value(json_object_get(tls.info, "port")));
        setenv("KUBERNETES_SERVICE_PORT", port, 1);
        struct kdev_kube_config cfg;
        assert_int_equal(kdev_kube_config_in_cluster(&cfg, sa, &err), 0);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
        admin(&tls, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"ic-n\"}}", NULL);
        struct kdev_kube_opts fast = {.attempts = 1, .token_reload_ms = 1};
        struct kdev_kube_opts slow = {.attempts = 1};
        struct kdev_kube *kf = kdev_kube_new(&cfg, &fast, &err);
        struct kdev_kube *ks = kdev_kube_new(&cfg, &slow, &err);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(kf, "ic-n", &n, &err), 0);
        json_decref(n);
        assert_int_equal(kdev_kube_get_node(ks, "ic-n", &n, &err), 0);
        json_decref(n);

        /* the token rotates: the client re-reads the file (after token_reload_ms) */
        admin(&tls, "POST", "/_admin/token", "{\"token\":\"rotated-2\"}", NULL);
        write_text(p, "rotated-2\n");
        usleep(5000);
        assert_int_equal(kdev_kube_get_node(kf, "ic-n", &n, &err), 0);
        json_decref(n);
        assert_int_equal(kdev_kube_get_node(ks, "ic-n", &n, &err), -EACCES); /* 60 s cache */
        admin(&tls, "POST", "/_admin/token", "{\"token\":\"" TOKEN "\"}", NULL);
        kdev_kube_free(kf);
        kdev_kube_free(ks);
        kdev_kube_config_free(&cfg);
}

static void test_kubeconfig_end_to_end(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        char path[400], text[2048];
        snprintf(path, sizeof(path), "%s/kubeconfig", tmpdir);
        snprintf(text, sizeof(text),
                 "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                 "clusters:\n- name: stand-in\n  cluster:\n    server: %s\n"
                 "    certificate-authority: tls/ca.crt\n"
                 "users:\n- name: node\n  user:\n    client-certificate: %s\n"
                 "    client-key: tls/client.key\n"
                 "contexts:\n- name: test\n  context: {cluster: stand-in, user: node}\n",
                 info_str(&tls, "url"), info_str(&tls, "client_cert"));
        write_text(path, text);
        struct kdev_kube_config cfg;
        assert_int_equal(kdev_kube_config_load(&cfg, path, &err), 0);
        struct kdev_kube *k = kdev_kube_new(&cfg, NULL, &err);
        admin(&tls, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"kc-n\"}}", NULL);
        json_t *n;
        assert_int_equal(kdev_kube_get_node(k, "kc-n", &n, &err), 0);
        json_decref(n);
        kdev_kube_free(k);
        kdev_kube_config_free(&cfg);
}

/* --- per-work cancellation and deadlines (kdev_kube_cancel) ---------------------------- */

struct cancel_run {
        struct kdev_kube *k;
        struct kdev_kube_cancel *c;
        int rc;
        struct kdev_err err;
};

static void *cancel_thread(void *arg)
{
        struct cancel_run *r = arg;
        json_t *n = NULL;
        const struct kdev_kube_cancel *prev = kdev_kube_cancel_scope(r->c);
        r->rc = kdev_kube_get_node(r->k, "cancel-n", &n, &r->err);
        kdev_kube_cancel_scope(prev);
        json_decref(n);
        return NULL;
}

static long long held_now(const struct srv *s)
{
        json_t *d;
        admin(s, "GET", "/_admin/delay", NULL, &d);
        long long held = json_integer_value(json_object_get(d, "waiting"));
        json_decref(d);
        return held;
}

/* kdev_kube_get_node with |c| bound to this thread for that request only. */
static int get_bound(struct kdev_kube *k, const struct kdev_kube_cancel *c, json_t **n,
                     struct kdev_err *err)
{
        assert_null(kdev_kube_cancel_scope(c));
        int rc = kdev_kube_get_node(k, "cancel-n", n, err);
        assert_ptr_equal(kdev_kube_cancel_scope(NULL), c);
        return rc;
}

static struct kdev_kube *slow_client(const struct srv *s)
{
        struct kdev_kube_config cfg = {.server = (char *)info_str(s, "url"),
                                       .token = (char *)TOKEN};
        struct kdev_kube_opts o = {.attempts = 10, .backoff_ms = 1000, .backoff_max_ms = 5000,
                                   .timeout_ms = 20000};
        struct kdev_err err = {0};
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, &err);
        assert_non_null(k);
        return k;
}

/* A deadline bounds the retries (a retry that would start past it is not
 * made) and cuts a try short; firing the cancellation from another thread
 * stops a held request; the client stays usable; the binding is per thread. */
static void test_cancel_deadline(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_err err = {0};
        struct kdev_kube_cancel c;
        json_t *n = NULL;
        admin(&plain, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"cancel-n\"}}",
              NULL);
        struct kdev_kube *k = slow_client(&plain);

        /* no binding: nothing changes */
        assert_null(kdev_kube_cancel_scope(NULL));
        assert_false(kdev_kube_cancel_done(NULL));

        /* deadline already past: no request at all */
        requests(&plain, (char[256]){0}, 256);
        kdev_kube_cancel_init(&c, kdev_kube_now_ms() - 1);
        assert_true(kdev_kube_cancel_done(&c));
        assert_int_equal(get_bound(k, &c, &n, &err), -ETIMEDOUT);
        assert_null(n);
        assert_string_equal(err.msg, "GET /api/v1/nodes/cancel-n: deadline exceeded");
        assert_int_equal(kdev_kube_last_attempts(k), 0);
        char seen[256];
        requests(&plain, seen, sizeof(seen));
        assert_string_equal(seen, "");

        /* 503s with 1 s backoff and 1.5 s left: 2 tries, then the third would
         * start past the deadline */
        admin(&plain, "POST", "/_admin/faults", "{\"status\":503,\"count\":10}", NULL);
        kdev_kube_cancel_init(&c, kdev_kube_now_ms() + 1500);
        assert_false(kdev_kube_cancel_done(&c));
        double t0 = now_s();
        assert_int_equal(get_bound(k, &c, &n, &err), -EAGAIN);
        double dt = now_s() - t0;
        assert_string_equal(err.msg, "GET /api/v1/nodes/cancel-n: 503 Service Unavailable: "
                                     "injected fault: 503 (after 2 attempts, stopped by the "
                                     "deadline)");
        assert_int_equal(kdev_kube_last_attempts(k), 2);
        assert_true(dt >= 0.9 && dt < 1.5);
        admin(&plain, "DELETE", "/_admin/faults", NULL, NULL);

        /* server down: the same for connection errors */
        admin(&plain, "POST", "/_admin/down", "{}", NULL);
        kdev_kube_cancel_init(&c, kdev_kube_now_ms() + 1500);
        assert_int_equal(get_bound(k, &c, &n, &err), -ECONNREFUSED);
        char want[160];
        snprintf(want, sizeof(want), "GET %s/api/v1/nodes/cancel-n: Couldn't connect to server",
                 info_str(&plain, "url"));
        assert_memory_equal(err.msg, want, strlen(want));
        const char *tail = " (after 2 attempts, stopped by the deadline)";
        assert_true(strlen(err.msg) > strlen(tail));
        assert_string_equal(err.msg + strlen(err.msg) - strlen(tail), tail);
        assert_int_equal(kdev_kube_last_attempts(k), 2);
        admin(&plain, "POST", "/_admin/up", "{}", NULL);

        /* a held request: the deadline cuts the try (1 s left of 20 s) */
        admin(&plain, "POST", "/_admin/delay",
              "{\"seconds\":60,\"path\":\"/api/v1/nodes/cancel-n\"}", NULL);
        kdev_kube_cancel_init(&c, kdev_kube_now_ms() + 1000);
        t0 = now_s();
        assert_int_equal(get_bound(k, &c, &n, &err), -ETIMEDOUT);
        dt = now_s() - t0;
        assert_true(dt >= 0.9 && dt < 4.0);
        assert_non_null(strstr(err.msg, " (stopped by the deadline)"));
        assert_int_equal(kdev_kube_last_attempts(k), 1);

        /* fired from another thread while the server holds the request;
         * first release the request the server still holds from the step
         * above (its client gave up; a slow run may not have closed it yet) */
        admin(&plain, "DELETE", "/_admin/delay", NULL, NULL);
        long long held = 1;
        for (int i = 0; i < 2000 && held > 0; i++) {
                held = held_now(&plain);
                if (held > 0)
                        usleep(10000);
        }
        assert_int_equal(held, 0);
        admin(&plain, "POST", "/_admin/delay",
              "{\"seconds\":60,\"path\":\"/api/v1/nodes/cancel-n\"}", NULL);
        struct kdev_kube_cancel c2;
        kdev_kube_cancel_init(&c2, 0);
        struct cancel_run r = {.k = k, .c = &c2};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, cancel_thread, &r), 0);
        for (int i = 0; i < 2000 && held < 1; i++) {
                held = held_now(&plain);
                if (held < 1)
                        usleep(10000);
        }
        /* fire and join before any assertion, so a failure never leaves the
         * thread reading this frame */
        t0 = now_s();
        kdev_kube_cancel_fire(&c2);
        assert_int_equal(pthread_join(th, NULL), 0);
        double took = now_s() - t0;
        assert_int_equal(held, 1);
        assert_true(kdev_kube_cancel_done(&c2));
        assert_true(took < 5.0);
        assert_int_equal(r.rc, -ECANCELED);
        assert_string_equal(r.err.msg, "GET /api/v1/nodes/cancel-n: cancelled");
        admin(&plain, "DELETE", "/_admin/delay", NULL, NULL);

        /* the client is still usable: this thread has no binding */
        assert_int_equal(kdev_kube_get_node(k, "cancel-n", &n, &err), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(n, "metadata"),
                                                              "name")),
                            "cancel-n");
        json_decref(n);
        requests(&plain, (char[512]){0}, 512);
        kdev_kube_free(k);
}

/* A server without resource.k8s.io/v1 (stand-in --versions v1beta1): the
 * LIST says so and names the flag to use, at once (404 is not retried). */
static void test_version_not_served(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct srv old = {0};
        const char *a[] = {"--token", TOKEN, "--versions", "v1beta1", NULL};
        assert_int_equal(start_server(&old, a), 0);
        struct kdev_kube *k = client_for(&old, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        json_t *items = NULL;
        assert_int_equal(kdev_kube_list_slices(k, "n1", NULL, &items, &err), -EPROTONOSUPPORT);
        assert_null(items);
        assert_string_equal(err.msg,
                            "the API server does not serve resource.k8s.io/v1 (GET "
                            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName"
                            "%3Dn1: 404 Not Found); run with --resource-api-version v1beta1 "
                            "(Kubernetes < 1.34)");
        assert_int_equal(kdev_kube_last_attempts(k), 1);
        kdev_kube_free(k);
        k = client_for(&old, "v1beta1", TOKEN, 3);
        assert_int_equal(kdev_kube_list_slices(k, "n1", NULL, &items, &err), 0);
        assert_int_equal(json_array_size(items), 0);
        json_decref(items);
        kdev_kube_free(k);
        stop_server(&old);
}

/* Answers kdev does not take, each with an error that says what happened:
 * a header line over curl's limit, a redirect, a JSON array where an object
 * belongs. */
static void test_unusual_answers(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        char want[1024], log[256];
        json_t *n = NULL;
        const char *url = info_str(&plain, "url");

        admin(&plain, "POST", "/_admin/objects",
              "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"odd-n\"}}",
              NULL);
        requests(&plain, log, sizeof(log));
        /* a header line of 102401 bytes (curl takes at most 100 KiB) */
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"big_header\",\"size\":102401,\"count\":1}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "odd-n", &n, &err), -EPROTO);
        assert_null(n);
        snprintf(want, sizeof(want),
                 "GET %s/api/v1/nodes/odd-n: a response header from %s exceeds 100 KiB "
                 "(curl's limit; libcurl says \"Out of memory\")",
                 url, url);
        assert_string_equal(err.msg, want);
        assert_int_equal(kdev_kube_last_attempts(k), 1); /* not retried */
        /* a large header under the limit is fine */
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"big_header\",\"size\":90000,\"count\":1}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "odd-n", &n, &err), 0);
        json_decref(n);
        n = NULL;
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200");

        /* a redirect is not followed; the error says where it pointed */
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"redirect\",\"status\":302,\"count\":1,"
              "\"location\":\"https://elsewhere.example/api/v1/nodes/odd-n\"}",
              NULL);
        assert_int_equal(kdev_kube_get_node(k, "odd-n", &n, &err), -EPROTO);
        assert_null(n);
        snprintf(want, sizeof(want),
                 "GET %s/api/v1/nodes/odd-n: 302 Found: redirect to "
                 "https://elsewhere.example/api/v1/nodes/odd-n not followed (kdev does not "
                 "follow redirects; point the server at the API server itself)",
                 url);
        assert_string_equal(err.msg, want);
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"redirect\",\"status\":307,\"count\":1}", NULL);
        assert_int_equal(kdev_kube_get_node(k, "odd-n", &n, &err), -EPROTO);
        snprintf(want, sizeof(want),
                 "GET %s/api/v1/nodes/odd-n: 307 Temporary Redirect: redirect without a "
                 "Location header, not followed",
                 url);
        assert_string_equal(err.msg, want);
        requests(&plain, log, sizeof(log));
        assert_string_equal(log, "GET 302 GET 307");
        kdev_kube_free(k);
}

/* An answer of another JSON type than the API's, at any depth, names the
 * field by its path and both types; nothing is returned. */
static void test_json_types(void **state)
{
        (void)state;
        NEED_TOOLS();
        struct kdev_kube *k = client_for(&plain, NULL, TOKEN, 3);
        struct kdev_err err = {0};
        json_t *n = NULL, *items = NULL, *c = NULL;
        char want[1024], sp[512];
        static const struct {
                const char *body, *msg;
        } nodes[] = {
                {"[]", "GET /api/v1/nodes/jt-n: 200: response body: expected an object, got an "
                       "array"},
                {"{\"metadata\":[]}", "GET /api/v1/nodes/jt-n: .metadata: expected an object, "
                                      "got an array"},
                {"{\"metadata\":{\"name\":\"jt-n\",\"uid\":[\"u\"]}}",
                 "GET /api/v1/nodes/jt-n: .metadata.uid: expected a string, got an array"},
        };

        for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
                char f[512];
                snprintf(f, sizeof(f), "{\"mode\":\"body\",\"count\":1,\"body\":%s}",
                         nodes[i].body);
                admin(&plain, "POST", "/_admin/faults", f, NULL);
                assert_int_equal(kdev_kube_get_node(k, "jt-n", &n, &err), -EPROTO);
                assert_null(n);
                assert_string_equal(err.msg, nodes[i].msg);
        }

        /* list: the page, an item, a device of an item */
        assert_true(kdev_kube_slices_path(k, sp, sizeof(sp), "jt-n", NULL, &err) > 0);
        static const struct {
                const char *body, *at;
        } lists[] = {
                {"{\"items\":{}}", ".items: expected an array, got an object"},
                {"{\"items\":[[]]}", ".items[0]: expected an object, got an array"},
                {"{\"items\":[],\"metadata\":{\"continue\":[]}}",
                 ".metadata.continue: expected a string, got an array"},
                {"{\"items\":[{\"metadata\":{\"name\":\"a\"},\"spec\":{\"devices\":[{\"name\":"
                 "\"gpu-0\"},[]]}}]}",
                 ".items[0].spec.devices[1]: expected an object, got an array"},
                {"{\"items\":[{\"metadata\":{\"name\":\"a\"},\"spec\":[]}]}",
                 ".items[0].spec: expected an object, got an array"},
        };
        for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
                char f[512];
                snprintf(f, sizeof(f), "{\"mode\":\"body\",\"count\":1,\"body\":%s}",
                         lists[i].body);
                admin(&plain, "POST", "/_admin/faults", f, NULL);
                assert_int_equal(kdev_kube_list_slices(k, "jt-n", NULL, &items, &err), -EPROTO);
                assert_null(items);
                snprintf(want, sizeof(want), "GET %s%climit=%d: %s", sp,
                         strchr(sp, '?') ? '&' : '?', KDEV_KUBE_LIST_LIMIT, lists[i].at);
                assert_string_equal(err.msg, want);
        }

        /* a claim's request list */
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"body\",\"count\":1,\"body\":{\"metadata\":{},\"spec\":{\"devices\":"
              "{\"requests\":[{},[]]}}}}",
              NULL);
        assert_int_equal(kdev_kube_get_claim(k, "ns", "jt-c", &c, &err), -EPROTO);
        assert_null(c);
        assert_string_equal(err.msg,
                            "GET /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/jt-c: "
                            ".spec.devices.requests[1]: expected an object, got an array");

        /* the answer to a create and to a delete collection */
        json_t *s1 = slice("jt-s", "jt-n", "gpu.example.com", "gpu-0");
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"body\",\"count\":1,\"status\":201,\"body\":{\"metadata\":"
              "{\"name\":\"jt-s\"},\"spec\":{\"devices\":{}}}}",
              NULL);
        assert_int_equal(kdev_kube_create_slice(k, s1, &c, &err), -EPROTO);
        assert_null(c);
        assert_string_equal(err.msg, "POST /apis/resource.k8s.io/v1/resourceslices: "
                                     ".spec.devices: expected an array, got an object");
        json_decref(s1);
        admin(&plain, "POST", "/_admin/faults",
              "{\"mode\":\"body\",\"count\":1,\"body\":{\"items\":{}}}", NULL);
        assert_int_equal(kdev_kube_delete_slices(k, "jt-n", NULL, &err), -EPROTO);
        snprintf(want, sizeof(want), "DELETE %s: .items: expected an array, got an object", sp);
        assert_string_equal(err.msg, want);
        admin(&plain, "DELETE", "/_admin/faults", NULL, NULL);
        kdev_kube_free(k);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_slices_crud),
                cmocka_unit_test(test_list_pages),
                cmocka_unit_test(test_claims_and_versions),
                cmocka_unit_test(test_update_conflict_retry),
                cmocka_unit_test(test_retry_5xx_429),
                cmocka_unit_test(test_abort),
                cmocka_unit_test(test_server_down_and_back),
                cmocka_unit_test(test_token),
                cmocka_unit_test(test_tls),
                cmocka_unit_test(test_in_cluster_end_to_end),
                cmocka_unit_test(test_kubeconfig_end_to_end),
                cmocka_unit_test(test_cancel_deadline),
                cmocka_unit_test(test_version_not_served),
                cmocka_unit_test(test_unusual_answers),
                cmocka_unit_test(test_json_types),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
