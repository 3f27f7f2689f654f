/* Mock NVML: the instance state file ($KDEV_MOCK_NVML_STATE, README.md).
 * The GPU and compute instances of every GPU, and its MIG mode, written
 * after each change and applied over the topology when it is loaded, so
 * that they outlive the process as the real driver's do. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock.h"

#include "common/file.h"

#define STATE_MAGIC "kdev-mock-nvml-state 1"

/* --- writing -------------------------------------------------------------- */

int mock_instances_write(const struct mock_state *s, const char *path, char *msg,
                         size_t msg_size)
{
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
                snprintf(msg, msg_size, "%s: cannot write: out of memory", path);
                return -1;
        }
        fprintf(f, "%s\n", STATE_MAGIC);
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mock_gpu *g = &s->gpus[i];
                fprintf(f, "gpu %s mig-mode %u pending %u\n", g->uuid, g->mig_mode,
                        g->mig_pending);
                for (size_t k = 0; k < g->n_gis; k++) {
                        const struct nvmlGpuInstance_st *gi = &g->gis[k];
                        if (gi->used)
                                fprintf(f, "gi slot %zu id %u profile %u start %u size %u\n", k,
                                        gi->id, gi->profile, gi->start, gi->size);
                }
                for (size_t k = 0; k < g->n_migs; k++) {
                        const struct mock_mig *m = &g->migs[k];
                        if (m->used)
                                fprintf(f, "ci slot %zu gi %u id %u profile %u start %u "
                                        "present %u uuid %s\n", k, m->gi->id, m->ci.id,
                                        m->ci.profile, m->ci.start, m->hidden ? 0u : 1u,
                                        m->uuid);
                }
        }
        if (fclose(f) != 0 || !text) {
                free(text);
                snprintf(msg, msg_size, "%s: cannot write: out of memory", path);
                return -1;
        }
        /* the temporary file beside it: DIR/.NAME.XXXXXX */
        char tmpl[PATH_MAX];
        const char *slash = strrchr(path, '/');
        int n = slash ? snprintf(tmpl, sizeof(tmpl), "%.*s/.%s.XXXXXX", (int)(slash - path),
                                 path, slash + 1)
                      : snprintf(tmpl, sizeof(tmpl), ".%s.XXXXXX", path);
        struct kdev_err err = {0};
        int rc = -1;
        if (n < 0 || (size_t)n >= sizeof(tmpl))
                snprintf(msg, msg_size, "%s: cannot write: path too long", path);
        else if (kdev_file_write_atomic(path, tmpl, text, len, 0644, false, &err) < 0)
                snprintf(msg, msg_size, "%s", err.msg);
        else
                rc = 0;
        free(text);
        return rc;
}

/* --- reading -------------------------------------------------------------- */

/* The instances of one GPU while the file is read: committed to the GPU
 * only when the whole file is good. */
struct pending_gpu {
        bool seen;
        unsigned mode, pending;
        struct nvmlGpuInstance_st gis[MOCK_MAX_MIGS];
        struct mock_mig migs[MOCK_MAX_MIGS];
};

struct reader {
        const char *path;
        unsigned line;
        char *msg;
        size_t msg_size;
        struct mock_state *s;
        struct pending_gpu *pg;
        struct mock_gpu *gpu;          /* of the last gpu line */
};

static int bad(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct reader *r, const char *fmt, ...)
{
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        snprintf(r->msg, r->msg_size, "%s:%u: %s", r->path, r->line, text);
        return -1;
}

/* The words w[first..n) of a line of kind w[0]: "key value" pairs in the
 * order of |keys| (NULL-terminated), each value a number from 0 to its
 * |max| (strtoul base 0, digits only) except a key with max 0, whose value
 * is a word into *|str|; |shape| is the line as the README writes it. */
static int fields(struct reader *r, char **w, int n, int first, const char *shape,
                  const char *const *keys, const unsigned *max, unsigned *vals,
                  const char **str)
{
        int k = 0;
        while (keys[k])
                k++;
        if (n != first + 2 * k)
                return bad(r, "expected \"%s\"", shape);
        for (int i = 0; i < k; i++) {
                const char *v = w[first + 2 * i + 1];
                if (strcmp(w[first + 2 * i], keys[i]) != 0)
                        return bad(r, "expected \"%s\"", shape);
                if (max[i] == 0) {
                        *str = v;
                        continue;
                }
                char *end = NULL;
                errno = 0;
                unsigned long x = v[0] >= '0' && v[0] <= '9' ? strtoul(v, &end, 0) : 0;
                if (!end || errno || *end || x > max[i])
                        return bad(r, "%s %s must be a number from 0 to %u", w[0], keys[i],
                                   max[i]);
                vals[i] = (unsigned)x;
        }
        return 0;
}

static int line_gpu(struct reader *r, char **w, int n)
{
        static const char *const keys[] = { "mig-mode", "pending", NULL };
        static const unsigned max[] = { 1, 1 };
        unsigned v[2];
        if (fields(r, w, n, 2, "gpu <uuid> mig-mode <0|1> pending <0|1>", keys, max, v,
                   NULL) < 0)
                return -1;
        struct mock_gpu *g = NULL;
        size_t i = 0;
        for (; i < r->s->n_gpus && !g; i++)
                if (strcmp(r->s->gpus[i].uuid, w[1]) == 0)
                        g = &r->s->gpus[i];
        if (!g)
                return bad(r, "GPU %s is not in the topology %s", w[1], r->s->path);
        struct pending_gpu *p = &r->pg[i - 1];
        if (p->seen)
                return bad(r, "GPU %s repeated", w[1]);
        if (!g->mig_capable && (v[0] || v[1]))
                return bad(r, "GPU %s is not MIG capable", w[1]);
        p->seen = true;
        p->mode = v[0];
        p->pending = v[1];
        r->gpu = g;
        return 0;
}

static unsigned mask(unsigned start, unsigned size)
{
        return size >= 32 ? ~0u : ((1u << size) - 1u) << start;
}

static int line_gi(struct reader *r, char **w, int n)
{
        static const char *const keys[] = { "slot", "id", "profile", "start", "size", NULL };
        static const unsigned max[] = { MOCK_MAX_MIGS - 1, 1000,
                                        NVML_GPU_INSTANCE_PROFILE_COUNT - 1, 7, 8 };
        unsigned v[5];
        if (fields(r, w, n, 1, "gi slot <n> id <n> profile <n> start <n> size <n>", keys, max, v,
                   NULL) < 0)
                return -1;
        struct mock_gpu *g = r->gpu;
        if (!g)
                return bad(r, "gi line before any gpu line");
        if (!g->mig_capable)
                return bad(r, "GPU %s is not MIG capable", g->uuid);
        struct pending_gpu *p = &r->pg[g - r->s->gpus];
        if (p->gis[v[0]].used)
                return bad(r, "GPU instance slot %u repeated", v[0]);
        if (!g->profiles[v[2]].present)
                return bad(r, "GPU instance profile index %u is not in the mig_profiles of %s",
                           v[2], g->uuid);
        if (v[4] == 0 || v[3] + v[4] > 8)
                return bad(r, "GPU instance placement {%u, %u} is not within the 8 memory "
                              "slices", v[3], v[4]);
        for (size_t k = 0; k < MOCK_MAX_MIGS; k++) {
                const struct nvmlGpuInstance_st *o = &p->gis[k];
                if (!o->used)
                        continue;
                if (o->id == v[1])
                        return bad(r, "GPU instance id %u repeated", v[1]);
                if (mask(o->start, o->size) & mask(v[3], v[4]))
                        return bad(r, "GPU instance placement {%u, %u} overlaps GPU instance %u",
                                   v[3], v[4], o->id);
        }
        p->gis[v[0]] = (struct nvmlGpuInstance_st){ .gpu = g, .used = true, .id = v[1],
                                                    .profile = v[2], .start = v[3],
                                                    .size = v[4] };
        return 0;
}

static int line_ci(struct reader *r, char **w, int n)
{
        static const char *const keys[] = { "slot",  "gi",      "id",   "profile",
                                            "start", "present", "uuid", NULL };
        static const unsigned max[] = { MOCK_MAX_MIGS - 1, 1000, 1000,
                                        NVML_COMPUTE_INSTANCE_PROFILE_COUNT - 1, 7, 1, 0 };
        unsigned v[7];
        const char *uuid = NULL;
        if (fields(r, w, n, 1, "ci slot <n> gi <n> id <n> profile <n> start <n> present <0|1> "
                               "uuid <mig-uuid>", keys, max, v, &uuid) < 0)
                return -1;
        struct mock_gpu *g = r->gpu;
        if (!g)
                return bad(r, "ci line before any gpu line");
        if (!g->mig_capable)
                return bad(r, "GPU %s is not MIG capable", g->uuid);
        struct pending_gpu *p = &r->pg[g - r->s->gpus];
        if (v[0] >= g->mig_max)
                return bad(r, "MIG device slot %u is not below max_devices (%u) of %s", v[0],
                           g->mig_max, g->uuid);
        if (p->migs[v[0]].used)
                return bad(r, "MIG device slot %u repeated", v[0]);
        int gs = -1;
        for (int k = 0; k < MOCK_MAX_MIGS && gs < 0; k++)
                if (p->gis[k].used && p->gis[k].id == v[1])
                        gs = k;
        if (gs < 0)
                return bad(r, "no GPU instance %u on %s before this line", v[1], g->uuid);
        const struct nvmlGpuInstance_st *gi = &p->gis[gs];
        unsigned gslices = g->profiles[gi->profile].info.sliceCount;
        unsigned c = mock_ci_fit(gslices, v[3]);
        if (!c)
                return bad(r, "compute instance profile %u does not fit GPU instance %u", v[3],
                           v[1]);
        if (v[4] + c > gslices)
                return bad(r, "compute placement {%u, %u} is not within the %u slices of GPU "
                              "instance %u", v[4], c, gslices, v[1]);
        if (strlen(uuid) >= sizeof(p->migs[0].uuid))
                return bad(r, "uuid is longer than %zu characters", sizeof(p->migs[0].uuid) - 1);
        for (size_t i = 0; i < r->s->n_gpus; i++) {
                if (strcmp(r->s->gpus[i].uuid, uuid) == 0)
                        return bad(r, "MIG UUID %s names a GPU", uuid);
                for (size_t k = 0; k < MOCK_MAX_MIGS; k++)
                        if (r->pg[i].migs[k].used && strcmp(r->pg[i].migs[k].uuid, uuid) == 0)
                                return bad(r, "MIG UUID %s repeated", uuid);
        }
        /* present compute instances of a GPU instance: distinct ids and
         * compute slices (a removed one keeps its own, as mig-create may
         * bring it back only while they are free) */
        for (size_t k = 0; k < MOCK_MAX_MIGS && v[5]; k++) {
                const struct mock_mig *o = &p->migs[k];
                if (!o->used || o->hidden || o->gi != &g->gis[gs])
                        continue;
                if (o->ci.id == v[2])
                        return bad(r, "compute instance id %u repeated in GPU instance %u", v[2],
                                   v[1]);
                unsigned oc = mock_ci_fit(gslices, o->ci.profile);
                if (mask(o->ci.start, oc) & mask(v[4], c))
                        return bad(r, "compute placement {%u, %u} overlaps compute instance %u "
                                      "of GPU instance %u", v[4], c, o->ci.id, v[1]);
        }
        struct mock_mig *m = &p->migs[v[0]];
        memset(m, 0, sizeof(*m));
        m->used = true;
        m->hidden = v[5] == 0;
        snprintf(m->uuid, sizeof(m->uuid), "%s", uuid);
        /* the pointers as they will be once committed */
        m->handle.gpu = g;
        m->handle.mig = &g->migs[v[0]];
        m->gi = &g->gis[gs];
        m->ci = (struct nvmlComputeInstance_st){ .gi = &g->gis[gs], .id = v[2], .profile = v[3],
                                                 .start = v[4] };
        return 0;
}

/* Replaces the instances of GPU |g| with |p|'s. A process (control file
 * `proc`) on a MIG device slot that now holds another device, or none,
 * is gone. */
static void commit(struct mock_gpu *g, const struct pending_gpu *p)
{
        for (size_t i = 0; i < g->n_procs;) {
                int m = g->procs[i].mig;
                if (m >= 0 && (!p->migs[m].used || !g->migs[m].used ||
                               strcmp(p->migs[m].uuid, g->migs[m].uuid) != 0)) {
                        memmove(&g->procs[i], &g->procs[i + 1],
                                (g->n_procs - i - 1) * sizeof(g->procs[0]));
                        g->n_procs--;
                        continue;
                }
                i++;
        }
        g->mig_mode = p->mode;
        g->mig_pending = p->pending;
        memcpy(g->gis, p->gis, sizeof(g->gis));
        memcpy(g->migs, p->migs, sizeof(g->migs));
        g->n_gis = g->n_migs = 0;
        for (size_t k = 0; k < MOCK_MAX_MIGS; k++) {
                if (g->gis[k].used)
                        g->n_gis = k + 1;
                if (g->migs[k].used)
                        g->n_migs = k + 1;
        }
}

static int parse(struct reader *r, char *text, size_t len)
{
        bool header = false;
        char *p = text, *end = text + len;
        r->line = 0;
        while (p < end) {
                char *nl = memchr(p, '\n', (size_t)(end - p));
                r->line++;
                if (!nl)
                        return bad(r, "the last line has no newline (a cut file)");
                *nl = '\0';
                char *w[16];
                int n = 0;
                char *save = NULL;
                for (char *t = strtok_r(p, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
                        if (n == 16)
                                return bad(r, "too many words");
                        w[n++] = t;
                }
                p = nl + 1;
                if (n == 0 || w[0][0] == '#')
                        continue;
                if (!header) {
                        if (n != 2 || strcmp(w[0], "kdev-mock-nvml-state") != 0 ||
                            strcmp(w[1], "1") != 0)
                                return bad(r, "the first line must be \"%s\"", STATE_MAGIC);
                        header = true;
                        continue;
                }
                int rc;
                if (strcmp(w[0], "gpu") == 0)
                        rc = line_gpu(r, w, n);
                else if (strcmp(w[0], "gi") == 0)
                        rc = line_gi(r, w, n);
                else if (strcmp(w[0], "ci") == 0)
                        rc = line_ci(r, w, n);
                else
                        rc = bad(r, "unknown line \"%s\"", w[0]);
                if (rc < 0)
                        return -1;
        }
        if (!header) {
                r->line = r->line ? r->line : 1;
                return bad(r, "the first line must be \"%s\"", STATE_MAGIC);
        }
        return 0;
}

int mock_instances_apply(struct mock_state *s, const char *path, char *msg, size_t msg_size)
{
        msg[0] = '\0';
        char *text = NULL;
        size_t len = 0;
        struct kdev_err err = {0};
        int rc = kdev_file_read(path, "state file", MOCK_STATE_FILE_MAX, KDEV_FILE_TEXT, &text,
                                &len, &err);
        if (rc == -ENOENT)
                return 0;
        if (rc < 0) {
                snprintf(msg, msg_size, "%s", err.msg);
                return -1;
        }
        struct reader r = { .path = path, .msg = msg, .msg_size = msg_size, .s = s };
        r.pg = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*r.pg));
        if (!r.pg) {
                free(text);
                snprintf(msg, msg_size, "%s: out of memory", path);
                return -1;
        }
        rc = parse(&r, text, len);
        if (rc == 0)
                for (size_t i = 0; i < s->n_gpus; i++)
                        if (r.pg[i].seen)
                                commit(&s->gpus[i], &r.pg[i]);
        free(r.pg);
        free(text);
        return rc < 0 ? -1 : 1;
}
