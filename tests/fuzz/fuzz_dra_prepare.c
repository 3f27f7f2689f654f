/* libFuzzer target: the DRA NodePrepareResources request path as
 * kdev-dra-plugin serves it (dra/service.c: protobuf-c decoding, one answer
 * per claim UID, claim reads on the thread pool; dra/plugin.c: claim checks,
 * device name mapping, CDI spec build and write; dra/checkpoint.c: the
 * claim checkpoint saved per claim), then NodeUnprepareResources of the same
 * claims.
 *
 * Input: byte 0 picks the call, the rest is the NodePrepareResourcesRequest
 * (v1 and v1beta1 share the wire format, plugin.h):
 *   bit 0  v1 (1) or v1beta1 (0) method paths, answers decoded as that
 *          version's messages;
 *   bit 1  prepare twice: the second call is answered from the checkpoint
 *          and must give the same answer;
 *   bit 2  with bit 1: the CDI spec files are deleted before the second call
 *          (as after a reboot wiped /var/run/cdi): they must be rewritten.
 * Each call travels through kdev's own gRPC client and the plugin's server
 * on one in-process loop, over a Unix socket in a private temporary
 * directory (on /dev/shm when it exists: every checkpoint and spec write
 * fsyncs). That directory also holds the checkpoint (data/), the CDI dir
 * (cdi/), a dev root with /dev/nvidiactl (dev/) and the fake /proc with the
 * MIG capability minors (proc/); it is removed at exit.
 *
 * The node: the NVML mock (mock/nvml) with topology
 * mig-h100-80gb-8x-mixed.yaml (4 GPUs in MIG mode, 4 whole GPUs), discovered
 * through kdev's loader as kdev-dra-plugin does; GPU 7 (gpu-7) and one MIG
 * device of GPU 0 are withdrawn as unhealthy (kdev_dra_plugin_set_unhealthy).
 *
 * The claim source (the plugin's get_claim hook, plugin.h; kdev-dra-plugin
 * passes kdev_dra_kube_claim_source) is a stand-in API server: no network.
 * It answers ResourceClaim <ns>/<name> with metadata.uid = the UID the
 * request gave for that claim, and status.allocation.devices.results = one
 * result per '+'-separated part of <name> (device <part>, request "r<i>",
 * every second one "r<i>/sub"; driver gpu.nvidia.com, pool node1). Some
 * namespaces answer otherwise: "missing" 404, "replaced" another UID,
 * "unallocated" no allocation, "other-driver" / "other-pool" results for
 * someone else, "no-device" a result without device, "not-object" a JSON
 * array. KDEV_FUZZ_DRA_DEVICES=1 prints the device names the node
 * publishes, to write seeds with (gen_dra_seeds.c); KDEV_FUZZ_DRA_VERBOSE=1
 * prints each claim's answer.
 *
 * Oracle beyond "no crash, no sanitizer report, no leak":
 *   - Prepare ends OK exactly when the request decodes (else
 *     INVALID_ARGUMENT); the answer decodes as the version's response and
 *     has one entry per distinct claim UID, keyed by it; on_claim is told
 *     each once;
 *   - a claim answered without error has devices, each CDI device ID is
 *     "k8s.gpu.nvidia.com/claim=<uid>-<device>", and its CDI spec file
 *     parses and holds each of those CDI devices; it is recorded;
 *   - a claim that failed has no spec file and is not recorded;
 *   - a second Prepare gives the same answer (bit 1);
 *   - Unprepare of the same claims ends OK, one entry per distinct UID, no
 *     error for a claim that was prepared; afterwards nothing is recorded,
 *     the CDI dir is empty and the data dir holds at most the checkpoint.
 * The state is thus empty again after every input: runs are deterministic. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "cdi/cdi.h"
#include "dra/plugin.h"
#include "dra/slices.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "kdev_mock_nvml.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "rpc/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest PrepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesRequest UnprepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim Claim;

#define DRIVER "gpu.nvidia.com"
#define POOL "node1"
#define CDI_PREFIX KDEV_DRA_CDI_KIND "="
#define TOPOLOGY "mig-h100-80gb-8x-mixed.yaml"

static uv_loop_t loop;
static struct kdev_gpu_set *gpus;
static struct kdev_nvidia_gpus recs; /* |gpus| as the NVIDIA backend's records */
static struct kdev_dra_plugin *plugin;
static struct kdev_rpc_client *cl;
static char root[64], data_dir[96], cdi_dir[96], dev_root[96], proc_root[96];
static char dra_sock[96], reg_sock[96];

/* the request being served, read by the claim source (thread pool) while
 * the loop thread waits in uv_run */
static const PrepReq *current;
static size_t events; /* on_claim calls of the current call */
static bool verbose; /* KDEV_FUZZ_DRA_VERBOSE: print each claim's answer */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Reports a broken expectation and aborts (libFuzzer keeps the input). */
static void die(const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        fprintf(stderr, "fuzz_dra_prepare: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        abort();
}

/* ---- stand-in API server --------------------------------------------------- */

static json_t *results_of(const char *name, const char *driver, const char *pool,
                          bool no_device)
{
        json_t *res = json_array();
        size_t i = 0;

        if (!res)
                abort();
        for (const char *s = name; *s; i++) {
                size_t n = strcspn(s, "+");
                char req[32];

                snprintf(req, sizeof(req), i % 2 ? "r%zu/sub" : "r%zu", i);
                json_t *r = json_pack("{s:s,s:s,s:s,s:s%}", "request", req, "driver", driver,
                                      "pool", pool, "device", s, no_device ? (size_t)0 : n);
                if (!r || json_array_append_new(res, r) < 0)
                        abort();
                s += n;
                if (*s == '+')
                        s++;
        }
        return res;
}

static int fake_source(void *arg, const char *ns, const char *name, json_t **claim,
                       struct kdev_err *err)
{
        const char *uid = NULL;

        (void)arg;
        for (size_t i = 0; current && i < current->n_claims; i++) {
                const Claim *c = current->claims[i];

                if (!strcmp(c->namespace_, ns) && !strcmp(c->name, name)) {
                        uid = c->uid;
                        break;
                }
        }
        if (!uid) /* the plugin read a claim the request does not name */
                die("claim %s/%s read but not requested", ns, name);
        if (!strcmp(ns, "missing"))
                return kdev_err_set(err, ENOENT, "GET %s/%s: 404 Not Found", ns, name);
        /* JSON holds only UTF-8: an API server has no claim by such a name */
        json_t *t[3] = {json_string(ns), json_string(name), json_string(uid)};
        bool utf8 = t[0] && t[1] && t[2];
        for (size_t i = 0; i < 3; i++)
                json_decref(t[i]);
        if (!utf8)
                return kdev_err_set(err, ENOENT, "GET: 404 Not Found (name not UTF-8)");
        if (!strcmp(ns, "not-object")) {
                *claim = json_pack("[s]", name);
                if (!*claim)
                        abort();
                return 0;
        }
        json_t *meta = json_pack("{s:s,s:s,s:s+}", "name", name, "namespace", ns, "uid",
                                 strcmp(ns, "replaced") ? "" : "replaced-", uid);
        json_t *c = json_pack("{s:o,s:{}}", "metadata", meta, "status");
        if (!c)
                abort();
        if (strcmp(ns, "unallocated")) {
                json_t *res = results_of(name, strcmp(ns, "other-driver") ? DRIVER : "other.example.com",
                                         strcmp(ns, "other-pool") ? POOL : "node2",
                                         !strcmp(ns, "no-device"));
                if (json_object_set_new(json_object_get(c, "status"), "allocation",
                                        json_pack("{s:{s:o}}", "devices", "results", res)) < 0)
                        abort();
        }
        *claim = c;
        return 0;
}

static void on_claim(void *arg, const struct kdev_dra_claim_event *ev)
{
        (void)arg;
        (void)ev;
        events++;
}

/* ---- setup and cleanup ---------------------------------------------------- */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void cleanup(void)
{
        if (root[0])
                nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void sub(char *buf, size_t size, const char *name)
{
        snprintf(buf, size, "%s/%s", root, name);
        if (mkdir(buf, 0700) < 0)
                die("mkdir %s: %s", buf, strerror(errno));
}

/* Discovers the mock's topology, as mock_fixture.h does for the unit tests,
 * and writes its MIG capability minors under proc/. */
static void discover(void)
{
        struct kdev_nvml_options o = {.library_path = KDEV_MOCK_NVML_LIB};
        struct kdev_nvml_discover_options d = {.sysfs_root = root};
        struct kdev_nvml *lib;
        struct kdev_err err = {0};

        setenv("KDEV_MOCK_NVML_TOPOLOGY", KDEV_MOCK_NVML_TOPOLOGIES "/" TOPOLOGY, 1);
        if (kdev_nvml_open(&o, &lib, &err) < 0)
                die("%s", err.msg);
        void *h = dlopen(KDEV_MOCK_NVML_LIB, RTLD_NOW | RTLD_NOLOAD);
        kdevMockReset_fn *reset = h ? (kdevMockReset_fn *)dlsym(h, "kdevMockReset") : NULL;
        kdevMockWriteSysfs_fn *sysfs =
                h ? (kdevMockWriteSysfs_fn *)dlsym(h, "kdevMockWriteSysfs") : NULL;
        kdevMockWriteProc_fn *proc =
                h ? (kdevMockWriteProc_fn *)dlsym(h, "kdevMockWriteProc") : NULL;
        if (!reset || !sysfs || !proc)
                die("%s: no mock control entry points", KDEV_MOCK_NVML_LIB);
        reset();
        if (sysfs(root) != NVML_SUCCESS || proc(proc_root) != NVML_SUCCESS)
                die("mock: cannot write sysfs or proc files under %s", root);
        if (kdev_nvml_discover(lib, &d, &gpus, &err) < 0 ||
            kdev_nvidia_gpus_from_set(gpus, &recs, &err) < 0)
                die("%s", err.msg);
        reset();
        dlclose(h);
        kdev_nvml_close(lib);
}

static void list_devices(void)
{
        char name[KDEV_DRA_DEVICE_NAME_MAX + 1];

        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];

                if (g->mig_current != NVML_DEVICE_MIG_ENABLE)
                        printf("gpu-%u %s\n", g->minor, g->uuid);
                for (size_t j = 0; g->mig_current == NVML_DEVICE_MIG_ENABLE && j < g->n_migs; j++)
                        if (kdev_nvidia_dra_mig_name(g, &g->migs[j], name, sizeof(name)) > 0)
                                printf("%s %s\n", name, g->migs[j].uuid);
        }
}

static void setup(void)
{
        const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        struct kdev_err err = {0};
        int fd;

        signal(SIGPIPE, SIG_IGN);
        snprintf(root, sizeof(root), "%s/kdev-fuzz-dra-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(root))
                die("mkdtemp %s: %s", root, strerror(errno));
        atexit(cleanup);
        sub(data_dir, sizeof(data_dir), "data");
        sub(cdi_dir, sizeof(cdi_dir), "cdi");
        sub(dev_root, sizeof(dev_root), "dev");
        sub(proc_root, sizeof(proc_root), "proc");
        snprintf(dra_sock, sizeof(dra_sock), "%s/dra.sock", root);
        snprintf(reg_sock, sizeof(reg_sock), "%s/reg.sock", root);
        {
                char p[128];

                snprintf(p, sizeof(p), "%s/dev", dev_root);
                mkdir(p, 0700);
                snprintf(p, sizeof(p), "%s/dev/nvidiactl", dev_root);
                fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
                if (fd < 0)
                        die("%s: %s", p, strerror(errno));
                close(fd);
        }
        discover();
        if (getenv("KDEV_FUZZ_DRA_DEVICES"))
                list_devices();
        verbose = getenv("KDEV_FUZZ_DRA_VERBOSE") != NULL;
        struct kdev_dra_plugin_options o = {
                .driver = DRIVER,
                .pool = POOL,
                .data_dir = data_dir,
                .cdi_dir = cdi_dir,
                .dev_root = dev_root,
                .proc_root = proc_root,
                .gpus = &recs,
                .get_claim = fake_source,
                .on_claim = on_claim,
        };
        if (uv_loop_init(&loop) < 0 || kdev_dra_plugin_new(&o, &plugin, &err) < 0)
                die("plugin: %s", err.msg);
        /* gpu-7 (a whole GPU) and GPU 0's first MIG device are withdrawn */
        const char *unhealthy[2] = {NULL, NULL};
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];

                if (g->minor == 7)
                        unhealthy[0] = g->uuid;
                if (g->minor == 0 && g->n_migs > 0)
                        unhealthy[1] = g->migs[0].uuid;
        }
        if (!unhealthy[0] || !unhealthy[1])
                die("topology %s lacks gpu-7 or GPU 0's MIG devices", TOPOLOGY);
        if (kdev_dra_plugin_set_unhealthy(plugin, unhealthy, 2, &err) < 0 ||
            kdev_dra_plugin_start(plugin, &loop, dra_sock, reg_sock, &err) < 0)
                die("plugin: %s", err.msg);
        cl = kdev_rpc_client_new(&loop, dra_sock, NULL);
        if (!cl)
                abort();
}

/* ---- calls ------------------------------------------------------------------ */

struct result {
        bool done;
        int status;
        char message[256];
        uint8_t *msg; /* the answer */
        size_t msg_len;
        size_t n_msgs;
};

static void on_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                       void *user_data)
{
        struct result *r = user_data;

        (void)call;
        if (r->n_msgs++ == 0) {
                r->msg = malloc(len ? len : 1);
                if (!r->msg)
                        abort();
                memcpy(r->msg, msg, len);
                r->msg_len = len;
        }
}

static void on_done(struct kdev_rpc_client_call *call, int status, const char *message,
                    void *user_data)
{
        struct result *r = user_data;

        (void)call;
        r->done = true;
        r->status = status;
        snprintf(r->message, sizeof(r->message), "%s", message);
}

static void run_call(const char *method, const uint8_t *req, size_t len, struct result *r)
{
        struct kdev_err err = {0};

        for (int attempt = 0; attempt < 2; attempt++) {
                memset(r, 0, sizeof(*r));
                events = 0;
                if (!kdev_rpc_client_call(cl, method, req, len, 0, on_message, on_done, r, &err))
                        die("client call: %s", err.msg);
                while (!r->done)
                        uv_run(&loop, UV_RUN_ONCE);
                if (r->status != KDEV_RPC_UNAVAILABLE)
                        return;
                free(r->msg); /* connection dropped: the client dials again */
        }
}

/* One answer of either version, in version-neutral form. */
struct answer {
        size_t n;
        const char **uid, **error;
        size_t *n_devices;
        char ***dev, ***cdi; /* [claim][device]: device name, its one CDI ID */
        size_t **n_cdi;
        ProtobufCMessage *m;
};

static void answer_free(struct answer *a)
{
        for (size_t i = 0; i < a->n; i++) {
                free(a->dev[i]);
                free(a->cdi[i]);
                free(a->n_cdi[i]);
        }
        free(a->uid);
        free(a->error);
        free(a->n_devices);
        free(a->dev);
        free(a->cdi);
        free(a->n_cdi);
        if (a->m)
                protobuf_c_message_free_unpacked(a->m, NULL);
        memset(a, 0, sizeof(*a));
}

static void answer_alloc(struct answer *a, size_t n)
{
        a->n = n;
        a->uid = calloc(n + 1, sizeof(*a->uid));
        a->error = calloc(n + 1, sizeof(*a->error));
        a->n_devices = calloc(n + 1, sizeof(*a->n_devices));
        a->dev = calloc(n + 1, sizeof(*a->dev));
        a->cdi = calloc(n + 1, sizeof(*a->cdi));
        a->n_cdi = calloc(n + 1, sizeof(*a->n_cdi));
        if (!a->uid || !a->error || !a->n_devices || !a->dev || !a->cdi || !a->n_cdi)
                abort();
}

#define DEVICES_OF(one, a, i)                                                              \
        do {                                                                               \
                size_t nd_ = (one) ? (one)->n_devices : 0;                                 \
                (a)->error[i] = (one) && (one)->error && *(one)->error ? (one)->error : NULL; \
                (a)->n_devices[i] = nd_;                                                   \
                (a)->dev[i] = calloc(nd_ + 1, sizeof(char *));                             \
                (a)->cdi[i] = calloc(nd_ + 1, sizeof(char *));                             \
                (a)->n_cdi[i] = calloc(nd_ + 1, sizeof(size_t));                           \
                if (!(a)->dev[i] || !(a)->cdi[i] || !(a)->n_cdi[i])                        \
                        abort();                                                           \
                for (size_t k_ = 0; k_ < nd_; k_++) {                                      \
                        (a)->dev[i][k_] = (one)->devices[k_]->device_name;                 \
                        (a)->n_cdi[i][k_] = (one)->devices[k_]->n_cdi_device_ids;          \
                        (a)->cdi[i][k_] = (one)->devices[k_]->n_cdi_device_ids             \
                                                  ? (one)->devices[k_]->cdi_device_ids[0]  \
                                                  : NULL;                                  \
                        if (strcmp((one)->devices[k_]->pool_name, POOL) ||                 \
                            (one)->devices[k_]->n_request_names == 0)                      \
                                die("claim %s: device %s without pool or request names",   \
                                    (a)->uid[i], (a)->dev[i][k_]);                         \
                }                                                                          \
        } while (0)

/* Decodes a NodePrepareResourcesResponse (|prepare|) or
 * NodeUnprepareResourcesResponse of version |v1|. */
static void decode(bool v1, bool prepare, const struct result *r, struct answer *a)
{
        memset(a, 0, sizeof(*a));
        if (v1 && prepare) {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *m =
                        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                                NULL, r->msg_len, r->msg);
                if (!m)
                        die("answer is not a v1 NodePrepareResourcesResponse");
                a->m = &m->base;
                answer_alloc(a, m->n_claims);
                for (size_t i = 0; i < m->n_claims; i++) {
                        a->uid[i] = m->claims[i]->key;
                        DEVICES_OF(m->claims[i]->value, a, i);
                        for (size_t k = 0; k < a->n_devices[i]; k++)
                                if (m->claims[i]->value->devices[k]->share_id_presence_case !=
                                    K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_ID_PRESENCE__NOT_SET)
                                        die("claim %s: device %s has a share_id", a->uid[i],
                                            a->dev[i][k]);
                }
        } else if (prepare) {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse *m =
                        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__unpack(
                                NULL, r->msg_len, r->msg);
                if (!m)
                        die("answer is not a v1beta1 NodePrepareResourcesResponse");
                a->m = &m->base;
                answer_alloc(a, m->n_claims);
                for (size_t i = 0; i < m->n_claims; i++) {
                        a->uid[i] = m->claims[i]->key;
                        DEVICES_OF(m->claims[i]->value, a, i);
                }
        } else if (v1) {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *m =
                        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
                                NULL, r->msg_len, r->msg);
                if (!m)
                        die("answer is not a v1 NodeUnprepareResourcesResponse");
                a->m = &m->base;
                answer_alloc(a, m->n_claims);
                for (size_t i = 0; i < m->n_claims; i++) {
                        a->uid[i] = m->claims[i]->key;
                        a->error[i] = m->claims[i]->value && m->claims[i]->value->error &&
                                                      *m->claims[i]->value->error
                                              ? m->claims[i]->value->error
                                              : NULL;
                }
        } else {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesResponse *m =
                        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_response__unpack(
                                NULL, r->msg_len, r->msg);
                if (!m)
                        die("answer is not a v1beta1 NodeUnprepareResourcesResponse");
                a->m = &m->base;
                answer_alloc(a, m->n_claims);
                for (size_t i = 0; i < m->n_claims; i++) {
                        a->uid[i] = m->claims[i]->key;
                        a->error[i] = m->claims[i]->value && m->claims[i]->value->error &&
                                                      *m->claims[i]->value->error
                                              ? m->claims[i]->value->error
                                              : NULL;
                }
        }
}

/* ---- checks ------------------------------------------------------------------ */

static size_t distinct_uids(const PrepReq *rq)
{
        size_t n = 0;

        for (size_t i = 0; i < rq->n_claims; i++) {
                size_t j = 0;

                while (j < i && strcmp(rq->claims[j]->uid, rq->claims[i]->uid))
                        j++;
                n += j == i;
        }
        return n;
}

static size_t dir_entries(const char *path, const char *except)
{
        size_t n = 0;
        DIR *d = opendir(path);
        struct dirent *e;

        if (!d)
                die("opendir %s: %s", path, strerror(errno));
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                    (!except || strcmp(e->d_name, except)))
                        n++;
        closedir(d);
        return n;
}

/* Whether two distinct UIDs of |rq| share a spec file name (the transient
 * name maps '/' to '_', so "a/b" and "a_b" do): their specs overwrite each
 * other, so the per-claim spec content check is skipped for such requests
 * until the file name is an injective function of the UID. */
static bool spec_names_collide(const PrepReq *rq)
{
        char a[512], b[512];

        for (size_t i = 0; i < rq->n_claims; i++)
                for (size_t j = 0; j < i; j++)
                        if (strcmp(rq->claims[i]->uid, rq->claims[j]->uid) &&
                            kdev_cdi_transient_file_name(KDEV_DRA_CDI_KIND, rq->claims[i]->uid, a,
                                                         sizeof(a), NULL) > 0 &&
                            kdev_cdi_transient_file_name(KDEV_DRA_CDI_KIND, rq->claims[j]->uid, b,
                                                         sizeof(b), NULL) > 0 &&
                            !strcmp(a, b))
                                return true;
        return false;
}

static void check_prepared(const PrepReq *rq, const struct answer *a, bool check_specs)
{
        char path[4096], want[1024];

        if (a->n != distinct_uids(rq) || events != a->n)
                die("%zu answers and %zu on_claim events for %zu distinct claim UIDs", a->n,
                    events, distinct_uids(rq));
        for (size_t i = 0; i < a->n; i++) {
                bool found = false;

                for (size_t j = 0; j < rq->n_claims && !found; j++)
                        found = !strcmp(rq->claims[j]->uid, a->uid[i]);
                for (size_t j = 0; j < i; j++)
                        if (!strcmp(a->uid[j], a->uid[i]))
                                die("claim %s answered twice", a->uid[i]);
                if (!found)
                        die("answer for claim %s that was not requested", a->uid[i]);
                int sp = kdev_dra_claim_spec_path(plugin, a->uid[i], path, sizeof(path), NULL);
                if (verbose) {
                        printf("  %s:", a->uid[i]);
                        for (size_t k = 0; k < a->n_devices[i]; k++)
                                printf(" %s", a->cdi[i][k] ? a->cdi[i][k] : a->dev[i][k]);
                        printf("%s%s\n", a->error[i] ? " error: " : "",
                               a->error[i] ? a->error[i] : "");
                }
                if (a->error[i]) {
                        if (a->n_devices[i])
                                die("claim %s failed (%s) but has devices", a->uid[i],
                                    a->error[i]);
                        if (sp > 0 && access(path, F_OK) == 0 && !spec_names_collide(rq))
                                die("claim %s failed but its spec %s exists", a->uid[i], path);
                        continue;
                }
                if (a->n_devices[i] == 0)
                        die("claim %s prepared without devices", a->uid[i]);
                if (sp < 0)
                        die("claim %s prepared but has no spec path", a->uid[i]);
                struct kdev_cdi_spec *spec = NULL;
                struct kdev_err err = {0};
                if (kdev_cdi_spec_read(path, &spec, &err) < 0)
                        die("claim %s: %s", a->uid[i], err.msg);
                for (size_t k = 0; k < a->n_devices[i]; k++) {
                        snprintf(want, sizeof(want), CDI_PREFIX "%s-%s", a->uid[i], a->dev[i][k]);
                        if (a->n_cdi[i][k] != 1 || strcmp(a->cdi[i][k], want))
                                die("claim %s: CDI device ID is not %s", a->uid[i], want);
                        if (check_specs &&
                            !kdev_cdi_spec_find_device(spec, want + strlen(CDI_PREFIX)))
                                die("claim %s: its spec lacks CDI device %s", a->uid[i], want);
                }
                kdev_cdi_spec_free(spec);
        }
}

static bool same_answer(const struct answer *a, const struct answer *b)
{
        if (a->n != b->n)
                return false;
        for (size_t i = 0; i < a->n; i++) {
                if (strcmp(a->uid[i], b->uid[i]) || !a->error[i] != !b->error[i] ||
                    a->n_devices[i] != b->n_devices[i])
                        return false;
                for (size_t k = 0; k < a->n_devices[i]; k++)
                        if (strcmp(a->dev[i][k], b->dev[i][k]) || strcmp(a->cdi[i][k], b->cdi[i][k]))
                                return false;
        }
        return true;
}

static bool prepared_ok(const struct answer *a, const char *uid)
{
        for (size_t i = 0; i < a->n; i++)
                if (!strcmp(a->uid[i], uid))
                        return !a->error[i];
        return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!plugin)
                setup();
        if (size < 1)
                return 0;
        bool v1 = data[0] & 1, twice = data[0] & 2, wipe = data[0] & 4;
        const uint8_t *req = data + 1;
        size_t len = size - 1;
        const char *prep = v1 ? KDEV_DRA_V1_PREPARE : KDEV_DRA_V1BETA1_PREPARE;
        const char *unprep = v1 ? KDEV_DRA_V1_UNPREPARE : KDEV_DRA_V1BETA1_UNPREPARE;
        PrepReq *rq = k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__unpack(
                NULL, len, req);
        struct result r;
        struct answer first, again;

        current = rq;
        run_call(prep, req, len, &r);
        if (!rq) {
                if (r.status != KDEV_RPC_INVALID_ARGUMENT || r.n_msgs)
                        die("undecodable request ended %s: %s", kdev_rpc_status_name(r.status),
                            r.message);
                free(r.msg);
                return 0;
        }
        if (r.status != KDEV_RPC_OK || r.n_msgs != 1)
                die("NodePrepareResources ended %s: %s", kdev_rpc_status_name(r.status),
                    r.message);
        bool check_specs = !spec_names_collide(rq);
        decode(v1, true, &r, &first);
        free(r.msg);
        check_prepared(rq, &first, check_specs);
        size_t ok = 0;
        for (size_t i = 0; i < first.n; i++)
                ok += !first.error[i];
        if (!check_specs)
                ; /* colliding spec names: a claim may count twice */
        else if (kdev_dra_plugin_prepared(plugin) != ok)
                die("%zu claims recorded after prepare, %zu prepared",
                    kdev_dra_plugin_prepared(plugin), ok);

        if (twice) {
                if (wipe)
                        for (size_t i = 0; i < first.n; i++) {
                                char path[4096];

                                if (kdev_dra_claim_spec_path(plugin, first.uid[i], path,
                                                             sizeof(path), NULL) > 0)
                                        unlink(path);
                        }
                run_call(prep, req, len, &r);
                if (r.status != KDEV_RPC_OK || r.n_msgs != 1)
                        die("second NodePrepareResources ended %s: %s",
                            kdev_rpc_status_name(r.status), r.message);
                decode(v1, true, &r, &again);
                free(r.msg);
                check_prepared(rq, &again, check_specs);
                /* a claim prepared stays prepared with the same devices; one
                 * that failed is read again and fails again (same source) */
                if (!same_answer(&first, &again))
                        die("second NodePrepareResources answered differently");
                answer_free(&again);
        }

        /* NodeUnprepareResources of the same claims */
        UnprepReq u = K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
        u.claims = rq->claims;
        u.n_claims = rq->n_claims;
        size_t ulen = k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__get_packed_size(&u);
        uint8_t *ubuf = malloc(ulen ? ulen : 1);
        if (!ubuf)
                abort();
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__pack(&u, ubuf);
        run_call(unprep, ubuf, ulen, &r);
        free(ubuf);
        if (r.status != KDEV_RPC_OK || r.n_msgs != 1)
                die("NodeUnprepareResources ended %s: %s", kdev_rpc_status_name(r.status),
                    r.message);
        struct answer un;
        decode(v1, false, &r, &un);
        free(r.msg);
        if (un.n != distinct_uids(rq) || events != un.n)
                die("%zu unprepare answers and %zu on_claim events for %zu distinct claim UIDs",
                    un.n, events, distinct_uids(rq));
        for (size_t i = 0; i < un.n; i++)
                if (un.error[i] && prepared_ok(&first, un.uid[i]))
                        die("unprepare of prepared claim %s failed: %s", un.uid[i], un.error[i]);
        if (kdev_dra_plugin_prepared(plugin) != 0)
                die("claims still recorded after unprepare");
        if (dir_entries(cdi_dir, NULL) != 0)
                die("files left in the CDI dir %s after unprepare", cdi_dir);
        if (dir_entries(data_dir, KDEV_DRA_CP_FILE) != 0)
                die("files left in the data dir %s besides the checkpoint", data_dir);
        answer_free(&un);
        answer_free(&first);
        current = NULL;
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__free_unpacked(rq,
                                                                                                 NULL);
        return 0;
}
