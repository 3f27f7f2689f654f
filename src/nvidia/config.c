/* NVIDIA backend configuration: defaults, value checks and the assignment
 * of option values by source (see config.h and config_internal.h). The file
 * sections are read in config_schema.c, the environment and command-line
 * flags in config_env.c. */
#include "nvidia/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvidia/config_internal.h"
#include "nvidia/driver_files.h"

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

int kdev_nvcfg_add_warning(struct kdev_nvidia_config *cfg, const char *fmt, ...)
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

bool kdev_nvcfg_take(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                     enum kdev_nvidia_src s)
{
        if (s < cfg->src[o])
                return false;
        cfg->src[o] = s;
        return true;
}

void kdev_nvcfg_replicated_clear(struct kdev_nvidia_replicated *r)
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
        free(cfg->share_root);
        free(cfg->share_library);
        kdev_nvcfg_isolation_clear(&cfg->isolation);
        kdev_nvcfg_replicated_clear(&cfg->time_slicing);
        kdev_nvcfg_replicated_clear(&cfg->mps);
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
            set_str(&cfg->proc_root, KDEV_NVIDIA_DEFAULT_PROC_ROOT) < 0 ||
            set_str(&cfg->share_root, KDEV_NVIDIA_DEFAULT_SHARE_ROOT) < 0) {
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
        vsnprintf(msg, KDEV_NVCFG_MSG_MAX, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static const char *const mig_names[] = {"none", "single", "mixed"};
static const char *const discovery_names[] = {"auto", "nvml", "tegra"};
static const char *const id_names[] = {"uuid", "index"};
static const char *const policy_names[] = {"distributed", "packed"};
static const char *const list_names[] = {"envvar", "volume-mounts", "cdi-annotations",
                                         "cdi-cri"};

int kdev_nvcfg_lookup(const char *const *names, size_t n, const char *v)
{
        for (size_t i = 0; i < n; i++) {
                if (strcmp(names[i], v) == 0)
                        return (int)i;
        }
        return -1;
}

int kdev_nvcfg_parse_list_item(const char *v, unsigned *bit, char *msg)
{
        int i = KDEV_NVCFG_LOOKUP(list_names, v);
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
        if (KDEV_NVCFG_LOOKUP(t, v) >= 0) {
                *out = true;
                return 0;
        }
        if (KDEV_NVCFG_LOOKUP(f, v) >= 0) {
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
int kdev_nvcfg_parse_uint(const char *v, unsigned min, unsigned max, unsigned *out, char *msg)
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
        case KDEV_NVIDIA_OPT_SHARE_ROOT: return &cfg->share_root;
        case KDEV_NVIDIA_OPT_SHARE_LIBRARY: return &cfg->share_library;
        default: return NULL;
        }
}

void kdev_nvcfg_assign_bool(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                            enum kdev_nvidia_src s, bool v)
{
        if (kdev_nvcfg_take(cfg, o, s))
                *bool_field(cfg, o) = v;
}

void kdev_nvcfg_assign_mask(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s,
                            unsigned mask)
{
        enum kdev_nvidia_opt o = KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY;
        bool append = s == KDEV_NVIDIA_SRC_FLAG && cfg->src[o] == KDEV_NVIDIA_SRC_FLAG;
        if (kdev_nvcfg_take(cfg, o, s))
                cfg->device_list_strategies = append ? cfg->device_list_strategies | mask : mask;
}

int kdev_nvcfg_assign_channels(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s,
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
        int rc = kdev_nvcfg_parse_list_item(item, &bit, msg);
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
        int rc = kdev_nvcfg_parse_uint(item, 0, INT_MAX, &v, msg);
        if (rc < 0)
                return rc;
        unsigned *n = realloc(a->ids, (a->n + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        a->ids = n;
        a->ids[a->n++] = v;
        return 0;
}

int kdev_nvcfg_set_text(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                        enum kdev_nvidia_src s, const char *v, char *msg)
{
        int i, rc;
        bool b = false;
        unsigned u = 0;
        switch (o) {
        case KDEV_NVIDIA_OPT_MIG_STRATEGY:
                if ((i = KDEV_NVCFG_LOOKUP(mig_names, v)) < 0)
                        return bad(msg, "invalid MIG strategy: %s (expected none, single or mixed)",
                                   v);
                if (kdev_nvcfg_take(cfg, o, s))
                        cfg->mig_strategy = (enum kdev_nvidia_mig_strategy)i;
                return 0;
        case KDEV_NVIDIA_OPT_DISCOVERY:
                if ((i = KDEV_NVCFG_LOOKUP(discovery_names, v)) < 0)
                        return bad(msg,
                                   "invalid device discovery strategy: %s (expected auto, nvml "
                                   "or tegra)",
                                   v);
                if (kdev_nvcfg_take(cfg, o, s))
                        cfg->discovery = (enum kdev_nvidia_discovery)i;
                return 0;
        case KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY:
                if ((i = KDEV_NVCFG_LOOKUP(id_names, v)) < 0)
                        return bad(msg, "invalid device ID strategy: %s (expected uuid or index)",
                                   v);
                if (kdev_nvcfg_take(cfg, o, s))
                        cfg->id_strategy = (enum kdev_nvidia_id_strategy)i;
                return 0;
        case KDEV_NVIDIA_OPT_SHARED_POLICY:
                if ((i = KDEV_NVCFG_LOOKUP(policy_names, v)) < 0)
                        return bad(msg,
                                   "invalid allocation policy: %s (expected distributed or "
                                   "packed)",
                                   v);
                if (kdev_nvcfg_take(cfg, o, s))
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
                kdev_nvcfg_assign_bool(cfg, o, s, b);
                return 0;
        case KDEV_NVIDIA_OPT_DRIVER_ROOT:
        case KDEV_NVIDIA_OPT_CTK_PATH:
        case KDEV_NVIDIA_OPT_CONTAINER_DRIVER_ROOT:
        case KDEV_NVIDIA_OPT_CDI_DIR:
        case KDEV_NVIDIA_OPT_PROC_ROOT:
        case KDEV_NVIDIA_OPT_SHARE_ROOT:
        case KDEV_NVIDIA_OPT_SHARE_LIBRARY:
        case KDEV_NVIDIA_OPT_DEV_ROOT:
        case KDEV_NVIDIA_OPT_MPS_ROOT:
                rc = check_abs(v, o == KDEV_NVIDIA_OPT_DEV_ROOT || o == KDEV_NVIDIA_OPT_MPS_ROOT,
                               msg);
                if (rc < 0)
                        return rc;
                if (kdev_nvcfg_take(cfg, o, s) && set_str(str_field(cfg, o), v) < 0)
                        return -ENOMEM;
                return 0;
        case KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX:
                if ((rc = check_prefix(v, msg)) < 0)
                        return rc;
                if (kdev_nvcfg_take(cfg, o, s) && set_str(str_field(cfg, o), v) < 0)
                        return -ENOMEM;
                return 0;
        case KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY: {
                unsigned mask = 0;
                if ((rc = split_list(v, list_item_cb, &mask, msg)) < 0)
                        return rc;
                if (!mask)
                        return bad(msg, "no strategy given");
                kdev_nvcfg_assign_mask(cfg, s, mask);
                return 0;
        }
        case KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS: {
                struct ids_acc a = {NULL, 0};
                if ((rc = split_list(v, channel_item_cb, &a, msg)) < 0) {
                        free(a.ids);
                        return rc;
                }
                return kdev_nvcfg_assign_channels(cfg, s, a.ids, a.n, msg);
        }
        case KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS:
        case KDEV_NVIDIA_OPT_CDI_DISABLE_HOOKS: {
                unsigned mask = 0;
                bool features = o == KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS;
                rc = features ? kdev_nvidia_cdi_features_parse(v, &mask, msg, KDEV_NVCFG_MSG_MAX)
                              : kdev_nvidia_cdi_hooks_parse(v, &mask, msg, KDEV_NVCFG_MSG_MAX);
                if (rc < 0)
                        return rc;
                /* a string slice (urfave/cli): a repeated flag adds to the list */
                bool append = s == KDEV_NVIDIA_SRC_FLAG && cfg->src[o] == KDEV_NVIDIA_SRC_FLAG;
                unsigned *field = features ? &cfg->cdi_features : &cfg->cdi_disabled_hooks;
                if (kdev_nvcfg_take(cfg, o, s))
                        *field = append ? *field | mask : mask;
                return 0;
        }
        case KDEV_NVIDIA_OPT_USAGE_INTERVAL:
                if ((rc = kdev_nvcfg_parse_uint(v, 0, KDEV_NVIDIA_USAGE_SECONDS_MAX, &u, msg)) < 0)
                        return rc;
                if (kdev_nvcfg_take(cfg, o, s))
                        cfg->usage_interval = u;
                return 0;
        case KDEV_NVIDIA_OPT_PROBE_INTERVAL:
        case KDEV_NVIDIA_OPT_QUIET_PERIOD:
                if ((rc = kdev_nvcfg_parse_uint(v, 1, KDEV_NVIDIA_HEALTH_SECONDS_MAX, &u,
                                                msg)) < 0)
                        return rc;
                if (kdev_nvcfg_take(cfg, o, s)) {
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

bool kdev_nvcfg_is_bool_opt(enum kdev_nvidia_opt o)
{
        return o == KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR || o == KDEV_NVIDIA_OPT_GDRCOPY ||
               o == KDEV_NVIDIA_OPT_GDS || o == KDEV_NVIDIA_OPT_MOFED ||
               o == KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS || o == KDEV_NVIDIA_OPT_IMEX_REQUIRED;
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
        int irc = kdev_nvcfg_isolation_check(cfg, err);
        if (irc < 0)
                return irc;

        bool mps = kdev_nvidia_sharing_strategy(cfg) == KDEV_NVIDIA_SHARING_MPS;
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

static bool any_replicated(const struct kdev_nvidia_replicated *r)
{
        for (size_t i = 0; r->present && i < r->n_resources; i++) {
                if (r->resources[i].replicas > 1)
                        return true;
        }
        return false;
}

enum kdev_nvidia_sharing_strategy kdev_nvidia_sharing_strategy(const struct kdev_nvidia_config *cfg)
{
        if (any_replicated(&cfg->mps))
                return KDEV_NVIDIA_SHARING_MPS;
        if (any_replicated(&cfg->time_slicing))
                return KDEV_NVIDIA_SHARING_TIME_SLICING;
        return KDEV_NVIDIA_SHARING_NONE;
}

const char *kdev_nvidia_sharing_strategy_name(enum kdev_nvidia_sharing_strategy s)
{
        switch (s) {
        case KDEV_NVIDIA_SHARING_TIME_SLICING: return "time-slicing";
        case KDEV_NVIDIA_SHARING_MPS: return "mps";
        case KDEV_NVIDIA_SHARING_NONE: break;
        }
        return "none";
}

const struct kdev_nvidia_replicated *kdev_nvidia_replicated_section(const struct kdev_nvidia_config *cfg)
{
        return cfg->mps.present ? &cfg->mps : &cfg->time_slicing;
}

bool kdev_nvidia_replicated_fail_gt1(const struct kdev_nvidia_config *cfg,
                                     const struct kdev_nvidia_replicated *r)
{
        if (r->fail_requests_greater_than_one >= 0)
                return r->fail_requests_greater_than_one > 0;
        return r == &cfg->mps;
}
