/* kdev-dra-plugin: the DRA kubelet plugin daemon for NVIDIA GPUs. Thin:
 * parses flags, discovers the GPUs through NVML, publishes them as the node's
 * ResourceSlice pool (src/dra/slices.h) and serves plugin registration and
 * the DRAPlugin services (src/dra/plugin.h).
 *
 * API access never blocks the event loop: slice reconciles run on libuv's
 * thread pool with their own client and a snapshot of the desired devices,
 * one at a time (changes meanwhile coalesce into one follow-up; SIGTERM
 * aborts a reconcile in flight); claim reads of NodePrepareResources run on
 * the thread pool with another client. NodePrepareResources refuses a
 * device currently withdrawn as unhealthy.
 *
 * Known limits (documented in --help too):
 *   - on SIGTERM/SIGINT the sockets are removed but the ResourceSlices are
 *     left in place (a restarted plugin reconciles them; a node that goes
 *     away takes them with it through the owner reference);
 *   - the GPU set is discovered once at start. Health: NVIDIA's XID monitor
 *     (src/nvidia/health.h) runs over the GPUs as whole devices (NVIDIA
 *     resources built with migStrategy none), so a critical XID withdraws
 *     the GPU with all its MIG devices (never a single MIG device); the
 *     slices are rebuilt and reconciled at once on every health change, and
 *     recovered GPUs come back. DP_DISABLE_HEALTHCHECKS /
 *     DP_ENABLE_HEALTHCHECKS select the XIDs as for kdev-plugin. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <uv.h>

#include "common/dir.h"
#include "common/err.h"
#include "common/log.h"
#include "common/version.h"
#include "dra/plugin.h"
#include "dra/slices.h"
#include "kube/kube.h"
#include "nvidia/config.h"
#include "nvidia/driver_files.h"
#include "nvidia/health.h"
#include "nvidia/resources.h"
#include "nvidia/xid.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

#define DEFAULT_REGISTRY "/var/lib/kubelet/plugins_registry"
#define DEFAULT_PLUGINS "/var/lib/kubelet/plugins"
#define DEFAULT_RESYNC_S 30.0
/* nvidia-container-toolkit's default nvidia-cdi-hook path (discover/hooks.go) */
#define DEFAULT_CDI_HOOK "/usr/bin/nvidia-cdi-hook"
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS 60000

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdev-dra-plugin [OPTIONS]\n"
                "\n"
                "DRA kubelet plugin for NVIDIA GPUs: publishes the node's GPUs as a\n"
                "ResourceSlice pool (pool name = node name), registers with kubelet through\n"
                "the plugins registry and prepares allocated ResourceClaims as CDI devices.\n"
                "\n"
                "Options:\n"
                "      --driver-name NAME          DRA driver name\n"
                "                                  (default " KDEV_DRA_PLUGIN_DEFAULT_DRIVER ")\n"
                "      --node-name NAME            node name (default: $NODE_NAME)\n"
                "      --plugins-registry DIR      kubelet's plugin registry\n"
                "                                  (default " DEFAULT_REGISTRY ")\n"
                "      --plugin-dir DIR            DRA socket (dra.sock) and claim checkpoint\n"
                "                                  (default " DEFAULT_PLUGINS "/<driver>)\n"
                "      --cdi-dir DIR               CDI spec directory\n"
                "                                  (default " KDEV_DRA_DEFAULT_CDI_DIR ")\n"
                "      --kubeconfig FILE           API server access (default: in-cluster)\n"
                "      --resource-api-version V    resource.k8s.io version: v1 (default) or\n"
                "                                  v1beta1\n"
                "      --driver-root DIR           NVIDIA driver root (default /)\n"
                "      --nvidia-cdi-hook-path PATH nvidia-cdi-hook (or nvidia-ctk) for the\n"
                "                                  claim CDI specs' hooks, used when it exists\n"
                "                                  (default " DEFAULT_CDI_HOOK ")\n"
                "      --proc-root DIR             where driver/nvidia-caps/mig-minors is read\n"
                "                                  for MIG devices (default /proc)\n"
                "      --health-probe-interval S   seconds between recovery probes of an\n"
                "                                  unhealthy GPU (default 10)\n"
                "      --health-quiet-period S     seconds without critical XID before an\n"
                "                                  unhealthy GPU counts as recovered (default 60)\n"
                "      --log-level LEVEL           debug, info, warn or error (default info);\n"
                "                                  logs go to stderr, one line per event\n"
                "      --log-format FORMAT         text (key=value, default) or json (JSON\n"
                "                                  lines)\n"
                "  -h, --help                      show this help\n"
                "      --version                   print the version\n"
                "\n"
                "The slices are reconciled at start (retried with backoff on errors) and every\n"
                "KDEV_DRA_RESYNC_SECONDS (default 30), so slices deleted by others come back.\n"
                "Reconciles run on a worker thread: a slow API server never delays kubelet's\n"
                "calls. NodePrepareResources refuses a device withdrawn as unhealthy.\n"
                "\n"
                "Environment:\n"
                "  NODE_NAME                 default of --node-name (one of the two is required)\n"
                "  KDEV_DRA_RESYNC_SECONDS   seconds between slice reconciles (default 30)\n"
                "  KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT\n"
                "                            in-cluster API server address (without --kubeconfig)\n"
                "  NVIDIA_CDI_HOOK_PATH      default of --nvidia-cdi-hook-path\n"
                "  DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS\n"
                "                            XIDs that mark a GPU unhealthy, as for kdev-plugin\n"
                "\n"
                "Files:\n"
                "  PLUGINS-REGISTRY/<driver>-reg.sock  registration socket kubelet watches\n"
                "  PLUGIN-DIR/dra.sock                 DRAPlugin service (v1 and v1beta1)\n"
                "  PLUGIN-DIR/dra-claims.json          checkpoint of the prepared claims\n"
                "  CDI-DIR/k8s.<driver>-claim_<uid>.json  CDI spec of each prepared claim\n"
                "  /var/run/secrets/kubernetes.io/serviceaccount/  in-cluster token and CA\n"
                "\n"
                "Signals: SIGTERM and SIGINT stop cleanly: the sockets are removed, the\n"
                "ResourceSlices and prepared claims are left in place.\n"
                "\n"
                "Exit status: 0 stopped by a signal, or --help/--version; 1 start-up failure\n"
                "(NVML, API server access, sockets, checkpoint); 2 usage error.\n"
                "\n"
                "Example:\n"
                "  kdev-dra-plugin --node-name node-1 --kubeconfig ~/.kube/config \\\n"
                "      --log-format json\n");
}

struct daemon {
        uv_loop_t loop;
        uv_signal_t sigterm;
        uv_signal_t sigint;
        uv_timer_t sockets_timer;
        uv_timer_t slices_timer;
        struct kdev_dra_plugin *plugin;
        struct kdev_kube *kube_slices; /* the reconcile worker only */
        struct kdev_kube *kube_claims; /* the plugin's claim source (thread pool) */
        json_t *devices;
        const struct kdev_gpu_set *gpus;
        struct kdev_resource_set health_set;  /* the GPUs as NVIDIA resources */
        struct kdev_nvidia_health *health;
        struct kdev_dra_pool pool;
        uint64_t resync_ms;
        uint64_t backoff_ms;
        long long generation;          /* last reconciled, -1 before the first */
        bool slices_ok;                /* last reconcile succeeded */
        struct reconcile_job *job;     /* reconcile in flight, or NULL */
        bool again;                    /* reconcile requested while one was in flight */
        bool stopping;
        /* per-claim lines: a client repeating the same call within 5 s gets
         * one line per window (common/log.h); flushed by sockets_timer */
        struct kdev_log_limiter *claim_log;
};

static void xid_warn(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn(msg);
}

/* "a,b,c" of the strings at |key| of each record of |devices| (a string
 * key) or of each string of the array at |key| (an array key). Caller frees;
 * NULL when out of memory. */
static char *join_records(const json_t *devices, const char *key)
{
        char *out = NULL;
        size_t len = 0, i, k;
        const json_t *d, *v;
        FILE *f = open_memstream(&out, &len);
        bool first = true;

        if (!f)
                return NULL;
        json_array_foreach(devices, i, d) {
                const json_t *x = json_object_get(d, key);

                if (json_is_string(x)) {
                        fprintf(f, "%s%s", first ? "" : ",", json_string_value(x));
                        first = false;
                }
                json_array_foreach(x, k, v) {
                        fprintf(f, "%s%s", first ? "" : ",", json_string_value(v));
                        first = false;
                }
        }
        if (fclose(f) != 0) {
                free(out);
                return NULL;
        }
        return out;
}

/* One log line per claim prepared or unprepared (plugin.h on_claim):
 *   info "claim prepared" / "claim already prepared" (answered from the
 *        checkpoint) / "claim unprepared" / "claim unprepared (was not
 *        prepared)" with claim=<ns>/<name> uid= devices=<names,...>
 *        cdi_devices=<CDI device IDs,...> (the last two not for an unknown
 *        claim unprepared);
 *   warn "claim prepare failed" / "claim unprepare failed" with claim= uid=
 *        error=.
 * Identical lines within 5 s are counted and summed up (common/log.h). */
static void on_claim(void *arg, const struct kdev_dra_claim_event *ev)
{
        struct daemon *d = arg;
        char claim[512];

        snprintf(claim, sizeof(claim), "%s/%s", ev->ns, ev->name);
        if (ev->error) {
                kdev_log_limited(d->claim_log, 1, KDEV_LOG_WARN,
                                 ev->prepare ? "claim prepare failed" : "claim unprepare failed",
                                 "claim", claim, "uid", ev->uid, "error", ev->error, NULL);
                return;
        }
        if (!ev->prepare && !ev->recorded) {
                kdev_log_limited(d->claim_log, 1, KDEV_LOG_INFO,
                                 "claim unprepared (was not prepared)", "claim", claim, "uid",
                                 ev->uid, NULL);
                return;
        }
        char *devs = join_records(ev->devices, "device");
        char *cdis = join_records(ev->devices, "cdiDeviceIDs");
        const char *msg = !ev->prepare   ? "claim unprepared"
                          : ev->recorded ? "claim already prepared"
                                         : "claim prepared";

        kdev_log_limited(d->claim_log, 1, KDEV_LOG_INFO, msg, "claim", claim, "uid", ev->uid,
                         "devices", devs ? devs : "?", "cdi_devices", cdis ? cdis : "?", NULL);
        free(devs);
        free(cdis);
}

static void on_stale_temp(void *arg, const char *path, int error)
{
        (void)arg;
        if (error)
                kdev_log_warn("cannot remove a stale temporary file", "path", path, "error",
                              strerror(error));
        else
                kdev_log_info("removed a stale temporary file (an earlier run was killed while "
                              "writing it)",
                              "path", path);
}

static void on_status(void *arg, bool registered, const char *error)
{
        (void)arg;
        if (registered)
                kdev_log_info("registered with kubelet");
        else
                kdev_log_error("kubelet refused the registration", "error", error);
}

/* One slice reconcile on libuv's thread pool. The worker uses only
 * d->kube_slices (no other thread touches that client), the pool description
 * (immutable while running) and |devices|, its own deep copy of the desired
 * devices; everything else happens on the loop thread in reconcile_done. */
struct reconcile_job {
        uv_work_t work;
        struct daemon *d;
        json_t *devices;
        struct kdev_dra_reconcile_result res;
        struct kdev_err err;
        int rc;
};

static void start_reconcile(uv_timer_t *t);

static void reconcile_work(uv_work_t *w)
{
        struct reconcile_job *job = w->data;
        job->rc = kdev_dra_slices_reconcile(job->d->kube_slices, &job->d->pool, job->devices,
                                            &job->res, &job->err);
}

static void reconcile_done(uv_work_t *w, int status)
{
        struct reconcile_job *job = w->data;
        struct daemon *d = job->d;
        uint64_t next;

        d->job = NULL;
        if (status == UV_ECANCELED || d->stopping)
                goto out;
        if (job->rc < 0) {
                char delay[32];
                snprintf(delay, sizeof(delay), "%llus",
                         (unsigned long long)(d->backoff_ms / 1000));
                kdev_log_error("cannot publish the ResourceSlices", "error", job->err.msg,
                               "retry_in", delay);
                next = d->backoff_ms;
                d->backoff_ms = d->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                   : d->backoff_ms * 2;
                d->slices_ok = false;
        } else {
                const struct kdev_dra_reconcile_result *res = &job->res;
                if (res->changed || !d->slices_ok || res->generation != d->generation) {
                        char gen[32], n[32], c[64];
                        snprintf(gen, sizeof(gen), "%lld", res->generation);
                        snprintf(n, sizeof(n), "%u", res->slices);
                        snprintf(c, sizeof(c), "%u/%u/%u", res->created, res->updated,
                                 res->deleted);
                        kdev_log_info("ResourceSlices published", "pool", d->pool.node,
                                      "generation", gen, "slices", n,
                                      "created/updated/deleted", c);
                }
                d->generation = res->generation;
                d->slices_ok = true;
                d->backoff_ms = BACKOFF_FIRST_MS;
                next = d->resync_ms;
        }
        /* devices changed while this one ran: one follow-up, now */
        if (d->again) {
                d->again = false;
                next = 0;
        }
        uv_timer_start(&d->slices_timer, start_reconcile, next, 0);
out:
        json_decref(job->devices);
        free(job);
}

/* Timer: reconcile the slices off the loop, one at a time; a request while
 * one is in flight is coalesced into a single follow-up. */
static void start_reconcile(uv_timer_t *t)
{
        struct daemon *d = t->data;
        struct reconcile_job *job;
        int r = UV_ENOMEM;

        if (d->stopping)
                return;
        if (d->job) {
                d->again = true;
                return;
        }
        job = calloc(1, sizeof(*job));
        if (job) {
                job->d = d;
                job->work.data = job;
                job->devices = json_deep_copy(d->devices);
                if (job->devices)
                        r = uv_queue_work(&d->loop, &job->work, reconcile_work, reconcile_done);
        }
        if (r < 0) {
                if (job)
                        json_decref(job->devices);
                free(job);
                kdev_log_error("cannot start a ResourceSlice reconcile", "error", uv_strerror(r));
                uv_timer_start(&d->slices_timer, start_reconcile, d->backoff_ms, 0);
                return;
        }
        d->job = job;
        d->again = false;
}

/* Health changed: rebuild the devices without the unhealthy GPUs and, when
 * they differ, reconcile the slices now. */
static void on_health(void *arg, const char *resource)
{
        struct daemon *d = arg;
        const char **bad = NULL;
        size_t n = 0, cap = 0;
        json_t *devs = NULL;
        struct kdev_err err = {0};

        (void)resource;
        if (d->stopping)
                return;
        for (size_t i = 0; i < d->health_set.n_resources; i++) {
                const struct kdev_resource *r = &d->health_set.resources[i];
                for (size_t j = 0; j < r->n_devices; j++) {
                        const struct kdev_nvidia_devinfo *info =
                                kdev_nvidia_device_info(r, &r->devices[j]);
                        if (r->devices[j].healthy || !info)
                                continue;
                        if (n == cap) {
                                size_t ncap = cap ? cap * 2 : 8;
                                const char **nb = realloc(bad, ncap * sizeof(*bad));
                                if (!nb) {
                                        free(bad);
                                        kdev_log_error("health update dropped: out of memory");
                                        return;
                                }
                                bad = nb;
                                cap = ncap;
                        }
                        bad[n++] = info->uuid;
                }
        }
        /* NodePrepareResources refuses what is withdrawn */
        if (kdev_dra_plugin_set_unhealthy(d->plugin, bad, n, &err) < 0) {
                free(bad);
                kdev_log_error("health update dropped", "error", err.msg);
                return;
        }
        struct kdev_dra_health h = {.unhealthy = bad, .n_unhealthy = n};
        int rc = kdev_dra_build_devices(d->gpus, &h, &devs, &err);
        free(bad);
        if (rc < 0) {
                kdev_log_error("health update dropped", "error", err.msg);
                return;
        }
        if (json_equal(devs, d->devices)) {
                json_decref(devs);
                return;
        }
        char nb[32], nd[32];
        snprintf(nb, sizeof(nb), "%zu", n);
        snprintf(nd, sizeof(nd), "%d", rc);
        kdev_log_info("device health changed", "unhealthy_gpus", nb, "devices", nd);
        json_decref(d->devices);
        d->devices = devs;
        d->backoff_ms = BACKOFF_FIRST_MS;
        uv_timer_start(&d->slices_timer, start_reconcile, 0, 0);
}

static void check_sockets(uv_timer_t *t)
{
        struct daemon *d = t->data;
        struct kdev_err err = {0};
        kdev_log_limiter_flush(d->claim_log, false);
        int r = kdev_dra_plugin_check_sockets(d->plugin, &err);
        if (r < 0)
                kdev_log_error("cannot re-create the plugin sockets", "error", err.msg);
        else if (r > 0)
                kdev_log_warn("plugin socket vanished: re-created");
}

static void on_plugin_stopped(void *arg)
{
        struct daemon *d = arg;
        kdev_nvidia_health_stop(d->health, NULL, NULL);
        d->health = NULL;
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct daemon *d = h->data;
        if (d->stopping)
                return;
        d->stopping = true;
        kdev_log_info("stopping", "signal", signum == SIGTERM ? "SIGTERM" : "SIGINT");
        uv_close((uv_handle_t *)&d->sockets_timer, NULL);
        uv_close((uv_handle_t *)&d->slices_timer, NULL);
        /* a reconcile in flight: cancelled when still queued, otherwise its
         * requests abort (within about a second); the loop runs until its
         * done callback has freed it */
        if (d->job) {
                kdev_kube_abort(d->kube_slices);
                uv_cancel((uv_req_t *)&d->job->work);
        }
        /* claim reads of NodePrepareResources in flight: the plugin stops
         * once they are done, so make them fail now rather than after their
         * retries (a pod's grace period is 30 s by default) */
        kdev_kube_abort(d->kube_claims);
        kdev_dra_plugin_stop(d->plugin, on_plugin_stopped, d);
}

/* mkdir -p |path|: new components get exactly |mode|, whatever the umask. */
static int mkdirs(const char *path, mode_t mode, const char *what, struct kdev_err *err)
{
        int r = kdev_dir_create_all(path, mode, what, err);
        return r < 0 ? r : 0;
}

/* Looks up the driver files for the claim CDI specs under |root| and logs
 * what was found (nvidia/driver_files.h). Returns as
 * kdev_nvidia_driver_files_find. */
static int driver_files_find(const char *root, const char *version, const char *hook,
                             struct kdev_nvidia_driver_files *out, struct kdev_err *err)
{
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = root, .driver_version = version, .hook_path = hook};
        char msg[PATH_MAX + 256], n[32];
        int rc = kdev_nvidia_driver_files_find(&o, out, err);
        if (rc < 0)
                return rc;
        if (rc == 0) {
                snprintf(msg, sizeof(msg),
                         "no driver libraries found under %s for driver %s; containers will "
                         "need the NVIDIA container runtime to inject them",
                         root, version);
                kdev_log_warn(msg);
        } else {
                snprintf(n, sizeof(n), "%d", rc);
                kdev_log_info("claim CDI specs: driver files", "libraries", n, "hooks",
                              out->hook_path ? out->hook_path : "none");
        }
        return rc;
}

/* Seconds from |name| (default |def|), 0 < s <= 86400 (fractions allowed). */
static int env_seconds(const char *name, double def, uint64_t *ms, struct kdev_err *err)
{
        const char *v = getenv(name);
        double s = def;
        if (v && *v) {
                char *end = NULL;
                s = strtod(v, &end);
                if (*end || !(s > 0 && s <= 86400))
                        return kdev_err_set(err, EINVAL,
                                            "invalid %s \"%s\": want seconds greater than 0 "
                                            "and at most 86400",
                                            name, v);
        }
        *ms = (uint64_t)(s * 1000.0);
        if (*ms == 0)
                *ms = 1;
        return 0;
}

/* Whether |s| is a Kubernetes DNS subdomain (IsDNS1123Subdomain: lower-case
 * alphanumeric labels, '-' inside a label, '.' between labels) of at most
 * |max| characters: object names (253), DRA driver names (63). */
static bool dns_subdomain(const char *s, size_t max)
{
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool an = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                bool edge = i == 0 || i == n - 1 || s[i - 1] == '.' || s[i + 1] == '.';
                if (an)
                        continue;
                if ((c == '-' || c == '.') && !edge)
                        continue;
                return false;
        }
        return true;
}

/* Whole seconds 1..KDEV_NVIDIA_HEALTH_SECONDS_MAX of flag --|flag|; prints
 * the usage error and returns false when |v| is not. */
static bool flag_seconds(const char *flag, const char *v)
{
        char *end = NULL;
        unsigned long long u;
        errno = 0;
        u = strtoull(v, &end, 10);
        if (*v >= '0' && *v <= '9' && !*end && errno == 0 && u >= 1 &&
            u <= KDEV_NVIDIA_HEALTH_SECONDS_MAX)
                return true;
        fprintf(stderr, "kdev-dra-plugin: invalid --%s \"%s\": want whole seconds between 1 "
                        "and %u\n", flag, v, (unsigned)KDEV_NVIDIA_HEALTH_SECONDS_MAX);
        return false;
}

enum {
        OPT_DRIVER = 256,
        OPT_NODE,
        OPT_REGISTRY,
        OPT_PLUGIN_DIR,
        OPT_CDI_DIR,
        OPT_KUBECONFIG,
        OPT_API_VERSION,
        OPT_DRIVER_ROOT,
        OPT_CDI_HOOK,
        OPT_PROC_ROOT,
        OPT_PROBE,
        OPT_QUIET,
        OPT_LEVEL,
        OPT_FORMAT,
        OPT_VERSION,
};

static const struct option longopts[] = {
        {"driver-name", required_argument, NULL, OPT_DRIVER},
        {"node-name", required_argument, NULL, OPT_NODE},
        {"plugins-registry", required_argument, NULL, OPT_REGISTRY},
        {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"cdi-dir", required_argument, NULL, OPT_CDI_DIR},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"resource-api-version", required_argument, NULL, OPT_API_VERSION},
        {"driver-root", required_argument, NULL, OPT_DRIVER_ROOT},
        {"nvidia-cdi-hook-path", required_argument, NULL, OPT_CDI_HOOK},
        {"proc-root", required_argument, NULL, OPT_PROC_ROOT},
        {"health-probe-interval", required_argument, NULL, OPT_PROBE},
        {"health-quiet-period", required_argument, NULL, OPT_QUIET},
        {"log-level", required_argument, NULL, OPT_LEVEL},
        {"log-format", required_argument, NULL, OPT_FORMAT},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
};

int main(int argc, char **argv)
{
        /* First, once for the whole process: a peer (kubelet, a client, the
         * API server) that went away makes write(2) fail with EPIPE instead of
         * killing the daemon with SIGPIPE (src/rpc/rpc.h). */
        signal(SIGPIPE, SIG_IGN);
        const char *driver = KDEV_DRA_PLUGIN_DEFAULT_DRIVER;
        const char *node = getenv("NODE_NAME");
        const char *registry = DEFAULT_REGISTRY;
        const char *plugin_dir = NULL;
        const char *cdi_dir = KDEV_DRA_DEFAULT_CDI_DIR;
        const char *kubeconfig = NULL;
        const char *api_version = "v1";
        const char *driver_root = "/";
        const char *cdi_hook = getenv("NVIDIA_CDI_HOOK_PATH");
        const char *proc_root = "/proc";
        const char *probe_s = NULL, *quiet_s = NULL;
        enum kdev_log_level level = KDEV_LOG_INFO;
        bool json = false;
        int c, usage_status = -1;
        uint64_t resync_ms = 0;
        struct kdev_err uerr = {0};

        while (usage_status < 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                switch (c) {
                case OPT_DRIVER:
                        driver = optarg;
                        break;
                case OPT_NODE:
                        node = optarg;
                        break;
                case OPT_REGISTRY:
                        registry = optarg;
                        break;
                case OPT_PLUGIN_DIR:
                        plugin_dir = optarg;
                        break;
                case OPT_CDI_DIR:
                        cdi_dir = optarg;
                        break;
                case OPT_KUBECONFIG:
                        kubeconfig = optarg;
                        break;
                case OPT_API_VERSION:
                        if (strcmp(optarg, "v1") != 0 && strcmp(optarg, "v1beta1") != 0) {
                                fprintf(stderr, "kdev-dra-plugin: invalid --resource-api-version "
                                                "\"%s\": want v1 or v1beta1\n", optarg);
                                usage_status = 2;
                        }
                        api_version = optarg;
                        break;
                case OPT_DRIVER_ROOT:
                        driver_root = optarg;
                        break;
                case OPT_CDI_HOOK:
                        cdi_hook = optarg;
                        break;
                case OPT_PROC_ROOT:
                        proc_root = optarg;
                        break;
                case OPT_PROBE:
                        probe_s = optarg;
                        if (!flag_seconds("health-probe-interval", optarg))
                                usage_status = 2;
                        break;
                case OPT_QUIET:
                        quiet_s = optarg;
                        if (!flag_seconds("health-quiet-period", optarg))
                                usage_status = 2;
                        break;
                case OPT_LEVEL:
                        if (kdev_log_level_parse(optarg, &level) < 0) {
                                fprintf(stderr, "kdev-dra-plugin: invalid --log-level \"%s\": "
                                                "want " KDEV_LOG_LEVEL_VALUES "\n", optarg);
                                usage_status = 2;
                        }
                        break;
                case OPT_FORMAT:
                        if (kdev_log_format_parse(optarg, &json) < 0) {
                                fprintf(stderr, "kdev-dra-plugin: invalid --log-format \"%s\": "
                                                "want " KDEV_LOG_FORMAT_VALUES "\n", optarg);
                                usage_status = 2;
                        }
                        break;
                case 'h':
                        usage(stdout);
                        usage_status = 0;
                        break;
                case OPT_VERSION:
                        printf("kdev-dra-plugin %s\n", KDEV_VERSION);
                        usage_status = 0;
                        break;
                default: /* getopt_long printed the error */
                        usage_status = 2;
                }
        }
        if (usage_status < 0 && optind < argc) {
                fprintf(stderr, "kdev-dra-plugin: unexpected argument \"%s\"\n", argv[optind]);
                usage_status = 2;
        }
        if (usage_status < 0 && (!node || !*node)) {
                fprintf(stderr, "kdev-dra-plugin: no node name: set --node-name or NODE_NAME\n");
                usage_status = 2;
        }
        if (usage_status < 0 && !dns_subdomain(node, 253)) {
                fprintf(stderr, "kdev-dra-plugin: invalid node name \"%s\" (--node-name or "
                                "NODE_NAME): want a DNS subdomain of at most 253 characters "
                                "(lower-case letters, digits, '-' and '.')\n", node);
                usage_status = 2;
        }
        if (usage_status < 0 && !dns_subdomain(driver, 63)) {
                fprintf(stderr, "kdev-dra-plugin: invalid --driver-name \"%s\": want a DNS "
                                "subdomain of at most 63 characters (lower-case letters, "
                                "digits, '-' and '.')\n", driver);
                usage_status = 2;
        }
        if (usage_status < 0) {
                const struct {
                        const char *flag, *v;
                } dirs[] = {{"plugins-registry", registry}, {"plugin-dir", plugin_dir},
                            {"cdi-dir", cdi_dir},           {"kubeconfig", kubeconfig},
                            {"driver-root", driver_root},   {"proc-root", proc_root}};
                for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                        if (dirs[i].v && !*dirs[i].v) {
                                fprintf(stderr, "kdev-dra-plugin: --%s must not be empty\n",
                                        dirs[i].flag);
                                usage_status = 2;
                                break;
                        }
                }
        }
        if (usage_status < 0 &&
            env_seconds("KDEV_DRA_RESYNC_SECONDS", DEFAULT_RESYNC_S, &resync_ms, &uerr) < 0) {
                fprintf(stderr, "kdev-dra-plugin: %s\n", uerr.msg);
                usage_status = 2;
        }
        if (usage_status == 2)
                fprintf(stderr, "Run 'kdev-dra-plugin --help' for the options.\n");
        if (usage_status >= 0)
                return usage_status;
        kdev_log_setup(level, json);

        struct daemon d = {0};
        struct kdev_err err = {0};
        struct kdev_nvml *lib = NULL;
        struct kdev_gpu_set *set = NULL;
        struct kdev_nvidia_driver_files drv = {0};
        struct kdev_kube_config kcfg = {0};
        struct kdev_nvidia_config nv = {0};
        struct kdev_xid_policy pol = {0};
        bool nv_ready = false;
        char default_plugin_dir[PATH_MAX], abs_dir[PATH_MAX], dra_sock[PATH_MAX + 16],
                reg_sock[PATH_MAX + 300];
        int status = 1;
        bool loop_ready = false, started = false;

        d.claim_log = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS); /* NULL: unlimited */

        if (!plugin_dir) {
                snprintf(default_plugin_dir, sizeof(default_plugin_dir), "%s/%s", DEFAULT_PLUGINS,
                         driver);
                plugin_dir = default_plugin_dir;
        }
        d.generation = -1;
        d.backoff_ms = BACKOFF_FIRST_MS;
        d.resync_ms = resync_ms;
        if (mkdirs(plugin_dir, KDEV_DIR_MODE_PLUGIN, "plugin directory", &err) < 0 ||
            mkdirs(registry, KDEV_DIR_MODE_PLUGIN, "plugin registration directory", &err) < 0 ||
            mkdirs(cdi_dir, KDEV_DIR_MODE_CDI, "CDI spec directory", &err) < 0)
                goto out;
        if (!realpath(plugin_dir, abs_dir)) {
                kdev_err_set(&err, errno, "%s: %s", plugin_dir, strerror(errno));
                goto out;
        }
        snprintf(dra_sock, sizeof(dra_sock), "%s/dra.sock", abs_dir);
        snprintf(reg_sock, sizeof(reg_sock), "%s/%s-reg.sock", registry, driver);

        /* GPUs */
        struct kdev_nvml_options nopts = {.driver_root = driver_root};
        if (kdev_nvml_open(&nopts, &lib, &err) < 0 || kdev_nvml_discover(lib, NULL, &set, &err) < 0)
                goto out;
        int n = kdev_dra_build_devices(set, NULL, &d.devices, &err);
        if (n < 0)
                goto out;
        char ngpu[32], ndev[32];
        snprintf(ngpu, sizeof(ngpu), "%zu", set->n_gpus);
        snprintf(ndev, sizeof(ndev), "%d", n);
        kdev_log_info("GPUs discovered", "gpus", ngpu, "devices", ndev, "driver_version",
                      set->driver_version);
        d.gpus = set;
        if (driver_files_find(driver_root, set->driver_version,
                              cdi_hook && *cdi_hook ? cdi_hook : DEFAULT_CDI_HOOK, &drv, &err) < 0)
                goto out;

        /* Health: the GPUs as whole NVIDIA devices for the XID monitor. */
        if (kdev_nvidia_config_init(&nv, &err) < 0)
                goto out;
        nv_ready = true;
        if ((probe_s && kdev_nvidia_config_apply_flag(&nv, "health-probe-interval", probe_s,
                                                      &err) < 0) ||
            (quiet_s && kdev_nvidia_config_apply_flag(&nv, "health-quiet-period", quiet_s,
                                                      &err) < 0))
                goto out;
        nv.mig_strategy = KDEV_NVIDIA_MIG_NONE;
        if (kdev_nvidia_config_finish(&nv, false, &err) < 0 ||
            kdev_nvidia_build(set, &nv, NULL, &d.health_set, &err) < 0 ||
            kdev_xid_policy_from_env(&pol, xid_warn, NULL, &err) < 0)
                goto out;

        /* API server: one client per thread (kdev_kube is not thread-safe). */
        if (kdev_kube_config_load(&kcfg, kubeconfig, &err) < 0)
                goto out;
        struct kdev_kube_opts slice_opts = {
                .version = api_version,
                .attempts = 3,
                .timeout_ms = 10000,
                .connect_timeout_ms = 5000,
        };
        struct kdev_kube_opts claim_opts = {.version = api_version};
        d.kube_slices = kdev_kube_new(&kcfg, &slice_opts, &err);
        if (!d.kube_slices)
                goto out;
        d.kube_claims = kdev_kube_new(&kcfg, &claim_opts, &err);
        if (!d.kube_claims)
                goto out;
        d.pool.driver = driver;
        d.pool.node = node;

        struct kdev_dra_plugin_options popts = {
                .driver = driver,
                .pool = node,
                .data_dir = abs_dir,
                .cdi_dir = cdi_dir,
                .dev_root = driver_root,
                .proc_root = proc_root,
                .gpus = set,
                .driver_files = &drv,
                .get_claim = kdev_dra_kube_claim_source,
                .get_claim_arg = d.kube_claims,
                .on_status = on_status,
                .on_status_arg = &d,
                .on_claim = on_claim,
                .on_claim_arg = &d,
        };
        if (kdev_dra_plugin_new(&popts, &d.plugin, &err) < 0)
                goto out;
        const char *cperr = kdev_dra_plugin_checkpoint_error(d.plugin);
        if (cperr)
                kdev_log_error("claim checkpoint unusable, moved aside", "error", cperr);
        if (kdev_dra_plugin_remove_stale_temps(d.plugin, on_stale_temp, NULL, &err) < 0) {
                kdev_log_warn("cannot clean up stale temporary files", "error", err.msg);
                err = (struct kdev_err){0};
        }

        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_err_set(&err, -r, "cannot start the event loop: %s", uv_strerror(r));
                goto out;
        }
        loop_ready = true;
        uv_signal_init(&d.loop, &d.sigterm);
        uv_signal_init(&d.loop, &d.sigint);
        uv_timer_init(&d.loop, &d.sockets_timer);
        uv_timer_init(&d.loop, &d.slices_timer);
        d.sigterm.data = d.sigint.data = d.sockets_timer.data = d.slices_timer.data = &d;
        uv_signal_start(&d.sigterm, on_signal, SIGTERM);
        uv_signal_start(&d.sigint, on_signal, SIGINT);

        if (kdev_dra_plugin_start(d.plugin, &d.loop, dra_sock, reg_sock, &err) < 0) {
                uv_close((uv_handle_t *)&d.sigterm, NULL);
                uv_close((uv_handle_t *)&d.sigint, NULL);
                uv_close((uv_handle_t *)&d.sockets_timer, NULL);
                uv_close((uv_handle_t *)&d.slices_timer, NULL);
                uv_run(&d.loop, UV_RUN_DEFAULT);
                goto out;
        }
        started = true;
        struct kdev_nvidia_health_options hopts = {
                .probe_interval_ms = (uint64_t)nv.probe_interval * 1000,
                .quiet_period_ms = (uint64_t)nv.quiet_period * 1000,
                .notify = on_health,
                .notify_arg = &d,
        };
        d.health = kdev_nvidia_health_new(&d.loop, lib, &d.health_set, &pol, &hopts, &err);
        if (!d.health || kdev_nvidia_health_start(d.health, &err) < 0) {
                kdev_log_error("continuing with health checks disabled", "error", err.msg);
                kdev_nvidia_health_stop(d.health, NULL, NULL);
                d.health = NULL;
                err = (struct kdev_err){0};
        }
        kdev_log_info("serving", "driver", driver, "node", node, "registration", reg_sock,
                      "endpoint", dra_sock, "resource_api", api_version);
        uv_timer_start(&d.sockets_timer, check_sockets, 1000, 1000);
        uv_timer_start(&d.slices_timer, start_reconcile, 0, 0);
        uv_run(&d.loop, UV_RUN_DEFAULT);
        kdev_log_info("stopped");
        status = 0;

out:
        if (!started && err.msg[0])
                kdev_log_error("cannot start", "error", err.msg);
        if (loop_ready && uv_loop_close(&d.loop) != 0)
                kdev_log_warn("event loop closed with handles still open");
        kdev_dra_plugin_free(d.plugin);
        kdev_log_limiter_free(d.claim_log);
        kdev_nvidia_driver_files_clear(&drv);
        kdev_kube_free(d.kube_claims);
        kdev_kube_free(d.kube_slices);
        kdev_kube_config_free(&kcfg);
        json_decref(d.devices);
        kdev_nvidia_health_stop(d.health, NULL, NULL);
        kdev_resource_set_clear(&d.health_set);
        kdev_xid_policy_clear(&pol);
        if (nv_ready)
                kdev_nvidia_config_clear(&nv);
        kdev_gpu_set_free(set);
        kdev_nvml_close(lib);
        return status;
}
