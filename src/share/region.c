/* The share region (region.h): creation, slots, reservations, the reader.
 * libc only; no allocation. */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "share/region.h"

#define REGION_NAME "region"

static int check(const struct kdev_share_region_file *r, size_t size, const char *path,
                 char *msg, size_t msg_size)
{
        if (size != sizeof(*r) || memcmp(r->magic, KDEV_SHARE_REGION_MAGIC, 8) != 0) {
                snprintf(msg, msg_size, "%s: is not a share region (%zu bytes, want %zu)", path,
                         size, sizeof(*r));
                return -1;
        }
        if (r->version != KDEV_SHARE_REGION_VERSION || r->size != sizeof(*r) ||
            r->n_gpus > KDEV_SHARE_MAX_GPUS || r->max_procs != KDEV_SHARE_MAX_PROCS) {
                snprintf(msg, msg_size, "%s: region version %u (want %u) or layout differs",
                         path, r->version, KDEV_SHARE_REGION_VERSION);
                return -1;
        }
        return 0;
}

static void *map_fd(int fd, int prot, const char *path, char *msg, size_t msg_size)
{
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
                snprintf(msg, msg_size, "%s: is not a regular file", path);
                return NULL;
        }
        if ((size_t)st.st_size != sizeof(struct kdev_share_region_file)) {
                snprintf(msg, msg_size, "%s: is not a share region (%lld bytes, want %zu)", path,
                         (long long)st.st_size, sizeof(struct kdev_share_region_file));
                return NULL;
        }
        void *m = mmap(NULL, sizeof(struct kdev_share_region_file), prot, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                snprintf(msg, msg_size, "%s: cannot map: %s", path, strerror(errno));
                return NULL;
        }
        if (check(m, (size_t)st.st_size, path, msg, msg_size) != 0) {
                munmap(m, sizeof(struct kdev_share_region_file));
                return NULL;
        }
        return m;
}

/* Writes a fresh region to a temporary file in |dir| and links it to
 * <dir>/region. Returns 0 (linked), 1 (someone else's is there) or -1. */
static int create(const char *dir, const struct kdev_share_limits *limits, bool limits_error,
                  char *msg, size_t msg_size)
{
        char tmp[4096];
        char path[4096];
        snprintf(path, sizeof(path), "%s/" REGION_NAME, dir);
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s/.region.%ld", dir, (long)getpid()) >=
            sizeof(tmp)) {
                snprintf(msg, msg_size, "%s: path too long", path);
                return -1;
        }
        int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                snprintf(msg, msg_size, "%s: cannot create: %s", path, strerror(errno));
                return -1;
        }
        int rc = -1;
        /* the header and the GPU records are written, the process slots are
         * the file's zeros (ftruncate): no page of them is touched here */
        static struct kdev_share_region_file head;  /* only the bytes before proc[] are used */
        const size_t head_size = offsetof(struct kdev_share_region_file, proc);
        memset(&head, 0, head_size);
        memcpy(head.magic, KDEV_SHARE_REGION_MAGIC, 8);
        head.version = KDEV_SHARE_REGION_VERSION;
        head.size = sizeof(head);
        head.max_procs = KDEV_SHARE_MAX_PROCS;
        head.limits_error = limits_error;
        if (limits) {
                head.n_gpus = (uint32_t)limits->n;
                head.policy = limits->policy;
                for (size_t i = 0; i < limits->n; i++) {
                        memcpy(head.gpu[i].uuid, limits->gpu[i].uuid, KDEV_SHARE_UUID_MAX);
                        head.gpu[i].memory = limits->gpu[i].memory;
                        head.gpu[i].compute = limits->gpu[i].compute;
                }
        }
        if (ftruncate(fd, sizeof(struct kdev_share_region_file)) != 0 ||
            pwrite(fd, &head, head_size, 0) != (ssize_t)head_size) {
                snprintf(msg, msg_size, "%s: cannot write: %s", path, strerror(errno));
                goto out;
        }
        /* 0666: a second OS user of the container maps it too (the directory
         * decides who may create it) */
        if (fchmod(fd, 0666) != 0) {
                snprintf(msg, msg_size, "%s: cannot chmod: %s", path, strerror(errno));
                goto out;
        }
        if (link(tmp, path) == 0)
                rc = 0;
        else if (errno == EEXIST)
                rc = 1;
        else
                snprintf(msg, msg_size, "%s: cannot link: %s", path, strerror(errno));
out:
        close(fd);
        unlink(tmp);
        return rc;
}

/* <dir>/region into |path|; -1 with |msg| when too long. */
static int region_path(const char *dir, char *path, size_t size, char *msg, size_t msg_size)
{
        if ((size_t)snprintf(path, size, "%s/" REGION_NAME, dir) >= size - 32) {
                snprintf(msg, msg_size, "%.200s/region: path too long", dir);
                return -1;
        }
        return 0;
}

static struct kdev_share_region_file *open_path(const char *path, char *msg, size_t msg_size)
{
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
                int e = errno;
                snprintf(msg, msg_size, "%s: cannot open: %s", path, strerror(e));
                errno = e;
                return NULL;
        }
        void *m = map_fd(fd, PROT_READ | PROT_WRITE, path, msg, msg_size);
        close(fd);
        errno = m ? 0 : EINVAL;
        return m;
}

struct kdev_share_region_file *kdev_share_region_open(const char *dir, char *msg,
                                                      size_t msg_size)
{
        char path[4096];
        if (region_path(dir, path, sizeof(path), msg, msg_size) < 0) {
                errno = ENAMETOOLONG;
                return NULL;
        }
        return open_path(path, msg, msg_size);
}

struct kdev_share_region_file *kdev_share_region_map(const char *dir,
                                                     const struct kdev_share_limits *limits,
                                                     bool limits_error, char *msg,
                                                     size_t msg_size)
{
        char path[4096];
        if (region_path(dir, path, sizeof(path), msg, msg_size) < 0)
                return NULL;
        for (int attempt = 0; attempt < 2; attempt++) {
                struct kdev_share_region_file *m = open_path(path, msg, msg_size);
                if (m || errno != ENOENT)
                        return m;
                if (create(dir, limits, limits_error, msg, msg_size) < 0)
                        return NULL;
        }
        snprintf(msg, msg_size, "%s: vanished while being created", path);
        return NULL;
}

void kdev_share_region_unmap(struct kdev_share_region_file *r)
{
        if (r)
                munmap(r, sizeof(*r));
}

/* Start time of |pid| (field 22 of /proc/<pid>/stat), 0 when unknown. */
static uint64_t start_time_of(int32_t pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        char *p = strrchr(buf, ')');  /* the command may hold spaces and parentheses */
        if (!p)
                return 0;
        /* after ") ": field 3 (state) ... field 22 (starttime) */
        int fieldno = 2;
        for (p++; *p && fieldno < 22; p++)
                if (*p == ' ')
                        fieldno++;
        unsigned long long v = 0;
        while (*p >= '0' && *p <= '9')
                v = v * 10 + (unsigned)(*p++ - '0');
        return v;
}

static void clear_slot(struct kdev_share_region_proc *s)
{
        for (int g = 0; g < KDEV_SHARE_MAX_GPUS; g++) {
                atomic_store(&s->used[g], 0);
                atomic_store(&s->launches[g], 0);
                atomic_store(&s->paced_ns[g], 0);
        }
        s->uid = 0;
        s->start_time = 0;
}

static bool gone(const struct kdev_share_region_proc *s, int32_t pid, bool reuse)
{
        if (kill(pid, 0) != 0 && errno == ESRCH)
                return true;
        if (!reuse)
                return false;
        uint64_t st = start_time_of(pid);
        return st != 0 && s->start_time != 0 && st != s->start_time;
}

/* |reuse|: also read each live pid's start time (a reused pid) */
static int reap(struct kdev_share_region_file *r, bool reuse)
{
        int n = 0;
        uint32_t hwm = atomic_load(&r->procs_hwm);
        for (uint32_t i = 0; i < hwm && i < KDEV_SHARE_MAX_PROCS; i++) {
                struct kdev_share_region_proc *s = &r->proc[i];
                int32_t pid = atomic_load(&s->pid);
                if (pid <= 0 || !gone(s, pid, reuse))
                        continue;
                if (!atomic_compare_exchange_strong(&s->pid, &pid, -1))
                        continue;  /* someone else reaps it */
                clear_slot(s);
                atomic_store(&s->pid, 0);
                n++;
        }
        return n;
}

int kdev_share_region_reap(struct kdev_share_region_file *r)
{
        return reap(r, true);
}

/* Takes slot |i| for |pid| when it is free or holds |pid| itself (an
 * earlier image of this process, which exec replaced: its memory is gone;
 * no other live process of the container's pid namespace has this pid).
 * Returns whether it did. */
static bool take(struct kdev_share_region_file *r, uint32_t i, int32_t pid, uint64_t start_time,
                 uint32_t uid)
{
        struct kdev_share_region_proc *s = &r->proc[i];
        int32_t p = atomic_load(&s->pid);
        if ((p != 0 && p != pid) || !atomic_compare_exchange_strong(&s->pid, &p, -1))
                return false;
        clear_slot(s);
        s->uid = uid;
        s->start_time = start_time;
        uint32_t h = atomic_load(&r->procs_hwm);
        while (h < i + 1 && !atomic_compare_exchange_weak(&r->procs_hwm, &h, i + 1)) {
        }
        atomic_store(&s->pid, pid);
        return true;
}

/* Dead processes' slots are cleared by a claim only when it would raise
 * the high-water mark to a multiple of this (and when every slot is held):
 * many processes start at once, and each kill(pid, 0) is a system call */
#define REAP_EVERY 32u

int kdev_share_region_claim(struct kdev_share_region_file *r, int32_t pid, uint64_t start_time,
                            uint32_t uid)
{
        for (int pass = 0; pass < 2; pass++) {
                uint32_t hwm = atomic_load(&r->procs_hwm);
                if (hwm > KDEV_SHARE_MAX_PROCS)
                        hwm = KDEV_SHARE_MAX_PROCS;
                /* our own earlier image's slot first, else the first free one */
                uint32_t free_at = hwm;
                for (uint32_t i = 0; i < hwm; i++) {
                        int32_t p = atomic_load(&r->proc[i].pid);
                        if (p == pid && take(r, i, pid, start_time, uid))
                                return (int)i;
                        if (p == 0 && free_at == hwm)
                                free_at = i;
                }
                for (uint32_t i = free_at; i < hwm; i++)
                        if (take(r, i, pid, start_time, uid))
                                return (int)i;
                if (pass == 0 && hwm > 0 && hwm % REAP_EVERY == 0 && reap(r, false) > 0)
                        continue;
                for (uint32_t i = hwm; i < KDEV_SHARE_MAX_PROCS; i++)
                        if (take(r, i, pid, start_time, uid))
                                return (int)i;
                if (pass == 0 && hwm % REAP_EVERY != 0 && reap(r, false) > 0)
                        continue;
                break;
        }
        return -1;
}

int kdev_share_region_find(const struct kdev_share_region_file *r, int32_t pid)
{
        struct kdev_share_region_file *w = (struct kdev_share_region_file *)r;
        uint32_t hwm = atomic_load(&w->procs_hwm);
        for (uint32_t i = 0; i < hwm && i < KDEV_SHARE_MAX_PROCS; i++)
                if (atomic_load(&w->proc[i].pid) == pid)
                        return (int)i;
        return -1;
}

void kdev_share_region_note_start(struct kdev_share_region_file *r, int slot, int32_t pid)
{
        struct kdev_share_region_proc *s = &r->proc[slot];
        if (atomic_load(&s->pid) == pid && s->start_time == 0)
                s->start_time = start_time_of(pid);
}

void kdev_share_region_release(struct kdev_share_region_file *r, int slot, int32_t pid)
{
        struct kdev_share_region_proc *s = &r->proc[slot];
        int32_t p = pid;
        if (atomic_compare_exchange_strong(&s->pid, &p, -1)) {
                clear_slot(s);
                atomic_store(&s->pid, 0);
        }
}

uint64_t kdev_share_region_used(const struct kdev_share_region_file *r, int gpu)
{
        uint64_t sum = 0;
        uint32_t hwm = atomic_load(&((struct kdev_share_region_file *)r)->procs_hwm);
        for (uint32_t i = 0; i < hwm && i < KDEV_SHARE_MAX_PROCS; i++)
                sum += atomic_load(&((struct kdev_share_region_file *)r)->proc[i].used[gpu]);
        return sum;
}

int kdev_share_region_reserve(struct kdev_share_region_file *r, int slot, int gpu,
                              uint64_t bytes)
{
        uint64_t limit = r->gpu[gpu].memory;
        if (bytes > limit)
                return -1;
        _Atomic uint64_t *mine = &r->proc[slot].used[gpu];
        atomic_fetch_add(mine, bytes);
        /* sequentially consistent: of two reservations racing, the later
         * sum sees both, so what is kept never passes the limit */
        uint64_t sum = kdev_share_region_used(r, gpu);
        if (sum <= limit)
                return 0;
        atomic_fetch_sub(mine, bytes);
        return -1;
}

void kdev_share_region_unreserve(struct kdev_share_region_file *r, int slot, int gpu,
                                 uint64_t bytes)
{
        _Atomic uint64_t *mine = &r->proc[slot].used[gpu];
        uint64_t cur = atomic_load(mine);
        while (!atomic_compare_exchange_weak(mine, &cur, cur >= bytes ? cur - bytes : 0)) {
        }
}

int kdev_share_usage_read(const char *dir, struct kdev_share_usage *out, char *msg,
                          size_t msg_size)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/" REGION_NAME, dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
                snprintf(msg, msg_size, "%s: cannot open: %s", path, strerror(errno));
                return -1;
        }
        struct kdev_share_region_file *r = map_fd(fd, PROT_READ, path, msg, msg_size);
        close(fd);
        if (!r)
                return -1;
        memset(out, 0, sizeof(*out));
        out->n_gpus = r->n_gpus;
        out->policy = (enum kdev_share_policy)r->policy;
        out->limits_error = r->limits_error != 0;
        for (size_t g = 0; g < out->n_gpus; g++) {
                memcpy(out->gpu[g].uuid, r->gpu[g].uuid, KDEV_SHARE_UUID_MAX);
                out->gpu[g].uuid[KDEV_SHARE_UUID_MAX - 1] = '\0';
                out->gpu[g].memory = r->gpu[g].memory;
                out->gpu[g].compute = r->gpu[g].compute;
        }
        uint32_t hwm = atomic_load(&r->procs_hwm);
        for (uint32_t i = 0; i < hwm && i < KDEV_SHARE_MAX_PROCS; i++) {
                const struct kdev_share_region_proc *s = &r->proc[i];
                int32_t pid = atomic_load(&((struct kdev_share_region_proc *)s)->pid);
                if (pid <= 0)
                        continue;
                struct kdev_share_usage_proc *p = &out->proc[out->n_procs++];
                p->pid = pid;
                p->uid = s->uid;
                for (size_t g = 0; g < out->n_gpus; g++) {
                        p->used[g] = atomic_load(&((struct kdev_share_region_proc *)s)->used[g]);
                        p->launches[g] = s->launches[g];
                        p->paced_ns[g] = s->paced_ns[g];
                        out->used[g] += p->used[g];
                }
        }
        munmap(r, sizeof(*r));
        return 0;
}
