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

#include <uv.h>

#include "common/err.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/version.h"
#include "config/config.h"
#include "daemon/config_json.h"
#include "generic/generic.h"
#include "model/model.h"
#include "nvidia/backend.h"
#include "nvidia/config.h"
#include "nvidia/labels.h"
#include "nvidia/resources.h"
#include "metrics/plugin_metrics.h"
#include "plugin/runtime.h"

struct kdev_dp_daemon {
        uv_loop_t loop;
        uv_signal_t sigterm;
        uv_signal_t sigint;
        uv_signal_t sigquit;
        uv_signal_t sighup;
        struct kdev_dp_runtime *rt;
        struct kdev_nvidia_backend *nvidia;
        struct kdev_plugin_metrics *metrics; /* NULL: metrics off */
        /* --nfd-features-file (NULL: off), the config and the GPU set the
         * labels were last built from */
        const char *nfd_file;
        const struct kdev_nvidia_config *nv;
        const struct kdev_gpu_set *labelled;
        bool labels_written;
        bool labels_failed;  /* the last write failed: retried, logged once */
        uv_timer_t labels_timer; /* retries a failed write, sees rediscoveries */
        bool labels_timer_on;
        bool stopping;
        const struct kdev_dp_daemon_options *opts;
};

static void on_runtime_stopped(void *arg)
{
        struct kdev_dp_daemon *d = arg;
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
        uv_close((uv_handle_t *)&d->sigquit, NULL);
        uv_close((uv_handle_t *)&d->sighup, NULL);
        if (d->labels_timer_on)
                uv_close((uv_handle_t *)&d->labels_timer, NULL);
        d->labels_timer_on = false;
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

static void log_labels_written(const char *path, int r, size_t n_labels)
{
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
 * removed by hand). The file is written only when its text changes, and kept
 * at exit (see README "Node labels"). Returns 1 written, 0 unchanged or
 * nothing to do, or a negative errno with |err|. */
static int refresh_labels(struct kdev_dp_daemon *d, bool force, struct kdev_err *err)
{
        const struct kdev_gpu_set *gpus = kdev_nvidia_backend_gpus(d->nvidia);
        /* while stopping the backend is gone: keep the file as it is */
        if (!d->nfd_file || d->stopping ||
            (!force && d->labels_written && gpus == d->labelled))
                return 0;
        size_t n = 0;
        bool invalid_mig;
        char *text = NULL;
        int r = labels_text(gpus, d->nv, d->opts->machine_type_file, &text, &n, &invalid_mig,
                            err);
        if (r == 0)
                r = kdev_nvidia_labels_write(d->nfd_file, text, err);
        free(text);
        if (r < 0) {
                d->labels_written = false;
                return r;
        }
        log_labels_written(d->nfd_file, r, n);
        d->labelled = gpus;
        d->labels_written = true;
        return r;
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
                log_labels_written(path, r, n);
        free(text);
}

void kdev_dp_daemon_restart(struct kdev_dp_daemon *d)
{
        if (d->stopping)
                return;
        kdev_log_info("SIGHUP: serving and registering every resource again");
        kdev_dp_runtime_restart(d->rt);
        refresh_labels_logged(d, true);
}

void kdev_dp_daemon_stop(struct kdev_dp_daemon *d, const char *why)
{
        if (d->stopping)
                return;
        d->stopping = true;
        kdev_log_info("stopping", "signal", why);
        /* Health first (it notifies the runtime), then the runtime. */
        struct kdev_nvidia_backend *b = d->nvidia;
        d->nvidia = NULL;
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

/* --check: one line per resource, "<name>: <n> device(s)", then for
 * time-sliced resources "(<m> replicas of <k> devices)", then the IDs; below
 * it the NUMA nodes and, per device, what is not plain (Unhealthy, device
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

int kdev_dp_daemon_run(const struct kdev_dp_daemon_options *o, struct kdev_err *errp)
{
        static char *no_env[] = {NULL};
        const char *config = o->config;
        const char *metrics_address = o->metrics_address;
        const char *nfd_file = o->nfd_file;
        bool check = o->check;
        char **env = o->environ ? o->environ : no_env;
        struct kdev_dp_options opts = o->dp;
        struct kdev_generic_options gopts = {.root = o->generic_root};
        struct kdev_err err = {0};
        gopts.warn = on_discovery_warning;

        struct kdev_generic_config *cfg = NULL;
        struct kdev_resource_set set = {0};
        struct kdev_dp_daemon d = {.opts = o};
        int status = 1;
        bool loop_ready = false;
        /* kdev's config file: `version`, then each backend's sections */
        struct kdev_config_root root;
        struct kdev_config_sections ext;
        kdev_config_root_init(&root);
        kdev_nvidia_config_sections(o->nv, &ext);
        if (kdev_nvidia_config_apply_env(o->nv, env, &err) < 0 ||
            (config && (kdev_generic_config_register(&root, config, &cfg, &err) < 0 ||
                        kdev_config_register(&root, &ext, &err) < 0 ||
                        kdev_config_load(&root, config, &err) < 0)) ||
            kdev_nvidia_config_finish(o->nv, config != NULL, &err) < 0 ||
            (cfg && kdev_generic_discover(cfg, &gopts, &set, &err) < 0)) {
                goto out; /* logged below as "cannot start" */
        }
        for (size_t i = 0; i < o->nv->n_warnings; i++)
                kdev_log_warn("configuration", "warning", o->nv->warnings[i]);
        char *config_json = kdev_dp_config_json(o->nv, cfg, o);
        if (!config_json) {
                kdev_err_set(&err, ENOMEM, "out of memory");
                goto out;
        }
        kdev_log_running_with_config(config_json);
        free(config_json);

        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_err_set(&err, -r, "cannot start the event loop: %s", uv_strerror(r));
                goto out;
        }
        loop_ready = true;
        struct kdev_nvidia_backend_options bopts = {
                .loop = &d.loop,
                .cfg = o->nv,
                .set = &set,
                .notify = on_devices_changed,
                .notify_arg = &d,
                .skip_cdi = check,
        };
        const char *interval = o->rediscover_interval;
        if (interval && *interval) {
                double sec;
                if (!kdev_seconds_parse(interval, 86400, &sec)) {
                        kdev_err_set(&err, EINVAL,
                                     "KDEV_NVIDIA_REDISCOVER_INTERVAL: want seconds between 0 and "
                                     "86400, got \"%s\"", interval);
                        goto out;
                }
                bopts.rediscover_interval_ms = (uint64_t)(sec * 1000);
        }
        if (metrics_address && *metrics_address && !check) {
                d.metrics = kdev_plugin_metrics_new(&set, gpu_of, NULL, &err);
                if (!d.metrics)
                        goto out;
                bopts.health_event = kdev_plugin_metrics_health_event;
                bopts.health_event_arg = d.metrics;
                opts.hooks = kdev_plugin_metrics_hooks(d.metrics);
        }
        if (kdev_nvidia_backend_open(&bopts, &d.nvidia, &err) < 0) {
                if (!check)
                        label_invalid_mig(nfd_file && *nfd_file ? nfd_file : NULL, o->nv,
                                          o->machine_type_file);
                goto out;
        }
        d.rt = kdev_dp_runtime_new(&d.loop, &opts, &err);
        if (!d.rt)
                goto out;
        for (size_t i = 0; i < set.n_resources; i++) {
                kdev_log_info("resource", "resource", set.resources[i].name,
                              KDEV_LOG_UINT("devices", set.resources[i].n_devices));
                /* also for --check: names, socket paths, 4 MiB message limit */
                if (kdev_dp_runtime_add_resource(d.rt, &set.resources[i], &err) < 0)
                        goto out;
        }
        if (check) {
                if (o->list_gpus)
                        print_gpus(kdev_nvidia_backend_gpus(d.nvidia));
                else
                        print_devices(&set);
                status = 0;
                goto out;
        }
        /* The node labels before anything registers: a file that cannot be
         * written at all (no such directory, not writable) stops the start,
         * like an unwritable --cdi-dir. */
        d.nfd_file = nfd_file && *nfd_file ? nfd_file : NULL;
        d.nv = o->nv;
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
                uint64_t every = bopts.rediscover_interval_ms ? bopts.rediscover_interval_ms
                                                              : 30000;
                uv_timer_init(&d.loop, &d.labels_timer);
                d.labels_timer.data = &d;
                uv_timer_start(&d.labels_timer, on_labels_timer, every, every);
                d.labels_timer_on = true;
        }
        /* Metrics first: a bad address or a port in use stops the start
         * before anything registers. */
        if ((d.metrics &&
             kdev_plugin_metrics_listen(d.metrics, &d.loop, metrics_address, &err) < 0) ||
            kdev_dp_runtime_start(d.rt, &err) < 0 ||
            kdev_nvidia_backend_start(d.nvidia, &err) < 0) {
                on_runtime_stopped(&d); /* closes the signal handles */
                goto out;
        }
        if (d.metrics) {
                kdev_log_info("serving metrics", "address", metrics_address,
                              KDEV_LOG_UINT("port", kdev_plugin_metrics_port(d.metrics)), "path",
                              "/metrics");
        }
        if (o->on_started)
                o->on_started(o->on_started_arg, &d);
        uv_run(&d.loop, UV_RUN_DEFAULT);
        status = 0;
        kdev_log_info("stopped");
out:
        if (status != 0)
                kdev_log_error("cannot start", "error", err.msg);
        if (loop_ready) {
                /* Whatever is still open (an error path, or --check). */
                struct kdev_nvidia_backend *b = d.nvidia;
                d.nvidia = NULL;
                kdev_nvidia_backend_stop(b, NULL, NULL);
                struct kdev_dp_runtime *rt = d.rt;
                d.rt = NULL;
                if (rt)
                        kdev_dp_runtime_stop(rt, NULL, NULL);
                kdev_plugin_metrics_stop(d.metrics, NULL, NULL);
                d.metrics = NULL;
                uv_run(&d.loop, UV_RUN_DEFAULT);
                if (uv_loop_close(&d.loop) != 0)
                        kdev_log_warn("event loop closed with handles still open");
        }
        kdev_generic_config_free(cfg);
        kdev_resource_set_clear(&set);
        if (status != 0 && errp)
                *errp = err;
        return status == 0 ? 0 : err.code > 0 ? -err.code : -EIO;
}
