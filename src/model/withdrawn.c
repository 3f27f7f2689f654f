/* The withdrawal rule's registry (withdrawn.h): entries in an array, found
 * through an open-addressing index of their positions; a forgotten entry is
 * marked dead and the array compacted once the dead outnumber the live. */
#include "model/withdrawn.h"

#include <stdlib.h>
#include <string.h>

#include "model/model.h"

struct entry {
        char *resource, *id;
        const void *owner;
        uint64_t since, grace, round;
        uint32_t hash;
        bool dead;
};

struct kdev_withdrawn {
        struct entry *e;
        size_t n, cap, dead; /* entries used (live and dead), allocated, dead */
        uint32_t *slot;      /* position + 1 in |e|; 0: empty */
        size_t mask;         /* slots - 1 (a power of two), 0: no index yet */
};

static uint32_t key_hash(const char *resource, const char *id)
{
        return kdev_str_hash(resource) * 31u ^ kdev_str_hash(id);
}

struct kdev_withdrawn *kdev_withdrawn_new(void)
{
        return calloc(1, sizeof(struct kdev_withdrawn));
}

static void entry_free(struct entry *x)
{
        free(x->resource);
        free(x->id);
}

void kdev_withdrawn_free(struct kdev_withdrawn *w)
{
        if (!w)
                return;
        for (size_t i = 0; i < w->n; i++)
                entry_free(&w->e[i]);
        free(w->e);
        free(w->slot);
        free(w);
}

/* Rebuilds the index for at least |want| entries. Returns false when out of
 * memory (the old index stays). */
static bool reindex(struct kdev_withdrawn *w, size_t want)
{
        size_t cap = 16;
        while (cap < 2 * want + 2)
                cap *= 2;
        uint32_t *slot = calloc(cap, sizeof(*slot));
        if (!slot)
                return false;
        for (size_t i = 0; i < w->n; i++) {
                if (w->e[i].dead)
                        continue;
                size_t k = w->e[i].hash & (cap - 1);
                while (slot[k])
                        k = (k + 1) & (cap - 1);
                slot[k] = (uint32_t)(i + 1);
        }
        free(w->slot);
        w->slot = slot;
        w->mask = cap - 1;
        return true;
}

/* Drops the dead entries and rebuilds the index (done when they outnumber
 * the live ones). */
static void compact(struct kdev_withdrawn *w)
{
        size_t k = 0;
        for (size_t i = 0; i < w->n; i++) {
                if (w->e[i].dead)
                        entry_free(&w->e[i]);
                else
                        w->e[k++] = w->e[i];
        }
        w->n = k;
        w->dead = 0;
        if (!reindex(w, w->n)) {
                /* the old index names moved positions: without a new one, no
                 * index (lookups then scan the array) */
                free(w->slot);
                w->slot = NULL;
                w->mask = 0;
        }
}

static struct entry *find(const struct kdev_withdrawn *w, const char *resource, const char *id)
{
        if (!w)
                return NULL;
        uint32_t h = key_hash(resource, id);
        if (!w->slot) {
                for (size_t i = 0; i < w->n; i++) {
                        struct entry *x = &w->e[i];
                        if (!x->dead && x->hash == h && strcmp(x->id, id) == 0 &&
                            strcmp(x->resource, resource) == 0)
                                return x;
                }
                return NULL;
        }
        for (size_t k = h & w->mask; w->slot[k]; k = (k + 1) & w->mask) {
                struct entry *x = &w->e[w->slot[k] - 1];
                if (!x->dead && x->hash == h && strcmp(x->id, id) == 0 &&
                    strcmp(x->resource, resource) == 0)
                        return x;
        }
        return NULL;
}

static void forget(struct kdev_withdrawn *w, struct entry *x)
{
        x->dead = true;
        w->dead++;
        if (w->dead > 16 && w->dead * 2 > w->n)
                compact(w);
}

/* Appends an entry; returns it or NULL when out of memory. */
static struct entry *add(struct kdev_withdrawn *w, const void *owner, const char *resource,
                         const char *id)
{
        if (w->n == w->cap) {
                size_t cap = w->cap ? 2 * w->cap : 8;
                struct entry *e = realloc(w->e, cap * sizeof(*e));
                if (!e)
                        return NULL;
                w->e = e;
                w->cap = cap;
        }
        if ((w->n + 1) * 2 > w->mask && !reindex(w, w->cap))
                return NULL;
        struct entry *x = &w->e[w->n];
        memset(x, 0, sizeof(*x));
        x->resource = strdup(resource);
        x->id = strdup(id);
        if (!x->resource || !x->id) {
                entry_free(x);
                return NULL;
        }
        x->owner = owner;
        x->hash = key_hash(resource, id);
        size_t k = x->hash & w->mask;
        while (w->slot[k])
                k = (k + 1) & w->mask;
        w->slot[k] = (uint32_t)(w->n + 1);
        w->n++;
        return x;
}

enum kdev_withdrawn_verdict kdev_withdrawn_miss(struct kdev_withdrawn *w, const void *owner,
                                                const char *resource, const char *id,
                                                uint64_t now_ms, uint64_t grace_ms,
                                                uint64_t round)
{
        struct entry *x = find(w, resource, id);
        if (!x) {
                if (!w || !(x = add(w, owner, resource, id)))
                        return KDEV_WITHDRAWN_DROPPED;
                x->since = now_ms;
                x->grace = grace_ms;
                x->round = round;
                return KDEV_WITHDRAWN_NEW;
        }
        x->owner = owner;
        x->grace = grace_ms;
        x->round = round;
        if (now_ms - x->since < grace_ms)
                return KDEV_WITHDRAWN_KEPT;
        forget(w, x);
        return KDEV_WITHDRAWN_DROPPED;
}

bool kdev_withdrawn_back(struct kdev_withdrawn *w, const char *resource, const char *id)
{
        struct entry *x = find(w, resource, id);
        if (!x)
                return false;
        forget(w, x);
        return true;
}

bool kdev_withdrawn_has(const struct kdev_withdrawn *w, const char *resource, const char *id,
                        uint64_t *since_ms)
{
        const struct entry *x = find(w, resource, id);
        if (x && since_ms)
                *since_ms = x->since;
        return x != NULL;
}

uint64_t kdev_withdrawn_due(const struct kdev_withdrawn *w, const void *owner,
                            const char *resource)
{
        uint64_t due = UINT64_MAX;
        for (size_t i = 0; w && i < w->n; i++) {
                const struct entry *x = &w->e[i];
                if (x->dead || (owner && x->owner != owner) ||
                    (resource && strcmp(x->resource, resource) != 0))
                        continue;
                uint64_t end = x->since + x->grace;
                if (end < x->since)
                        end = UINT64_MAX - 1; /* a grace period beyond the clock */
                if (end < due)
                        due = end;
        }
        return due;
}

/* Forgets the live entries for which |match| is true. */
static size_t forget_if(struct kdev_withdrawn *w, bool (*match)(const struct entry *, const void *,
                                                                uint64_t),
                        const void *arg, uint64_t u)
{
        size_t n = 0;
        for (size_t i = 0; w && i < w->n; i++) {
                struct entry *x = &w->e[i];
                if (!x->dead && match(x, arg, u)) {
                        x->dead = true;
                        w->dead++;
                        n++;
                }
        }
        if (n && w->dead * 2 > w->n)
                compact(w);
        return n;
}

static bool unasked(const struct entry *x, const void *owner, uint64_t round)
{
        return x->owner == owner && x->round != round;
}

static bool of_resource(const struct entry *x, const void *resource, uint64_t u)
{
        (void)u;
        return strcmp(x->resource, resource) == 0;
}

size_t kdev_withdrawn_sweep(struct kdev_withdrawn *w, const void *owner, uint64_t round)
{
        return forget_if(w, unasked, owner, round);
}

size_t kdev_withdrawn_forget_resource(struct kdev_withdrawn *w, const char *resource)
{
        return forget_if(w, of_resource, resource, 0);
}

struct served_fn {
        bool (*served)(void *arg, const char *resource);
        void *arg;
};

static bool unserved(const struct entry *x, const void *arg, uint64_t u)
{
        (void)u;
        const struct served_fn *f = arg;
        return !f->served(f->arg, x->resource);
}

size_t kdev_withdrawn_retain(struct kdev_withdrawn *w,
                             bool (*served)(void *arg, const char *resource), void *arg)
{
        struct served_fn f = {served, arg};
        return forget_if(w, unserved, &f, 0);
}

size_t kdev_withdrawn_count(const struct kdev_withdrawn *w)
{
        return w ? w->n - w->dead : 0;
}
