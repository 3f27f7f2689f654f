/* The Allocate answer of NVIDIA resources as container edits (model/edits.h;
 * the device plugin turns them into v1beta1, plugin/allocate.h): envs,
 * mounts, CDI annotations and devices, device specs (the edits' nodes),
 * exactly in the order of NVIDIA's internal/plugin/server.go getAllocateResponse and apiDeviceSpecs
 * (NVIDIA/k8s-device-plugin v0.20.0):
 *
 *   IDs    the requested devices' UUIDs (deviceIDStrategy uuid) or NVML
 *          indices "i" / "i:j" (index), each once, in request order (NVIDIA:
 *          uuid order is the request's; index order comes from a Go map, so
 *          it is unspecified there).
 *   1. any CDI strategy: CDI names "k8s.device-plugin.nvidia.com/gpu=<id>",
 *      then ".../imex-channel=<n>" per IMEX channel, then
 *      ".../gdrcopy=all", ".../gds=all", ".../mofed=all" when enabled;
 *      cdi-annotations: one annotation
 *      "<cdiAnnotationPrefix>nvidia-device-plugin_<random UUID v4>" =
 *      the names comma-joined; cdi-cri: one CDIDevice per name.
 *   1b. sharing.mps (d->mps_root set; NVIDIA internal/plugin/mps.go
 *      updateReponse): CUDA_MPS_PIPE_DIRECTORY = /mps/<resource>/pipe;
 *      mounts <mpsRoot>/<resource>/pipe -> /mps/<resource>/pipe, then
 *      <mpsRoot>/shm -> /dev/shm (every strategy, CDI ones included).
 *   2. NVIDIA_GDRCOPY, NVIDIA_GDS, NVIDIA_MOFED = "enabled" when enabled.
 *   3. only CDI strategies selected: done.
 *   4. envvar: NVIDIA_VISIBLE_DEVICES = IDs comma-joined; NVIDIA_IMEX_CHANNELS
 *      = channels comma-joined when there are any.
 *   5. volume-mounts: NVIDIA_VISIBLE_DEVICES = /var/run/nvidia-container-devices
 *      (replacing the envvar value), one mount /dev/null ->
 *      /var/run/nvidia-container-devices/<id> per ID, then .../imex/<n>.
 *   6. passDeviceSpecs: DeviceSpecs {p, <devRoot>/p, "rw"} (devRoot: the
 *      host dev root, --dev-root, default --driver-root, NVIDIA's
 *      NvidiaDevRoot) for the device nodes of nvidia/container_edits.h (the
 *      list the CDI specs use): kdev_nvidia_control_nodes (/dev/nvidiactl,
 *      /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset) when p
 *      exists now under the device-node lookup root of the driver-root rule
 *      (nvidia/roots.h roots.dev: the container driver root when it has
 *      dev/, else the container's own /, or the host dev root when kdev runs
 *      on the host; NVIDIA stats p in its own container's /dev, where the
 *      container toolkit put the nodes by NVIDIA_VISIBLE_DEVICES=all), then
 *      /dev/nvidia<minor> of each requested device (each path once; a MIG
 *      device names its parent's, followed by its GPU-instance and
 *      compute-instance access nodes /dev/nvidia-caps/nvidia-cap<gi_cap>,
 *      /dev/nvidia-caps/nvidia-cap<ci_cap>, NVIDIA nvmlMigDevice GetPaths),
 *      then /dev/nvidia-caps-imex-channels/channel<n>.
 * Envs are a map in the protocol: a key set twice keeps its first position.
 *
 * Time-slicing replicas ("<id>::<n>", sharing.c) carry their physical
 * device's devinfo, so the IDs above name each physical device once (first
 * appearance in the request), and /dev/nvidia<minor> is given once. With
 * failRequestsGreaterThanOne a request of more than one ID that holds a
 * replica fails first (check_shared_request).
 *
 * Isolated replicas (nvidia/isolation.h): after all of the above, the
 * container's share (kdev_nvidia_share_allocate, share_host.h): with a CDI
 * strategy the name of its own CDI spec "kdev.io/share=<id>" (an annotation
 * "<prefix>kdev-share_<id>" for cdi-annotations, a CDI device for cdi-cri),
 * otherwise env KDEV_SHARE_DIR (and LD_PRELOAD with preload: env) and the
 * mounts of the library, /etc/ld.so.preload (preload: file), the region
 * directory and its limits file.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "nvidia/container_edits.h"
#include "nvidia/mig.h"
#include "nvidia/mps.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/preferred.h"
#include "nvidia/resources.h"

#define CDI_ANNOTATION_PLUGIN "nvidia-device-plugin"

/* A set of borrowed strings for the duplicate checks of one Allocate answer
 * (IDs once each, device nodes once each): open addressing over a table at
 * least twice the strings it will hold, so a check costs O(1) on average and
 * a request of m devices O(m), not O(m^2). */
struct strset {
        const char **slot; /* NULL: empty */
        size_t mask;
        const char **stack; /* the caller's slots, used when the table fits */
        const struct kdev_container_edits *out; /* whose scratch holds a bigger table */
};

#define STRSET_STACK 128 /* slots of a caller's table: sets of up to 64 strings */

/* |stack|: STRSET_STACK slots of the caller's, or NULL; a bigger table is
 * |out|'s scratch (model/edits.h). */
static int strset_init(struct strset *set, size_t max_items, const char **stack,
                       const struct kdev_container_edits *out)
{
        size_t size = 16;
        while (size < 2 * max_items)
                size *= 2;
        set->stack = stack;
        set->out = out;
        set->slot = stack && size <= STRSET_STACK
                            ? stack
                            : kdev_edits_scratch(out, size * sizeof(*set->slot));
        if (set->slot)
                memset(set->slot, 0, size * sizeof(*set->slot));
        set->mask = size - 1;
        return set->slot ? 0 : -ENOMEM;
}

static void strset_free(struct strset *set)
{
        if (set->slot && set->slot != set->stack)
                kdev_edits_scratch_free(set->out, set->slot);
        set->slot = NULL;
}

/* The slot of |s| in |set|: where it is, or the empty one where it goes. */
static const char **strset_slot(const struct strset *set, const char *s)
{
        size_t i = kdev_str_hash(s) & set->mask;
        while (set->slot[i] && strcmp(set->slot[i], s) != 0)
                i = (i + 1) & set->mask;
        return &set->slot[i];
}

/* Adds node {path, host_path, permissions} unless |path| is in |paths| (the
 * container paths of out->nodes; the new one is added to it). */
static int add_spec(struct kdev_container_edits *out, struct strset *paths, const char *path,
                    const char *host_path, const char *permissions)
{
        const char **slot = strset_slot(paths, path);
        if (*slot)
                return 0;
        if (kdev_edits_add_node(out, path, host_path, permissions, NULL) < 0)
                return -ENOMEM;
        *slot = out->nodes[out->n_nodes - 1].path;
        return 0;
}

/* The host side of passDeviceSpecs. kdev_nvidia_join(root, p) for a clean
 * absolute p is the join of root with "x", less the "x", followed by p
 * without its leading '/': *|buf| (|out|'s scratch, room for a path of
 * KDEV_NVIDIA_NODE_PATH_MAX after the |*len| bytes of the root) holds that
 * root. Returns 0 or -ENOMEM. */
#define KDEV_NVIDIA_NODE_PATH_MAX 96
static int host_root(const struct kdev_container_edits *out, const char *dev_root, char **buf,
                     size_t *len)
{
        const char *root = dev_root && dev_root[0] ? dev_root : "/";
        char *b = kdev_edits_scratch(out, strlen(root) + 3 + KDEV_NVIDIA_NODE_PATH_MAX);
        if (!b)
                return -ENOMEM;
        size_t n = kdev_nvidia_join_to(b, root, "x") - 1;
        b[n] = '\0';
        *buf = b;
        *len = n;
        return 0;
}

/* |path| ("/dev/...", shorter than KDEV_NVIDIA_NODE_PATH_MAX) after the
 * root in |host| (host_root): host then holds kdev_nvidia_join(root, path). */
static const char *host_path(char *host, size_t root_len, const char *path)
{
        size_t n = strlen(path + 1);
        if (n >= KDEV_NVIDIA_NODE_PATH_MAX)
                n = KDEV_NVIDIA_NODE_PATH_MAX - 1;
        memcpy(host + root_len, path + 1, n);
        host[root_len + n] = '\0';
        return host;
}

/* |prefix| followed by |v| in decimal, into |out| (96 bytes). */
static void fmt_u(char *out, const char *prefix, unsigned v)
{
        size_t n = strlen(prefix);
        memcpy(out, prefix, n);
        char dig[12];
        size_t k = 0;
        do {
                dig[k++] = (char)('0' + v % 10);
                v /= 10;
        } while (v);
        while (k)
                out[n++] = dig[--k];
        out[n] = '\0';
}

/* Which control nodes exist (bit i: kdev_nvidia_control_nodes[i]) under
 * d->dev_lookup, the device-node lookup root of the driver-root rule
 * (nvidia/roots.h): the cached answer while younger than its TTL (struct
 * kdev_nvidia_ctl_cache), otherwise stat() of each, as NVIDIA's
 * apiDeviceSpecs does on every call in its own view, remembered for the
 * next calls. */
static unsigned control_nodes_present(struct kdev_nvidia_rdata *d)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t ttl = d->ctl.ttl_ns ? d->ctl.ttl_ns
                                     : (uint64_t)KDEV_NVIDIA_CONTROL_NODE_TTL_MS * 1000000u;
        if (d->ctl.checked_ns && now - d->ctl.checked_ns < ttl)
                return d->ctl.present;
        unsigned m = 0;
        const char *root = d->dev_lookup && strcmp(d->dev_lookup, "/") != 0 ? d->dev_lookup : "";
        for (size_t i = 0; i < KDEV_NVIDIA_N_CONTROL_NODES; i++) {
                char at[PATH_MAX];
                struct stat st;
                int n = snprintf(at, sizeof(at), "%s%s", root, kdev_nvidia_control_nodes[i]);
                if (n > 0 && (size_t)n < sizeof(at) && stat(at, &st) == 0)
                        m |= 1u << i;
        }
        d->ctl.present = m;
        d->ctl.checked_ns = now ? now : 1;
        return m;
}

/* add_spec of node |path| at <root>/|path| with "rw". */
static int add_node_at(struct kdev_container_edits *out, struct strset *paths, const char *path,
                       char *host, size_t root_len)
{
        const char **slot = strset_slot(paths, path);
        if (*slot)
                return 0;
        if (kdev_edits_add_node(out, path, host_path(host, root_len, path), "rw", NULL) < 0)
                return -ENOMEM;
        *slot = out->nodes[out->n_nodes - 1].path;
        return 0;
}

/* A growing comma-joined string. */
struct sbuf {
        char *s;
        size_t len, cap;
};

static int sb_add(struct sbuf *b, const char *item)
{
        size_t n = strlen(item), need = b->len + n + 2;
        if (need > b->cap) {
                size_t cap = b->cap ? b->cap : 128;
                while (cap < need)
                        cap *= 2;
                char *ns = realloc(b->s, cap);
                if (!ns)
                        return -ENOMEM;
                b->s = ns;
                b->cap = cap;
        }
        if (b->len)
                b->s[b->len++] = ',';
        memcpy(b->s + b->len, item, n + 1);
        b->len += n;
        return 0;
}

/* The IDs of the payload: unique, in request order, with the devinfo of the
 * first device of each (|infos|: the devices of one ID, replicas of one
 * physical device, share its device nodes). */
static const char *payload_id(const struct kdev_nvidia_rdata *d,
                              const struct kdev_nvidia_devinfo *info)
{
        return d->id_strategy == KDEV_NVIDIA_ID_INDEX ? info->index : info->uuid;
}

/* *|ids| and *|infos|: |out|'s scratch, one block (free *|ids|). */
static int payload_ids(const struct kdev_nvidia_rdata *d, const struct kdev_device *const *devs,
                       size_t n, const struct kdev_container_edits *out, const char ***ids,
                       const struct kdev_nvidia_devinfo ***infos, size_t *n_ids)
{
        void **block = kdev_edits_scratch(out, 2 * (n ? n : 1) * sizeof(*block));
        const char *stack[STRSET_STACK];
        struct strset seen = {0};
        if (!block || strset_init(&seen, n, stack, out) < 0) {
                kdev_edits_scratch_free(out, block);
                return -ENOMEM;
        }
        const char **v = (const char **)block;
        const struct kdev_nvidia_devinfo **fi =
                (const struct kdev_nvidia_devinfo **)(block + (n ? n : 1));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                const struct kdev_nvidia_devinfo *info = devs[i]->data;
                const char *id = payload_id(d, info);
                /* replicas of one GPU often come one after another: the ID
                 * of the device before is in the set already. A UUID is
                 * its physical device's ID (kdev_nvidia_attach_physical
                 * points a device at the record of its info->uuid), so the
                 * same record is the same UUID, without comparing it. */
                if (i > 0 && d->id_strategy == KDEV_NVIDIA_ID_UUID && devs[i]->physical &&
                    devs[i]->physical == devs[i - 1]->physical)
                        continue;
                if (i > 0 && strcmp(id, payload_id(d, devs[i - 1]->data)) == 0)
                        continue;
                const char **slot = strset_slot(&seen, id);
                if (!*slot) {
                        fi[k] = info;
                        v[k++] = *slot = id;
                }
        }
        strset_free(&seen);
        *ids = v;
        *infos = fi;
        *n_ids = k;
        return 0;
}

/* |ids| comma-joined in |out|'s scratch, or NULL when out of memory. */
static char *join_ids(const struct kdev_container_edits *out, const char *const *ids, size_t n)
{
        size_t len = 0;
        for (size_t i = 0; i < n; i++)
                len += strlen(ids[i]) + 1;
        char *s = kdev_edits_scratch(out, len ? len : 1), *p = s;
        if (!s)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                size_t k = strlen(ids[i]);
                if (i)
                        *p++ = ',';
                memcpy(p, ids[i], k);
                p += k;
        }
        *p = '\0';
        return s;
}

static int add_cdi(const struct kdev_nvidia_rdata *d, const char *const *ids, size_t n_ids,
                   struct kdev_container_edits *out, struct kdev_err *err)
{
        char **names = NULL;
        size_t n_names = 0;
        struct sbuf joined = {0};
        int rc = -ENOMEM;
        size_t cap = n_ids + d->n_imex_channels + 3;
        names = calloc(cap, sizeof(*names));
        if (!names)
                goto out;
        for (size_t i = 0; i < n_ids; i++) {
                if (asprintf(&names[n_names], KDEV_NVIDIA_CDI_VENDOR "/gpu=%s", ids[i]) < 0)
                        goto out;
                n_names++;
        }
        for (size_t i = 0; i < d->n_imex_channels; i++) {
                if (asprintf(&names[n_names], KDEV_NVIDIA_CDI_VENDOR "/imex-channel=%u",
                             d->imex_channels[i]) < 0)
                        goto out;
                n_names++;
        }
        static const char *const modes[] = {"gdrcopy", "gds", "mofed"};
        const bool on[] = {d->gdrcopy, d->gds, d->mofed};
        for (size_t i = 0; i < 3; i++) {
                if (!on[i])
                        continue;
                if (asprintf(&names[n_names], KDEV_NVIDIA_CDI_VENDOR "/%s=all", modes[i]) < 0)
                        goto out;
                n_names++;
        }
        if (n_names == 0) {
                rc = 0;
                goto out;
        }
        if (d->strategies & KDEV_NVIDIA_LIST_CDI_ANNOTATIONS) {
                char uuid[40], *key = NULL;
                rc = kdev_nvidia_uuid4(uuid, sizeof(uuid));
                if (rc < 0) {
                        rc = kdev_err_set(err, -rc, "cannot generate a random UUID: %s",
                                          strerror(-rc));
                        goto out;
                }
                rc = -ENOMEM;
                for (size_t i = 0; i < n_names; i++) {
                        if (sb_add(&joined, names[i]) < 0)
                                goto out;
                }
                if (asprintf(&key, "%s" CDI_ANNOTATION_PLUGIN "_%s", d->annotation_prefix,
                             uuid) < 0)
                        goto out;
                int r2 = kdev_edits_add_annotation(out, key, joined.s, NULL);
                free(key);
                if (r2 < 0)
                        goto out;
        }
        if (d->strategies & KDEV_NVIDIA_LIST_CDI_CRI) {
                for (size_t i = 0; i < n_names; i++) {
                        if (kdev_edits_add_cdi_device(out, names[i], NULL) < 0)
                                goto out;
                }
        }
        rc = 0;
out:
        for (size_t i = 0; i < n_names; i++)
                free(names[i]);
        free(names);
        free(joined.s);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return rc;
}

/* failRequestsGreaterThanOne (time-slicing): a request of more than one ID
 * where any ID is a replica fails, with NVIDIA's v0.15+ text (internal/rm/rm.go
 * ValidateRequest). */
static int check_shared_request(const struct kdev_nvidia_rdata *d, const struct kdev_resource *r,
                                const struct kdev_device *const *devs, size_t n,
                                struct kdev_err *err)
{
        if (!d->fail_gt1 || n <= 1)
                return 0;
        for (size_t i = 0; i < n; i++) {
                const struct kdev_nvidia_devinfo *info = devs[i]->data;
                if (info && info->replica >= 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid allocation request for \"%s\": invalid "
                                            "request: maximum request size for shared resources "
                                            "is 1; found %zu",
                                            r->name, n);
        }
        return 0;
}

static int nvidia_allocate(void *data, const struct kdev_resource *r,
                           const struct kdev_device *const *devs, size_t n,
                           struct kdev_container_edits *out, struct kdev_err *err)
{
        struct kdev_nvidia_rdata *d = data; /* mutable: the control-node cache */
        const char **ids = NULL;
        const struct kdev_nvidia_devinfo **infos = NULL;
        size_t n_ids = 0;
        struct sbuf list = {0};
        struct strset paths = {0};
        const char *path_stack[STRSET_STACK];
        char path[96];
        int rc = check_shared_request(d, r, devs, n, err);
        if (rc < 0)
                return rc;
        rc = payload_ids(d, devs, n, out, &ids, &infos, &n_ids);
        if (rc < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");

        if (d->strategies & KDEV_NVIDIA_LIST_CDI) {
                rc = add_cdi(d, ids, n_ids, out, err);
                if (rc < 0)
                        goto done;
        }
        if (d->mps_root) {
                rc = kdev_nvidia_mps_edits(d->mps_root, r->name, out, err);
                if (rc < 0)
                        goto done;
        }
        rc = -ENOMEM;
        if ((d->gdrcopy && kdev_edits_set_env(out, "NVIDIA_GDRCOPY", "enabled", NULL) < 0) ||
            (d->gds && kdev_edits_set_env(out, "NVIDIA_GDS", "enabled", NULL) < 0) ||
            (d->mofed && kdev_edits_set_env(out, "NVIDIA_MOFED", "enabled", NULL) < 0))
                goto nomem;
        if (!(d->strategies & ~(unsigned)KDEV_NVIDIA_LIST_CDI)) {
                rc = 0;
                goto share;
        }
        if (d->strategies & KDEV_NVIDIA_LIST_ENVVAR) {
                char *joined = join_ids(out, ids, n_ids);
                int r2 = joined ? kdev_edits_set_env(out, "NVIDIA_VISIBLE_DEVICES", joined, NULL)
                                : -ENOMEM;
                kdev_edits_scratch_free(out, joined);
                if (r2 < 0)
                        goto nomem;
                if (d->n_imex_channels) {
                        list.len = 0;
                        for (size_t i = 0; i < d->n_imex_channels; i++) {
                                snprintf(path, sizeof(path), "%u", d->imex_channels[i]);
                                if (sb_add(&list, path) < 0)
                                        goto nomem;
                        }
                        if (kdev_edits_set_env(out, "NVIDIA_IMEX_CHANNELS", list.s, NULL) < 0)
                                goto nomem;
                }
        }
        if (d->strategies & KDEV_NVIDIA_LIST_VOLUME_MOUNTS) {
                if (kdev_edits_set_env(out, "NVIDIA_VISIBLE_DEVICES",
                                       KDEV_NVIDIA_VOLUME_MOUNTS_ROOT, NULL) < 0)
                        goto nomem;
                for (size_t i = 0; i < n_ids; i++) {
                        char *ctr = kdev_nvidia_join(KDEV_NVIDIA_VOLUME_MOUNTS_ROOT, ids[i]);
                        int r2 = ctr ? kdev_edits_add_mount(out, KDEV_NVIDIA_VOLUME_MOUNTS_HOST,
                                                            ctr, NULL, 0, NULL)
                                     : -ENOMEM;
                        free(ctr);
                        if (r2 < 0)
                                goto nomem;
                }
                for (size_t i = 0; i < d->n_imex_channels; i++) {
                        snprintf(path, sizeof(path), KDEV_NVIDIA_VOLUME_MOUNTS_ROOT "/imex/%u",
                                 d->imex_channels[i]);
                        if (kdev_edits_add_mount(out, KDEV_NVIDIA_VOLUME_MOUNTS_HOST, path,
                                                 NULL, 0, NULL) < 0)
                                goto nomem;
                }
        }
        if (d->pass_device_specs) {
                /* the device nodes of the common and device edits
                 * (container_edits.h: the same list as the CDI specs), each
                 * ID's once: the other devices of an ID (replicas) would
                 * only repeat them */
                if (strset_init(&paths, out->n_nodes + 4 + 3 * n_ids + d->n_imex_channels,
                                path_stack, out) < 0)
                        goto nomem;
                for (size_t i = 0; i < out->n_nodes; i++) {
                        const char **slot = strset_slot(&paths, out->nodes[i].path);
                        if (!*slot)
                                *slot = out->nodes[i].path;
                }
                /* the host paths: <dev_root>/<p> written after the
                 * joined root (kdev_nvidia_join's result for each p, built
                 * once per answer instead of once per node) */
                char *host = NULL;
                size_t root_len = 0;
                if (host_root(out, d->dev_root, &host, &root_len) < 0)
                        goto nomem;
                unsigned present = control_nodes_present(d);
                rc = 0;
                for (size_t i = 0; rc >= 0 && i < KDEV_NVIDIA_N_CONTROL_NODES; i++) {
                        if (present & (1u << i))
                                rc = add_node_at(out, &paths, kdev_nvidia_control_nodes[i],
                                                 host, root_len);
                }
                for (size_t i = 0; rc >= 0 && i < n_ids; i++) {
                        const struct kdev_nvidia_devinfo *info = infos[i];
                        fmt_u(path, "/dev/nvidia", info->minor);
                        rc = add_node_at(out, &paths, path, host, root_len);
                        if (rc < 0 || info->gi == KDEV_NVIDIA_NO_INSTANCE)
                                continue;
                        fmt_u(path, KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap", info->gi_cap);
                        rc = add_node_at(out, &paths, path, host, root_len);
                        if (rc < 0)
                                break;
                        fmt_u(path, KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap", info->ci_cap);
                        rc = add_node_at(out, &paths, path, host, root_len);
                }
                kdev_edits_scratch_free(out, host);
                if (rc < 0)
                        goto nomem;
                for (size_t i = 0; i < d->n_imex_channels; i++) {
                        snprintf(path, sizeof(path), KDEV_NVIDIA_IMEX_CHANNEL_DIR "/channel%u",
                                 d->imex_channels[i]);
                        char *ch = kdev_nvidia_join(d->dev_root, path);
                        rc = ch ? add_spec(out, &paths, path, ch, "rw") : -ENOMEM;
                        free(ch);
                        if (rc < 0)
                                goto nomem;
                }
        }
share:
        /* isolated replicas: the share edits after NVIDIA's (share_host.c) */
        rc = d->share ? kdev_nvidia_share_allocate(d, r, devs, n, out, err) : 0;
        goto done;
nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
done:
        kdev_edits_scratch_free(out, ids); /* infos too: one block */
        free(list.s);
        strset_free(&paths);
        return rc;
}

const struct kdev_resource_ops kdev_nvidia_resource_ops = {
        .allocate = nvidia_allocate,
        .preferred = kdev_nvidia_preferred,
        .free = kdev_nvidia_rdata_free,
};
