/* NVIDIA backend configuration: defaults, config file sections, environment
 * and command-line flags (see config.h). */
#include "nvidia/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yamlcfg.h"
#include "model/model.h"

#define MSG_MAX 384
/* Upper bound of sharing.*.resources[].replicas (NVIDIA has none). One GPU
 * at the bound is ~270 KB of ListAndWatch; the product over a node's devices
 * is checked where it matters, by the runtime's 4 MiB limit (e.g. 8 GPUs x
 * 4096 fit, 16 GPUs x 4096 with NUMA topology do not: test_nvidia_sharing). */
#define REPLICAS_MAX 4096
#define SHARING_RESOURCES_MAX 256
#define SHARING_DEVICES_MAX 1024

/* --- helpers ------------------------------------------------------------------ */

static int set_str(char **dst, const char *v)
{
        char *s = strdup(v);
        if (!s)
                return -ENOMEM;
        free(*dst);
        *dst = s;
        return 0;
}

static int add_warning(struct kdev_nvidia_config *cfg, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static int add_warning(struct kdev_nvidia_config *cfg, const char *fmt, ...)
{
        char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        char **nw = realloc(cfg->warnings, (cfg->n_warnings + 1) * sizeof(*nw));
        if (!nw) {
                free(s);
                return -ENOMEM;
        }
        cfg->warnings = nw;
        cfg->warnings[cfg->n_warnings++] = s;
        return 0;
}

/* Whether source |s| may set option |o|; records it. */
static bool take(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o, enum kdev_nvidia_src s)
{
        if (s < cfg->src[o])
                return false;
        cfg->src[o] = s;
        return true;
}

static void replicated_clear(struct kdev_nvidia_replicated *r)
{
        for (size_t i = 0; i < r->n_resources; i++) {
                struct kdev_nvidia_replicated_resource *x = &r->resources[i];
                free(x->name);
                free(x->rename);
                for (size_t j = 0; j < x->n_devices; j++)
                        free(x->devices[j]);
                free(x->devices);
        }
        free(r->resources);
        memset(r, 0, sizeof(*r));
        r->fail_requests_greater_than_one = -1;
}

void kdev_nvidia_config_clear(struct kdev_nvidia_config *cfg)
{
        if (!cfg)
                return;
        free(cfg->driver_root);
        free(cfg->dev_root);
        free(cfg->mps_root);
        free(cfg->cdi_annotation_prefix);
        free(cfg->nvidia_ctk_path);
        free(cfg->container_driver_root);
        free(cfg->imex_channel_ids);
        free(cfg->cdi_dir);
        free(cfg->proc_root);
        replicated_clear(&cfg->time_slicing);
        replicated_clear(&cfg->mps);
        for (size_t i = 0; i < cfg->n_warnings; i++)
                free(cfg->warnings[i]);
        free(cfg->warnings);
        memset(cfg, 0, sizeof(*cfg));
}

int kdev_nvidia_config_init(struct kdev_nvidia_config *cfg, struct kdev_err *err)
{
        memset(cfg, 0, sizeof(*cfg));
        cfg->mig_strategy = KDEV_NVIDIA_MIG_NONE;
        cfg->fail_on_init_error = true;
        cfg->discovery = KDEV_NVIDIA_DISCOVERY_AUTO;
        cfg->device_list_strategies = KDEV_NVIDIA_LIST_ENVVAR;
        cfg->id_strategy = KDEV_NVIDIA_ID_UUID;
        cfg->shared_policy = KDEV_NVIDIA_POLICY_DISTRIBUTED;
        cfg->probe_interval = KDEV_NVIDIA_DEFAULT_PROBE_INTERVAL;
        cfg->quiet_period = KDEV_NVIDIA_DEFAULT_QUIET_PERIOD;
        cfg->time_slicing.fail_requests_greater_than_one = -1;
        cfg->mps.fail_requests_greater_than_one = -1;
        if (set_str(&cfg->driver_root, KDEV_NVIDIA_DEFAULT_DRIVER_ROOT) < 0 ||
            set_str(&cfg->mps_root, "") < 0 ||
            set_str(&cfg->cdi_annotation_prefix, KDEV_NVIDIA_DEFAULT_CDI_ANNOTATION_PREFIX) < 0 ||
            set_str(&cfg->nvidia_ctk_path, KDEV_NVIDIA_DEFAULT_CTK_PATH) < 0 ||
            set_str(&cfg->container_driver_root, KDEV_NVIDIA_DEFAULT_CONTAINER_DRIVER_ROOT) < 0 ||
            set_str(&cfg->cdi_dir, KDEV_NVIDIA_DEFAULT_CDI_DIR) < 0 ||
            set_str(&cfg->proc_root, KDEV_NVIDIA_DEFAULT_PROC_ROOT) < 0) {
                kdev_nvidia_config_clear(cfg);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

/* --- value parsers: text -> value, or -EINVAL with a message ---------------------- */

static int bad(char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(char *msg, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, MSG_MAX, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static const char *const mig_names[] = {"none", "single", "mixed"};
static const char *const discovery_names[] = {"auto", "nvml", "tegra"};
static const char *const id_names[] = {"uuid", "index"};
static const char *const policy_names[] = {"distributed", "packed"};
static const char *const list_names[] = {"envvar", "volume-mounts", "cdi-annotations",
                                         "cdi-cri"};

static int lookup(const char *const *names, size_t n, const char *v)
{
        for (size_t i = 0; i < n; i++) {
                if (strcmp(names[i], v) == 0)
                        return (int)i;
        }
        return -1;
}

#define LOOKUP(names, v) lookup(names, sizeof(names) / sizeof(names[0]), v)

static int parse_list_item(const char *v, unsigned *bit, char *msg)
{
        int i = LOOKUP(list_names, v);
        if (i < 0)
                return bad(msg,
                           "invalid strategy: %s (expected envvar, volume-mounts, "
                           "cdi-annotations or cdi-cri)",
                           v);
        *bit = 1u << i;
        return 0;
}

/* Go's strconv.ParseBool, as urfave/cli uses for env and flag values. */
static int parse_gobool(const char *v, bool *out, char *msg)
{
        static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True"};
        static const char *const f[] = {"0", "f", "F", "FALSE", "false", "False"};
        if (LOOKUP(t, v) >= 0) {
                *out = true;
                return 0;
        }
        if (LOOKUP(f, v) >= 0) {
                *out = false;
                return 0;
        }
        return bad(msg, "invalid boolean: %s (expected true or false)", v);
}

static int check_abs(const char *v, bool empty_ok, char *msg)
{
        if (empty_ok && v[0] == '\0')
                return 0;
        if (v[0] != '/')
                return bad(msg, "must be an absolute path, got \"%s\"", v);
        if (strlen(v) > PATH_MAX - 64)
                return bad(msg, "path too long");
        return 0;
}

/* A DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', alphanumeric at
 * both ends of each label, at most 253 characters. */
static bool dns_subdomain(const char *s, size_t n)
{
        if (n == 0 || n > 253)
                return false;
        size_t label = 0;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool an = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
                if (ch == '.') {
                        if (label == 0 || s[i - 1] == '-')
                                return false;
                        label = 0;
                        continue;
                }
                if (!an && ch != '-')
                        return false;
                if (ch == '-' && label == 0)
                        return false;
                label++;
        }
        return label > 0 && s[n - 1] != '-';
}

static int check_prefix(const char *v, char *msg)
{
        size_t n = strlen(v);
        if (n < 2 || v[n - 1] != '/' || !dns_subdomain(v, n - 1))
                return bad(msg,
                           "invalid CDI annotation prefix: \"%s\" (expected a DNS subdomain "
                           "followed by '/', e.g. cdi.k8s.io/)",
                           v);
        return 0;
}

/* A decimal number without sign, at most |max|. */
static int parse_uint(const char *v, unsigned min, unsigned max, unsigned *out, char *msg)
{
        unsigned long long x = 0;
        bool ok = *v != '\0';
        for (const char *p = v; *p && ok; p++) {
                if (*p < '0' || *p > '9' || x > UINT_MAX)
                        ok = false;
                else
                        x = x * 10 + (unsigned)(*p - '0');
        }
        if (!ok || x < min || x > max)
                return bad(msg, "must be an integer between %u and %u, got \"%s\"", min, max, v);
        *out = (unsigned)x;
        return 0;
}

static int check_channels(const unsigned *ids, size_t n, char *msg)
{
        if (n == 0 || (n == 1 && ids[0] == 0))
                return 0;
        char list[128];
        size_t used = 0;
        list[0] = '\0';
        for (size_t i = 0; i < n && used < sizeof(list) - 16; i++)
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%u", i ? " " : "",
                                         ids[i]);
        return bad(msg, "invalid IMEX channel IDs: channelIDs must be [] or [0]; found [%s]",
                   list);
}

/* --- assigning ------------------------------------------------------------------- */

static bool *bool_field(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o)
{
        switch (o) {
        case KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR: return &cfg->fail_on_init_error;
        case KDEV_NVIDIA_OPT_GDRCOPY: return &cfg->gdrcopy_enabled;
        case KDEV_NVIDIA_OPT_GDS: return &cfg->gds_enabled;
        case KDEV_NVIDIA_OPT_MOFED: return &cfg->mofed_enabled;
        case KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS: return &cfg->pass_device_specs;
        case KDEV_NVIDIA_OPT_IMEX_REQUIRED: return &cfg->imex_required;
        default: return NULL;
        }
}

static char **str_field(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o)
{
        switch (o) {
        case KDEV_NVIDIA_OPT_DRIVER_ROOT: return &cfg->driver_root;
        case KDEV_NVIDIA_OPT_DEV_ROOT: return &cfg->dev_root;
        case KDEV_NVIDIA_OPT_MPS_ROOT: return &cfg->mps_root;
        case KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX: return &cfg->cdi_annotation_prefix;
        case KDEV_NVIDIA_OPT_CTK_PATH: return &cfg->nvidia_ctk_path;
        case KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT: return &cfg->container_driver_root;
        case KDEV_NVIDIA_OPT_CDI_DIR: return &cfg->cdi_dir;
        case KDEV_NVIDIA_OPT_PROC_ROOT: return &cfg->proc_root;
        default: return NULL;
        }
}

static void assign_bool(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                        enum kdev_nvidia_src s, bool v)
{
        if (take(cfg, o, s))
                *bool_field(cfg, o) = v;
}

static void assign_mask(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s, unsigned mask)
{
        enum kdev_nvidia_opt o = KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY;
        bool append = s == KDEV_NVIDIA_SRC_FLAG && cfg->src[o] == KDEV_NVIDIA_SRC_FLAG;
        if (take(cfg, o, s))
                cfg->device_list_strategies = append ? cfg->device_list_strategies | mask : mask;
}

/* Sets the IMEX channel list (appending for a repeated flag) after checking
 * the result. |ids| is taken over on success and on error. */
static int assign_channels(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s,
                           unsigned *ids, size_t n, char *msg)
{
        enum kdev_nvidia_opt o = KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS;
        if (s < cfg->src[o]) {
                free(ids);
                return 0;
        }
        if (s == KDEV_NVIDIA_SRC_FLAG && cfg->src[o] == KDEV_NVIDIA_SRC_FLAG &&
            cfg->n_imex_channel_ids) {
                unsigned *all = realloc(ids, (n + cfg->n_imex_channel_ids) * sizeof(*all));
                if (!all) {
                        free(ids);
                        return -ENOMEM;
                }
                memmove(all + cfg->n_imex_channel_ids, all, n * sizeof(*all));
                memcpy(all, cfg->imex_channel_ids, cfg->n_imex_channel_ids * sizeof(*all));
                ids = all;
                n += cfg->n_imex_channel_ids;
        }
        int rc = check_channels(ids, n, msg);
        if (rc < 0) {
                free(ids);
                return rc;
        }
        cfg->src[o] = s;
        free(cfg->imex_channel_ids);
        cfg->imex_channel_ids = ids;
        cfg->n_imex_channel_ids = n;
        return 0;
}

/* Splits |v| at ',' (items trimmed of blanks, as urfave/cli does) and calls
 * |fn| on each item. */
static int split_list(const char *v, int (*fn)(const char *item, void *arg, char *msg), void *arg,
                      char *msg)
{
        char *copy = strdup(v);
        if (!copy)
                return -ENOMEM;
        int rc = 0;
        char *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0;
             tok = strtok_r(NULL, ",", &save)) {
                while (isspace((unsigned char)*tok))
                        tok++;
                char *end = tok + strlen(tok);
                while (end > tok && isspace((unsigned char)end[-1]))
                        *--end = '\0';
                rc = fn(tok, arg, msg);
        }
        free(copy);
        return rc;
}

static int list_item_cb(const char *item, void *arg, char *msg)
{
        unsigned bit = 0;
        int rc = parse_list_item(item, &bit, msg);
        if (rc == 0)
                *(unsigned *)arg |= bit;
        return rc;
}

struct ids_acc {
        unsigned *ids;
        size_t n;
};

static int channel_item_cb(const char *item, void *arg, char *msg)
{
        struct ids_acc *a = arg;
        unsigned v = 0;
        int rc = parse_uint(item, 0, INT_MAX, &v, msg);
        if (rc < 0)
                return rc;
        unsigned *n = realloc(a->ids, (a->n + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        a->ids = n;
        a->ids[a->n++] = v;
        return 0;
}

/* Applies the text value |v| of option |o| from source |s| (env or flag). */
static int set_text(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                    enum kdev_nvidia_src s, const char *v, char *msg)
{
        int i, rc;
        bool b = false;
        unsigned u = 0;
        switch (o) {
        case KDEV_NVIDIA_OPT_MIG_STRATEGY:
                if ((i = LOOKUP(mig_names, v)) < 0)
                        return bad(msg, "invalid MIG strategy: %s (expected none, single or mixed)",
                                   v);
                if (take(cfg, o, s))
                        cfg->mig_strategy = (enum kdev_nvidia_mig_strategy)i;
                return 0;
        case KDEV_NVIDIA_OPT_DISCOVERY:
                if ((i = LOOKUP(discovery_names, v)) < 0)
                        return bad(msg,
                                   "invalid device discovery strategy: %s (expected auto, nvml "
                                   "or tegra)",
                                   v);
                if (take(cfg, o, s))
                        cfg->discovery = (enum kdev_nvidia_discovery)i;
                return 0;
        case KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY:
                if ((i = LOOKUP(id_names, v)) < 0)
                        return bad(msg, "invalid device ID strategy: %s (expected uuid or index)",
                                   v);
                if (take(cfg, o, s))
                        cfg->id_strategy = (enum kdev_nvidia_id_strategy)i;
                return 0;
        case KDEV_NVIDIA_OPT_SHARED_POLICY:
                if ((i = LOOKUP(policy_names, v)) < 0)
                        return bad(msg,
                                   "invalid allocation policy: %s (expected distributed or "
                                   "packed)",
                                   v);
                if (take(cfg, o, s))
                        cfg->shared_policy = (enum kdev_nvidia_alloc_policy)i;
                return 0;
        case KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR:
        case KDEV_NVIDIA_OPT_GDRCOPY:
        case KDEV_NVIDIA_OPT_GDS:
        case KDEV_NVIDIA_OPT_MOFED:
        case KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS:
        case KDEV_NVIDIA_OPT_IMEX_REQUIRED:
                if ((rc = parse_gobool(v, &b, msg)) < 0)
                        return rc;
                assign_bool(cfg, o, s, b);
                return 0;
        case KDEV_NVIDIA_OPT_DRIVER_ROOT:
        case KDEV_NVIDIA_OPT_CTK_PATH:
        case KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT:
        case KDEV_NVIDIA_OPT_CDI_DIR:
        case KDEV_NVIDIA_OPT_PROC_ROOT:
        case KDEV_NVIDIA_OPT_DEV_ROOT:
        case KDEV_NVIDIA_OPT_MPS_ROOT:
                rc = check_abs(v, o == KDEV_NVIDIA_OPT_DEV_ROOT || o == KDEV_NVIDIA_OPT_MPS_ROOT,
                               msg);
                if (rc < 0)
                        return rc;
                if (take(cfg, o, s) && set_str(str_field(cfg, o), v) < 0)
                        return -ENOMEM;
                return 0;
        case KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX:
                if ((rc = check_prefix(v, msg)) < 0)
                        return rc;
                if (take(cfg, o, s) && set_str(str_field(cfg, o), v) < 0)
                        return -ENOMEM;
                return 0;
        case KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY: {
                unsigned mask = 0;
                if ((rc = split_list(v, list_item_cb, &mask, msg)) < 0)
                        return rc;
                if (!mask)
                        return bad(msg, "no strategy given");
                assign_mask(cfg, s, mask);
                return 0;
        }
        case KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS: {
                struct ids_acc a = {NULL, 0};
                if ((rc = split_list(v, channel_item_cb, &a, msg)) < 0) {
                        free(a.ids);
                        return rc;
                }
                return assign_channels(cfg, s, a.ids, a.n, msg);
        }
        case KDEV_NVIDIA_OPT_PROBE_INTERVAL:
        case KDEV_NVIDIA_OPT_QUIET_PERIOD:
                if ((rc = parse_uint(v, 1, KDEV_NVIDIA_HEALTH_SECONDS_MAX, &u, msg)) < 0)
                        return rc;
                if (take(cfg, o, s)) {
                        if (o == KDEV_NVIDIA_OPT_PROBE_INTERVAL)
                                cfg->probe_interval = u;
                        else
                                cfg->quiet_period = u;
                }
                return 0;
        default:
                return bad(msg, "internal error: unknown option");
        }
}

static bool is_bool_opt(enum kdev_nvidia_opt o)
{
        return o == KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR || o == KDEV_NVIDIA_OPT_GDRCOPY ||
               o == KDEV_NVIDIA_OPT_GDS || o == KDEV_NVIDIA_OPT_MOFED ||
               o == KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS || o == KDEV_NVIDIA_OPT_IMEX_REQUIRED;
}

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
                if (blank && (is_bool_opt(o) || o == KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY ||
                              o == KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS ||
                              o == KDEV_NVIDIA_OPT_PROBE_INTERVAL ||
                              o == KDEV_NVIDIA_OPT_QUIET_PERIOD))
                        continue;
                char msg[MSG_MAX];
                int rc = set_text(cfg, o, KDEV_NVIDIA_SRC_ENV, v, msg);
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
         "where driver/nvidia-caps/mig-minors is read (default /proc)",
         KDEV_NVIDIA_OPT_PROC_ROOT},
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
        char msg[MSG_MAX];
        int rc = set_text(cfg, f->opt, KDEV_NVIDIA_SRC_FLAG, value, msg);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_err_set(err, -rc, "--%s: %s", name, msg);
        cfg->flag_given = true;
        return 0;
}

/* --- config file ----------------------------------------------------------------- */

static struct kdev_nvidia_config *file_cfg(void *obj)
{
        struct kdev_nvidia_config *cfg = obj;
        cfg->file_sections = true;
        return cfg;
}

/* Is |node| a plain, untagged YAML null ("", "~", "null", "Null", "NULL")
 * read for the first time? Then it is marked read (a second visit through an
 * alias is left to the normal readers, which refuse it) and the caller treats
 * the key as absent: NVIDIA decodes the optional keys of flags, flags.plugin,
 * flags.gfd, imex and resources into pointers, slices or structs, for which
 * null means "not set" (sigs.k8s.io/yaml, then encoding/json). */
static bool absent_null(struct kdev_ycfg *c, yaml_node_t *node)
{
        static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
        size_t idx = (size_t)(node - c->doc.nodes.start);
        if (node->type != YAML_SCALAR_NODE ||
            node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
            (c->tags && idx < c->n_nodes && c->tags[idx]) ||
            LOOKUP(nulls, (const char *)node->data.scalar.value) < 0)
                return false;
        if (idx < c->n_nodes) {
                if (c->visited[idx])
                        return false;
                c->visited[idx] = 1;
        }
        return true;
}

/* A plain scalar true/false (YAML 1.1 spellings, as NVIDIA's YAML reader). */
static int read_bool(struct kdev_ycfg *c, yaml_node_t *node, bool *out)
{
        if (node->type == YAML_SCALAR_NODE &&
            node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
                if (LOOKUP(nulls, (const char *)node->data.scalar.value) >= 0)
                        return kdev_ycfg_fail(c, node, "must be true or false, got null");
        }
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0) {
                if (node->type == YAML_SCALAR_NODE || rc == -ENOMEM ||
                    (c->err && !strstr(c->err->msg, "must be a string")))
                        return rc;
                /* re-word the kind error */
                return kdev_ycfg_fail(c, node, "must be true or false, got %s",
                                      node->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
        }
        static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
                                        "ON"};
        static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off",
                                        "Off", "OFF"};
        bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if (plain && LOOKUP(t, s) >= 0)
                *out = true;
        else if (plain && LOOKUP(f, s) >= 0)
                *out = false;
        else
                rc = kdev_ycfg_fail(c, node, "must be true or false, got %s\"%s\"",
                                    plain ? "" : "the quoted string ", s);
        free(s);
        return rc;
}

/* A scalar option read as text and checked like an env value. */
static int read_text_opt(struct kdev_ycfg *c, yaml_node_t *node, void *obj,
                         enum kdev_nvidia_opt o)
{
        struct kdev_nvidia_config *cfg = obj;
        if (absent_null(c, node))
                return 0;
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        char msg[MSG_MAX];
        rc = set_text(cfg, o, KDEV_NVIDIA_SRC_FILE, s, msg);
        free(s);
        if (rc == -ENOMEM)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_ycfg_fail(c, node, "%s", msg);
        return 0;
}

static int read_bool_opt(struct kdev_ycfg *c, yaml_node_t *node, void *obj,
                         enum kdev_nvidia_opt o)
{
        bool b = false;
        if (absent_null(c, node))
                return 0;
        int rc = read_bool(c, node, &b);
        if (rc == 0)
                assign_bool(obj, o, KDEV_NVIDIA_SRC_FILE, b);
        return rc;
}

#define TEXT_READER(fn, opt)                                                             \
        static int fn(struct kdev_ycfg *c, yaml_node_t *node, void *obj)                 \
        {                                                                                \
                return read_text_opt(c, node, obj, opt);                                 \
        }
#define BOOL_READER(fn, opt)                                                             \
        static int fn(struct kdev_ycfg *c, yaml_node_t *node, void *obj)                 \
        {                                                                                \
                return read_bool_opt(c, node, obj, opt);                                 \
        }

TEXT_READER(read_mig, KDEV_NVIDIA_OPT_MIG_STRATEGY)
BOOL_READER(read_fail_on_init, KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR)
TEXT_READER(read_driver_root, KDEV_NVIDIA_OPT_DRIVER_ROOT)
TEXT_READER(read_dev_root, KDEV_NVIDIA_OPT_DEV_ROOT)
TEXT_READER(read_mps_root, KDEV_NVIDIA_OPT_MPS_ROOT)
BOOL_READER(read_gdrcopy, KDEV_NVIDIA_OPT_GDRCOPY)
BOOL_READER(read_gds, KDEV_NVIDIA_OPT_GDS)
BOOL_READER(read_mofed, KDEV_NVIDIA_OPT_MOFED)
TEXT_READER(read_discovery, KDEV_NVIDIA_OPT_DISCOVERY)
BOOL_READER(read_pass_specs, KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS)
TEXT_READER(read_id_strategy, KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY)
TEXT_READER(read_prefix, KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX)
TEXT_READER(read_ctk_path, KDEV_NVIDIA_OPT_CTK_PATH)
TEXT_READER(read_ctr_root, KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT)
TEXT_READER(read_policy, KDEV_NVIDIA_OPT_SHARED_POLICY)
BOOL_READER(read_imex_required, KDEV_NVIDIA_OPT_IMEX_REQUIRED)

static int read_ignored_bool(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        (void)obj;
        bool b = false;
        return absent_null(c, node) ? 0 : read_bool(c, node, &b);
}

static int read_ignored_string(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        (void)obj;
        if (absent_null(c, node))
                return 0;
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        free(s);
        return rc;
}

/* flags.plugin.deviceListStrategy: one name, or a list of names. */
static int read_list_item(struct kdev_ycfg *c, yaml_node_t *node, void *elem)
{
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        char msg[MSG_MAX];
        rc = parse_list_item(s, elem, msg);
        free(s);
        return rc < 0 ? kdev_ycfg_fail(c, node, "%s", msg) : 0;
}

static int read_list_strategy(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_config *cfg = obj;
        unsigned mask = 0;
        if (absent_null(c, node))
                return 0;
        if (node->type == YAML_SEQUENCE_NODE) {
                unsigned *bits = NULL;
                size_t n = 0;
                int rc = kdev_ycfg_list(c, node, 1, 16, sizeof(unsigned), (void **)&bits, &n,
                                        read_list_item);
                for (size_t i = 0; i < n; i++)
                        mask |= bits[i];
                free(bits);
                if (rc < 0)
                        return rc;
        } else {
                int rc = read_list_item(c, node, &mask);
                if (rc < 0)
                        return rc;
        }
        assign_mask(cfg, KDEV_NVIDIA_SRC_FILE, mask);
        return 0;
}

static const struct kdev_ycfg_field plugin_fields[] = {
        {"passDeviceSpecs", false, read_pass_specs},
        {"deviceListStrategy", false, read_list_strategy},
        {"deviceIDStrategy", false, read_id_strategy},
        {"cdiAnnotationPrefix", false, read_prefix},
        {"nvidiaCTKPath", false, read_ctk_path},
        {"containerDriverRoot", false, read_ctr_root},
        {"sharedDevicesAllocationPolicy", false, read_policy},
};

static int read_plugin(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        if (absent_null(c, node))
                return 0;
        return kdev_ycfg_mapping(c, node, plugin_fields,
                                 sizeof(plugin_fields) / sizeof(plugin_fields[0]), obj);
}

/* flags.gfd: GPU Feature Discovery settings, accepted and ignored. */
static const struct kdev_ycfg_field gfd_fields[] = {
        {"oneshot", false, read_ignored_bool},
        {"noTimestamp", false, read_ignored_bool},
        {"sleepInterval", false, read_ignored_string},
        {"outputFile", false, read_ignored_string},
        {"machineTypeFile", false, read_ignored_string},
};

static int read_gfd(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        if (absent_null(c, node))
                return 0;
        return kdev_ycfg_mapping(c, node, gfd_fields, sizeof(gfd_fields) / sizeof(gfd_fields[0]),
                                 obj);
}

static const struct kdev_ycfg_field flags_fields[] = {
        {"migStrategy", false, read_mig},
        {"failOnInitError", false, read_fail_on_init},
        {"nvidiaDriverRoot", false, read_driver_root},
        {"nvidiaDevRoot", false, read_dev_root},
        {"mpsRoot", false, read_mps_root},
        {"gdrcopyEnabled", false, read_gdrcopy},
        {"gdsEnabled", false, read_gds},
        {"mofedEnabled", false, read_mofed},
        {"useNodeFeatureAPI", false, read_ignored_bool},
        {"deviceDiscoveryStrategy", false, read_discovery},
        {"plugin", false, read_plugin},
        {"gfd", false, read_gfd},
};

static int read_flags(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        if (absent_null(c, node)) {
                file_cfg(obj); /* an NVIDIA section all the same */
                return 0;
        }
        return kdev_ycfg_mapping(c, node, flags_fields,
                                 sizeof(flags_fields) / sizeof(flags_fields[0]), file_cfg(obj));
}

/* resources: {gpus: [{pattern, name}], mig: [...]}: checked, then ignored. */
struct named_pattern {
        char *pattern, *name;
};

static int read_np_pattern(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_string(c, node, &((struct named_pattern *)obj)->pattern);
}

static int read_np_name(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_string(c, node, &((struct named_pattern *)obj)->name);
}

static const struct kdev_ycfg_field np_fields[] = {
        {"pattern", true, read_np_pattern},
        {"name", true, read_np_name},
};

static int read_np(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, np_fields, sizeof(np_fields) / sizeof(np_fields[0]),
                                 obj);
}

struct resources_seen {
        size_t n;
};

static int read_np_list(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct resources_seen *seen = obj;
        struct named_pattern *items = NULL;
        size_t n = 0;
        if (absent_null(c, node))
                return 0;
        int rc = kdev_ycfg_list(c, node, 0, 1024, sizeof(*items), (void **)&items, &n, read_np);
        for (size_t i = 0; i < n; i++) {
                free(items[i].pattern);
                free(items[i].name);
        }
        free(items);
        seen->n += n;
        return rc;
}

static const struct kdev_ycfg_field resources_fields[] = {
        {"gpus", false, read_np_list},
        {"mig", false, read_np_list},
};

static int read_resources(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_config *cfg = file_cfg(obj);
        struct resources_seen seen = {0};
        if (absent_null(c, node))
                return 0;
        int rc = kdev_ycfg_mapping(c, node, resources_fields,
                                   sizeof(resources_fields) / sizeof(resources_fields[0]), &seen);
        if (rc == 0 && seen.n > 0 &&
            add_warning(cfg, "Customizing the 'resources' field is not yet supported in the "
                             "config. Ignoring...") < 0)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        return rc;
}

/* sharing.{timeSlicing,mps} (NVIDIA replicas.go). */

/* Adds "nvidia.com/" to a name without '/' and checks the result. */
static int read_resource_name(struct kdev_ycfg *c, yaml_node_t *node, char **out)
{
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        if (!strchr(s, '/')) {
                char *full = NULL;
                if (asprintf(&full, "nvidia.com/%s", s) < 0) {
                        free(s);
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                }
                free(s);
                s = full;
        }
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_resource_name_check(s, &e) < 0) {
                free(s);
                return kdev_ycfg_fail(c, node, "%s", e.msg);
        }
        free(*out);
        *out = s;
        return 0;
}

static int read_rr_name(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_resource_name(c, node, &((struct kdev_nvidia_replicated_resource *)obj)->name);
}

static int read_rr_rename(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_resource_name(c, node,
                                  &((struct kdev_nvidia_replicated_resource *)obj)->rename);
}

static bool all_digits(const char *s, size_t n)
{
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
        }
        return true;
}

static int read_rr_replicas(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_replicated_resource *r = obj;
        int rc = kdev_ycfg_uint(c, node, 2, REPLICAS_MAX, &r->replicas);
        if (rc == 0 || rc == -ENOMEM)
                return rc;
        /* A plain, untagged number out of range gets NVIDIA's rule ("must be
         * >= 2") or kdev's bound instead of the range message. */
        size_t idx = (size_t)(node - c->doc.nodes.start);
        if ((c->tags && idx < c->n_nodes && c->tags[idx]) || node->type != YAML_SCALAR_NODE ||
            node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
            !all_digits((const char *)node->data.scalar.value, node->data.scalar.length))
                return rc;
        const char *v = (const char *)node->data.scalar.value;
        size_t len = node->data.scalar.length;
        while (len > 1 && *v == '0') {
                v++;
                len--;
        }
        if (len == 1 && *v < '2')
                return kdev_ycfg_fail(c, node, "must be >= 2");
        return kdev_ycfg_fail(c, node, "must be <= %d", REPLICAS_MAX);
}

/* The 36-character textual UUID (8-4-4-4-12 hex digits) or 32 hex digits. */
static bool is_uuid(const char *s)
{
        size_t n = strlen(s);
        if (n == 32) {
                for (size_t i = 0; i < n; i++) {
                        if (!isxdigit((unsigned char)s[i]))
                                return false;
                }
                return true;
        }
        if (n != 36)
                return false;
        for (size_t i = 0; i < n; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
                        return false;
        }
        return true;
}

/* A device reference of sharing.*.resources[].devices (NVIDIA
 * ReplicatedDeviceRef): GPU index, MIG index "i:j", GPU UUID, MIG UUID
 * ("MIG-<uuid>" or "MIG-GPU-<uuid>/<gi>/<ci>"). */
static bool valid_device_ref(const char *s)
{
        size_t n = strlen(s);
        if (all_digits(s, n))
                return true;
        const char *colon = strchr(s, ':');
        if (colon && all_digits(s, (size_t)(colon - s)) && all_digits(colon + 1, strlen(colon + 1)))
                return true;
        if (strncmp(s, "GPU-", 4) == 0)
                return is_uuid(s + 4);
        if (strncmp(s, "MIG-", 4) != 0)
                return false;
        if (is_uuid(s + 4))
                return true;
        const char *p = s + 4;
        const char *a = strchr(p, '/');
        if (!a || strncmp(p, "GPU-", 4) != 0)
                return false;
        char gpu[64];
        if ((size_t)(a - p) >= sizeof(gpu))
                return false;
        memcpy(gpu, p, (size_t)(a - p));
        gpu[a - p] = '\0';
        const char *b = strchr(a + 1, '/');
        return is_uuid(gpu + 4) && b && all_digits(a + 1, (size_t)(b - a - 1)) &&
               all_digits(b + 1, strlen(b + 1));
}

static int read_device_ref(struct kdev_ycfg *c, yaml_node_t *node, void *elem)
{
        char **out = elem;
        int rc = kdev_ycfg_string(c, node, out);
        if (rc < 0)
                return rc;
        bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        /* a plain number is an index; a quoted string must name a device */
        if ((plain && all_digits(*out, strlen(*out))) || valid_device_ref(*out))
                return 0;
        return kdev_ycfg_fail(c, node,
                              "unsupported device \"%s\" (expected a GPU index, a MIG index "
                              "\"<gpu>:<mig>\", a GPU UUID or a MIG UUID)",
                              *out);
}

static int read_rr_devices(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_replicated_resource *r = obj;
        if (node->type == YAML_SEQUENCE_NODE) {
                r->devices_kind = KDEV_NVIDIA_DEVICES_LIST;
                return kdev_ycfg_list(c, node, 1, SHARING_DEVICES_MAX, sizeof(char *),
                                      (void **)&r->devices, &r->n_devices, read_device_ref);
        }
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        char msg[MSG_MAX];
        if (strcmp(s, "all") == 0) {
                r->devices_kind = KDEV_NVIDIA_DEVICES_ALL;
        } else if (plain && all_digits(s, strlen(s))) {
                if (parse_uint(s, 1, INT_MAX, &r->devices_count, msg) < 0)
                        rc = kdev_ycfg_fail(c, node, "a count of devices must be > 0, got %s", s);
                r->devices_kind = KDEV_NVIDIA_DEVICES_COUNT;
        } else {
                rc = kdev_ycfg_fail(c, node,
                                    "must be \"all\", a positive count or a list of devices, got "
                                    "\"%s\"",
                                    s);
        }
        free(s);
        return rc;
}

static const struct kdev_ycfg_field rr_fields[] = {
        {"name", true, read_rr_name},
        {"rename", false, read_rr_rename},
        {"devices", false, read_rr_devices},
        {"replicas", true, read_rr_replicas},
};

static int read_rr(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_replicated_resource *r = obj;
        r->line = kdev_ycfg_line(node);
        r->column = kdev_ycfg_column(node);
        r->devices_kind = KDEV_NVIDIA_DEVICES_ALL;
        return kdev_ycfg_mapping(c, node, rr_fields, sizeof(rr_fields) / sizeof(rr_fields[0]), r);
}

static int read_rep_rename_default(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_bool(c, node, &((struct kdev_nvidia_replicated *)obj)->rename_by_default);
}

static int read_rep_fail_gt1(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        bool b = false;
        int rc = read_bool(c, node, &b);
        if (rc == 0)
                ((struct kdev_nvidia_replicated *)obj)->fail_requests_greater_than_one = b;
        return rc;
}

/* A resource may be named by several entries only when each selects part of
 * its devices (kdev: different replica counts per GPU); an entry with
 * devices "all" must be the only one for its name. Reported at the later
 * entry's name. */
static int check_rep_duplicates(struct kdev_ycfg *c, yaml_node_t *node,
                                const struct kdev_nvidia_replicated *r)
{
        for (size_t j = 1; j < r->n_resources; j++) {
                const struct kdev_nvidia_replicated_resource *b = &r->resources[j];
                for (size_t i = 0; i < j; i++) {
                        const struct kdev_nvidia_replicated_resource *a = &r->resources[i];
                        if (strcmp(a->name, b->name) != 0 ||
                            (a->devices_kind != KDEV_NVIDIA_DEVICES_ALL &&
                             b->devices_kind != KDEV_NVIDIA_DEVICES_ALL))
                                continue;
                        yaml_node_t *item = yaml_document_get_node(
                                &c->doc, node->data.sequence.items.start[j]);
                        yaml_node_t *name = item ? kdev_ycfg_lookup(c, item, "name") : NULL;
                        kdev_ycfg_path_push(c, "[%zu].name", j);
                        return kdev_ycfg_fail(c, name ? name : node,
                                              "%s is already shared by resources[%zu]; with "
                                              "devices \"all\" a resource can be shared once",
                                              b->name, i);
                }
        }
        return 0;
}

static int read_rep_resources(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_replicated *r = obj;
        int rc = kdev_ycfg_list(c, node, 1, SHARING_RESOURCES_MAX, sizeof(*r->resources),
                                (void **)&r->resources, &r->n_resources, read_rr);
        return rc < 0 ? rc : check_rep_duplicates(c, node, r);
}

static const struct kdev_ycfg_field rep_fields[] = {
        {"renameByDefault", false, read_rep_rename_default},
        {"failRequestsGreaterThanOne", false, read_rep_fail_gt1},
        {"resources", true, read_rep_resources},
};

static int read_replicated(struct kdev_ycfg *c, yaml_node_t *node,
                           struct kdev_nvidia_replicated *r)
{
        replicated_clear(r);
        r->present = true;
        return kdev_ycfg_mapping(c, node, rep_fields, sizeof(rep_fields) / sizeof(rep_fields[0]),
                                 r);
}

static int read_time_slicing(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_replicated(c, node, &((struct kdev_nvidia_config *)obj)->time_slicing);
}

static int read_mps(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_replicated(c, node, &((struct kdev_nvidia_config *)obj)->mps);
}

static const struct kdev_ycfg_field sharing_fields[] = {
        {"timeSlicing", false, read_time_slicing},
        {"mps", false, read_mps},
};

static int read_sharing(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, sharing_fields,
                                 sizeof(sharing_fields) / sizeof(sharing_fields[0]),
                                 file_cfg(obj));
}

/* imex */
static int read_channel(struct kdev_ycfg *c, yaml_node_t *node, void *elem)
{
        return kdev_ycfg_uint(c, node, 0, INT_MAX, elem);
}

static int read_imex_channels(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_config *cfg = obj;
        unsigned *ids = NULL;
        size_t n = 0;
        if (absent_null(c, node))
                return 0;
        int rc = kdev_ycfg_list(c, node, 0, 64, sizeof(unsigned), (void **)&ids, &n,
                                read_channel);
        if (rc < 0) {
                free(ids);
                return rc;
        }
        char msg[MSG_MAX];
        rc = assign_channels(cfg, KDEV_NVIDIA_SRC_FILE, ids, n, msg);
        if (rc == -ENOMEM)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        return rc < 0 ? kdev_ycfg_fail(c, node, "%s", msg) : 0;
}

static const struct kdev_ycfg_field imex_fields[] = {
        {"channelIDs", false, read_imex_channels},
        {"required", false, read_imex_required},
};

static int read_imex(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        if (absent_null(c, node)) {
                file_cfg(obj);
                return 0;
        }
        return kdev_ycfg_mapping(c, node, imex_fields, sizeof(imex_fields) / sizeof(imex_fields[0]),
                                 file_cfg(obj));
}

/* health (kdev) */
static int read_seconds(struct kdev_ycfg *c, yaml_node_t *node, void *obj, enum kdev_nvidia_opt o)
{
        struct kdev_nvidia_config *cfg = obj;
        unsigned v;
        int rc = kdev_ycfg_uint(c, node, 1, KDEV_NVIDIA_HEALTH_SECONDS_MAX, &v);
        if (rc == 0 && take(cfg, o, KDEV_NVIDIA_SRC_FILE)) {
                if (o == KDEV_NVIDIA_OPT_PROBE_INTERVAL)
                        cfg->probe_interval = v;
                else
                        cfg->quiet_period = v;
        }
        return rc;
}

static int read_probe_interval(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_seconds(c, node, obj, KDEV_NVIDIA_OPT_PROBE_INTERVAL);
}

static int read_quiet_period(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return read_seconds(c, node, obj, KDEV_NVIDIA_OPT_QUIET_PERIOD);
}

static const struct kdev_ycfg_field health_fields[] = {
        {"probeInterval", false, read_probe_interval},
        {"quietPeriod", false, read_quiet_period},
};

static int read_health(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, health_fields,
                                 sizeof(health_fields) / sizeof(health_fields[0]), file_cfg(obj));
}

static const struct kdev_ycfg_field top_fields[] = {
        {"flags", false, read_flags},
        {"resources", false, read_resources},
        {"sharing", false, read_sharing},
        {"imex", false, read_imex},
        {"health", false, read_health},
};

void kdev_nvidia_config_sections(struct kdev_nvidia_config *cfg, struct kdev_config_sections *out)
{
        out->fields = top_fields;
        out->n_fields = sizeof(top_fields) / sizeof(top_fields[0]);
        out->obj = cfg;
}

/* --- finishing ------------------------------------------------------------------- */

int kdev_nvidia_config_finish(struct kdev_nvidia_config *cfg, bool have_file,
                              struct kdev_err *err)
{
        if (!cfg->dev_root || cfg->dev_root[0] == '\0') {
                if (set_str(&cfg->dev_root, cfg->driver_root) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        cfg->wanted = !have_file || cfg->file_sections || cfg->flag_given;

        bool mps = false;
        for (size_t i = 0; cfg->mps.present && i < cfg->mps.n_resources; i++)
                mps = mps || cfg->mps.resources[i].replicas > 1;
        if (mps && cfg->mig_strategy == KDEV_NVIDIA_MIG_MIXED)
                return kdev_err_set(err, EINVAL,
                                    "using --mig-strategy=mixed is not supported with MPS");
        if (mps && cfg->mps_root[0] == '\0')
                return kdev_err_set(err, EINVAL, "using MPS requires --mps-root to be specified");
        if (cfg->discovery == KDEV_NVIDIA_DISCOVERY_TEGRA) {
                if (cfg->device_list_strategies & KDEV_NVIDIA_LIST_CDI)
                        return kdev_err_set(err, EINVAL,
                                            "CDI --device-list-strategy options are only "
                                            "supported on NVML-based systems");
                return kdev_err_set(err, EINVAL,
                                    "deviceDiscoveryStrategy tegra is not supported by kdev "
                                    "(NVML only)");
        }
        return 0;
}

const char *kdev_nvidia_mig_strategy_name(enum kdev_nvidia_mig_strategy s)
{
        return (unsigned)s < 3 ? mig_names[s] : "?";
}

const char *kdev_nvidia_id_strategy_name(enum kdev_nvidia_id_strategy s)
{
        return (unsigned)s < 2 ? id_names[s] : "?";
}

char *kdev_nvidia_list_strategies_text(unsigned mask, char *buf, size_t size)
{
        size_t used = 0;
        if (size)
                buf[0] = '\0';
        for (size_t i = 0; i < 4 && size; i++) {
                if (!(mask & (1u << i)))
                        continue;
                int w = snprintf(buf + used, size - used, "%s%s", used ? "," : "", list_names[i]);
                if (w < 0 || (size_t)w >= size - used)
                        break;
                used += (size_t)w;
        }
        return buf;
}
