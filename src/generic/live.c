/* The generic backend's live inventory (live.h): watches, rescans and the
 * merge of each scan into the served resources. */
#include "generic/live.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "generic/generic_internal.h"
#include "model/withdrawn.h"

#define DEBOUNCE_MS 50

/* The owner of the generic devices' entries in the withdrawal registry (one
 * for every tracker: a tracker started after a reload takes them over). */
static const char kdev_generic_withdrawn_owner = 'g';

/* What the tracker knows of one served device (aligned with the served
 * resource's device array). */
struct dev_state {
        char *key;        /* generic_internal.h; NULL: not seen by a scan yet */
        bool gone;        /* its nodes vanished: Unhealthy, withdrawn (model/withdrawn.h) */
};

struct live_res {
        size_t ri;              /* index in cfg->resources */
        struct dev_state *st;   /* n entries, aligned with the served devices */
        size_t n;
        char *last_error;       /* the last scan error logged (logged once) */
        bool warned_left_out;   /* a device left out was logged as a warning */
};

struct fswatch {
        uv_fs_event_t h;
        struct kdev_generic_live *l;
};

/* One directory a glob names; the deepest existing one of it and its
 * ancestors is watched (a directory created later is watched once a scan
 * sees it). */
struct watch {
        char *want;            /* the directory of the glob's fixed part, under the root */
        char *path;            /* watched now, or NULL */
        dev_t dev;
        ino_t ino;
        struct fswatch *fs;    /* NULL: not watched */
};

struct kdev_generic_live {
        struct kdev_generic_live_options o;
        uint64_t rescan_ms, grace_ms, debounce_ms;
        struct live_res *res;
        size_t n_res;
        struct watch *w;
        size_t n_w;
        uv_timer_t rescan, debounce, grace;
        struct kdev_withdrawn *wd; /* the withdrawal rule's registry */
        bool own_wd;               /* |wd| is the tracker's own (none given) */
        uint64_t round;            /* scans done: the registry's round */
        unsigned open_handles;
        bool stopping;
        bool warned_watch;
        void (*done)(void *);
        void *done_arg;
        struct kdev_generic_live_stats stats;
};

/* ---- small helpers -------------------------------------------------------- */

static struct kdev_resource *served(struct kdev_generic_live *l, size_t ri)
{
        const char *name = l->o.cfg->resources[ri].name;
        for (size_t i = 0; i < l->o.set->n_resources; i++) {
                if (strcmp(l->o.set->resources[i].name, name) == 0)
                        return &l->o.set->resources[i];
        }
        return NULL;
}

/* A hash set of borrowed strings (open addressing). */
struct strset {
        const char **slot;
        size_t mask;
};

static int strset_init(struct strset *s, size_t n)
{
        size_t cap = 16;
        while (cap < 2 * n + 2)
                cap *= 2;
        s->slot = calloc(cap, sizeof(*s->slot));
        s->mask = cap - 1;
        return s->slot ? 0 : -ENOMEM;
}

/* Adds |k|; returns false when it was there already. */
static bool strset_add(struct strset *s, const char *k)
{
        for (size_t i = kdev_str_hash(k) & s->mask;; i = (i + 1) & s->mask) {
                if (!s->slot[i]) {
                        s->slot[i] = k;
                        return true;
                }
                if (strcmp(s->slot[i], k) == 0)
                        return false;
        }
}

static bool strset_has(const struct strset *s, const char *k)
{
        for (size_t i = kdev_str_hash(k) & s->mask; s->slot[i]; i = (i + 1) & s->mask) {
                if (strcmp(s->slot[i], k) == 0)
                        return true;
        }
        return false;
}

/* Key -> index of the old devices. */
struct key_ref {
        const char *key;
        size_t idx;
};

static int key_ref_cmp(const void *pa, const void *pb)
{
        const struct key_ref *a = pa, *b = pb;
        return strcmp(a->key, b->key);
}

static bool same_specs(const struct kdev_device *a, const struct kdev_device *b)
{
        if (a->n_specs != b->n_specs)
                return false;
        for (size_t k = 0; k < a->n_specs; k++) {
                if (strcmp(a->specs[k].host_path, b->specs[k].host_path) != 0 ||
                    strcmp(a->specs[k].container_path, b->specs[k].container_path) != 0 ||
                    strcmp(a->specs[k].permissions, b->specs[k].permissions) != 0)
                        return false;
        }
        return true;
}

static int copy_device(struct kdev_device *dst, const struct kdev_device *src)
{
        memset(dst, 0, sizeof(*dst));
        dst->id = strdup(src->id);
        dst->numa_node = src->numa_node;
        dst->healthy = src->healthy;
        dst->specs = calloc(src->n_specs ? src->n_specs : 1, sizeof(*dst->specs));
        if (!dst->id || !dst->specs)
                return -ENOMEM;
        dst->n_specs = src->n_specs;
        for (size_t k = 0; k < src->n_specs; k++) {
                struct kdev_device_spec *s = &dst->specs[k];
                s->container_path = strdup(src->specs[k].container_path);
                s->host_path = strdup(src->specs[k].host_path);
                s->permissions = strdup(src->specs[k].permissions);
                if (!s->container_path || !s->host_path || !s->permissions)
                        return -ENOMEM;
        }
        return 0;
}

static void free_devices(struct kdev_device *v, size_t n)
{
        for (size_t i = 0; v && i < n; i++)
                kdev_device_clear(&v[i]);
        free(v);
}

static void free_states(struct dev_state *st, size_t n)
{
        for (size_t i = 0; st && i < n; i++)
                free(st[i].key);
        free(st);
}

static bool drop_of_resource(void *arg, const struct kdev_physical *p)
{
        const char *name = arg;
        size_t n = strlen(name);
        return strncmp(p->id, name, n) == 0 && p->id[n] == '/';
}

/* ---- the merge ------------------------------------------------------------- */

/* The result of merging one scan into a served resource. */
struct merged {
        struct kdev_device *v;  /* the new device list */
        char **phys;            /* per device: its physical ID */
        struct dev_state *st;   /* per device */
        size_t n;
};

static void merged_clear(struct merged *m)
{
        free_devices(m->v, m->n);
        for (size_t i = 0; m->phys && i < m->n; i++)
                free(m->phys[i]);
        free(m->phys);
        free_states(m->st, m->n);
        memset(m, 0, sizeof(*m));
}

/* Old device |j| of |r|, the physical ID it had. */
static char *old_physical(const struct kdev_resource *r, size_t j)
{
        const struct kdev_device *d = &r->devices[j];
        char *s = NULL;
        if (d->physical)
                return strdup(d->physical->id);
        return asprintf(&s, "%s/%s", r->name, d->id) < 0 ? NULL : s;
}

/* The physical ID of fresh device |i| under its final ID |id|: the fresh
 * physical tail's replica suffix ("::<n>") carried over. */
static char *fresh_physical(const struct kdev_resource *f, size_t i, const char *id)
{
        const struct kdev_device *d = &f->devices[i];
        size_t tail = d->physical ? strlen(d->physical->id) - strlen(f->name) - 1 : strlen(d->id);
        size_t suffix = strlen(d->id) > tail ? strlen(d->id) - tail : 0;
        size_t keep = strlen(id) > suffix ? strlen(id) - suffix : strlen(id);
        char *s = NULL;
        return asprintf(&s, "%s/%.*s", f->name, (int)keep, id) < 0 ? NULL : s;
}

static void log_device(const char *msg, const char *res, const struct kdev_device *d)
{
        kdev_log_info(msg, "resource", res, "device", d->id, "host_path",
                      d->n_specs ? d->specs[0].host_path : "");
}

/* Merges scan |sc| into the served resource |r| with states |lr| at loop
 * time |now|: see live.h. Fills |m|; returns 0 or -ENOMEM. Logs what it
 * finds (appeared, back, changed, gone, dropped, left out). */
static int merge(struct kdev_generic_live *l, struct live_res *lr, const struct kdev_resource *r,
                 struct kdev_generic_scan *sc, uint64_t now, struct merged *m)
{
        const struct kdev_resource *f = &sc->set.resources[0];
        size_t no = r->n_devices, nf = f->n_devices;
        struct key_ref *keys = malloc((no ? no : 1) * sizeof(*keys));
        ssize_t *from = malloc((nf ? nf : 1) * sizeof(*from));
        bool *matched = calloc(no ? no : 1, sizeof(*matched));
        /* per old device not found: the withdrawal rule's verdict */
        enum kdev_withdrawn_verdict *verdict = calloc(no ? no : 1, sizeof(*verdict));
        char **ids = calloc(nf ? nf : 1, sizeof(*ids));
        struct strset taken = {0};
        int rc = -ENOMEM;
        memset(m, 0, sizeof(*m));
        if (!keys || !from || !matched || !verdict || !ids || strset_init(&taken, no + nf) < 0)
                goto out;
        size_t nk = 0;
        for (size_t j = 0; j < no; j++) {
                if (lr->st[j].key)
                        keys[nk++] = (struct key_ref){lr->st[j].key, j};
        }
        qsort(keys, nk, sizeof(*keys), key_ref_cmp);
        /* 1. fresh devices that are old ones: by key, or (first scan) by ID */
        for (size_t i = 0; i < nf; i++) {
                struct key_ref want = {sc->keys[i], 0};
                const struct key_ref *k = bsearch(&want, keys, nk, sizeof(*keys), key_ref_cmp);
                ssize_t j = k ? (ssize_t)k->idx : -1;
                if (j < 0) {
                        const struct kdev_device *d = kdev_resource_find(r, f->devices[i].id);
                        if (d && !lr->st[d - r->devices].key)
                                j = d - r->devices;
                }
                if (j >= 0 && matched[j])
                        j = -1;
                from[i] = j;
                if (j >= 0) {
                        matched[j] = true;
                        strset_add(&taken, r->devices[j].id);
                }
        }
        /* 2. old devices not found: withdrawn (kept Unhealthy) or dropped */
        size_t kept_gone = 0;
        for (size_t j = 0; j < no; j++) {
                if (matched[j])
                        continue;
                verdict[j] = kdev_withdrawn_miss(l->wd, &kdev_generic_withdrawn_owner, r->name,
                                                 r->devices[j].id, now, l->grace_ms, l->round);
                if (verdict[j] == KDEV_WITHDRAWN_DROPPED)
                        continue;
                strset_add(&taken, r->devices[j].id);
                kept_gone++;
        }
        /* 3. new devices: their rule's ID, else with the group prefix */
        for (size_t i = 0; i < nf; i++) {
                if (from[i] >= 0)
                        continue;
                const char *id = f->devices[i].id;
                char *alt = NULL;
                if (strset_has(&taken, id)) {
                        if (asprintf(&alt, "g%zu-%s", sc->groups[i], sc->bases[i]) < 0)
                                goto out;
                        id = alt;
                }
                if (strlen(id) > KDEV_DEVICE_ID_MAX || strset_has(&taken, id)) {
                        /* every scan finds it again: one warning, then debug */
                        enum kdev_log_level lv = lr->warned_left_out ? KDEV_LOG_DEBUG
                                                                     : KDEV_LOG_WARN;
                        lr->warned_left_out = true;
                        if (kdev_log_enabled(lv))
                                kdev_log(lv,
                                         "generic device left out: its ID is listed for another "
                                         "device",
                                         "resource", r->name, "device", id, "host_path",
                                         f->devices[i].n_specs ? f->devices[i].specs[0].host_path
                                                               : "",
                                         NULL);
                        free(alt);
                        from[i] = -2;
                        continue;
                }
                ids[i] = alt ? alt : strdup(id);
                if (!ids[i])
                        goto out;
                strset_add(&taken, ids[i]);
        }
        /* 4. the list: present devices in discovery order, then the gone */
        size_t n = kept_gone;
        for (size_t i = 0; i < nf; i++)
                n += from[i] != -2;
        m->v = calloc(n ? n : 1, sizeof(*m->v));
        m->phys = calloc(n ? n : 1, sizeof(*m->phys));
        m->st = calloc(n ? n : 1, sizeof(*m->st));
        if (!m->v || !m->phys || !m->st)
                goto out;
        for (size_t i = 0; i < nf; i++) {
                if (from[i] == -2)
                        continue;
                struct kdev_device *d = &m->v[m->n];
                struct dev_state *s = &m->st[m->n];
                ssize_t j = from[i];
                m->phys[m->n] = j >= 0 ? old_physical(r, (size_t)j) : fresh_physical(f, i, ids[i]);
                m->n++;
                if (!m->phys[m->n - 1])
                        goto out;
                *d = f->devices[i];
                memset(&f->devices[i], 0, sizeof(f->devices[i]));
                d->physical = NULL;
                d->healthy = true;
                s->key = sc->keys[i];
                sc->keys[i] = NULL;
                if (j >= 0) {
                        free(d->id);
                        d->id = strdup(r->devices[j].id);
                        if (kdev_withdrawn_back(l->wd, r->name, d->id) || lr->st[j].gone)
                                log_device("generic device back: Healthy", r->name, d);
                        else if (!same_specs(d, &r->devices[j]))
                                log_device("generic device changed: Allocate answers its new "
                                           "device nodes",
                                           r->name, d);
                } else {
                        free(d->id);
                        d->id = ids[i];
                        ids[i] = NULL;
                        log_device("generic device appeared: advertising it", r->name, d);
                }
                if (!d->id)
                        goto out;
        }
        for (size_t j = 0; j < no; j++) {
                if (matched[j])
                        continue;
                if (verdict[j] == KDEV_WITHDRAWN_DROPPED) {
                        kdev_log_info("generic device dropped: its grace period ended",
                                              "resource", r->name, "device", r->devices[j].id);
                        continue;
                }
                struct kdev_device *d = &m->v[m->n];
                struct dev_state *s = &m->st[m->n];
                m->n++;
                if (copy_device(d, &r->devices[j]) < 0)
                        goto out;
                d->healthy = false;
                s->gone = true;
                if (lr->st[j].key && !(s->key = strdup(lr->st[j].key)))
                        goto out;
                if (!(m->phys[m->n - 1] = old_physical(r, j)))
                        goto out;
                if (verdict[j] == KDEV_WITHDRAWN_NEW)
                        kdev_log_warn("generic device gone: Unhealthy until it is back or its "
                                      "grace period ends",
                                      "resource", r->name, "device", d->id,
                                      KDEV_LOG_UINT("grace_period_s", (l->grace_ms + 999) / 1000));
        }
        rc = 0;
out:
        for (size_t i = 0; ids && i < nf; i++)
                free(ids[i]);
        free(ids);
        free(keys);
        free(from);
        free(matched);
        free(verdict);
        free(taken.slot);
        if (rc < 0)
                merged_clear(m);
        return rc;
}

/* Whether |m| lists what |r| lists (IDs, order, health, device nodes). */
static bool same_list(const struct kdev_resource *r, const struct merged *m)
{
        if (r->n_devices != m->n)
                return false;
        for (size_t i = 0; i < m->n; i++) {
                const struct kdev_device *a = &r->devices[i], *b = &m->v[i];
                if (strcmp(a->id, b->id) != 0 || a->healthy != b->healthy || !same_specs(a, b))
                        return false;
        }
        return true;
}

/* Puts |m| in place of |r|'s devices in the served set, with physical
 * devices made for them. Returns 0 or -ENOMEM (|r| unchanged). */
static int swap_in(struct kdev_resource_set *set, struct kdev_resource *r, struct merged *m)
{
        struct kdev_resource_set tmp = {0};
        struct kdev_physical *p = NULL;
        for (size_t i = 0; i < m->n; i++) {
                if (!p || strcmp(p->id, m->phys[i]) != 0) {
                        p = kdev_physical_add(&tmp, m->phys[i], m->v[i].numa_node, NULL, NULL);
                        if (!p) {
                                kdev_physical_truncate(&tmp, 0);
                                for (size_t k = 0; k < m->n; k++)
                                        m->v[k].physical = NULL;
                                return -ENOMEM;
                        }
                        p->healthy = m->v[i].healthy;
                }
                m->v[i].physical = p;
        }
        for (size_t i = 0; i < m->n; i++)
                free(m->phys[i]);
        free(m->phys);
        m->phys = NULL;
        struct kdev_device *old = r->devices;
        size_t n_old = r->n_devices;
        for (size_t i = 0; i < n_old; i++)
                old[i].physical = NULL;
        kdev_physical_remove_if(set, drop_of_resource, r->name);
        r->devices = m->v;
        r->n_devices = m->n;
        m->v = old;
        m->n = n_old; /* the old devices, freed with |m| (its states: the caller's) */
        if (kdev_resource_index(r) < 0)
                kdev_log_warn("cannot index the generic devices (out of memory); lookups by "
                              "device ID stay linear",
                              "resource", r->name);
        struct kdev_err err = {0};
        if (kdev_physical_move(set, &tmp) < 0) {
                for (size_t i = 0; i < r->n_devices; i++)
                        r->devices[i].physical = NULL;
                kdev_physical_truncate(&tmp, 0);
                kdev_log_warn("cannot map the generic devices to their physical devices",
                              "resource", r->name, "error", "out of memory");
        }
        if (kdev_resource_set_link(set, &err) < 0)
                kdev_log_warn("cannot map the generic devices to their physical devices",
                              "resource", r->name, "error", err.msg);
        return 0;
}

/* Scans resource |lr| and applies what changed. Returns the earliest loop
 * time a gone device of it is due to be dropped (UINT64_MAX: none). */
static uint64_t scan_resource(struct kdev_generic_live *l, struct live_res *lr, uint64_t now)
{
        const struct kdev_generic_resource *cr = &l->o.cfg->resources[lr->ri];
        struct kdev_resource *r = served(l, lr->ri);
        uint64_t due = UINT64_MAX;
        if (!r)
                return due;
        struct kdev_generic_scan sc;
        struct kdev_err err = {0};
        struct merged m = {0};
        int rc = kdev_generic_scan_resource(l->o.cfg, lr->ri, &l->o.discover, &sc, &err);
        if (rc < 0) {
                if (!lr->last_error || strcmp(lr->last_error, err.msg) != 0) {
                        kdev_log_warn("cannot rescan the generic devices, the list stays as it "
                                      "is",
                                      "resource", cr->name, "error", err.msg);
                        free(lr->last_error);
                        lr->last_error = strdup(err.msg);
                }
                goto dues;
        }
        if (lr->last_error) {
                kdev_log_info("the generic devices can be rescanned again", "resource", cr->name);
                free(lr->last_error);
                lr->last_error = NULL;
        }
        if (merge(l, lr, r, &sc, now, &m) < 0) {
                kdev_log_warn("cannot rescan the generic devices, the list stays as it is",
                              "resource", cr->name, "error", "out of memory");
                kdev_generic_scan_clear(&sc);
                goto dues;
        }
        kdev_generic_scan_clear(&sc);
        bool same = same_list(r, &m);
        if (!same && swap_in(l->o.set, r, &m) < 0) {
                kdev_log_warn("cannot rescan the generic devices, the list stays as it is",
                              "resource", cr->name, "error", "out of memory");
                merged_clear(&m);
                goto dues;
        }
        /* the states follow the list now served (the same list when |same|:
         * |m| then holds an unused copy) */
        free_states(lr->st, lr->n);
        lr->st = m.st;
        lr->n = r->n_devices;
        m.st = NULL;
        merged_clear(&m);
        if (!same) {
                l->stats.changes++;
                if (l->o.changed)
                        l->o.changed(l->o.changed_arg, r->name);
        }
dues:
        due = kdev_withdrawn_due(l->wd, &kdev_generic_withdrawn_owner, r->name);
        return due;
}

/* ---- watches ----------------------------------------------------------------- */

static void handle_closed(struct kdev_generic_live *l);
static void on_timer(uv_timer_t *t);

static void on_fswatch_closed(uv_handle_t *h)
{
        struct fswatch *fs = h->data;
        struct kdev_generic_live *l = fs->l;
        free(fs);
        handle_closed(l);
}

static void unwatch(struct kdev_generic_live *l, struct watch *w)
{
        if (w->fs) {
                uv_fs_event_stop(&w->fs->h);
                uv_close((uv_handle_t *)&w->fs->h, on_fswatch_closed);
                w->fs = NULL;
                l->stats.watches--;
        }
        free(w->path);
        w->path = NULL;
}

static void on_fs_event(uv_fs_event_t *h, const char *filename, int events, int status)
{
        (void)filename;
        struct fswatch *fs = h->data;
        struct kdev_generic_live *l = fs->l;
        /* nodes appear, vanish and are re-pointed by create, unlink and
         * rename (UV_RENAME); a write or chmod (UV_CHANGE) changes nothing
         * the list shows */
        if (l->stopping || (status == 0 && !(events & UV_RENAME)))
                return;
        l->stats.events++;
        if (!uv_is_active((uv_handle_t *)&l->debounce))
                uv_timer_start(&l->debounce, on_timer, l->debounce_ms, 0);
}

/* The deepest existing directory of |want| and its ancestors (|want|
 * itself, then each parent), or NULL (nothing exists: ENOMEM only, "/"
 * always does). */
static char *deepest_dir(const char *want, struct stat *st)
{
        char *p = strdup(want);
        while (p) {
                if (stat(p, st) == 0 && S_ISDIR(st->st_mode))
                        return p;
                char *s = strrchr(p, '/');
                if (!s || s == p) {
                        if (strcmp(p, "/") == 0) {
                                free(p);
                                return NULL;
                        }
                        strcpy(p, "/");
                        continue;
                }
                *s = '\0';
        }
        return NULL;
}

/* Watches the deepest existing directory of every glob; a directory that
 * was re-created (another inode) or created deeper is watched anew. */
static void refresh_watches(struct kdev_generic_live *l)
{
        if (l->o.no_watch)
                return;
        for (size_t i = 0; i < l->n_w; i++) {
                struct watch *w = &l->w[i];
                struct stat st;
                char *p = deepest_dir(w->want, &st);
                if (!p)
                        continue;
                if (w->fs && strcmp(w->path, p) == 0 && w->dev == st.st_dev &&
                    w->ino == st.st_ino) {
                        free(p);
                        continue;
                }
                unwatch(l, w);
                struct fswatch *fs = calloc(1, sizeof(*fs));
                if (!fs) {
                        free(p);
                        continue;
                }
                fs->l = l;
                fs->h.data = fs;
                uv_fs_event_init(l->o.loop, &fs->h);
                l->open_handles++;
                int r = uv_fs_event_start(&fs->h, on_fs_event, p, 0);
                if (r < 0) {
                        l->stats.watch_failures++;
                        if (!l->warned_watch)
                                kdev_log_warn("cannot watch a directory of the generic globs, "
                                              "following them by rescans",
                                              "path", p, "error", uv_strerror(r),
                                              KDEV_LOG_UINT("rescan_interval_s",
                                                            l->rescan_ms / 1000));
                        else
                                kdev_log_debug("cannot watch a directory of the generic globs",
                                               "path", p, "error", uv_strerror(r));
                        l->warned_watch = true;
                        uv_close((uv_handle_t *)&fs->h, on_fswatch_closed);
                        free(p);
                        continue;
                }
                w->fs = fs;
                w->path = p;
                w->dev = st.st_dev;
                w->ino = st.st_ino;
                l->stats.watches++;
        }
}

/* The directory part of glob |path| that has no glob character, under
 * |root|: "/dev/ttyUSB*" -> "<root>/dev", "/dev/serial/by-id/x*" ->
 * "<root>/dev/serial/by-id", "/dev/fuse" -> "<root>/dev". */
static char *glob_dir(const char *root, const char *path)
{
        size_t cut = strcspn(path, "*?[\\");
        size_t slash = 0;
        for (size_t i = 0; i < cut; i++) {
                if (path[i] == '/')
                        slash = i;
        }
        size_t rl = strlen(root);
        while (rl > 0 && root[rl - 1] == '/')
                rl--;
        char *s = NULL;
        if (asprintf(&s, "%.*s%.*s", (int)rl, root, (int)(slash ? slash : 1), path) < 0)
                return NULL;
        if (slash == 0 && rl > 0)
                s[rl] = '\0'; /* the root itself */
        return s;
}

static int add_watch_dirs(struct kdev_generic_live *l)
{
        const char *root = l->o.discover.root ? l->o.discover.root : "";
        const struct kdev_generic_config *cfg = l->o.cfg;
        for (size_t ri = 0; ri < cfg->n_resources; ri++) {
                for (size_t gi = 0; gi < cfg->resources[ri].n_groups; gi++) {
                        const struct kdev_generic_group *g = &cfg->resources[ri].groups[gi];
                        for (size_t pi = 0; pi < g->n_paths; pi++) {
                                char *d = glob_dir(root, g->paths[pi].path);
                                if (!d)
                                        return -ENOMEM;
                                bool dup = false;
                                for (size_t i = 0; i < l->n_w && !dup; i++)
                                        dup = strcmp(l->w[i].want, d) == 0;
                                if (dup) {
                                        free(d);
                                        continue;
                                }
                                struct watch *v = realloc(l->w, (l->n_w + 1) * sizeof(*v));
                                if (!v) {
                                        free(d);
                                        return -ENOMEM;
                                }
                                l->w = v;
                                memset(&v[l->n_w], 0, sizeof(v[0]));
                                v[l->n_w++].want = d;
                        }
                }
        }
        return 0;
}

/* ---- scans and timers ------------------------------------------------------------- */

static void scan(struct kdev_generic_live *l)
{
        if (l->stopping)
                return;
        l->stats.scans++;
        l->round++;
        refresh_watches(l);
        uv_update_time(l->o.loop);
        uint64_t now = uv_now(l->o.loop), due = UINT64_MAX;
        for (size_t i = 0; i < l->n_res; i++) {
                uint64_t d = scan_resource(l, &l->res[i], now);
                if (d < due)
                        due = d;
        }
        uv_timer_stop(&l->grace);
        if (due != UINT64_MAX)
                uv_timer_start(&l->grace, on_timer, due > now ? due - now : 0, 0);
}

/* The rescan, debounce and grace timers: a scan (the tracker in data). */
static void on_timer(uv_timer_t *t)
{
        scan(t->data);
}

void kdev_generic_live_scan(struct kdev_generic_live *l)
{
        if (l)
                scan(l);
}

void kdev_generic_live_stats(const struct kdev_generic_live *l,
                             struct kdev_generic_live_stats *out)
{
        *out = l->stats;
}

static void live_free(struct kdev_generic_live *l)
{
        for (size_t i = 0; i < l->n_res; i++) {
                free_states(l->res[i].st, l->res[i].n);
                free(l->res[i].last_error);
        }
        free(l->res);
        for (size_t i = 0; i < l->n_w; i++) {
                free(l->w[i].want);
                free(l->w[i].path);
        }
        free(l->w);
        if (l->own_wd)
                kdev_withdrawn_free(l->wd);
        void (*done)(void *) = l->done;
        void *arg = l->done_arg;
        free(l);
        if (done)
                done(arg);
}

static void handle_closed(struct kdev_generic_live *l)
{
        if (--l->open_handles == 0 && l->stopping)
                live_free(l);
}

static void on_handle_closed(uv_handle_t *h)
{
        handle_closed(h->data);
}

int kdev_generic_carry_withdrawn(struct kdev_resource_set *set,
                                 const struct kdev_generic_config *cfg,
                                 const struct kdev_resource_set *previous)
{
        for (size_t ri = 0; cfg && previous && ri < cfg->n_resources; ri++) {
                const char *name = cfg->resources[ri].name;
                struct kdev_resource *r = NULL;
                const struct kdev_resource *was = NULL;
                for (size_t i = 0; set && i < set->n_resources; i++)
                        if (strcmp(set->resources[i].name, name) == 0)
                                r = &set->resources[i];
                for (size_t i = 0; i < previous->n_resources; i++)
                        if (strcmp(previous->resources[i].name, name) == 0)
                                was = &previous->resources[i];
                if (!r || !was)
                        continue;
                size_t add = 0;
                for (size_t j = 0; j < was->n_devices; j++)
                        add += !kdev_resource_find(r, was->devices[j].id);
                if (!add)
                        continue;
                struct merged m = {0};
                size_t n = r->n_devices + add;
                m.v = calloc(n, sizeof(*m.v));
                m.phys = calloc(n, sizeof(*m.phys));
                if (!m.v || !m.phys)
                        goto oom;
                for (size_t j = 0; j < r->n_devices; j++) {
                        if (copy_device(&m.v[m.n], &r->devices[j]) < 0 ||
                            !(m.phys[m.n++] = old_physical(r, j)))
                                goto oom;
                }
                for (size_t j = 0; j < was->n_devices; j++) {
                        const struct kdev_device *d = &was->devices[j];
                        if (kdev_resource_find(r, d->id))
                                continue;
                        if (copy_device(&m.v[m.n], d) < 0 ||
                            !(m.phys[m.n++] = old_physical(was, j)))
                                goto oom;
                        m.v[m.n - 1].healthy = false;
                }
                if (swap_in(set, r, &m) < 0)
                        goto oom;
                merged_clear(&m);
                continue;
oom:
                merged_clear(&m);
                return -ENOMEM;
        }
        return 0;
}

struct kdev_generic_live *kdev_generic_live_start(const struct kdev_generic_live_options *o,
                                                  struct kdev_err *err)
{
        if (!o || !o->loop || !o->cfg || !o->set) {
                kdev_err_set(err, EINVAL, "kdev_generic_live_start: invalid arguments");
                return NULL;
        }
        struct kdev_generic_live *l = calloc(1, sizeof(*l));
        if (!l) {
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        l->o = *o;
        l->wd = o->withdrawn;
        if (!l->wd) {
                l->own_wd = true;
                if (!(l->wd = kdev_withdrawn_new())) {
                        free(l);
                        kdev_err_set(err, ENOMEM, "out of memory");
                        return NULL;
                }
        }
        l->rescan_ms = o->rescan_interval_ms ? o->rescan_interval_ms
                                             : (uint64_t)o->cfg->rescan_interval * 1000;
        if (l->rescan_ms == 0)
                l->rescan_ms = KDEV_GENERIC_RESCAN_DEFAULT * 1000;
        l->grace_ms = o->grace_period_ms >= 0 ? (uint64_t)o->grace_period_ms
                                              : (uint64_t)o->cfg->grace_period * 1000;
        l->debounce_ms = o->debounce_ms ? o->debounce_ms : DEBOUNCE_MS;
        l->n_res = o->cfg->n_resources;
        l->res = calloc(l->n_res ? l->n_res : 1, sizeof(*l->res));
        if (!l->res || add_watch_dirs(l) < 0) {
                kdev_err_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        for (size_t ri = 0; ri < l->n_res; ri++) {
                struct live_res *lr = &l->res[ri];
                lr->ri = ri;
                struct kdev_resource *r = served(l, ri);
                if (!r) {
                        kdev_err_set(err, EINVAL, "resource %s is not in the served set",
                                     o->cfg->resources[ri].name);
                        goto fail;
                }
                lr->n = r->n_devices;
                lr->st = calloc(lr->n ? lr->n : 1, sizeof(*lr->st));
                if (!lr->st) {
                        kdev_err_set(err, ENOMEM, "out of memory");
                        goto fail;
                }
                /* devices carried Unhealthy from before a rebuild
                 * (kdev_generic_carry_withdrawn) are withdrawn already */
                for (size_t j = 0; j < lr->n; j++)
                        lr->st[j].gone = !r->devices[j].healthy &&
                                         kdev_withdrawn_has(l->wd, r->name, r->devices[j].id, NULL);
        }
        uv_timer_init(o->loop, &l->rescan);
        uv_timer_init(o->loop, &l->debounce);
        uv_timer_init(o->loop, &l->grace);
        l->open_handles = 3;
        l->rescan.data = l->debounce.data = l->grace.data = l;
        scan(l);
        uv_timer_start(&l->rescan, on_timer, l->rescan_ms, l->rescan_ms);
        return l;
fail:
        l->stopping = true;
        live_free(l);
        return NULL;
}

void kdev_generic_live_stop(struct kdev_generic_live *l, void (*done)(void *arg), void *arg)
{
        if (!l)
                return;
        l->stopping = true;
        l->done = done;
        l->done_arg = arg;
        for (size_t i = 0; i < l->n_w; i++)
                unwatch(l, &l->w[i]);
        uv_close((uv_handle_t *)&l->rescan, on_handle_closed);
        uv_close((uv_handle_t *)&l->debounce, on_handle_closed);
        uv_close((uv_handle_t *)&l->grace, on_handle_closed);
}
