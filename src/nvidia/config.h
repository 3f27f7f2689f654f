/* NVIDIA backend configuration: NVIDIA device plugin v1 settings (config
 * file sections `flags`, `resources`, `sharing`, `imex`), kdev's own `health`
 * section, environment variables and command-line flags.
 *
 * Keys, defaults, environment variables and flag names are those of NVIDIA's
 * k8s-device-plugin v0.20.0
 * (api/config/v1/{config,flags,strategy,imex,replicas}.go and
 * cmd/nvidia-device-plugin/main.go). Differences, on purpose:
 *   - the file is read strictly (config/yamlcfg.h): unknown keys, repeated
 *     keys, wrong types and bad values are errors with file:line:column and
 *     the key path; NVIDIA ignores unknown keys silently;
 *   - values are checked when read (NVIDIA checks some at start only);
 *   - a plain, untagged YAML null ("key:" with no value, ~, null) counts as
 *     the key being absent, as NVIDIA's pointer fields read it, for `flags`,
 *     `resources` and `imex` themselves (still an NVIDIA section) and every
 *     key under flags, flags.plugin, flags.gfd, imex and resources; elsewhere
 *     (sharing.timeSlicing: null, replicas: null, ...) null stays an error;
 *   - booleans in the file are the plain scalars true/false/yes/no/on/off
 *     (any of the three spellings "true", "True", "TRUE"); env and flag
 *     values follow Go's strconv.ParseBool as urfave/cli does: 1, t, T,
 *     TRUE, true, True, 0, f, F, FALSE, false, False.
 *
 * Precedence: command-line flag > environment variable > config file >
 * default, whatever the order of the calls: every option remembers where its
 * value came from (enum kdev_nvidia_src) and a source never overrides a
 * stronger one. A repeated list flag (--device-list-strategy,
 * --imex-channel-ids) adds to the values of earlier flags, as urfave/cli's
 * slice flags do.
 *
 * Whether NVIDIA GPUs are wanted at all (cfg->wanted, set by
 * kdev_nvidia_config_finish): yes when no config file is used, when the file
 * has at least one NVIDIA section (`flags`, `resources`, `sharing`, `imex`,
 * `health`, `isolation`; an empty `flags: {}` is enough), or when an NVIDIA command-line
 * flag was given. A file holding only `version` and `generic` does not want
 * NVIDIA GPUs, so NVML is then neither loaded nor required. Environment
 * variables never switch NVIDIA on (a DaemonSet may set them for every node).
 */
#ifndef KDEV_NVIDIA_CONFIG_H
#define KDEV_NVIDIA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "config/config.h"

/* Defaults (NVIDIA's, and kdev's own for the last six). */
#define KDEV_NVIDIA_DEFAULT_DRIVER_ROOT "/"
#define KDEV_NVIDIA_DEFAULT_CDI_ANNOTATION_PREFIX "cdi.k8s.io/"
#define KDEV_NVIDIA_DEFAULT_CTK_PATH "/usr/bin/nvidia-ctk"
#define KDEV_NVIDIA_DEFAULT_CONTAINER_DRIVER_ROOT "/driver-root"
#define KDEV_NVIDIA_DEFAULT_CDI_DIR "/var/run/cdi"
#define KDEV_NVIDIA_DEFAULT_PROC_ROOT "/proc"
#define KDEV_NVIDIA_DEFAULT_SHARE_ROOT "/var/lib/kdev/share"
#define KDEV_NVIDIA_DEFAULT_PROBE_INTERVAL 10 /* seconds */
#define KDEV_NVIDIA_DEFAULT_QUIET_PERIOD 60   /* seconds */
#define KDEV_NVIDIA_HEALTH_SECONDS_MAX 86400
/* Largest usage sampling interval (seconds; usage.interval, --usage-interval). */
#define KDEV_NVIDIA_USAGE_SECONDS_MAX 3600

enum kdev_nvidia_mig_strategy {
        KDEV_NVIDIA_MIG_NONE,
        KDEV_NVIDIA_MIG_SINGLE,
        KDEV_NVIDIA_MIG_MIXED,
};

enum kdev_nvidia_discovery {
        KDEV_NVIDIA_DISCOVERY_AUTO,
        KDEV_NVIDIA_DISCOVERY_NVML,
        KDEV_NVIDIA_DISCOVERY_TEGRA,
};

enum kdev_nvidia_id_strategy {
        KDEV_NVIDIA_ID_UUID,
        KDEV_NVIDIA_ID_INDEX,
};

enum kdev_nvidia_alloc_policy {
        KDEV_NVIDIA_POLICY_DISTRIBUTED,
        KDEV_NVIDIA_POLICY_PACKED,
};

/* deviceListStrategy: a set (bit mask) of these. */
enum {
        KDEV_NVIDIA_LIST_ENVVAR = 1u << 0,
        KDEV_NVIDIA_LIST_VOLUME_MOUNTS = 1u << 1,
        KDEV_NVIDIA_LIST_CDI_ANNOTATIONS = 1u << 2,
        KDEV_NVIDIA_LIST_CDI_CRI = 1u << 3,
};
#define KDEV_NVIDIA_LIST_CDI (KDEV_NVIDIA_LIST_CDI_ANNOTATIONS | KDEV_NVIDIA_LIST_CDI_CRI)

/* Where an option's value came from, weakest first. */
enum kdev_nvidia_src {
        KDEV_NVIDIA_SRC_DEFAULT,
        KDEV_NVIDIA_SRC_FILE,
        KDEV_NVIDIA_SRC_ENV,
        KDEV_NVIDIA_SRC_FLAG,
};

/* The options that env/flags can set (index of cfg->src[]). */
enum kdev_nvidia_opt {
        KDEV_NVIDIA_OPT_MIG_STRATEGY,
        KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR,
        KDEV_NVIDIA_OPT_DRIVER_ROOT,
        KDEV_NVIDIA_OPT_DEV_ROOT,
        KDEV_NVIDIA_OPT_MPS_ROOT,
        KDEV_NVIDIA_OPT_GDRCOPY,
        KDEV_NVIDIA_OPT_GDS,
        KDEV_NVIDIA_OPT_MOFED,
        KDEV_NVIDIA_OPT_DISCOVERY,
        KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS,
        KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY,
        KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY,
        KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX,
        KDEV_NVIDIA_OPT_CTK_PATH,
        KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT,
        KDEV_NVIDIA_OPT_SHARED_POLICY,
        KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS,
        KDEV_NVIDIA_OPT_IMEX_REQUIRED,
        KDEV_NVIDIA_OPT_CDI_DIR,
        KDEV_NVIDIA_OPT_PROBE_INTERVAL,
        KDEV_NVIDIA_OPT_QUIET_PERIOD,
        KDEV_NVIDIA_OPT_PROC_ROOT,
        KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS,
        KDEV_NVIDIA_OPT_CDI_DISABLE_HOOKS,
        KDEV_NVIDIA_OPT_SHARE_ROOT,
        KDEV_NVIDIA_OPT_SHARE_LIBRARY,
        KDEV_NVIDIA_OPT_USAGE_INTERVAL,
        KDEV_NVIDIA_OPT_COUNT,
};

/* sharing.timeSlicing.resources[i] / sharing.mps.resources[i] (NVIDIA
 * replicas.go). Parsed and checked now; applied by the sharing code. */
enum kdev_nvidia_devices_kind {
        KDEV_NVIDIA_DEVICES_ALL,   /* "all" (the default) */
        KDEV_NVIDIA_DEVICES_COUNT, /* a positive count */
        KDEV_NVIDIA_DEVICES_LIST,  /* GPU/MIG indices and UUIDs */
};

struct kdev_nvidia_replicated_resource {
        char *name;   /* "nvidia.com/" added when the name has no '/' */
        char *rename; /* NULL when not given; prefixed like name */
        enum kdev_nvidia_devices_kind devices_kind;
        unsigned devices_count;      /* KDEV_NVIDIA_DEVICES_COUNT */
        char **devices;              /* KDEV_NVIDIA_DEVICES_LIST: "0", "0:1", "GPU-…", "MIG-…" */
        size_t n_devices;
        unsigned replicas;           /* >= 2 */
        unsigned line, column;       /* position of the entry in the file */
};

struct kdev_nvidia_replicated {
        bool present;                /* the section was in the file */
        bool rename_by_default;
        int fail_requests_greater_than_one; /* -1: not given, 0, 1 */
        struct kdev_nvidia_replicated_resource *resources; /* >= 1 when present */
        size_t n_resources;
};

/* kdev's `isolation` section: which time-sliced resources are isolated
 * replicas, each replica a share of one GPU (nvidia/isolation.h). */
enum kdev_nvidia_preload {
        KDEV_NVIDIA_PRELOAD_FILE, /* "file": /etc/ld.so.preload mounted (the default) */
        KDEV_NVIDIA_PRELOAD_ENV,  /* "env": LD_PRELOAD; the image's /etc/ld.so.preload kept */
};

struct kdev_nvidia_isolated_resource {
        char *name;                /* the advertised resource; "nvidia.com/" added without '/' */
        unsigned long long memory; /* bytes per replica; 0: the GPU's memory / replicas */
        unsigned compute;          /* percent per replica, 1..100; 0: 100 / replicas */
        char *policy;              /* compute pacing policy name, NULL: the library's default */
        enum kdev_nvidia_preload preload;
        unsigned line, column;     /* position of the entry's name in the file */
};

struct kdev_nvidia_isolation {
        bool present;              /* the section was in the file */
        struct kdev_nvidia_isolated_resource *resources;
        size_t n_resources;
        char *file;                /* the file's display name, for kdev_nvidia_config_finish */
};

struct kdev_nvidia_config {
        /* flags.* */
        enum kdev_nvidia_mig_strategy mig_strategy; /* none */
        bool fail_on_init_error;                    /* true */
        char *driver_root;                          /* "/" */
        char *dev_root;      /* NULL or "" until finish; then driver_root when unset */
        char *mps_root;      /* "" */
        bool gdrcopy_enabled, gds_enabled, mofed_enabled; /* false */
        enum kdev_nvidia_discovery discovery;       /* auto */
        /* flags.plugin.* */
        bool pass_device_specs;                     /* false */
        unsigned device_list_strategies;            /* KDEV_NVIDIA_LIST_ENVVAR */
        enum kdev_nvidia_id_strategy id_strategy;   /* uuid */
        char *cdi_annotation_prefix;                /* "cdi.k8s.io/" */
        char *nvidia_ctk_path;                      /* "/usr/bin/nvidia-ctk" */
        char *container_driver_root;                /* "/driver-root" */
        enum kdev_nvidia_alloc_policy shared_policy; /* distributed */
        /* imex.* */
        unsigned *imex_channel_ids;                 /* [] or [0] */
        size_t n_imex_channel_ids;
        bool imex_required;
        /* sharing.* */
        struct kdev_nvidia_replicated time_slicing;
        struct kdev_nvidia_replicated mps;
        /* kdev: health.* (seconds) and the CDI spec directory */
        unsigned probe_interval;                    /* 10 */
        unsigned quiet_period;                      /* 60 */
        /* kdev: usage.interval, --usage-interval, KDEV_USAGE_INTERVAL: seconds
         * between usage samples (README "Usage metering"), 0..3600; 0: off.
         * Sampled only with metrics on. */
        unsigned usage_interval;                    /* 0 */
        char *cdi_dir;                              /* "/var/run/cdi" */
        /* kdev: where driver/nvidia-caps/mig-minors is read (MIG capability
         * nodes); NVIDIA reads /proc/driver/nvidia-caps/mig-minors */
        char *proc_root;                            /* "/proc" */
        /* --cdi-feature-flags / CDI_FEATURE_FLAGS and --cdi-disable-hooks /
         * CDI_DISABLE_HOOKS (NVIDIA main.go; flags and env only, not in the
         * config file): nvidia/driver_files.h KDEV_NVIDIA_CDI_* and
         * KDEV_NVIDIA_HOOK_* bits */
        unsigned cdi_features;                      /* none */
        unsigned cdi_disabled_hooks;                /* none */
        /* kdev: isolated replicas (`isolation`, nvidia/isolation.h) and the
         * host side of their shares: --share-root / KDEV_SHARE_ROOT, and
         * --share-library / KDEV_SHARE_LIBRARY (NULL: found next to the
         * binary, kdev_nvidia_share_library_default) */
        struct kdev_nvidia_isolation isolation;
        char *share_root;                           /* "/var/lib/kdev/share" */
        char *share_library;                        /* NULL */

        enum kdev_nvidia_src src[KDEV_NVIDIA_OPT_COUNT];
        bool file_sections;  /* the config file had an NVIDIA section */
        bool flag_given;     /* an NVIDIA command-line flag was applied */
        bool wanted;         /* set by kdev_nvidia_config_finish (see above) */
        /* Warnings for the daemon to log (library code does not log), e.g.
         * "Customizing the 'resources' field is not yet supported in the
         * config. Ignoring..." (NVIDIA's text). Owned. */
        char **warnings;
        size_t n_warnings;
};

/* Sets every option to its default (all sources DEFAULT). Returns 0 or
 * -ENOMEM (|cfg| is then cleared). Pair with kdev_nvidia_config_clear(). */
KDEV_API int kdev_nvidia_config_init(struct kdev_nvidia_config *cfg, struct kdev_err *err);

/* Frees everything |cfg| owns (not |cfg|); NULL-safe; leaves it zeroed. */
KDEV_API void kdev_nvidia_config_clear(struct kdev_nvidia_config *cfg);

/* The NVIDIA sections of kdev's config file, to register on kdev's config
 * root with kdev_config_register() (config/config.h): `flags` (with `plugin`,
 * and NVIDIA's GFD-only `useNodeFeatureAPI` and `gfd`, accepted and ignored),
 * `resources` (`gpus`/`mig` lists of {pattern, name}: accepted, ignored with
 * NVIDIA's warning), `sharing` (`timeSlicing`, `mps`), `imex`, and kdev's
 * `health` ({probeInterval, quietPeriod}, whole seconds 1..86400) and `usage`
 * ({interval}, whole seconds 0..3600, 0 off). |cfg| must
 * have been initialised and outlive the load. On a load error |cfg| may hold
 * part of the file's values: discard it. */
KDEV_API void kdev_nvidia_config_sections(struct kdev_nvidia_config *cfg, struct kdev_config_sections *out);

/* Applies the environment |envp| ("NAME=value" strings, NULL-terminated; e.g.
 * `environ`). Variables (first of a row that is set wins): MIG_STRATEGY,
 * FAIL_ON_INIT_ERROR, NVIDIA_DRIVER_ROOT, NVIDIA_DEV_ROOT, MPS_ROOT,
 * GDRCOPY_ENABLED, GDS_ENABLED, MOFED_ENABLED, DEVICE_DISCOVERY_STRATEGY,
 * PASS_DEVICE_SPECS, DEVICE_LIST_STRATEGY (comma-separated),
 * DEVICE_ID_STRATEGY, CDI_ANNOTATION_PREFIX, NVIDIA_CDI_HOOK_PATH |
 * NVIDIA_CTK_PATH, DRIVER_ROOT_CTR_PATH | CONTAINER_DRIVER_ROOT,
 * SHARED_DEVICES_ALLOCATION_POLICY, IMEX_CHANNEL_IDS (comma-separated),
 * IMEX_REQUIRED, and kdev's KDEV_CDI_DIR, KDEV_HEALTH_PROBE_INTERVAL,
 * KDEV_HEALTH_QUIET_PERIOD, KDEV_PROC_ROOT, KDEV_SHARE_ROOT, KDEV_SHARE_LIBRARY,
 * KDEV_USAGE_INTERVAL. An empty value of a boolean, number or list
 * variable counts as unset (urfave/cli). Returns 0, or -EINVAL at the first
 * bad value: "<VAR>: <message>", e.g. `MIG_STRATEGY: invalid MIG strategy:
 * bogus (expected none, single or mixed)`; -ENOMEM. */
KDEV_API int kdev_nvidia_config_apply_env(struct kdev_nvidia_config *cfg, char *const *envp,
                                 struct kdev_err *err);

/* One command-line flag of the NVIDIA backend. */
struct kdev_nvidia_flag {
        const char *name;    /* long option without "--", e.g. "mig-strategy" */
        bool is_bool;        /* getopt optional_argument: "--x" means true, "--x=false" */
        const char *metavar; /* for usage text ("STRATEGY"); NULL for booleans */
        const char *help;    /* one line */
        enum kdev_nvidia_opt opt;
};

/* The flags, aliases included (--driver-root and --nvidia-driver-root, ...),
 * terminated by an entry with name NULL. Names: mig-strategy,
 * fail-on-init-error, driver-root, nvidia-driver-root, dev-root,
 * nvidia-dev-root, mps-root, gdrcopy-enabled, gds-enabled, mofed-enabled,
 * device-discovery-strategy, pass-device-specs, device-list-strategy,
 * device-id-strategy, cdi-annotation-prefix, nvidia-cdi-hook-path,
 * nvidia-ctk-path, driver-root-ctr-path, container-driver-root,
 * shared-devices-allocation-policy, imex-channel-ids, imex-required, and
 * kdev's cdi-dir, health-probe-interval, health-quiet-period, proc-root,
 * share-root, share-library, usage-interval. */
KDEV_API extern const struct kdev_nvidia_flag kdev_nvidia_flags[];

struct option; /* getopt.h */

/* A getopt_long table: the |n_own| entries of |own|, then one per
 * kdev_nvidia_flags[i] (optional_argument for booleans, else
 * required_argument) with val |first_val| + i, then the zero entry.
 * Malloc'ed (free()); NULL when out of memory. For the command lines that
 * take every NVIDIA flag (kdev-plugin, its mps-control-daemon). */
KDEV_API struct option *kdev_nvidia_long_options(const struct option *own, size_t n_own,
                                                 int first_val);

/* Applies flag |name| (without "--") with |value| (NULL for a boolean flag
 * given without "=VALUE": true). Returns 0; -ENOENT "unknown flag --x";
 * -EINVAL "--<name>: <message>" for a bad value or a missing value of a
 * non-boolean flag; -ENOMEM. Sets cfg->flag_given. */
KDEV_API int kdev_nvidia_config_apply_flag(struct kdev_nvidia_config *cfg, const char *name,
                                  const char *value, struct kdev_err *err);

/* Completes |cfg| once the file, env and flags are applied: dev_root
 * defaults to driver_root (NVIDIA config.go), sets cfg->wanted (|have_file|:
 * a config file was loaded), and checks the rules that join several options
 * (NVIDIA main.go validateFlags):
 *   "using MPS requires --mps-root to be specified",
 *   "using --mig-strategy=mixed is not supported with MPS",
 *   "CDI --device-list-strategy options are only supported on NVML-based
 *    systems" (deviceDiscoveryStrategy tegra with a CDI strategy),
 *   "deviceDiscoveryStrategy tegra is not supported by kdev (NVML only)".
 * Returns 0, -EINVAL with one of those, or -ENOMEM. */
KDEV_API int kdev_nvidia_config_finish(struct kdev_nvidia_config *cfg, bool have_file,
                              struct kdev_err *err);

/* Names for the enum values, as written in the config ("none", "uuid",
 * "distributed", ...); static. */
KDEV_API const char *kdev_nvidia_mig_strategy_name(enum kdev_nvidia_mig_strategy s);
KDEV_API const char *kdev_nvidia_id_strategy_name(enum kdev_nvidia_id_strategy s);

/* Writes the device list strategies of |mask| comma-joined in the fixed order
 * envvar, volume-mounts, cdi-annotations, cdi-cri into |buf|. Returns |buf|. */
KDEV_API char *kdev_nvidia_list_strategies_text(unsigned mask, char *buf, size_t size);

/* The sharing strategy of |cfg| (NVIDIA api/config/v1/sharing.go
 * SharingStrategy): MPS when sharing.mps has a resource with replicas > 1,
 * else time-slicing when sharing.timeSlicing has one, else none. MPS wins
 * when both are given, as NVIDIA's does. */
enum kdev_nvidia_sharing_strategy {
        KDEV_NVIDIA_SHARING_NONE,
        KDEV_NVIDIA_SHARING_TIME_SLICING,
        KDEV_NVIDIA_SHARING_MPS,
};
KDEV_API enum kdev_nvidia_sharing_strategy
kdev_nvidia_sharing_strategy(const struct kdev_nvidia_config *cfg);

/* Its name as GFD's nvidia.com/gpu.sharing-strategy label writes it: "none",
 * "time-slicing", "mps"; static. */
KDEV_API const char *kdev_nvidia_sharing_strategy_name(enum kdev_nvidia_sharing_strategy s);

/* The sharing section that is applied (NVIDIA sharing.go
 * ReplicatedResources): &cfg->mps when it is present, else
 * &cfg->time_slicing (present or not). Borrowed from |cfg|. */
KDEV_API const struct kdev_nvidia_replicated *
kdev_nvidia_replicated_section(const struct kdev_nvidia_config *cfg);

/* Whether a request of more than one replica is refused for |r| (one of
 * cfg's sections): failRequestsGreaterThanOne as given; when not given,
 * true for sharing.mps (NVIDIA v0.20.0, #1762) and false for
 * sharing.timeSlicing. */
KDEV_API bool kdev_nvidia_replicated_fail_gt1(const struct kdev_nvidia_config *cfg,
                                              const struct kdev_nvidia_replicated *r);

#endif /* KDEV_NVIDIA_CONFIG_H */
