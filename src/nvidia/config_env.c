/* NVIDIA backend configuration: environment variables and command-line flags
 * (see config.h), applied through kdev_nvcfg_set_text (config.c). */
#include "nvidia/config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "nvidia/config_internal.h"

/* --- environment ----------------------------------------------------------------- */

static const struct {
        enum kdev_nvidia_opt opt;
        const char *names[2];
} env_table[] = {
        {KDEV_NVIDIA_OPT_MIG_STRATEGY, {"MIG_STRATEGY", NULL}},
        {KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR, {"FAIL_ON_INIT_ERROR", NULL}},
        {KDEV_NVIDIA_OPT_DRIVER_ROOT, {"NVIDIA_DRIVER_ROOT", NULL}},
        {KDEV_NVIDIA_OPT_DEV_ROOT, {"NVIDIA_DEV_ROOT", NULL}},
        {KDEV_NVIDIA_OPT_MPS_ROOT, {"MPS_ROOT", NULL}},
        {KDEV_NVIDIA_OPT_GDRCOPY, {"GDRCOPY_ENABLED", NULL}},
        {KDEV_NVIDIA_OPT_GDS, {"GDS_ENABLED", NULL}},
        {KDEV_NVIDIA_OPT_MOFED, {"MOFED_ENABLED", NULL}},
        {KDEV_NVIDIA_OPT_DISCOVERY, {"DEVICE_DISCOVERY_STRATEGY", NULL}},
        {KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS, {"PASS_DEVICE_SPECS", NULL}},
        {KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY, {"DEVICE_LIST_STRATEGY", NULL}},
        {KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY, {"DEVICE_ID_STRATEGY", NULL}},
        {KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX, {"CDI_ANNOTATION_PREFIX", NULL}},
        {KDEV_NVIDIA_OPT_CTK_PATH, {"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
        {KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT, {"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
        {KDEV_NVIDIA_OPT_SHARED_POLICY, {"SHARED_DEVICES_ALLOCATION_POLICY", NULL}},
        {KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS, {"IMEX_CHANNEL_IDS", NULL}},
        {KDEV_NVIDIA_OPT_IMEX_REQUIRED, {"IMEX_REQUIRED", NULL}},
        {KDEV_NVIDIA_OPT_CDI_DIR, {"KDEV_CDI_DIR", NULL}},
        {KDEV_NVIDIA_OPT_PROBE_INTERVAL, {"KDEV_HEALTH_PROBE_INTERVAL", NULL}},
        {KDEV_NVIDIA_OPT_QUIET_PERIOD, {"KDEV_HEALTH_QUIET_PERIOD", NULL}},
        {KDEV_NVIDIA_OPT_PROC_ROOT, {"KDEV_PROC_ROOT", NULL}},
        {KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS, {"CDI_FEATURE_FLAGS", NULL}},
        {KDEV_NVIDIA_OPT_CDI_DISABLE_HOOKS, {"CDI_DISABLE_HOOKS", NULL}},
        {KDEV_NVIDIA_OPT_SHARE_ROOT, {"KDEV_SHARE_ROOT", NULL}},
        {KDEV_NVIDIA_OPT_SHARE_LIBRARY, {"KDEV_SHARE_LIBRARY", NULL}},
        {KDEV_NVIDIA_OPT_USAGE_INTERVAL, {"KDEV_USAGE_INTERVAL", NULL}},
};

static const char *env_get(char *const *envp, const char *name)
{
        size_t n = strlen(name);
        for (char *const *e = envp; e && *e; e++) {
                if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
                        return *e + n + 1;
        }
        return NULL;
}

int kdev_nvidia_config_apply_env(struct kdev_nvidia_config *cfg, char *const *envp,
                                 struct kdev_err *err)
{
        for (size_t i = 0; i < sizeof(env_table) / sizeof(env_table[0]); i++) {
                enum kdev_nvidia_opt o = env_table[i].opt;
                const char *name = NULL, *v = NULL;
                for (size_t k = 0; k < 2 && env_table[i].names[k] && !v; k++) {
                        name = env_table[i].names[k];
                        v = env_get(envp, name);
                }
                if (!v)
                        continue;
                bool blank = v[0] == '\0';
                if (blank && (kdev_nvcfg_is_bool_opt(o) ||
                              o == KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY ||
                              o == KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS ||
                              o == KDEV_NVIDIA_OPT_PROBE_INTERVAL ||
                              o == KDEV_NVIDIA_OPT_QUIET_PERIOD ||
                              o == KDEV_NVIDIA_OPT_USAGE_INTERVAL))
                        continue;
                char msg[KDEV_NVCFG_MSG_MAX];
                int rc = kdev_nvcfg_set_text(cfg, o, KDEV_NVIDIA_SRC_ENV, v, msg);
                if (rc == -ENOMEM)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                if (rc < 0)
                        return kdev_err_set(err, -rc, "%s: %s", name, msg);
        }
        return 0;
}

/* --- command-line flags ---------------------------------------------------------- */

const struct kdev_nvidia_flag kdev_nvidia_flags[] = {
        {"mig-strategy", false, "STRATEGY",
         "MIG strategy: none, single or mixed (default none)", KDEV_NVIDIA_OPT_MIG_STRATEGY},
        {"fail-on-init-error", true, NULL,
         "exit when NVML cannot be initialised (default true)",
         KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR},
        {"driver-root", false, "DIR", "root of the NVIDIA driver installation (default /)",
         KDEV_NVIDIA_OPT_DRIVER_ROOT},
        {"nvidia-driver-root", false, "DIR", "alias of --driver-root",
         KDEV_NVIDIA_OPT_DRIVER_ROOT},
        {"dev-root", false, "DIR", "root of the NVIDIA device nodes (default: the driver root)",
         KDEV_NVIDIA_OPT_DEV_ROOT},
        {"nvidia-dev-root", false, "DIR", "alias of --dev-root", KDEV_NVIDIA_OPT_DEV_ROOT},
        {"mps-root", false, "DIR", "MPS root directory on the host", KDEV_NVIDIA_OPT_MPS_ROOT},
        {"gdrcopy-enabled", true, NULL, "give containers GDRCopy support",
         KDEV_NVIDIA_OPT_GDRCOPY},
        {"gds-enabled", true, NULL, "give containers GPUDirect Storage support",
         KDEV_NVIDIA_OPT_GDS},
        {"mofed-enabled", true, NULL, "give containers MOFED support", KDEV_NVIDIA_OPT_MOFED},
        {"device-discovery-strategy", false, "STRATEGY", "auto, nvml or tegra (default auto)",
         KDEV_NVIDIA_OPT_DISCOVERY},
        {"pass-device-specs", true, NULL, "pass the device nodes in Allocate (default false)",
         KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS},
        {"device-list-strategy", false, "LIST",
         "envvar, volume-mounts, cdi-annotations, cdi-cri (comma-separated; default envvar)",
         KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY},
        {"device-id-strategy", false, "STRATEGY", "uuid or index (default uuid)",
         KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY},
        {"cdi-annotation-prefix", false, "PREFIX", "CDI annotation key prefix (default cdi.k8s.io/)",
         KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX},
        {"nvidia-cdi-hook-path", false, "PATH",
         "nvidia-cdi-hook path for CDI specs (default /usr/bin/nvidia-ctk)",
         KDEV_NVIDIA_OPT_CTK_PATH},
        {"nvidia-ctk-path", false, "PATH", "alias of --nvidia-cdi-hook-path",
         KDEV_NVIDIA_OPT_CTK_PATH},
        {"driver-root-ctr-path", false, "DIR",
         "driver root as mounted in the plugin's container (default /driver-root)",
         KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT},
        {"container-driver-root", false, "DIR", "alias of --driver-root-ctr-path",
         KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT},
        {"shared-devices-allocation-policy", false, "POLICY",
         "distributed or packed (default distributed)", KDEV_NVIDIA_OPT_SHARED_POLICY},
        {"imex-channel-ids", false, "IDS", "IMEX channels to inject: empty or 0",
         KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS},
        {"imex-required", true, NULL, "fail when the IMEX channels are missing",
         KDEV_NVIDIA_OPT_IMEX_REQUIRED},
        {"cdi-dir", false, "DIR", "CDI spec directory (default /var/run/cdi)",
         KDEV_NVIDIA_OPT_CDI_DIR},
        {"health-probe-interval", false, "SECONDS",
         "probe interval of unhealthy GPUs (default 10)", KDEV_NVIDIA_OPT_PROBE_INTERVAL},
        {"health-quiet-period", false, "SECONDS",
         "time without critical XID before a GPU is healthy again (default 60)",
         KDEV_NVIDIA_OPT_QUIET_PERIOD},
        {"proc-root", false, "DIR",
         "where driver/nvidia-caps/mig-minors and processes' cgroups are read (default /proc)",
         KDEV_NVIDIA_OPT_PROC_ROOT},
        {"cdi-feature-flags", false, "LIST",
         "nvcdi feature flags for the CDI spec (comma-separated; default none)",
         KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS},
        {"cdi-disable-hooks", false, "LIST",
         "CDI hooks to leave out of the CDI spec, or all (comma-separated; default none)",
         KDEV_NVIDIA_OPT_CDI_DISABLE_HOOKS},
        {"share-root", false, "DIR",
         "host directory of isolated replicas' shares (default /var/lib/kdev/share)",
         KDEV_NVIDIA_OPT_SHARE_ROOT},
        {"share-library", false, "PATH",
         "libkdev-share.so installed for isolated replicas (default: next to kdev-plugin)",
         KDEV_NVIDIA_OPT_SHARE_LIBRARY},
        {"usage-interval", false, "SECONDS",
         "seconds between GPU usage samples for the metrics, 0..3600 (default 0: off)",
         KDEV_NVIDIA_OPT_USAGE_INTERVAL},
        {NULL, false, NULL, NULL, KDEV_NVIDIA_OPT_COUNT},
};

int kdev_nvidia_config_apply_flag(struct kdev_nvidia_config *cfg, const char *name,
                                  const char *value, struct kdev_err *err)
{
        const struct kdev_nvidia_flag *f = kdev_nvidia_flags;
        while (f->name && strcmp(f->name, name) != 0)
                f++;
        if (!f->name)
                return kdev_err_set(err, ENOENT, "unknown flag --%s", name);
        if (!value) {
                if (!f->is_bool)
                        return kdev_err_set(err, EINVAL, "--%s: a value is required", name);
                value = "true";
        }
        char msg[KDEV_NVCFG_MSG_MAX];
        int rc = kdev_nvcfg_set_text(cfg, f->opt, KDEV_NVIDIA_SRC_FLAG, value, msg);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_err_set(err, -rc, "--%s: %s", name, msg);
        cfg->flag_given = true;
        return 0;
}

struct option *kdev_nvidia_long_options(const struct option *own, size_t n_own, int first_val)
{
        size_t n_nv = 0;
        while (kdev_nvidia_flags[n_nv].name)
                n_nv++;
        struct option *o = calloc(n_own + n_nv + 1, sizeof(*o));
        if (!o)
                return NULL;
        memcpy(o, own, n_own * sizeof(*own));
        for (size_t i = 0; i < n_nv; i++) {
                o[n_own + i].name = kdev_nvidia_flags[i].name;
                o[n_own + i].has_arg =
                        kdev_nvidia_flags[i].is_bool ? optional_argument : required_argument;
                o[n_own + i].val = first_val + (int)i;
        }
        return o;
}
