/* kdev-plugin: the device plugin daemon. Thin: parses flags and environment
 * and runs the device plugin daemon (src/daemon/dp_daemon.h: configuration,
 * discovery of generic /dev globs and NVIDIA GPUs, the plugin runtime,
 * labels, metrics, signals). */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/log.h"
#include "daemon/dp_daemon.h"
#include "daemon/mps_daemon.h"
#include "metrics/http.h"
#include "nvidia/config.h"
#include "plugin/runtime.h"

#define PROG "kdev-plugin"

extern char **environ;

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdev-plugin [--config FILE] [OPTIONS]\n"
                "       kdev-plugin mps-control-daemon [OPTIONS]   (see its --help)\n"
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
                "                                also --config-file, as NVIDIA's plugin; a\n"
                "                                file without a YAML document (empty, or\n"
                "                                comments only) means NVIDIA's defaults\n"
                "      --config-dir DIR          per-node configs: DIR holds named config files\n"
                "                                (file name = config name, e.g. a mounted\n"
                "                                ConfigMap); the node label\n"
                "                                nvidia.com/device-plugin.config picks one,\n"
                "                                applied live when it changes (NVIDIA's\n"
                "                                config-manager, built in); not with --config\n"
                "      --default-config NAME     with --config-dir: the config when the node\n"
                "                                has no label or the label names no config\n"
                "      --config-fallback-strategies LIST\n"
                "                                with --config-dir and no default config: the\n"
                "                                fallbacks in order, of named (the config\n"
                "                                \"default\"), single (the only config), empty\n"
                "                                (NVIDIA's defaults); default named,single\n"
                "      --config-node-label LABEL the node label that picks the config\n"
                "                                (default nvidia.com/device-plugin.config)\n"
                "      --node-name NAME          this node, for --config-dir (default\n"
                "                                $NODE_NAME)\n"
                "      --kubeconfig FILE         API server access for --config-dir (default\n"
                "                                $KUBECONFIG, else in-cluster)\n"
                "  -d, --device-plugin-dir DIR   kubelet's device-plugins directory\n"
                "                                (default " KDEV_DP_DEFAULT_DIR ")\n"
                "      --kubelet-socket PATH     kubelet's Registration socket (NVIDIA's flag;\n"
                "                                any file name, default DIR/kubelet.sock):\n"
                "                                registers there, registers again when it is\n"
                "                                re-created, and sets the device-plugins\n"
                "                                directory DIR to its directory\n"
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
                "      --pod-resources-socket PATH\n"
                "                                kubelet's PodResources API, asked at each\n"
                "                                usage sample which container holds which\n"
                "                                device (default /var/lib/kubelet/pod-\n"
                "                                resources/kubelet.sock; \"\": none, every\n"
                "                                use unattributed)\n"
                "      --pod-log-dir DIR         kubelet's log directory: the names in\n"
                "                                DIR/pods and DIR/containers give the pod UIDs\n"
                "                                and container IDs of the containers\n"
                "                                PodResources names (default /var/log)\n"
                "      --log-level LEVEL         debug, info, warn or error (default info);\n"
                "                                logs go to stderr, one line per event\n"
                "      --log-format FORMAT       text (key=value, default) or json (JSON lines)\n"
                "      --check                   load the config, discover the devices, print the\n"
                "                                resources the node would advertise (after MIG\n"
                "                                and time-slicing), exit 0, or 1 with the error\n"
                "      --check-config FILE       the same as --config FILE --check\n"
                "      --list-gpus               discover the NVIDIA GPUs (read-only, as --check),\n"
                "                                print one line per GPU as nvidia-smi's CSV\n"
                "                                query does: UUID, name, memory (MiB), PCI bus\n"
                "                                ID, minor number, MIG mode (Enabled, Disabled,\n"
                "                                [N/A]); exit 0, or 1 with the error\n"
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
                "  KDEV_CONFIG_DIR, CONFIG_FILE_SRCDIR\n"
                "                              default of --config-dir (NVIDIA's\n"
                "                              config-manager variable second)\n"
                "  KDEV_DEFAULT_CONFIG, DEFAULT_CONFIG\n"
                "                              default of --default-config\n"
                "  FALLBACK_STRATEGIES         default of --config-fallback-strategies\n"
                "  KDEV_CONFIG_NODE_LABEL, NODE_LABEL\n"
                "                              default of --config-node-label\n"
                "  NODE_NAME                   default of --node-name\n"
                "  KUBECONFIG                  default of --kubeconfig\n"
                "  KDEV_DEVICE_PLUGIN_DIR      default of --device-plugin-dir\n"
                "  KUBELET_SOCKET              default of --kubelet-socket (NVIDIA's variable)\n"
                "  KDEV_METRICS_ADDRESS        default of --metrics-address (\"\": off)\n"
                "  KDEV_POD_RESOURCES_SOCKET   default of --pod-resources-socket\n"
                "  KDEV_POD_LOG_DIR            default of --pod-log-dir\n"
                "  KDEV_NFD_FEATURES_FILE      default of --nfd-features-file\n"
                "  KDEV_NFD_MACHINE_TYPE_FILE  source of nvidia.com/gpu.machine (default\n"
                "                              /sys/class/dmi/id/product_name)\n"
                "  KDEV_NVIDIA_REDISCOVER_INTERVAL\n"
                "                              seconds between retries when the NVIDIA driver\n"
                "                              is absent at start (failOnInitError: false;\n"
                "                              default 30), and between GPU inventory checks\n"
                "                              (GPUs added or gone, MIG layout changes)\n"
                "  KDEV_NVIDIA_WITHDRAW_GRACE  seconds a GPU or MIG device that left the node\n"
                "                              stays advertised Unhealthy before it is dropped\n"
                "                              (default 300)\n"
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
                "    KDEV_PROC_ROOT (--proc-root) CDI_FEATURE_FLAGS CDI_DISABLE_HOOKS\n"
                "    KDEV_SHARE_ROOT (--share-root) KDEV_SHARE_LIBRARY (--share-library)\n"
                "    KDEV_USAGE_INTERVAL (--usage-interval)\n"
                "\n"
                "Files:\n"
                "  DIR/kubelet.sock                  kubelet's Registration socket (DIR is\n"
                "                                    --device-plugin-dir), or the\n"
                "                                    --kubelet-socket PATH (DIR its directory)\n"
                "  DIR/PREFIXRESOURCE.sock           one socket per resource, '/' in the name\n"
                "                                    replaced by '_' (kdev-nvidia.com_gpu.sock),\n"
                "                                    with a .lock file held while it is served\n"
                "  CDI-DIR/k8s.device-plugin.nvidia.com-gpu.json\n"
                "                                    CDI spec of the GPUs (cdi-annotations and\n"
                "                                    cdi-cri list strategies; removed at exit)\n"
                "  PROC-ROOT/driver/nvidia-caps/mig-minors  MIG capability device minors\n"
                "  SHARE-ROOT/lib/libkdev-share.so, SHARE-ROOT/ld.so.preload\n"
                "                                    isolated replicas: the library copy and\n"
                "                                    the preload file, installed at start\n"
                "  SHARE-ROOT/containers/ID/limits   one region per container of isolated\n"
                "                                    replicas; removed once it is gone\n"
                "\n"
                "Signals:\n"
                "  SIGHUP                      read the config again and apply it live: only\n"
                "                              the resources that changed are served and\n"
                "                              registered again, new ones start, gone ones\n"
                "                              stop; an invalid config is logged and the\n"
                "                              current one stays; nothing changed: serve and\n"
                "                              register every resource again\n"
                "  SIGTERM, SIGINT, SIGQUIT    stop cleanly: remove the sockets, exit 0\n"
                "\n"
                "Subcommand: kdev-plugin mps-control-daemon [OPTIONS] runs the MPS control\n"
                "daemons of sharing.mps; its options: kdev-plugin mps-control-daemon --help.\n"
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

enum {
        OPT_PREFIX = 256,
        OPT_ROOT,
        OPT_CHECK,
        OPT_KUBELET_SOCKET,
        OPT_CHECK_CONFIG,
        OPT_METRICS_ADDRESS,
        OPT_POD_RESOURCES_SOCKET,
        OPT_POD_LOG_DIR,
        OPT_NFD_FEATURES_FILE,
        OPT_LIST_GPUS,
        OPT_CONFIG_DIR,
        OPT_DEFAULT_CONFIG,
        OPT_FALLBACKS,
        OPT_NODE_LABEL,
        OPT_NODE_NAME,
        OPT_KUBECONFIG,
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
                {"pod-resources-socket", required_argument, NULL, OPT_POD_RESOURCES_SOCKET},
                {"pod-log-dir", required_argument, NULL, OPT_POD_LOG_DIR},
                {"nfd-features-file", required_argument, NULL, OPT_NFD_FEATURES_FILE},
                {"config-dir", required_argument, NULL, OPT_CONFIG_DIR},
                {"default-config", required_argument, NULL, OPT_DEFAULT_CONFIG},
                {"config-fallback-strategies", required_argument, NULL, OPT_FALLBACKS},
                {"config-node-label", required_argument, NULL, OPT_NODE_LABEL},
                {"node-name", required_argument, NULL, OPT_NODE_NAME},
                {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
                {"log-level", required_argument, NULL, KDEV_FLAG_LOG_LEVEL},
                {"log-format", required_argument, NULL, KDEV_FLAG_LOG_FORMAT},
                {"check", no_argument, NULL, OPT_CHECK},
                {"check-config", required_argument, NULL, OPT_CHECK_CONFIG},
                {"list-gpus", no_argument, NULL, OPT_LIST_GPUS},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, KDEV_FLAG_VERSION},
        };
        return kdev_nvidia_long_options(own, sizeof(own) / sizeof(own[0]), OPT_NVIDIA);
}

/* NVIDIA's --kubelet-socket / KUBELET_SOCKET: the path of kubelet's
 * Registration socket, any file name (NVIDIA dials it as given and watches
 * its directory, filepath.Dir, for its re-creation). kdev serves its own
 * sockets in that directory, which is where kubelet looks for the endpoint
 * it is told, so it becomes the device-plugins directory (as
 * --device-plugin-dir; --kubelet-socket wins over it). A path without '/' is
 * in the working directory. Sets *plugin_dir and *socket (static storage),
 * or prints the usage error and returns false (no file name: the path ends
 * in '/', or it is too long). */
static bool kubelet_socket_dir(const char *kubelet_socket, const char **plugin_dir,
                               const char **socket)
{
        static char kubelet_dir[4096], kubelet_path[4096];
        const char *slash = strrchr(kubelet_socket, '/');
        const char *base = slash ? slash + 1 : kubelet_socket;
        size_t n = !slash ? 1 : slash == kubelet_socket ? 1 : (size_t)(slash - kubelet_socket);
        while (slash && n > 1 && kubelet_socket[n - 1] == '/')
                n--; /* "a//kubelet.sock": directory "a" */
        if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
            n >= sizeof(kubelet_dir) ||
            n + 1 + strlen(base) >= sizeof(kubelet_path)) {
                fprintf(stderr, PROG ": --kubelet-socket \"%s\": want the path of a socket "
                                "file, e.g. " KDEV_DP_DEFAULT_DIR "/" KDEV_DP_KUBELET_SOCKET
                                "\n",
                        kubelet_socket);
                return false;
        }
        memcpy(kubelet_dir, slash ? kubelet_socket : ".", n);
        kubelet_dir[n] = '\0';
        size_t dl = strcmp(kubelet_dir, "/") == 0 ? 0 : n;
        memcpy(kubelet_path, kubelet_dir, dl);
        kubelet_path[dl] = '/';
        memcpy(kubelet_path + dl + 1, base, strlen(base) + 1);
        *plugin_dir = kubelet_dir;
        *socket = kubelet_path;
        return true;
}

/* The first of the environment variables |a|, |b| (may be NULL) that is set
 * and not empty, or NULL. */
static const char *env2(const char *a, const char *b)
{
        const char *v = getenv(a);
        if ((!v || !*v) && b)
                v = getenv(b);
        return v && *v ? v : NULL;
}

/* The NVIDIA flags given, in order, for the daemon to apply again at each
 * reload (kdev_dp_daemon_options.nv_flags). */
static struct kdev_dp_nv_flag nv_flags[256];

/* Flags and environment into |o| (NVIDIA flags into o->nv), |level| and
 * |json|. Returns -1 to run, or the exit status: 0 (--help, --version), 1
 * (out of memory) or 2 (a usage error, printed). */
static int parse(int argc, char **argv, struct kdev_dp_daemon_options *o,
                 struct kdev_flag_common *common)
{
        struct kdev_err err = {0};
        /* KDEV_CONFIG, or NVIDIA's CONFIG_FILE (its helm chart sets it). */
        o->config = getenv("KDEV_CONFIG");
        if (!o->config || !*o->config)
                o->config = getenv("CONFIG_FILE");
        if (o->config && !*o->config)
                o->config = NULL;
        o->dp.plugin_dir = getenv("KDEV_DEVICE_PLUGIN_DIR");
        const char *kubelet_socket = getenv("KUBELET_SOCKET");
        o->metrics_address = getenv("KDEV_METRICS_ADDRESS"); /* NULL/"": off */
        bool metrics_from_env = o->metrics_address != NULL;
        o->podres_socket = getenv("KDEV_POD_RESOURCES_SOCKET"); /* NULL: the default */
        o->pod_log_dir = getenv("KDEV_POD_LOG_DIR");
        o->nfd_file = getenv("KDEV_NFD_FEATURES_FILE");      /* NULL/"": off */
        o->machine_type_file = getenv("KDEV_NFD_MACHINE_TYPE_FILE");
        o->rediscover_interval = getenv("KDEV_NVIDIA_REDISCOVER_INTERVAL");
        o->withdraw_grace = getenv("KDEV_NVIDIA_WITHDRAW_GRACE");
        o->environ = environ;
        struct kdev_node_config_options *nc = &o->node_config;
        nc->dir = env2("KDEV_CONFIG_DIR", "CONFIG_FILE_SRCDIR");
        nc->default_name = env2("KDEV_DEFAULT_CONFIG", "DEFAULT_CONFIG");
        nc->fallbacks = env2("FALLBACK_STRATEGIES", NULL);
        nc->label = env2("KDEV_CONFIG_NODE_LABEL", "NODE_LABEL");
        nc->node_name = env2("NODE_NAME", NULL);
        nc->kubeconfig = env2("KUBECONFIG", NULL);
        bool config_flag = false;
        struct option *longopts = long_options();
        if (!longopts) {
                fprintf(stderr, PROG ": out of memory\n");
                return 1;
        }
        int c, usage_status = -1;
        while (usage_status < 0 && (c = getopt_long(argc, argv, "c:d:h", longopts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        o->config = optarg;
                        config_flag = true;
                        break;
                case OPT_CONFIG_DIR:
                        nc->dir = optarg;
                        break;
                case OPT_DEFAULT_CONFIG:
                        nc->default_name = optarg;
                        break;
                case OPT_FALLBACKS:
                        nc->fallbacks = optarg;
                        break;
                case OPT_NODE_LABEL:
                        nc->label = optarg;
                        break;
                case OPT_NODE_NAME:
                        nc->node_name = optarg;
                        break;
                case OPT_KUBECONFIG:
                        nc->kubeconfig = optarg;
                        break;
                case 'd':
                        o->dp.plugin_dir = optarg;
                        break;
                case OPT_PREFIX:
                        o->dp.socket_prefix = optarg;
                        break;
                case OPT_KUBELET_SOCKET:
                        kubelet_socket = optarg;
                        break;
                case OPT_ROOT:
                        o->generic_root = optarg;
                        break;
                case OPT_METRICS_ADDRESS:
                        o->metrics_address = optarg; /* "": off */
                        metrics_from_env = false;
                        break;
                case OPT_POD_RESOURCES_SOCKET:
                        o->podres_socket = optarg; /* "": none */
                        break;
                case OPT_POD_LOG_DIR:
                        o->pod_log_dir = optarg;
                        break;
                case OPT_NFD_FEATURES_FILE:
                        o->nfd_file = optarg;
                        break;
                case OPT_CHECK:
                        o->check = true;
                        break;
                case OPT_CHECK_CONFIG:
                        o->config = optarg;
                        config_flag = true;
                        o->check = true;
                        break;
                case OPT_LIST_GPUS:
                        o->check = true;
                        o->list_gpus = true;
                        break;
                default: {
                        int r = kdev_flag_common(PROG, c, optarg, common, usage);
                        if (r >= 0) {
                                if (r != 1)
                                        usage_status = r; /* 0: help or version */
                                break;
                        }
                        if (c >= OPT_NVIDIA) {
                                const char *name = kdev_nvidia_flags[c - OPT_NVIDIA].name;
                                if (kdev_nvidia_config_apply_flag(o->nv, name, optarg, &err) < 0) {
                                        fprintf(stderr, PROG ": %s\n", err.msg);
                                        usage_status = 2;
                                } else if (o->n_nv_flags == sizeof(nv_flags) / sizeof(nv_flags[0])) {
                                        fprintf(stderr, PROG ": too many NVIDIA flags\n");
                                        usage_status = 2;
                                } else {
                                        nv_flags[o->n_nv_flags++] =
                                                (struct kdev_dp_nv_flag){name, optarg};
                                        o->nv_flags = nv_flags;
                                }
                                break;
                        }
                        usage_status = 2; /* getopt_long printed the error */
                }
                }
        }
        /* --config-dir picks the file itself: a file given by flag is a
         * usage error, one given by environment (KDEV_CONFIG, CONFIG_FILE:
         * NVIDIA's chart sets it beside the config-manager's) gives way */
        if (usage_status < 0 && nc->dir && *nc->dir) {
                if (config_flag) {
                        fprintf(stderr, PROG ": --config and --config-dir exclude each other\n");
                        usage_status = 2;
                }
                o->config = NULL;
        } else {
                nc->dir = NULL;
        }
        if (usage_status < 0 && kubelet_socket && *kubelet_socket &&
            !kubelet_socket_dir(kubelet_socket, &o->dp.plugin_dir, &o->dp.kubelet_socket))
                usage_status = 2;
        /* A malformed metrics address is a usage error (a port in use or a host
         * name that does not resolve is found when listening: exit 1). */
        if (usage_status < 0 &&
            !kdev_metrics_address_flag_ok(PROG, o->metrics_address, metrics_from_env))
                usage_status = 2;
        usage_status = kdev_flag_no_operands(PROG, usage_status, argc, argv, optind);
        free(longopts);
        return kdev_flag_finish(PROG, usage_status);
}

int main(int argc, char **argv)
{
        /* First, once for the whole process: a peer (kubelet, a client) that
         * went away makes write(2) fail with EPIPE instead of killing the
         * daemon with SIGPIPE (src/rpc/rpc.h). */
        signal(SIGPIPE, SIG_IGN);
        /* libuv's thread pool runs only the usage samples (one at a time,
         * README "Usage metering"): one thread, not libuv's default four,
         * unless the environment says otherwise. Set before any thread
         * exists; libuv reads it when the pool first starts. */
        setenv("UV_THREADPOOL_SIZE", "1", 0);
        struct kdev_err err = {0};
        struct kdev_nvidia_config nv;
        if (kdev_nvidia_config_init(&nv, &err) < 0) {
                fprintf(stderr, PROG ": %s\n", err.msg);
                return 1;
        }
        if (argc > 1 && strcmp(argv[1], "mps-control-daemon") == 0) {
                int st = kdev_mps_daemon_main(argc - 1, argv + 1, &nv);
                kdev_nvidia_config_clear(&nv);
                return st;
        }
        struct kdev_dp_daemon_options o = {.nv = &nv};
        struct kdev_flag_common common = {.level = KDEV_LOG_INFO};
        int status = parse(argc, argv, &o, &common);
        if (status < 0) {
                kdev_log_setup(common.level, common.json);
                status = kdev_dp_daemon_run(&o, NULL) < 0 ? 1 : 0;
        }
        kdev_nvidia_config_clear(&nv);
        return status;
}
