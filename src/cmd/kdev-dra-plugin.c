/* kdev-dra-plugin: the DRA kubelet plugin daemon for NVIDIA GPUs. Thin:
 * parses and validates flags and environment, then runs the DRA daemon
 * (src/dra/daemon.h: GPU discovery, ResourceSlice reconciles, health,
 * plugin registration, the DRAPlugin services, signals).
 *
 * Known limits (documented in --help too):
 *   - on SIGTERM/SIGINT the sockets are removed but the ResourceSlices are
 *     left in place (a restarted plugin reconciles them; a node that goes
 *     away takes them with it through the owner reference);
 *   - the GPU set is discovered once at start; health as dra/daemon.h says. */
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/log.h"
#include "common/version.h"
#include "dra/daemon.h"
#include "dra/plugin.h"
#include "metrics/http.h"
#include "nvidia/config.h"

#define PROG "kdev-dra-plugin"
#define DEFAULT_REGISTRY KDEV_DRA_DEFAULT_REGISTRY
#define DEFAULT_PLUGINS KDEV_DRA_DEFAULT_PLUGINS
#define DEFAULT_RESYNC_S 30.0
#define DEFAULT_CDI_HOOK KDEV_DRA_DEFAULT_CDI_HOOK

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
                "      --sysfs-root DIR            where bus/pci/devices/<bus id> is read\n"
                "                                  (NUMA node, PCIe root, DRM nodes;\n"
                "                                  default /sys)\n"
                "      --metrics-address HOST:PORT serve Prometheus metrics on GET\n"
                "                                  http://HOST:PORT/metrics (prepared claims,\n"
                "                                  claim operations and their latency, slice\n"
                "                                  publishes; e.g. 127.0.0.1:9401); off by\n"
                "                                  default, and an empty value keeps it off\n"
                "      --usage-interval S          seconds between GPU usage samples for the\n"
                "                                  metrics (dcgm-exporter's device series and\n"
                "                                  kdev's per-container ones, with the claims'\n"
                "                                  dra_* labels), 0..3600; needs\n"
                "                                  --metrics-address (default 0: off)\n"
                "      --pod-resources-socket PATH kubelet's PodResources API, asked at each\n"
                "                                  usage sample which container holds which\n"
                "                                  claim device (default /var/lib/kubelet/pod-\n"
                "                                  resources/kubelet.sock; \"\": none, every\n"
                "                                  use unattributed)\n"
                "      --pod-log-dir DIR           kubelet's log directory: the names in\n"
                "                                  DIR/pods and DIR/containers give the pod\n"
                "                                  UIDs and container IDs of the containers\n"
                "                                  PodResources names (default /var/log)\n"
                "      --shareable-gpus            publish each whole GPU shareable by several\n"
                "                                  claims (allowMultipleAllocations, capacity\n"
                "                                  memory and compute with request policies;\n"
                "                                  KEP-5075, Kubernetes 1.34+ with feature gate\n"
                "                                  DRAConsumableCapacity); each share claim is\n"
                "                                  limited by libkdev-share.so; needs\n"
                "                                  --resource-api-version v1 (default off)\n"
                "      --dynamic-mig               publish each GPU in MIG mode as partitionable\n"
                "                                  devices: the GPU and every possible MIG\n"
                "                                  placement, consuming its shared counters\n"
                "                                  (KEP-4815, Kubernetes 1.34+ with feature\n"
                "                                  gate DRAPartitionableDevices); a claim's\n"
                "                                  MIG device is made at prepare and\n"
                "                                  destroyed at unprepare. It changes the\n"
                "                                  GPUs' MIG layout: never on a GPU others\n"
                "                                  partition (default off)\n"
                "      --share-root DIR            share library and claim regions\n"
                "                                  (default " KDEV_DRA_DEFAULT_SHARE_ROOT ")\n"
                "      --share-library PATH        libkdev-share.so installed under\n"
                "                                  --share-root (default: next to the binary)\n"
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
                "  KDEV_NVIDIA_REDISCOVER_INTERVAL\n"
                "                            seconds between GPU inventory checks: GPUs added\n"
                "                            or gone, MIG layouts changed (default 30)\n"
                "  KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT\n"
                "                            in-cluster API server address (without --kubeconfig)\n"
                "  NVIDIA_CDI_HOOK_PATH      default of --nvidia-cdi-hook-path\n"
                "  KDEV_METRICS_ADDRESS      default of --metrics-address (\"\": off)\n"
                "  KDEV_USAGE_INTERVAL       default of --usage-interval\n"
                "  KDEV_POD_RESOURCES_SOCKET default of --pod-resources-socket\n"
                "  KDEV_POD_LOG_DIR          default of --pod-log-dir\n"
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

/* Whole seconds 1..KDEV_NVIDIA_HEALTH_SECONDS_MAX of flag --|flag|; prints
 * the usage error and returns false when |v| is not. */
static bool flag_seconds(const char *flag, const char *v)
{
        unsigned long long u;
        if (kdev_whole_seconds_parse(v, 1, KDEV_NVIDIA_HEALTH_SECONDS_MAX, &u))
                return true;
        fprintf(stderr, PROG ": invalid --%s \"%s\": want whole seconds between 1 "
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
        OPT_SYSFS_ROOT,
        OPT_PROBE,
        OPT_QUIET,
        OPT_METRICS_ADDRESS,
        OPT_USAGE_INTERVAL,
        OPT_POD_RESOURCES_SOCKET,
        OPT_POD_LOG_DIR,
        OPT_SHAREABLE_GPUS,
        OPT_DYNAMIC_MIG,
        OPT_SHARE_ROOT,
        OPT_SHARE_LIBRARY,
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
        {"sysfs-root", required_argument, NULL, OPT_SYSFS_ROOT},
        {"health-probe-interval", required_argument, NULL, OPT_PROBE},
        {"health-quiet-period", required_argument, NULL, OPT_QUIET},
        {"metrics-address", required_argument, NULL, OPT_METRICS_ADDRESS},
        {"usage-interval", required_argument, NULL, OPT_USAGE_INTERVAL},
        {"pod-resources-socket", required_argument, NULL, OPT_POD_RESOURCES_SOCKET},
        {"pod-log-dir", required_argument, NULL, OPT_POD_LOG_DIR},
        {"shareable-gpus", no_argument, NULL, OPT_SHAREABLE_GPUS},
        {"dynamic-mig", no_argument, NULL, OPT_DYNAMIC_MIG},
        {"share-root", required_argument, NULL, OPT_SHARE_ROOT},
        {"share-library", required_argument, NULL, OPT_SHARE_LIBRARY},
        {"log-level", required_argument, NULL, KDEV_FLAG_LOG_LEVEL},
        {"log-format", required_argument, NULL, KDEV_FLAG_LOG_FORMAT},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, KDEV_FLAG_VERSION},
        {NULL, 0, NULL, 0},
};

/* Flags and environment into |o|, |level| and |json|. Returns -1 to run,
 * or the exit status: 0 (--help, --version) or 2 (a usage error, printed). */
static int parse(int argc, char **argv, struct kdev_dra_daemon_options *o,
                 struct kdev_flag_common *common)
{
        int c, usage_status = -1;
        *o = (struct kdev_dra_daemon_options){
                .driver = KDEV_DRA_PLUGIN_DEFAULT_DRIVER,
                .node = getenv("NODE_NAME"),
                .registry = DEFAULT_REGISTRY,
                .cdi_dir = KDEV_DRA_DEFAULT_CDI_DIR,
                .api_version = "v1",
                .driver_root = "/",
                .cdi_hook = getenv("NVIDIA_CDI_HOOK_PATH"),
                .proc_root = "/proc",
                .sysfs_root = "/sys",
                .metrics_address = getenv("KDEV_METRICS_ADDRESS"),
                .podres_socket = getenv("KDEV_POD_RESOURCES_SOCKET"), /* NULL: the default */
                .pod_log_dir = getenv("KDEV_POD_LOG_DIR"),
        };
        const char *usage_s = getenv("KDEV_USAGE_INTERVAL");
        bool usage_from_env = usage_s && *usage_s;
        bool metrics_from_env = o->metrics_address && *o->metrics_address;
        while (usage_status < 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                switch (c) {
                case OPT_DRIVER:
                        o->driver = optarg;
                        break;
                case OPT_NODE:
                        o->node = optarg;
                        break;
                case OPT_REGISTRY:
                        o->registry = optarg;
                        break;
                case OPT_PLUGIN_DIR:
                        o->plugin_dir = optarg;
                        break;
                case OPT_CDI_DIR:
                        o->cdi_dir = optarg;
                        break;
                case OPT_KUBECONFIG:
                        o->kubeconfig = optarg;
                        break;
                case OPT_API_VERSION:
                        if (strcmp(optarg, "v1") != 0 && strcmp(optarg, "v1beta1") != 0) {
                                fprintf(stderr, PROG ": invalid --resource-api-version "
                                                "\"%s\": want v1 or v1beta1\n", optarg);
                                usage_status = 2;
                        }
                        o->api_version = optarg;
                        break;
                case OPT_DRIVER_ROOT:
                        o->driver_root = optarg;
                        break;
                case OPT_CDI_HOOK:
                        o->cdi_hook = optarg;
                        break;
                case OPT_PROC_ROOT:
                        o->proc_root = optarg;
                        break;
                case OPT_SYSFS_ROOT:
                        o->sysfs_root = optarg;
                        break;
                case OPT_PROBE:
                        o->probe_s = optarg;
                        if (!flag_seconds("health-probe-interval", optarg))
                                usage_status = 2;
                        break;
                case OPT_METRICS_ADDRESS:
                        o->metrics_address = optarg; /* "": off */
                        metrics_from_env = false;
                        break;
                case OPT_USAGE_INTERVAL:
                        usage_s = optarg;
                        usage_from_env = false;
                        break;
                case OPT_POD_RESOURCES_SOCKET:
                        o->podres_socket = optarg; /* "": none */
                        break;
                case OPT_POD_LOG_DIR:
                        o->pod_log_dir = optarg;
                        break;
                case OPT_SHAREABLE_GPUS:
                        o->shareable_gpus = true;
                        break;
                case OPT_DYNAMIC_MIG:
                        o->dynamic_mig = true;
                        break;
                case OPT_SHARE_ROOT:
                        o->share_root = optarg;
                        break;
                case OPT_SHARE_LIBRARY:
                        o->share_library = optarg;
                        break;
                case OPT_QUIET:
                        o->quiet_s = optarg;
                        if (!flag_seconds("health-quiet-period", optarg))
                                usage_status = 2;
                        break;
                default: {
                        int r = kdev_flag_common(PROG, c, optarg, common, usage);
                        if (r == 0)
                                return 0;
                        if (r != 1) /* -1: not a flag, getopt_long printed the error */
                                usage_status = 2;
                }
                }
        }
        usage_status = kdev_flag_no_operands(PROG, usage_status, argc, argv, optind);
        if (usage_status < 0 &&
            !kdev_metrics_address_flag_ok(PROG, o->metrics_address, metrics_from_env))
                usage_status = 2;
        unsigned long long us = 0;
        if (usage_status < 0 && usage_s && *usage_s &&
            !kdev_whole_seconds_parse(usage_s, 0, 3600, &us)) {
                fprintf(stderr, PROG ": invalid %s \"%s\": want whole seconds between 0 and "
                                "3600\n",
                        usage_from_env ? "KDEV_USAGE_INTERVAL" : "--usage-interval", usage_s);
                usage_status = 2;
        }
        o->usage_interval_s = (unsigned)us;
        /* allowMultipleAllocations and requestPolicy are served in
         * resource.k8s.io/v1 slices only (kdev's v1beta1 shape has neither) */
        if (usage_status < 0 && o->shareable_gpus && strcmp(o->api_version, "v1") != 0) {
                fprintf(stderr, PROG ": --shareable-gpus needs --resource-api-version v1 "
                                "(allowMultipleAllocations and capacity request policies are "
                                "published in resource.k8s.io/v1 ResourceSlices only), got "
                                "%s\n",
                        o->api_version);
                usage_status = 2;
        }
        if (usage_status < 0 && (!o->node || !*o->node)) {
                fprintf(stderr, PROG ": no node name: set --node-name or NODE_NAME\n");
                usage_status = 2;
        }
        if (usage_status < 0 && !kdev_dns_subdomain(o->node, 253)) {
                fprintf(stderr, PROG ": invalid node name \"%s\" (--node-name or "
                                "NODE_NAME): want a DNS subdomain of at most 253 characters "
                                "(lower-case letters, digits, '-' and '.')\n", o->node);
                usage_status = 2;
        }
        if (usage_status < 0 && !kdev_dns_subdomain(o->driver, 63)) {
                fprintf(stderr, PROG ": invalid --driver-name \"%s\": want a DNS "
                                "subdomain of at most 63 characters (lower-case letters, "
                                "digits, '-' and '.')\n", o->driver);
                usage_status = 2;
        }
        const struct kdev_flag_path paths[] = {
                {"plugins-registry", o->registry}, {"plugin-dir", o->plugin_dir},
                {"cdi-dir", o->cdi_dir},           {"kubeconfig", o->kubeconfig},
                {"driver-root", o->driver_root},   {"proc-root", o->proc_root},
                {"sysfs-root", o->sysfs_root}};
        if (usage_status < 0 &&
            !kdev_flag_paths_nonempty(PROG, paths, sizeof(paths) / sizeof(paths[0])))
                usage_status = 2;
        /* seconds between slice reconciles, 0 < s <= 86400 (fractions allowed) */
        const char *resync = getenv("KDEV_DRA_RESYNC_SECONDS");
        double s = DEFAULT_RESYNC_S;
        if (usage_status < 0 && resync && *resync && !kdev_seconds_parse(resync, 86400, &s)) {
                fprintf(stderr, PROG ": invalid KDEV_DRA_RESYNC_SECONDS \"%s\": want seconds "
                                "greater than 0 and at most 86400\n", resync);
                usage_status = 2;
        }
        o->resync_ms = (uint64_t)(s * 1000.0);
        if (o->resync_ms == 0)
                o->resync_ms = 1;
        /* seconds between GPU inventory checks, as kdev-plugin's */
        const char *rediscover = getenv("KDEV_NVIDIA_REDISCOVER_INTERVAL");
        double ri = 30;
        if (usage_status < 0 && rediscover && *rediscover &&
            (!kdev_seconds_parse(rediscover, 86400, &ri) || ri <= 0)) {
                fprintf(stderr, PROG ": invalid KDEV_NVIDIA_REDISCOVER_INTERVAL \"%s\": want "
                                "seconds greater than 0 and at most 86400\n", rediscover);
                usage_status = 2;
        }
        o->rediscover_ms = (uint64_t)(ri * 1000.0);
        if (o->rediscover_ms == 0)
                o->rediscover_ms = 1;
        return kdev_flag_finish(PROG, usage_status);
}

/* The effective configuration for the start-up line (common/version.h),
 * defaults resolved as the daemon resolves them (src/dra/daemon.c), in the
 * flags' terms:
 *   {"driverName","nodeName","pluginsRegistry","pluginDir","cdiDir",
 *    "kubeconfig" (null: in-cluster),"resourceAPIVersion","driverRoot",
 *    "nvidiaCDIHookPath","procRoot",
 *    "health":{"probeInterval","quietPeriod"} (seconds),
 *    "resyncSeconds" (KDEV_DRA_RESYNC_SECONDS),"metricsAddress" (null: off),
 *    "usageInterval" (seconds, 0: off),"shareableGPUs","shareRoot" (with
 *    shareableGPUs only),"dynamicMIG"}
 * Returns a malloc'ed compact JSON text, or NULL when out of memory. */
static char *config_json(const struct kdev_dra_daemon_options *o)
{
        char plugin_dir[4096];
        if (o->plugin_dir)
                snprintf(plugin_dir, sizeof(plugin_dir), "%s", o->plugin_dir);
        else
                snprintf(plugin_dir, sizeof(plugin_dir), "%s/%s", DEFAULT_PLUGINS, o->driver);
        json_t *health = json_pack(
                "{s:I,s:I}", "probeInterval",
                (json_int_t)(o->probe_s ? strtoull(o->probe_s, NULL, 10)
                                        : KDEV_NVIDIA_DEFAULT_PROBE_INTERVAL),
                "quietPeriod",
                (json_int_t)(o->quiet_s ? strtoull(o->quiet_s, NULL, 10)
                                        : KDEV_NVIDIA_DEFAULT_QUIET_PERIOD));
        json_t *root = json_pack(
                "{s:s,s:s,s:s,s:s,s:s,s:s?,s:s,s:s,s:s,s:s,s:o,s:f}", "driverName", o->driver,
                "nodeName", o->node, "pluginsRegistry", o->registry, "pluginDir", plugin_dir,
                "cdiDir", o->cdi_dir, "kubeconfig", o->kubeconfig, "resourceAPIVersion",
                o->api_version, "driverRoot", o->driver_root, "nvidiaCDIHookPath",
                o->cdi_hook && *o->cdi_hook ? o->cdi_hook : DEFAULT_CDI_HOOK, "procRoot",
                o->proc_root, "health", health, "resyncSeconds", (double)o->resync_ms / 1000.0);
        if (root &&
            (json_object_set_new(root, "metricsAddress",
                                 o->metrics_address && *o->metrics_address
                                         ? json_string(o->metrics_address)
                                         : json_null()) < 0 ||
             json_object_set_new(root, "usageInterval",
                                 json_integer((json_int_t)o->usage_interval_s)) < 0 ||
             json_object_set_new(root, "shareableGPUs", json_boolean(o->shareable_gpus)) < 0 ||
             json_object_set_new(root, "dynamicMIG", json_boolean(o->dynamic_mig)) < 0 ||
             (o->shareable_gpus &&
              json_object_set_new(root, "shareRoot",
                                  json_string(o->share_root ? o->share_root
                                                            : KDEV_DRA_DEFAULT_SHARE_ROOT)) < 0))) {
                json_decref(root);
                return NULL;
        }
        char *text = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(root);
        return text;
}

int main(int argc, char **argv)
{
        /* First, once for the whole process: a peer (kubelet, a client, the
         * API server) that went away makes write(2) fail with EPIPE instead of
         * killing the daemon with SIGPIPE (src/rpc/rpc.h). */
        signal(SIGPIPE, SIG_IGN);
        struct kdev_dra_daemon_options o;
        struct kdev_flag_common common = {.level = KDEV_LOG_INFO};
        int usage_status = parse(argc, argv, &o, &common);
        if (usage_status >= 0)
                return usage_status;
        kdev_log_setup(common.level, common.json);
        char *config = config_json(&o);
        if (!config) {
                kdev_log_error("cannot start", "error", "out of memory");
                return 1;
        }
        kdev_log_running_with_config(config);
        free(config);
        return kdev_dra_daemon_run(&o, NULL) < 0 ? 1 : 0;
}
