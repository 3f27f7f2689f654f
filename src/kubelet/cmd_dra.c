/* kdevctl dra --registry DIR [--scenario FILE] [-o table|json]: acts as
 * kubelet's plugin watcher and DRA manager for DRA kubelet plugins.
 *
 * Follows kubernetes pkg/kubelet/pluginmanager (plugin registration: GetInfo
 * with a 1 s deadline, type check, NotifyRegistrationStatus and kubelet's
 * error texts) and pkg/kubelet/cm/dra (plugin/dra_plugin.go, manager.go:
 * supported services picked in the plugin's
 * order from ["v1.DRAPlugin", "v1beta1.DRAPlugin"]; batched
 * NodePrepareResources / NodeUnprepareResources with a 45 s deadline and
 * kubelet's response checks). The v1 and v1beta1 messages are identical on
 * the wire except v1 Device.share_id (field 5), so the v1beta1 protobuf-c
 * messages are used for both services (share_id, if sent, is ignored). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>
#include <uv.h>
#include <yaml.h>

#include "common/file.h"
#include "dra/v1beta1/api.pb-c.h"
#include "dra_health/v1alpha1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmd_dra_internal.h"
#include "kubelet/cmds.h"
#include "kubelet/scenario.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "rpc/rpc.h"

#define CMD "dra"

#define REG_GETINFO "/pluginregistration.Registration/GetInfo"
#define REG_NOTIFY "/pluginregistration.Registration/NotifyRegistrationStatus"
#define GETINFO_TIMEOUT_MS 1000   /* kubelet: 1 s */
#define NOTIFY_TIMEOUT_MS 5000    /* kubelet: 5 s */
#define DRA_CALL_TIMEOUT_MS 45000 /* kubelet: defaultClientCallTimeout */
/* The DRA resource health service (KEP-4680; kubelet 1.34-1.36: v1alpha1
 * only): advertised token, stream method, and how long kdevctl waits for
 * the stream's first message (the plugin sends the complete list at once). */
#define HEALTH_SERVICE "v1alpha1.DRAResourceHealth"
#define HEALTH_WATCH "/v1alpha1.DRAResourceHealth/NodeWatchResources"
#define HEALTH_TIMEOUT_MS 5000

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest PrepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse PrepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesRequest UnprepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesResponse UnprepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse__ClaimsEntry
        PrepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesResponse__ClaimsEntry
        UnprepEntry;
#define PREP_REQ_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCES_REQUEST__INIT
#define UNPREP_REQ_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT
#define PREP_RESP_DESC \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__descriptor
#define UNPREP_RESP_DESC \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_response__descriptor

/* Services kubelet (>= 1.34) supports, and their gRPC service names. */
static const char *const kubelet_services[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
static const char *const grpc_services[] = {"k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
                                            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"};

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl dra --registry DIR [--scenario FILE] [--driver NAME]\n"
                "                   [--watch SEC] [-o table|json]\n"
                "       kdevctl dra allocate ...   (the structured allocator: see its --help)\n"
                "\n"
                "Acts as kubelet's plugin watcher for DRA kubelet plugins: lists the sockets\n"
                "in the plugin registration directory DIR (kubelet's default is\n"
                "/var/lib/kubelet/plugins_registry; names starting with '.' and files that are\n"
                "not sockets are ignored), calls /pluginregistration.Registration/GetInfo on\n"
                "each (1 s deadline), checks that the type is \"DRAPlugin\" and picks the\n"
                "first of the plugin's supported_versions that kubelet supports\n"
                "(\"v1.DRAPlugin\", \"v1beta1.DRAPlugin\"), tells the plugin the outcome with\n"
                "NotifyRegistrationStatus, and prints the registered plugins (driver name,\n"
                "endpoint, service version).\n"
                "\n"
                "With --scenario FILE it then sends the scenario's steps, in order, to the\n"
                "DRA service of the plugin (the one named by --driver; without it there must\n"
                "be exactly one registered plugin), each step as one batched call with a 45 s\n"
                "deadline, and prints per claim UID the devices (pool, device, request names,\n"
                "CDI device IDs) or the error. When the plugin advertises the device health\n"
                "service (\"v1alpha1.DRAResourceHealth\", KEP-4680) each NodePrepareResources\n"
                "step also reads the first message of its NodeWatchResources stream, as\n"
                "kubelet does, and shows each claim device's health as kubelet puts it in\n"
                "the pod status (HEALTH: Healthy, Unhealthy or Unknown, with the plugin's\n"
                "message; JSON: resourceID <driver>/<pool>/<device>, health,\n"
                "healthMessage). Scenario format (YAML), a list of steps:\n"
                "\n"
                "  - prepare:                    # NodePrepareResources\n"
                "      - {namespace: default, name: claim-a, uid: 0a1b-...,\n"
                "         pod: train-a, container: main}\n"
                "      - {namespace: default, name: claim-b, uid: 2c3d-...}\n"
                "  - unprepare:                  # NodeUnprepareResources\n"
                "      - {namespace: default, name: claim-a, uid: 0a1b-...}\n"
                "\n"
                "Each claim needs uid; namespace and name may be empty; pod and container\n"
                "(together) name the pod (in the claim's namespace) and container the claim\n"
                "is prepared for, which PodResources then lists. See\n"
                "examples/dra-scenario.yaml.\n"
                "\n"
                "With --watch SEC it then keeps watching DIR (inotify, plus a pass every\n"
                "second like kubelet's reconciler; sub-directories are not watched) for SEC\n"
                "seconds, 0 = until SIGINT/SIGTERM, and prints one line per event:\n"
                "  registered NAME ENDPOINT VERSION SOCKET\n"
                "  deregistered NAME ENDPOINT VERSION SOCKET\n"
                "(with -o json one compact JSON object per line: event, name, endpoint,\n"
                "version, socket). A socket removed or replaced (new inode) deregisters its\n"
                "plugin; a replaced one is registered again. While watching,\n"
                "--pod-resources-socket PATH serves kubelet's PodResources v1 API there\n"
                "(List, Get, GetAllocatableResources) as kubelet's DRA manager feeds it:\n"
                "every pod the scenario prepared a claim for, its containers' claims with\n"
                "their devices (driver, pool, device, CDI devices), until unprepared. A\n"
                "failed registration is retried with kubelet's backoff (0.5 s doubling up\n"
                "to 2 min 2 s), each failure printed to stderr and counted in the exit\n"
                "status.\n"
                "\n"
                "Options:\n"
                "      --registry DIR     plugin registration directory (required)\n"
                "      --scenario FILE    prepare/unprepare steps to run (YAML, see above)\n"
                "      --driver NAME      plugin that receives the scenario's calls\n"
                "      --watch SEC        keep watching DIR for SEC seconds (0 = until a signal)\n"
                "      --pod-resources-socket PATH\n"
                "                         serve PodResources v1 at PATH while watching\n"
                "  -o, --output FORMAT    table (default) or json\n"
                "  -h, --help             show this help\n"
                "\n"
                "Exit status: 0 success; 1 a plugin failed registration, an RPC failed, or a\n"
                "claim failed (kubelet's checks: a claim UID not requested, a claim error,\n"
                "\"skipped N ResourceClaims\"); 2 usage error.\n"
                "\n"
                "Files:\n"
                "  DIR/*.sock  plugin registration sockets (GetInfo, NotifyRegistrationStatus)\n"
                "\n"
                "Examples:\n"
                "  kdevctl dra --registry /var/lib/kubelet/plugins_registry\n"
                "  kdevctl dra --registry /tmp/dra/plugins_registry \\\n"
                "      --scenario examples/demo-dra.scenario.yaml\n"
                "  kdevctl dra --registry /tmp/dra/plugins_registry --watch 0 -o json\n");
}

enum { OPT_REGISTRY, OPT_SCENARIO, OPT_DRIVER, OPT_OUTPUT, OPT_WATCH, OPT_PODRES };

struct args {
        const char *registry;
        const char *scenario;
        const char *driver;
        enum kdev_cli_output output;
        bool watch;
        uint64_t watch_ms;
        const char *podres;
};

static int on_arg(int id, const char *value, void *user_data, struct kdev_err *err)
{
        struct args *a = user_data;

        switch (id) {
        case OPT_REGISTRY:
                a->registry = value;
                return 0;
        case OPT_SCENARIO:
                a->scenario = value;
                return 0;
        case OPT_DRIVER:
                a->driver = value;
                return 0;
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_PODRES:
                a->podres = value;
                return 0;
        case OPT_WATCH:
                a->watch = true;
                return kdev_cli_parse_seconds(value, "--watch", "until SIGINT or SIGTERM",
                                              &a->watch_ms, err);
        default:
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        }
}

/* ---- registration -------------------------------------------------------- */

struct plugin {
        char *socket;
        char *name;
        char *endpoint;
        const char *version; /* static: kubelet_services[i] */
        const char *service; /* static: grpc_services[i] */
        bool health;         /* advertises HEALTH_SERVICE */
        ino_t ino;           /* of the socket file when registered */
};

struct plugins {
        struct plugin *v;
        size_t n;
};

static void plugins_clear(struct plugins *ps)
{
        for (size_t i = 0; i < ps->n; i++) {
                free(ps->v[i].socket);
                free(ps->v[i].name);
                free(ps->v[i].endpoint);
        }
        free(ps->v);
        ps->v = NULL;
        ps->n = 0;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Picks the service as kubelet's validateSupportedServices does; on failure
 * writes kubelet's message into |err|. */
static int pick_service(const Pluginregistration__PluginInfo *info, size_t *idx,
                        struct kdev_err *err)
{
        if (info->n_supported_versions == 0)
                return kdev_err_set(err, EINVAL, "empty list of supported gRPC services (aka "
                                                 "supported versions)");
        for (size_t i = 0; i < info->n_supported_versions; i++) {
                for (size_t k = 0; k < 2; k++) {
                        if (strcmp(info->supported_versions[i], kubelet_services[k]) == 0) {
                                *idx = k;
                                return 0;
                        }
                }
        }
        char *have = kdev_cli_strv_join(info->supported_versions, info->n_supported_versions,
                                        " ");
        int rc = kdev_err_set(err, EINVAL,
                              "none of services supported by the plugin ([%s]) are supported "
                              "by the kubelet ([%s %s])",
                              have ? have : "", kubelet_services[0], kubelet_services[1]);
        free(have);
        return rc;
}

static void notify(const char *sock, bool ok, const char *error)
{
        Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
        ProtobufCMessage *resp = NULL;
        struct kdev_err err = {0};

        st.plugin_registered = ok;
        st.error = (char *)(error ? error : "");
        if (kdev_cli_unary(CMD, sock, REG_NOTIFY, &st.base,
                           &pluginregistration__registration_status_response__descriptor,
                           NOTIFY_TIMEOUT_MS, &resp, true, &err) != KDEV_CLI_OK)
                fprintf(stderr, "kdevctl %s: %s: NotifyRegistrationStatus: %s\n", CMD, sock,
                        err.msg);
        if (resp)
                protobuf_c_message_free_unpacked(resp, NULL);
}

/* Registers the plugin behind |sock|. Returns 0 (added to |ps|), or 1 after
 * printing the failure. */
static int register_one(const char *sock, struct plugins *ps)
{
        Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
        ProtobufCMessage *msg = NULL;
        struct kdev_err err = {0};
        char why[1100];
        size_t idx = 0;

        if (kdev_cli_unary(CMD, sock, REG_GETINFO, &req.base,
                           &pluginregistration__plugin_info__descriptor, GETINFO_TIMEOUT_MS,
                           &msg, true, &err) != KDEV_CLI_OK) {
                fprintf(stderr, "kdevctl %s: %s: GetInfo: %s\n", CMD, sock, err.msg);
                return 1;
        }
        Pluginregistration__PluginInfo *info = (Pluginregistration__PluginInfo *)msg;
        if (strcmp(info->type, "DRAPlugin") != 0) {
                snprintf(why, sizeof(why),
                         "RegisterPlugin error -- no handler registered for plugin type: %s",
                         info->type);
                goto fail;
        }
        if (pick_service(info, &idx, &err) < 0) {
                snprintf(why, sizeof(why),
                         "RegisterPlugin error -- plugin validation failed with err: %s",
                         err.msg);
                goto fail;
        }
        struct plugin *v = realloc(ps->v, (ps->n + 1) * sizeof(*v));
        if (!v) {
                snprintf(why, sizeof(why), "out of memory");
                goto fail;
        }
        ps->v = v;
        struct plugin *p = &ps->v[ps->n];
        p->socket = strdup(sock);
        p->name = strdup(info->name);
        p->endpoint = strdup(info->endpoint[0] ? info->endpoint : sock);
        p->version = kubelet_services[idx];
        p->service = grpc_services[idx];
        p->health = false;
        for (size_t i = 0; i < info->n_supported_versions; i++)
                if (strcmp(info->supported_versions[i], HEALTH_SERVICE) == 0)
                        p->health = true;
        ps->n++;
        if (!p->socket || !p->name || !p->endpoint) {
                snprintf(why, sizeof(why), "out of memory");
                goto fail;
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        notify(sock, true, "");
        return 0;
fail:
        protobuf_c_message_free_unpacked(msg, NULL);
        fprintf(stderr, "kdevctl %s: %s: %s\n", CMD, sock, why);
        notify(sock, false, why);
        return 1;
}

struct seen {
        char *path;
        ino_t ino;
        uint64_t next_ms;    /* monotonic time of the next attempt */
        uint64_t backoff_ms; /* delay after the next failure */
};

/* kubelet's registration retry backoff (exponentialbackoff: 500 ms doubling
 * up to 2 min 2 s). */
#define BACKOFF_INITIAL_MS 500
#define BACKOFF_MAX_MS 122000

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Plugin watcher state: the registered plugins, the sockets whose
 * registration failed (retried with backoff while watching; a replaced
 * file, new inode, is tried at once), and, when watching, the libuv
 * handles. */
struct watcher {
        const char *dir;
        struct plugins ps;
        struct seen *bad;
        size_t n_bad;
        int failed;      /* registration failures so far */
        bool events;     /* print registered/deregistered events */
        enum kdev_cli_output output;
        uv_loop_t loop;
        uv_fs_event_t fs;
        uv_timer_t tick;
        uv_timer_t stop;
        uv_signal_t sigint;
        uv_signal_t sigterm;
        struct dra_podres podres;     /* the claims prepared for pods */
        const char *podres_path;      /* --pod-resources-socket, NULL: not served */
};

static void watcher_clear(struct watcher *w)
{
        plugins_clear(&w->ps);
        for (size_t i = 0; i < w->n_bad; i++)
                free(w->bad[i].path);
        free(w->bad);
        w->bad = NULL;
        w->n_bad = 0;
        dra_podres_clear(&w->podres);
}

static void print_event(struct watcher *w, const char *what, const struct plugin *p)
{
        if (!w->events)
                return;
        if (w->output == KDEV_CLI_OUTPUT_JSON) {
                json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "event", what, "name", p->name,
                                      "endpoint", p->endpoint, "version", p->version, "socket",
                                      p->socket);
                char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
                if (text)
                        printf("%s\n", text);
                free(text);
                json_decref(o);
        } else {
                printf("%s %s %s %s %s\n", what, p->name, p->endpoint, p->version, p->socket);
        }
        fflush(stdout);
}

/* Lists DIR's sockets (sorted; dot files and non-sockets skipped) into
 * |paths| with their inodes in |*inos| (malloc'ed). Returns 0 or -1 after
 * printing why. */
static int list_sockets(const char *dir, struct kdev_cli_strv *paths, ino_t **inos)
{
        DIR *d = opendir(dir);
        if (!d) {
                fprintf(stderr, "kdevctl %s: %s: %s\n", CMD, dir, strerror(errno));
                return -1;
        }
        struct dirent *de;
        int rc = 0;
        while ((de = readdir(d))) {
                char path[4096];
                struct stat st;
                if (de->d_name[0] == '.')
                        continue;
                if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
                        continue;
                if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
                        continue;
                if (kdev_cli_strv_add(paths, path) < 0) {
                        rc = -1;
                        break;
                }
        }
        closedir(d);
        if (paths->n)
                qsort(paths->v, paths->n, sizeof(char *), cmp_str);
        *inos = calloc(paths->n ? paths->n : 1, sizeof(ino_t));
        if (rc < 0 || !*inos) {
                fprintf(stderr, "kdevctl %s: out of memory\n", CMD);
                return -1;
        }
        for (size_t i = 0; i < paths->n; i++) {
                struct stat st;
                (*inos)[i] = stat(paths->v[i], &st) == 0 ? st.st_ino : 0;
        }
        return 0;
}

static ssize_t find_path(const struct kdev_cli_strv *paths, const char *path)
{
        for (size_t i = 0; i < paths->n; i++)
                if (strcmp(paths->v[i], path) == 0)
                        return (ssize_t)i;
        return -1;
}

/* One pass of kubelet's reconciler: plugins whose socket vanished or was
 * replaced are deregistered, new sockets registered. Returns 0 or -1 when
 * DIR cannot be read. */
static int reconcile(struct watcher *w)
{
        struct kdev_cli_strv paths = {0};
        ino_t *inos = NULL;
        if (list_sockets(w->dir, &paths, &inos) < 0) {
                kdev_cli_strv_clear(&paths);
                free(inos);
                return -1;
        }
        for (size_t i = 0; i < w->ps.n;) {
                struct plugin *p = &w->ps.v[i];
                ssize_t k = find_path(&paths, p->socket);
                if (k >= 0 && inos[k] == p->ino) {
                        i++;
                        continue;
                }
                print_event(w, "deregistered", p);
                free(p->socket);
                free(p->name);
                free(p->endpoint);
                memmove(p, p + 1, (w->ps.n - i - 1) * sizeof(*p));
                w->ps.n--;
        }
        for (size_t i = 0; i < w->n_bad;) {
                ssize_t k = find_path(&paths, w->bad[i].path);
                if (k >= 0 && inos[k] == w->bad[i].ino) {
                        i++;
                        continue;
                }
                free(w->bad[i].path);
                w->bad[i] = w->bad[--w->n_bad];
        }
        uint64_t now = now_ms();
        for (size_t k = 0; k < paths.n; k++) {
                bool known = false;
                struct seen *retry = NULL;
                for (size_t i = 0; i < w->ps.n && !known; i++)
                        known = strcmp(w->ps.v[i].socket, paths.v[k]) == 0;
                for (size_t i = 0; i < w->n_bad && !known && !retry; i++) {
                        if (strcmp(w->bad[i].path, paths.v[k]) != 0)
                                continue;
                        if (now < w->bad[i].next_ms)
                                known = true;
                        else
                                retry = &w->bad[i];
                }
                if (known)
                        continue;
                if (register_one(paths.v[k], &w->ps) == 0) {
                        w->ps.v[w->ps.n - 1].ino = inos[k];
                        print_event(w, "registered", &w->ps.v[w->ps.n - 1]);
                        if (retry) {
                                free(retry->path);
                                *retry = w->bad[--w->n_bad];
                        }
                        continue;
                }
                w->failed++;
                fflush(stderr);
                if (retry) {
                        retry->next_ms = now + retry->backoff_ms;
                        retry->backoff_ms = retry->backoff_ms * 2 > BACKOFF_MAX_MS
                                ? BACKOFF_MAX_MS : retry->backoff_ms * 2;
                        continue;
                }
                struct seen *b = realloc(w->bad, (w->n_bad + 1) * sizeof(*b));
                if (b) {
                        w->bad = b;
                        b[w->n_bad].path = paths.v[k];
                        b[w->n_bad].ino = inos[k];
                        b[w->n_bad].next_ms = now + BACKOFF_INITIAL_MS;
                        b[w->n_bad].backoff_ms = 2 * BACKOFF_INITIAL_MS;
                        paths.v[k] = strdup("");
                        w->n_bad++;
                }
        }
        kdev_cli_strv_clear(&paths);
        free(inos);
        return 0;
}

static void on_fs(uv_fs_event_t *h, const char *filename, int events, int status)
{
        (void)filename;
        (void)events;
        (void)status;
        reconcile(h->data);
}

static void on_tick(uv_timer_t *h)
{
        reconcile(h->data);
}

static void on_close(uv_handle_t *h)
{
        (void)h;
}

static void stop_watch(struct watcher *w)
{
        uv_handle_t *hs[] = {(uv_handle_t *)&w->fs, (uv_handle_t *)&w->tick,
                             (uv_handle_t *)&w->stop, (uv_handle_t *)&w->sigint,
                             (uv_handle_t *)&w->sigterm};
        for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
                if (!uv_is_closing(hs[i]))
                        uv_close(hs[i], on_close);
        dra_podres_stop(&w->podres);
}

static void on_stop(uv_timer_t *h)
{
        stop_watch(h->data);
}

static void on_signal(uv_signal_t *h, int signum)
{
        (void)signum;
        stop_watch(h->data);
}

/* Watches DIR with inotify (uv_fs_event) plus a 1 s reconcile tick (kubelet's
 * reconciler period) for |ms| milliseconds (0: until SIGINT/SIGTERM).
 * Returns 0 or -1 after printing why. */
static int watch(struct watcher *w, uint64_t ms)
{
        int rc = uv_loop_init(&w->loop);
        if (rc < 0) {
                fprintf(stderr, "kdevctl %s: %s\n", CMD, uv_strerror(rc));
                return -1;
        }
        w->events = true;
        uv_fs_event_init(&w->loop, &w->fs);
        uv_timer_init(&w->loop, &w->tick);
        uv_timer_init(&w->loop, &w->stop);
        uv_signal_init(&w->loop, &w->sigint);
        uv_signal_init(&w->loop, &w->sigterm);
        w->fs.data = w->tick.data = w->stop.data = w->sigint.data = w->sigterm.data = w;
        rc = uv_fs_event_start(&w->fs, on_fs, w->dir, 0);
        struct kdev_err err = {0};
        if (rc < 0) {
                fprintf(stderr, "kdevctl %s: watch %s: %s\n", CMD, w->dir, uv_strerror(rc));
                stop_watch(w);
        } else if (w->podres_path &&
                   (rc = dra_podres_start(&w->podres, &w->loop, w->podres_path, &err)) < 0) {
                fprintf(stderr, "kdevctl %s: PodResources: %s\n", CMD, err.msg);
                stop_watch(w);
        } else {
                uv_timer_start(&w->tick, on_tick, 1000, 1000);
                if (ms)
                        uv_timer_start(&w->stop, on_stop, ms, 0);
                uv_signal_start(&w->sigint, on_signal, SIGINT);
                uv_signal_start(&w->sigterm, on_signal, SIGTERM);
        }
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
        return rc < 0 ? -1 : 0;
}

/* ---- scenario ---------------------------------------------------------- */

struct step {
        bool prepare;
        Claim **claims;
        char **pods, **containers; /* per claim: the pod and container it is for, or NULL */
        size_t n;
};

struct scenario {
        struct step *v;
        size_t n;
};

static void scenario_free(struct scenario *s)
{
        for (size_t i = 0; i < s->n; i++) {
                for (size_t k = 0; k < s->v[i].n; k++) {
                        Claim *c = s->v[i].claims[k];
                        free(c->namespace_);
                        free(c->name);
                        free(c->uid);
                        free(c);
                        free(s->v[i].pods[k]);
                        free(s->v[i].containers[k]);
                }
                free(s->v[i].claims);
                free(s->v[i].pods);
                free(s->v[i].containers);
        }
        free(s->v);
}

static const char *scalar(yaml_node_t *n)
{
        return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int parse_claim(yaml_document_t *doc, yaml_node_t *n, Claim *c, char **pod,
                       char **container, struct kdev_err *err)
{
        if (n->type != YAML_MAPPING_NODE)
                return kdev_err_set(err, EINVAL, "line %zu: a claim must be a mapping "
                                                 "{namespace, name, uid[, pod, container]}",
                                    n->start_mark.line + 1);
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
                const char *k = scalar(yaml_document_get_node(doc, p->key));
                yaml_node_t *vn = yaml_document_get_node(doc, p->value);
                const char *v = scalar(vn);
                char **dst = NULL;
                if (k && strcmp(k, "namespace") == 0)
                        dst = &c->namespace_;
                else if (k && strcmp(k, "name") == 0)
                        dst = &c->name;
                else if (k && strcmp(k, "uid") == 0)
                        dst = &c->uid;
                else if (k && strcmp(k, "pod") == 0)
                        dst = pod;
                else if (k && strcmp(k, "container") == 0)
                        dst = container;
                else
                        return kdev_err_set(err, EINVAL, "line %zu: unknown claim field \"%s\" "
                                                         "(want namespace, name, uid, pod, "
                                                         "container)",
                                            vn->start_mark.line + 1, k ? k : "?");
                if (!v)
                        return kdev_err_set(err, EINVAL, "line %zu: %s must be a string",
                                            vn->start_mark.line + 1, k);
                free(*dst);
                *dst = strdup(v);
                if (!*dst)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        if (!c->uid || !c->uid[0])
                return kdev_err_set(err, EINVAL, "line %zu: claim without uid",
                                    n->start_mark.line + 1);
        if ((*pod && **pod) != (*container && **container))
                return kdev_err_set(err, EINVAL, "line %zu: claim %s: pod and container go "
                                                 "together (the container of the pod the claim "
                                                 "is prepared for)",
                                    n->start_mark.line + 1, c->uid);
        if (!c->namespace_)
                c->namespace_ = strdup("");
        if (!c->name)
                c->name = strdup("");
        if (!c->namespace_ || !c->name)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

static int parse_step(yaml_document_t *doc, yaml_node_t *n, struct step *st, struct kdev_err *err)
{
        if (n->type != YAML_MAPPING_NODE ||
            n->data.mapping.pairs.top - n->data.mapping.pairs.start != 1)
                return kdev_err_set(err, EINVAL, "line %zu: a step must be a mapping with one "
                                                 "key, prepare or unprepare",
                                    n->start_mark.line + 1);
        yaml_node_pair_t *p = n->data.mapping.pairs.start;
        const char *k = scalar(yaml_document_get_node(doc, p->key));
        if (k && strcmp(k, "prepare") == 0)
                st->prepare = true;
        else if (!k || strcmp(k, "unprepare") != 0)
                return kdev_err_set(err, EINVAL, "line %zu: unknown step \"%s\" (want prepare "
                                                 "or unprepare)",
                                    n->start_mark.line + 1, k ? k : "?");
        yaml_node_t *list = yaml_document_get_node(doc, p->value);
        if (!list || list->type != YAML_SEQUENCE_NODE)
                return kdev_err_set(err, EINVAL, "line %zu: %s must be a list of claims",
                                    n->start_mark.line + 1, k);
        size_t cnt = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
        st->claims = calloc(cnt ? cnt : 1, sizeof(Claim *));
        st->pods = calloc(cnt ? cnt : 1, sizeof(char *));
        st->containers = calloc(cnt ? cnt : 1, sizeof(char *));
        if (!st->claims || !st->pods || !st->containers)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < cnt; i++) {
                Claim *c = malloc(sizeof(*c));
                if (!c)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                k8s__io__kubelet__pkg__apis__dra__v1beta1__claim__init(c);
                c->namespace_ = c->name = c->uid = NULL;
                st->claims[st->n++] = c;
                yaml_node_t *cn = yaml_document_get_node(doc, list->data.sequence.items.start[i]);
                int rc = parse_claim(doc, cn, c, &st->pods[st->n - 1],
                                     &st->containers[st->n - 1], err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int load_scenario(const char *path, struct scenario *s, struct kdev_err *err)
{
        char *text;
        size_t len;
        int rc = kdev_file_read(path, "scenario file", KDEV_SCENARIO_FILE_MAX, KDEV_FILE_TEXT,
                                &text, &len, err);
        if (rc < 0)
                return rc;
        yaml_parser_t parser;
        yaml_document_t doc;
        yaml_parser_initialize(&parser);
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                rc = kdev_err_set(err, EINVAL, "%s: line %zu: %s", path,
                                  parser.problem_mark.line + 1,
                                  parser.problem ? parser.problem : "invalid YAML");
                yaml_parser_delete(&parser);
                free(text);
                return rc;
        }
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root) {
                rc = kdev_err_set(err, EINVAL, "%s: empty scenario", path);
        } else if (root->type != YAML_SEQUENCE_NODE) {
                rc = kdev_err_set(err, EINVAL, "%s: the scenario must be a list of steps", path);
        } else {
                size_t cnt = (size_t)(root->data.sequence.items.top -
                                      root->data.sequence.items.start);
                s->v = calloc(cnt ? cnt : 1, sizeof(*s->v));
                if (!s->v)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                for (size_t i = 0; rc == 0 && i < cnt; i++) {
                        yaml_node_t *n =
                                yaml_document_get_node(&doc, root->data.sequence.items.start[i]);
                        s->n++;
                        rc = parse_step(&doc, n, &s->v[i], err);
                        if (rc < 0)
                                kdev_err_wrap(err, "%s", path);
                }
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        free(text);
        return rc;
}

/* ---- calls --------------------------------------------------------------- */

static bool requested(const struct step *st, const char *uid)
{
        for (size_t i = 0; i < st->n; i++)
                if (strcmp(st->claims[i]->uid, uid) == 0)
                        return true;
        return false;
}

static size_t distinct_uids(const struct step *st)
{
        size_t n = 0;
        for (size_t i = 0; i < st->n; i++) {
                bool seen = false;
                for (size_t k = 0; k < i; k++)
                        seen = seen || strcmp(st->claims[k]->uid, st->claims[i]->uid) == 0;
                n += !seen;
        }
        return n;
}

static int cmp_prep_entry(const void *a, const void *b)
{
        return strcmp((*(PrepEntry *const *)a)->key, (*(PrepEntry *const *)b)->key);
}

static int cmp_unprep_entry(const void *a, const void *b)
{
        return strcmp((*(UnprepEntry *const *)a)->key, (*(UnprepEntry *const *)b)->key);
}

static json_t *strv_json(char **v, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

/* Runs one step against |p|; prints (table) or appends to |jsteps|. Returns
 * 0 or 1 (some failure, printed to stderr). */
/* ---- device health (KEP-4680) -------------------------------------------- */

struct health_read {
        V1alpha1__NodeWatchResourcesResponse *resp; /* the first message */
        int status;
        char message[512];
        bool done;
};

static void health_message(struct kdev_rpc_client_call *c, const uint8_t *msg, size_t len,
                           void *ud)
{
        struct health_read *h = ud;

        if (!h->resp) {
                h->resp = v1alpha1__node_watch_resources_response__unpack(NULL, len, msg);
                if (!h->resp)
                        snprintf(h->message, sizeof(h->message),
                                 "cannot parse NodeWatchResourcesResponse");
        }
        kdev_rpc_client_call_cancel(c); /* one complete list is all kdevctl needs */
}

static void health_done(struct kdev_rpc_client_call *c, int status, const char *message,
                        void *ud)
{
        struct health_read *h = ud;

        (void)c;
        h->done = true;
        h->status = status;
        if (!h->message[0])
                snprintf(h->message, sizeof(h->message), "%s", message);
}

/* Opens kubelet's health stream on |endpoint| as kubelet does and takes its
 * first message, the complete device list. Returns it (free with
 * v1alpha1__node_watch_resources_response__free_unpacked) or NULL with
 * |err| ("NodeWatchResources: <status>: <message>"). */
static V1alpha1__NodeWatchResourcesResponse *health_snapshot(const char *endpoint,
                                                             struct kdev_err *err)
{
        uv_loop_t loop;
        struct health_read h = {0};
        struct kdev_rpc_client *cl;

        if (uv_loop_init(&loop) < 0) {
                kdev_err_set(err, ENOMEM, "NodeWatchResources: cannot start a loop");
                return NULL;
        }
        cl = kdev_rpc_client_new(&loop, endpoint, NULL);
        if (cl && kdev_rpc_client_call(cl, HEALTH_WATCH, NULL, 0, HEALTH_TIMEOUT_MS,
                                       health_message, health_done, &h, err)) {
                while (!h.done && uv_run(&loop, UV_RUN_ONCE))
                        ;
        } else if (!cl) {
                kdev_err_set(err, ENOMEM, "out of memory");
        }
        kdev_rpc_client_close(cl);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        if (!h.resp && h.done) {
                char code[32];
                kdev_err_set(err, EREMOTEIO, "NodeWatchResources: %s: %s",
                             kdev_rpc_code_name(h.status, code, sizeof(code)), h.message);
        }
        return h.resp;
}

/* The health of device |pool|/|name| in |hr| as kubelet shows it in the pod
 * status ("Healthy", "Unhealthy", "Unknown": a device the list does not
 * name is Unknown) and its message ("" none). */
static const char *device_health(const V1alpha1__NodeWatchResourcesResponse *hr, const char *pool,
                                 const char *name, const char **message)
{
        *message = "";
        for (size_t i = 0; hr && i < hr->n_devices; i++) {
                const V1alpha1__DeviceHealth *d = hr->devices[i];
                if (d->device && !strcmp(d->device->pool_name, pool) &&
                    !strcmp(d->device->device_name, name)) {
                        *message = d->message;
                        return d->health == V1ALPHA1__HEALTH_STATUS__HEALTHY     ? "Healthy"
                               : d->health == V1ALPHA1__HEALTH_STATUS__UNHEALTHY ? "Unhealthy"
                                                                                 : "Unknown";
                }
        }
        return "Unknown";
}

/* A row of the NodePrepareResources table: five cells, and HEALTH when the
 * plugin serves health (|health| non-NULL). */
static void prep_row(struct kdev_cli_table *t, const char *health, const char *uid,
                     const char *pool, const char *dev, const char *req, const char *cdi)
{
        const char *cells[] = {uid, pool, dev, req, cdi, health};
        kdev_cli_table_add_v(t, cells);
}

static int run_step(const struct plugin *p, const struct step *st, enum kdev_cli_output out,
                    json_t *jsteps, struct dra_podres *pr)
{
        const char *call = st->prepare ? "NodePrepareResources" : "NodeUnprepareResources";
        char method[256];
        struct kdev_err err = {0};
        ProtobufCMessage *msg = NULL;
        int failed = 0;
        int rc;

        snprintf(method, sizeof(method), "/%s/%s", p->service, call);
        if (st->prepare) {
                PrepReq req = PREP_REQ_INIT;
                req.n_claims = st->n;
                req.claims = st->claims;
                rc = kdev_cli_unary(CMD, p->endpoint, method, &req.base,
                                    &PREP_RESP_DESC,
                                    DRA_CALL_TIMEOUT_MS, &msg, true, &err);
        } else {
                UnprepReq req = UNPREP_REQ_INIT;
                req.n_claims = st->n;
                req.claims = st->claims;
                rc = kdev_cli_unary(CMD, p->endpoint, method, &req.base,
                                    &UNPREP_RESP_DESC,
                                    DRA_CALL_TIMEOUT_MS, &msg, true, &err);
        }
        json_t *jstep = json_object();
        json_object_set_new(jstep, "call", json_string(call));
        json_object_set_new(jstep, "driver", json_string(p->name));
        json_t *jclaims = json_object();
        json_object_set_new(jstep, "claims", jclaims);
        json_array_append_new(jsteps, jstep);
        if (out == KDEV_CLI_OUTPUT_TABLE)
                printf("\n%s (%s, %s):\n", call, p->name, p->version);
        if (rc != KDEV_CLI_OK) {
                fprintf(stderr, "kdevctl %s: %s: %s\n", CMD, call, err.msg);
                json_object_set_new(jstep, "error", json_string(err.msg));
                if (out == KDEV_CLI_OUTPUT_TABLE)
                        printf("  failed: %s\n", err.msg);
                return 1;
        }
        /* kubelet reads device health from the plugin's stream; shown per
         * claim device when the plugin serves it */
        V1alpha1__NodeWatchResourcesResponse *hr = NULL;
        bool with_health = st->prepare && p->health;
        if (with_health) {
                hr = health_snapshot(p->endpoint, &err);
                if (!hr) {
                        fprintf(stderr, "kdevctl %s: %s\n", CMD, err.msg);
                        json_object_set_new(jstep, "healthError", json_string(err.msg));
                }
        }
        struct kdev_cli_table *t =
                !st->prepare ? kdev_cli_table_new(2, "CLAIM UID", "RESULT")
                : with_health
                        ? kdev_cli_table_new(6, "CLAIM UID", "POOL", "DEVICE", "REQUESTS",
                                             "CDI DEVICES", "HEALTH")
                        : kdev_cli_table_new(5, "CLAIM UID", "POOL", "DEVICE", "REQUESTS",
                                             "CDI DEVICES");
        if (!t) {
                fprintf(stderr, "kdevctl %s: out of memory\n", CMD);
                protobuf_c_message_free_unpacked(msg, NULL);
                if (hr)
                        v1alpha1__node_watch_resources_response__free_unpacked(hr, NULL);
                return 1;
        }
        const char *hcell = with_health ? "-" : NULL;
        size_t n_entries = 0;
        if (st->prepare) {
                PrepResp *r = (PrepResp *)msg;
                n_entries = r->n_claims;
                if (r->n_claims > 1) /* map order on the wire is arbitrary */
                        qsort(r->claims, r->n_claims, sizeof(*r->claims), cmp_prep_entry);
                for (size_t i = 0; i < r->n_claims; i++) {
                        const char *uid = r->claims[i]->key;
                        K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourceResponse *v =
                                r->claims[i]->value;
                        json_t *jc = json_object();
                        json_object_set(jclaims, uid, jc);
                        json_decref(jc);
                        if (!requested(st, uid)) {
                                fprintf(stderr, "kdevctl %s: %s: result for unknown claim UID "
                                                "%s\n", CMD, call, uid);
                                json_object_set_new(jc, "error",
                                                    json_string("not requested"));
                                prep_row(t, hcell, uid, "-", "-", "-", "error: not requested");
                                failed = 1;
                                continue;
                        }
                        if (v && v->error[0]) {
                                fprintf(stderr, "kdevctl %s: %s: claim %s: %s\n", CMD, call, uid,
                                        v->error);
                                json_object_set_new(jc, "error", json_string(v->error));
                                char *cell = malloc(strlen(v->error) + 8);
                                if (cell)
                                        sprintf(cell, "error: %s", v->error);
                                prep_row(t, hcell, uid, "-", "-", "-", cell);
                                free(cell);
                                failed = 1;
                                continue;
                        }
                        for (size_t k = 0; k < st->n; k++)
                                if (st->pods[k] && st->pods[k][0] &&
                                    strcmp(st->claims[k]->uid, uid) == 0)
                                        dra_podres_prepared(
                                                pr, p->name, st->claims[k]->namespace_,
                                                st->claims[k]->name, uid, st->pods[k],
                                                st->containers[k], v ? v->devices : NULL,
                                                v ? v->n_devices : 0);
                        json_t *jd = json_array();
                        json_object_set_new(jc, "devices", jd);
                        for (size_t k = 0; v && k < v->n_devices; k++) {
                                Device *d = v->devices[k];
                                char *req = kdev_cli_strv_join(d->request_names,
                                                               d->n_request_names, ",");
                                char *cdi = kdev_cli_strv_join(d->cdi_device_ids,
                                                               d->n_cdi_device_ids, ",");
                                const char *hmsg = "";
                                const char *hv = device_health(hr, d->pool_name, d->device_name,
                                                               &hmsg);
                                char *hc = NULL;
                                if (with_health && hmsg[0] &&
                                    asprintf(&hc, "%s: %s", hv, hmsg) < 0)
                                        hc = NULL;
                                prep_row(t, with_health ? (hc ? hc : hv) : NULL, uid,
                                         d->pool_name, d->device_name,
                                         req && req[0] ? req : NULL, cdi && cdi[0] ? cdi : NULL);
                                free(hc);
                                free(req);
                                free(cdi);
                                json_t *o = json_object();
                                json_object_set_new(o, "poolName", json_string(d->pool_name));
                                json_object_set_new(o, "deviceName",
                                                    json_string(d->device_name));
                                json_object_set_new(o, "requestNames",
                                                    strv_json(d->request_names,
                                                              d->n_request_names));
                                json_object_set_new(o, "cdiDeviceIDs",
                                                    strv_json(d->cdi_device_ids,
                                                              d->n_cdi_device_ids));
                                if (with_health) {
                                        /* kubelet's allocatedResourcesStatus
                                         * resource: <driver>/<pool>/<device> */
                                        char *rid = NULL;
                                        if (asprintf(&rid, "%s/%s/%s", p->name, d->pool_name,
                                                     d->device_name) >= 0)
                                                json_object_set_new(o, "resourceID",
                                                                    json_string(rid));
                                        free(rid);
                                        json_object_set_new(o, "health", json_string(hv));
                                        if (hmsg[0])
                                                json_object_set_new(o, "healthMessage",
                                                                    json_string(hmsg));
                                }
                                json_array_append_new(jd, o);
                        }
                        if (!v || v->n_devices == 0)
                                prep_row(t, hcell, uid, "-", "-", "-", "(no devices)");
                }
        } else {
                UnprepResp *r = (UnprepResp *)msg;
                n_entries = r->n_claims;
                if (r->n_claims > 1)
                        qsort(r->claims, r->n_claims, sizeof(*r->claims), cmp_unprep_entry);
                for (size_t i = 0; i < r->n_claims; i++) {
                        const char *uid = r->claims[i]->key;
                        const char *e = r->claims[i]->value ? r->claims[i]->value->error : "";
                        json_t *jc = json_object();
                        json_object_set(jclaims, uid, jc);
                        json_decref(jc);
                        if (!requested(st, uid))
                                e = "not requested";
                        if (e[0]) {
                                fprintf(stderr, "kdevctl %s: %s: claim %s: %s\n", CMD, call, uid,
                                        e);
                                json_object_set_new(jc, "error", json_string(e));
                                char *cell = malloc(strlen(e) + 8);
                                if (cell)
                                        sprintf(cell, "error: %s", e);
                                kdev_cli_table_add(t, uid, cell);
                                free(cell);
                                failed = 1;
                        } else {
                                dra_podres_unprepared(pr, uid);
                                kdev_cli_table_add(t, uid, "unprepared");
                        }
                }
        }
        size_t want = distinct_uids(st);
        if (n_entries < want) {
                char m[128];
                snprintf(m, sizeof(m), "%s skipped %zu ResourceClaims", call, want - n_entries);
                fprintf(stderr, "kdevctl %s: %s\n", CMD, m);
                json_object_set_new(jstep, "error", json_string(m));
                failed = 1;
        }
        if (out == KDEV_CLI_OUTPUT_TABLE && t)
                kdev_cli_table_print(t, stdout, "  ");
        kdev_cli_table_free(t);
        protobuf_c_message_free_unpacked(msg, NULL);
        if (hr)
                v1alpha1__node_watch_resources_response__free_unpacked(hr, NULL);
        return failed;
}

int kdevctl_cmd_dra(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], "allocate") == 0)
                return kdevctl_cmd_dra_allocate(argc - 1, argv + 1);
        static const struct kdev_cli_opt opts[] = {
                {"registry", 0, true, OPT_REGISTRY},
                {"scenario", 0, true, OPT_SCENARIO},
                {"driver", 0, true, OPT_DRIVER},
                {"output", 'o', true, OPT_OUTPUT},
                {"watch", 0, true, OPT_WATCH},
                {"pod-resources-socket", 0, true, OPT_PODRES},
        };
        struct args a = {0};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a,
                                &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.registry)
                return kdev_cli_usage_error(CMD, "--registry DIR is required");
        if (a.podres && !a.watch)
                return kdev_cli_usage_error(CMD, "--pod-resources-socket serves while watching: "
                                                 "it needs --watch SEC");
        if (a.podres && !a.podres[0])
                return kdev_cli_usage_error(CMD, "--pod-resources-socket: empty path");

        struct scenario sc = {0};
        if (a.scenario && load_scenario(a.scenario, &sc, &err) < 0) {
                scenario_free(&sc);
                return kdev_cli_fail(CMD, "%s", err.msg);
        }

        static struct watcher w; /* libuv handles: not on the stack of a callback */
        memset(&w, 0, sizeof(w));
        w.dir = a.registry;
        w.output = a.output;
        w.podres_path = a.podres;
        if (reconcile(&w) < 0) {
                scenario_free(&sc);
                watcher_clear(&w);
                return KDEV_CLI_FAIL;
        }
        struct plugins ps = w.ps;
        int failed = 0;
        json_t *root = json_object();
        json_t *jplugins = json_array();
        json_t *jsteps = json_array();
        json_object_set_new(root, "plugins", jplugins);
        struct kdev_cli_table *t = kdev_cli_table_new(4, "NAME", "ENDPOINT", "VERSION", "SOCKET");
        for (size_t i = 0; i < ps.n; i++) {
                kdev_cli_table_add(t, ps.v[i].name, ps.v[i].endpoint, ps.v[i].version,
                                   ps.v[i].socket);
                json_t *o = json_object();
                json_object_set_new(o, "name", json_string(ps.v[i].name));
                json_object_set_new(o, "endpoint", json_string(ps.v[i].endpoint));
                json_object_set_new(o, "version", json_string(ps.v[i].version));
                json_object_set_new(o, "socket", json_string(ps.v[i].socket));
                if (ps.v[i].health)
                        json_object_set_new(o, "healthService", json_string(HEALTH_SERVICE));
                json_array_append_new(jplugins, o);
        }
        if (a.output == KDEV_CLI_OUTPUT_TABLE) {
                if (ps.n)
                        kdev_cli_table_print(t, stdout, NULL);
                else
                        printf("No DRA plugins registered in %s.\n", a.registry);
        }
        kdev_cli_table_free(t);

        if (a.scenario) {
                const struct plugin *target = NULL;
                json_object_set_new(root, "steps", jsteps);
                for (size_t i = 0; i < ps.n; i++) {
                        if (a.driver ? strcmp(ps.v[i].name, a.driver) == 0 : ps.n == 1)
                                target = &ps.v[i];
                }
                if (!target) {
                        if (a.driver)
                                fprintf(stderr, "kdevctl %s: no registered DRA plugin named "
                                                "\"%s\"\n", CMD, a.driver);
                        else
                                fprintf(stderr, "kdevctl %s: %zu DRA plugins registered; the "
                                                "scenario needs exactly one (or --driver)\n",
                                        CMD, ps.n);
                        failed++;
                } else {
                        for (size_t i = 0; i < sc.n; i++)
                                failed += run_step(target, &sc.v[i], a.output, jsteps,
                                                   &w.podres);
                }
        } else {
                json_decref(jsteps);
        }
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                if (text)
                        printf("%s\n", text);
                free(text);
        }
        json_decref(root);
        scenario_free(&sc);
        fflush(stdout);
        if (a.watch && watch(&w, a.watch_ms) < 0)
                failed++;
        failed += w.failed;
        watcher_clear(&w);
        return failed ? KDEV_CLI_FAIL : KDEV_CLI_OK;
}
