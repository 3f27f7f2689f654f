/* The NVIDIA backend of kdev-plugin. See backend.h. */
#include "nvidia/backend.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "nvidia/cdi_spec.h"
#include "nvidia/health.h"
#include "nvidia/mps.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/preferred.h"
#include "nvidia/resources.h"
#include "nvidia/share_host.h"
#include "nvidia/sharing.h"
#include "nvidia/xid.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

#define DEFAULT_REDISCOVER_MS 30000

struct kdev_nvidia_backend {
        struct kdev_nvidia_backend_options opts;
        struct kdev_nvml *lib;
        struct kdev_gpu_set *gpus;
        struct kdev_xid_policy policy;
        struct kdev_nvidia_health *health;
        struct kdev_nvidia_rediscover *rediscover;
        struct kdev_nvidia_inventory_watch *watch;
        struct kdev_nvidia_mps_watch *mps; /* sharing.mps: the daemons' watch (mps.h) */
        bool cdi_written;
        bool hook_warned; /* the hook path not visible here: warned once */
        char cdi_path[4096]; /* the spec written, when cdi_written */
        struct kdev_file_guard cdi_guard; /* what was last written there (common/file.h) */
        struct kdev_file_guard share_guard; /* the share library and preload file */
        bool stopping;
        unsigned pending; /* asynchronous stops still running */
        void (*done)(void *arg);
        void *done_arg;
};

static unsigned discover_flags(const struct kdev_nvidia_config *cfg)
{
        unsigned flags = KDEV_NVML_DISCOVER_LINKS;
        if (cfg->mig_strategy == KDEV_NVIDIA_MIG_NONE)
                flags |= KDEV_NVML_DISCOVER_NO_MIG;
        return flags;
}

int kdev_nvidia_nvml_options(const struct kdev_nvidia_config *cfg, struct kdev_nvml_options *o,
                             char *buf, size_t size, struct kdev_err *why, struct kdev_err *err)
{
        struct kdev_nvidia_roots roots;
        int rc = kdev_nvidia_cdi_roots(cfg, &roots, err);
        if (rc < 0)
                return rc;
        kdev_nvidia_roots_nvml(&roots, o, buf, size, why);
        return 0;
}

static enum kdev_nvidia_share_policy share_policy(const struct kdev_nvidia_config *cfg)
{
        return cfg->shared_policy == KDEV_NVIDIA_POLICY_PACKED ? KDEV_NVIDIA_SHARE_PACKED
                                                              : KDEV_NVIDIA_SHARE_DISTRIBUTED;
}

static void log_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn("nvidia", "warning", msg);
}

static struct kdev_resource *find_resource(struct kdev_resource_set *set, const char *name)
{
        for (size_t i = 0; i < set->n_resources; i++) {
                if (strcmp(set->resources[i].name, name) == 0)
                        return &set->resources[i];
        }
        return NULL;
}

static int write_cdi(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        if (b->opts.skip_cdi || !kdev_nvidia_cdi_needed(b->opts.cfg))
                return 0;
        char path[4096], aside[4096];
        struct kdev_nvidia_driver_files files;
        int r = kdev_nvidia_cdi_write_guarded(b->gpus, b->opts.cfg, path, sizeof(path), &files,
                                              &b->cdi_guard, aside, sizeof(aside), err);
        if (r < 0)
                return kdev_err_wrap(err, "writing the CDI spec");
        if (r == 1)
                kdev_log_warn("state file changed by someone else: moved aside and rebuilt from "
                              "memory", "path", path, "aside", aside);
        if (b->gpus && b->gpus->n_gpus > 0) {
                const struct kdev_nvidia_config *cfg = b->opts.cfg;
                char msg[4096 + 256];
                if (files.n_libraries == 0) {
                        snprintf(msg, sizeof(msg),
                                 "no driver libraries found under %s for driver %s; containers "
                                 "will need the NVIDIA container runtime to inject them",
                                 kdev_nvidia_driver_lookup_root(cfg->driver_root,
                                                                cfg->container_driver_root),
                                 b->gpus->driver_version);
                        kdev_log_warn(msg, "path", path);
                } else {
                        kdev_log_info("CDI spec: driver files",
                                      KDEV_LOG_UINT("libraries", files.n_libraries), "hooks",
                                      files.hook_path ? files.hook_path : "none");
                        if (files.hook_path && !files.hook_visible && !b->hook_warned) {
                                /* a host path: written as given (NVIDIA does) */
                                snprintf(msg, sizeof(msg),
                                         "nvidia-cdi-hook %s is not an executable file here; "
                                         "the CDI spec's hooks use it as a host path",
                                         files.hook_path);
                                kdev_log_warn(msg, "path", path);
                                b->hook_warned = true;
                        }
                }
                b->cdi_written = true;
                snprintf(b->cdi_path, sizeof(b->cdi_path), "%s", path);
                kdev_log_info("wrote CDI spec", "path", path);
        }
        kdev_nvidia_driver_files_clear(&files);
        return 0;
}

/* Isolated replicas configured: the library copy and the preload file under
 * --share-root (share_host.h). */
static int install_share(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        const struct kdev_nvidia_config *cfg = b->opts.cfg;
        if (!cfg->isolation.present || b->opts.skip_cdi) /* skip_cdi: --check writes nothing */
                return 0;
        char lib[PATH_MAX], exe[PATH_MAX];
        const char *library = cfg->share_library;
        if (!library || !library[0]) {
                ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
                exe[n > 0 ? n : 0] = '\0';
                if (kdev_nvidia_share_library_default(n > 0 ? exe : "./kdev-plugin", lib,
                                                      sizeof(lib)) < 0)
                        return kdev_err_set(err, ENAMETOOLONG, "share library path too long");
                library = lib;
        }
        int r = kdev_nvidia_share_install(cfg->share_root, library, cfg->cdi_dir,
                                          &b->share_guard, err);
        if (r < 0)
                return kdev_err_wrap(err, "isolation");
        kdev_log_info("installed the share library", "path", library, "root", cfg->share_root);
        return 0;
}

static void log_gpus(const struct kdev_gpu_set *gpus)
{
        char cuda[32];
        snprintf(cuda, sizeof(cuda), "%d.%d", gpus->cuda_driver_version / 1000,
                 gpus->cuda_driver_version % 1000 / 10);
        kdev_log_info("NVIDIA GPUs found", KDEV_LOG_UINT("gpus", gpus->n_gpus), "driver",
                      gpus->driver_version, "cuda", cuda);
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                kdev_log_info("GPU", KDEV_LOG_UINT("index", g->index), "uuid", g->uuid, "name",
                              g->name, KDEV_LOG_UINT("memory_mib", g->memory_total >> 20),
                              "pci_bus_id", g->pci_bus_id, KDEV_LOG_INT("numa_node", g->numa_node));
        }
}

int kdev_nvidia_backend_open(const struct kdev_nvidia_backend_options *opts,
                             struct kdev_nvidia_backend **out, struct kdev_err *err)
{
        *out = NULL;
        if (!opts->cfg->wanted)
                return 0;
        struct kdev_nvidia_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return kdev_err_set(err, ENOMEM, "out of memory");
        b->opts = *opts;
        if (!b->opts.rediscover_interval_ms)
                b->opts.rediscover_interval_ms = DEFAULT_REDISCOVER_MS;

        struct kdev_nvml_options nopts;
        struct kdev_nvml_discover_options dopts = {.flags = discover_flags(opts->cfg)};
        struct kdev_err nerr = {0}, why = {0};
        char nvml_path[PATH_MAX];
        int r = kdev_nvidia_nvml_options(opts->cfg, &nopts, nvml_path, sizeof(nvml_path), &why, &nerr);
        if (r >= 0)
                r = kdev_nvml_open(&nopts, &b->lib, &nerr);
        if (r < 0) {
                if (why.msg[0]) /* the search under the driver root, then by name */
                        kdev_err_wrap(&nerr, "%s; by name", why.msg);
                kdev_err_wrap(&nerr, "nvml init failed");
        } else {
                r = kdev_nvml_discover(b->lib, &dopts, &b->gpus, &nerr);
                if (r < 0 && strncmp(nerr.msg, "nvml init failed", 16) != 0)
                        kdev_err_wrap(&nerr, "GPU discovery failed");
        }
        if (r < 0) {
                kdev_nvml_close(b->lib);
                b->lib = NULL;
                if (opts->cfg->fail_on_init_error) {
                        free(b);
                        *err = nerr;
                        return -nerr.code;
                }
                kdev_log_warn("no NVIDIA GPUs for now, will retry discovery (failOnInitError is "
                              "false)",
                              "error", nerr.msg);
        } else {
                log_gpus(b->gpus);
        }

        struct kdev_gpu_set none = {0};
        struct kdev_nvidia_build_options bopts = {.warn = log_warning};
        r = kdev_nvidia_build(b->gpus ? b->gpus : &none, opts->cfg, &bopts, opts->set, err);
        if (r == 0)
                r = kdev_nvidia_apply_sharing(opts->set, opts->cfg, log_warning, NULL, err);
        if (r == 0 && opts->previous && b->gpus) {
                int carried = kdev_nvidia_carry_faulted(opts->set, opts->previous, b->gpus, err);
                r = carried < 0 ? carried : 0;
        }
        if (r == 0 && opts->previous && opts->keep_withdrawn) {
                int kept = kdev_nvidia_keep_withdrawn(opts->set, opts->previous,
                                                      opts->keep_withdrawn, opts->keep_arg, err);
                r = kept < 0 ? kept : 0;
        }
        if (r == 0 && b->gpus)
                r = kdev_nvidia_pref_attach(opts->set, b->gpus, share_policy(opts->cfg), err);
        if (r == 0)
                r = kdev_nvidia_attach_physical(opts->set, err);
        if (r == 0 && kdev_resource_set_index(opts->set) < 0)
                r = kdev_err_set(err, ENOMEM, "out of memory");
        if (r == 0 && b->gpus)
                r = write_cdi(b, err);
        if (r == 0)
                r = install_share(b, err);
        if (r < 0) {
                kdev_gpu_set_free(b->gpus);
                kdev_nvml_close(b->lib);
                kdev_file_guard_clear(&b->cdi_guard);
                kdev_file_guard_clear(&b->share_guard);
                free(b);
                return r;
        }
        *out = b;
        return 0;
}

static void on_health_notify(void *arg, const char *resource)
{
        struct kdev_nvidia_backend *b = arg;
        if (b->opts.notify)
                b->opts.notify(b->opts.notify_arg, resource);
}

static void on_reread(void *arg, const char *uuid)
{
        kdev_nvidia_inventory_watch_reread(((struct kdev_nvidia_backend *)arg)->watch, uuid);
}

static void on_inventory(void *arg, const char *why)
{
        struct kdev_nvidia_backend *b = arg;
        if (!b->stopping && b->opts.inventory_changed)
                b->opts.inventory_changed(b->opts.inventory_arg, why);
}

/* The inventory watch over the GPUs of |b| (when the daemon follows them). */
/* sharing.mps: the watch of the MPS daemons (mps.h), which also holds the
 * replicas Unhealthy until their daemon answers. KDEV_MPS_DIR (default
 * /mps: NVIDIA's chart mounts --mps-root there), KDEV_MPS_CONTROL_BIN,
 * KDEV_MPS_CHECK_INTERVAL_MS (default 250). */
static int start_mps(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        if (b->mps)
                return 0;
        const char *dir = getenv("KDEV_MPS_DIR"), *bin = getenv("KDEV_MPS_CONTROL_BIN");
        const char *iv = getenv("KDEV_MPS_CHECK_INTERVAL_MS");
        unsigned interval = iv && *iv ? (unsigned)strtoul(iv, NULL, 10) : 0;
        struct kdev_nvidia_mps_watch_options mo = {
                .loop = b->opts.loop,
                .set = b->opts.set,
                .root = dir && *dir ? dir : NULL,
                .control_bin = bin && *bin ? bin : NULL,
                .interval_ms = interval > 60000 ? 60000 : interval,
                .notify = on_health_notify,
                .notify_arg = b,
                .event = b->opts.health_event,
                .event_arg = b->opts.health_event_arg,
        };
        return kdev_nvidia_mps_watch_start(&mo, &b->mps, err);
}

static int start_watch(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        if (!b->opts.inventory_changed || !b->lib || b->watch)
                return 0;
        struct kdev_nvml_discover_options dopts = {.flags = discover_flags(b->opts.cfg)};
        struct kdev_nvidia_inventory_options io = {
                .lib = b->lib,
                .discover = &dopts,
                .gpus = b->gpus,
                .interval_ms = b->opts.rediscover_interval_ms,
                .changed = on_inventory,
                .arg = b,
        };
        b->watch = kdev_nvidia_inventory_watch_start(b->opts.loop, &io, err);
        return b->watch ? 0 : -1;
}

static int start_health(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        struct kdev_nvidia_health_options hopts = {
                .probe_interval_ms = (uint64_t)b->opts.cfg->probe_interval * 1000,
                .quiet_period_ms = (uint64_t)b->opts.cfg->quiet_period * 1000,
                .notify = on_health_notify,
                .notify_arg = b,
                .event = b->opts.health_event,
                .event_arg = b->opts.health_event_arg,
                .start_checks = true,
                .reread = on_reread,
                .reread_arg = b,
                .previous = b->opts.replaces ? b->opts.replaces->health : NULL,
        };
        struct kdev_nvidia_health *previous = b->opts.replaces ? b->opts.replaces->health : NULL;
        b->opts.replaces = NULL; /* borrowed until now */
        char desc[160];
        kdev_xid_policy_describe(&b->policy, desc, sizeof(desc));
        kdev_log_info("health checks", "policy", desc);
        b->health = kdev_nvidia_health_new(b->opts.loop, b->lib, b->opts.set, &b->policy, &hopts,
                                           err);
        if (!b->health)
                return -1;
        int r = kdev_nvidia_health_start(b->health, err);
        if (r < 0) {
                kdev_nvidia_health_stop(b->health, NULL, NULL);
                b->health = NULL;
        } else {
                /* registered now: what the monitor replaced saw until then */
                kdev_nvidia_health_take_over(b->health, previous);
        }
        return r;
}

/* Rediscovery found GPUs: rebuild nvidia.com/gpu in place. */
static void on_discovered(void *arg, struct kdev_nvml *lib, struct kdev_gpu_set *gpus)
{
        struct kdev_nvidia_backend *b = arg;
        kdev_nvidia_rediscover_stop(b->rediscover, NULL, NULL);
        b->rediscover = NULL;
        b->lib = lib;
        b->gpus = gpus;
        log_gpus(gpus);

        struct kdev_resource_set fresh = {0};
        struct kdev_nvidia_build_options bopts = {.warn = log_warning};
        struct kdev_err err = {0};
        if (kdev_nvidia_build(gpus, b->opts.cfg, &bopts, &fresh, &err) < 0 ||
            kdev_nvidia_apply_sharing(&fresh, b->opts.cfg, log_warning, NULL, &err) < 0 ||
            kdev_nvidia_pref_attach(&fresh, gpus, share_policy(b->opts.cfg), &err) < 0 ||
            kdev_nvidia_attach_physical(&fresh, &err) < 0) {
                kdev_resource_set_clear(&fresh);
                kdev_log_error("cannot build the NVIDIA resources after rediscovery", "error",
                               err.msg);
                return;
        }
        for (size_t i = 0; i < fresh.n_resources; i++) {
                struct kdev_resource *cur = find_resource(b->opts.set, fresh.resources[i].name);
                if (!cur) {
                        kdev_log_warn("rediscovered resource was not served from the start; "
                                      "restart kdev-plugin to serve it",
                                      "resource", fresh.resources[i].name);
                        continue;
                }
                /* Swap the devices (and their backend data) into the served
                 * resource; the old ones leave with |fresh|. */
                struct kdev_resource old = *cur;
                cur->devices = fresh.resources[i].devices;
                cur->n_devices = fresh.resources[i].n_devices;
                cur->ops = fresh.resources[i].ops;
                cur->ops_data = fresh.resources[i].ops_data;
                fresh.resources[i].devices = old.devices;
                fresh.resources[i].n_devices = old.n_devices;
                fresh.resources[i].ops = old.ops;
                fresh.resources[i].ops_data = old.ops_data;
                if (kdev_resource_index(cur) < 0)
                        kdev_log_warn("cannot index the rediscovered devices (out of memory); "
                                      "lookups by device ID stay linear",
                                      "resource", cur->name);
                kdev_log_info("NVIDIA driver appeared, serving its GPUs", "resource", cur->name,
                              KDEV_LOG_UINT("devices", cur->n_devices));
        }
        /* The physical devices follow their logical devices into the
         * served set. */
        if (kdev_physical_move(b->opts.set, &fresh) < 0) {
                /* they leave with |fresh|: no device may point at them */
                for (size_t i = 0; i < fresh.n_resources; i++) {
                        struct kdev_resource *cur =
                                find_resource(b->opts.set, fresh.resources[i].name);
                        for (size_t k = 0; cur && k < cur->n_devices; k++)
                                cur->devices[k].physical = NULL;
                }
                kdev_log_warn("cannot map the rediscovered GPUs to their devices", "error",
                              "out of memory");
        } else if (kdev_resource_set_link(b->opts.set, &err) < 0) {
                kdev_log_warn("cannot map the rediscovered GPUs to their devices", "error",
                              err.msg);
        }
        /* The CDI spec first: once kubelet hears of the devices it may
         * allocate them, and the runtime then needs the spec. */
        if (write_cdi(b, &err) < 0)
                kdev_log_error("cannot write the CDI spec", "error", err.msg);
        for (size_t i = 0; i < fresh.n_resources; i++) {
                if (b->opts.notify && find_resource(b->opts.set, fresh.resources[i].name))
                        b->opts.notify(b->opts.notify_arg, fresh.resources[i].name);
        }
        if (start_health(b, &err) < 0)
                kdev_log_error("health checks not started", "error", err.msg);
        if (start_watch(b, &err) < 0)
                kdev_log_error("GPU inventory watch not started", "error", err.msg);
        /* the MPS watch after the health monitor (which would take replicas
         * held Unhealthy for faulted GPUs), then the update that announces
         * the replicas whose daemon does not answer yet as Unhealthy */
        if (start_mps(b, &err) < 0)
                kdev_log_error("MPS daemon watch not started", "error", err.msg);
        for (size_t i = 0; b->mps && i < fresh.n_resources; i++) {
                if (b->opts.notify && find_resource(b->opts.set, fresh.resources[i].name))
                        b->opts.notify(b->opts.notify_arg, fresh.resources[i].name);
        }
        kdev_resource_set_clear(&fresh);
}

static void on_rediscover_retry(void *arg, const struct kdev_err *err, unsigned attempt)
{
        (void)arg;
        kdev_log_info("still no NVIDIA GPUs", KDEV_LOG_UINT("attempt", attempt), "error",
                      err->msg);
}

static void log_policy_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn("health check settings", "warning", msg);
}

int kdev_nvidia_backend_start(struct kdev_nvidia_backend *b, struct kdev_err *err)
{
        if (!b)
                return 0;
        int r = kdev_xid_policy_from_env(&b->policy, log_policy_warning, NULL, err);
        if (r < 0) {
                b->opts.replaces = NULL;
                return r;
        }
        if (b->lib) {
                r = start_health(b, err);
                r = r < 0 ? r : start_watch(b, err);
                return r < 0 ? r : start_mps(b, err);
        }
        b->opts.replaces = NULL; /* borrowed until now: no monitor yet */
        struct kdev_nvml_options nopts;
        char nvml_path[PATH_MAX];
        r = kdev_nvidia_nvml_options(b->opts.cfg, &nopts, nvml_path, sizeof(nvml_path), NULL, err);
        if (r < 0)
                return r;
        struct kdev_nvml_discover_options dopts = {.flags = discover_flags(b->opts.cfg)};
        struct kdev_nvidia_rediscover_options ropts = {
                .nvml = &nopts,
                .discover = &dopts,
                .interval_ms = b->opts.rediscover_interval_ms,
                .discovered = on_discovered,
                .retry = on_rediscover_retry,
                .arg = b,
        };
        b->rediscover = kdev_nvidia_rediscover_start(b->opts.loop, &ropts, err);
        return b->rediscover ? 0 : -1;
}

const struct kdev_gpu_set *kdev_nvidia_backend_gpus(const struct kdev_nvidia_backend *b)
{
        return b ? b->gpus : NULL;
}

const char *kdev_nvidia_backend_cdi_path(const struct kdev_nvidia_backend *b)
{
        return b && b->cdi_written ? b->cdi_path : NULL;
}

void kdev_nvidia_backend_disown_cdi(struct kdev_nvidia_backend *b)
{
        if (b)
                b->cdi_written = false;
}

bool kdev_nvidia_backend_cleared(const struct kdev_nvidia_backend *b, const char *id)
{
        if (!b)
                return false;
        if (kdev_nvidia_health_cleared(b->health, id))
                return true;
        /* a withdrawn device is Unhealthy because it was gone, not faulted */
        const struct kdev_resource_set *set = b->opts.set;
        const struct kdev_physical *p = kdev_physical_find(set, id);
        if (!p || p->n_logical == 0)
                return false;
        const struct kdev_resource *r = &set->resources[p->logical[0].resource];
        const struct kdev_nvidia_devinfo *in =
                kdev_nvidia_device_info(r, &r->devices[p->logical[0].device]);
        return in && in->withdrawn;
}

static void finish_stop(struct kdev_nvidia_backend *b)
{
        void (*done)(void *) = b->done;
        void *done_arg = b->done_arg;
        kdev_nvml_close(b->lib);
        kdev_gpu_set_free(b->gpus);
        kdev_xid_policy_clear(&b->policy);
        kdev_file_guard_clear(&b->cdi_guard);
        kdev_file_guard_clear(&b->share_guard);
        free(b);
        if (done)
                done(done_arg);
}

static void on_part_stopped(void *arg)
{
        struct kdev_nvidia_backend *b = arg;
        if (--b->pending == 0)
                finish_stop(b);
}

void kdev_nvidia_backend_stop(struct kdev_nvidia_backend *b, void (*done)(void *arg), void *arg)
{
        if (!b) {
                if (done)
                        done(arg);
                return;
        }
        b->stopping = true;
        b->done = done;
        b->done_arg = arg;
        if (b->cdi_written) {
                struct kdev_err err = {0};
                char aside[4096];
                int r = kdev_nvidia_cdi_remove_guarded(b->opts.cfg, &b->cdi_guard, aside,
                                                       sizeof(aside), &err);
                if (r < 0)
                        kdev_log_warn("cannot remove the CDI spec", "error", err.msg);
                else if (r == 2)
                        kdev_log_warn("state file changed by someone else: moved aside, not "
                                      "removed", "path", b->cdi_path, "aside", aside);
                else
                        kdev_log_info("removed CDI spec");
        }
        b->pending = 1; /* held until both stops are issued */
        if (b->health) {
                b->pending++;
                kdev_nvidia_health_stop(b->health, on_part_stopped, b);
                b->health = NULL;
        }
        if (b->watch) {
                b->pending++;
                kdev_nvidia_inventory_watch_stop(b->watch, on_part_stopped, b);
                b->watch = NULL;
        }
        if (b->mps) {
                b->pending++;
                kdev_nvidia_mps_watch_stop(b->mps, on_part_stopped, b);
                b->mps = NULL;
        }
        if (b->rediscover) {
                b->pending++;
                kdev_nvidia_rediscover_stop(b->rediscover, on_part_stopped, b);
                b->rediscover = NULL;
        }
        on_part_stopped(b);
}
