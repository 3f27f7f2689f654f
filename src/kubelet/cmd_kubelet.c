/* kdevctl kubelet: acts as kubelet's device manager. Serves
 * /v1beta1.Registration/Register on DIR/kubelet.sock, dials registered
 * plugins back (GetDevicePluginOptions, ListAndWatch), keeps capacity and the
 * checkpoint, and admits the pods of a scenario file (GetPreferredAllocation,
 * Allocate, PreStartContainer) with kubelet's rules and error texts.
 *
 * Follows Kubernetes pkg/kubelet/cm/devicemanager (manager.go,
 * plugin/v1beta1/server.go, handler.go, client.go, endpoint.go,
 * pod_devices.go); the decisions live in devmgr.c, this file does the I/O.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "common/dir.h"
#include "common/log.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/checkpoint.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "kubelet/devmgr.h"
#include "kubelet/scenario.h"
#include "rpc/rpc.h"

#define CMD "kubelet"
#define REGISTER_PATH "/v1beta1.Registration/Register"
#define DIAL_RETRY_MS 50
#define PRESTART_TIMEOUT_MS 30000 /* KubeletPreStartContainerRPCTimeoutInSecs */

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl kubelet --dir DIR [--scenario FILE] [--hold SEC] [-o table|json]\n"
                "                       [--restart-after SEC] [--dial-timeout SEC]\n"
                "                       [--log-level LEVEL] [--log-format FORMAT]\n"
                "\n"
                "Acts as kubelet's device manager on the device-plugin directory DIR:\n"
                "creates DIR (mkdir -p), removes stale Unix sockets in it (not the\n"
                "checkpoint, not directories or other files), serves\n"
                "/v1beta1.Registration/Register on DIR/kubelet.sock, dials each registered\n"
                "plugin back (GetDevicePluginOptions, then ListAndWatch), keeps capacity and\n"
                "allocatable per resource and rewrites DIR/" KDEV_CKPT_FILE " like\n"
                "kubelet.\n"
                "\n"
                "With --scenario, runs the scenario (waits, pod admissions with\n"
                "GetPreferredAllocation / Allocate / PreStartContainer, deletions, restarts,\n"
                "shell commands; format in examples/scenario-reference.yaml), prints the\n"
                "node's resources and every pod's result, and exits 0 (admission errors are\n"
                "results). Without a scenario it serves until SIGINT/SIGTERM (or for --hold\n"
                "SEC) and then prints the node's resources.\n"
                "\n"
                "Options:\n"
                "      --dir DIR            device-plugin directory (required)\n"
                "      --scenario FILE      scenario to run once kubelet.sock is served\n"
                "      --hold SEC           keep serving SEC seconds after the scenario\n"
                "                           (0 = until SIGINT/SIGTERM); without a scenario,\n"
                "                           stop after SEC seconds\n"
                "      --restart-after SEC  simulate one kubelet restart SEC seconds after start\n"
                "      --dial-timeout SEC   how long Register waits for the plugin socket\n"
                "                           (default 10, as kubelet)\n"
                "  -o, --output FORMAT      table (default) or json\n"
                "      --log-level LEVEL    debug, info, warn or error (default info); logs\n"
                "                           go to stderr, one line per event\n"
                "      --log-format FORMAT  text (key=value, default) or json (JSON lines)\n"
                "      --log-json           the same as --log-format json\n"
                "  -h, --help               show this help\n"
                "\n"
                "SEC is a number of seconds, fractions allowed (2, 0.5); 0 for --dial-timeout\n"
                "means one try, for --restart-after at once.\n"
                "\n"
                "Signals:\n"
                "  SIGINT, SIGTERM  stop: close the server, remove kubelet.sock, print, exit 0\n"
                "  SIGHUP           simulate a kubelet restart: drop every endpoint, delete\n"
                "                   every socket in DIR, re-read the checkpoint (registered\n"
                "                   resources come back with capacity 0 and a stopped\n"
                "                   endpoint), serve a new kubelet.sock\n"
                "\n"
                "Files:\n"
                "  DIR/kubelet.sock                     the Registration server (removed at exit)\n"
                "  DIR/" KDEV_CKPT_FILE "  kubelet's device manager checkpoint\n"
                "\n"
                "Exit status: 0 served / scenario ran; 1 setup failure (directory, socket,\n"
                "scenario file); 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl kubelet --dir /tmp/dp --scenario examples/scenario-reference.yaml\n"
                "  kdevctl kubelet --dir /tmp/dp --hold 30 --log-level debug --log-format json\n");
}

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

struct kubelet;

/* One plugin connection (kubelet's endpoint + client). */
struct endpoint {
        struct kubelet *k;
        char *resource;
        char *socket;   /* file name given in Register */
        char *path;     /* DIR/socket */
        struct kdev_rpc_client *cl;
        struct kdev_rpc_client_call *lw;
        bool current;   /* the endpoint registered under |resource| */
        bool listed;    /* a ListAndWatch list came on this endpoint's stream */
        bool dead;      /* queued for closing */
        struct endpoint *next;
};

struct options_state;

/* A Register call being served. */
struct reg {
        struct kubelet *k;
        struct kdev_rpc_call *call; /* NULL once answered or cancelled */
        char *resource;
        char *socket;
        char *path;
        uint64_t deadline;          /* dial deadline, loop ms */
        int last_errno;
        uv_timer_t timer;
        struct endpoint *ep;        /* while GetDevicePluginOptions runs */
        struct kdev_rpc_client_call *opt_call;
        struct options_state *os;   /* state of opt_call */
        bool closing;
        struct reg *next;
};

struct alloc_result {
        char *resource;
        char **ids;
        size_t n_ids;
        bool cached; /* held from before (checkpoint): no Allocate */
        char *prestart; /* NULL: not called; "" ok; else error text */
};

struct ctr_result {
        char *name;
        bool init;
        struct alloc_result *allocs;
        size_t n_allocs;
        struct kdev_dm_opts opts;
};

struct step_result {
        enum kdev_scn_kind kind;
        bool done;
        bool ok;
        char *text; /* wait/restart/delete/sleep/exec: outcome; pod: message */
        /* exec */
        char *command;
        bool exited;       /* exit_code is valid */
        int exit_code;
        int term_signal;   /* killed by this signal (0: not) */
        bool timed_out;
        /* pod */
        char *pod_name;
        char *uid;
        char *reason;
        struct ctr_result *ctrs;
        size_t n_ctrs;
};

/* A pod admitted and still active: its requests, for the resource fit. */
struct active_pod {
        char *uid;
        const struct kdev_scn_pod *pod;
};

enum admit_phase { PH_NEXT_LIMIT, PH_PREFERRED, PH_ALLOCATE, PH_PRESTART };

struct reuse {
        char *resource;
        char **ids;
        size_t n;
};

struct admission {
        bool active;
        const struct kdev_scn_pod *pod;
        struct step_result *res;
        size_t ci, li;     /* container, limit */
        bool updated;      /* drop_inactive done for this container */
        bool wrote;        /* the container needs a checkpoint write */
        struct kdev_dm_pick pick;
        struct reuse *reuse;
        size_t n_reuse;
        size_t ps_ci, ps_li; /* PreStart iteration */
        struct kdev_rpc_client_call *call;
};

/* The running exec step's child (/bin/sh -c, its own process group). */
struct exec_run {
        struct kubelet *k;
        uv_process_t proc;
        size_t result;   /* index in k->results */
        uint64_t timeout_ms;
        bool timed_out;  /* killed by the step timeout */
};

struct kubelet {
        uv_loop_t *loop;
        char *dir;
        char *sock_path;
        char *ckpt_path;
        struct kdev_rpc_server *srv;
        struct kdev_devmgr *dm;
        struct endpoint *eps;
        struct reg *regs;
        uv_signal_t sig_int, sig_term, sig_hup;
        uv_timer_t step_timer;   /* wait timeout / sleep */
        uv_timer_t hold_timer;
        uv_timer_t restart_timer;
        uv_timer_t reaper;       /* closes dead endpoints outside callbacks */
        /* lines a device plugin can repeat without bound (Register, its
         * outcome, ListAndWatch updates, stream ends): identical ones within
         * 5 s get one line per window (common/log.h); flushed by log_timer,
         * the rest printed at exit */
        struct kdev_log_limiter *peer_log;
        uv_timer_t log_timer;
        uv_idle_t kick;          /* runs the scenario outside callbacks */
        bool kick_active;
        uint64_t dial_timeout_ms;
        enum kdev_cli_output output;
        struct kdev_scenario scn;
        bool have_scenario;
        size_t step;             /* next step to start */
        bool step_running;
        struct step_result *results;
        size_t n_results;
        struct admission adm;
        struct exec_run *exec;   /* running exec step, or NULL */
        struct active_pod *active;
        size_t n_active;
        bool scenario_done;
        bool printed;
        int64_t hold_ms;         /* -1 = no --hold */
        bool stopping;
        int exit_code;
};

static void scenario_kick(struct kubelet *k);
static bool wait_poll(struct kubelet *k);
static void exec_abort(struct kubelet *k);
static void step_timeout(uv_timer_t *t);
static void endpoint_retire(struct endpoint *ep);
static void admission_step(struct kubelet *k);

static void on_log_timer(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        uint64_t ms = kdev_log_limiter_flush(k->peer_log, false);
        if (ms > 0 && !k->stopping)
                uv_timer_start(&k->log_timer, on_log_timer, ms, 0);
}

/* A line a peer can repeat: through the limiter, whose windows the timer
 * ends (armed when idle). */
#define PEER_LOG(k, level, ...)                                                          \
        do {                                                                             \
                kdev_log_limited((k)->peer_log, 1, (level), __VA_ARGS__, NULL);          \
                if (!(k)->stopping && !uv_is_active((uv_handle_t *)&(k)->log_timer))     \
                        uv_timer_start(&(k)->log_timer, on_log_timer,                    \
                                       KDEV_LOG_REPEAT_WINDOW_MS, 0);                    \
        } while (0)

static char *xstrdup(const char *s)
{
        char *d = strdup(s ? s : "");
        if (!d) {
                fprintf(stderr, "kdevctl kubelet: out of memory\n");
                abort();
        }
        return d;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *s = NULL;
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0) {
                fprintf(stderr, "kdevctl kubelet: out of memory\n");
                abort();
        }
        return s;
}

/* "rpc error: code = NotFound desc = msg", the grpc-go status text. */
static char *rpc_error_text(int status, const char *message)
{
        char name[32];
        return xasprintf("rpc error: code = %s desc = %s",
                         kdev_cli_code_name(status, name, sizeof(name)), message ? message : "");
}

/* ------------------------------------------------------------------------ */
/* Directory and server                                                     */
/* ------------------------------------------------------------------------ */

/* mkdir -p DIR: new components 0750 (kubelet's mode), whatever the umask. */
static int mkdir_p(const char *dir, struct kdev_err *err)
{
        int rc = kdev_dir_create_all(dir, KDEV_DIR_MODE_PLUGIN, "device-plugin directory", err);
        return rc < 0 ? rc : 0;
}

/* kubelet CleanupPluginDirectory: removes every Unix socket in the directory
 * (stat follows links), leaving the checkpoint, directories and other
 * files. */
static void cleanup_sockets(struct kubelet *k)
{
        DIR *d = opendir(k->dir);
        if (!d) {
                kdev_log_error("cannot read the device-plugin directory", "dir", k->dir, "error",
                               strerror(errno));
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    strcmp(de->d_name, KDEV_CKPT_FILE) == 0)
                        continue;
                char *path = xasprintf("%s/%s", k->dir, de->d_name);
                struct stat st;
                if (stat(path, &st) < 0) {
                        kdev_log_error("Failed to stat file", "path", path, "error",
                                       strerror(errno));
                } else if (S_ISSOCK(st.st_mode)) {
                        if (unlink(path) < 0)
                                kdev_log_error("Failed to remove socket", "path", path, "error",
                                               strerror(errno));
                        else
                                kdev_log_debug("removed stale socket", "path", path);
                }
                free(path);
        }
        closedir(d);
}

static void on_register(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud);

static int server_start(struct kubelet *k, struct kdev_err *err)
{
        k->srv = kdev_rpc_server_new(k->loop, NULL);
        if (!k->srv)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = kdev_rpc_server_add_method(k->srv, REGISTER_PATH, false, on_register, k);
        if (rc == 0)
                rc = kdev_rpc_server_listen_unix(k->srv, k->sock_path, err);
        if (rc < 0) {
                kdev_rpc_server_close(k->srv, NULL, NULL);
                k->srv = NULL;
                return rc;
        }
        kdev_log_info("serving Registration", "socket", k->sock_path);
        return 0;
}

/* ------------------------------------------------------------------------ */
/* Endpoints                                                                */
/* ------------------------------------------------------------------------ */

static void endpoint_free(struct endpoint *ep)
{
        free(ep->resource);
        free(ep->socket);
        free(ep->path);
        free(ep);
}

static void on_reaper(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        if (k->stopping)
                return;
        struct endpoint **pp = &k->eps;
        while (*pp) {
                struct endpoint *ep = *pp;
                if (ep->dead && !ep->lw) {
                        *pp = ep->next;
                        kdev_rpc_client_close(ep->cl);
                        endpoint_free(ep);
                        continue;
                }
                pp = &ep->next;
        }
}

static struct endpoint *endpoint_new(struct kubelet *k, const char *resource, const char *socket,
                                     const char *path)
{
        struct endpoint *ep = calloc(1, sizeof(*ep));
        if (!ep)
                return NULL;
        ep->k = k;
        ep->resource = xstrdup(resource);
        ep->socket = xstrdup(socket);
        ep->path = xstrdup(path);
        ep->cl = kdev_rpc_client_new(k->loop, path, NULL);
        if (!ep->cl) {
                endpoint_free(ep);
                return NULL;
        }
        ep->next = k->eps;
        k->eps = ep;
        return ep;
}

/* Stops |ep|: it is no longer current, its stream is cancelled and its
 * client closed soon (outside any callback of it). */
static void endpoint_retire(struct endpoint *ep)
{
        ep->current = false;
        ep->dead = true;
        if (ep->lw)
                kdev_rpc_client_call_cancel(ep->lw); /* on_done clears ep->lw */
        if (!ep->k->stopping)
                uv_timer_start(&ep->k->reaper, on_reaper, 0, 0);
}

static struct endpoint *current_endpoint(struct kubelet *k, const char *resource)
{
        for (struct endpoint *ep = k->eps; ep; ep = ep->next)
                if (ep->current && strcmp(ep->resource, resource) == 0)
                        return ep;
        return NULL;
}

static void lw_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        struct endpoint *ep = ud;
        struct kubelet *k = ep->k;
        if (!ep->current)
                return;
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
        if (!r) {
                PEER_LOG(k, KDEV_LOG_ERROR, "cannot decode ListAndWatch response; ending the stream",
                         "resource", ep->resource);
                kdev_rpc_client_call_cancel(call);
                return;
        }
        struct kdev_err err = {0};
        int rc = kdev_dm_update(k->dm, ep->resource, r, &err);
        if (rc < 0)
                PEER_LOG(k, KDEV_LOG_ERROR, "device update", "resource", ep->resource, "error",
                         err.msg);
        else
                ep->listed = true;
        size_t healthy = 0;
        for (size_t i = 0; i < r->n_devices; i++)
                healthy += r->devices[i]->health && strcmp(r->devices[i]->health, "Healthy") == 0;
        char n[24], h[24];
        snprintf(n, sizeof(n), "%zu", r->n_devices);
        snprintf(h, sizeof(h), "%zu", healthy);
        PEER_LOG(k, KDEV_LOG_INFO, "ListAndWatch update", "resource", ep->resource, "devices", n,
                 "healthy", h);
        v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        wait_poll(k);
        scenario_kick(k);
}

static void lw_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct endpoint *ep = ud;
        struct kubelet *k = ep->k;
        ep->lw = NULL;
        if (ep->current) {
                char name[32];
                PEER_LOG(k, KDEV_LOG_WARN, "ListAndWatch ended unexpectedly for device plugin",
                         "resource", ep->resource, "code",
                         kdev_cli_code_name(status, name, sizeof(name)), "message", message);
                kdev_dm_disconnect(k->dm, ep->resource);
                endpoint_retire(ep);
                scenario_kick(k);
        } else if (!k->stopping) {
                uv_timer_start(&k->reaper, on_reaper, 0, 0);
        }
}

/* ------------------------------------------------------------------------ */
/* Register                                                                 */
/* ------------------------------------------------------------------------ */

static void reg_closed(uv_handle_t *h)
{
        struct reg *r = h->data;
        free(r->resource);
        free(r->socket);
        free(r->path);
        free(r);
}

static void reg_finish(struct reg *r)
{
        struct kubelet *k = r->k;
        for (struct reg **pp = &k->regs; *pp; pp = &(*pp)->next) {
                if (*pp == r) {
                        *pp = r->next;
                        break;
                }
        }
        r->closing = true;
        uv_timer_stop(&r->timer);
        uv_close((uv_handle_t *)&r->timer, reg_closed);
}

static void reg_fail(struct reg *r, const char *msg)
{
        PEER_LOG(r->k, KDEV_LOG_ERROR, "registration failed", "resource", r->resource, "endpoint",
                 r->socket, "error", msg);
        if (r->call)
                kdev_rpc_call_finish(r->call, KDEV_RPC_UNKNOWN, msg);
        r->call = NULL;
        reg_finish(r);
}

static void reg_on_cancel(struct kdev_rpc_call *call, void *ud)
{
        (void)call;
        struct reg *r = ud;
        r->call = NULL; /* kubelet carries on with the plugin all the same */
}

static void options_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                            void *ud);
static void options_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud);

struct options_state {
        struct reg *r;              /* NULL once the registration was dropped */
        struct endpoint *ep;
        bool got;
        bool bad;
        bool pre_start;
        bool preferred;
};

static void reg_dial(uv_timer_t *t)
{
        struct reg *r = t->data;
        struct kubelet *k = r->k;
        int e = 0;
        enum kdev_cli_sock_state st = kdev_cli_probe_socket(r->path, &e);
        if (st != KDEV_CLI_SOCK_LIVE) {
                r->last_errno = e;
                if (uv_now(k->loop) >= r->deadline) {
                        PEER_LOG(k, KDEV_LOG_WARN, "cannot dial device plugin", "path", r->path,
                                 "error", strerror(r->last_errno));
                        /* grpc-go's blocking dial reports only the deadline. */
                        reg_fail(r, "failed to dial device plugin: context deadline exceeded");
                        return;
                }
                uv_timer_start(&r->timer, reg_dial, DIAL_RETRY_MS, 0);
                return;
        }
        r->ep = endpoint_new(k, r->resource, r->socket, r->path);
        if (!r->ep) {
                reg_fail(r, "failed to dial device plugin: out of memory");
                return;
        }
        struct options_state *os = calloc(1, sizeof(*os));
        if (!os) {
                endpoint_retire(r->ep);
                r->ep = NULL;
                reg_fail(r, "failed to get device plugin options: out of memory");
                return;
        }
        os->r = r;
        os->ep = r->ep;
        r->os = os;
        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        uint8_t buf[8];
        size_t len = v1beta1__empty__pack(&empty, buf);
        struct kdev_err err = {0};
        /* kubelet sets no deadline on GetDevicePluginOptions. */
        r->opt_call = kdev_rpc_client_unary(r->ep->cl, KDEV_DP_GET_OPTIONS, buf, len, 0,
                                            options_message, options_done, os, &err);
        if (!r->opt_call) {
                free(os);
                r->os = NULL;
                endpoint_retire(r->ep);
                r->ep = NULL;
                char *m = xasprintf("failed to get device plugin options: %s", err.msg);
                reg_fail(r, m);
                free(m);
        }
}

static void options_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                            void *ud)
{
        (void)call;
        struct options_state *os = ud;
        V1beta1__DevicePluginOptions *o = v1beta1__device_plugin_options__unpack(NULL, len, msg);
        if (!o) {
                os->bad = true;
                return;
        }
        os->got = true;
        os->pre_start = o->pre_start_required;
        os->preferred = o->get_preferred_allocation_available;
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
}

static void options_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct options_state *os = ud;
        struct reg *r = os->r;
        struct endpoint *ep = os->ep;
        if (!r) {
                /* The registration was dropped (stop or restart). */
                endpoint_retire(ep);
                free(os);
                return;
        }
        struct kubelet *k = r->k;
        r->opt_call = NULL;
        r->os = NULL;
        r->ep = NULL;
        if (status == KDEV_RPC_OK && os->bad) {
                status = KDEV_RPC_INTERNAL;
                message = "grpc: failed to unmarshal the received message";
        }
        if (status != KDEV_RPC_OK || k->stopping) {
                char *e = rpc_error_text(status, message);
                char *m = xasprintf("failed to get device plugin options: %s", e);
                endpoint_retire(ep);
                reg_fail(r, m);
                free(m);
                free(e);
                free(os);
                return;
        }
        /* PluginConnected: the new endpoint replaces the old one, whose
         * stream is cancelled first so its end cannot disconnect the new
         * one. */
        struct endpoint *old = current_endpoint(k, r->resource);
        if (old)
                endpoint_retire(old);
        if (!kdev_dm_connect(k->dm, r->resource, r->socket, os->pre_start, os->preferred)) {
                endpoint_retire(ep);
                reg_fail(r, "out of memory");
                free(os);
                return;
        }
        ep->current = true;
        PEER_LOG(k, KDEV_LOG_INFO, "registered device plugin", "resource", r->resource, "endpoint",
                 r->socket, "pre_start_required", os->pre_start ? "true" : "false",
                 "get_preferred_allocation_available", os->preferred ? "true" : "false");
        free(os);
        if (r->call) {
                V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
                kdev_rpc_call_reply_pb(r->call, &empty.base);
                r->call = NULL;
        }
        reg_finish(r);

        uint8_t buf[8];
        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        size_t len = v1beta1__empty__pack(&empty, buf);
        struct kdev_err err = {0};
        ep->lw = kdev_rpc_client_call(ep->cl, KDEV_DP_LIST_AND_WATCH, buf, len, 0, lw_message,
                                      lw_done, ep, &err);
        if (!ep->lw) {
                PEER_LOG(k, KDEV_LOG_WARN, "ListAndWatch ended unexpectedly for device plugin",
                         "resource", ep->resource, "error", err.msg);
                kdev_dm_disconnect(k->dm, ep->resource);
                endpoint_retire(ep);
        }
        scenario_kick(k);
}

static void on_register(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kubelet *k = ud;
        V1beta1__RegisterRequest *rq = v1beta1__register_request__unpack(NULL, len, req);
        if (!rq) {
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL,
                                     "grpc: error unmarshalling request: invalid RegisterRequest");
                return;
        }
        PEER_LOG(k, KDEV_LOG_INFO, "Register", "resource", rq->resource_name, "endpoint",
                 rq->endpoint, "version", rq->version);
        struct kdev_err err = {0};
        if (kdev_dm_check_register(rq->version, rq->resource_name, &err) < 0) {
                PEER_LOG(k, KDEV_LOG_ERROR, "registration rejected", "resource", rq->resource_name,
                         "error", err.msg);
                kdev_rpc_call_finish(call, KDEV_RPC_UNKNOWN, err.msg);
                v1beta1__register_request__free_unpacked(rq, NULL);
                return;
        }
        struct reg *r = calloc(1, sizeof(*r));
        if (!r) {
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL, "out of memory");
                v1beta1__register_request__free_unpacked(rq, NULL);
                return;
        }
        r->k = k;
        r->call = call;
        r->resource = xstrdup(rq->resource_name);
        r->socket = xstrdup(rq->endpoint);
        /* filepath.Join(socketDir, endpoint) */
        r->path = rq->endpoint[0] == '/' ? xasprintf("%s%s", k->dir, rq->endpoint)
                                         : xasprintf("%s/%s", k->dir, rq->endpoint);
        r->deadline = uv_now(k->loop) + k->dial_timeout_ms;
        v1beta1__register_request__free_unpacked(rq, NULL);
        uv_timer_init(k->loop, &r->timer);
        r->timer.data = r;
        r->next = k->regs;
        k->regs = r;
        kdev_rpc_call_on_cancel(call, reg_on_cancel, r);
        reg_dial(&r->timer);
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

static struct step_result *result_new(struct kubelet *k, enum kdev_scn_kind kind)
{
        struct step_result *nr = realloc(k->results, (k->n_results + 1) * sizeof(*nr));
        if (!nr)
                abort();
        k->results = nr;
        struct step_result *r = &nr[k->n_results++];
        memset(r, 0, sizeof(*r));
        r->kind = kind;
        return r;
}

static void results_free(struct kubelet *k)
{
        for (size_t i = 0; i < k->n_results; i++) {
                struct step_result *r = &k->results[i];
                free(r->text);
                free(r->pod_name);
                free(r->uid);
                free(r->reason);
                free(r->command);
                for (size_t c = 0; c < r->n_ctrs; c++) {
                        struct ctr_result *cr = &r->ctrs[c];
                        free(cr->name);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                free(cr->allocs[a].resource);
                                for (size_t x = 0; x < cr->allocs[a].n_ids; x++)
                                        free(cr->allocs[a].ids[x]);
                                free(cr->allocs[a].ids);
                                free(cr->allocs[a].prestart);
                        }
                        free(cr->allocs);
                        kdev_dm_opts_clear(&cr->opts);
                }
                free(r->ctrs);
        }
        free(k->results);
        k->results = NULL;
        k->n_results = 0;
}

static const char *state_text(const struct kdev_dm_resource *r)
{
        if (!r->has_endpoint)
                return "unregistered";
        return r->stopped ? "stopped" : "connected";
}

static json_t *resources_json(struct kubelet *k)
{
        json_t *a = json_array();
        for (size_t i = 0; i < k->dm->n_res; i++) {
                const struct kdev_dm_resource *r = &k->dm->res[i];
                size_t cap, alloc, used;
                kdev_dm_counts(k->dm, r, &cap, &alloc, &used);
                json_t *devs = json_array();
                for (size_t d = 0; d < r->n_devices; d++)
                        json_array_append_new(devs, json_pack("{s:s,s:s}", "id", r->devices[d].id,
                                                              "health",
                                                              r->devices[d].healthy ? "Healthy"
                                                                                    : "Unhealthy"));
                json_array_append_new(
                        a, json_pack("{s:s,s:I,s:I,s:I,s:o,s:s,s:o}", "name", r->name, "capacity",
                                     (json_int_t)cap, "allocatable", (json_int_t)alloc, "allocated",
                                     (json_int_t)used, "endpoint",
                                     r->endpoint ? json_string(r->endpoint) : json_null(), "state",
                                     state_text(r), "devices", devs));
        }
        return a;
}

static const char *kind_text(enum kdev_scn_kind kind)
{
        switch (kind) {
        case KDEV_SCN_WAIT:
                return "wait";
        case KDEV_SCN_POD:
                return "pod";
        case KDEV_SCN_DELETE:
                return "delete";
        case KDEV_SCN_RESTART:
                return "restart";
        case KDEV_SCN_SLEEP:
                return "sleep";
        case KDEV_SCN_EXEC:
                return "exec";
        }
        return "?";
}

static json_t *pod_json(const struct step_result *r)
{
        json_t *j = json_pack("{s:s,s:s,s:s,s:b}", "kind", "pod", "name", r->pod_name, "uid", r->uid,
                              "admitted", r->ok);
        if (!r->ok) {
                json_object_set_new(j, "reason", json_string(r->reason ? r->reason : ""));
                json_object_set_new(j, "message", json_string(r->text ? r->text : ""));
                return j;
        }
        json_t *ctrs = json_array();
        for (size_t c = 0; c < r->n_ctrs; c++) {
                const struct ctr_result *cr = &r->ctrs[c];
                json_t *allocs = json_array();
                for (size_t a = 0; a < cr->n_allocs; a++) {
                        const struct alloc_result *ar = &cr->allocs[a];
                        json_t *ids = json_array();
                        for (size_t x = 0; x < ar->n_ids; x++)
                                json_array_append_new(ids, json_string(ar->ids[x]));
                        json_t *ja = json_pack("{s:s,s:o,s:b}", "resource", ar->resource,
                                               "deviceIDs", ids, "fromCheckpoint", ar->cached);
                        if (ar->prestart)
                                json_object_set_new(ja, "preStart",
                                                    json_string(*ar->prestart ? ar->prestart : "ok"));
                        json_array_append_new(allocs, ja);
                }
                json_t *jc = json_pack("{s:s,s:b,s:o}", "name", cr->name, "init", cr->init,
                                       "allocations", allocs);
                json_t *opts = kdev_dm_opts_json(&cr->opts);
                if (opts)
                        json_object_update(jc, opts);
                json_decref(opts);
                json_array_append_new(ctrs, jc);
        }
        json_object_set_new(j, "containers", ctrs);
        return j;
}

static void print_results(struct kubelet *k)
{
        if (k->printed)
                return;
        k->printed = true;
        if (k->output == KDEV_CLI_OUTPUT_JSON) {
                json_t *steps = json_array();
                for (size_t i = 0; i < k->n_results; i++) {
                        const struct step_result *r = &k->results[i];
                        if (r->kind == KDEV_SCN_POD && r->done) {
                                json_array_append_new(steps, pod_json(r));
                                continue;
                        }
                        json_t *js = json_pack("{s:s,s:b,s:s}", "kind", kind_text(r->kind), "ok",
                                               r->done && r->ok, "result",
                                               r->done ? (r->text ? r->text : "") : "not finished");
                        if (r->pod_name)
                                json_object_set_new(js, "name", json_string(r->pod_name));
                        if (r->command)
                                json_object_set_new(js, "command", json_string(r->command));
                        if (r->done && r->exited)
                                json_object_set_new(js, "exitCode", json_integer(r->exit_code));
                        if (r->done && r->term_signal)
                                json_object_set_new(js, "signal", json_integer(r->term_signal));
                        if (r->done && r->timed_out)
                                json_object_set_new(js, "timedOut", json_true());
                        json_array_append_new(steps, js);
                }
                json_t *j = json_pack("{s:o,s:o}", "steps", steps, "resources", resources_json(k));
                char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                if (s)
                        printf("%s\n", s);
                free(s);
                json_decref(j);
                fflush(stdout);
                return;
        }
        for (size_t i = 0; i < k->n_results; i++) {
                const struct step_result *r = &k->results[i];
                if (r->kind != KDEV_SCN_POD) {
                        printf("%s%s%s: %s\n", kind_text(r->kind), r->pod_name ? " " : "",
                               r->pod_name ? r->pod_name : "",
                               r->done ? (r->text ? r->text : "") : "not finished");
                        continue;
                }
                if (!r->done) {
                        printf("pod %s (uid %s): not finished\n", r->pod_name, r->uid);
                        continue;
                }
                if (!r->ok) {
                        printf("pod %s (uid %s): rejected: %s: %s\n", r->pod_name, r->uid, r->reason,
                               r->text);
                        continue;
                }
                printf("pod %s (uid %s): admitted\n", r->pod_name, r->uid);
                for (size_t c = 0; c < r->n_ctrs; c++) {
                        const struct ctr_result *cr = &r->ctrs[c];
                        printf("  %scontainer %s\n", cr->init ? "init " : "", cr->name);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                const struct alloc_result *ar = &cr->allocs[a];
                                char *ids = kdev_cli_strv_join(ar->ids, ar->n_ids, ",");
                                printf("    %s: %s%s\n", ar->resource, ids ? ids : "",
                                       ar->cached ? " (held from before, no Allocate)" : "");
                                free(ids);
                        }
                        kdev_dm_opts_print(stdout, "    ", &cr->opts);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                const struct alloc_result *ar = &cr->allocs[a];
                                if (ar->prestart)
                                        printf("    prestart %s: %s\n", ar->resource,
                                               *ar->prestart ? ar->prestart : "ok");
                        }
                }
        }
        if (k->n_results)
                printf("\n");
        struct kdev_cli_table *t = kdev_cli_table_new(6, "RESOURCE", "CAPACITY", "ALLOCATABLE",
                                                      "ALLOCATED", "ENDPOINT", "STATE");
        for (size_t i = 0; t && i < k->dm->n_res; i++) {
                const struct kdev_dm_resource *r = &k->dm->res[i];
                size_t cap, alloc, used;
                kdev_dm_counts(k->dm, r, &cap, &alloc, &used);
                char c1[24], c2[24], c3[24];
                snprintf(c1, sizeof(c1), "%zu", cap);
                snprintf(c2, sizeof(c2), "%zu", alloc);
                snprintf(c3, sizeof(c3), "%zu", used);
                kdev_cli_table_add(t, r->name, c1, c2, c3, r->endpoint, state_text(r));
        }
        if (t && kdev_cli_table_rows(t) > 0)
                kdev_cli_table_print(t, stdout, NULL);
        else
                printf("no resources\n");
        kdev_cli_table_free(t);
        fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Shutdown and restart                                                     */
/* ------------------------------------------------------------------------ */

static void close_if_open(uv_handle_t *h)
{
        if (h->loop && !uv_is_closing(h))
                uv_close(h, NULL);
}

static void drop_connections(struct kubelet *k)
{
        while (k->regs) {
                struct reg *r = k->regs;
                if (r->call)
                        kdev_rpc_call_finish(r->call, KDEV_RPC_UNAVAILABLE, "kubelet is stopping");
                r->call = NULL;
                if (r->opt_call) {
                        struct kdev_rpc_client_call *c = r->opt_call;
                        r->os->r = NULL; /* options_done retires the endpoint */
                        r->opt_call = NULL;
                        r->os = NULL;
                        r->ep = NULL;
                        kdev_rpc_client_call_cancel(c);
                }
                reg_finish(r);
        }
        for (struct endpoint *ep = k->eps; ep; ep = ep->next)
                if (!ep->dead)
                        endpoint_retire(ep);
}

static void shutdown_kubelet(struct kubelet *k)
{
        if (k->stopping)
                return;
        kdev_log_info("stopping", "socket", k->sock_path);
        if (k->adm.call)
                kdev_rpc_client_call_cancel(k->adm.call);
        k->stopping = true;
        exec_abort(k);
        drop_connections(k);
        kdev_rpc_server_close(k->srv, NULL, NULL);
        k->srv = NULL;
        unlink(k->sock_path);
        /* Every client is closed now; the endpoint structures live until the
         * loop has ended, since late callbacks may still name them. */
        for (struct endpoint *ep = k->eps; ep; ep = ep->next) {
                kdev_rpc_client_close(ep->cl);
                ep->cl = NULL;
        }
        close_if_open((uv_handle_t *)&k->sig_int);
        close_if_open((uv_handle_t *)&k->sig_term);
        close_if_open((uv_handle_t *)&k->sig_hup);
        close_if_open((uv_handle_t *)&k->step_timer);
        close_if_open((uv_handle_t *)&k->hold_timer);
        close_if_open((uv_handle_t *)&k->restart_timer);
        close_if_open((uv_handle_t *)&k->reaper);
        close_if_open((uv_handle_t *)&k->log_timer);
        close_if_open((uv_handle_t *)&k->kick);
}

static int restart_kubelet(struct kubelet *k, char **summary)
{
        kdev_log_info("simulating kubelet restart", "dir", k->dir);
        drop_connections(k);
        kdev_rpc_server_close(k->srv, NULL, NULL);
        k->srv = NULL;
        struct kdev_err err = {0};
        int rc = kdev_dm_restart(k->dm, &err);
        if (rc < 0) {
                kdev_log_warn("Continue after failing to read checkpoint file", "error", err.msg);
                if (summary)
                        *summary = xasprintf("restarted; checkpoint not restored: %s", err.msg);
        } else if (summary) {
                *summary = xasprintf("restarted; checkpoint restored: %zu resources, %zu pod "
                                     "device entries",
                                     k->dm->n_res, k->dm->pods.n_entries);
        }
        cleanup_sockets(k);
        rc = server_start(k, &err);
        if (rc < 0) {
                kdev_log_error("cannot serve after restart", "error", err.msg);
                k->exit_code = KDEV_CLI_FAIL;
                shutdown_kubelet(k);
                return rc;
        }
        return 0;
}

static void on_signal(uv_signal_t *s, int signum)
{
        struct kubelet *k = s->data;
        if (signum == SIGHUP) {
                if (!k->adm.active)
                        restart_kubelet(k, NULL);
                else
                        kdev_log_warn("restart ignored while a pod is being admitted");
                scenario_kick(k);
                return;
        }
        kdev_log_info("signal received", "signal", signum == SIGINT ? "SIGINT" : "SIGTERM");
        print_results(k);
        shutdown_kubelet(k);
}

static void on_hold_done(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        print_results(k);
        shutdown_kubelet(k);
}

static void on_restart_timer(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        if (k->adm.active) {
                uv_timer_start(t, on_restart_timer, 50, 0);
                return;
        }
        restart_kubelet(k, NULL);
        scenario_kick(k);
}

/* ------------------------------------------------------------------------ */
/* Admission                                                                */
/* ------------------------------------------------------------------------ */

static struct reuse *reuse_get(struct admission *a, const char *resource)
{
        for (size_t i = 0; i < a->n_reuse; i++)
                if (strcmp(a->reuse[i].resource, resource) == 0)
                        return &a->reuse[i];
        struct reuse *nr = realloc(a->reuse, (a->n_reuse + 1) * sizeof(*nr));
        if (!nr)
                abort();
        a->reuse = nr;
        struct reuse *r = &nr[a->n_reuse++];
        r->resource = xstrdup(resource);
        r->ids = NULL;
        r->n = 0;
        return r;
}

static void reuse_free(struct admission *a)
{
        for (size_t i = 0; i < a->n_reuse; i++) {
                free(a->reuse[i].resource);
                for (size_t x = 0; x < a->reuse[i].n; x++)
                        free(a->reuse[i].ids[x]);
                free(a->reuse[i].ids);
        }
        free(a->reuse);
        a->reuse = NULL;
        a->n_reuse = 0;
}

/* add/removeContainerAllocatedResources for the current container. */
static void reuse_update(struct kubelet *k, const struct kdev_scn_container *c, bool add)
{
        struct admission *a = &k->adm;
        for (size_t i = 0; i < k->dm->pods.n_entries; i++) {
                const struct kdev_ckpt_entry *e = &k->dm->pods.entries[i];
                if (strcmp(e->pod_uid, a->pod->uid) != 0 || strcmp(e->container_name, c->name) != 0)
                        continue;
                struct reuse *r = reuse_get(a, e->resource_name);
                size_t n;
                const char **ids = kdev_dm_entry_ids(e, &n);
                for (size_t x = 0; x < n; x++) {
                        size_t pos = r->n;
                        for (size_t y = 0; y < r->n; y++)
                                if (strcmp(r->ids[y], ids[x]) == 0)
                                        pos = y;
                        if (add && pos == r->n) {
                                char **ni = realloc(r->ids, (r->n + 1) * sizeof(*ni));
                                if (!ni)
                                        abort();
                                r->ids = ni;
                                r->ids[r->n++] = xstrdup(ids[x]);
                        } else if (!add && pos < r->n) {
                                free(r->ids[pos]);
                                memmove(&r->ids[pos], &r->ids[pos + 1],
                                        (r->n - pos - 1) * sizeof(*r->ids));
                                r->n--;
                        }
                }
                free(ids);
        }
}

static void active_remove(struct kubelet *k, const char *uid)
{
        for (size_t i = 0; i < k->n_active; i++) {
                if (strcmp(k->active[i].uid, uid) == 0) {
                        free(k->active[i].uid);
                        k->active[i] = k->active[--k->n_active];
                        return;
                }
        }
}

/* Drops the records of pods no longer active and writes the checkpoint
 * (kubelet does this at its next allocation; done at once here so the
 * printed state is current). */
static void free_inactive(struct kubelet *k)
{
        if (kdev_dm_drop_inactive(k->dm) > 0) {
                struct kdev_err err = {0};
                if (kdev_dm_write_checkpoint(k->dm, &err) < 0)
                        kdev_log_error("checkpoint", "error", err.msg);
        }
}

static void admission_end(struct kubelet *k)
{
        struct admission *a = &k->adm;
        kdev_dm_pick_clear(&a->pick);
        reuse_free(a);
        memset(a, 0, sizeof(*a));
        k->step_running = false;
        scenario_kick(k);
}

static void admission_reject(struct kubelet *k, const char *reason, const char *message)
{
        struct admission *a = &k->adm;
        struct step_result *r = a->res;
        r->done = true;
        r->ok = false;
        r->reason = xstrdup(reason);
        r->text = xstrdup(message);
        kdev_log_warn("pod rejected", "pod", a->pod->name, "reason", reason, "message", message);
        kdev_dm_set_active(k->dm, a->pod->uid, false);
        active_remove(k, a->pod->uid);
        free_inactive(k);
        admission_end(k);
}

static void admission_fail(struct kubelet *k, const char *err)
{
        char *m = xasprintf("Allocate failed due to %s, which is unexpected", err);
        admission_reject(k, "UnexpectedAdmissionError", m);
        free(m);
}

static uint64_t pod_request(const struct kdev_scn_pod *p, const char *resource)
{
        /* max(sum of app containers, largest init container) */
        uint64_t sum = 0, init = 0;
        for (size_t c = 0; c < p->n_containers; c++) {
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const struct kdev_scn_limit *lim = &p->containers[c].limits[l];
                        if (strcmp(lim->resource, resource) != 0)
                                continue;
                        if (p->containers[c].init)
                                init = lim->count > init ? lim->count : init;
                        else
                                sum += lim->count;
                }
        }
        return sum > init ? sum : init;
}

/* The node resource fit that kubelet's predicate admit handler applies after
 * the device manager (extended resources only). Returns true when the pod
 * fits; otherwise rejects it. */
static bool resource_fit(struct kubelet *k)
{
        const struct kdev_scn_pod *p = k->adm.pod;
        for (size_t c = 0; c < p->n_containers; c++) {
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const char *res = p->containers[c].limits[l].resource;
                        if (!strchr(res, '/'))
                                continue;
                        uint64_t req = pod_request(p, res);
                        if (req == 0)
                                continue;
                        size_t cap = 0, used_dev = 0;
                        const struct kdev_dm_resource *r = kdev_dm_find(k->dm, res);
                        if (r)
                                kdev_dm_counts(k->dm, r, NULL, &cap, &used_dev);
                        /* sanitizeNodeAllocatable: at least what is allocated */
                        if (used_dev > cap)
                                cap = used_dev;
                        uint64_t used = 0;
                        for (size_t i = 0; i < k->n_active; i++)
                                if (strcmp(k->active[i].uid, p->uid) != 0)
                                        used += pod_request(k->active[i].pod, res);
                        if (req + used > cap) {
                                char *reason = xasprintf("OutOf%s", res);
                                char *msg = xasprintf("Node didn't have enough resource: %s, "
                                                      "requested: %" PRIu64 ", used: %" PRIu64
                                                      ", capacity: %zu",
                                                      res, req, used, cap);
                                admission_reject(k, reason, msg);
                                free(reason);
                                free(msg);
                                return false;
                        }
                }
        }
        return true;
}

static struct ctr_result *ctr_result(struct kubelet *k, size_t ci)
{
        struct step_result *r = k->adm.res;
        return &r->ctrs[ci];
}

static void alloc_result_add(struct ctr_result *cr, const char *resource, char *const *ids, size_t n,
                             bool cached)
{
        struct alloc_result *na = realloc(cr->allocs, (cr->n_allocs + 1) * sizeof(*na));
        if (!na)
                abort();
        cr->allocs = na;
        struct alloc_result *ar = &na[cr->n_allocs++];
        memset(ar, 0, sizeof(*ar));
        ar->resource = xstrdup(resource);
        ar->cached = cached;
        ar->ids = calloc(n ? n : 1, sizeof(char *));
        if (!ar->ids)
                abort();
        for (size_t i = 0; i < n; i++)
                ar->ids[ar->n_ids++] = xstrdup(ids[i]);
}

/* Fills the results of every container from the pod device records. */
static void collect_results(struct kubelet *k)
{
        const struct kdev_scn_pod *p = k->adm.pod;
        for (size_t c = 0; c < p->n_containers; c++) {
                struct ctr_result *cr = ctr_result(k, c);
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const char *res = p->containers[c].limits[l].resource;
                        const struct kdev_ckpt_entry *e =
                                kdev_dm_entry(k->dm, p->uid, p->containers[c].name, res);
                        if (!e)
                                continue;
                        bool cached = false;
                        for (size_t a = 0; a < cr->n_allocs; a++)
                                if (strcmp(cr->allocs[a].resource, res) == 0)
                                        cached = true; /* marked during admission */
                        if (!cached) {
                                size_t n;
                                const char **ids = kdev_dm_entry_ids(e, &n);
                                alloc_result_add(cr, res, (char *const *)ids, n, false);
                                free(ids);
                        }
                        if (e->alloc_resp_null)
                                continue;
                        V1beta1__ContainerAllocateResponse *resp =
                                v1beta1__container_allocate_response__unpack(NULL, e->alloc_resp_len,
                                                                           e->alloc_resp);
                        if (resp) {
                                kdev_dm_opts_add(&cr->opts, resp);
                                for (size_t i = 0; i < cr->opts.n_conflicts; i++)
                                        kdev_log_warn("conflicting container option dropped",
                                                      "container", cr->name, "conflict",
                                                      cr->opts.conflicts[i]);
                                v1beta1__container_allocate_response__free_unpacked(resp, NULL);
                        }
                }
        }
}

static void prestart_done(struct kdev_rpc_client_call *call, int status, const char *message,
                          void *ud)
{
        (void)call;
        struct kubelet *k = ud;
        struct admission *a = &k->adm;
        a->call = NULL;
        struct ctr_result *cr = ctr_result(k, a->ps_ci);
        const char *res = a->pod->containers[a->ps_ci].limits[a->ps_li].resource;
        for (size_t i = 0; i < cr->n_allocs; i++) {
                if (strcmp(cr->allocs[i].resource, res) != 0)
                        continue;
                free(cr->allocs[i].prestart);
                if (status == KDEV_RPC_OK) {
                        cr->allocs[i].prestart = xstrdup("");
                } else {
                        char *e = rpc_error_text(status, message);
                        cr->allocs[i].prestart =
                                xasprintf("device plugin PreStartContainer rpc failed with "
                                          "err: %s", e);
                        free(e);
                }
        }
        a->ps_li++;
        admission_step(k);
}

/* Next PreStartContainer call of the admitted pod; false when none is left. */
static bool prestart_next(struct kubelet *k)
{
        struct admission *a = &k->adm;
        const struct kdev_scn_pod *p = a->pod;
        for (; a->ps_ci < p->n_containers; a->ps_ci++, a->ps_li = 0) {
                const struct kdev_scn_container *c = &p->containers[a->ps_ci];
                for (; a->ps_li < c->n_limits; a->ps_li++) {
                        const char *res = c->limits[a->ps_li].resource;
                        const struct kdev_dm_resource *r = kdev_dm_find(k->dm, res);
                        const struct kdev_ckpt_entry *e = kdev_dm_entry(k->dm, p->uid, c->name, res);
                        if (!r || !e || !r->has_options || !r->pre_start_required)
                                continue;
                        struct endpoint *ep = current_endpoint(k, res);
                        struct ctr_result *cr = ctr_result(k, a->ps_ci);
                        if (!ep) {
                                for (size_t i = 0; i < cr->n_allocs; i++)
                                        if (strcmp(cr->allocs[i].resource, res) == 0) {
                                                free(cr->allocs[i].prestart);
                                                cr->allocs[i].prestart = xasprintf(
                                                        "device plugin PreStartContainer rpc failed "
                                                        "with err: endpoint for %s has been stopped",
                                                        res);
                                        }
                                continue;
                        }
                        size_t n;
                        const char **ids = kdev_dm_entry_ids(e, &n);
                        V1beta1__PreStartContainerRequest req =
                                V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
                        req.devices_ids = (char **)ids;
                        req.n_devices_ids = n;
                        size_t len = v1beta1__pre_start_container_request__get_packed_size(&req);
                        uint8_t *buf = malloc(len ? len : 1);
                        if (!buf)
                                abort();
                        v1beta1__pre_start_container_request__pack(&req, buf);
                        free(ids);
                        struct kdev_err err = {0};
                        a->call = kdev_rpc_client_unary(ep->cl, KDEV_DP_PRE_START, buf, len,
                                                        PRESTART_TIMEOUT_MS, NULL, prestart_done, k,
                                                        &err);
                        free(buf);
                        if (!a->call) {
                                for (size_t i = 0; i < cr->n_allocs; i++)
                                        if (strcmp(cr->allocs[i].resource, res) == 0) {
                                                free(cr->allocs[i].prestart);
                                                cr->allocs[i].prestart = xasprintf(
                                                        "device plugin PreStartContainer rpc failed "
                                                        "with err: %s",
                                                        err.msg);
                                        }
                                continue;
                        }
                        return true;
                }
        }
        return false;
}

struct unary_state {
        struct kubelet *k;
        uint8_t *msg;
        size_t len;
        bool got;
};

static void unary_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        free(u->msg);
        u->msg = malloc(len ? len : 1);
        if (!u->msg)
                abort();
        memcpy(u->msg, msg, len);
        u->len = len;
        u->got = true;
}

static void allocate_call(struct kubelet *k);

static void preferred_done(struct kdev_rpc_client_call *call, int status, const char *message,
                           void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        struct kubelet *k = u->k;
        struct admission *a = &k->adm;
        a->call = NULL;
        if (status != KDEV_RPC_OK) {
                char *e = rpc_error_text(status, message);
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: %s", e);
                admission_fail(k, m);
                free(m);
                free(e);
                free(u->msg);
                free(u);
                return;
        }
        V1beta1__PreferredAllocationResponse *r =
                v1beta1__preferred_allocation_response__unpack(NULL, u->got ? u->len : 0,
                                                              u->got ? u->msg : (const uint8_t *)"");
        free(u->msg);
        free(u);
        if (!r) {
                admission_fail(k, "device plugin GetPreferredAllocation rpc failed with err: rpc "
                                  "error: code = Internal desc = grpc: failed to unmarshal the "
                                  "received message");
                return;
        }
        char **pref = NULL;
        size_t n_pref = 0;
        if (r->n_container_responses > 0 && r->container_responses[0]) {
                pref = r->container_responses[0]->deviceids;
                n_pref = r->container_responses[0]->n_deviceids;
        }
        struct kdev_err err = {0};
        int rc = kdev_dm_pick_finish(&a->pick, pref, n_pref, &err);
        v1beta1__preferred_allocation_response__free_unpacked(r, NULL);
        if (rc < 0) {
                admission_fail(k, err.msg);
                return;
        }
        allocate_call(k);
}

static void allocate_done(struct kdev_rpc_client_call *call, int status, const char *message,
                          void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        struct kubelet *k = u->k;
        struct admission *a = &k->adm;
        a->call = NULL;
        if (status != KDEV_RPC_OK) {
                char *e = rpc_error_text(status, message);
                admission_fail(k, e);
                free(e);
                free(u->msg);
                free(u);
                return;
        }
        V1beta1__AllocateResponse *r = v1beta1__allocate_response__unpack(
                NULL, u->got ? u->len : 0, u->got ? u->msg : (const uint8_t *)"");
        free(u->msg);
        free(u);
        if (!r) {
                admission_fail(k, "rpc error: code = Internal desc = grpc: failed to unmarshal the "
                                  "received message");
                return;
        }
        if (r->n_container_responses == 0) {
                v1beta1__allocate_response__free_unpacked(r, NULL);
                admission_fail(k, "no containers return in allocation response");
                return;
        }
        /* kubelet keeps container_responses[0] only. */
        const V1beta1__ContainerAllocateResponse *cr0 = r->container_responses[0];
        size_t len = v1beta1__container_allocate_response__get_packed_size(cr0);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
                abort();
        v1beta1__container_allocate_response__pack(cr0, buf);
        v1beta1__allocate_response__free_unpacked(r, NULL);
        const struct kdev_scn_container *c = &a->pod->containers[a->ci];
        int rc = kdev_dm_record(k->dm, a->pod->uid, c->name, a->pick.resource, a->pick.picked,
                                a->pick.n_picked, buf, len);
        free(buf);
        if (rc < 0)
                abort();
        char *ids = kdev_cli_strv_join(a->pick.picked, a->pick.n_picked, ",");
        kdev_log_info("allocated", "pod", a->pod->name, "container", c->name, "resource",
                      a->pick.resource, "devices", ids ? ids : "");
        free(ids);
        a->wrote = true;
        kdev_dm_pick_clear(&a->pick);
        a->li++;
        admission_step(k);
}

static void allocate_call(struct kubelet *k)
{
        struct admission *a = &k->adm;
        struct endpoint *ep = current_endpoint(k, a->pick.resource);
        if (!ep) {
                char *m = xasprintf("endpoint for %s has been stopped", a->pick.resource);
                admission_fail(k, m);
                free(m);
                return;
        }
        V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        creq.devices_ids = a->pick.picked;
        creq.n_devices_ids = a->pick.n_picked;
        V1beta1__ContainerAllocateRequest *list[1] = {&creq};
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.container_requests = list;
        req.n_container_requests = 1;
        size_t len = v1beta1__allocate_request__get_packed_size(&req);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
                abort();
        v1beta1__allocate_request__pack(&req, buf);
        struct unary_state *u = calloc(1, sizeof(*u));
        if (!u)
                abort();
        u->k = k;
        struct kdev_err err = {0};
        /* kubelet sets no deadline on Allocate. */
        a->call = kdev_rpc_client_unary(ep->cl, KDEV_DP_ALLOCATE, buf, len, 0, unary_message,
                                        allocate_done, u, &err);
        free(buf);
        if (!a->call) {
                free(u);
                admission_fail(k, err.msg);
        }
}

static void preferred_call(struct kubelet *k)
{
        struct admission *a = &k->adm;
        struct endpoint *ep = current_endpoint(k, a->pick.resource);
        if (!ep) {
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: "
                                    "endpoint for %s has been stopped",
                                    a->pick.resource);
                admission_fail(k, m);
                free(m);
                return;
        }
        V1beta1__PreferredAllocationRequest req;
        V1beta1__ContainerPreferredAllocationRequest creq;
        if (kdev_dm_pick_preferred_req(&a->pick, &req, &creq) < 0)
                abort();
        size_t len = v1beta1__preferred_allocation_request__get_packed_size(&req);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
                abort();
        v1beta1__preferred_allocation_request__pack(&req, buf);
        kdev_dm_preferred_req_clear(&req, &creq);
        struct unary_state *u = calloc(1, sizeof(*u));
        if (!u)
                abort();
        u->k = k;
        struct kdev_err err = {0};
        a->call = kdev_rpc_client_unary(ep->cl, KDEV_DP_GET_PREFERRED, buf, len, 0, unary_message,
                                        preferred_done, u, &err);
        free(buf);
        if (!a->call) {
                free(u);
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: %s",
                                    err.msg);
                admission_fail(k, m);
                free(m);
        }
}

/* Advances the admission of the current pod until an RPC is in flight or
 * the pod is decided. */
static void admission_step(struct kubelet *k)
{
        struct admission *a = &k->adm;
        const struct kdev_scn_pod *p = a->pod;
        if (a->ps_ci > 0 || a->ps_li > 0 || a->ci >= p->n_containers) {
                /* Admitted: PreStartContainer before each container start. */
                if (prestart_next(k))
                        return;
                a->res->done = true;
                a->res->ok = true;
                kdev_log_info("pod admitted", "pod", p->name, "uid", p->uid);
                admission_end(k);
                return;
        }
        while (a->ci < p->n_containers) {
                const struct kdev_scn_container *c = &p->containers[a->ci];
                while (a->li < c->n_limits) {
                        const struct kdev_scn_limit *lim = &c->limits[a->li];
                        if (!kdev_dm_is_plugin_resource(k->dm, lim->resource)) {
                                a->li++;
                                continue;
                        }
                        if (!a->updated) {
                                /* UpdateAllocatedDevices */
                                kdev_dm_drop_inactive(k->dm);
                                a->updated = true;
                        }
                        struct reuse *ru = NULL;
                        for (size_t i = 0; i < a->n_reuse; i++)
                                if (strcmp(a->reuse[i].resource, lim->resource) == 0)
                                        ru = &a->reuse[i];
                        struct kdev_err err = {0};
                        int rc = kdev_dm_pick_begin(k->dm, p->uid, c->name, lim->resource,
                                                    (size_t)lim->count, ru ? ru->ids : NULL,
                                                    ru ? ru->n : 0, &a->pick, &err);
                        if (rc < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                        if (a->pick.cached) {
                                alloc_result_add(ctr_result(k, a->ci), lim->resource,
                                                 a->pick.picked, a->pick.n_picked, true);
                                kdev_dm_pick_clear(&a->pick);
                                a->li++;
                                continue;
                        }
                        if (a->pick.needed == 0 && a->pick.n_picked == 0) {
                                /* zero devices requested */
                                kdev_dm_pick_clear(&a->pick);
                                a->li++;
                                continue;
                        }
                        if (a->pick.needed == 0) {
                                allocate_call(k);
                                return;
                        }
                        if (a->pick.want_preferred) {
                                preferred_call(k);
                                return;
                        }
                        if (kdev_dm_pick_finish(&a->pick, NULL, 0, &err) < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                        allocate_call(k);
                        return;
                }
                if (a->wrote) {
                        struct kdev_err err = {0};
                        if (kdev_dm_write_checkpoint(k->dm, &err) < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                }
                reuse_update(k, c, c->init);
                a->ci++;
                a->li = 0;
                a->updated = false;
                a->wrote = false;
        }
        if (!resource_fit(k))
                return;
        collect_results(k);
        admission_step(k);
}

static void admission_start(struct kubelet *k, const struct kdev_scn_pod *p)
{
        struct admission *a = &k->adm;
        memset(a, 0, sizeof(*a));
        a->active = true;
        a->pod = p;
        struct step_result *r = result_new(k, KDEV_SCN_POD);
        r->pod_name = xstrdup(p->name);
        r->uid = xstrdup(p->uid);
        r->ctrs = calloc(p->n_containers, sizeof(*r->ctrs));
        if (!r->ctrs)
                abort();
        r->n_ctrs = p->n_containers;
        for (size_t c = 0; c < p->n_containers; c++) {
                r->ctrs[c].name = xstrdup(p->containers[c].name);
                r->ctrs[c].init = p->containers[c].init;
        }
        a->res = r;
        kdev_log_info("admitting pod", "pod", p->name, "uid", p->uid);
        kdev_dm_set_active(k->dm, p->uid, true);
        bool known = false;
        for (size_t i = 0; i < k->n_active; i++)
                known = known || strcmp(k->active[i].uid, p->uid) == 0;
        if (!known) {
                struct active_pod *na = realloc(k->active, (k->n_active + 1) * sizeof(*na));
                if (!na)
                        abort();
                k->active = na;
                na[k->n_active].uid = xstrdup(p->uid);
                na[k->n_active].pod = p;
                k->n_active++;
        }
        admission_step(k);
}

/* ------------------------------------------------------------------------ */
/* Scenario                                                                 */
/* ------------------------------------------------------------------------ */

/* True when |r| is registered with a live stream. */
static bool res_live(const struct kdev_dm_resource *r)
{
        return r && r->has_endpoint && !r->stopped;
}

/* True when |r| is live and its current plugin has sent a device list: its
 * allocatable count is the plugin's word (not a list restored from the
 * checkpoint, which has no devices). */
static bool res_listed(struct kubelet *k, const struct kdev_dm_resource *r)
{
        if (!res_live(r) || !r->known)
                return false;
        const struct endpoint *ep = current_endpoint(k, r->name);
        return ep && ep->listed;
}

static bool wait_satisfied(struct kubelet *k, const struct kdev_scn_wait *w)
{
        for (size_t i = 0; i < w->n_resources; i++) {
                const struct kdev_dm_resource *r = kdev_dm_find(k->dm, w->resources[i].resource);
                if (!res_live(r))
                        return false;
                size_t alloc;
                kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                if (w->resources[i].count > 0 && (!r->known || alloc < w->resources[i].count))
                        return false;
        }
        for (size_t i = 0; i < w->n_allocatable; i++) {
                const struct kdev_dm_resource *r =
                        kdev_dm_find(k->dm, w->allocatable[i].resource);
                if (!res_listed(k, r))
                        return false;
                size_t alloc;
                kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                if (alloc != w->allocatable[i].count)
                        return false;
        }
        return true;
}

static char *wait_text(struct kubelet *k, const struct kdev_scn_wait *w, bool ok)
{
        char *s = xstrdup(ok ? "satisfied:" : "timed out:");
        for (size_t i = 0; i < w->n_resources + w->n_allocatable; i++) {
                bool exact = i >= w->n_resources;
                const struct kdev_scn_limit *c =
                        exact ? &w->allocatable[i - w->n_resources] : &w->resources[i];
                const struct kdev_dm_resource *r = kdev_dm_find(k->dm, c->resource);
                size_t alloc = 0;
                if (r)
                        kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                char *n;
                if (!exact && c->count == 0)
                        n = xasprintf("%s %s %s", s, c->resource,
                                      r ? state_text(r) : "unregistered");
                else if (!exact)
                        n = xasprintf("%s %s allocatable %zu (wanted %" PRIu64 ")", s,
                                      c->resource, alloc, c->count);
                else if (!res_listed(k, r))
                        /* No live device list: say why instead of a count. */
                        n = xasprintf("%s %s %s (wanted allocatable exactly %" PRIu64 ")", s,
                                      c->resource,
                                      !r ? "unregistered"
                                      : !res_live(r) ? state_text(r)
                                                     : "no device list yet",
                                      c->count);
                else
                        n = xasprintf("%s %s allocatable %zu (wanted exactly %" PRIu64 ")", s,
                                      c->resource, alloc, c->count);
                free(s);
                s = n;
        }
        return s;
}

/* Completes the running wait step when its condition holds now. Called on
 * every ListAndWatch update (so a state that lasts one update is seen) and
 * from scenario_run(); touches only the step's result and timer, so it is
 * safe inside RPC callbacks. Returns true when the running wait is done. */
static bool wait_poll(struct kubelet *k)
{
        if (!k->have_scenario || !k->step_running || k->scenario_done || k->stopping)
                return false;
        const struct kdev_scn_step *s = &k->scn.steps[k->step - 1];
        if (s->kind != KDEV_SCN_WAIT)
                return false;
        struct step_result *r = &k->results[k->n_results - 1];
        if (r->done)
                return true;
        if (!wait_satisfied(k, &s->wait))
                return false;
        uv_timer_stop(&k->step_timer);
        r->done = true;
        r->ok = true;
        r->text = wait_text(k, &s->wait, true);
        kdev_log_info("wait satisfied", "result", r->text);
        return true;
}

/* The command as shown in results: control characters escaped (\n, \t,
 * \xHH), so a block scalar stays on one line. */
static char *command_display(const char *cmd)
{
        size_t n = strlen(cmd);
        char *out = malloc(4 * n + 1), *o = out;
        if (!out)
                abort();
        for (const unsigned char *p = (const unsigned char *)cmd; *p; p++) {
                if (*p == '\n') {
                        *o++ = '\\';
                        *o++ = 'n';
                } else if (*p == '\t') {
                        *o++ = '\\';
                        *o++ = 't';
                } else if (*p < 0x20 || *p == 0x7f) {
                        o += sprintf(o, "\\x%02x", *p);
                } else {
                        *o++ = (char)*p;
                }
        }
        *o = 0;
        return out;
}

/* Seconds as written: "10", "0.5", "1.25". */
static void seconds_text(uint64_t ms, char *buf, size_t size)
{
        if (ms % 1000 == 0) {
                snprintf(buf, size, "%" PRIu64, ms / 1000);
                return;
        }
        snprintf(buf, size, "%" PRIu64 ".%03" PRIu64, ms / 1000, ms % 1000);
        size_t l = strlen(buf);
        while (buf[l - 1] == '0')
                buf[--l] = 0;
}

static void exec_closed(uv_handle_t *h)
{
        free(h->data);
}

static void exec_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
        struct exec_run *e = proc->data;
        struct kubelet *k = e->k;
        struct step_result *r = &k->results[e->result];
        uv_timer_stop(&k->step_timer);
        char *shown = command_display(r->command);
        r->done = true;
        if (e->timed_out) {
                char sec[32];
                seconds_text(e->timeout_ms, sec, sizeof(sec));
                r->timed_out = true;
                r->term_signal = term_signal;
                r->text = xasprintf("%s: timed out after %s s", shown, sec);
        } else if (term_signal) {
                r->term_signal = term_signal;
                r->text = xasprintf("%s: killed by signal %d", shown, term_signal);
        } else {
                r->exited = true;
                r->exit_code = (int)exit_status;
                r->ok = exit_status == 0;
                r->text = xasprintf("%s: exit %d", shown, r->exit_code);
        }
        free(shown);
        kdev_log_info("exec finished", "result", r->text);
        k->exec = NULL;
        uv_close((uv_handle_t *)proc, exec_closed);
        k->step_running = false;
        scenario_kick(k);
}

/* Starts the exec step |s|: /bin/sh -c COMMAND with kdevctl's environment,
 * stdin /dev/null, stdout and stderr on kdevctl's stderr, in a new session
 * (so a timeout kills the whole process group). Returns true when the child
 * runs (exec_exit() ends the step), false when the step is already done
 * (spawn failed). */
static bool exec_start(struct kubelet *k, const struct kdev_scn_step *s)
{
        struct step_result *r = result_new(k, KDEV_SCN_EXEC);
        r->command = xstrdup(s->command);
        struct exec_run *e = calloc(1, sizeof(*e));
        if (!e)
                abort();
        e->k = k;
        e->result = k->n_results - 1;
        e->timeout_ms = s->timeout_ms;
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int rc = devnull < 0 ? uv_translate_sys_error(errno) : 0;
        if (rc == 0) {
                char *args[] = {"/bin/sh", "-c", s->command, NULL};
                uv_stdio_container_t stdio[3] = {
                        {.flags = UV_INHERIT_FD, .data.fd = devnull},
                        {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
                        {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
                };
                uv_process_options_t o = {
                        .exit_cb = exec_exit,
                        .file = args[0],
                        .args = args,
                        .env = NULL, /* inherit */
                        .flags = UV_PROCESS_DETACHED,
                        .stdio_count = 3,
                        .stdio = stdio,
                };
                fflush(stderr);
                rc = uv_spawn(k->loop, &e->proc, &o);
                close(devnull);
                e->proc.data = e;
                if (rc < 0)
                        uv_close((uv_handle_t *)&e->proc, exec_closed); /* frees e */
        } else {
                free(e);
        }
        if (rc < 0) {
                char *shown = command_display(s->command);
                r->done = true;
                r->text = xasprintf("%s: cannot run /bin/sh: %s", shown, uv_strerror(rc));
                free(shown);
                kdev_log_error("exec failed", "result", r->text);
                return false;
        }
        char pid[24];
        snprintf(pid, sizeof(pid), "%d", e->proc.pid);
        kdev_log_info("exec started", "command", s->command, "pid", pid);
        k->exec = e;
        uv_timer_start(&k->step_timer, step_timeout, s->timeout_ms, 0);
        return true;
}

/* SIGKILL to the exec child's process group (the command and whatever it
 * started); -ESRCH when it is gone already. */
static int exec_kill(struct exec_run *e)
{
        if (kill(-e->proc.pid, SIGKILL) == 0)
                return 0;
        return uv_process_kill(&e->proc, SIGKILL);
}

/* kdevctl stops while a command runs: kill it and forget it (the step stays
 * "not finished"). */
static void exec_abort(struct kubelet *k)
{
        struct exec_run *e = k->exec;
        if (!e)
                return;
        k->exec = NULL;
        char pid[24];
        snprintf(pid, sizeof(pid), "%d", e->proc.pid);
        kdev_log_warn("stopping: killing the running exec command", "pid", pid);
        exec_kill(e);
        uv_close((uv_handle_t *)&e->proc, exec_closed);
}

static void step_timeout(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        const struct kdev_scn_step *s = &k->scn.steps[k->step - 1];
        struct step_result *r = &k->results[k->n_results - 1];
        if (s->kind == KDEV_SCN_EXEC) {
                /* exec_exit() ends the step once the child is reaped. */
                if (k->exec && !k->exec->timed_out) {
                        char sec[32];
                        seconds_text(s->timeout_ms, sec, sizeof(sec));
                        kdev_log_warn("exec timed out; killing its process group", "command",
                                      s->command, "timeout_s", sec);
                        k->exec->timed_out = true;
                        exec_kill(k->exec);
                }
                return;
        }
        if (s->kind == KDEV_SCN_WAIT) {
                r->done = true;
                r->ok = false;
                r->text = wait_text(k, &s->wait, false);
                kdev_log_warn("wait timed out", "result", r->text);
        } else {
                r->done = true;
                r->ok = true;
                r->text = xstrdup("done");
        }
        k->step_running = false;
        scenario_kick(k);
}

static void scenario_finished(struct kubelet *k)
{
        k->scenario_done = true;
        kdev_log_info("scenario finished");
        print_results(k);
        if (k->hold_ms < 0) {
                shutdown_kubelet(k);
        } else if (k->hold_ms > 0) {
                uv_timer_start(&k->hold_timer, on_hold_done, (uint64_t)k->hold_ms, 0);
        }
}

/* Runs scenario steps until one has to wait. */
static void scenario_run(struct kubelet *k)
{
        if (!k->have_scenario || k->scenario_done || k->stopping)
                return;
        for (;;) {
                if (k->step_running) {
                        /* A running wait completes when its condition holds. */
                        if (!wait_poll(k))
                                return;
                        k->step_running = false;
                }
                if (k->step >= k->scn.n_steps) {
                        scenario_finished(k);
                        return;
                }
                const struct kdev_scn_step *s = &k->scn.steps[k->step++];
                k->step_running = true;
                {
                        char line[24];
                        snprintf(line, sizeof(line), "%d", s->line);
                        kdev_log_debug("scenario step", "kind", kind_text(s->kind), "line", line);
                }
                struct step_result *r;
                switch (s->kind) {
                case KDEV_SCN_WAIT:
                        result_new(k, KDEV_SCN_WAIT);
                        uv_timer_start(&k->step_timer, step_timeout, s->wait.timeout_ms, 0);
                        continue; /* checked at the top */
                case KDEV_SCN_SLEEP:
                        result_new(k, KDEV_SCN_SLEEP);
                        uv_timer_start(&k->step_timer, step_timeout, s->sleep_ms, 0);
                        return;
                case KDEV_SCN_EXEC:
                        if (exec_start(k, s))
                                return; /* exec_exit kicks */
                        k->step_running = false;
                        continue;
                case KDEV_SCN_POD:
                        admission_start(k, &s->pod);
                        return; /* admission_end kicks */
                case KDEV_SCN_DELETE: {
                        r = result_new(k, KDEV_SCN_DELETE);
                        r->pod_name = xstrdup(s->name);
                        const char *uid = NULL;
                        for (size_t i = 0; i < k->scn.n_steps; i++)
                                if (k->scn.steps[i].kind == KDEV_SCN_POD &&
                                    strcmp(k->scn.steps[i].pod.name, s->name) == 0)
                                        uid = k->scn.steps[i].pod.uid;
                        size_t before = k->dm->pods.n_entries;
                        kdev_dm_set_active(k->dm, uid, false);
                        active_remove(k, uid);
                        free_inactive(k);
                        r->done = true;
                        r->ok = true;
                        r->text = xasprintf("removed, %zu pod device entries freed",
                                            before - k->dm->pods.n_entries);
                        kdev_log_info("pod deleted", "pod", s->name);
                        k->step_running = false;
                        continue;
                }
                case KDEV_SCN_RESTART:
                        r = result_new(k, KDEV_SCN_RESTART);
                        restart_kubelet(k, &r->text);
                        r->done = true;
                        r->ok = true;
                        k->step_running = false;
                        if (k->stopping)
                                return;
                        continue;
                }
        }
}

static void on_kick(uv_idle_t *h)
{
        struct kubelet *k = h->data;
        uv_idle_stop(h);
        k->kick_active = false;
        scenario_run(k);
}

/* Schedules scenario_run() on the next loop turn (never re-entered from
 * inside an RPC callback). */
static void scenario_kick(struct kubelet *k)
{
        if (!k->have_scenario || k->stopping || k->kick_active)
                return;
        k->kick_active = true;
        uv_idle_start(&k->kick, on_kick);
}

/* ------------------------------------------------------------------------ */
/* Command                                                                  */
/* ------------------------------------------------------------------------ */

enum {
        OPT_DIR,
        OPT_SCENARIO,
        OPT_HOLD,
        OPT_OUTPUT,
        OPT_RESTART,
        OPT_DIAL,
        OPT_LOG,
        OPT_LOGFORMAT,
        OPT_LOGJSON,
};

struct args {
        const char *dir;
        const char *scenario;
        int64_t hold_ms;          /* -1 = no --hold */
        int64_t restart_after_ms; /* -1 = no --restart-after */
        uint64_t dial_ms;
        enum kdev_cli_output output;
        enum kdev_log_level log_level;
        bool log_json;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        uint64_t ms = 0;
        int rc;
        switch (id) {
        case OPT_DIR:
                a->dir = value;
                return 0;
        case OPT_SCENARIO:
                a->scenario = value;
                return 0;
        case OPT_HOLD:
                rc = kdev_cli_parse_seconds(value, "--hold", "until SIGINT/SIGTERM", &ms, err);
                if (rc == 0)
                        a->hold_ms = (int64_t)ms;
                return rc;
        case OPT_RESTART:
                rc = kdev_cli_parse_seconds(value, "--restart-after", "at once", &ms, err);
                if (rc == 0)
                        a->restart_after_ms = (int64_t)ms;
                return rc;
        case OPT_DIAL:
                return kdev_cli_parse_seconds(value, "--dial-timeout", "one try, no retry",
                                              &a->dial_ms, err);
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_LOG:
                if (kdev_log_level_parse(value, &a->log_level) < 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid --log-level \"%s\" (want "
                                            KDEV_LOG_LEVEL_VALUES ")", value);
                return 0;
        case OPT_LOGFORMAT:
                if (kdev_log_format_parse(value, &a->log_json) < 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid --log-format \"%s\" (want "
                                            KDEV_LOG_FORMAT_VALUES ")", value);
                return 0;
        case OPT_LOGJSON: /* the older spelling of --log-format json */
                a->log_json = true;
                return 0;
        default:
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        }
}

static void close_walk(uv_handle_t *h, void *arg)
{
        (void)arg;
        if (!uv_is_closing(h))
                uv_close(h, NULL);
}

int kdevctl_cmd_kubelet(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"dir", 0, true, OPT_DIR},
                {"scenario", 0, true, OPT_SCENARIO},
                {"hold", 0, true, OPT_HOLD},
                {"output", 'o', true, OPT_OUTPUT},
                {"restart-after", 0, true, OPT_RESTART},
                {"dial-timeout", 0, true, OPT_DIAL},
                {"log-level", 0, true, OPT_LOG},
                {"log-format", 0, true, OPT_LOGFORMAT},
                {"log-json", 0, false, OPT_LOGJSON},
        };
        struct args a = {
                .hold_ms = -1, .restart_after_ms = -1, .dial_ms = 10000, .log_level = KDEV_LOG_INFO};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.dir)
                return kdev_cli_usage_error(CMD, "missing --dir DIR");
        kdev_log_setup(a.log_level, a.log_json);

        struct kubelet k = {0};
        k.output = a.output;
        k.hold_ms = a.hold_ms;
        k.dial_timeout_ms = a.dial_ms;
        k.exit_code = KDEV_CLI_OK;
        size_t dl = strlen(a.dir);
        while (dl > 1 && a.dir[dl - 1] == '/')
                dl--;
        k.dir = strndup(a.dir, dl);
        if (!k.dir)
                return kdev_cli_fail(CMD, "out of memory");
        if (a.scenario) {
                if (kdev_scenario_load(a.scenario, &k.scn, &err) < 0) {
                        free(k.dir);
                        return kdev_cli_fail(CMD, "%s", err.msg);
                }
                k.have_scenario = true;
        }
        if (mkdir_p(k.dir, &err) < 0) {
                kdev_scenario_clear(&k.scn);
                free(k.dir);
                return kdev_cli_fail(CMD, "%s", err.msg);
        }
        k.sock_path = xasprintf("%s/%s", k.dir, KDEV_CLI_KUBELET_SOCKET_NAME);
        k.ckpt_path = xasprintf("%s/%s", k.dir, KDEV_CKPT_FILE);
        k.dm = kdev_dm_new(k.ckpt_path);
        if (!k.dm)
                abort();
        /* SIGPIPE is ignored by kdevctl's main (src/cmd/kdevctl.c). */

        uv_loop_t loop;
        uv_loop_init(&loop);
        k.loop = &loop;
        uv_signal_init(&loop, &k.sig_int);
        uv_signal_init(&loop, &k.sig_term);
        uv_signal_init(&loop, &k.sig_hup);
        k.sig_int.data = k.sig_term.data = k.sig_hup.data = &k;
        uv_signal_start(&k.sig_int, on_signal, SIGINT);
        uv_signal_start(&k.sig_term, on_signal, SIGTERM);
        uv_signal_start(&k.sig_hup, on_signal, SIGHUP);
        uv_timer_init(&loop, &k.step_timer);
        uv_timer_init(&loop, &k.hold_timer);
        uv_timer_init(&loop, &k.restart_timer);
        uv_timer_init(&loop, &k.reaper);
        uv_timer_init(&loop, &k.log_timer);
        uv_idle_init(&loop, &k.kick);
        k.step_timer.data = k.hold_timer.data = k.restart_timer.data = k.reaper.data = &k;
        k.log_timer.data = &k;
        k.peer_log = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS); /* NULL: unlimited */
        k.kick.data = &k;

        /* kubelet start: read the checkpoint (allocations and registered
         * resources come back), clean the directory, serve. */
        if (access(k.ckpt_path, F_OK) == 0 && kdev_dm_restart(k.dm, &err) < 0)
                kdev_log_warn("Continue after failing to read checkpoint file", "error", err.msg);
        cleanup_sockets(&k);
        if (server_start(&k, &err) < 0) {
                kdev_cli_fail(CMD, "%s", err.msg);
                k.exit_code = KDEV_CLI_FAIL;
                k.printed = true;
                shutdown_kubelet(&k);
        } else {
                if (a.restart_after_ms >= 0)
                        uv_timer_start(&k.restart_timer, on_restart_timer,
                                       (uint64_t)a.restart_after_ms, 0);
                if (k.have_scenario)
                        scenario_kick(&k);
                else if (a.hold_ms > 0)
                        uv_timer_start(&k.hold_timer, on_hold_done, (uint64_t)a.hold_ms, 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        /* Anything left (should be nothing) is closed before the loop goes. */
        uv_walk(&loop, close_walk, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);

        int code = k.exit_code;
        kdev_log_limiter_free(k.peer_log); /* the counts still pending */
        while (k.eps) {
                struct endpoint *ep = k.eps;
                k.eps = ep->next;
                endpoint_free(ep);
        }
        results_free(&k);
        for (size_t i = 0; i < k.n_active; i++)
                free(k.active[i].uid);
        free(k.active);
        kdev_scenario_clear(&k.scn);
        kdev_dm_free(k.dm);
        free(k.dir);
        free(k.sock_path);
        free(k.ckpt_path);
        return code;
}
