/* Pod UIDs and container IDs from kubelet's log directories (usage.h). */
#include "usage/usage.h"
#include "usage/usage_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static char *dup_n(const char *s, size_t n)
{
        char *d = malloc(n + 1);
        if (d) {
                memcpy(d, s, n);
                d[n] = '\0';
        }
        return d;
}

/* "<namespace>_<pod>_<uid>" into a pod entry; 1 when it is not one. */
static int pod_entry(const char *name, struct kdev_usage_pod_log *e)
{
        const char *a = strchr(name, '_'), *b = strrchr(name, '_');
        if (!a || a == b || a == name || b == a + 1 || strlen(b + 1) != 36)
                return 1;
        e->namespace_name = dup_n(name, (size_t)(a - name));
        e->pod = dup_n(a + 1, (size_t)(b - a - 1));
        e->uid = dup_n(b + 1, 36);
        if (!e->namespace_name || !e->pod || !e->uid)
                return -ENOMEM;
        e->key = kdev_usage_logs_key(e->namespace_name, e->pod, NULL);
        return 0;
}

/* "<pod>_<namespace>_<container>-<id>.log" into a container entry. */
static int container_entry(const char *name, struct kdev_usage_container_log *e)
{
        size_t len = strlen(name);
        if (len < 4 || strcmp(name + len - 4, ".log") != 0)
                return 1;
        len -= 4;
        const char *a = strchr(name, '_');
        const char *b = a ? strchr(a + 1, '_') : NULL;
        const char *dash = NULL;
        for (const char *p = name; p < name + len; p++)
                if (*p == '-')
                        dash = p;
        if (!a || !b || !dash || dash < b || a == name || b == a + 1 || dash == b + 1 ||
            strchr(b + 1, '_') ||
            !kdev_usage_is_container_id(dash + 1, (size_t)(name + len - dash - 1)))
                return 1;
        e->pod = dup_n(name, (size_t)(a - name));
        e->namespace_name = dup_n(a + 1, (size_t)(b - a - 1));
        e->container = dup_n(b + 1, (size_t)(dash - b - 1));
        memcpy(e->container_id, dash + 1, 64);
        e->container_id[64] = '\0';
        if (!e->pod || !e->namespace_name || !e->container)
                return -ENOMEM;
        e->key = kdev_usage_logs_key(e->namespace_name, e->pod, e->container);
        return 0;
}

uint64_t kdev_usage_logs_key(const char *namespace_name, const char *pod, const char *container)
{
        const char *parts[] = {namespace_name, pod, container};
        uint64_t h = 0xcbf29ce484222325ULL;
        for (size_t i = 0; i < 3 && parts[i]; i++) {
                for (const unsigned char *c = (const unsigned char *)parts[i]; *c; c++)
                        h = (h ^ *c) * 0x100000001b3ULL;
                h *= 0x100000001b3ULL;
        }
        return h;
}

static void pod_free(struct kdev_usage_pod_log *e)
{
        free(e->namespace_name);
        free(e->pod);
        free(e->uid);
}

static void container_free(struct kdev_usage_container_log *e)
{
        free(e->namespace_name);
        free(e->pod);
        free(e->container);
}

/* Reads |dir|'s names into |out| (pods when |pods|, else containers). */
static int read_dir(const char *dir, bool pods, struct kdev_usage_logs *out, struct kdev_err *err)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 0;
                struct stat ls;
                int e = errno;
                if ((e == ELOOP || e == ENOTDIR) && lstat(dir, &ls) == 0 && S_ISLNK(ls.st_mode))
                        return kdev_err_set(err, ELOOP,
                                            "%s: cannot read: a symbolic link, not followed", dir);
                errno = e;
                return kdev_err_set(err, errno, "%s: cannot read: %s", dir, strerror(errno));
        }
        DIR *dh = fdopendir(fd);
        if (!dh) {
                int e = errno;
                close(fd);
                return kdev_err_set(err, e, "%s: cannot read: %s", dir, strerror(e));
        }
        size_t cap = 0, n = 0;
        int rc = 0;
        struct dirent *de;
        while (rc == 0 && n < KDEV_USAGE_LOGS_MAX && (de = readdir(dh))) {
                if (de->d_name[0] == '.')
                        continue;
                struct stat st;
                if (fstatat(dirfd(dh), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                if (n == cap) {
                        size_t ncap = cap ? cap * 2 : 16;
                        void *p = pods ? realloc(out->pods, ncap * sizeof(*out->pods))
                                       : realloc(out->containers, ncap * sizeof(*out->containers));
                        if (!p) {
                                rc = -ENOMEM;
                                break;
                        }
                        if (pods)
                                out->pods = p;
                        else
                                out->containers = p;
                        cap = ncap;
                }
                int64_t t = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
                if (pods) {
                        struct kdev_usage_pod_log *e = &out->pods[n];
                        *e = (struct kdev_usage_pod_log){.mtime_ns = t};
                        int r = S_ISDIR(st.st_mode) ? pod_entry(de->d_name, e) : 1;
                        if (r == 0)
                                out->n_pods = ++n;
                        else
                                pod_free(e);
                        rc = r < 0 ? r : 0;
                } else {
                        struct kdev_usage_container_log *e = &out->containers[n];
                        *e = (struct kdev_usage_container_log){.mtime_ns = t};
                        int r = container_entry(de->d_name, e);
                        if (r == 0)
                                out->n_containers = ++n;
                        else
                                container_free(e);
                        rc = r < 0 ? r : 0;
                }
        }
        closedir(dh);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

int kdev_usage_logs_read(const char *log_dir, struct kdev_usage_logs *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        const char *root = log_dir && *log_dir ? log_dir : "/var/log";
        size_t n = strlen(root) + sizeof("/containers");
        char *dir = malloc(n);
        if (!dir)
                return kdev_err_set(err, ENOMEM, "out of memory");
        snprintf(dir, n, "%s/pods", root);
        int rc = read_dir(dir, true, out, err);
        if (rc == 0) {
                snprintf(dir, n, "%s/containers", root);
                rc = read_dir(dir, false, out, err);
        }
        free(dir);
        return rc;
}

/* The mtime of directory |dir| in ns (lstat: a link is not followed), -1
 * when it cannot be had. */
static int64_t dir_mtime(const char *root, const char *name)
{
        char path[4096];
        struct stat st;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, name) >= sizeof(path) ||
            lstat(path, &st) != 0)
                return -1;
        return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

int kdev_usage_logs_refresh(const char *log_dir, struct kdev_usage_logs *logs,
                            struct kdev_err *err)
{
        const char *root = log_dir && *log_dir ? log_dir : "/var/log";
        int64_t m[2] = {dir_mtime(root, "pods"), dir_mtime(root, "containers")};
        if (logs->reusable && m[0] == logs->dir_mtime_ns[0] && m[1] == logs->dir_mtime_ns[1])
                return 1;
        kdev_usage_logs_clear(logs);
        int rc = kdev_usage_logs_read(log_dir, logs, err);
        if (rc < 0)
                return rc;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        /* a missing directory (-1) stays missing until it is made: reusable */
        logs->reusable = now_ns - m[0] >= 2000000000LL && now_ns - m[1] >= 2000000000LL;
        logs->dir_mtime_ns[0] = m[0];
        logs->dir_mtime_ns[1] = m[1];
        return 0;
}

/* Whether entry time/name (|t|, |name|) is newer than (|bt|, |bname|):
 * the later time, then the greater name (deterministic for equal times). */
static bool newer(int64_t t, const char *name, int64_t bt, const char *bname)
{
        return t > bt || (t == bt && strcmp(name, bname) > 0);
}

const char *kdev_usage_logs_pod_uid(const struct kdev_usage_logs *logs,
                                    const char *namespace_name, const char *pod)
{
        const struct kdev_usage_pod_log *best = NULL;
        uint64_t key = namespace_name && pod ? kdev_usage_logs_key(namespace_name, pod, NULL) : 0;
        for (size_t i = 0; logs && namespace_name && pod && i < logs->n_pods; i++) {
                const struct kdev_usage_pod_log *e = &logs->pods[i];
                if (e->key == key && strcmp(e->namespace_name, namespace_name) == 0 && strcmp(e->pod, pod) == 0 &&
                    (!best || newer(e->mtime_ns, e->uid, best->mtime_ns, best->uid)))
                        best = e;
        }
        return best ? best->uid : NULL;
}

const char *kdev_usage_logs_container_id(const struct kdev_usage_logs *logs,
                                         const char *namespace_name, const char *pod,
                                         const char *container)
{
        const struct kdev_usage_container_log *best = NULL;
        uint64_t key = namespace_name && pod && container
                               ? kdev_usage_logs_key(namespace_name, pod, container)
                               : 0;
        for (size_t i = 0; logs && namespace_name && pod && container && i < logs->n_containers;
             i++) {
                const struct kdev_usage_container_log *e = &logs->containers[i];
                if (e->key == key && strcmp(e->namespace_name, namespace_name) == 0 && strcmp(e->pod, pod) == 0 &&
                    strcmp(e->container, container) == 0 &&
                    (!best || newer(e->mtime_ns, e->container_id, best->mtime_ns,
                                    best->container_id)))
                        best = e;
        }
        return best ? best->container_id : NULL;
}

void kdev_usage_logs_clear(struct kdev_usage_logs *logs)
{
        if (!logs)
                return;
        for (size_t i = 0; i < logs->n_pods; i++)
                pod_free(&logs->pods[i]);
        for (size_t i = 0; i < logs->n_containers; i++)
                container_free(&logs->containers[i]);
        free(logs->pods);
        free(logs->containers);
        memset(logs, 0, sizeof(*logs));
}
