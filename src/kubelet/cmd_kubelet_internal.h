/* kdevctl kubelet, private: the state shared by its files (cmd_kubelet.c:
 * options, server, shutdown and restart, scenario, the command;
 * cmd_kubelet_endpoints.c: plugin endpoints and Register;
 * cmd_kubelet_admission.c: pod admission; cmd_kubelet_output.c: results;
 * cmd_kubelet_podres.c: the PodResources server).
 * Not a public interface: only these files include it. */
#ifndef KDEV_KUBELET_CMD_KUBELET_INTERNAL_H
#define KDEV_KUBELET_CMD_KUBELET_INTERNAL_H

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
/* kubelet's pod-resources socket, relative to its root directory */
#define PODRES_SOCKET_DEFAULT "pod-resources/kubelet.sock"
#define PRESTART_TIMEOUT_MS 30000 /* KubeletPreStartContainerRPCTimeoutInSecs */

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
        const char *state_path;  /* --state FILE (argv's), or NULL */
        uint64_t state_writes;   /* --state: files written so far */
        bool state_failed;       /* --state: the last write failed (logged once) */
        struct kdev_rpc_server *srv;
        char *podres_path;       /* PodResources socket, NULL = not served */
        struct kdev_rpc_server *podres_srv;
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

/* The GetDevicePluginOptions call of one registration. */
struct options_state {
        struct reg *r;              /* NULL once the registration was dropped */
        struct endpoint *ep;
        bool got;
        bool bad;
        bool pre_start;
        bool preferred;
};

/* A line a peer can repeat: through the limiter, whose windows the timer
 * ends (armed when idle). */
#define PEER_LOG(k, level, ...)                                                          \
        do {                                                                             \
                kdev_log_limited((k)->peer_log, 1, (level), __VA_ARGS__, NULL);          \
                if (!(k)->stopping && !uv_is_active((uv_handle_t *)&(k)->log_timer))     \
                        uv_timer_start(&(k)->log_timer, on_log_timer,                    \
                                       KDEV_LOG_REPEAT_WINDOW_MS, 0);                    \
        } while (0)

/* Shared between the files; each is described where it is defined. All run
 * on the loop thread; none fails but by abort() when out of memory. */

/* cmd_kubelet_admission.c */
void active_remove(struct kubelet *k, const char *uid);
void admission_end(struct kubelet *k);
void admission_start(struct kubelet *k, const struct kdev_scn_pod *p);
void admission_step(struct kubelet *k);
struct ctr_result *ctr_result(struct kubelet *k, size_t ci);
void free_inactive(struct kubelet *k);
/* cmd_kubelet_podres.c: podres_start() creates k->podres_path's directory
 * (mkdir -p, 0750), replaces a stale socket and serves PodResources there;
 * nothing when k->podres_path is NULL. Returns 0 or a negative errno with
 * |err|. podres_stop() closes the server and removes the socket. */
int podres_start(struct kubelet *k, struct kdev_err *err);
void podres_stop(struct kubelet *k);
/* cmd_kubelet_endpoints.c */
struct endpoint *current_endpoint(struct kubelet *k, const char *resource);
void endpoint_free(struct endpoint *ep);
void endpoint_retire(struct endpoint *ep);
void on_register(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud);
void options_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud);
void reg_finish(struct reg *r);
/* cmd_kubelet.c */
void exec_abort(struct kubelet *k);
void on_log_timer(uv_timer_t *t);
char *rpc_error_text(int status, const char *message);
void scenario_kick(struct kubelet *k);
void step_timeout(uv_timer_t *t);
bool wait_poll(struct kubelet *k);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xstrdup(const char *s);
/* cmd_kubelet_output.c */
const char *kind_text(enum kdev_scn_kind kind);
void print_results(struct kubelet *k);
struct step_result *result_new(struct kubelet *k, enum kdev_scn_kind kind);
void results_free(struct kubelet *k);
/* --state: replaces k->state_path atomically with {"updates": N,
 * "resources": [...]} (N counts the writes, from 1; the resources as in -o
 * json's "resources"); nothing without --state or while stopping. A failure
 * is logged (warn, once until a write succeeds again) and never fatal. */
void state_write(struct kubelet *k);
const char *state_text(const struct kdev_dm_resource *r);

#endif /* KDEV_KUBELET_CMD_KUBELET_INTERNAL_H */
