/* NVIDIA resources from discovered GPUs (see resources.h). */
#include "nvidia/resources.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "nvidia/mig.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/preferred.h"
#include "nvidia/roots.h"

void kdev_nvidia_rdata_free(void *data)
{
        struct kdev_nvidia_rdata *d = data;
        if (!d)
                return;
        free(d->infos);
        free(d->dev_root);
        free(d->dev_lookup);
        free(d->annotation_prefix);
        free(d->imex_channels);
        kdev_nvidia_pref_free(d->pref);
        kdev_nvidia_share_free(d->share);
        free(d->mps_root);
        free(d);
}

char *kdev_nvidia_join(const char *a, const char *b)
{
        char *out = malloc(strlen(a) + strlen(b) + 2);
        if (out)
                kdev_nvidia_join_to(out, a, b);
        return out;
}

size_t kdev_nvidia_join_to(char *out, const char *a, const char *b)
{
        size_t n = 0;
        const char *parts[2] = {a, b};
        for (size_t k = 0; k < 2; k++) {
                for (const char *p = parts[k]; *p; p++) {
                        if (*p == '/' && n > 0 && out[n - 1] == '/')
                                continue;
                        if (n == 0 && *p != '/')
                                out[n++] = '/';
                        out[n++] = *p;
                }
                if (k == 0 && (n == 0 || out[n - 1] != '/'))
                        out[n++] = '/';
        }
        while (n > 1 && out[n - 1] == '/')
                n--;
        out[n] = '\0';
        return n;
}

int kdev_nvidia_uuid4(char *buf, size_t size)
{
        unsigned char r[16];
        size_t got = 0;
        if (size < 37)
                return -ENOBUFS;
        while (got < sizeof(r)) {
                ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)n;
        }
        r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
        r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* variant 10 */
        snprintf(buf, size,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
                 r[14], r[15]);
        return 0;
}

const struct kdev_nvidia_devinfo *kdev_nvidia_device_info(const struct kdev_resource *r,
                                                          const struct kdev_device *d)
{
        if (!r || !d || r->ops != &kdev_nvidia_resource_ops)
                return NULL;
        return d->data;
}

static bool same_str(const char *a, const char *b)
{
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_devinfo(const struct kdev_nvidia_devinfo *a, const struct kdev_nvidia_devinfo *b)
{
        if (!a || !b)
                return a == b;
        return strcmp(a->uuid, b->uuid) == 0 && strcmp(a->parent_uuid, b->parent_uuid) == 0 &&
               a->gi == b->gi && a->ci == b->ci && strcmp(a->index, b->index) == 0 &&
               a->minor == b->minor && a->replica == b->replica && a->gi_cap == b->gi_cap &&
               a->ci_cap == b->ci_cap && a->incomplete == b->incomplete &&
               a->withdrawn == b->withdrawn;
}

bool kdev_nvidia_resource_same(const struct kdev_resource *a, const struct kdev_resource *b)
{
        if (a->ops != &kdev_nvidia_resource_ops || b->ops != &kdev_nvidia_resource_ops)
                return false;
        const struct kdev_nvidia_rdata *x = a->ops_data, *y = b->ops_data;
        if (!x || !y)
                return x == y;
        if (x->strategies != y->strategies || x->id_strategy != y->id_strategy ||
            x->pass_device_specs != y->pass_device_specs || x->gdrcopy != y->gdrcopy ||
            x->gds != y->gds || x->mofed != y->mofed || x->fail_gt1 != y->fail_gt1 ||
            !same_str(x->dev_root, y->dev_root) || !same_str(x->dev_lookup, y->dev_lookup) ||
            !same_str(x->annotation_prefix, y->annotation_prefix) ||
            !kdev_nvidia_share_same(x->share, y->share) ||
            x->n_imex_channels != y->n_imex_channels ||
            (x->n_imex_channels && memcmp(x->imex_channels, y->imex_channels,
                                          x->n_imex_channels * sizeof(x->imex_channels[0]))))
                return false;
        if (a->n_devices != b->n_devices)
                return false;
        for (size_t i = 0; i < a->n_devices; i++) {
                if (!same_devinfo(a->devices[i].data, b->devices[i].data))
                        return false;
        }
        return true;
}

/* Whether some device of |set| that is not withdrawn has the UUID |uuid|. */
/* What a build has, for the carry-over rules below: the UUIDs of its
 * NVIDIA devices that are not withdrawn, and the IDs of each resource, as
 * they were before anything was appended ("<resource>\x1f<ID>"), in one
 * open-addressing hash set, so that each lookup costs O(1) (a linear search
 * made a rebuild at 8 GPUs x 4096 replicas take seconds). */
struct built {
        char **slot; /* owned keys; NULL: empty */
        size_t mask;
};

static void built_free(struct built *b)
{
        for (size_t i = 0; b->slot && i <= b->mask; i++)
                free(b->slot[i]);
        free(b->slot);
        b->slot = NULL;
}

static uint32_t key_hash(char kind, const char *a, const char *b)
{
        return (kdev_str_hash(a) * 31u ^ kdev_str_hash(b)) + (uint32_t)kind;
}

static bool key_is(const char *k, char kind, const char *a, const char *b)
{
        size_t la = strlen(a);
        return k[0] == kind && strncmp(k + 1, a, la) == 0 && k[1 + la] == '\x1f' &&
               strcmp(k + 2 + la, b) == 0;
}

static bool built_has(const struct built *b, char kind, const char *a, const char *c)
{
        for (size_t i = key_hash(kind, a, c) & b->mask; b->slot[i]; i = (i + 1) & b->mask)
                if (key_is(b->slot[i], kind, a, c))
                        return true;
        return false;
}

static int built_add(struct built *b, char kind, const char *a, const char *c)
{
        size_t i = key_hash(kind, a, c) & b->mask;
        for (; b->slot[i]; i = (i + 1) & b->mask)
                if (key_is(b->slot[i], kind, a, c))
                        return 0;
        if (asprintf(&b->slot[i], "%c%s\x1f%s", kind, a, c) < 0) {
                b->slot[i] = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Fills |b| from |set|: 'u' keys (UUID of a device not withdrawn, "") and
 * 'i' keys (resource name, device ID). Returns 0 or -ENOMEM. */
static int built_init(struct built *b, const struct kdev_resource_set *set)
{
        size_t n = 0;
        for (size_t r = 0; r < set->n_resources; r++)
                n += set->resources[r].n_devices;
        size_t cap = 16;
        while (cap < 4 * n + 2)
                cap *= 2;
        b->slot = calloc(cap, sizeof(*b->slot));
        b->mask = cap - 1;
        if (!b->slot)
                return -ENOMEM;
        for (size_t r = 0; r < set->n_resources; r++) {
                const struct kdev_resource *res = &set->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        const struct kdev_nvidia_devinfo *in =
                                kdev_nvidia_device_info(res, &res->devices[i]);
                        if (built_add(b, 'i', res->name, res->devices[i].id) < 0 ||
                            (in && !in->withdrawn && built_add(b, 'u', in->uuid, "") < 0)) {
                                built_free(b);
                                return -ENOMEM;
                        }
                }
        }
        return 0;
}

/* Whether a device of |set| as built has the UUID |uuid| (not withdrawn). */
static bool uuid_live(const struct built *b, const char *uuid)
{
        return built_has(b, 'u', uuid, "");
}

/* Whether resource |name| of the set as built has device |id|. */
static bool has_id(const struct built *b, const char *name, const char *id)
{
        return built_has(b, 'i', name, id);
}

/* Appends an Unhealthy copy of |src| (devinfo |in|) to |r|: withdrawn (gone
 * from the node), or, when |fault| is not 0, carried from the previous build
 * for a GPU that discovery read faulted (incomplete, that fault). */
static int append_copy(struct kdev_resource *r, const struct kdev_device *src,
                       const struct kdev_nvidia_devinfo *in, int fault)
{
        struct kdev_nvidia_rdata *d = r->ops_data;
        char *id = strdup(src->id);
        struct kdev_device *devs = id ? realloc(r->devices, (r->n_devices + 1) * sizeof(*devs))
                                      : NULL;
        if (devs)
                r->devices = devs;
        struct kdev_nvidia_devinfo *was = d->infos;
        struct kdev_nvidia_devinfo *infos =
                devs ? realloc(d->infos, (d->n_infos + 1) * sizeof(*infos)) : NULL;
        if (!infos) {
                free(id);
                return -ENOMEM;
        }
        d->infos = infos;
        /* one per device, same order: pointed to again only when they moved
         * (each append re-pointing every device made a rebuild that keeps
         * thousands of replicas quadratic) */
        for (size_t i = 0; infos != was && i < r->n_devices; i++)
                r->devices[i].data = &d->infos[i];
        d->infos[d->n_infos] = *in;
        if (fault) {
                d->infos[d->n_infos].incomplete = true;
                d->infos[d->n_infos].fault = fault;
                d->infos[d->n_infos].withdrawn = false;
        } else {
                d->infos[d->n_infos].withdrawn = true;
        }
        r->devices[r->n_devices] = (struct kdev_device){
                .id = id, .healthy = false, .numa_node = src->numa_node,
                .data = &d->infos[d->n_infos]};
        d->n_infos++;
        r->n_devices++;
        return 0;
}

/* The resource of |set| named like |was| (an NVIDIA resource of the
 * previous build): found, or, with |create|, appended empty with |was|'s
 * Allocate settings. Sets *|out| (NULL when absent and not created);
 * returns 0, 1 when it was created, or -ENOMEM. */
static int resource_for(struct kdev_resource_set *set, const struct kdev_resource *was,
                        bool create, struct kdev_resource **out)
{
        *out = NULL;
        for (size_t k = 0; k < set->n_resources; k++)
                if (strcmp(set->resources[k].name, was->name) == 0) {
                        *out = &set->resources[k];
                        return 0;
                }
        if (!create)
                return 0;
        char *name = strdup(was->name);
        struct kdev_nvidia_rdata *d = name ? kdev_nvidia_rdata_dup(was->ops_data) : NULL;
        struct kdev_resource *grown =
                d ? realloc(set->resources, (set->n_resources + 1) * sizeof(*grown)) : NULL;
        if (!grown) {
                free(name);
                kdev_nvidia_rdata_free(d);
                return -ENOMEM;
        }
        set->resources = grown;
        set->resources[set->n_resources] = (struct kdev_resource){
                .name = name, .ops = &kdev_nvidia_resource_ops, .ops_data = d};
        *out = &set->resources[set->n_resources++];
        return 1;
}

/* Whether the resource |res| of the new build has a device with ID |id|. */
int kdev_nvidia_keep_withdrawn(struct kdev_resource_set *set, const struct kdev_resource_set *old,
                               kdev_nvidia_keep_fn keep, void *arg, struct kdev_err *err)
{
        int kept = 0;
        struct built b = {0};
        if (old && keep && built_init(&b, set) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t w = 0; old && keep && w < old->n_resources; w++) {
                const struct kdev_resource *was = &old->resources[w];
                if (was->ops != &kdev_nvidia_resource_ops)
                        continue;
                struct kdev_resource *res;
                resource_for(set, was, false, &res);
                if (res && (res->ops != &kdev_nvidia_resource_ops ||
                            res->n_devices !=
                                    ((struct kdev_nvidia_rdata *)res->ops_data)->n_infos))
                        continue;
                for (size_t i = 0; i < was->n_devices; i++) {
                        const struct kdev_device *dev = &was->devices[i];
                        const struct kdev_nvidia_devinfo *in = dev->data;
                        if (!in || (res && has_id(&b, res->name, dev->id)) ||
                            uuid_live(&b, in->uuid) || !keep(arg, was->name, dev->id))
                                continue;
                        /* the resource's last device left: it is served on,
                         * with its withdrawn devices, until they are dropped */
                        if (resource_for(set, was, true, &res) < 0 ||
                            append_copy(res, dev, in, 0) < 0) {
                                built_free(&b);
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        }
                        kept++;
                }
        }
        built_free(&b);
        return kept;
}

/* What a rebuild's discovery |gpus| says of the GPUs without a UUID (lost
 * before their UUID was read): how many there are, and how many of the GPUs
 * it lacks were known lost already (their devices in |old| carried
 * incomplete with GPU_IS_LOST), each of which one of them stands for. */
struct unnamed {
        size_t n, known;
};

static bool gpu_missing(const struct kdev_gpu_set *gpus, const char *uuid)
{
        return !kdev_gpu_set_find(gpus, uuid);
}

static bool known_lost(const struct kdev_nvidia_devinfo *in)
{
        return in->incomplete && in->fault == (int)NVML_ERROR_GPU_IS_LOST;
}

static struct unnamed count_unnamed(const struct kdev_resource_set *old,
                                    const struct kdev_gpu_set *gpus)
{
        struct unnamed u = {0, 0};
        for (size_t i = 0; gpus && i < gpus->n_gpus; i++)
                u.n += !gpus->gpus[i].uuid[0];
        /* distinct parent GPUs: the first device of each counts */
        const char *seen[64];
        size_t n_seen = 0;
        for (size_t w = 0; u.n && old && w < old->n_resources; w++) {
                const struct kdev_resource *was = &old->resources[w];
                if (was->ops != &kdev_nvidia_resource_ops)
                        continue;
                for (size_t i = 0; i < was->n_devices; i++) {
                        const struct kdev_nvidia_devinfo *in = was->devices[i].data;
                        if (!in || in->withdrawn || !known_lost(in) ||
                            !gpu_missing(gpus, in->parent_uuid))
                                continue;
                        bool dup = false;
                        for (size_t k = 0; k < n_seen && !dup; k++)
                                dup = strcmp(seen[k], in->parent_uuid) == 0;
                        if (dup)
                                continue;
                        if (n_seen < sizeof(seen) / sizeof(seen[0]))
                                seen[n_seen++] = in->parent_uuid;
                        u.known++;
                }
        }
        return u;
}

/* The fault of GPU |uuid| (|in|: one of its devices in the old set) as
 * |gpus| reads it now: its NVML fault when it is there faulted; when it is
 * missing, GPU_IS_LOST if a GPU without a UUID may be it (|u|: one known
 * lost already is; another only while there are more GPUs without a UUID
 * than known lost ones), 0 otherwise (gone from the node: withdrawn). */
static int gpu_fault_now(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_devinfo *in,
                         struct unnamed u)
{
        const struct kdev_gpu *g = kdev_gpu_set_find(gpus, in->parent_uuid);
        if (g)
                return g->fault != NVML_SUCCESS ? (int)g->fault : 0;
        if (u.n && (known_lost(in) || u.n > u.known))
                return (int)NVML_ERROR_GPU_IS_LOST;
        return 0;
}

int kdev_nvidia_carry_faulted(struct kdev_resource_set *set, const struct kdev_resource_set *old,
                              const struct kdev_gpu_set *gpus, struct kdev_err *err)
{
        int carried = 0;
        struct unnamed u = count_unnamed(old, gpus);
        struct built b = {0};
        if (old && built_init(&b, set) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t w = 0; old && w < old->n_resources; w++) {
                const struct kdev_resource *was = &old->resources[w];
                if (was->ops != &kdev_nvidia_resource_ops)
                        continue;
                struct kdev_resource *res;
                resource_for(set, was, false, &res);
                if (res && res->ops != &kdev_nvidia_resource_ops)
                        continue;
                for (size_t i = 0; i < was->n_devices; i++) {
                        const struct kdev_device *dev = &was->devices[i];
                        const struct kdev_nvidia_devinfo *in = dev->data;
                        int fault = in && !in->withdrawn ? gpu_fault_now(gpus, in, u) : 0;
                        if (!fault || (res && has_id(&b, res->name, dev->id)) ||
                            uuid_live(&b, in->uuid))
                                continue;
                        if (resource_for(set, was, true, &res) < 0 ||
                            append_copy(res, dev, in, fault) < 0) {
                                built_free(&b);
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        }
                        carried++;
                }
        }
        built_free(&b);
        return carried;
}

static bool gpu_faulted(const struct kdev_resource_set *old, const char *parent)
{
        size_t n = 0;
        for (size_t r = 0; old && r < old->n_resources; r++) {
                const struct kdev_resource *res = &old->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        const struct kdev_device *d = &res->devices[i];
                        const struct kdev_nvidia_devinfo *in = kdev_nvidia_device_info(res, d);
                        if (!in || in->withdrawn || strcmp(in->parent_uuid, parent) != 0)
                                continue;
                        /* the GPU's own health: a replica held Unhealthy by
                         * its MPS daemon (nvidia/mps.h) is not a fault */
                        if (d->physical ? d->physical->healthy : d->healthy)
                                return false;
                        n++;
                }
        }
        return n > 0;
}

/* Whether |old| knows physical device |id| other than as withdrawn (a MIG
 * device destroyed and created again is new to the GPU's health). */
static bool known_live(const struct kdev_resource_set *old, const char *id)
{
        const struct kdev_physical *q = kdev_physical_find(old, id);
        if (!q || q->n_logical == 0)
                return q != NULL;
        const struct kdev_resource *r = &old->resources[q->logical[0].resource];
        const struct kdev_nvidia_devinfo *in =
                kdev_nvidia_device_info(r, &r->devices[q->logical[0].device]);
        return !in || !in->withdrawn;
}

size_t kdev_nvidia_carry_gpu_health(struct kdev_resource_set *set,
                                    const struct kdev_resource_set *old)
{
        size_t marked = 0;
        for (size_t r = 0; old && r < set->n_resources; r++) {
                struct kdev_resource *res = &set->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        struct kdev_device *d = &res->devices[i];
                        const struct kdev_nvidia_devinfo *in = kdev_nvidia_device_info(res, d);
                        struct kdev_physical *p = d->physical;
                        if (!in || in->withdrawn || !p || !p->healthy ||
                            known_live(old, p->id) || !gpu_faulted(old, in->parent_uuid))
                                continue;
                        marked += kdev_physical_set_health(set, p, false, NULL);
                }
        }
        return marked;
}

void kdev_nvidia_warnf(kdev_nvidia_warn_fn warn, void *arg, const char *fmt, ...)
{
        if (!warn)
                return;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        warn(arg, msg);
}

/* A warning of the build (kdev_nvidia_build_options.warn; |opts| may be NULL). */
#define warnf(opts, ...)                                                                   \
        kdev_nvidia_warnf((opts) ? (opts)->warn : NULL, (opts) ? (opts)->warn_arg : NULL,   \
                          __VA_ARGS__)

/* Is |path| an IMEX channel node: a character device (or, for tests, a
 * regular file)? Returns 1, 0 when absent, or a negative errno. */
static int channel_exists(const char *path, bool allow_regular)
{
        struct stat st;
        if (stat(path, &st) < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        if (S_ISCHR(st.st_mode) || (allow_regular && S_ISREG(st.st_mode)))
                return 1;
        return -ENODEV;
}

/* Resolves the configured IMEX channels into d->imex_channels. */
static int find_imex_channels(const struct kdev_nvidia_config *cfg,
                              const struct kdev_nvidia_build_options *opts,
                              struct kdev_nvidia_rdata *d, struct kdev_err *err)
{
        if (cfg->n_imex_channel_ids == 0)
                return 0;
        d->imex_channels = calloc(cfg->n_imex_channel_ids, sizeof(*d->imex_channels));
        if (!d->imex_channels)
                return kdev_err_set(err, ENOMEM, "out of memory");
        bool allow = opts && opts->allow_regular_files;
        for (size_t i = 0; i < cfg->n_imex_channel_ids; i++) {
                unsigned id = cfg->imex_channel_ids[i];
                char path[96];
                snprintf(path, sizeof(path), KDEV_NVIDIA_IMEX_CHANNEL_DIR "/channel%u", id);
                /* NVIDIA imex.go exists: under the container's dev root
                 * (the lookup root), then the path itself */
                char *host = kdev_nvidia_join(d->dev_lookup, path);
                if (!host)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                int rc = channel_exists(host, allow);
                const char *why = rc == -ENODEV ? "not a character device" : strerror(-rc);
                char where[PATH_MAX + 32];
                snprintf(where, sizeof(where), "%s: %s", host,
                         rc == 0 ? "no such file or directory" : why);
                if (rc <= 0 && strcmp(host, path) != 0) {
                        int rc2 = channel_exists(path, allow);
                        if (rc2 > 0)
                                rc = rc2;
                }
                free(host);
                if (rc > 0) {
                        d->imex_channels[d->n_imex_channels++] = id;
                        continue;
                }
                if (cfg->imex_required)
                        return kdev_err_set(err, ENOENT,
                                            "requested IMEX channel channel%u does not exist (%s)",
                                            id, where);
                warnf(opts, "Ignoring requested IMEX channel channel%u (%s)", id, where);
        }
        return 0;
}

/* --- building: resources under construction ------------------------------------ */

struct rbuild {
        struct kdev_resource *v;
        size_t n;
        size_t cap; /* devices each resource has room for */
};

static void rbuild_clear(struct rbuild *b)
{
        for (size_t i = 0; i < b->n; i++)
                kdev_resource_clear(&b->v[i]); /* frees the rdata through the ops */
        free(b->v);
        b->v = NULL;
        b->n = 0;
}

/* The resource |name| of |b|, created (settings copied from |tmpl|) when new. */
static struct kdev_resource *rbuild_get(struct rbuild *b, const char *name,
                                        const struct kdev_nvidia_rdata *tmpl)
{
        for (size_t i = 0; i < b->n; i++) {
                if (strcmp(b->v[i].name, name) == 0)
                        return &b->v[i];
        }
        struct kdev_resource *nv = realloc(b->v, (b->n + 1) * sizeof(*nv));
        if (!nv)
                return NULL;
        b->v = nv;
        struct kdev_nvidia_rdata *d = kdev_nvidia_rdata_dup(tmpl);
        if (!d)
                return NULL;
        struct kdev_resource *r = &b->v[b->n++];
        memset(r, 0, sizeof(*r));
        r->ops = &kdev_nvidia_resource_ops;
        r->ops_data = d;
        size_t cap = b->cap ? b->cap : 1;
        if (!(r->name = strdup(name)) || !(d->infos = calloc(cap, sizeof(*d->infos))) ||
            !(r->devices = calloc(cap, sizeof(*r->devices))))
                return NULL;
        return r;
}

/* Appends a device with a copy of |info| (ID = info->uuid) to |r|. */
static int rbuild_add(struct kdev_resource *r, const struct kdev_nvidia_devinfo *info,
                      bool healthy, int numa_node)
{
        struct kdev_nvidia_rdata *d = r->ops_data;
        struct kdev_device *dev = &r->devices[r->n_devices];
        if (!(dev->id = strdup(info->uuid)))
                return -ENOMEM;
        r->n_devices++;
        struct kdev_nvidia_devinfo *slot = &d->infos[d->n_infos++];
        *slot = *info;
        dev->healthy = healthy;
        dev->numa_node = numa_node;
        dev->data = slot;
        return 0;
}

/* The possible profiles with C == G of every MIG-capable GPU (NVIDIA
 * AddDefaultResourcesToConfig with go-nvlib VisitMigProfiles): the profile
 * names mixed turns into resources. GPUs with a fault are left out. */
struct profile_set {
        char (*names)[KDEV_NVIDIA_MIG_PROFILE_MAX];
        size_t n;
};

static bool profile_set_has(const struct profile_set *s, const char *name)
{
        for (size_t i = 0; i < s->n; i++) {
                if (strcmp(s->names[i], name) == 0)
                        return true;
        }
        return false;
}

static int possible_profiles(const struct kdev_gpu_set *gpus,
                             const struct kdev_nvidia_build_options *opts, struct profile_set *s,
                             struct kdev_err *err)
{
        size_t cap = 0;
        for (size_t i = 0; i < gpus->n_gpus; i++)
                cap += gpus->gpus[i].n_mig_profiles;
        if (cap == 0)
                return 0;
        if (!(s->names = calloc(cap, sizeof(*s->names))))
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (!g->mig_capable || g->fault != NVML_SUCCESS || g->n_mig_profiles == 0)
                        continue;
                if (g->memory_ret != NVML_SUCCESS)
                        return kdev_err_set(err, -kdev_nvml_errno(g->memory_ret),
                                            "error getting MIG profiles of GPU %u: error "
                                            "getting parent memory info: %s",
                                            g->index,
                                            kdev_nvml_builtin_strerror(g->memory_ret));
                for (size_t k = 0; k < g->n_mig_profiles; k++) {
                        const struct kdev_mig_profile *p = &g->mig_profiles[k];
                        unsigned slices = kdev_nvidia_mig_gi_slices(p->index);
                        if (slices == 0) {
                                warnf(opts,
                                      "GPU %u: unknown GPU instance profile index 0x%x; no "
                                      "resource for it",
                                      g->index, p->index);
                                continue;
                        }
                        /* the compute-instance profile with C == G */
                        static const unsigned ci_of[9] = {
                                0, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                                NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0,
                                NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
                                NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
                                NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE};
                        char name[KDEV_NVIDIA_MIG_PROFILE_MAX];
                        int rc = kdev_nvidia_mig_profile_name(p->index, ci_of[slices],
                                                              p->info.memorySizeMB,
                                                              g->memory_total, name,
                                                              sizeof(name), err);
                        if (rc < 0)
                                return kdev_err_wrap(err, "error getting MIG profiles of GPU %u",
                                                     g->index);
                        if (!profile_set_has(s, name))
                                snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", name);
                }
        }
        return 0;
}

static void whole_gpu_info(const struct kdev_gpu *g, struct kdev_nvidia_devinfo *info)
{
        memset(info, 0, sizeof(*info));
        snprintf(info->uuid, sizeof(info->uuid), "%s", g->uuid);
        snprintf(info->parent_uuid, sizeof(info->parent_uuid), "%s", g->uuid);
        info->gi = info->ci = KDEV_NVIDIA_NO_INSTANCE;
        snprintf(info->index, sizeof(info->index), "%u", g->index);
        info->minor = g->minor;
        info->replica = -1;
        info->memory = g->memory_total;
        info->cc_major = g->cc_major;
        info->cc_minor = g->cc_minor;
        info->incomplete = g->fault != NVML_SUCCESS;
        info->fault = (int)g->fault;
}

/* The MIG devices of the MIG-enabled GPUs, under migStrategy single or mixed. */
static int build_migs(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      const struct kdev_nvidia_build_options *opts,
                      const struct kdev_nvidia_rdata *tmpl, struct rbuild *b,
                      size_t *n_mig_devs, struct kdev_err *err)
{
        bool mixed = cfg->mig_strategy == KDEV_NVIDIA_MIG_MIXED;
        struct profile_set possible = {0};
        struct kdev_nvidia_mig_minors minors = {0};
        int rc = 0;
        if (mixed && (rc = possible_profiles(gpus, opts, &possible, err)) < 0)
                goto out;
        if (*n_mig_devs > 0 && (rc = kdev_nvidia_mig_minors_read(cfg->proc_root, &minors, err)) < 0)
                goto out;
        *n_mig_devs = 0;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0' || g->mig_current != NVML_DEVICE_MIG_ENABLE)
                        continue;
                for (size_t k = 0; k < g->n_migs; k++) {
                        const struct kdev_mig_device *m = &g->migs[k];
                        char profile[KDEV_NVIDIA_MIG_PROFILE_MAX];
                        char rname[KDEV_NVIDIA_MIG_PROFILE_MAX + 32];
                        if ((rc = kdev_nvidia_mig_device_profile(g, m, profile, sizeof(profile),
                                                                 err)) < 0)
                                goto out;
                        const char *name = KDEV_NVIDIA_GPU_RESOURCE;
                        if (mixed) {
                                bool same = kdev_nvidia_mig_gi_slices(m->gi_profile_index) ==
                                            kdev_nvidia_mig_ci_slices(m->ci_profile_index);
                                if (!same ||
                                    (g->fault == NVML_SUCCESS &&
                                     !profile_set_has(&possible, profile))) {
                                        rc = kdev_err_set(err, EINVAL,
                                                          "MIG profile '%s' does not match any "
                                                          "resource patterns",
                                                          profile);
                                        goto out;
                                }
                                kdev_nvidia_mig_resource_name(profile, rname, sizeof(rname));
                                name = rname;
                        }
                        struct kdev_nvidia_devinfo info;
                        whole_gpu_info(g, &info);
                        snprintf(info.uuid, sizeof(info.uuid), "%s", m->uuid);
                        info.memory = m->memory_total;
                        info.gi = m->gi_id;
                        info.ci = m->ci_id;
                        snprintf(info.index, sizeof(info.index), "%u:%u", g->index, m->index);
                        if ((rc = kdev_nvidia_mig_caps(&minors, g->minor, m->gi_id, m->ci_id,
                                                       &info.gi_cap, &info.ci_cap, err)) < 0)
                                goto out;
                        struct kdev_resource *r = rbuild_get(b, name, tmpl);
                        if (!r || rbuild_add(r, &info, g->fault == NVML_SUCCESS,
                                             g->numa_node) < 0) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                                goto out;
                        }
                        (*n_mig_devs)++;
                }
        }
out:
        free(possible.names);
        kdev_nvidia_mig_minors_clear(&minors);
        return rc;
}

/* NVIDIA assertAllMigDevicesAreValid and the uniformity rule of `single`
 * (internal/rm/device_map.go). */
static int check_migs(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      const struct kdev_nvidia_build_options *opts, size_t n_whole,
                      size_t n_mig_devs, struct kdev_err *err)
{
        bool single = cfg->mig_strategy == KDEV_NVIDIA_MIG_SINGLE;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0' || g->mig_current != NVML_DEVICE_MIG_ENABLE ||
                    g->n_migs > 0)
                        continue;
                if (g->fault != NVML_SUCCESS) {
                        /* faulted before its MIG devices were read: not a
                         * configuration error; rediscovery finds them later */
                        warnf(opts,
                              "GPU %u (%s): MIG enabled but its MIG devices could not be read "
                              "(%s); not advertised",
                              g->index, g->uuid, kdev_nvml_builtin_strerror(g->fault));
                        continue;
                }
                if (single)
                        return kdev_err_set(err, EINVAL,
                                            "invalid MIG configuration: at least one device with "
                                            "migEnabled=true was not configured correctly: "
                                            "device %u has no MIG devices configured",
                                            g->index);
                warnf(opts, "device %u has no MIG devices configured", g->index);
        }
        if (!single)
                return 0;
        const nvmlDeviceAttributes_t *first = NULL;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0' || g->mig_current != NVML_DEVICE_MIG_ENABLE)
                        continue;
                for (size_t k = 0; k < g->n_migs; k++) {
                        const nvmlDeviceAttributes_t *a = &g->migs[k].attributes;
                        if (!first)
                                first = a;
                        else if (memcmp(first, a, sizeof(*a)) != 0)
                                return kdev_err_set(err, EINVAL,
                                                    "invalid MIG configuration: more than one "
                                                    "MIG device type present on node");
                }
        }
        if (n_whole > 0 && n_mig_devs > 0)
                return kdev_err_set(err, EINVAL,
                                    "all devices on the node must be configured with the same "
                                    "migEnabled value");
        return 0;
}

int kdev_nvidia_build(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      const struct kdev_nvidia_build_options *opts, struct kdev_resource_set *out,
                      struct kdev_err *err)
{
        static const struct kdev_gpu_set no_gpus = {0};
        if (!gpus)
                gpus = &no_gpus;
        bool mig = cfg->mig_strategy != KDEV_NVIDIA_MIG_NONE;
        size_t n_migs = 0;
        for (size_t i = 0; mig && i < gpus->n_gpus; i++) {
                if (gpus->gpus[i].mig_current == NVML_DEVICE_MIG_ENABLE)
                        n_migs += gpus->gpus[i].n_migs;
        }

        int rc = -ENOMEM;
        struct rbuild b = {.cap = gpus->n_gpus + n_migs};
        struct kdev_nvidia_rdata *d = calloc(1, sizeof(*d)); /* the settings template */
        if (!d)
                return kdev_err_set(err, ENOMEM, "out of memory");
        d->strategies = cfg->device_list_strategies;
        d->id_strategy = cfg->id_strategy;
        d->pass_device_specs = cfg->pass_device_specs;
        d->gdrcopy = cfg->gdrcopy_enabled;
        d->gds = cfg->gds_enabled;
        d->mofed = cfg->mofed_enabled;
        const char *dev_root = cfg->dev_root && cfg->dev_root[0] ? cfg->dev_root : cfg->driver_root;
        /* the device-node lookup root of the driver-root rule (roots.h) */
        struct kdev_nvidia_roots roots;
        if ((rc = kdev_nvidia_roots_resolve(cfg->driver_root, cfg->dev_root,
                                            cfg->container_driver_root, &roots, err)) < 0)
                goto fail;
        rc = -ENOMEM;
        if (!(d->dev_root = strdup(dev_root ? dev_root : "/")) ||
            !(d->dev_lookup = strdup(kdev_nvidia_root_text(roots.dev))) ||
            !(d->annotation_prefix = strdup(cfg->cdi_annotation_prefix
                                                    ? cfg->cdi_annotation_prefix
                                                    : KDEV_NVIDIA_DEFAULT_CDI_ANNOTATION_PREFIX)))
                goto nomem;
        if ((rc = find_imex_channels(cfg, opts, d, err)) < 0)
                goto fail;

        /* nvidia.com/gpu first: the whole GPUs (under single/mixed those with
         * MIG disabled; NVIDIA buildGPUDeviceMap) */
        struct kdev_resource *gpu_r = rbuild_get(&b, KDEV_NVIDIA_GPU_RESOURCE, d);
        if (!gpu_r)
                goto nomem;
        size_t n_whole = 0, n_mig_devs = n_migs;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0') {
                        warnf(opts, "GPU %u: lost before its UUID was read; not advertised",
                              g->index);
                        continue;
                }
                if (mig && g->fault != NVML_SUCCESS && !g->mig_mode_known) {
                        /* a third state next to MIG on and off: counting it
                         * as a whole GPU would break `single`'s uniformity
                         * rule and put it next to its own MIG devices under
                         * `mixed` */
                        warnf(opts,
                              "GPU %u (%s): MIG mode unknown (%s); not advertised under "
                              "migStrategy %s",
                              g->index, g->uuid, kdev_nvml_builtin_strerror(g->fault),
                              cfg->mig_strategy == KDEV_NVIDIA_MIG_SINGLE ? "single" : "mixed");
                        continue;
                }
                if (mig && g->mig_current == NVML_DEVICE_MIG_ENABLE)
                        continue;
                struct kdev_nvidia_devinfo info;
                whole_gpu_info(g, &info);
                if (rbuild_add(gpu_r, &info, g->fault == NVML_SUCCESS, g->numa_node) < 0)
                        goto nomem;
                n_whole++;
        }
        if (mig) {
                if ((rc = build_migs(gpus, cfg, opts, d, &b, &n_mig_devs, err)) < 0 ||
                    (rc = check_migs(gpus, cfg, opts, n_whole, n_mig_devs, err)) < 0)
                        goto fail;
                /* mixed: no empty nvidia.com/gpu next to MIG resources (NVIDIA
                 * starts no plugin for a resource without devices) */
                if (b.v[0].n_devices == 0 && b.n > 1) {
                        kdev_resource_clear(&b.v[0]);
                        memmove(&b.v[0], &b.v[1], (b.n - 1) * sizeof(b.v[0]));
                        b.n--;
                }
        }
        for (size_t i = 0; i < b.n; i++) {
                for (size_t k = 0; k < out->n_resources; k++) {
                        if (strcmp(out->resources[k].name, b.v[i].name) == 0) {
                                rc = kdev_err_set(err, EEXIST, "resource %s defined twice",
                                                  b.v[i].name);
                                goto fail;
                        }
                }
        }
        struct kdev_resource *nr = realloc(out->resources,
                                           (out->n_resources + b.n) * sizeof(*nr));
        if (!nr)
                goto nomem;
        out->resources = nr;
        memcpy(&out->resources[out->n_resources], b.v, b.n * sizeof(*b.v));
        out->n_resources += b.n;
        free(b.v);
        kdev_nvidia_rdata_free(d);
        return 0;
nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
fail:
        rbuild_clear(&b);
        kdev_nvidia_rdata_free(d);
        return rc;
}

int kdev_nvidia_attach_physical(struct kdev_resource_set *set, struct kdev_err *err)
{
        size_t from = set->n_physical;
        for (size_t r = 0; r < set->n_resources; r++) {
                struct kdev_resource *res = &set->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        struct kdev_device *d = &res->devices[i];
                        const struct kdev_nvidia_devinfo *info = kdev_nvidia_device_info(res, d);
                        if (!info || d->physical)
                                continue;
                        struct kdev_physical *p = NULL;
                        /* this call's physical devices only: a few per GPU */
                        for (size_t k = from; k < set->n_physical && !p; k++) {
                                if (strcmp(set->physical[k]->id, info->uuid) == 0)
                                        p = set->physical[k];
                        }
                        if (!p) {
                                struct kdev_nvidia_devinfo *pi = malloc(sizeof(*pi));
                                if (pi) {
                                        *pi = *info;
                                        pi->replica = -1;
                                }
                                p = pi ? kdev_physical_add(set, info->uuid, d->numa_node, pi,
                                                           free)
                                       : NULL;
                                if (!p)
                                        goto nomem;
                        }
                        if (!d->healthy)
                                p->healthy = false;
                        d->physical = p;
                }
        }
        if (kdev_resource_set_link(set, err) < 0)
                goto undo;
        return 0;
nomem:
        kdev_err_set(err, ENOMEM, "out of memory");
undo:
        for (size_t r = 0; r < set->n_resources; r++)
                for (size_t i = 0; i < set->resources[r].n_devices; i++) {
                        struct kdev_device *d = &set->resources[r].devices[i];
                        if (d->physical && d->physical->index >= from)
                                d->physical = NULL;
                }
        kdev_physical_truncate(set, from);
        kdev_resource_set_link(set, NULL);
        return -err->code;
}
