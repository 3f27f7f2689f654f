/* Internal state of the DRA plugin, shared by plugin.c and registration.c. */
#ifndef KDEV_DRA_PLUGIN_INTERNAL_H
#define KDEV_DRA_PLUGIN_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "common/file.h"
#include "dra/checkpoint.h"
#include "dra/plugin.h"

struct kdev_rpc_server;
struct dra_op;
struct kdev_dra_health_state; /* health.c */

/* The order of the calls naming one claim: turns 1, 2, ... are handed out
 * as calls arrive (|issued| the last), |done| is the last turn whose call
 * ran; the entry goes away when done == issued. */
struct kdev_dra_turn {
        char *uid; /* owned */
        uint64_t issued, done;
};

struct kdev_dra_plugin {
        char *driver, *pool, *data_dir, *cdi_dir, *dev_root, *proc_root;
        char *cp_path;
        char *cp_error; /* checkpoint load failure at creation, or NULL */
        /* the options as given: the GPU records, driver files, claim source
         * and callbacks are used from here (borrowed); its strings are not
         * (the copies above are) */
        struct kdev_dra_plugin_options o;
        pthread_mutex_t source_lock; /* serialises o.get_claim (kdev_kube is not thread-safe) */
        struct kdev_dra_cp cp;
        /* the devices the checkpoint's claims hold (plugin.c held_add), or
         * NULL: made from the checkpoint when a prepare next needs it */
        json_t *held;
        /* what kdev last wrote (or loaded): the checkpoint, the claim specs
         * (common/file.h; loop thread) */
        struct kdev_file_guard cp_guard, spec_guard;
        struct kdev_dra_prepare_stats stats; /* loop thread */
        char **unhealthy;     /* UUIDs withdrawn as unhealthy (loop thread) */
        size_t n_unhealthy;
        /* serving */
        uv_loop_t *loop;
        struct kdev_rpc_server *dra_srv, *reg_srv;
        char *dra_socket, *reg_socket;
        unsigned closing;     /* servers still closing after stop */
        unsigned jobs;        /* calls queued (service.c dra_op): waiting or reading claims */
        /* per-claim order of the calls (loop thread, service.c) */
        struct kdev_dra_turn *turns;
        size_t n_turns, cap_turns;
        struct dra_op *ops_head, *ops_tail; /* queued calls, in arrival order */
        struct kdev_dra_health_state *health; /* NodeWatchResources (health.c) */
        bool stopping;        /* stop requested; stop_done pending */
        void (*stop_done)(void *arg);
        void *stop_arg;
};

/* A claim read off the loop thread: |rc| < 0 = the read failed with |err|. */
struct kdev_dra_fetch {
        json_t *claim; /* owned by the fetcher */
        int rc;
        struct kdev_err err;
};

/* Reads the claim through the source under source_lock (any thread). */
int kdev_dra_fetch_claim(struct kdev_dra_plugin *p, const char *ns, const char *name,
                         json_t **claim, struct kdev_err *err);

/* kdev_dra_prepare_claim with the claim already read (|fetched| NULL: read
 * it now, blocking). Loop thread. */
int kdev_dra_prepare_fetched(struct kdev_dra_plugin *p, const char *ns, const char *name,
                             const char *uid, const struct kdev_dra_fetch *fetched,
                             const json_t **devices, struct kdev_err *err);

/* Saves the checkpoint through its guard (a file someone else changed is
 * moved aside and reported to on_file_aside). Returns 0 or a negative errno
 * with |err|. Loop thread. */
int kdev_dra_save_checkpoint(struct kdev_dra_plugin *p, struct kdev_err *err);

#endif /* KDEV_DRA_PLUGIN_INTERNAL_H */
