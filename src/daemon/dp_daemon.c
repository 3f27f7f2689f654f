/* kdev device plugin daemon (daemon/dp_daemon.h): the wiring of kdev-plugin
 * — signals, node labels and their timer, metrics, the NVIDIA backend and
 * the plugin runtime — moved out of its main. */
#include "daemon/dp_daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <sys/stat.h>

#include <uv.h>

#include "common/err.h"
#include "common/file.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/version.h"
#include "daemon/node_config_internal.h"
#include "config/config.h"
#include "daemon/config_json.h"
#include "generic/generic.h"
#include "generic/live.h"
#include "model/model.h"
#include "model/withdrawn.h"
#include "nvidia/backend.h"
#include "nvidia/config.h"
#include "nvidia/isolation.h"
#include "nvidia/labels.h"
#include "nvidia/mig.h"
#include "nvidia/resources.h"
#include "nvidia/usage_loop.h"
#include "metrics/plugin_metrics.h"
#include "plugin/runtime.h"
#include "usage/usage.h"

/* One configuration in force: what it was read from and what it built. A
 * reload builds a new one, swaps it in, and retires the old one once its
 * NVIDIA backend has stopped. */
struct dp_gen {
        struct kdev_nvidia_config *nv;    /* borrowed from the options when !nv_owned */
        bool nv_owned;
        struct kdev_generic_config *cfg;  /* owned; NULL: no generic section */
        struct kdev_resource_set *set;    /* owned (served: the runtime borrows it) */
        struct kdev_nvidia_backend *nvidia; /* NULL: NVIDIA not wanted */
        /* follows the generic devices of |cfg| in |set| while served (NULL:
         * none, or not served yet); stopped before the generation goes */
        struct kdev_generic_live *live;
        char *path;                       /* the config file read, NULL: none (defaults) */
        char *name;                       /* the named config (per-node configs), or NULL */
        struct kdev_dp_daemon *daemon;    /* set while retiring */
};

struct kdev_dp_daemon {
        uv_loop_t loop;
        uv_signal_t sigterm;
        uv_signal_t sigint;
        uv_signal_t sigquit;
        uv_signal_t sighup;
        struct kdev_dp_runtime *rt;
        struct dp_gen cur;      /* the configuration in force */
        unsigned retiring;      /* older generations whose backend is stopping */
        struct kdev_plugin_metrics *metrics; /* NULL: metrics off */
        struct kdev_nvidia_usage_loop *usage; /* NULL: usage metering off */
        struct kdev_dp_options dpopts;       /* the runtime's options, hooks set */
        uint64_t rediscover_ms;
        /* devices that left the node, of every backend (model/withdrawn.h:
         * advertised Unhealthy until their grace period is over, through
         * every rebuild), the NVIDIA builds' round and grace period, and the
         * timer that applies an inventory change or drops the NVIDIA
         * devices whose grace period ended */
        struct kdev_withdrawn *withdrawn;
        uint64_t round;
        uint64_t withdraw_grace_ms;
        uv_timer_t inventory_timer;
        bool inventory_timer_on;
        char inventory_why[256];
        /* per-node configs (--config-dir): the label value the selection was
         * last made from (NULL: no label), and the Node watch */
        char *label_value;
        struct kdev_node_watch *watch;
        /* --nfd-features-file (NULL: off), the config and the GPU set the
         * labels were last built from */
        const char *nfd_file;
        const struct kdev_gpu_set *labelled;
        bool labels_written;
        bool labels_failed;  /* the last write failed: retried, logged once */
        struct kdev_file_guard labels_guard; /* what was last written there (common/file.h) */
        uv_timer_t labels_timer; /* retries a failed write, sees rediscoveries */
        bool labels_timer_on;
        bool stopping;
        bool usage_failed;   /* usage metering could not start: the start failed */
        const struct kdev_dp_daemon_options *opts;
};

/* kdev_nvidia_usage_lookup_fn: the device UUID of device ID |id| of the
 * map entry's resource in the served set (read at each sample: it changes
 * at a reload). */
static bool usage_lookup(void *arg, const struct kdev_usage_container *c, const char *id,
                         char *uuid)
{
        const struct kdev_dp_daemon *d = arg;
        const struct kdev_resource_set *set = d->cur.set;
        for (size_t i = 0; set && c->resource && i < set->n_resources; i++) {
                const struct kdev_resource *r = &set->resources[i];
                if (strcmp(r->name, c->resource) != 0)
                        continue;
                const struct kdev_device *dev = kdev_resource_find(r, id);
                const struct kdev_nvidia_devinfo *in = dev ? kdev_nvidia_device_info(r, dev) : NULL;
                if (!in)
                        return false;
                snprintf(uuid, KDEV_USAGE_UUID_MAX, "%s", in->uuid);
                return true;
        }
        return false;
}

static void usage_publish(void *arg, const struct kdev_usage_snapshot *snap,
                          const struct kdev_usage_pods *pods, const struct kdev_usage_report *rep)
{
        struct kdev_dp_daemon *d = arg;
        kdev_plugin_metrics_set_usage(d->metrics, snap, pods, rep);
}

/* Usage metering (nvidia/usage_loop.h) with metrics on and the NVIDIA
 * option usage.interval > 0; the Hostname label is $NODE_NAME (the node,
 * as the DaemonSet sets it from spec.nodeName), else the host name. */
static int start_usage(struct kdev_dp_daemon *d, struct kdev_err *err)
{
        const struct kdev_nvidia_config *nv = d->cur.nv;
        if (!nv || !nv->wanted || nv->usage_interval == 0)
                return 0;
        char host[256] = "";
        const char *node = getenv("NODE_NAME");
        if (node && *node)
                snprintf(host, sizeof(host), "%s", node);
        else if (gethostname(host, sizeof(host) - 1) != 0)
                host[0] = '\0';
        struct kdev_nvidia_usage_loop_options o = {
                .interval_s = nv->usage_interval, .podres_socket = d->opts->podres_socket,
                .pod_log_dir = d->opts->pod_log_dir, .holders = KDEV_NVIDIA_USAGE_DEVICE_PLUGIN,
                .lookup = usage_lookup, .publish = usage_publish, .arg = d};
        if (kdev_plugin_metrics_enable_usage(d->metrics, host, err) == 0)
                d->usage = kdev_nvidia_usage_loop_start(&d->loop, nv, &o, err);
        if (!d->usage) {
                d->usage_failed = true;
                return kdev_err_wrap(err, "usage metering");
        }
        kdev_log_info("sampling GPU usage", KDEV_LOG_UINT("interval", nv->usage_interval),
                      "hostname", host);
        return 0;
}

static void on_runtime_stopped(void *arg)
{
        struct kdev_dp_daemon *d = arg;
        kdev_node_watch_stop(d->watch, NULL, NULL);
        d->watch = NULL;
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
        uv_close((uv_handle_t *)&d->sigquit, NULL);
        uv_close((uv_handle_t *)&d->sighup, NULL);
        if (d->labels_timer_on)
                uv_close((uv_handle_t *)&d->labels_timer, NULL);
        d->labels_timer_on = false;
        if (d->inventory_timer_on)
                uv_close((uv_handle_t *)&d->inventory_timer, NULL);
        d->inventory_timer_on = false;
        kdev_nvidia_usage_loop_stop(d->usage);
        d->usage = NULL;
        kdev_plugin_metrics_stop(d->metrics, NULL, NULL);
        d->metrics = NULL;
}

static void on_backend_stopped(void *arg)
{
        struct kdev_dp_daemon *d = arg;
        struct kdev_dp_runtime *rt = d->rt;
        d->rt = NULL;
        kdev_dp_runtime_stop(rt, on_runtime_stopped, d);
}

/* The node labels file text of |gpus| (nvidia/labels.h), the machine type
 * read from |machine_type_file|. */
static int labels_text(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *nv,
                       const char *machine_type_file, char **text, size_t *n, bool *invalid_mig,
                       struct kdev_err *err)
{
        struct kdev_nvidia_labels_options lo = {.machine_type_file = machine_type_file};
        return kdev_nvidia_labels_file_text(gpus, nv, &lo, text, n, invalid_mig, err);
}

static void log_labels_written(const char *path, int r, size_t n_labels, const char *aside)
{
        if (r == 2)
                kdev_log_warn("state file changed by someone else: moved aside and rebuilt from "
                              "memory", "path", path, "aside", aside);
        if (r > 0)
                kdev_log_info("wrote node labels", "path", path, KDEV_LOG_UINT("labels", n_labels));
        else
                kdev_log_debug("node labels unchanged", "path", path);
}

/* Writes the node labels file (--nfd-features-file) when it is on: at
 * start, after a rediscovery (a new GPU set), on the labels timer (a failed
 * write is retried; a GPU set that changed without a notification, e.g. a
 * rediscovery whose MIG layout is invalid, is labelled) and on SIGHUP
 * (|force|: also re-reads the machine type and restores a file edited or
 * removed by hand; an edited one is first moved aside with a warning,
 * nvidia/labels.h kdev_nvidia_labels_write_guarded). The file is written only when its text changes, and kept
 * at exit (see README "Node labels"). Returns 1 written, 0 unchanged or
 * nothing to do, or a negative errno with |err|. */
static int refresh_labels(struct kdev_dp_daemon *d, bool force, struct kdev_err *err)
{
        const struct kdev_gpu_set *gpus = kdev_nvidia_backend_gpus(d->cur.nvidia);
        /* while stopping the backend is gone: keep the file as it is */
        if (!d->nfd_file || d->stopping ||
            (!force && d->labels_written && gpus == d->labelled))
                return 0;
        size_t n = 0;
        bool invalid_mig;
        char *text = NULL, aside[4096];
        int r = labels_text(gpus, d->cur.nv, d->opts->machine_type_file, &text, &n, &invalid_mig,
                            err);
        if (r == 0)
                r = kdev_nvidia_labels_write_guarded(&d->labels_guard, d->nfd_file, text, aside,
                                                     sizeof(aside), err);
        free(text);
        if (r < 0) {
                d->labels_written = false;
                return r;
        }
        log_labels_written(d->nfd_file, r, n, aside);
        d->labelled = gpus;
        d->labels_written = true;
        return r > 0 ? 1 : 0;
}

/* refresh_labels() on the loop: an error is logged (once until a write
 * succeeds again) and retried by the labels timer. */
static void refresh_labels_logged(struct kdev_dp_daemon *d, bool force)
{
        struct kdev_err err = {0};
        if (refresh_labels(d, force, &err) >= 0) {
                if (d->labels_failed)
                        kdev_log_info("node labels written again", "path", d->nfd_file);
                d->labels_failed = false;
                return;
        }
        if (!d->labels_failed)
                kdev_log_error("cannot write the node labels, will retry", "path", d->nfd_file,
                               "error", err.msg);
        else
                kdev_log_debug("still cannot write the node labels", "path", d->nfd_file,
                               "error", err.msg);
        d->labels_failed = true;
}

static void on_labels_timer(uv_timer_t *t)
{
        refresh_labels_logged(t->data, false);
}

/* After kdev_nvidia_backend_open() failed under migStrategy single: if the
 * GPUs' MIG layout is invalid (the label builder says <model>-MIG-INVALID),
 * writes those labels to --nfd-features-file before kdev-plugin exits, as
 * GPU Feature Discovery does, so that an older file written for a valid
 * layout does not keep advertising capacity the node no longer has. Other
 * failures leave the file alone. Logs what it did. */
static void label_invalid_mig(const char *path, const struct kdev_nvidia_config *nv,
                              const char *machine_type_file)
{
        if (!path)
                return;
        struct kdev_nvidia_labels_options lo = {.machine_type_file = machine_type_file};
        struct kdev_err err = {0};
        size_t n = 0;
        char *text = NULL;
        int r = kdev_nvidia_labels_invalid_mig(nv, &lo, &text, &n, &err);
        if (r > 0)
                r = kdev_nvidia_labels_write(path, text, &err);
        if (r < 0)
                kdev_log_error("cannot write the node labels", "path", path, "error", err.msg);
        else if (text)
                log_labels_written(path, r, n, "");
        free(text);
}


static void on_devices_changed(void *arg, const char *resource)
{
        struct kdev_dp_daemon *d = arg;
        if (d->rt)
                kdev_dp_runtime_notify(d->rt, resource);
        refresh_labels_logged(d, false); /* a rediscovery brings a new GPU set */
}

/* The physical GPU behind a device, for the metric kdev_gpu_devices. */
static const char *gpu_of(void *arg, const struct kdev_resource *r, const struct kdev_device *dev)
{
        (void)arg;
        const struct kdev_nvidia_devinfo *in = kdev_nvidia_device_info(r, dev);
        return in ? in->parent_uuid : NULL;
}

static void on_discovery_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn("device discovery", "warning", msg);
}

/* ---- GPUs that come and go ------------------------------------------------- */

static void on_inventory_timer(uv_timer_t *t);

/* kdev_nvidia_backend_options.inventory_changed: the NVIDIA resources are
 * rebuilt from the loop (never from within the backend's callback). */
static void on_inventory_changed(void *arg, const char *why)
{
        struct kdev_dp_daemon *d = arg;
        if (d->stopping || !d->inventory_timer_on)
                return;
        kdev_log_info("GPU inventory changed: rebuilding the NVIDIA resources", "why", why);
        snprintf(d->inventory_why, sizeof(d->inventory_why), "%s", why);
        uv_timer_start(&d->inventory_timer, on_inventory_timer, 0, 0);
}

/* kdev_nvidia_keep_fn: a device that left resource |resource| stays
 * advertised Unhealthy for the grace period from the build that first
 * missed it, then is dropped (the model's withdrawal rule). */
static bool keep_withdrawn(void *arg, const char *resource, const char *id)
{
        struct kdev_dp_daemon *d = arg;
        char grace[32];
        snprintf(grace, sizeof(grace), "%llu", (unsigned long long)(d->withdraw_grace_ms / 1000));
        if (d->withdraw_grace_ms == 0 && !kdev_withdrawn_has(d->withdrawn, resource, id, NULL)) {
                kdev_log_warn("device left the node: dropped (grace period 0)", "resource",
                              resource, "id", id);
                return false;
        }
        bool known = kdev_withdrawn_has(d->withdrawn, resource, id, NULL);
        switch (kdev_withdrawn_miss(d->withdrawn, d, resource, id, uv_now(&d->loop),
                                    d->withdraw_grace_ms, d->round)) {
        case KDEV_WITHDRAWN_NEW:
                kdev_log_warn("device left the node: advertised Unhealthy while pods may still "
                              "hold it, dropped after the grace period",
                              "resource", resource, "id", id, KDEV_LOG_NUM("grace_s", grace));
                return true;
        case KDEV_WITHDRAWN_KEPT:
                return true;
        case KDEV_WITHDRAWN_DROPPED:
                break;
        }
        if (known)
                kdev_log_info("withdrawn device dropped: its grace period is over", "resource",
                              resource, "id", id, KDEV_LOG_NUM("grace_s", grace));
        else
                kdev_log_warn("device left the node: dropped (out of memory)", "resource",
                              resource, "id", id);
        return false;
}

static bool served_now(void *arg, const char *resource)
{
        struct kdev_dp_daemon *d = arg;
        for (size_t i = 0; d->cur.set && i < d->cur.set->n_resources; i++)
                if (strcmp(d->cur.set->resources[i].name, resource) == 0)
                        return true;
        return false;
}

/* After a build: forgets the NVIDIA withdrawn devices it did not ask for
 * (back on the node, dropped, or their resource gone) and the entries of
 * resources no longer served, and arms the timer at the end of the next
 * NVIDIA grace period (the generic devices' own tracker drops theirs). */
static void withdrawn_settle(struct kdev_dp_daemon *d)
{
        kdev_withdrawn_sweep(d->withdrawn, d, d->round);
        kdev_withdrawn_retain(d->withdrawn, served_now, d);
        uint64_t next = kdev_withdrawn_due(d->withdrawn, d, NULL);
        if (next != UINT64_MAX && d->inventory_timer_on &&
            !uv_is_active((uv_handle_t *)&d->inventory_timer)) {
                uint64_t now = uv_now(&d->loop);
                snprintf(d->inventory_why, sizeof(d->inventory_why), "%s",
                         "the grace period of a withdrawn device is over");
                uv_timer_start(&d->inventory_timer, on_inventory_timer,
                               next > now ? next - now : 0, 0);
        }
}

/* The skip warnings of a rescan: the first discovery gave them as warnings. */
static void on_rescan_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_debug("device discovery", "warning", msg);
}

static void on_generic_changed(void *arg, const char *resource)
{
        struct kdev_dp_daemon *d = arg;
        if (d->rt)
                kdev_dp_runtime_notify(d->rt, resource);
}

/* Follows the generic devices of |g| (src/generic/live.h) once it is
 * served; a failure is logged and leaves the devices as discovered. */
static void start_live(struct kdev_dp_daemon *d, struct dp_gen *g)
{
        if (!g->cfg || g->cfg->n_resources == 0)
                return;
        struct kdev_generic_live_options lo = {
                .loop = &d->loop,
                .cfg = g->cfg,
                .discover = {.root = d->opts->generic_root, .warn = on_rescan_warning},
                .set = g->set,
                .changed = on_generic_changed,
                .changed_arg = d,
                .grace_period_ms = -1,
                .withdrawn = d->withdrawn,
        };
        struct kdev_err err = {0};
        g->live = kdev_generic_live_start(&lo, &err);
        if (!g->live)
                kdev_log_error("generic devices are not followed, restart kdev-plugin to see "
                               "changes",
                               "error", err.msg);
        else
                kdev_log_info("following the generic devices",
                              KDEV_LOG_UINT("rescan_interval_s", g->cfg->rescan_interval),
                              KDEV_LOG_UINT("grace_period_s", g->cfg->grace_period));
}

static void stop_live(struct dp_gen *g)
{
        kdev_generic_live_stop(g->live, NULL, NULL);
        g->live = NULL;
}

/* ---- configurations ------------------------------------------------------ */

/* Frees what |g| owns (not |g|) and empties it; the backend must be stopped. */
static void gen_clear(struct dp_gen *g)
{
        kdev_generic_config_free(g->cfg);
        if (g->set) {
                kdev_resource_set_clear(g->set);
                free(g->set);
        }
        if (g->nv_owned && g->nv) {
                kdev_nvidia_config_clear(g->nv);
                free(g->nv);
        }
        free(g->path);
        free(g->name);
        *g = (struct dp_gen){0};
}

/* Reads the configuration into |g|: the NVIDIA options (|nv|, borrowed, with
 * the flags already applied; NULL: a new one, with the flags of the options
 * applied again), the environment, the config file |path| (NULL: none; a
 * file without a YAML document counts as none: NVIDIA's defaults), then the
 * generic discovery and the NVIDIA backend (NVML, GPUs, resources, CDI
 * spec). |*backend_failed| says whether the backend's open was what failed.
 * Returns 0, or a negative errno with |err| (|g| then empty). */
static int gen_load(struct kdev_dp_daemon *d, const char *path, const char *name,
                    struct kdev_nvidia_config *nv, bool check, struct dp_gen *g,
                    bool *backend_failed, struct kdev_err *err)
{
        const struct kdev_dp_daemon_options *o = d->opts;
        static char *no_env[] = {NULL};
        char **env = o->environ ? o->environ : no_env;
        *g = (struct dp_gen){0};
        *backend_failed = false;
        int rc = 0;
        if (nv) {
                g->nv = nv;
        } else {
                g->nv = calloc(1, sizeof(*g->nv));
                g->nv_owned = true;
                if (!g->nv)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                else
                        rc = kdev_nvidia_config_init(g->nv, err); /* cleared on error */
                for (size_t i = 0; rc == 0 && i < o->n_nv_flags; i++)
                        rc = kdev_nvidia_config_apply_flag(g->nv, o->nv_flags[i].name,
                                                           o->nv_flags[i].value, err);
        }
        if (rc == 0 && ((path && !(g->path = strdup(path))) || (name && !(g->name = strdup(name))) ||
                        !(g->set = calloc(1, sizeof(*g->set)))))
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        if (rc == 0)
                rc = kdev_nvidia_config_apply_env(g->nv, env, err);
        bool have_file = false;
        if (rc == 0 && path) {
                struct kdev_config_root root;
                struct kdev_config_sections ext;
                kdev_config_root_init(&root);
                kdev_nvidia_config_sections(g->nv, &ext);
                rc = kdev_generic_config_register(&root, path, &g->cfg, err);
                if (rc == 0)
                        rc = kdev_config_register(&root, &ext, err);
                if (rc == 0)
                        rc = kdev_config_load(&root, path, err);
                if (rc == 1) {
                        kdev_log_info("the config file holds no YAML document: NVIDIA's defaults",
                                      "config", path);
                        rc = 0;
                } else if (rc == 0) {
                        have_file = true;
                }
        }
        if (rc == 0)
                rc = kdev_nvidia_config_finish(g->nv, have_file, err);
        struct kdev_generic_options gopts = {.root = o->generic_root, .warn = on_discovery_warning};
        if (rc == 0 && g->cfg)
                rc = kdev_generic_discover(g->cfg, &gopts, g->set, err);
        if (rc == 0) {
                for (size_t i = 0; i < g->nv->n_warnings; i++)
                        kdev_log_warn("configuration", "warning", g->nv->warnings[i]);
                /* NVIDIA's plugin logs its merged config at every (re)start */
                char *config_json = kdev_dp_config_json(g->nv, g->cfg, o);
                if (!config_json)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                else
                        kdev_log_running_with_config(config_json);
                free(config_json);
        }
        if (rc == 0) {
                struct kdev_nvidia_backend_options bopts = {
                        .loop = &d->loop,
                        .cfg = g->nv,
                        .set = g->set,
                        .notify = on_devices_changed,
                        .notify_arg = d,
                        .skip_cdi = check,
                        .rediscover_interval_ms = d->rediscover_ms,
                        .inventory_changed = check ? NULL : on_inventory_changed,
                        .inventory_arg = d,
                        .previous = d->cur.set, /* NULL at start (g is d->cur, emptied) */
                        .keep_withdrawn = keep_withdrawn,
                        .keep_arg = d,
                        .replaces = d->cur.nvidia, /* retired after the new one starts */
                };
                d->round++;
                if (d->metrics) {
                        bopts.health_event = kdev_plugin_metrics_health_event;
                        bopts.health_event_arg = d->metrics;
                }
                rc = kdev_nvidia_backend_open(&bopts, &g->nvidia, err);
                *backend_failed = rc < 0;
        }
        if (rc < 0) {
                if (!g->nv_owned)
                        g->nv = NULL; /* the caller's */
                gen_clear(g);
        }
        return rc;
}

/* The definition of a resource, as kubelet sees it: name, devices (IDs,
 * device nodes, NUMA nodes, in order) and what Allocate answers (the
 * backend's: NVIDIA's settings and devinfo; generic resources have none).
 * Health is not part of it. */
static bool same_resource(const struct kdev_resource *a, const struct kdev_resource *b)
{
        if (strcmp(a->name, b->name) != 0 || a->n_devices != b->n_devices || a->ops != b->ops)
                return false;
        for (size_t i = 0; i < a->n_devices; i++) {
                const struct kdev_device *x = &a->devices[i], *y = &b->devices[i];
                if (strcmp(x->id, y->id) != 0 || x->numa_node != y->numa_node ||
                    x->n_specs != y->n_specs)
                        return false;
                for (size_t k = 0; k < x->n_specs; k++) {
                        const struct kdev_device_spec *p = &x->specs[k], *q = &y->specs[k];
                        if (strcmp(p->host_path, q->host_path) != 0 ||
                            strcmp(p->container_path, q->container_path) != 0 ||
                            strcmp(p->permissions, q->permissions) != 0)
                                return false;
                }
        }
        if (!a->ops)
                return true;
        return kdev_nvidia_resource_same(a, b);
}

static struct kdev_resource *find_resource(struct kdev_resource_set *set, const char *name)
{
        for (size_t i = 0; set && i < set->n_resources; i++) {
                if (strcmp(set->resources[i].name, name) == 0)
                        return &set->resources[i];
        }
        return NULL;
}

static void on_retired(void *arg)
{
        struct dp_gen *g = arg;
        struct kdev_dp_daemon *d = g->daemon;
        g->nvidia = NULL; /* stopped and freed */
        gen_clear(g);
        free(g);
        d->retiring--;
}

/* Stops the backend of |old| (moved to the heap) and frees it once stopped. */
static void retire(struct kdev_dp_daemon *d, struct dp_gen *old)
{
        struct dp_gen *g = malloc(sizeof(*g));
        struct kdev_nvidia_backend *b = old->nvidia;
        if (!g) {
                /* cannot wait for it: stop without a callback, keep the memory */
                kdev_nvidia_backend_stop(b, NULL, NULL);
                return;
        }
        *g = *old;
        g->daemon = d;
        d->retiring++;
        kdev_nvidia_backend_stop(b, on_retired, g);
}

/* The device nodes and names of |new_set| checked as the runtime will check
 * them (names, socket paths, 4 MiB lists), on a runtime that never starts. */
static int check_resources(struct kdev_dp_daemon *d, struct kdev_resource_set *set,
                           struct kdev_err *err)
{
        struct kdev_dp_runtime *scratch = kdev_dp_runtime_new(&d->loop, &d->dpopts, err);
        if (!scratch)
                return -ENOMEM;
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < set->n_resources; i++)
                rc = kdev_dp_runtime_add_resource(scratch, &set->resources[i], err);
        kdev_dp_runtime_stop(scratch, NULL, NULL);
        return rc;
}

static void log_counts(const char *msg, const char *config, size_t unchanged, size_t changed,
                       size_t added, size_t removed)
{
        kdev_log_info(msg, "config", config, KDEV_LOG_UINT("unchanged", unchanged),
                      KDEV_LOG_UINT("changed", changed), KDEV_LOG_UINT("added", added),
                      KDEV_LOG_UINT("removed", removed));
}

/* Reads the configuration again (|path|: the file, NULL: none; |name|: the
 * named config, per-node configs) and applies it while serving: resources
 * whose definition is the same keep their server, registration and
 * ListAndWatch streams (only their health is carried over and sent when it
 * differs); changed ones get a fresh server and register again; new ones
 * are served and registered; gone ones are stopped and their sockets
 * removed. With |sighup| and nothing changed, every resource is served and
 * registered again (SIGHUP's kubelet-restart recovery). A configuration that
 * cannot be read or built leaves the current one serving, untouched, and
 * logs why (file:line:column for the file). */
static void reload(struct kdev_dp_daemon *d, const char *path, const char *name, bool sighup,
                   bool inventory)
{
        const char *shown = path ? path : "(none: NVIDIA's defaults)";
        struct dp_gen g;
        bool backend_failed;
        struct kdev_err err = {0};
        if (gen_load(d, path, name, NULL, false, &g, &backend_failed, &err) < 0 ||
            check_resources(d, g.set, &err) < 0) {
                if (g.set) {
                        /* built but refused: its spec, written over the
                         * current one's, stays for the current backend to
                         * remove at exit */
                        kdev_nvidia_backend_disown_cdi(g.nvidia);
                        retire(d, &g);
                }
                kdev_log_error(inventory ? "cannot rebuild the NVIDIA resources for the new GPU "
                                           "inventory, will retry"
                                         : "cannot load the new configuration, the current one "
                                           "stays in force",
                               "config", shown, "error", err.msg);
                withdrawn_settle(d);
                if (inventory && d->inventory_timer_on) {
                        /* the current backend's watch waits for its rebuild */
                        snprintf(d->inventory_why, sizeof(d->inventory_why), "%s",
                                 "retrying the rebuild for the new GPU inventory");
                        uv_timer_start(&d->inventory_timer, on_inventory_timer,
                                       d->rediscover_ms ? d->rediscover_ms : 30000, 0);
                }
                return;
        }
        struct dp_gen old = d->cur;
        /* generic devices in their grace period stay listed through the
         * rebuild (the NVIDIA build kept its own: keep_withdrawn) */
        if (kdev_generic_carry_withdrawn(g.set, g.cfg, old.set) < 0)
                kdev_log_warn("cannot keep the withdrawn generic devices listed (out of memory): "
                              "kubelet sees them go before their grace period ends");
        /* health is physical: what the old configuration knew carries over
         * (the new monitor adopts it and probes for recovery) */
        for (size_t i = 0; i < g.set->n_physical; i++) {
                struct kdev_physical *p = g.set->physical[i];
                const struct kdev_physical *q = kdev_physical_find(old.set, p->id);
                /* ...except a GPU read faulted whose monitor saw it recover
                 * (this build read it again, whole) and a withdrawn device
                 * that is back */
                if (q && !q->healthy && !kdev_nvidia_backend_cleared(old.nvidia, p->id))
                        kdev_physical_set_health(g.set, p, false, NULL);
        }
        /* a MIG device created on a faulted GPU starts Unhealthy */
        kdev_nvidia_carry_gpu_health(g.set, old.set);
        size_t unchanged = 0, changed = 0, added = 0, removed = 0;
        for (size_t i = 0; i < g.set->n_resources; i++) {
                struct kdev_resource *r = &g.set->resources[i];
                struct kdev_resource *was = find_resource(old.set, r->name);
                if (!was) {
                        if (kdev_dp_runtime_add_resource(d->rt, r, &err) < 0)
                                kdev_log_error("cannot serve the new resource", "resource",
                                               r->name, "error", err.msg);
                        kdev_log_info("resource added: serving and registering it", "resource",
                                      r->name, KDEV_LOG_UINT("devices", r->n_devices));
                        added++;
                        continue;
                }
                bool same = same_resource(was, r);
                /* a new GPU inventory changes devices only: ListAndWatch
                 * sends them, no new registration */
                kdev_dp_runtime_update_resource(d->rt, r, !same && !inventory, NULL);
                if (same) {
                        kdev_log_info("resource unchanged: serving on", "resource", r->name,
                                      KDEV_LOG_UINT("devices", r->n_devices));
                        unchanged++;
                } else if (inventory) {
                        kdev_log_info("resource devices changed: sent on ListAndWatch",
                                      "resource", r->name, KDEV_LOG_UINT("devices", r->n_devices));
                        changed++;
                } else {
                        kdev_log_info("resource changed: serving and registering it again",
                                      "resource", r->name, KDEV_LOG_UINT("devices", r->n_devices));
                        changed++;
                }
        }
        for (size_t i = 0; old.set && i < old.set->n_resources; i++) {
                const char *rn = old.set->resources[i].name;
                if (find_resource(g.set, rn))
                        continue;
                kdev_dp_runtime_remove_resource(d->rt, rn);
                kdev_log_info("resource removed: stopped serving it", "resource", rn);
                removed++;
        }
        kdev_plugin_metrics_set_resources(d->metrics, g.set);
        const char *was_cdi = kdev_nvidia_backend_cdi_path(old.nvidia);
        const char *now_cdi = kdev_nvidia_backend_cdi_path(g.nvidia);
        if (was_cdi && now_cdi && strcmp(was_cdi, now_cdi) == 0)
                kdev_nvidia_backend_disown_cdi(old.nvidia); /* rewritten by the new one */
        stop_live(&old);
        d->cur = g;
        start_live(d, &d->cur);
        if (kdev_nvidia_backend_start(d->cur.nvidia, &err) < 0)
                kdev_log_error("health checks not started", "error", err.msg);
        if (!old.nv_owned)
                old.nv = NULL; /* the caller's, cleared after the run */
        retire(d, &old);
        if (inventory) {
                log_counts("GPU inventory applied", shown, unchanged, changed, added, removed);
        } else if (sighup && !changed && !added && !removed) {
                kdev_log_info("SIGHUP: configuration unchanged, serving and registering every "
                              "resource again", "config", shown);
                kdev_dp_runtime_restart(d->rt);
        } else {
                log_counts("configuration applied", shown, unchanged, changed, added, removed);
        }
        d->labelled = NULL;
        refresh_labels_logged(d, true);
        withdrawn_settle(d);
}

/* Per-node configs: the config for the label value |value|; NULL path for
 * NVIDIA's defaults. */
static void on_select_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn(msg);
}

static int select_config(struct kdev_dp_daemon *d, const char *value, char **name, char **path,
                         struct kdev_err *err)
{
        return kdev_node_config_select(&d->opts->node_config, value, on_select_warning, d, name,
                                       path, err);
}

/* Reads the config again: the file of --config, or under --config-dir the
 * config the current label selects (the directory may have changed). */
static void reload_current(struct kdev_dp_daemon *d, bool sighup, bool inventory)
{
        if (!d->opts->node_config.dir) {
                reload(d, d->opts->config, NULL, sighup, inventory);
                return;
        }
        char *name = NULL, *path = NULL;
        struct kdev_err err = {0};
        if (select_config(d, d->label_value, &name, &path, &err) < 0) {
                kdev_log_error("cannot select a config, the current one stays in force", "error",
                               err.msg);
                return;
        }
        kdev_log_info("selected config", "name", *name ? name : "(empty: NVIDIA's defaults)",
                      "label", d->label_value ? d->label_value : "(none)");
        reload(d, path, name, sighup, inventory);
        free(name);
        free(path);
}

/* A GPU inventory change (or the end of a withdrawn device's grace
 * period): the configuration in force is built again over the GPUs found
 * now and applied as a reload does, the NVIDIA resources' devices updated
 * through ListAndWatch. */
static void on_inventory_timer(uv_timer_t *t)
{
        struct kdev_dp_daemon *d = t->data;
        if (d->stopping)
                return;
        kdev_log_info("applying the GPU inventory", "why", d->inventory_why);
        reload_current(d, false, true);
}

static void on_label(void *arg, const char *value)
{
        struct kdev_dp_daemon *d = arg;
        if (d->stopping)
                return;
        kdev_log_info("node config label changed", "label", d->opts->node_config.label
                      ? d->opts->node_config.label : KDEV_NODE_CONFIG_LABEL,
                      "value", value ? value : "(none)");
        free(d->label_value);
        d->label_value = value ? strdup(value) : NULL;
        char *name = NULL, *path = NULL;
        struct kdev_err err = {0};
        if (select_config(d, value, &name, &path, &err) < 0) {
                kdev_log_error("cannot select a config, the current one stays in force", "error",
                               err.msg);
                return;
        }
        if (d->cur.name && strcmp(d->cur.name, name) == 0) {
                kdev_log_info("config already in force", "name", *name ? name : "(empty)");
        } else {
                kdev_log_info("selected config", "name", *name ? name : "(empty: NVIDIA's defaults)",
                              "label", value ? value : "(none)");
                reload(d, path, name, false, false);
        }
        free(name);
        free(path);
}

void kdev_dp_daemon_restart(struct kdev_dp_daemon *d)
{
        if (d->stopping)
                return;
        kdev_log_info("SIGHUP: reading the configuration again");
        reload_current(d, true, false);
}

void kdev_dp_daemon_stop(struct kdev_dp_daemon *d, const char *why)
{
        if (d->stopping)
                return;
        d->stopping = true;
        kdev_log_info("stopping", "signal", why);
        stop_live(&d->cur);
        /* Health first (it notifies the runtime), then the runtime. */
        struct kdev_nvidia_backend *b = d->cur.nvidia;
        d->cur.nvidia = NULL;
        kdev_nvidia_backend_stop(b, on_backend_stopped, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct kdev_dp_daemon *d = h->data;
        if (signum == SIGHUP)
                kdev_dp_daemon_restart(d);
        else
                kdev_dp_daemon_stop(d, signum == SIGTERM  ? "SIGTERM"
                                       : signum == SIGINT ? "SIGINT"
                                                          : "SIGQUIT");
}

uv_loop_t *kdev_dp_daemon_loop(struct kdev_dp_daemon *d)
{
        return &d->loop;
}

struct kdev_dp_runtime *kdev_dp_daemon_runtime(struct kdev_dp_daemon *d)
{
        return d->rt;
}

/* --check: one line per resource, "<name>: <n> device(s)", then for
 * time-sliced resources "(<m> replicas of <k> devices)", then the IDs; below
 * it what one isolated replica is (nvidia/isolation.h), the NUMA nodes and, per device, what is not plain (Unhealthy, device
 * nodes). */
static void print_devices(const struct kdev_resource_set *set)
{
        for (size_t i = 0; i < set->n_resources; i++) {
                const struct kdev_resource *r = &set->resources[i];
                size_t replicas = 0, physical = 0;
                for (size_t j = 0; j < r->n_devices; j++) {
                        const struct kdev_nvidia_devinfo *in =
                                kdev_nvidia_device_info(r, &r->devices[j]);
                        replicas += in && in->replica >= 0;
                        physical += in && in->replica == 0; /* replicas count from 0 */
                }
                printf("%s: %zu device%s", r->name, r->n_devices, r->n_devices == 1 ? "" : "s");
                if (replicas)
                        printf(" (%zu replicas of %zu device%s)", replicas, physical,
                               physical == 1 ? "" : "s");
                printf(":");
                for (size_t j = 0; j < r->n_devices; j++)
                        printf(" %s", r->devices[j].id);
                printf("\n");
                char iso[256];
                if (kdev_nvidia_isolation_describe(r, iso, sizeof(iso)))
                        printf("  %s\n", iso);
                size_t per_node[64] = {0};
                bool any_numa = false;
                for (size_t j = 0; j < r->n_devices; j++) {
                        int node = r->devices[j].numa_node;
                        if (node >= 0 && node < 64) {
                                per_node[node]++;
                                any_numa = true;
                        }
                }
                const char *sep = "  NUMA node ";
                for (int node = 0; any_numa && node < 64; node++) {
                        if (per_node[node]) {
                                printf("%s%d: %zu", sep, node, per_node[node]);
                                sep = ", node ";
                        }
                }
                if (any_numa)
                        printf("\n");
                for (size_t j = 0; j < r->n_devices; j++) {
                        const struct kdev_device *dev = &r->devices[j];
                        if (dev->healthy && !dev->n_specs)
                                continue;
                        printf("  %s:", dev->id);
                        if (!dev->healthy)
                                printf(" Unhealthy");
                        for (size_t k = 0; k < dev->n_specs; k++)
                                printf(" %s->%s:%s", dev->specs[k].host_path,
                                       dev->specs[k].container_path, dev->specs[k].permissions);
                        printf("\n");
                }
        }
}

/* --list-gpus: one line per GPU (dp_daemon.h). */
static void print_gpus(const struct kdev_gpu_set *gpus)
{
        for (size_t i = 0; gpus && i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                const char *mig = !g->mig_mode_known || !g->mig_capable ? "[N/A]"
                                  : g->mig_current ? "Enabled" : "Disabled";
                printf("%s, %s, %llu MiB, %s, %u, %s\n", g->uuid, g->name, g->memory_total >> 20,
                       g->pci_bus_id, g->minor, mig);
        }
}

/* Warns once per socket of NVIDIA's device plugin (nvidia/mig.h's naming)
 * found in the device-plugins directory |dir| and not one of |set|'s own
 * sockets (|prefix|): with both plugins running, both can register
 * nvidia.com/gpu and kubelet keeps whichever registered last
 * (docs/migrating-from-nvidia.md). A directory that cannot be read is left
 * to the runtime, which reports it. */
static void warn_nvidia_plugin_sockets(const char *dir, const char *prefix,
                                       const struct kdev_resource_set *set)
{
        DIR *dh = opendir(dir);
        if (!dh)
                return;
        struct dirent *e;
        while ((e = readdir(dh))) {
                if (!kdev_nvidia_is_plugin_socket_name(e->d_name))
                        continue;
                bool own = false;
                for (size_t i = 0; !own && set && i < set->n_resources; i++) {
                        char name[256];
                        own = kdev_dp_socket_name(prefix, set->resources[i].name, name,
                                                  sizeof(name)) == 0 &&
                              strcmp(name, e->d_name) == 0;
                }
                struct stat st;
                if (own || fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISSOCK(st.st_mode))
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                kdev_log_warn("NVIDIA's device plugin seems to run on this node: both plugins can "
                              "register nvidia.com/gpu; remove NVIDIA's plugin first "
                              "(docs/migrating-from-nvidia.md)",
                              "socket", path);
        }
        closedir(dh);
}

int kdev_dp_daemon_run(const struct kdev_dp_daemon_options *o, struct kdev_err *errp)
{
        const char *metrics_address = o->metrics_address;
        const char *nfd_file = o->nfd_file;
        bool check = o->check;
        struct kdev_err err = {0};
        struct kdev_dp_daemon d = {.opts = o};
        d.dpopts = o->dp;
        int status = 1;
        bool loop_ready = false;
        char *sel_name = NULL, *sel_path = NULL, *node_rv = NULL;
        const char *config = o->config;

        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_err_set(&err, -r, "cannot start the event loop: %s", uv_strerror(r));
                goto out;
        }
        loop_ready = true;
        const char *interval = o->rediscover_interval;
        if (interval && *interval) {
                double sec;
                if (!kdev_seconds_parse(interval, 86400, &sec)) {
                        kdev_err_set(&err, EINVAL,
                                     "KDEV_NVIDIA_REDISCOVER_INTERVAL: want seconds between 0 and "
                                     "86400, got \"%s\"", interval);
                        goto out;
                }
                d.rediscover_ms = (uint64_t)(sec * 1000);
        }
        d.withdraw_grace_ms = 300000; /* kubelet's endpointStopGracePeriod */
        if (!(d.withdrawn = kdev_withdrawn_new())) {
                kdev_err_set(&err, ENOMEM, "out of memory");
                goto out;
        }
        if (o->withdraw_grace && *o->withdraw_grace) {
                double sec;
                if (!kdev_seconds_parse(o->withdraw_grace, 86400, &sec)) {
                        kdev_err_set(&err, EINVAL,
                                     "KDEV_NVIDIA_WITHDRAW_GRACE: want seconds between 0 and "
                                     "86400, got \"%s\"", o->withdraw_grace);
                        goto out;
                }
                d.withdraw_grace_ms = (uint64_t)(sec * 1000);
        }
        uv_timer_init(&d.loop, &d.inventory_timer);
        d.inventory_timer.data = &d;
        d.inventory_timer_on = true;
        if (o->node_config.dir) {
                /* per-node configs: the label of this node selects the file */
                if (kdev_node_config_check(&o->node_config, &err) < 0 ||
                    kdev_node_label_read(&o->node_config, &d.label_value, &node_rv, &err) < 0 ||
                    select_config(&d, d.label_value, &sel_name, &sel_path, &err) < 0)
                        goto out;
                kdev_log_info("selected config", "name",
                              *sel_name ? sel_name : "(empty: NVIDIA's defaults)", "label",
                              d.label_value ? d.label_value : "(none)", "node",
                              o->node_config.node_name);
                config = sel_path;
        }
        if (metrics_address && *metrics_address && !check) {
                d.metrics = kdev_plugin_metrics_new(NULL, gpu_of, NULL, &err);
                if (!d.metrics)
                        goto out;
                d.dpopts.hooks = kdev_plugin_metrics_hooks(d.metrics);
        }
        bool backend_failed = false;
        if (gen_load(&d, config, sel_name, o->nv, check, &d.cur, &backend_failed, &err) < 0) {
                if (backend_failed && !check)
                        label_invalid_mig(nfd_file && *nfd_file ? nfd_file : NULL, o->nv,
                                          o->machine_type_file);
                goto out;
        }
        kdev_plugin_metrics_set_resources(d.metrics, d.cur.set);
        struct kdev_resource_set *set = d.cur.set;
        d.rt = kdev_dp_runtime_new(&d.loop, &d.dpopts, &err);
        if (!d.rt)
                goto out;
        for (size_t i = 0; i < set->n_resources; i++) {
                kdev_log_info("resource", "resource", set->resources[i].name,
                              KDEV_LOG_UINT("devices", set->resources[i].n_devices));
                /* also for --check: names, socket paths, 4 MiB message limit */
                if (kdev_dp_runtime_add_resource(d.rt, &set->resources[i], &err) < 0)
                        goto out;
        }
        if (check) {
                if (o->list_gpus)
                        print_gpus(kdev_nvidia_backend_gpus(d.cur.nvidia));
                else
                        print_devices(set);
                status = 0;
                goto out;
        }
        /* The node labels before anything registers: a file that cannot be
         * written at all (no such directory, not writable) stops the start,
         * like an unwritable --cdi-dir. */
        d.nfd_file = nfd_file && *nfd_file ? nfd_file : NULL;
        if (refresh_labels(&d, true, &err) < 0) {
                kdev_err_wrap(&err, "--nfd-features-file");
                goto out;
        }
        if ((r = uv_signal_init(&d.loop, &d.sigterm)) < 0) {
                kdev_err_set(&err, -r, "cannot handle signals: %s", uv_strerror(r));
                goto out;
        }
        if ((r = uv_signal_init(&d.loop, &d.sigint)) < 0) {
                uv_close((uv_handle_t *)&d.sigterm, NULL);
                kdev_err_set(&err, -r, "cannot handle signals: %s", uv_strerror(r));
                goto out;
        }
        uv_signal_init(&d.loop, &d.sigquit); /* cannot fail once the others worked */
        uv_signal_init(&d.loop, &d.sighup);
        d.sigterm.data = d.sigint.data = d.sigquit.data = d.sighup.data = &d;
        uv_signal_start(&d.sigterm, on_signal, SIGTERM);
        uv_signal_start(&d.sigint, on_signal, SIGINT);
        uv_signal_start(&d.sigquit, on_signal, SIGQUIT);
        uv_signal_start(&d.sighup, on_signal, SIGHUP);
        if (d.nfd_file) {
                /* as often as the NVIDIA rediscovery retries (default 30 s) */
                uint64_t every = d.rediscover_ms ? d.rediscover_ms : 30000;
                uv_timer_init(&d.loop, &d.labels_timer);
                d.labels_timer.data = &d;
                uv_timer_start(&d.labels_timer, on_labels_timer, every, every);
                d.labels_timer_on = true;
        }
        warn_nvidia_plugin_sockets(d.dpopts.plugin_dir ? d.dpopts.plugin_dir : KDEV_DP_DEFAULT_DIR,
                                   d.dpopts.socket_prefix ? d.dpopts.socket_prefix
                                                          : KDEV_DP_DEFAULT_SOCKET_PREFIX,
                                   d.cur.set);
        /* Metrics first: a bad address or a port in use stops the start
         * before anything registers. */
        if ((d.metrics &&
             kdev_plugin_metrics_listen(d.metrics, &d.loop, metrics_address, &err) < 0) ||
            kdev_dp_runtime_start(d.rt, &err) < 0 ||
            kdev_nvidia_backend_start(d.cur.nvidia, &err) < 0 ||
            (o->node_config.dir &&
             !(d.watch = kdev_node_watch_start(&d.loop, &o->node_config, d.label_value, node_rv,
                                               on_label, &d, &err)))) {
                on_runtime_stopped(&d); /* closes the signal handles */
                goto out;
        }
        start_live(&d, &d.cur);
        if (d.metrics) {
                kdev_log_info("serving metrics", "address", metrics_address,
                              KDEV_LOG_UINT("port", kdev_plugin_metrics_port(d.metrics)), "path",
                              "/metrics");
                if (start_usage(&d, &err) < 0) {
                        kdev_dp_daemon_stop(&d, "usage");
                        goto out_run;
                }
        }
        if (o->on_started)
                o->on_started(o->on_started_arg, &d);
out_run:
        uv_run(&d.loop, UV_RUN_DEFAULT);
        status = d.usage_failed ? -err.code : 0;
        if (!d.usage_failed)
                kdev_log_info("stopped");
out:
        if (status != 0)
                kdev_log_error("cannot start", "error", err.msg);
        if (loop_ready) {
                /* Whatever is still open (an error path, or --check). */
                stop_live(&d.cur);
                struct kdev_nvidia_backend *b = d.cur.nvidia;
                d.cur.nvidia = NULL;
                kdev_nvidia_backend_stop(b, NULL, NULL);
                struct kdev_dp_runtime *rt = d.rt;
                d.rt = NULL;
                if (rt)
                        kdev_dp_runtime_stop(rt, NULL, NULL);
                kdev_node_watch_stop(d.watch, NULL, NULL);
                d.watch = NULL;
                kdev_nvidia_usage_loop_stop(d.usage);
                d.usage = NULL;
                kdev_plugin_metrics_stop(d.metrics, NULL, NULL);
                d.metrics = NULL;
                if (d.inventory_timer_on)
                        uv_close((uv_handle_t *)&d.inventory_timer, NULL);
                d.inventory_timer_on = false;
                uv_run(&d.loop, UV_RUN_DEFAULT);
                if (uv_loop_close(&d.loop) != 0)
                        kdev_log_warn("event loop closed with handles still open");
        }
        if (!d.cur.nv_owned)
                d.cur.nv = NULL; /* the caller's */
        gen_clear(&d.cur);
        kdev_withdrawn_free(d.withdrawn);
        kdev_file_guard_clear(&d.labels_guard);
        free(d.label_value);
        free(sel_name);
        free(sel_path);
        free(node_rv);
        if (status != 0 && errp)
                *errp = err;
        return status == 0 ? 0 : err.code > 0 ? -err.code : -EIO;
}
