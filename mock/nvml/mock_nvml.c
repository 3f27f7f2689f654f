/* Mock libnvidia-ml.so.1: the NVML entry points kdev resolves, with NVML's
 * return-code semantics, over a topology file (README.md). One mutex guards
 * all state; nvmlEventSetWait blocks on a condition variable (monotonic
 * clock) and polls the control file while it waits.
 *
 * Built twice: the full mock, and with KDEV_MOCK_LEGACY a library that exports
 * only un-suffixed (v1) names and none of the optional groups (MIG,
 * architecture, row remapping, CUDA version), to test the loader's fallbacks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/wait.h"
#include "kdev_mock_nvml.h"
#include "mock.h"

struct nvmlEventSet_st {
        struct nvmlEventSet_st *next;
        unsigned long long masks[MOCK_MAX_GPUS];
        nvmlEventData_t queue[MOCK_QUEUE];
        unsigned head, len;
        nvmlReturn_t pending_error;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static struct mock_state *g_state;
static unsigned g_refs;
static nvmlReturn_t g_init_error;
static char g_last_error[1024];
static struct nvmlEventSet_st *g_sets;
static char g_ctl_path[PATH_MAX];
static off_t g_ctl_off;
static char g_state_error[1024];

/* `crash-after` (kdevMockCrashAfter): the entry points that change
 * instances, and for each how many more successful calls until the one that
 * kills the process (0: none armed). */
static const char *const g_crash_fns[] = {
        "nvmlDeviceCreateGpuInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
};
#define MOCK_CRASH_FNS (sizeof(g_crash_fns) / sizeof(g_crash_fns[0]))
static unsigned g_crash_after[MOCK_CRASH_FNS];

/* XID storms from the control file's `xid-storm` lines: event i (from 0) is
 * due |i / rate| seconds after the line was applied; due events are queued on
 * every NVML call and every 20 ms of nvmlEventSetWait, only while every set
 * registered for them has room (a storm is delayed, never dropped). */
#define MOCK_MAX_STORMS 8
struct mock_storm {
        char uuid[96];
        unsigned long long xid, count, rate, sent;
        unsigned gi, ci;
        struct timespec start;  /* CLOCK_MONOTONIC */
};
static struct mock_storm g_storms[MOCK_MAX_STORMS];
static unsigned g_n_storms;

__attribute__((constructor)) static void mock_ctor(void)
{
        kdev_cond_init_monotonic(&g_cond);
}

__attribute__((destructor)) static void mock_dtor(void)
{
        mock_state_free(g_state);
        g_state = NULL;
        while (g_sets) {
                struct nvmlEventSet_st *n = g_sets->next;
                free(g_sets);
                g_sets = n;
        }
        pthread_cond_destroy(&g_cond);
}

/* --- loading ------------------------------------------------------------- */

static void clear_sets_locked(void)
{
        for (struct nvmlEventSet_st *s = g_sets; s; s = s->next) {
                memset(s->masks, 0, sizeof(s->masks));
                s->head = s->len = 0;
                s->pending_error = NVML_SUCCESS;
        }
}

/* $KDEV_MOCK_NVML_STATE, when set: applied over the topology (the file's
 * error on stderr and in g_state_error; the topology's instances stay). */
static void state_apply_locked(void)
{
        const char *path = getenv("KDEV_MOCK_NVML_STATE");
        if (!path || !path[0] || !g_state)
                return;
        char msg[sizeof(g_state_error)];
        if (mock_instances_apply(g_state, path, msg, sizeof(msg)) < 0) {
                snprintf(g_state_error, sizeof(g_state_error), "%s", msg);
                fprintf(stderr, "kdev mock nvml: %s\n", msg);
                return;
        }
        g_state_error[0] = '\0';
}

/* After a change of instances or MIG mode: the state file written (when
 * $KDEV_MOCK_NVML_STATE is set), then, for a change by NVML entry point
 * |fn| (NULL: a control), the process killed when `crash-after` says so. */
static void changed_locked(const char *fn)
{
        const char *path = getenv("KDEV_MOCK_NVML_STATE");
        if (path && path[0] && g_state) {
                char msg[sizeof(g_state_error)];
                if (mock_instances_write(g_state, path, msg, sizeof(msg)) < 0) {
                        snprintf(g_state_error, sizeof(g_state_error), "%s", msg);
                        fprintf(stderr, "kdev mock nvml: %s\n", msg);
                } else {
                        g_state_error[0] = '\0';
                }
        }
        for (size_t i = 0; fn && i < MOCK_CRASH_FNS; i++)
                if (strcmp(g_crash_fns[i], fn) == 0 && g_crash_after[i] &&
                    --g_crash_after[i] == 0)
                        raise(SIGKILL);   /* kill -9 before the call returns */
}

/* Loads (or reloads, when the file name, size or mtime changed) the
 * topology, with the state file over it; *|loaded| (may be NULL) tells
 * whether it did. */
static nvmlReturn_t write_proc_locked(const char *root);

static nvmlReturn_t load_locked(bool *loaded)
{
        if (loaded)
                *loaded = false;
        const char *path = getenv("KDEV_MOCK_NVML_TOPOLOGY");
        if (!path || !path[0]) {
                snprintf(g_last_error, sizeof(g_last_error),
                         "KDEV_MOCK_NVML_TOPOLOGY is not set");
                return NVML_ERROR_DRIVER_NOT_LOADED;
        }
        if (g_state && strcmp(g_state->path, path) == 0) {
                struct stat st;
                if (stat(path, &st) == 0 && st.st_size == g_state->size &&
                    st.st_mtim.tv_sec == g_state->mtime.tv_sec &&
                    st.st_mtim.tv_nsec == g_state->mtime.tv_nsec)
                        return NVML_SUCCESS;
                if (g_refs > 0)
                        return NVML_SUCCESS;    /* never swap state under users */
        }
        char msg[1024];
        struct mock_state *s = mock_topology_load(path, msg, sizeof(msg));
        if (!s) {
                snprintf(g_last_error, sizeof(g_last_error), "%s", msg);
                fprintf(stderr, "kdev mock nvml: %s\n", msg);
                return NVML_ERROR_UNKNOWN;
        }
        g_last_error[0] = '\0';
        clear_sets_locked();
        mock_state_free(g_state);
        g_state = s;
        if (loaded)
                *loaded = true;
        state_apply_locked();
        /* out-of-process users (kdev-plugin --proc-root): mig-minors on load */
        const char *proc = getenv("KDEV_MOCK_NVML_PROC");
        if (proc && proc[0] && write_proc_locked(proc) != NVML_SUCCESS)
                fprintf(stderr, "kdev mock nvml: cannot write %s/driver/nvidia-caps/mig-minors\n",
                        proc);
        return NVML_SUCCESS;
}

static nvmlReturn_t ensure_loaded_locked(void)
{
        return g_state ? NVML_SUCCESS : load_locked(NULL);
}

/* --- lookups ------------------------------------------------------------- */

static struct mock_gpu *gpu_by_uuid(const char *uuid, struct mock_mig **mig)
{
        if (mig)
                *mig = NULL;
        if (!g_state || !uuid)
                return NULL;
        for (size_t i = 0; i < g_state->n_gpus; i++) {
                struct mock_gpu *g = &g_state->gpus[i];
                if (strcmp(g->uuid, uuid) == 0)
                        return g;
                for (size_t k = 0; k < g->n_migs; k++) {
                        if (g->migs[k].used && strcmp(g->migs[k].uuid, uuid) == 0) {
                                if (mig)
                                        *mig = &g->migs[k];
                                return g;
                        }
                }
        }
        return NULL;
}

static bool valid_device(nvmlDevice_t d)
{
        if (!d || !g_state)
                return false;
        for (size_t i = 0; i < g_state->n_gpus; i++) {
                struct mock_gpu *g = &g_state->gpus[i];
                if (d == &g->handle)
                        return true;
                for (size_t k = 0; k < g->n_migs; k++)
                        if (d == &g->migs[k].handle && g->migs[k].used)
                                return true;
        }
        return false;
}

__attribute__((unused)) static bool valid_gi(nvmlGpuInstance_t gi)
{
        if (!gi || !g_state)
                return false;
        for (size_t i = 0; i < g_state->n_gpus; i++)
                for (size_t k = 0; k < g_state->gpus[i].n_gis; k++)
                        if (gi == &g_state->gpus[i].gis[k] && gi->used)
                                return true;
        return false;
}

__attribute__((unused)) static struct mock_mig *mig_of_ci(nvmlComputeInstance_t ci)
{
        if (!ci || !g_state)
                return NULL;
        for (size_t i = 0; i < g_state->n_gpus; i++)
                for (size_t k = 0; k < g_state->gpus[i].n_migs; k++)
                        if (ci == &g_state->gpus[i].migs[k].ci && g_state->gpus[i].migs[k].used)
                                return &g_state->gpus[i].migs[k];
        return NULL;
}

/* The compute slices compute instance |ci| occupies in its GPU instance. */
static unsigned ci_slice_mask(const struct nvmlComputeInstance_st *ci)
{
        static const unsigned slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = { 1, 2, 3, 4, 7,
                                                                              8, 6, 1, 7 };
        unsigned c = ci->profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? slices[ci->profile] : 0;
        return ((1u << c) - 1u) << ci->start;
}

unsigned mock_ci_fit(unsigned g, unsigned index)
{
        static const unsigned slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = { 1, 2, 3, 4, 7,
                                                                              8, 6, 0, 0 };
        unsigned c = index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? slices[index] : 0;
        bool ok = c != 0 && c <= g &&
                  (c <= 2 || c == g || (g == 7 && (c == 3 || c == 4)) || (g == 8 && c == 4));
        return ok ? c : 0;
}

static bool valid_set(nvmlEventSet_t set)
{
        for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
                if (s == set)
                        return true;
        return false;
}

static nvmlReturn_t injected(const struct mock_gpu *g, const char *fn)
{
        for (size_t i = 0; i < g->n_fails; i++)
                if (strcmp(g->fails[i].function, fn) == 0)
                        return g->fails[i].code;
        return NVML_SUCCESS;
}

/* Common checks of a call on GPU |g|: injected error, lost, reset required. */
static nvmlReturn_t gpu_state(const struct mock_gpu *g, const char *fn, bool identity)
{
        nvmlReturn_t r = injected(g, fn);
        if (r != NVML_SUCCESS)
                return r;
        if (g->lost)
                return NVML_ERROR_GPU_IS_LOST;
        if (!identity && g->reset_required)
                return NVML_ERROR_RESET_REQUIRED;
        return NVML_SUCCESS;
}

/* Validates |d| and applies gpu_state(); injected errors apply to the
 * whole-GPU handle only (a MIG handle sees lost / reset of its parent). */
static nvmlReturn_t dev(nvmlDevice_t d, const char *fn, bool identity)
{
        if (!valid_device(d))
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->gpu->hidden || (d->mig && d->mig->hidden))
                return NVML_ERROR_GPU_IS_LOST; /* removed: its handle is stale */
        if (d->mig) {
                if (d->gpu->lost)
                        return NVML_ERROR_GPU_IS_LOST;
                if (!identity && d->gpu->reset_required)
                        return NVML_ERROR_RESET_REQUIRED;
                return NVML_SUCCESS;
        }
        return gpu_state(d->gpu, fn, identity);
}

static nvmlReturn_t put_string(char *buf, unsigned length, const char *value)
{
        if (!buf)
                return NVML_ERROR_INVALID_ARGUMENT;
        size_t n = strlen(value);
        if ((size_t)length < n + 1)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(buf, value, n + 1);
        return NVML_SUCCESS;
}

/* --- events -------------------------------------------------------------- */

static void push_event(struct nvmlEventSet_st *s, const nvmlEventData_t *e)
{
        if (s->len >= MOCK_QUEUE)
                return;         /* full: dropped */
        s->queue[(s->head + s->len) % MOCK_QUEUE] = *e;
        s->len++;
}

static nvmlReturn_t inject_event_locked(const char *uuid, unsigned long long type,
                                        unsigned long long data, unsigned gi, unsigned ci)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        if (!uuid || type == 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_mig *mig;
        struct mock_gpu *g = gpu_by_uuid(uuid, &mig);
        if (!g)
                return NVML_ERROR_NOT_FOUND;
        if (mig && gi == KDEV_NVML_NO_INSTANCE && ci == KDEV_NVML_NO_INSTANCE) {
                gi = mig->gi->id;
                ci = mig->ci.id;
        }
        nvmlEventData_t e = {
                .device = &g->handle,
                .eventType = type,
                .eventData = data,
                .gpuInstanceId = gi,
                .computeInstanceId = ci,
        };
        for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
                if (s->masks[g->index] & type)
                        push_event(s, &e);
        pthread_cond_broadcast(&g_cond);
        return NVML_SUCCESS;
}

/* Free queue slots for an event of |type| on |uuid|: the least among the sets
 * registered for it (UINT_MAX when none is: the event would go nowhere). */
static unsigned room_locked(const char *uuid, unsigned long long type)
{
        struct mock_gpu *g = gpu_by_uuid(uuid, NULL);
        unsigned room = UINT_MAX;
        if (!g)
                return room;
        for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
                if ((s->masks[g->index] & type) && MOCK_QUEUE - s->len < room)
                        room = MOCK_QUEUE - s->len;
        return room;
}

/* Queues the events of the storms that are due by now (as many as fit) and
 * forgets the storms that are done or whose GPU is gone. */
static void storms_advance_locked(void)
{
        if (g_n_storms == 0 || !g_refs)
                return;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        for (unsigned i = 0; i < g_n_storms;) {
                struct mock_storm *st = &g_storms[i];
                long double el = (long double)(now.tv_sec - st->start.tv_sec) +
                                 (long double)(now.tv_nsec - st->start.tv_nsec) / 1e9L;
                long double d = el * (long double)st->rate + 1.0L;
                unsigned long long due = d >= (long double)st->count ? st->count
                                                                      : (unsigned long long)d;
                nvmlReturn_t r = NVML_SUCCESS;
                while (st->sent < due && r == NVML_SUCCESS) {
                        if (room_locked(st->uuid, nvmlEventTypeXidCriticalError) == 0)
                                break;
                        r = inject_event_locked(st->uuid, nvmlEventTypeXidCriticalError,
                                                st->xid, st->gi, st->ci);
                        if (r == NVML_SUCCESS)
                                st->sent++;
                }
                if (r != NVML_SUCCESS)
                        fprintf(stderr, "kdev mock nvml: xid-storm on %s stopped after %llu "
                                "events: %s\n", st->uuid, st->sent,
                                kdev_nvml_builtin_strerror(r));
                if (r != NVML_SUCCESS || st->sent == st->count) {
                        *st = g_storms[--g_n_storms];
                        continue;
                }
                i++;
        }
}

static nvmlReturn_t start_storm_locked(const char *uuid, unsigned long long xid,
                                       unsigned long long count, unsigned long long rate,
                                       unsigned gi, unsigned ci)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        if (count == 0 || rate == 0 || strlen(uuid) >= sizeof(g_storms[0].uuid))
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!gpu_by_uuid(uuid, NULL))
                return NVML_ERROR_NOT_FOUND;
        if (g_n_storms == MOCK_MAX_STORMS)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        struct mock_storm *st = &g_storms[g_n_storms++];
        memset(st, 0, sizeof(*st));
        snprintf(st->uuid, sizeof(st->uuid), "%s", uuid);
        st->xid = xid;
        st->count = count;
        st->rate = rate;
        st->gi = gi;
        st->ci = ci;
        clock_gettime(CLOCK_MONOTONIC, &st->start);
        return NVML_SUCCESS;
}

static nvmlReturn_t set_flag_locked(const char *uuid, int which, int on)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        struct mock_gpu *g = gpu_by_uuid(uuid, NULL);
        if (!g)
                return uuid ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
        switch (which) {
        case 0:
                if (on && !g->lost) {
                        for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
                                if (s->masks[g->index])
                                        s->pending_error = NVML_ERROR_GPU_IS_LOST;
                        pthread_cond_broadcast(&g_cond);
                }
                g->lost = on != 0;
                break;
        case 1:
                g->reset_required = on != 0;
                break;
        default:
                g->remap_pending = on != 0;
                break;
        }
        return NVML_SUCCESS;
}

/* GPU or MIG device |uuid| added (1) or removed (0) at run time. */
static nvmlReturn_t set_present_locked(const char *uuid, int on)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        struct mock_mig *mig;
        struct mock_gpu *g = gpu_by_uuid(uuid, &mig);
        if (!g)
                return uuid ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
        if (mig && on && mig->hidden) {
                /* back only while its compute instance id and slices are
                 * free: another compute instance may have taken them */
                for (size_t k = 0; k < g->n_migs; k++) {
                        const struct mock_mig *x = &g->migs[k];
                        if (x->used && !x->hidden && x->gi == mig->gi &&
                            (x->ci.id == mig->ci.id ||
                             (ci_slice_mask(&x->ci) & ci_slice_mask(&mig->ci))))
                                return NVML_ERROR_IN_USE;
                }
        }
        if (mig) {
                mig->hidden = on == 0;
                changed_locked(NULL);
        } else {
                g->hidden = on == 0;
        }
        return NVML_SUCCESS;
}

/* nvidia-smi -mig <mode> on GPU |uuid|: current and pending mode. */
static nvmlReturn_t set_mig_mode_locked(const char *uuid, unsigned mode)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        struct mock_mig *mig;
        struct mock_gpu *g = gpu_by_uuid(uuid, &mig);
        if (!g || mig)
                return uuid ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
        if (!g->mig_capable)
                return NVML_ERROR_NOT_SUPPORTED;
        if (mode > 1)
                return NVML_ERROR_INVALID_ARGUMENT;
        g->mig_mode = g->mig_pending = mode;
        changed_locked(NULL);
        return NVML_SUCCESS;
}

static nvmlReturn_t set_error_locked(const char *uuid, const char *fn, nvmlReturn_t code)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        if (!uuid || !fn || strlen(fn) >= sizeof(((struct mock_fail *)0)->function))
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = gpu_by_uuid(uuid, NULL);
        if (!g)
                return NVML_ERROR_NOT_FOUND;
        for (size_t i = 0; i < g->n_fails; i++) {
                if (strcmp(g->fails[i].function, fn) == 0) {
                        if (code == NVML_SUCCESS)
                                g->fails[i] = g->fails[--g->n_fails];
                        else
                                g->fails[i].code = code;
                        return NVML_SUCCESS;
                }
        }
        if (code == NVML_SUCCESS)
                return NVML_SUCCESS;
        if (g->n_fails >= MOCK_MAX_FAILS)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        snprintf(g->fails[g->n_fails].function, sizeof(g->fails[0].function), "%s", fn);
        g->fails[g->n_fails].code = code;
        g->n_fails++;
        return NVML_SUCCESS;
}

/* --- control file -------------------------------------------------------- */

static unsigned long long parse_ull(const char *s, bool *ok)
{
        char *end = NULL;
        if (!s) {
                *ok = false;
                return 0;
        }
        errno = 0;
        unsigned long long v = strtoull(s, &end, 0);
        if (errno || *end || s[0] == '-')
                *ok = false;
        return v;
}

/* The handlers of the control file's commands: |w| is the line's words
 * (w[0] the command, w[1] most often a UUID), |num| the numeric words after
 * w[1] in order, the optional ones missing from the line given their
 * defaults (or, for a command with a return code word, num[0] that code),
 * |arg| the command's entry's own argument. */
typedef nvmlReturn_t control_fn(char **w, const unsigned long long *num, int arg);

static nvmlReturn_t ctl_event(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return inject_event_locked(w[1], num[0], num[1], (unsigned)num[2], (unsigned)num[3]);
}

static nvmlReturn_t ctl_xid(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return inject_event_locked(w[1], (unsigned long long)nvmlEventTypeXidCriticalError,
                                   num[0], (unsigned)num[1], (unsigned)num[2]);
}

static nvmlReturn_t ctl_xid_storm(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return start_storm_locked(w[1], num[0], num[1], num[2], (unsigned)num[3],
                                  (unsigned)num[4]);
}

/* |arg|: set_flag_locked's |which|. */
static nvmlReturn_t ctl_flag(char **w, const unsigned long long *num, int arg)
{
        return set_flag_locked(w[1], arg, (int)num[0]);
}

#define CTL_ADD 1 /* ctl_present: added (else removed) */
#define CTL_MIG 2 /* ctl_present: a MIG device's UUID (else a GPU's) */

static nvmlReturn_t ctl_present(char **w, const unsigned long long *num, int arg)
{
        (void)num;
        struct mock_mig *mig = NULL;
        if (ensure_loaded_locked() == NVML_SUCCESS && gpu_by_uuid(w[1], &mig) &&
            (mig != NULL) != ((arg & CTL_MIG) != 0))
                return NVML_ERROR_INVALID_ARGUMENT; /* a GPU UUID for mig-*, or the reverse */
        return set_present_locked(w[1], (arg & CTL_ADD) != 0);
}

static nvmlReturn_t ctl_mig_mode(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return set_mig_mode_locked(w[1], (unsigned)num[0]);
}

static nvmlReturn_t crash_after_locked(const char *fn, unsigned long long count)
{
        if (!fn || count > UINT_MAX)
                return NVML_ERROR_INVALID_ARGUMENT;
        for (size_t i = 0; i < MOCK_CRASH_FNS; i++) {
                if (strcmp(g_crash_fns[i], fn) == 0) {
                        g_crash_after[i] = (unsigned)count;
                        return NVML_SUCCESS;
                }
        }
        return NVML_ERROR_INVALID_ARGUMENT;
}

/* `crash-after <nvmlFunction> [<count>]` */
static nvmlReturn_t ctl_crash_after(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return crash_after_locked(w[1], num[0]);
}

static nvmlReturn_t ctl_init_error(char **w, const unsigned long long *num, int arg)
{
        (void)w;
        (void)arg;
        g_init_error = (nvmlReturn_t)num[0];
        return NVML_SUCCESS;
}

static nvmlReturn_t ctl_error(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        return set_error_locked(w[1], w[2], (nvmlReturn_t)num[0]);
}

/* The GPU (and MIG device, or NULL) of a control line's |uuid|, the
 * topology loaded on demand: NVML_SUCCESS, the load's error or NOT_FOUND. */
static nvmlReturn_t ctl_device(const char *uuid, struct mock_gpu **g, struct mock_mig **mig)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        *g = gpu_by_uuid(uuid, mig);
        return *g ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* `util <gpu-uuid> <gpu%> [<memory%>]`: fixed utilization rates. */
static nvmlReturn_t ctl_util(char **w, const unsigned long long *num, int arg)
{
        (void)arg;
        struct mock_gpu *g = NULL;
        struct mock_mig *mig = NULL;
        nvmlReturn_t r = ctl_device(w[1], &g, &mig);
        if (r != NVML_SUCCESS)
                return r;
        if (mig || num[0] > 100 || num[1] > 100)
                return NVML_ERROR_INVALID_ARGUMENT;
        g->util_fixed = true;
        g->util_gpu = (unsigned)num[0];
        g->util_mem = (unsigned)num[1];
        return NVML_SUCCESS;
}

/* `proc <uuid> <pid> <bytes> [<sm%>]` adds (or replaces) a running compute
 * process on a GPU or MIG device; `proc-exit <uuid> <pid>` (arg 1) ends it. */
static nvmlReturn_t ctl_proc(char **w, const unsigned long long *num, int arg)
{
        struct mock_gpu *g = NULL;
        struct mock_mig *mig = NULL;
        nvmlReturn_t r = ctl_device(w[1], &g, &mig);
        if (r != NVML_SUCCESS)
                return r;
        if (num[0] == 0 || num[0] > 0xFFFFFFFFull)
                return NVML_ERROR_INVALID_ARGUMENT;
        int m = mig ? (int)(mig - g->migs) : -1;
        size_t i = 0;
        while (i < g->n_procs && !(g->procs[i].pid == num[0] && g->procs[i].mig == m))
                i++;
        if (arg) {
                if (i == g->n_procs)
                        return NVML_ERROR_NOT_FOUND;
                memmove(&g->procs[i], &g->procs[i + 1], (g->n_procs - i - 1) * sizeof(g->procs[0]));
                g->n_procs--;
                return NVML_SUCCESS;
        }
        if (num[2] != MOCK_NO_SAMPLE && num[2] > 100)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (i == g->n_procs) {
                if (g->n_procs == MOCK_MAX_PROCS)
                        return NVML_ERROR_INSUFFICIENT_RESOURCES;
                g->n_procs++;
        }
        g->procs[i] = (struct mock_proc){(unsigned)num[0], num[1], (unsigned)num[2], m};
        return NVML_SUCCESS;
}

#define NO_INST ((unsigned long long)KDEV_NVML_NO_INSTANCE)
#define MAX_CTL_NUM 5

/* The control file's commands (mock/nvml/README.md): a line is the command
 * and |words| more words, or |words| + |n_opt| with the optional trailing
 * ones; with |numeric| every word after the first argument is a number
 * (strtoull base 0, no sign), the missing optional ones taking |dflt|;
 * |code|, when not 0, is the index of the word that names an nvmlReturn_t
 * (mock_parse_return). */
static const struct control_cmd {
        const char *name;
        int words, n_opt;
        bool numeric;
        unsigned long long dflt[2];
        int code;
        control_fn *run;
        int arg;
} control_cmds[] = {
        { "xid", 2, 2, true, { NO_INST, NO_INST }, 0, ctl_xid, 0 },
        { "xid-storm", 4, 2, true, { NO_INST, NO_INST }, 0, ctl_xid_storm, 0 },
        { "event", 3, 2, true, { NO_INST, NO_INST }, 0, ctl_event, 0 },
        { "lost", 1, 1, true, { 1 }, 0, ctl_flag, 0 },
        { "reset-required", 1, 1, true, { 1 }, 0, ctl_flag, 1 },
        { "pending-remap", 1, 1, true, { 1 }, 0, ctl_flag, 2 },
        { "gpu-add", 1, 0, false, { 0 }, 0, ctl_present, CTL_ADD },
        { "gpu-remove", 1, 0, false, { 0 }, 0, ctl_present, 0 },
        { "mig-create", 1, 0, false, { 0 }, 0, ctl_present, CTL_ADD | CTL_MIG },
        { "mig-destroy", 1, 0, false, { 0 }, 0, ctl_present, CTL_MIG },
        { "mig-mode", 2, 0, true, { 0 }, 0, ctl_mig_mode, 0 },
        { "crash-after", 1, 1, true, { 1 }, 0, ctl_crash_after, 0 },
        { "init-error", 1, 0, false, { 0 }, 1, ctl_init_error, 0 },
        { "error", 3, 0, false, { 0 }, 3, ctl_error, 0 },
        { "util", 2, 1, true, { 0 }, 0, ctl_util, 0 },
        { "proc", 3, 1, true, { MOCK_NO_SAMPLE }, 0, ctl_proc, 0 },
        { "proc-exit", 2, 0, true, { 0 }, 0, ctl_proc, 1 },
};

/* Runs one control-file line |line| (cut into words in place); a line that
 * fails (unknown command, wrong word count, a bad number, or the command's
 * own error) is reported on stderr. */
static void control_line(char *line)
{
        char *argv[8];
        int argc = 0;
        char *save = NULL;
        for (char *t = strtok_r(line, " \t\r", &save); t && argc < 8;
             t = strtok_r(NULL, " \t\r", &save))
                argv[argc++] = t;
        if (argc == 0 || argv[0][0] == '#')
                return;
        nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
        const char *cmd = argv[0];
        for (size_t i = 0; i < sizeof(control_cmds) / sizeof(control_cmds[0]); i++) {
                const struct control_cmd *c = &control_cmds[i];
                int given = argc - 1;
                if (strcmp(cmd, c->name) != 0 ||
                    (given != c->words && (c->n_opt == 0 || given != c->words + c->n_opt)))
                        continue;
                unsigned long long num[MAX_CTL_NUM] = { 0 };
                bool ok = true;
                if (c->numeric) {
                        int n = c->words + c->n_opt - 1;
                        for (int k = 0; k < n; k++)
                                num[k] = k + 2 < argc ? parse_ull(argv[k + 2], &ok)
                                                      : c->dflt[k - (c->words - 1)];
                }
                nvmlReturn_t code = NVML_SUCCESS;
                if (c->code) {
                        ok = mock_parse_return(argv[c->code], &code) == 0;
                        num[0] = (unsigned long long)code;
                }
                if (ok)
                        r = c->run(argv, num, c->arg);
                break;
        }
        if (r != NVML_SUCCESS)
                fprintf(stderr, "kdev mock nvml: control: \"%s\" failed: %s\n", cmd,
                        kdev_nvml_builtin_strerror(r));
}

/* Applies the complete lines appended to $KDEV_MOCK_NVML_CONTROL since the
 * last poll. A file that shrank is read again from its start. */
static void read_control_locked(void)
{
        const char *path = getenv("KDEV_MOCK_NVML_CONTROL");
        if (!path || !path[0])
                return;
        if (strcmp(path, g_ctl_path) != 0) {
                snprintf(g_ctl_path, sizeof(g_ctl_path), "%s", path);
                g_ctl_off = 0;
        }
        /* O_NONBLOCK and a regular file only: a FIFO must not block NVML */
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == g_ctl_off) {
                close(fd);
                return;
        }
        if (st.st_size < g_ctl_off)
                g_ctl_off = 0;
        char buf[8192];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, g_ctl_off);
        close(fd);
        if (n <= 0)
                return;
        buf[n] = '\0';
        char *start = buf;
        char *nl;
        while ((nl = memchr(start, '\n', (size_t)(buf + n - start)))) {
                *nl = '\0';
                g_ctl_off += nl - start + 1;
                control_line(start);
                start = nl + 1;
        }
}

/* The control file's new lines, then the storms' due events. */
static void poll_control_locked(void)
{
        read_control_locked();
        storms_advance_locked();
}

/* --- locking frame -------------------------------------------------------- */

static nvmlReturn_t enter(void)
{
        pthread_mutex_lock(&g_lock);
        poll_control_locked();
        if (!g_refs)
                return NVML_ERROR_UNINITIALIZED;
        /* kdevMockReset() while initialised: load again on the next call */
        return ensure_loaded_locked();
}

#define LOCKED(expr)                                      \
        do {                                              \
                nvmlReturn_t r_ = enter();                \
                if (r_ == NVML_SUCCESS)                   \
                        r_ = (expr);                      \
                pthread_mutex_unlock(&g_lock);            \
                return r_;                                \
        } while (0)

/* --- implementations (called with the lock held and NVML initialised) ---- */

static nvmlReturn_t m_init(void)
{
        pthread_mutex_lock(&g_lock);
        poll_control_locked();
        nvmlReturn_t r = g_init_error;
        if (r == NVML_SUCCESS && g_refs == 0) {
                /* the instances another process (or an earlier one) left */
                bool loaded = false;
                r = load_locked(&loaded);
                if (r == NVML_SUCCESS && !loaded)
                        state_apply_locked();
        }
        if (r == NVML_SUCCESS)
                g_refs++;
        pthread_mutex_unlock(&g_lock);
        return r;
}

static nvmlReturn_t m_shutdown(void)
{
        pthread_mutex_lock(&g_lock);
        /* Extra shutdowns are not an error (nvml.h nvmlShutdown). */
        if (g_refs > 0)
                g_refs--;
        pthread_mutex_unlock(&g_lock);
        return NVML_SUCCESS;
}

static nvmlReturn_t m_driver_version(char *version, unsigned length)
{
        return put_string(version, length, g_state->driver_version);
}

/* The GPUs not removed, in topology order: NVML's enumeration. */
static unsigned visible_count(void)
{
        unsigned n = 0;
        for (size_t i = 0; i < g_state->n_gpus; i++)
                n += !g_state->gpus[i].hidden;
        return n;
}

static struct mock_gpu *visible_gpu(unsigned index)
{
        for (size_t i = 0; i < g_state->n_gpus; i++) {
                if (g_state->gpus[i].hidden)
                        continue;
                if (index-- == 0)
                        return &g_state->gpus[i];
        }
        return NULL;
}

static nvmlReturn_t m_count(unsigned *n)
{
        if (!n)
                return NVML_ERROR_INVALID_ARGUMENT;
        *n = visible_count();
        return NVML_SUCCESS;
}

static nvmlReturn_t m_by_index(unsigned index, nvmlDevice_t *out)
{
        struct mock_gpu *g = visible_gpu(index);
        if (!out || !g)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = injected(g, "nvmlDeviceGetHandleByIndex");
        if (r != NVML_SUCCESS)
                return r;
        *out = &g->handle;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_by_uuid(const char *uuid, nvmlDevice_t *out)
{
        if (!uuid || !out)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_mig *mig;
        struct mock_gpu *g = gpu_by_uuid(uuid, &mig);
        if (!g || g->hidden || (mig && mig->hidden))
                return NVML_ERROR_NOT_FOUND;
        nvmlReturn_t r = injected(g, "nvmlDeviceGetHandleByUUID");
        if (r != NVML_SUCCESS)
                return r;
        *out = mig ? &mig->handle : &g->handle;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_uuid(nvmlDevice_t d, char *buf, unsigned length)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetUUID", true);
        if (r != NVML_SUCCESS)
                return r;
        return put_string(buf, length, d->mig ? d->mig->uuid : d->gpu->uuid);
}

static void mig_name(const struct mock_mig *m, char *out, size_t size)
{
        const struct mock_gpu *g = m->gi->gpu;
        const struct mock_profile *p = &g->profiles[m->gi->profile];
        static const unsigned ci_slices[] = { 1, 2, 3, 4, 7, 8, 6, 1, 7 };
        unsigned c = ci_slices[m->ci.profile];
        if (c == p->info.sliceCount)
                snprintf(out, size, "%s MIG %s", g->name, p->name);
        else
                snprintf(out, size, "%s MIG %uc.%s", g->name, c, p->name);
}

static nvmlReturn_t m_name(nvmlDevice_t d, char *buf, unsigned length)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetName", true);
        if (r != NVML_SUCCESS)
                return r;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE * 2];
        if (d->mig)
                mig_name(d->mig, name, sizeof(name));
        else
                snprintf(name, sizeof(name), "%s", d->gpu->name);
        return put_string(buf, length, name);
}

static nvmlReturn_t m_index(nvmlDevice_t d, unsigned *index)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetIndex", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!index)
                return NVML_ERROR_INVALID_ARGUMENT;
        unsigned v = 0; /* the position among the GPUs not removed */
        for (size_t i = 0; i < d->gpu->index; i++)
                v += !g_state->gpus[i].hidden;
        *index = v;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_minor(nvmlDevice_t d, unsigned *minor)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetMinorNumber", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!minor)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        *minor = d->gpu->minor;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_pci(nvmlDevice_t d, nvmlPciInfo_t *pci, bool v1)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetPciInfo", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!pci)
                return NVML_ERROR_INVALID_ARGUMENT;
        *pci = d->gpu->pci;
        if (v1)
                memset(pci->busId, 0, sizeof(pci->busId));   /* v1 has no 32-byte busId */
        return NVML_SUCCESS;
}

static nvmlReturn_t m_memory(nvmlDevice_t d, nvmlMemory_t *mem)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetMemoryInfo", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!mem)
                return NVML_ERROR_INVALID_ARGUMENT;
        const struct mock_gpu *g = d->gpu;
        int want = d->mig ? (int)(d->mig - g->migs) : -1;
        if (d->mig) {
                mem->total = g->profiles[d->mig->gi->profile].info.memorySizeMB << 20;
                mem->used = 0;
        } else {
                mem->total = g->mem_total;
                mem->used = g->mem_used;
        }
        /* running processes (control file `proc`) hold memory too: a MIG
         * device's its own, the GPU every process's */
        for (size_t i = 0; i < g->n_procs; i++)
                if (want < 0 || g->procs[i].mig == want)
                        mem->used += g->procs[i].used;
        if (mem->used > mem->total)
                mem->used = mem->total;
        mem->free = mem->total - mem->used;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_cc(nvmlDevice_t d, int *major, int *minor)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetCudaComputeCapability", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!major || !minor)
                return NVML_ERROR_INVALID_ARGUMENT;
        *major = d->gpu->cc_major;
        *minor = d->gpu->cc_minor;
        return NVML_SUCCESS;
}

#ifndef KDEV_MOCK_LEGACY
static nvmlReturn_t m_cuda_version(int *v)
{
        if (!v)
                return NVML_ERROR_INVALID_ARGUMENT;
        *v = g_state->cuda_version;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_arch(nvmlDevice_t d, nvmlDeviceArchitecture_t *arch)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetArchitecture", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!arch)
                return NVML_ERROR_INVALID_ARGUMENT;
        *arch = d->gpu->arch;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_brand(nvmlDevice_t d, nvmlBrandType_t *brand)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetBrand", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!brand)
                return NVML_ERROR_INVALID_ARGUMENT;
        *brand = d->gpu->brand;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_remapped(nvmlDevice_t d, unsigned *corr, unsigned *unc, unsigned *pending,
                               unsigned *failure)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetRemappedRows", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!corr || !unc || !pending || !failure)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        *corr = 0;
        *unc = 0;
        *pending = d->gpu->remap_pending ? 1 : 0;
        *failure = 0;
        return NVML_SUCCESS;
}

/* A whole-GPU handle of a MIG-capable GPU, for the MIG management calls. */
static nvmlReturn_t mig_parent(nvmlDevice_t d, const char *fn, bool identity)
{
        nvmlReturn_t r = dev(d, fn, identity);
        if (r != NVML_SUCCESS)
                return r;
        if (d->mig || !d->gpu->mig_capable)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_mig_mode(nvmlDevice_t d, unsigned *current, unsigned *pending)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetMigMode", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!current || !pending)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig || !d->gpu->mig_capable)
                return NVML_ERROR_NOT_SUPPORTED;
        *current = d->gpu->mig_mode;
        *pending = d->gpu->mig_pending;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_max_mig(nvmlDevice_t d, unsigned *count)
{
        nvmlReturn_t r = mig_parent(d, "nvmlDeviceGetMaxMigDeviceCount", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        *count = d->gpu->mig_max;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_mig_by_index(nvmlDevice_t d, unsigned index, nvmlDevice_t *out)
{
        nvmlReturn_t r = mig_parent(d, "nvmlDeviceGetMigDeviceHandleByIndex", true);
        if (r != NVML_SUCCESS)
                return r;
        struct mock_gpu *g = d->gpu;
        if (!out || index >= g->mig_max)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (g->mig_mode != NVML_DEVICE_MIG_ENABLE || index >= g->n_migs || !g->migs[index].used ||
            g->migs[index].hidden)
                return NVML_ERROR_NOT_FOUND;
        *out = &g->migs[index].handle;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_is_mig(nvmlDevice_t d, unsigned *is_mig)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceIsMigDeviceHandle", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!is_mig)
                return NVML_ERROR_INVALID_ARGUMENT;
        *is_mig = d->mig ? 1 : 0;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_parent(nvmlDevice_t d, nvmlDevice_t *out)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", true);
        if (r != NVML_SUCCESS)
                return r;
        if (!out || !d->mig)
                return NVML_ERROR_INVALID_ARGUMENT;
        *out = &d->gpu->handle;
        return NVML_SUCCESS;
}

/* The GPU instance id (|ci| false) or compute instance id (|ci| true) of MIG
 * device |d|, for NVML function |fn|. */
static nvmlReturn_t instance_id(nvmlDevice_t d, const char *fn, bool ci, unsigned *id)
{
        nvmlReturn_t r = dev(d, fn, true);
        if (r != NVML_SUCCESS)
                return r;
        if (!id)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!d->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        *id = ci ? d->mig->ci.id : d->mig->gi->id;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_gi_id(nvmlDevice_t d, unsigned *id)
{
        return instance_id(d, "nvmlDeviceGetGpuInstanceId", false, id);
}

static nvmlReturn_t m_ci_id(nvmlDevice_t d, unsigned *id)
{
        return instance_id(d, "nvmlDeviceGetComputeInstanceId", true, id);
}

static const unsigned ci_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = { 1, 2, 3, 4, 7, 8, 6,
                                                                          0, 0 };

/* Compute-instance profile |index| inside a GPU instance of profile |p|. */
static nvmlReturn_t ci_profile(const struct mock_profile *p, unsigned index,
                               nvmlComputeInstanceProfileInfo_t *out)
{
        unsigned g = p->info.sliceCount, c = mock_ci_fit(g, index);
        if (!c)
                return NVML_ERROR_NOT_SUPPORTED;
        memset(out, 0, sizeof(*out));
        out->id = index;
        out->sliceCount = c;
        out->instanceCount = g / c;
        out->multiprocessorCount = p->info.multiprocessorCount * c / g;
        out->sharedCopyEngineCount = p->info.copyEngineCount;
        out->sharedDecoderCount = p->info.decoderCount;
        out->sharedEncoderCount = p->info.encoderCount;
        out->sharedJpegCount = p->info.jpegCount;
        out->sharedOfaCount = p->info.ofaCount;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_attributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetAttributes", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!a)
                return NVML_ERROR_INVALID_ARGUMENT;
        /* NVML documents this entry point for MIG device handles; the mock
         * also answers a whole GPU that is not in MIG mode and has an
         * sm_count: its SMs and memory, the other counts 0. */
        if (!d->mig) {
                if (d->gpu->sm_count == 0 || d->gpu->mig_mode == NVML_DEVICE_MIG_ENABLE)
                        return NVML_ERROR_NOT_SUPPORTED;
                memset(a, 0, sizeof(*a));
                a->multiprocessorCount = d->gpu->sm_count;
                a->memorySizeMB = d->gpu->mem_total >> 20;
                return NVML_SUCCESS;
        }
        const struct mock_profile *p = &d->gpu->profiles[d->mig->gi->profile];
        nvmlComputeInstanceProfileInfo_t ci;
        if (ci_profile(p, d->mig->ci.profile, &ci) != NVML_SUCCESS)
                return NVML_ERROR_UNKNOWN;
        a->multiprocessorCount = ci.multiprocessorCount;
        a->sharedCopyEngineCount = p->info.copyEngineCount;
        a->sharedDecoderCount = p->info.decoderCount;
        a->sharedEncoderCount = p->info.encoderCount;
        a->sharedJpegCount = p->info.jpegCount;
        a->sharedOfaCount = p->info.ofaCount;
        a->gpuInstanceSliceCount = p->info.sliceCount;
        a->computeInstanceSliceCount = ci.sliceCount;
        a->memorySizeMB = p->info.memorySizeMB;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_gi_profile(nvmlDevice_t d, unsigned profile,
                                 nvmlGpuInstanceProfileInfo_t *info)
{
        nvmlReturn_t r = mig_parent(d, "nvmlDeviceGetGpuInstanceProfileInfo", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!d->gpu->profiles[profile].present)
                return NVML_ERROR_NOT_SUPPORTED;
        *info = d->gpu->profiles[profile].info;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_gi_by_id(nvmlDevice_t d, unsigned id, nvmlGpuInstance_t *out)
{
        nvmlReturn_t r = mig_parent(d, "nvmlDeviceGetGpuInstanceById", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!out)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = d->gpu;
        if (g->mig_mode != NVML_DEVICE_MIG_ENABLE)
                return NVML_ERROR_NOT_SUPPORTED;
        for (size_t k = 0; k < g->n_gis; k++) {
                if (g->gis[k].used && g->gis[k].id == id) {
                        *out = &g->gis[k];
                        return NVML_SUCCESS;
                }
        }
        return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t m_gi_info(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info)
{
        if (!valid_gi(gi) || !info)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(gi->gpu, "nvmlGpuInstanceGetInfo", false);
        if (r != NVML_SUCCESS)
                return r;
        const struct mock_profile *p = &gi->gpu->profiles[gi->profile];
        info->device = &gi->gpu->handle;
        info->id = gi->id;
        info->profileId = p->info.id;
        info->placement.start = gi->start;
        info->placement.size = gi->size;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_ci_profile(nvmlGpuInstance_t gi, unsigned profile, unsigned eng,
                                 nvmlComputeInstanceProfileInfo_t *info)
{
        if (!valid_gi(gi) || !info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
            eng >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(gi->gpu, "nvmlGpuInstanceGetComputeInstanceProfileInfo", false);
        if (r != NVML_SUCCESS)
                return r;
        return ci_profile(&gi->gpu->profiles[gi->profile], profile, info);
}

static nvmlReturn_t m_ci_by_id(nvmlGpuInstance_t gi, unsigned id, nvmlComputeInstance_t *out)
{
        if (!valid_gi(gi) || !out)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(gi->gpu, "nvmlGpuInstanceGetComputeInstanceById", false);
        if (r != NVML_SUCCESS)
                return r;
        struct mock_gpu *g = gi->gpu;
        for (size_t k = 0; k < g->n_migs; k++) {
                if (g->migs[k].used && g->migs[k].gi == gi && g->migs[k].ci.id == id &&
                    !g->migs[k].hidden) {
                        *out = &g->migs[k].ci;
                        return NVML_SUCCESS;
                }
        }
        return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t m_ci_info(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
        struct mock_mig *m = mig_of_ci(ci);
        if (!m || !info)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(m->gi->gpu, "nvmlComputeInstanceGetInfo", false);
        if (r != NVML_SUCCESS)
                return r;
        info->device = &m->gi->gpu->handle;
        info->gpuInstance = m->gi;
        info->id = ci->id;
        info->profileId = ci->profile;
        info->placement.start = ci->start;
        info->placement.size = ci_slices[ci->profile];
        return NVML_SUCCESS;
}

/* --- dynamic MIG: GPU and compute instance creation and destruction ------- */

/* Memory slices of the MIG GPUs the mock models (A100, H100, H200). */
#define MOCK_MEMORY_SLICES 8

/* GPU-instance placements by GPU-instance profile index, in memory slices
 * {start, size}, for A100, H100 and H200 (8 memory slices, 7 compute
 * slices): NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
 * (the placement figures of A100 and H100; `nvidia-smi mig -lgipp`):
 *   1g (19) and 1g+me (20): {0..6}:1     1g double memory (15): {0,2,4,6}:2
 *   2g (14): {0,2,4}:2    3g (9): {0,4}:4    4g (5): {0}:4    7g (0): {0}:8
 * The one placement table of the mock; a profile it lacks (the 8/6-slice,
 * GFX, NO_ME and ALL_ME profiles of other GPUs) has no placements and
 * cannot be created. */
static const struct mock_placements {
        unsigned size;
        unsigned n;
        unsigned starts[7];
} gi_placements[NVML_GPU_INSTANCE_PROFILE_COUNT] = {
        [NVML_GPU_INSTANCE_PROFILE_1_SLICE] = { 1, 7, { 0, 1, 2, 3, 4, 5, 6 } },
        [NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1] = { 1, 7, { 0, 1, 2, 3, 4, 5, 6 } },
        [NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2] = { 2, 4, { 0, 2, 4, 6 } },
        [NVML_GPU_INSTANCE_PROFILE_2_SLICE] = { 2, 3, { 0, 2, 4 } },
        [NVML_GPU_INSTANCE_PROFILE_3_SLICE] = { 4, 2, { 0, 4 } },
        [NVML_GPU_INSTANCE_PROFILE_4_SLICE] = { 4, 1, { 0 } },
        [NVML_GPU_INSTANCE_PROFILE_7_SLICE] = { 8, 1, { 0 } },
};

/* Slices [start, start + size) as a bit mask. */
static unsigned slice_mask(unsigned start, unsigned size)
{
        return size >= 32 ? ~0u : ((1u << size) - 1u) << start;
}

/* The memory slices the GPU instances of |g| occupy. */
static unsigned gi_occupied(const struct mock_gpu *g)
{
        unsigned m = 0;
        for (size_t k = 0; k < g->n_gis; k++)
                if (g->gis[k].used)
                        m |= slice_mask(g->gis[k].start, g->gis[k].size);
        return m;
}

/* The GPU-instance profile index of driver profile id |id| on |g|, or -1. */
static int gi_profile_index(const struct mock_gpu *g, unsigned id)
{
        for (int i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++)
                if (g->profiles[i].present && g->profiles[i].info.id == id)
                        return i;
        return -1;
}

/* GPU instances of profile index |prof| on |g|. */
static unsigned gi_count(const struct mock_gpu *g, unsigned prof)
{
        unsigned n = 0;
        for (size_t k = 0; k < g->n_gis; k++)
                n += g->gis[k].used && g->gis[k].profile == prof;
        return n;
}

/* How many more GPU instances of profile index |prof| fit on |g|: the free
 * placements taken in order (optimal, as one profile's placements are
 * aligned and of one size), at most instanceCount in all. */
static unsigned gi_remaining(const struct mock_gpu *g, unsigned prof)
{
        const struct mock_placements *pl = &gi_placements[prof];
        unsigned occupied = gi_occupied(g), n = 0;
        for (unsigned i = 0; i < pl->n; i++) {
                unsigned m = slice_mask(pl->starts[i], pl->size);
                if (!(occupied & m)) {
                        occupied |= m;
                        n++;
                }
        }
        unsigned have = gi_count(g, prof), cap = g->profiles[prof].info.instanceCount;
        unsigned left = have >= cap ? 0 : cap - have;
        return n < left ? n : left;
}

/* The whole-GPU handle of a MIG-capable GPU for a GPU-instance call, MIG
 * mode enabled when |enabled|. */
static nvmlReturn_t gi_call(nvmlDevice_t d, const char *fn, bool enabled)
{
        nvmlReturn_t r = mig_parent(d, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        if (enabled && d->gpu->mig_mode != NVML_DEVICE_MIG_ENABLE)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

/* nvmlDeviceGetGpuInstancePossiblePlacements_v2: every placement of the
 * profile, whether MIG is enabled or not (nvml.h); |out| NULL asks for the
 * count, else *|count| is its room (too small: INSUFFICIENT_SIZE and the
 * count). */
static nvmlReturn_t m_gi_placements(nvmlDevice_t d, unsigned profile_id,
                                    nvmlGpuInstancePlacement_t *out, unsigned *count)
{
        nvmlReturn_t r = gi_call(d, "nvmlDeviceGetGpuInstancePossiblePlacements", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        int prof = gi_profile_index(d->gpu, profile_id);
        if (prof < 0 || gi_placements[prof].n == 0)
                return NVML_ERROR_NOT_SUPPORTED;
        const struct mock_placements *pl = &gi_placements[prof];
        if (out && *count < pl->n) {
                *count = pl->n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (unsigned i = 0; out && i < pl->n; i++)
                out[i] = (nvmlGpuInstancePlacement_t){ .start = pl->starts[i], .size = pl->size };
        *count = pl->n;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_gi_remaining(nvmlDevice_t d, unsigned profile_id, unsigned *count)
{
        nvmlReturn_t r = gi_call(d, "nvmlDeviceGetGpuInstanceRemainingCapacity", true);
        if (r != NVML_SUCCESS)
                return r;
        int prof = gi_profile_index(d->gpu, profile_id);
        if (!count || prof < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        *count = gi_remaining(d->gpu, (unsigned)prof);
        return NVML_SUCCESS;
}

/* A new GPU instance of profile index |prof| on |g|: at |want|, or at the
 * free placement with the lowest start. Its id is 0 when it spans the whole
 * GPU and free (the real drivers' full-GPU instance), else the lowest id
 * from 1 not in use. */
static nvmlReturn_t gi_create(struct mock_gpu *g, unsigned prof,
                              const nvmlGpuInstancePlacement_t *want, nvmlGpuInstance_t *out)
{
        const struct mock_placements *pl = &gi_placements[prof];
        if (pl->n == 0)
                return NVML_ERROR_NOT_SUPPORTED;
        unsigned occupied = gi_occupied(g);
        int start = -1;
        for (unsigned i = 0; i < pl->n && start < 0; i++) {
                bool avail = !(occupied & slice_mask(pl->starts[i], pl->size));
                if (want ? want->start == pl->starts[i] && want->size == pl->size : avail)
                        start = (int)pl->starts[i];
        }
        if (want && start < 0)
                return NVML_ERROR_INVALID_ARGUMENT;   /* not one of the profile's placements */
        if (start < 0 || (occupied & slice_mask((unsigned)start, pl->size)) ||
            gi_count(g, prof) >= g->profiles[prof].info.instanceCount)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        struct nvmlGpuInstance_st *gi = NULL;
        for (size_t k = 0; k < MOCK_MAX_MIGS && !gi; k++)
                if (!g->gis[k].used)
                        gi = &g->gis[k];
        if (!gi)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        unsigned id = pl->size == MOCK_MEMORY_SLICES ? 0 : 1;
        for (bool taken = true; taken;) {
                taken = false;
                for (size_t k = 0; k < g->n_gis && !taken; k++)
                        taken = g->gis[k].used && g->gis[k].id == id;
                id += taken;
        }
        *gi = (struct nvmlGpuInstance_st){ .gpu = g, .used = true, .id = id, .profile = prof,
                                           .start = (unsigned)start, .size = pl->size };
        size_t slot = (size_t)(gi - g->gis);
        if (slot >= g->n_gis)
                g->n_gis = slot + 1;
        *out = gi;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_gi_create(nvmlDevice_t d, unsigned profile_id,
                                const nvmlGpuInstancePlacement_t *want, nvmlGpuInstance_t *out)
{
        nvmlReturn_t r = gi_call(d, want ? "nvmlDeviceCreateGpuInstanceWithPlacement"
                                         : "nvmlDeviceCreateGpuInstance", true);
        if (r != NVML_SUCCESS)
                return r;
        int prof = gi_profile_index(d->gpu, profile_id);
        if (!out || prof < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        r = gi_create(d->gpu, (unsigned)prof, want, out);
        if (r == NVML_SUCCESS)
                changed_locked(want ? "nvmlDeviceCreateGpuInstanceWithPlacement"
                                    : "nvmlDeviceCreateGpuInstance");
        return r;
}

/* The GPU instances of a profile, by id. */
static nvmlReturn_t m_gis(nvmlDevice_t d, unsigned profile_id, nvmlGpuInstance_t *out,
                          unsigned *count)
{
        nvmlReturn_t r = gi_call(d, "nvmlDeviceGetGpuInstances", true);
        if (r != NVML_SUCCESS)
                return r;
        int prof = gi_profile_index(d->gpu, profile_id);
        if (!out || !count || prof < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = d->gpu;
        unsigned n = 0;
        long last = -1;
        for (;;) {      /* the next larger id, as the ids are distinct */
                struct nvmlGpuInstance_st *next = NULL;
                for (size_t k = 0; k < g->n_gis; k++) {
                        struct nvmlGpuInstance_st *gi = &g->gis[k];
                        if (gi->used && gi->profile == (unsigned)prof && (long)gi->id > last &&
                            (!next || gi->id < next->id))
                                next = gi;
                }
                if (!next)
                        break;
                out[n++] = next;
                last = (long)next->id;
        }
        *count = n;
        return NVML_SUCCESS;
}

/* True when a process runs on a MIG device of |gi| (|ci| NULL) or on the
 * MIG device |ci|. */
static bool instance_busy(const struct nvmlGpuInstance_st *gi, const struct mock_mig *ci)
{
        const struct mock_gpu *g = gi->gpu;
        for (size_t i = 0; i < g->n_procs; i++) {
                int m = g->procs[i].mig;
                if (m >= 0 && (ci ? &g->migs[m] == ci : g->migs[m].gi == gi))
                        return true;
        }
        return false;
}

/* nvmlGpuInstanceDestroy: IN_USE while the GPU instance has compute
 * instances or processes; MIG devices of it removed with kdevMockSetPresent
 * go with it for good. */
static nvmlReturn_t m_gi_destroy(nvmlGpuInstance_t gi)
{
        if (!valid_gi(gi))
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = gi->gpu;
        nvmlReturn_t r = gpu_state(g, "nvmlGpuInstanceDestroy", false);
        if (r != NVML_SUCCESS)
                return r;
        for (size_t k = 0; k < g->n_migs; k++)
                if (g->migs[k].used && g->migs[k].gi == gi && !g->migs[k].hidden)
                        return NVML_ERROR_IN_USE;
        if (instance_busy(gi, NULL))
                return NVML_ERROR_IN_USE;
        for (size_t k = 0; k < g->n_migs; k++)
                if (g->migs[k].used && g->migs[k].gi == gi)
                        memset(&g->migs[k], 0, sizeof(g->migs[k]));
        memset(gi, 0, sizeof(*gi));
        changed_locked("nvmlGpuInstanceDestroy");
        return NVML_SUCCESS;
}

/* Compute-instance placements {start, size} in compute slices inside a GPU
 * instance of |g| slices, for a compute instance of |c| slices: aligned
 * starts, except 3 slices of a 7-slice instance at 0 and 4 (as NVIDIA's
 * go-nvml mock lists them, pkg/nvml/mock/shared/gpus; nvidia-smi mig
 * -lcipp). Returns the count. */
static unsigned ci_starts(unsigned g, unsigned c, unsigned starts[8])
{
        unsigned n = 0;
        if (g == 7 && c == 3) {
                starts[n++] = 0;
                starts[n++] = 4;
                return n;
        }
        for (unsigned s = 0; c && s + c <= g && n < 8; s += c)
                starts[n++] = s;
        return n;
}

/* The compute slices of |gi| its (present) compute instances occupy. */
static unsigned ci_occupied(const struct nvmlGpuInstance_st *gi)
{
        const struct mock_gpu *g = gi->gpu;
        unsigned m = 0;
        for (size_t k = 0; k < g->n_migs; k++) {
                const struct mock_mig *x = &g->migs[k];
                if (x->used && !x->hidden && x->gi == gi)
                        m |= ci_slice_mask(&x->ci);
        }
        return m;
}

/* Free MIG device slots of |g| (below its max_devices). */
static unsigned mig_slots_free(const struct mock_gpu *g)
{
        unsigned n = 0;
        for (size_t k = 0; k < g->mig_max; k++)
                n += !g->migs[k].used;
        return n;
}

/* The checks of a compute-instance call on |gi| with CI profile |profile|:
 * its info in *|info| and placements in |starts| (count *|n|). */
static nvmlReturn_t ci_call(nvmlGpuInstance_t gi, const char *fn, unsigned profile,
                            nvmlComputeInstanceProfileInfo_t *info, unsigned starts[8],
                            unsigned *n)
{
        if (!valid_gi(gi) || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(gi->gpu, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        const struct mock_profile *p = &gi->gpu->profiles[gi->profile];
        r = ci_profile(p, profile, info);
        if (r != NVML_SUCCESS)
                return r;
        *n = ci_starts(p->info.sliceCount, info->sliceCount, starts);
        return NVML_SUCCESS;
}

static nvmlReturn_t m_ci_placements(nvmlGpuInstance_t gi, unsigned profile,
                                    nvmlComputeInstancePlacement_t *out, unsigned *count)
{
        nvmlComputeInstanceProfileInfo_t info;
        unsigned starts[8], n = 0;
        nvmlReturn_t r = ci_call(gi, "nvmlGpuInstanceGetComputeInstancePossiblePlacements",
                                 profile, &info, starts, &n);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (out && *count < n) {
                *count = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (unsigned i = 0; out && i < n; i++)
                out[i] = (nvmlComputeInstancePlacement_t){ .start = starts[i],
                                                           .size = info.sliceCount };
        *count = n;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_ci_remaining(nvmlGpuInstance_t gi, unsigned profile, unsigned *count)
{
        nvmlComputeInstanceProfileInfo_t info;
        unsigned starts[8], n = 0;
        nvmlReturn_t r = ci_call(gi, "nvmlGpuInstanceGetComputeInstanceRemainingCapacity",
                                 profile, &info, starts, &n);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        unsigned occupied = ci_occupied(gi), fit = 0;
        for (unsigned i = 0; i < n; i++) {
                unsigned m = slice_mask(starts[i], info.sliceCount);
                if (!(occupied & m)) {
                        occupied |= m;
                        fit++;
                }
        }
        unsigned slots = mig_slots_free(gi->gpu);
        *count = fit < slots ? fit : slots;
        return NVML_SUCCESS;
}

/* The UUID of a new MIG device: "MIG-" and a version-5-style UUID hashed
 * (two FNV-1a 64) from the parent's UUID and the GI and CI ids, so the
 * same instance on the same GPU gets the same UUID; a salt is added in the
 * (unlikely) case it names another device. */
static void mig_uuid(const struct mock_gpu *g, unsigned gi, unsigned ci, char *out, size_t size)
{
        for (unsigned salt = 0;; salt++) {
                char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE + 48];
                int len = salt ? snprintf(text, sizeof(text), "%s/%u/%u/%u", g->uuid, gi, ci, salt)
                               : snprintf(text, sizeof(text), "%s/%u/%u", g->uuid, gi, ci);
                unsigned long long h[2] = { 0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL };
                for (int half = 0; half < 2; half++)
                        for (int i = 0; i < len && i < (int)sizeof(text); i++) {
                                h[half] ^= (unsigned char)text[i];
                                h[half] *= 0x100000001b3ULL;
                        }
                snprintf(out, size, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", h[0] >> 32,
                         (h[0] >> 16) & 0xffffULL, (h[0] & 0x0fffULL) | 0x5000ULL,
                         ((h[1] >> 48) & 0x3fffULL) | 0x8000ULL, h[1] & 0xffffffffffffULL);
                if (!gpu_by_uuid(out, NULL))
                        return;
        }
}

/* A new compute instance (MIG device) of CI profile |profile| in |gi|: at
 * |want|, or at the free placement with the lowest start; the lowest CI id
 * from 0 not in use in |gi|; the lowest free MIG device slot. */
static nvmlReturn_t m_ci_create(nvmlGpuInstance_t gi, unsigned profile,
                                const nvmlComputeInstancePlacement_t *want,
                                nvmlComputeInstance_t *out)
{
        nvmlComputeInstanceProfileInfo_t info;
        unsigned starts[8], n = 0;
        nvmlReturn_t r = ci_call(gi, want ? "nvmlGpuInstanceCreateComputeInstanceWithPlacement"
                                          : "nvmlGpuInstanceCreateComputeInstance",
                                 profile, &info, starts, &n);
        if (r != NVML_SUCCESS)
                return r;
        if (!out)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = gi->gpu;
        if (g->mig_mode != NVML_DEVICE_MIG_ENABLE)
                return NVML_ERROR_NOT_SUPPORTED;
        unsigned occupied = ci_occupied(gi);
        int start = -1;
        for (unsigned i = 0; i < n && start < 0; i++) {
                bool avail = !(occupied & slice_mask(starts[i], info.sliceCount));
                if (want ? want->start == starts[i] && want->size == info.sliceCount : avail)
                        start = (int)starts[i];
        }
        if (want && start < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (start < 0 || (occupied & slice_mask((unsigned)start, info.sliceCount)))
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        struct mock_mig *m = NULL;
        for (size_t k = 0; k < g->mig_max && !m; k++)
                if (!g->migs[k].used)
                        m = &g->migs[k];
        if (!m)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        unsigned id = 0;
        for (bool taken = true; taken;) {
                taken = false;
                for (size_t k = 0; k < g->n_migs && !taken; k++)
                        taken = g->migs[k].used && !g->migs[k].hidden && g->migs[k].gi == gi &&
                                g->migs[k].ci.id == id;
                id += taken;
        }
        memset(m, 0, sizeof(*m));
        mig_uuid(g, gi->id, id, m->uuid, sizeof(m->uuid));
        m->used = true;
        m->handle.gpu = g;
        m->handle.mig = m;
        m->gi = gi;
        m->ci = (struct nvmlComputeInstance_st){ .gi = gi, .id = id, .profile = profile,
                                                 .start = (unsigned)start };
        size_t slot = (size_t)(m - g->migs);
        if (slot >= g->n_migs)
                g->n_migs = slot + 1;
        *out = &m->ci;
        changed_locked(want ? "nvmlGpuInstanceCreateComputeInstanceWithPlacement"
                            : "nvmlGpuInstanceCreateComputeInstance");
        return NVML_SUCCESS;
}

/* The compute instances of a CI profile in |gi|, by id. */
static nvmlReturn_t m_cis(nvmlGpuInstance_t gi, unsigned profile, nvmlComputeInstance_t *out,
                          unsigned *count)
{
        nvmlComputeInstanceProfileInfo_t info;
        unsigned starts[8], n = 0;
        nvmlReturn_t r = ci_call(gi, "nvmlGpuInstanceGetComputeInstances", profile, &info,
                                 starts, &n);
        if (r != NVML_SUCCESS)
                return r;
        if (!out || !count)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct mock_gpu *g = gi->gpu;
        unsigned k_out = 0;
        long last = -1;
        for (;;) {
                struct mock_mig *next = NULL;
                for (size_t k = 0; k < g->n_migs; k++) {
                        struct mock_mig *x = &g->migs[k];
                        if (x->used && !x->hidden && x->gi == gi && x->ci.profile == profile &&
                            (long)x->ci.id > last && (!next || x->ci.id < next->ci.id))
                                next = x;
                }
                if (!next)
                        break;
                out[k_out++] = &next->ci;
                last = (long)next->ci.id;
        }
        *count = k_out;
        return NVML_SUCCESS;
}

/* nvmlComputeInstanceDestroy: IN_USE while a process runs on it; its MIG
 * device (handle, UUID, slot) is gone. */
static nvmlReturn_t m_ci_destroy(nvmlComputeInstance_t ci)
{
        struct mock_mig *m = mig_of_ci(ci);
        if (!m || m->hidden)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t r = gpu_state(m->gi->gpu, "nvmlComputeInstanceDestroy", false);
        if (r != NVML_SUCCESS)
                return r;
        if (instance_busy(m->gi, m))
                return NVML_ERROR_IN_USE;
        memset(m, 0, sizeof(*m));
        changed_locked("nvmlComputeInstanceDestroy");
        return NVML_SUCCESS;
}
#endif /* !KDEV_MOCK_LEGACY */

static nvmlReturn_t m_set_create(nvmlEventSet_t *out)
{
        if (!out)
                return NVML_ERROR_INVALID_ARGUMENT;
        struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
        if (!s)
                return NVML_ERROR_MEMORY;
        s->next = g_sets;
        g_sets = s;
        *out = s;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_set_free(nvmlEventSet_t set)
{
        for (struct nvmlEventSet_st **p = &g_sets; *p; p = &(*p)->next) {
                if (*p == set) {
                        *p = set->next;
                        free(set);
                        return NVML_SUCCESS;
                }
        }
        return NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t m_supported_events(nvmlDevice_t d, unsigned long long *types)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetSupportedEventTypes", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!types)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        *types = d->gpu->events;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_register(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceRegisterEvents", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!valid_set(set))
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig || d->gpu->events == 0 || (types & ~d->gpu->events))
                return NVML_ERROR_NOT_SUPPORTED;
        set->masks[d->gpu->index] |= types;
        return NVML_SUCCESS;
}

static bool before(const struct timespec *a, const struct timespec *b)
{
        return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Called with the lock held (after enter()); waits on g_cond. */
static nvmlReturn_t m_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms, bool v1)
{
        if (!data || !valid_set(set))
                return NVML_ERROR_INVALID_ARGUMENT;
        struct timespec deadline;
        kdev_deadline_after_ms(timeout_ms, &deadline);
        for (;;) {
                if (!valid_set(set))
                        return NVML_ERROR_INVALID_ARGUMENT;   /* freed while waiting */
                if (set->pending_error != NVML_SUCCESS) {
                        nvmlReturn_t e = set->pending_error;
                        set->pending_error = NVML_SUCCESS;
                        return e;
                }
                if (set->len > 0) {
                        *data = set->queue[set->head];
                        set->head = (set->head + 1) % MOCK_QUEUE;
                        set->len--;
                        if (v1) {
                                data->gpuInstanceId = KDEV_NVML_NO_INSTANCE;
                                data->computeInstanceId = KDEV_NVML_NO_INSTANCE;
                        }
                        return NVML_SUCCESS;
                }
                struct timespec now, until = deadline;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (!before(&now, &deadline))
                        return NVML_ERROR_TIMEOUT;
                const char *ctl = getenv("KDEV_MOCK_NVML_CONTROL");
                if ((ctl && ctl[0]) || g_n_storms > 0) {
                        struct timespec slice;
                        kdev_deadline_after_ms(20, &slice);
                        if (before(&slice, &until))
                                until = slice;
                }
                pthread_cond_timedwait(&g_cond, &g_lock, &until);
                poll_control_locked();
        }
}

static nvmlReturn_t m_topology(nvmlDevice_t d1, nvmlDevice_t d2, nvmlGpuTopologyLevel_t *level)
{
        nvmlReturn_t r = dev(d1, "nvmlDeviceGetTopologyCommonAncestor", false);
        if (r != NVML_SUCCESS)
                return r;
        r = dev(d2, "nvmlDeviceGetTopologyCommonAncestor", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!level || d1 == d2)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d1->mig || d2->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        *level = g_state->levels[d1->gpu->index * g_state->n_gpus + d2->gpu->index];
        return NVML_SUCCESS;
}

static nvmlReturn_t link_check(nvmlDevice_t d, unsigned link, const void *out, const char *fn)
{
        nvmlReturn_t r = dev(d, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        if (!out || link >= NVML_NVLINK_MAX_LINKS)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig || link >= d->gpu->n_nvlinks)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_link_state(nvmlDevice_t d, unsigned link, nvmlEnableState_t *active)
{
        nvmlReturn_t r = link_check(d, link, active, "nvmlDeviceGetNvLinkState");
        if (r != NVML_SUCCESS)
                return r;
        *active = d->gpu->links[link].connected ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
}

static nvmlReturn_t m_link_remote(nvmlDevice_t d, unsigned link, nvmlPciInfo_t *pci, bool v1)
{
        nvmlReturn_t r = link_check(d, link, pci, "nvmlDeviceGetNvLinkRemotePciInfo");
        if (r != NVML_SUCCESS)
                return r;
        if (!d->gpu->links[link].connected)
                return NVML_ERROR_NOT_SUPPORTED;
        *pci = d->gpu->links[link].remote;
        if (v1)
                memset(pci->busId, 0, sizeof(pci->busId));
        return NVML_SUCCESS;
}

/* --- exported NVML entry points ------------------------------------------ */

MOCK_EXPORT kdev_nvmlErrorString_fn nvmlErrorString;
const char *nvmlErrorString(nvmlReturn_t result)
{
        return kdev_nvml_builtin_strerror(result);
}

MOCK_EXPORT kdev_nvmlInit_fn nvmlInit;
nvmlReturn_t nvmlInit(void) { return m_init(); }
MOCK_EXPORT kdev_nvmlShutdown_fn nvmlShutdown;
nvmlReturn_t nvmlShutdown(void) { return m_shutdown(); }
MOCK_EXPORT kdev_nvmlSystemGetDriverVersion_fn nvmlSystemGetDriverVersion;
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { LOCKED(m_driver_version(v, n)); }
MOCK_EXPORT kdev_nvmlDeviceGetCount_fn nvmlDeviceGetCount;
nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { LOCKED(m_count(n)); }
MOCK_EXPORT kdev_nvmlDeviceGetHandleByIndex_fn nvmlDeviceGetHandleByIndex;
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { LOCKED(m_by_index(i, d)); }
MOCK_EXPORT kdev_nvmlDeviceGetHandleByUUID_fn nvmlDeviceGetHandleByUUID;
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *d) { LOCKED(m_by_uuid(u, d)); }
MOCK_EXPORT kdev_nvmlDeviceGetUUID_fn nvmlDeviceGetUUID;
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *b, unsigned int n) { LOCKED(m_uuid(d, b, n)); }
MOCK_EXPORT kdev_nvmlDeviceGetName_fn nvmlDeviceGetName;
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *b, unsigned int n) { LOCKED(m_name(d, b, n)); }
MOCK_EXPORT kdev_nvmlDeviceGetIndex_fn nvmlDeviceGetIndex;
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) { LOCKED(m_index(d, i)); }
MOCK_EXPORT kdev_nvmlDeviceGetMinorNumber_fn nvmlDeviceGetMinorNumber;
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *m) { LOCKED(m_minor(d, m)); }
MOCK_EXPORT kdev_nvmlDeviceGetPciInfo_fn nvmlDeviceGetPciInfo;
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { LOCKED(m_pci(d, p, true)); }
/* nvmlDeviceGetUtilizationRates: the GPU's busy percentage since this
 * process's previous call for it (the first call: 0), from the mock
 * libcuda.so.1's GPU timeline ($KDEV_MOCK_CUDA_GPU_FILE: every process's
 * kernels); memory utilization 0. Without the file: 0 and 0. */
typedef nvmlUtilization_t mock_utilization_t;
static const volatile unsigned long long *g_cuda_busy;  /* busy_total[MOCK_MAX_GPUS] */
static unsigned long long g_util_t[MOCK_MAX_GPUS], g_util_busy[MOCK_MAX_GPUS];

static nvmlReturn_t m_utilization(nvmlDevice_t d, mock_utilization_t *u)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetUtilizationRates", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!u)
                return NVML_ERROR_INVALID_ARGUMENT;
        u->gpu = u->memory = 0;
        if (d->gpu->util_fixed && !d->mig) {
                u->gpu = d->gpu->util_gpu;
                u->memory = d->gpu->util_mem;
                return NVML_SUCCESS;
        }
        const char *path = getenv("KDEV_MOCK_CUDA_GPU_FILE");
        if (!g_cuda_busy && path && *path) {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                        size_t len = 2 * MOCK_MAX_GPUS * sizeof(unsigned long long);
                        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
                        close(fd);
                        if (m != MAP_FAILED)
                                g_cuda_busy = (const unsigned long long *)m + MOCK_MAX_GPUS;
                }
        }
        unsigned i = d->gpu->index;
        if (!g_cuda_busy || d->mig || i >= MOCK_MAX_GPUS)
                return NVML_SUCCESS;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ull +
                                 (unsigned long long)ts.tv_nsec;
        unsigned long long busy = __atomic_load_n(&g_cuda_busy[i], __ATOMIC_RELAXED);
        if (g_util_t[i] && now > g_util_t[i]) {
                unsigned long long pct = (busy - g_util_busy[i]) * 100 / (now - g_util_t[i]);
                u->gpu = (unsigned)(pct > 100 ? 100 : pct);
        }
        g_util_t[i] = now;
        g_util_busy[i] = busy;
        return NVML_SUCCESS;
}
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, mock_utilization_t *u);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, mock_utilization_t *u)
{
        LOCKED(m_utilization(d, u));
}
#ifndef KDEV_MOCK_LEGACY
/* The running compute processes of a GPU (every one, MIG devices' with
 * their GI/CI IDs) or of a MIG device (its own), in the order `proc` lines
 * added them. */
static nvmlReturn_t m_processes(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetComputeRunningProcesses", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        const struct mock_gpu *g = d->gpu;
        int want = d->mig ? (int)(d->mig - g->migs) : -1;
        unsigned n = 0;
        for (size_t i = 0; i < g->n_procs; i++)
                n += want < 0 || g->procs[i].mig == want;
        if (*count < n || (n && !infos)) {
                *count = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        unsigned k = 0;
        for (size_t i = 0; i < g->n_procs; i++) {
                const struct mock_proc *p = &g->procs[i];
                if (want >= 0 && p->mig != want)
                        continue;
                const struct mock_mig *m = p->mig >= 0 ? &g->migs[p->mig] : NULL;
                infos[k++] = (nvmlProcessInfo_t){
                        .pid = p->pid,
                        .usedGpuMemory = p->used,
                        .gpuInstanceId = m ? m->gi->id : KDEV_NVML_NO_INSTANCE,
                        .computeInstanceId = m ? m->ci.id : KDEV_NVML_NO_INSTANCE,
                };
        }
        *count = n;
        return NVML_SUCCESS;
}
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *n,
                                                                 nvmlProcessInfo_t *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *n,
                                                     nvmlProcessInfo_t *p)
{
        LOCKED(m_processes(d, n, p));
}
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *n,
                                                                 nvmlProcessInfo_t *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *n,
                                                     nvmlProcessInfo_t *p)
{
        LOCKED(m_processes(d, n, p));
}

/* Per-process samples: one per process of the GPU with an `sm` figure,
 * stamped with the time of the call (a process running steadily at that
 * rate); NOT_FOUND when none is newer than |last|; NOT_SUPPORTED on a MIG
 * device (as NVML). */
static nvmlReturn_t m_proc_util(nvmlDevice_t d, nvmlProcessUtilizationSample_t *out,
                                unsigned *count, unsigned long long last)
{
        nvmlReturn_t r = dev(d, "nvmlDeviceGetProcessUtilization", false);
        if (r != NVML_SUCCESS)
                return r;
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig)
                return NVML_ERROR_NOT_SUPPORTED;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ull +
                                 (unsigned long long)ts.tv_nsec / 1000;
        const struct mock_gpu *g = d->gpu;
        unsigned n = 0;
        for (size_t i = 0; i < g->n_procs; i++)
                n += g->procs[i].sm != MOCK_NO_SAMPLE;
        if (!n || now <= last)
                return NVML_ERROR_NOT_FOUND;
        if (!out || *count < n) {
                *count = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        unsigned k = 0;
        for (size_t i = 0; i < g->n_procs; i++)
                if (g->procs[i].sm != MOCK_NO_SAMPLE)
                        out[k++] = (nvmlProcessUtilizationSample_t){
                                .pid = g->procs[i].pid, .timeStamp = now,
                                .smUtil = g->procs[i].sm};
        *count = n;
        return NVML_SUCCESS;
}
MOCK_EXPORT kdev_nvmlDeviceGetProcessUtilization_fn nvmlDeviceGetProcessUtilization;
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u,
                                             unsigned int *n, unsigned long long last)
{
        LOCKED(m_proc_util(d, u, n, last));
}
#endif /* !KDEV_MOCK_LEGACY */
MOCK_EXPORT kdev_nvmlDeviceGetMemoryInfo_fn nvmlDeviceGetMemoryInfo;
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) { LOCKED(m_memory(d, m)); }
MOCK_EXPORT kdev_nvmlDeviceGetCudaComputeCapability_fn nvmlDeviceGetCudaComputeCapability;
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *a, int *b)
{
        LOCKED(m_cc(d, a, b));
}
MOCK_EXPORT kdev_nvmlEventSetCreate_fn nvmlEventSetCreate;
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *s) { LOCKED(m_set_create(s)); }
MOCK_EXPORT kdev_nvmlEventSetFree_fn nvmlEventSetFree;
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t s) { LOCKED(m_set_free(s)); }
MOCK_EXPORT kdev_nvmlEventSetWait_fn nvmlEventSetWait;
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t s, nvmlEventData_t *e, unsigned int t)
{
        LOCKED(m_wait(s, e, t, true));
}
MOCK_EXPORT kdev_nvmlDeviceGetSupportedEventTypes_fn nvmlDeviceGetSupportedEventTypes;
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *t)
{
        LOCKED(m_supported_events(d, t));
}
MOCK_EXPORT kdev_nvmlDeviceRegisterEvents_fn nvmlDeviceRegisterEvents;
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long t, nvmlEventSet_t s)
{
        LOCKED(m_register(d, t, s));
}
MOCK_EXPORT kdev_nvmlDeviceGetTopologyCommonAncestor_fn nvmlDeviceGetTopologyCommonAncestor;
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                 nvmlGpuTopologyLevel_t *l)
{
        LOCKED(m_topology(a, b, l));
}
MOCK_EXPORT kdev_nvmlDeviceGetNvLinkState_fn nvmlDeviceGetNvLinkState;
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int l, nvmlEnableState_t *a)
{
        LOCKED(m_link_state(d, l, a));
}
MOCK_EXPORT kdev_nvmlDeviceGetNvLinkRemotePciInfo_fn nvmlDeviceGetNvLinkRemotePciInfo;
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int l, nvmlPciInfo_t *p)
{
        LOCKED(m_link_remote(d, l, p, true));
}

#ifndef KDEV_MOCK_LEGACY
MOCK_EXPORT kdev_nvmlInit_fn nvmlInit_v2;
nvmlReturn_t nvmlInit_v2(void) { return m_init(); }
MOCK_EXPORT kdev_nvmlDeviceGetCount_fn nvmlDeviceGetCount_v2;
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { LOCKED(m_count(n)); }
MOCK_EXPORT kdev_nvmlDeviceGetHandleByIndex_fn nvmlDeviceGetHandleByIndex_v2;
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
        LOCKED(m_by_index(i, d));
}
MOCK_EXPORT kdev_nvmlDeviceGetPciInfo_fn nvmlDeviceGetPciInfo_v2;
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { LOCKED(m_pci(d, p, false)); }
MOCK_EXPORT kdev_nvmlDeviceGetPciInfo_fn nvmlDeviceGetPciInfo_v3;
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { LOCKED(m_pci(d, p, false)); }
MOCK_EXPORT kdev_nvmlEventSetWait_fn nvmlEventSetWait_v2;
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *e, unsigned int t)
{
        LOCKED(m_wait(s, e, t, false));
}
MOCK_EXPORT kdev_nvmlDeviceGetNvLinkRemotePciInfo_fn nvmlDeviceGetNvLinkRemotePciInfo_v2;
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int l, nvmlPciInfo_t *p)
{
        LOCKED(m_link_remote(d, l, p, false));
}
MOCK_EXPORT kdev_nvmlSystemGetCudaDriverVersion_fn nvmlSystemGetCudaDriverVersion;
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { LOCKED(m_cuda_version(v)); }
MOCK_EXPORT kdev_nvmlSystemGetCudaDriverVersion_fn nvmlSystemGetCudaDriverVersion_v2;
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { LOCKED(m_cuda_version(v)); }
MOCK_EXPORT kdev_nvmlDeviceGetArchitecture_fn nvmlDeviceGetArchitecture;
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t *a)
{
        LOCKED(m_arch(d, a));
}
MOCK_EXPORT kdev_nvmlDeviceGetBrand_fn nvmlDeviceGetBrand;
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, nvmlBrandType_t *b)
{
        LOCKED(m_brand(d, b));
}
MOCK_EXPORT kdev_nvmlDeviceGetRemappedRows_fn nvmlDeviceGetRemappedRows;
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *c, unsigned int *u,
                                       unsigned int *p, unsigned int *f)
{
        LOCKED(m_remapped(d, c, u, p, f));
}
MOCK_EXPORT kdev_nvmlDeviceGetMigMode_fn nvmlDeviceGetMigMode;
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *c, unsigned int *p)
{
        LOCKED(m_mig_mode(d, c, p));
}
MOCK_EXPORT kdev_nvmlDeviceGetMaxMigDeviceCount_fn nvmlDeviceGetMaxMigDeviceCount;
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *c)
{
        LOCKED(m_max_mig(d, c));
}
MOCK_EXPORT kdev_nvmlDeviceGetMigDeviceHandleByIndex_fn nvmlDeviceGetMigDeviceHandleByIndex;
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int i, nvmlDevice_t *m)
{
        LOCKED(m_mig_by_index(d, i, m));
}
MOCK_EXPORT kdev_nvmlDeviceIsMigDeviceHandle_fn nvmlDeviceIsMigDeviceHandle;
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *m)
{
        LOCKED(m_is_mig(d, m));
}
MOCK_EXPORT kdev_nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle;
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t m, nvmlDevice_t *d)
{
        LOCKED(m_parent(m, d));
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstanceId_fn nvmlDeviceGetGpuInstanceId;
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *i) { LOCKED(m_gi_id(d, i)); }
MOCK_EXPORT kdev_nvmlDeviceGetComputeInstanceId_fn nvmlDeviceGetComputeInstanceId;
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *i)
{
        LOCKED(m_ci_id(d, i));
}
MOCK_EXPORT kdev_nvmlDeviceGetAttributes_fn nvmlDeviceGetAttributes;
nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
        LOCKED(m_attributes(d, a));
}
MOCK_EXPORT kdev_nvmlDeviceGetAttributes_fn nvmlDeviceGetAttributes_v2;
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
        LOCKED(m_attributes(d, a));
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstanceProfileInfo_fn nvmlDeviceGetGpuInstanceProfileInfo;
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int p,
                                                 nvmlGpuInstanceProfileInfo_t *i)
{
        LOCKED(m_gi_profile(d, p, i));
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstanceById_fn nvmlDeviceGetGpuInstanceById;
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *g)
{
        LOCKED(m_gi_by_id(d, id, g));
}
MOCK_EXPORT kdev_nvmlGpuInstanceGetInfo_fn nvmlGpuInstanceGetInfo;
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *i)
{
        LOCKED(m_gi_info(g, i));
}
MOCK_EXPORT kdev_nvmlGpuInstanceGetComputeInstanceProfileInfo_fn
        nvmlGpuInstanceGetComputeInstanceProfileInfo;
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t g, unsigned int p,
                                                          unsigned int e,
                                                          nvmlComputeInstanceProfileInfo_t *i)
{
        LOCKED(m_ci_profile(g, p, e, i));
}
MOCK_EXPORT kdev_nvmlGpuInstanceGetComputeInstanceById_fn nvmlGpuInstanceGetComputeInstanceById;
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t g, unsigned int id,
                                                   nvmlComputeInstance_t *c)
{
        LOCKED(m_ci_by_id(g, id, c));
}
MOCK_EXPORT kdev_nvmlComputeInstanceGetInfo_fn nvmlComputeInstanceGetInfo;
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *i)
{
        LOCKED(m_ci_info(c, i));
}
MOCK_EXPORT kdev_nvmlComputeInstanceGetInfo_fn nvmlComputeInstanceGetInfo_v2;
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *i)
{
        LOCKED(m_ci_info(c, i));
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstancePossiblePlacements_fn
        nvmlDeviceGetGpuInstancePossiblePlacements_v2;
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int p,
                                                           nvmlGpuInstancePlacement_t *pl,
                                                           unsigned int *n)
{
        LOCKED(m_gi_placements(d, p, pl, n));
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstanceRemainingCapacity_fn
        nvmlDeviceGetGpuInstanceRemainingCapacity;
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned int p,
                                                       unsigned int *n)
{
        LOCKED(m_gi_remaining(d, p, n));
}
MOCK_EXPORT kdev_nvmlDeviceCreateGpuInstance_fn nvmlDeviceCreateGpuInstance;
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned int p, nvmlGpuInstance_t *g)
{
        LOCKED(m_gi_create(d, p, NULL, g));
}
MOCK_EXPORT kdev_nvmlDeviceCreateGpuInstanceWithPlacement_fn
        nvmlDeviceCreateGpuInstanceWithPlacement;
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int p,
                                                      const nvmlGpuInstancePlacement_t *pl,
                                                      nvmlGpuInstance_t *g)
{
        LOCKED(pl ? m_gi_create(d, p, pl, g) : NVML_ERROR_INVALID_ARGUMENT);
}
MOCK_EXPORT kdev_nvmlDeviceGetGpuInstances_fn nvmlDeviceGetGpuInstances;
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int p, nvmlGpuInstance_t *g,
                                       unsigned int *n)
{
        LOCKED(m_gis(d, p, g, n));
}
MOCK_EXPORT kdev_nvmlGpuInstanceDestroy_fn nvmlGpuInstanceDestroy;
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t g) { LOCKED(m_gi_destroy(g)); }
MOCK_EXPORT kdev_nvmlGpuInstanceGetComputeInstancePossiblePlacements_fn
        nvmlGpuInstanceGetComputeInstancePossiblePlacements;
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
        nvmlGpuInstance_t g, unsigned int p, nvmlComputeInstancePlacement_t *pl, unsigned int *n)
{
        LOCKED(m_ci_placements(g, p, pl, n));
}
MOCK_EXPORT kdev_nvmlGpuInstanceGetComputeInstanceRemainingCapacity_fn
        nvmlGpuInstanceGetComputeInstanceRemainingCapacity;
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t g,
                                                                unsigned int p, unsigned int *n)
{
        LOCKED(m_ci_remaining(g, p, n));
}
MOCK_EXPORT kdev_nvmlGpuInstanceCreateComputeInstance_fn nvmlGpuInstanceCreateComputeInstance;
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t g, unsigned int p,
                                                  nvmlComputeInstance_t *c)
{
        LOCKED(m_ci_create(g, p, NULL, c));
}
MOCK_EXPORT kdev_nvmlGpuInstanceCreateComputeInstanceWithPlacement_fn
        nvmlGpuInstanceCreateComputeInstanceWithPlacement;
nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
        nvmlGpuInstance_t g, unsigned int p, const nvmlComputeInstancePlacement_t *pl,
        nvmlComputeInstance_t *c)
{
        LOCKED(pl ? m_ci_create(g, p, pl, c) : NVML_ERROR_INVALID_ARGUMENT);
}
MOCK_EXPORT kdev_nvmlGpuInstanceGetComputeInstances_fn nvmlGpuInstanceGetComputeInstances;
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t g, unsigned int p,
                                                nvmlComputeInstance_t *c, unsigned int *n)
{
        LOCKED(m_cis(g, p, c, n));
}
MOCK_EXPORT kdev_nvmlComputeInstanceDestroy_fn nvmlComputeInstanceDestroy;
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t c) { LOCKED(m_ci_destroy(c)); }
#endif /* !KDEV_MOCK_LEGACY */

/* --- control interface (kdev_mock_nvml.h) -------------------------------- */

#define CONTROL(expr)                                     \
        do {                                              \
                pthread_mutex_lock(&g_lock);              \
                nvmlReturn_t r_ = (expr);                 \
                pthread_mutex_unlock(&g_lock);            \
                return r_;                                \
        } while (0)

MOCK_EXPORT kdevMockInjectEvent_fn kdevMockInjectEvent;
nvmlReturn_t kdevMockInjectEvent(const char *uuid, unsigned long long type,
                                 unsigned long long data, unsigned gi, unsigned ci)
{
        CONTROL(inject_event_locked(uuid, type, data, gi, ci));
}

MOCK_EXPORT kdevMockInjectXid_fn kdevMockInjectXid;
nvmlReturn_t kdevMockInjectXid(const char *uuid, unsigned long long xid, unsigned gi, unsigned ci)
{
        CONTROL(inject_event_locked(uuid, (unsigned long long)nvmlEventTypeXidCriticalError, xid,
                                    gi, ci));
}

MOCK_EXPORT kdevMockSetLost_fn kdevMockSetLost;
nvmlReturn_t kdevMockSetLost(const char *uuid, int lost) { CONTROL(set_flag_locked(uuid, 0, lost)); }
MOCK_EXPORT kdevMockSetPresent_fn kdevMockSetPresent;
nvmlReturn_t kdevMockSetPresent(const char *uuid, int on) { CONTROL(set_present_locked(uuid, on)); }
MOCK_EXPORT kdevMockSetMigMode_fn kdevMockSetMigMode;
nvmlReturn_t kdevMockSetMigMode(const char *uuid, unsigned mode) { CONTROL(set_mig_mode_locked(uuid, mode)); }

MOCK_EXPORT kdevMockSetResetRequired_fn kdevMockSetResetRequired;
nvmlReturn_t kdevMockSetResetRequired(const char *uuid, int on)
{
        CONTROL(set_flag_locked(uuid, 1, on));
}

MOCK_EXPORT kdevMockSetPendingRemap_fn kdevMockSetPendingRemap;
nvmlReturn_t kdevMockSetPendingRemap(const char *uuid, int on)
{
        CONTROL(set_flag_locked(uuid, 2, on));
}

MOCK_EXPORT kdevMockSetError_fn kdevMockSetError;
nvmlReturn_t kdevMockSetError(const char *uuid, const char *function, nvmlReturn_t code)
{
        CONTROL(set_error_locked(uuid, function, code));
}

MOCK_EXPORT kdevMockSetInitError_fn kdevMockSetInitError;
nvmlReturn_t kdevMockSetInitError(nvmlReturn_t code)
{
        pthread_mutex_lock(&g_lock);
        g_init_error = code;
        pthread_mutex_unlock(&g_lock);
        return NVML_SUCCESS;
}

static int mkdir_p(char *path)
{
        for (char *p = path + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                int rc = mkdir(path, 0755);
                *p = '/';
                if (rc < 0 && errno != EEXIST)
                        return -1;
        }
        return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static nvmlReturn_t write_sysfs_locked(const char *root)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        if (!root || !root[0])
                return NVML_ERROR_INVALID_ARGUMENT;
        for (size_t i = 0; i < g_state->n_gpus; i++) {
                const struct mock_gpu *g = &g_state->gpus[i];
                char id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
                char path[PATH_MAX];
                /* "00000000:3B:00.0" -> "0000:3b:00.0", as NVIDIA's plugin looks it up */
                size_t n = strlen(g->pci.busId);
                for (size_t k = 4; k <= n; k++)
                        id[k - 4] = (char)((g->pci.busId[k] >= 'A' && g->pci.busId[k] <= 'F')
                                                   ? g->pci.busId[k] - 'A' + 'a'
                                                   : g->pci.busId[k]);
                snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", root, id);
                if (mkdir_p(path) < 0)
                        return NVML_ERROR_OPERATING_SYSTEM;
                strncat(path, "/numa_node", sizeof(path) - strlen(path) - 1);
                FILE *f = fopen(path, "we");
                if (!f)
                        return NVML_ERROR_OPERATING_SYSTEM;
                fprintf(f, "%d\n", g->numa_node);
                if (fclose(f) != 0)
                        return NVML_ERROR_OPERATING_SYSTEM;
        }
        return NVML_SUCCESS;
}

MOCK_EXPORT kdevMockWriteSysfs_fn kdevMockWriteSysfs;
nvmlReturn_t kdevMockWriteSysfs(const char *root) { CONTROL(write_sysfs_locked(root)); }

/* The real driver's numbering: config 1, monitor 2, then for GPU minor g,
 * GPU instance i (0..14) and compute instance c (0..7):
 * gpu<g>/gi<i>/access = 3 + 135 g + 9 i, gpu<g>/gi<i>/ci<c>/access = that + 1 + c. */
static nvmlReturn_t write_proc_locked(const char *root)
{
        nvmlReturn_t r = ensure_loaded_locked();
        if (r != NVML_SUCCESS)
                return r;
        if (!root || !root[0])
                return NVML_ERROR_INVALID_ARGUMENT;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps", root);
        if (mkdir_p(path) < 0)
                return NVML_ERROR_OPERATING_SYSTEM;
        strncat(path, "/mig-minors", sizeof(path) - strlen(path) - 1);
        FILE *f = fopen(path, "we");
        if (!f)
                return NVML_ERROR_OPERATING_SYSTEM;
        fprintf(f, "config 1\nmonitor 2\n");
        for (size_t i = 0; i < g_state->n_gpus; i++) {
                unsigned g = g_state->gpus[i].minor;
                for (unsigned gi = 0; gi < 15; gi++) {
                        unsigned base = 3 + 135 * g + 9 * gi;
                        fprintf(f, "gpu%u/gi%u/access %u\n", g, gi, base);
                        for (unsigned ci = 0; ci < 8; ci++)
                                fprintf(f, "gpu%u/gi%u/ci%u/access %u\n", g, gi, ci, base + 1 + ci);
                }
        }
        return fclose(f) != 0 ? NVML_ERROR_OPERATING_SYSTEM : NVML_SUCCESS;
}

MOCK_EXPORT kdevMockWriteProc_fn kdevMockWriteProc;
nvmlReturn_t kdevMockWriteProc(const char *root) { CONTROL(write_proc_locked(root)); }

MOCK_EXPORT kdevMockReset_fn kdevMockReset;
void kdevMockReset(void)
{
        pthread_mutex_lock(&g_lock);
        clear_sets_locked();
        mock_state_free(g_state);
        g_state = NULL;
        g_init_error = NVML_SUCCESS;
        g_last_error[0] = '\0';
        g_ctl_path[0] = '\0';
        g_ctl_off = 0;
        g_n_storms = 0;
        g_state_error[0] = '\0';
        memset(g_crash_after, 0, sizeof(g_crash_after));
        pthread_mutex_unlock(&g_lock);
}

MOCK_EXPORT kdevMockCrashAfter_fn kdevMockCrashAfter;
nvmlReturn_t kdevMockCrashAfter(const char *function, unsigned count)
{
        CONTROL(crash_after_locked(function, count));
}

MOCK_EXPORT kdevMockLastStateError_fn kdevMockLastStateError;
const char *kdevMockLastStateError(void)
{
        return g_state_error;
}

MOCK_EXPORT kdevMockLastError_fn kdevMockLastError;
const char *kdevMockLastError(void)
{
        return g_last_error;
}

MOCK_EXPORT kdevMockInitCount_fn kdevMockInitCount;
unsigned kdevMockInitCount(void)
{
        pthread_mutex_lock(&g_lock);
        unsigned n = g_refs;
        pthread_mutex_unlock(&g_lock);
        return n;
}
