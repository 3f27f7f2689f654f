/* The usage snapshot and its attribution to containers. See usage.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "share/region.h"
#include "usage/usage.h"

/* --- the snapshot --------------------------------------------------------- */

struct kdev_usage_device *kdev_usage_snapshot_add(struct kdev_usage_snapshot *s)
{
        struct kdev_usage_device *d =
                realloc(s->devices, (s->n_devices + 1) * sizeof(*s->devices));
        if (!d)
                return NULL;
        s->devices = d;
        d = &s->devices[s->n_devices++];
        memset(d, 0, sizeof(*d));
        d->gi = d->util = d->mem_util = KDEV_USAGE_NONE;
        return d;
}

int kdev_usage_device_add_process(struct kdev_usage_device *d, uint32_t pid, uint64_t used,
                                  int sm_util)
{
        struct kdev_usage_process *p = realloc(d->procs, (d->n_procs + 1) * sizeof(*p));
        if (!p)
                return -ENOMEM;
        d->procs = p;
        d->procs[d->n_procs++] = (struct kdev_usage_process){pid, used, sm_util};
        return 0;
}

void kdev_usage_snapshot_clear(struct kdev_usage_snapshot *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_devices; i++)
                free(s->devices[i].procs);
        free(s->devices);
        memset(s, 0, sizeof(*s));
}

/* --- attribution ------------------------------------------------------------ */

const char *kdev_usage_unattributed_name(enum kdev_usage_unattributed r)
{
        switch (r) {
        case KDEV_USAGE_UNATTRIBUTED_HOST: return "host";
        case KDEV_USAGE_UNATTRIBUTED_NO_POD: return "unknown_container";
        case KDEV_USAGE_UNATTRIBUTED_AMBIGUOUS: return "ambiguous";
        case KDEV_USAGE_UNATTRIBUTED_NO_CGROUP: return "no_cgroup";
        case KDEV_USAGE_UNATTRIBUTED_COUNT: break;
        }
        return "?";
}

/* What one container's share region says, per GPU. */
struct region_view {
        bool ok;
        size_t n;
        struct {
                char uuid[KDEV_SHARE_UUID_MAX];
                uint64_t used, limit;
                unsigned compute;
        } gpu[KDEV_SHARE_MAX_GPUS];
};

static bool set(const char *s)
{
        return s && *s;
}

static int read_regions(const struct kdev_usage_pods *pods, struct region_view *views,
                        struct kdev_usage_report *out)
{
        struct kdev_share_usage *u = NULL;
        for (size_t c = 0; c < pods->n; c++) {
                const char *dir = pods->containers[c].share_dir;
                if (!set(dir))
                        continue;
                if (!u && !(u = malloc(sizeof(*u))))
                        return -ENOMEM;
                char msg[sizeof(out->region_error)];
                if (kdev_share_usage_read(dir, u, msg, sizeof(msg)) < 0) {
                        out->region_errors++;
                        memcpy(out->region_error, msg, sizeof(msg));
                        continue;
                }
                views[c].ok = true;
                views[c].n = u->n_gpus;
                for (size_t g = 0; g < u->n_gpus; g++) {
                        memcpy(views[c].gpu[g].uuid, u->gpu[g].uuid, KDEV_SHARE_UUID_MAX);
                        views[c].gpu[g].used = u->used[g];
                        views[c].gpu[g].limit = u->gpu[g].memory;
                        views[c].gpu[g].compute = u->gpu[g].compute;
                }
        }
        free(u);
        return 0;
}

static int push_row(struct kdev_usage_report *out, const struct kdev_usage_row *row)
{
        struct kdev_usage_row *r = realloc(out->rows, (out->n_rows + 1) * sizeof(*r));
        if (!r)
                return -ENOMEM;
        out->rows = r;
        out->rows[out->n_rows++] = *row;
        return 0;
}

/* The row of the device being attributed (rows [first, n_rows)) whose
 * process has cgroup |cg|, or the reason there is none. */
static long find_row(const struct kdev_usage_report *out, size_t first,
                     const struct kdev_usage_pods *pods, const struct kdev_usage_cgroup *cg,
                     enum kdev_usage_unattributed *why)
{
        for (size_t i = first; i < out->n_rows; i++) {
                const char *id = pods->containers[out->rows[i].container].container_id;
                if (set(id) && strcmp(id, cg->container_id) == 0)
                        return (long)i;
        }
        long found = -1;
        for (size_t i = first; i < out->n_rows; i++) {
                const struct kdev_usage_container *c = &pods->containers[out->rows[i].container];
                if (!set(c->pod_uid) || strcmp(c->pod_uid, cg->pod_uid) != 0 ||
                    set(c->container_id)) /* a known ID that differs: not this one */
                        continue;
                if (found >= 0) {
                        *why = KDEV_USAGE_UNATTRIBUTED_AMBIGUOUS;
                        return -1;
                }
                found = (long)i;
        }
        if (found < 0)
                *why = KDEV_USAGE_UNATTRIBUTED_NO_POD;
        return found;
}

static int attribute_device(const struct kdev_usage_snapshot *snap, size_t di,
                            const struct kdev_usage_pods *pods,
                            const struct kdev_usage_attribute_options *opts,
                            const struct region_view *views, const char *const *uuids,
                            struct kdev_usage_report *out)
{
        const struct kdev_usage_device *d = &snap->devices[di];
        size_t first = out->n_rows;
        for (size_t c = 0, k0 = 0; c < pods->n; k0 += pods->containers[c].n_device_ids, c++) {
                const struct kdev_usage_container *ct = &pods->containers[c];
                struct kdev_usage_row row = {.device = di, .container = c,
                                             .sm_util = KDEV_USAGE_NONE};
                for (size_t k = 0; k < ct->n_device_ids; k++)
                        if (uuids[k0 + k] && strcmp(uuids[k0 + k], d->uuid) == 0)
                                row.replicas++;
                if (!row.replicas)
                        continue;
                for (size_t g = 0; views[c].ok && g < views[c].n; g++)
                        if (strcmp(views[c].gpu[g].uuid, d->uuid) == 0) {
                                row.from_region = true;
                                row.used = views[c].gpu[g].used;
                                row.limit = views[c].gpu[g].limit;
                                row.compute = views[c].gpu[g].compute;
                        }
                if (push_row(out, &row) < 0)
                        return -ENOMEM;
        }
        struct kdev_usage_lost lost[KDEV_USAGE_UNATTRIBUTED_COUNT] = {0};
        for (size_t p = 0; p < d->n_procs; p++) {
                const struct kdev_usage_process *pr = &d->procs[p];
                uint64_t used = pr->used == UINT64_MAX ? 0 : pr->used;
                struct kdev_usage_cgroup cg;
                enum kdev_usage_unattributed why = KDEV_USAGE_UNATTRIBUTED_HOST;
                int rc = kdev_usage_proc_container(opts->proc_root, pr->pid, &cg, NULL);
                long r = -1;
                if (rc < 0)
                        why = KDEV_USAGE_UNATTRIBUTED_NO_CGROUP;
                else if (rc == 0)
                        r = find_row(out, first, pods, &cg, &why);
                if (r < 0) {
                        lost[why].processes++;
                        lost[why].used += used;
                        out->failures[why]++;
                        continue;
                }
                struct kdev_usage_row *row = &out->rows[r];
                row->processes++;
                if (!row->from_region)
                        row->used += used;
                if (pr->sm_util >= 0)
                        row->sm_util = (row->sm_util < 0 ? 0 : row->sm_util) + pr->sm_util;
        }
        for (int w = 0; w < KDEV_USAGE_UNATTRIBUTED_COUNT; w++) {
                if (!lost[w].processes)
                        continue;
                struct kdev_usage_lost *l =
                        realloc(out->lost, (out->n_lost + 1) * sizeof(*l));
                if (!l)
                        return -ENOMEM;
                out->lost = l;
                lost[w].device = di;
                lost[w].reason = (enum kdev_usage_unattributed)w;
                out->lost[out->n_lost++] = lost[w];
        }
        return 0;
}

int kdev_usage_attribute(const struct kdev_usage_snapshot *snap,
                         const struct kdev_usage_pods *pods,
                         const struct kdev_usage_attribute_options *opts,
                         struct kdev_usage_report *out, struct kdev_err *err)
{
        static const struct kdev_usage_pods none = {0};
        if (!pods)
                pods = &none;
        memset(out, 0, sizeof(*out));
        /* each device ID resolved once, in map order */
        size_t n_ids = 0;
        for (size_t c = 0; c < pods->n; c++)
                n_ids += pods->containers[c].n_device_ids;
        const char **uuids = n_ids ? calloc(n_ids, sizeof(*uuids)) : NULL;
        struct region_view *views = pods->n ? calloc(pods->n, sizeof(*views)) : NULL;
        int rc = (n_ids && !uuids) || (pods->n && !views) ? -ENOMEM
                                                          : read_regions(pods, views, out);
        for (size_t c = 0, k0 = 0; rc == 0 && c < pods->n; c++) {
                const struct kdev_usage_container *ct = &pods->containers[c];
                for (size_t k = 0; k < ct->n_device_ids; k++)
                        uuids[k0 + k] = opts->resolve(opts->resolve_arg, ct->resource,
                                                      ct->device_ids[k]);
                k0 += ct->n_device_ids;
        }
        for (size_t di = 0; rc == 0 && di < snap->n_devices; di++)
                rc = attribute_device(snap, di, pods, opts, views, uuids, out);
        free(views);
        free(uuids);
        if (rc < 0) {
                kdev_usage_report_clear(out);
                return kdev_err_set(err, ENOMEM, "usage attribution: out of memory");
        }
        return 0;
}

void kdev_usage_report_clear(struct kdev_usage_report *r)
{
        if (!r)
                return;
        free(r->rows);
        free(r->lost);
        memset(r, 0, sizeof(*r));
}
