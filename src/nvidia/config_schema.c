/* NVIDIA backend configuration: the schema of its sections of kdev's config
 * file (`flags`, `resources`, `sharing`, `imex`, `health`; see config.h),
 * read strictly with the yamlcfg engine (config/yamlcfg.h). */
#include "nvidia/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"
#include "config/yamlcfg.h"
#include "nvidia/config_internal.h"

/* Upper bound of sharing.*.resources[].replicas (NVIDIA has none). One GPU
 * at the bound is ~270 KB of ListAndWatch; the product over a node's devices
 * is checked where it matters, by the runtime's 4 MiB limit (e.g. 8 GPUs x
 * 4096 fit, 16 GPUs x 4096 with NUMA topology do not: test_nvidia_sharing). */
#define REPLICAS_MAX 4096
#define SHARING_RESOURCES_MAX 256
#define SHARING_DEVICES_MAX 1024

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
            KDEV_NVCFG_LOOKUP(nulls, (const char *)node->data.scalar.value) < 0)
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
                if (KDEV_NVCFG_LOOKUP(nulls, (const char *)node->data.scalar.value) >= 0)
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
        if (plain && KDEV_NVCFG_LOOKUP(t, s) >= 0)
                *out = true;
        else if (plain && KDEV_NVCFG_LOOKUP(f, s) >= 0)
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
        char msg[KDEV_NVCFG_MSG_MAX];
        rc = kdev_nvcfg_set_text(cfg, o, KDEV_NVIDIA_SRC_FILE, s, msg);
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
                kdev_nvcfg_assign_bool(obj, o, KDEV_NVIDIA_SRC_FILE, b);
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
        char msg[KDEV_NVCFG_MSG_MAX];
        rc = kdev_nvcfg_parse_list_item(s, elem, msg);
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
        kdev_nvcfg_assign_mask(cfg, KDEV_NVIDIA_SRC_FILE, mask);
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
            kdev_nvcfg_add_warning(cfg, "Customizing the 'resources' field is not yet supported "
                                        "in the config. Ignoring...") < 0)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        return rc;
}

/* sharing.{timeSlicing,mps} (NVIDIA replicas.go). */

/* Adds "nvidia.com/" to a name without '/' and checks the result. */
int kdev_nvcfg_read_resource_name(struct kdev_ycfg *c, yaml_node_t *node, char **out)
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
        return kdev_nvcfg_read_resource_name(c, node,
                                             &((struct kdev_nvidia_replicated_resource *)obj)->name);
}

static int read_rr_rename(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_nvcfg_read_resource_name(c, node,
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
        char msg[KDEV_NVCFG_MSG_MAX];
        if (strcmp(s, "all") == 0) {
                r->devices_kind = KDEV_NVIDIA_DEVICES_ALL;
        } else if (plain && all_digits(s, strlen(s))) {
                if (kdev_nvcfg_parse_uint(s, 1, INT_MAX, &r->devices_count, msg) < 0)
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

yaml_node_t *kdev_nvcfg_item_name(struct kdev_ycfg *c, yaml_node_t *list, size_t j)
{
        yaml_node_t *item = yaml_document_get_node(&c->doc, list->data.sequence.items.start[j]);
        yaml_node_t *name = item ? kdev_ycfg_lookup(c, item, "name") : NULL;
        kdev_ycfg_path_push(c, "[%zu].name", j);
        return name ? name : list;
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
                        return kdev_ycfg_fail(c, kdev_nvcfg_item_name(c, node, j),
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
        kdev_nvcfg_replicated_clear(r);
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
        char msg[KDEV_NVCFG_MSG_MAX];
        rc = kdev_nvcfg_assign_channels(cfg, KDEV_NVIDIA_SRC_FILE, ids, n, msg);
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
        if (rc == 0 && kdev_nvcfg_take(cfg, o, KDEV_NVIDIA_SRC_FILE)) {
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

/* usage (kdev) */
static int read_usage_interval(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_config *cfg = obj;
        unsigned v;
        int rc = kdev_ycfg_uint(c, node, 0, KDEV_NVIDIA_USAGE_SECONDS_MAX, &v);
        if (rc == 0 && kdev_nvcfg_take(cfg, KDEV_NVIDIA_OPT_USAGE_INTERVAL, KDEV_NVIDIA_SRC_FILE))
                cfg->usage_interval = v;
        return rc;
}

static const struct kdev_ycfg_field usage_fields[] = {
        {"interval", false, read_usage_interval},
};

static int read_usage(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, usage_fields,
                                 sizeof(usage_fields) / sizeof(usage_fields[0]), file_cfg(obj));
}

static const struct kdev_ycfg_field top_fields[] = {
        {"flags", false, read_flags},
        {"resources", false, read_resources},
        {"sharing", false, read_sharing},
        {"imex", false, read_imex},
        {"health", false, read_health},
        {"usage", false, read_usage},
        {"isolation", false, kdev_nvcfg_read_isolation},
};

void kdev_nvidia_config_sections(struct kdev_nvidia_config *cfg, struct kdev_config_sections *out)
{
        out->fields = top_fields;
        out->n_fields = sizeof(top_fields) / sizeof(top_fields[0]);
        out->obj = cfg;
}
