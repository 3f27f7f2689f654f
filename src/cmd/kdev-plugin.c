/* kdev-plugin: the device plugin daemon. Thin: parses flags, loads the
 * configuration, discovers devices (generic /dev globs, NVIDIA GPUs) and hands
 * them to the plugin runtime. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "common/err.h"
#include "common/log.h"
#include "common/version.h"
#include "config/config.h"
#include "generic/generic.h"
#include "model/model.h"
#include "nvidia/backend.h"
#include "nvidia/config.h"
#include "nvidia/labels.h"
#include "nvidia/resources.h"
#include "metrics/http.h"
#include "metrics/plugin_metrics.h"
#include "nvml/loader.h"
#include "plugin/runtime.h"

extern char **environ;

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdev-plugin [--config FILE] [OPTIONS]\n"
                "\n"
                "Serves devices to kubelet through the device plugin API v1beta1: one socket\n"
                "per resource in the device-plugins directory, registered with kubelet.sock,\n"
                "registered again whenever kubelet restarts.\n"
                "\n"
                "Devices come from the config FILE: generic device nodes (section `generic`)\n"
                "and NVIDIA GPUs through NVML (nvidia.com/gpu; NVIDIA's device plugin config\n"
                "sections `flags`, `sharing`, `resources`, `imex`, and kdev's `health`).\n"
                "Without a config file kdev-plugin serves NVIDIA GPUs with NVIDIA's defaults.\n"
                "A file with only `generic` does not load NVML.\n"
                "\n"
                "Options:\n"
                "  -c, --config FILE             configuration file (YAML; see examples/);\n"
                "                                also --config-file, as NVIDIA's plugin\n"
                "  -d, --device-plugin-dir DIR   kubelet's device-plugins directory\n"
                "                                (default " KDEV_DP_DEFAULT_DIR ")\n"
                "      --kubelet-socket PATH     kubelet.sock's path (NVIDIA's flag): sets the\n"
                "                                device-plugins directory to its directory\n"
                "      --socket-prefix PREFIX    socket file name prefix (default \"kdev-\")\n"
                "      --root DIR                look up generic device nodes under DIR\n"
                "      --nfd-features-file PATH  write GPU node labels (GPU Feature Discovery's\n"
                "                                names) for Node Feature Discovery's local source\n"
                "                                to PATH, e.g. /etc/kubernetes/node-feature-\n"
                "                                discovery/features.d/kdev; off by default.\n"
                "                                A first write that fails stops the start;\n"
                "                                later failures are retried\n"
                "      --metrics-address HOST:PORT\n"
                "                                serve Prometheus metrics on GET\n"
                "                                http://HOST:PORT/metrics, on that address only\n"
                "                                (e.g. 127.0.0.1:9400, [::1]:9400, :9400 for\n"
                "                                every IPv4 address; PORT 0..65535); off by\n"
                "                                default, and an empty value keeps it off\n"
                "      --log-level LEVEL         debug, info, warn or error (default info);\n"
                "                                logs go to stderr, one line per event\n"
                "      --log-format FORMAT       text (key=value, default) or json (JSON lines)\n"
                "      --check                   load the config, discover the devices, print the\n"
                "                                resources the node would advertise (after MIG\n"
                "                                and time-slicing), exit 0, or 1 with the error\n"
                "      --check-config FILE       the same as --config FILE --check\n"
                "  -h, --help                    show this help\n"
                "      --version                 print the version\n"
                "\n"
                "NVIDIA options (flag > environment > config file > default, as NVIDIA's plugin):\n");
        for (const struct kdev_nvidia_flag *fl = kdev_nvidia_flags; fl->name; fl++) {
                char left[64];
                if (fl->is_bool)
                        snprintf(left, sizeof(left), "--%s[=BOOL]", fl->name);
                else
                        snprintf(left, sizeof(left), "--%s %s", fl->name, fl->metavar);
                fprintf(f, "      %-40s %s\n", left, fl->help);
        }
        fprintf(f,
                "\n"
                "Environment:\n"
                "  KDEV_CONFIG, CONFIG_FILE    default of --config (KDEV_CONFIG first)\n"
                "  KDEV_DEVICE_PLUGIN_DIR      default of --device-plugin-dir\n"
                "  KUBELET_SOCKET              default of --kubelet-socket (NVIDIA's variable)\n"
                "  KDEV_METRICS_ADDRESS        default of --metrics-address (\"\": off)\n"
                "  KDEV_NFD_FEATURES_FILE      default of --nfd-features-file\n"
                "  KDEV_NFD_MACHINE_TYPE_FILE  source of nvidia.com/gpu.machine (default\n"
                "                              /sys/class/dmi/id/product_name)\n"
                "  KDEV_NVIDIA_REDISCOVER_INTERVAL\n"
                "                              seconds between retries when the NVIDIA driver\n"
                "                              is absent at start (failOnInitError: false;\n"
                "                              default 30)\n"
                "  DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS\n"
                "                              XIDs ignored / monitored by the health checks\n"
                "                              (\"all\", \"xids\" or a list), as NVIDIA's plugin\n"
                "  NVIDIA options, each the default of the flag of the same name:\n"
                "    MIG_STRATEGY FAIL_ON_INIT_ERROR NVIDIA_DRIVER_ROOT NVIDIA_DEV_ROOT MPS_ROOT\n"
                "    GDRCOPY_ENABLED GDS_ENABLED MOFED_ENABLED DEVICE_DISCOVERY_STRATEGY\n"
                "    PASS_DEVICE_SPECS DEVICE_LIST_STRATEGY DEVICE_ID_STRATEGY\n"
                "    CDI_ANNOTATION_PREFIX NVIDIA_CDI_HOOK_PATH (or NVIDIA_CTK_PATH)\n"
                "    DRIVER_ROOT_CTR_PATH (or CONTAINER_DRIVER_ROOT)\n"
                "    SHARED_DEVICES_ALLOCATION_POLICY IMEX_CHANNEL_IDS IMEX_REQUIRED\n"
                "    KDEV_CDI_DIR (--cdi-dir) KDEV_HEALTH_PROBE_INTERVAL KDEV_HEALTH_QUIET_PERIOD\n"
                "    KDEV_PROC_ROOT (--proc-root)\n"
                "\n"
                "Files:\n"
                "  DIR/kubelet.sock                  kubelet's Registration socket (DIR is\n"
                "                                    --device-plugin-dir)\n"
                "  DIR/PREFIXRESOURCE.sock           one socket per resource, '/' in the name\n"
                "                                    replaced by '_' (kdev-nvidia.com_gpu.sock),\n"
                "                                    with a .lock file held while it is served\n"
                "  CDI-DIR/k8s.device-plugin.nvidia.com-gpu.json\n"
                "                                    CDI spec of the GPUs (cdi-annotations and\n"
                "                                    cdi-cri list strategies; removed at exit)\n"
                "  PROC-ROOT/driver/nvidia-caps/mig-minors  MIG capability device minors\n"
                "\n"
                "Signals:\n"
                "  SIGHUP                      serve and register every resource again\n"
                "  SIGTERM, SIGINT, SIGQUIT    stop cleanly: remove the sockets, exit 0\n"
                "\n"
                "Exit status: 0 stopped by a signal, --check succeeded, or --help/--version;\n"
                "1 configuration, discovery or serving failure (the error is logged, or\n"
                "printed by --check); 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdev-plugin --check-config examples/demo.yaml\n"
                "  kdev-plugin --config /etc/kdev/config.yaml --log-format json\n"
                "  kdev-plugin --mig-strategy mixed --device-list-strategy cdi-cri\n");
}

struct daemon {
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
};

static void on_runtime_stopped(void *arg)
{
        struct daemon *d = arg;
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
        struct daemon *d = arg;
        struct kdev_dp_runtime *rt = d->rt;
        d->rt = NULL;
        kdev_dp_runtime_stop(rt, on_runtime_stopped, d);
}

/* Builds the node labels file text of |gpus| under |nv| (*text, caller
 * frees; *n the number of labels; *invalid_mig whether the label builder
 * found the MIG layout invalid: nvidia.com/gpu.product <model>-MIG-INVALID).
 * Returns 0 or a negative errno with |err|. */
static int labels_text(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *nv,
                       char **text, size_t *n, bool *invalid_mig, struct kdev_err *err)
{
        struct kdev_nvidia_labels_options lo = {
                .machine_type_file = getenv("KDEV_NFD_MACHINE_TYPE_FILE"),
        };
        struct kdev_nvidia_labels l;
        *text = NULL;
        int r = kdev_nvidia_labels_build(gpus, nv, &lo, &l, err);
        const char *p = kdev_nvidia_labels_get(&l, "nvidia.com/gpu.product");
        size_t len = p ? strlen(p) : 0;
        *invalid_mig = len >= 12 && strcmp(p + len - 12, "-MIG-INVALID") == 0;
        if (r == 0 && !(*text = kdev_nvidia_labels_text(&l, true)))
                r = kdev_err_set(err, ENOMEM, "out of memory");
        *n = l.n;
        kdev_nvidia_labels_clear(&l);
        return r;
}

static void log_labels_written(const char *path, int r, size_t n_labels)
{
        char n[32];
        snprintf(n, sizeof(n), "%zu", n_labels);
        if (r > 0)
                kdev_log_info("wrote node labels", "path", path, "labels", n);
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
static int refresh_labels(struct daemon *d, bool force, struct kdev_err *err)
{
        const struct kdev_gpu_set *gpus = kdev_nvidia_backend_gpus(d->nvidia);
        /* while stopping the backend is gone: keep the file as it is */
        if (!d->nfd_file || d->stopping ||
            (!force && d->labels_written && gpus == d->labelled))
                return 0;
        size_t n = 0;
        bool invalid_mig;
        char *text = NULL;
        int r = labels_text(gpus, d->nv, &text, &n, &invalid_mig, err);
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
static void refresh_labels_logged(struct daemon *d, bool force)
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
static void label_invalid_mig(const char *path, const struct kdev_nvidia_config *nv)
{
        if (!path || nv->mig_strategy != KDEV_NVIDIA_MIG_SINGLE)
                return;
        struct kdev_nvml_options nopts = {.driver_root = nv->driver_root};
        struct kdev_nvml_discover_options dopts = {.flags = 0}; /* MIG devices, no links */
        struct kdev_nvml *lib = NULL;
        struct kdev_gpu_set *gpus = NULL;
        struct kdev_err err = {0};
        if (kdev_nvml_open(&nopts, &lib, &err) < 0 ||
            kdev_nvml_discover(lib, &dopts, &gpus, &err) < 0) {
                kdev_nvml_close(lib);
                return; /* no GPUs to judge: not a MIG layout failure */
        }
        size_t n = 0;
        bool invalid_mig = false;
        char *text = NULL;
        int r = labels_text(gpus, nv, &text, &n, &invalid_mig, &err);
        if (r == 0 && invalid_mig)
                r = kdev_nvidia_labels_write(path, text, &err);
        if (r < 0)
                kdev_log_error("cannot write the node labels", "path", path, "error", err.msg);
        else if (invalid_mig)
                log_labels_written(path, r, n);
        free(text);
        kdev_gpu_set_free(gpus);
        kdev_nvml_close(lib);
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct daemon *d = h->data;
        if (d->stopping)
                return;
        if (signum == SIGHUP) {
                kdev_log_info("SIGHUP: serving and registering every resource again");
                kdev_dp_runtime_restart(d->rt);
                refresh_labels_logged(d, true);
                return;
        }
        d->stopping = true;
        kdev_log_info("stopping", "signal", signum == SIGTERM ? "SIGTERM"
                                            : signum == SIGINT ? "SIGINT"
                                                               : "SIGQUIT");
        /* Health first (it notifies the runtime), then the runtime. */
        struct kdev_nvidia_backend *b = d->nvidia;
        d->nvidia = NULL;
        kdev_nvidia_backend_stop(b, on_backend_stopped, d);
}

static void on_devices_changed(void *arg, const char *resource)
{
        struct daemon *d = arg;
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

enum {
        OPT_PREFIX = 256,
        OPT_ROOT,
        OPT_LEVEL,
        OPT_FORMAT,
        OPT_CHECK,
        OPT_VERSION,
        OPT_KUBELET_SOCKET,
        OPT_CHECK_CONFIG,
        OPT_METRICS_ADDRESS,
        OPT_NFD_FEATURES_FILE,
        OPT_NVIDIA, /* OPT_NVIDIA + i: kdev_nvidia_flags[i] */
};

/* Builds the long option table: ours, then every NVIDIA flag. */
static struct option *long_options(void)
{
        static const struct option own[] = {
                {"config", required_argument, NULL, 'c'},
                {"config-file", required_argument, NULL, 'c'}, /* NVIDIA's name */
                {"kubelet-socket", required_argument, NULL, OPT_KUBELET_SOCKET},
                {"device-plugin-dir", required_argument, NULL, 'd'},
                {"socket-prefix", required_argument, NULL, OPT_PREFIX},
                {"root", required_argument, NULL, OPT_ROOT},
                {"metrics-address", required_argument, NULL, OPT_METRICS_ADDRESS},
                {"nfd-features-file", required_argument, NULL, OPT_NFD_FEATURES_FILE},
                {"log-level", required_argument, NULL, OPT_LEVEL},
                {"log-format", required_argument, NULL, OPT_FORMAT},
                {"check", no_argument, NULL, OPT_CHECK},
                {"check-config", required_argument, NULL, OPT_CHECK_CONFIG},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, OPT_VERSION},
        };
        size_t n_own = sizeof(own) / sizeof(own[0]), n_nv = 0;
        while (kdev_nvidia_flags[n_nv].name)
                n_nv++;
        struct option *o = calloc(n_own + n_nv + 1, sizeof(*o));
        if (!o)
                return NULL;
        memcpy(o, own, sizeof(own));
        for (size_t i = 0; i < n_nv; i++) {
                o[n_own + i].name = kdev_nvidia_flags[i].name;
                o[n_own + i].has_arg =
                        kdev_nvidia_flags[i].is_bool ? optional_argument : required_argument;
                o[n_own + i].val = OPT_NVIDIA + (int)i;
        }
        return o;
}

int main(int argc, char **argv)
{
        /* First, once for the whole process: a peer (kubelet, a client) that
         * went away makes write(2) fail with EPIPE instead of killing the
         * daemon with SIGPIPE (src/rpc/rpc.h). */
        signal(SIGPIPE, SIG_IGN);
        /* KDEV_CONFIG, or NVIDIA's CONFIG_FILE (its helm chart sets it). */
        const char *config = getenv("KDEV_CONFIG");
        if (!config || !*config)
                config = getenv("CONFIG_FILE");
        if (config && !*config)
                config = NULL;
        struct kdev_dp_options opts = {0};
        opts.plugin_dir = getenv("KDEV_DEVICE_PLUGIN_DIR");
        const char *kubelet_socket = getenv("KUBELET_SOCKET");
        const char *metrics_address = getenv("KDEV_METRICS_ADDRESS"); /* NULL/"": off */
        bool metrics_from_env = metrics_address != NULL;
        const char *nfd_file = getenv("KDEV_NFD_FEATURES_FILE");      /* NULL/"": off */
        struct kdev_generic_options gopts = {0};
        enum kdev_log_level level = KDEV_LOG_INFO;
        bool json = false, check = false;
        struct kdev_err err = {0};
        struct kdev_nvidia_config nv;
        if (kdev_nvidia_config_init(&nv, &err) < 0) {
                fprintf(stderr, "kdev-plugin: %s\n", err.msg);
                return 1;
        }
        struct option *longopts = long_options();
        if (!longopts) {
                fprintf(stderr, "kdev-plugin: out of memory\n");
                kdev_nvidia_config_clear(&nv);
                return 1;
        }

        int c, usage_status = -1;
        while (usage_status < 0 && (c = getopt_long(argc, argv, "c:d:h", longopts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        config = optarg;
                        break;
                case 'd':
                        opts.plugin_dir = optarg;
                        break;
                case OPT_PREFIX:
                        opts.socket_prefix = optarg;
                        break;
                case OPT_KUBELET_SOCKET:
                        kubelet_socket = optarg;
                        break;
                case OPT_ROOT:
                        gopts.root = optarg;
                        break;
                case OPT_METRICS_ADDRESS:
                        metrics_address = optarg; /* "": off */
                        metrics_from_env = false;
                        break;
                case OPT_NFD_FEATURES_FILE:
                        nfd_file = optarg;
                        break;
                case OPT_LEVEL:
                        if (kdev_log_level_parse(optarg, &level) < 0) {
                                fprintf(stderr, "kdev-plugin: invalid --log-level \"%s\": want debug, "
                                                "info, warn or error\n", optarg);
                                usage_status = 2;
                        }
                        break;
                case OPT_FORMAT:
                        if (kdev_log_format_parse(optarg, &json) < 0) {
                                fprintf(stderr, "kdev-plugin: invalid --log-format \"%s\": want "
                                                KDEV_LOG_FORMAT_VALUES "\n", optarg);
                                usage_status = 2;
                        }
                        break;
                case OPT_CHECK:
                        check = true;
                        break;
                case OPT_CHECK_CONFIG:
                        config = optarg;
                        check = true;
                        break;
                case 'h':
                        usage(stdout);
                        usage_status = 0;
                        break;
                case OPT_VERSION:
                        printf("kdev-plugin %s\n", KDEV_VERSION);
                        usage_status = 0;
                        break;
                default:
                        if (c >= OPT_NVIDIA) {
                                const char *name = kdev_nvidia_flags[c - OPT_NVIDIA].name;
                                if (kdev_nvidia_config_apply_flag(&nv, name, optarg, &err) < 0) {
                                        fprintf(stderr, "kdev-plugin: %s\n", err.msg);
                                        usage_status = 2;
                                }
                                break;
                        }
                        usage_status = 2; /* getopt_long printed the error */
                }
        }
        /* NVIDIA's --kubelet-socket / KUBELET_SOCKET: kubelet.sock in the
         * device-plugins directory (kdev serves its sockets next to it). */
        static char kubelet_dir[4096];
        if (usage_status < 0 && kubelet_socket && *kubelet_socket) {
                const char *slash = strrchr(kubelet_socket, '/');
                if (!slash || strcmp(slash + 1, KDEV_DP_KUBELET_SOCKET) != 0 ||
                    (size_t)(slash - kubelet_socket) >= sizeof(kubelet_dir)) {
                        fprintf(stderr, "kdev-plugin: --kubelet-socket \"%s\": kdev needs a path "
                                        "ending in /" KDEV_DP_KUBELET_SOCKET " (use "
                                        "--device-plugin-dir for its directory)\n",
                                kubelet_socket);
                        usage_status = 2;
                } else {
                        size_t n = slash == kubelet_socket ? 1 : (size_t)(slash - kubelet_socket);
                        memcpy(kubelet_dir, kubelet_socket, n);
                        kubelet_dir[n] = '\0';
                        opts.plugin_dir = kubelet_dir;
                }
        }
        /* A malformed metrics address is a usage error (a port in use or a host
         * name that does not resolve is found when listening: exit 1). */
        if (usage_status < 0 && metrics_address && *metrics_address &&
            !kdev_metrics_address_valid(metrics_address)) {
                fprintf(stderr, "kdev-plugin: invalid %s \"%s\": want " KDEV_METRICS_ADDRESS_FORM
                                "\n",
                        metrics_from_env ? "KDEV_METRICS_ADDRESS" : "--metrics-address",
                        metrics_address);
                usage_status = 2;
        }
        if (usage_status < 0 && optind < argc) {
                fprintf(stderr, "kdev-plugin: unexpected argument \"%s\"\n", argv[optind]);
                usage_status = 2;
        }
        free(longopts);
        if (usage_status == 2)
                fprintf(stderr, "Run 'kdev-plugin --help' for the options.\n");
        if (usage_status >= 0) {
                kdev_nvidia_config_clear(&nv);
                return usage_status;
        }
        kdev_log_setup(level, json);
        gopts.warn = on_discovery_warning;

        struct kdev_generic_config *cfg = NULL;
        struct kdev_resource_set set = {0};
        struct daemon d = {0};
        int status = 1;
        bool loop_ready = false;
        /* kdev's config file: `version`, then each backend's sections */
        struct kdev_config_root root;
        struct kdev_config_sections ext;
        kdev_config_root_init(&root);
        kdev_nvidia_config_sections(&nv, &ext);
        if (kdev_nvidia_config_apply_env(&nv, environ, &err) < 0 ||
            (config && (kdev_generic_config_register(&root, config, &cfg, &err) < 0 ||
                        kdev_config_register(&root, &ext, &err) < 0 ||
                        kdev_config_load(&root, config, &err) < 0)) ||
            kdev_nvidia_config_finish(&nv, config != NULL, &err) < 0 ||
            (cfg && kdev_generic_discover(cfg, &gopts, &set, &err) < 0)) {
                goto out; /* logged below as "cannot start" */
        }
        for (size_t i = 0; i < nv.n_warnings; i++)
                kdev_log_warn("configuration", "warning", nv.warnings[i]);

        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_err_set(&err, -r, "cannot start the event loop: %s", uv_strerror(r));
                goto out;
        }
        loop_ready = true;
        struct kdev_nvidia_backend_options bopts = {
                .loop = &d.loop,
                .cfg = &nv,
                .set = &set,
                .notify = on_devices_changed,
                .notify_arg = &d,
                .skip_cdi = check,
        };
        const char *interval = getenv("KDEV_NVIDIA_REDISCOVER_INTERVAL");
        if (interval && *interval) {
                char *end = NULL;
                double sec = strtod(interval, &end);
                if (*end || !(sec > 0 && sec <= 86400)) {
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
                        label_invalid_mig(nfd_file && *nfd_file ? nfd_file : NULL, &nv);
                goto out;
        }
        d.rt = kdev_dp_runtime_new(&d.loop, &opts, &err);
        if (!d.rt)
                goto out;
        for (size_t i = 0; i < set.n_resources; i++) {
                char count[32];
                snprintf(count, sizeof(count), "%zu", set.resources[i].n_devices);
                kdev_log_info("resource", "resource", set.resources[i].name, "devices", count);
                /* also for --check: names, socket paths, 4 MiB message limit */
                if (kdev_dp_runtime_add_resource(d.rt, &set.resources[i], &err) < 0)
                        goto out;
        }
        if (check) {
                print_devices(&set);
                status = 0;
                goto out;
        }
        /* The node labels before anything registers: a file that cannot be
         * written at all (no such directory, not writable) stops the start,
         * like an unwritable --cdi-dir. */
        d.nfd_file = nfd_file && *nfd_file ? nfd_file : NULL;
        d.nv = &nv;
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
                char port[16];
                snprintf(port, sizeof(port), "%u", kdev_plugin_metrics_port(d.metrics));
                kdev_log_info("serving metrics", "address", metrics_address, "port", port,
                              "path", "/metrics");
        }
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
        kdev_nvidia_config_clear(&nv);
        return status;
}
