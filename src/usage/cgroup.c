/* The container of a process from /proc/<pid>/cgroup. See usage.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "usage/usage.h"
#include "usage/usage_internal.h"

/* Largest /proc/<pid>/cgroup read (a v1 node lists ~13 lines of ~200 bytes). */
#define CGROUP_FILE_MAX 65536

bool kdev_usage_is_container_id(const char *s, size_t n)
{
        if (n != 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

static bool has_prefix(const char *s, size_t n, const char *p)
{
        size_t k = strlen(p);
        return n >= k && memcmp(s, p, k) == 0;
}

static bool has_suffix(const char *s, size_t n, const char *p)
{
        size_t k = strlen(p);
        return n >= k && memcmp(s + n - k, p, k) == 0;
}

static bool names_kubepods(const char *s, size_t n)
{
        return memmem(s, n, "kubepods", 8) != NULL;
}

/* A pod UID: 36 characters of hex digits and dashes (or '_' for '-' under
 * systemd), written with dashes into |out|. */
static bool take_uid(const char *s, size_t n, char *out)
{
        if (n != 36)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? (c != '-' && c != '_')
                         : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return false;
                out[i] = dash ? '-' : c;
        }
        out[n] = '\0';
        return true;
}

/* The pod component: "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid>.slice"
 * (systemd). */
static bool pod_component(const char *s, size_t n, struct kdev_usage_cgroup *out)
{
        if (has_prefix(s, n, "pod") && take_uid(s + 3, n - 3, out->pod_uid)) {
                out->driver = KDEV_USAGE_DRIVER_CGROUPFS;
                return true;
        }
        if (!names_kubepods(s, n) || !has_suffix(s, n, ".slice"))
                return false;
        size_t end = n - strlen(".slice");
        if (end < 36 + 4)
                return false;
        const char *uid = s + end - 36;
        if (memcmp(uid - 4, "-pod", 4) != 0 || !take_uid(uid, 36, out->pod_uid))
                return false;
        out->driver = KDEV_USAGE_DRIVER_SYSTEMD;
        return true;
}

/* The container component under the pod's. */
static bool container_component(const char *s, size_t n, struct kdev_usage_cgroup *out)
{
        static const struct {
                const char *prefix, *suffix;
                enum kdev_usage_runtime runtime;
        } forms[] = {
                {"cri-containerd-", ".scope", KDEV_USAGE_RUNTIME_CONTAINERD},
                {"crio-", ".scope", KDEV_USAGE_RUNTIME_CRIO},
                {"docker-", ".scope", KDEV_USAGE_RUNTIME_DOCKER},
                {"crio-", "", KDEV_USAGE_RUNTIME_CRIO},
                {"", "", KDEV_USAGE_RUNTIME_CONTAINERD},
        };
        for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
                size_t p = strlen(forms[i].prefix), q = strlen(forms[i].suffix);
                if (!has_prefix(s, n, forms[i].prefix) || !has_suffix(s, n, forms[i].suffix) ||
                    n < p + q || !kdev_usage_is_container_id(s + p, n - p - q))
                        continue;
                memcpy(out->container_id, s + p, 64);
                out->container_id[64] = '\0';
                out->runtime = forms[i].runtime;
                return true;
        }
        return false;
}

/* Whether |path| (|n| bytes) is a pod's container: a component naming
 * kubepods, then QoS components (kubepods-<qos>.slice, burstable,
 * besteffort), the pod's, and the container's; what lies below the
 * container (its own sub-cgroups) is ignored. */
static bool parse_path(const char *path, size_t n, struct kdev_usage_cgroup *out)
{
        enum { FIND_KUBEPODS, FIND_POD, FIND_CONTAINER } state = FIND_KUBEPODS;
        size_t i = 0;
        while (i < n) {
                while (i < n && path[i] == '/')
                        i++;
                size_t start = i;
                while (i < n && path[i] != '/')
                        i++;
                const char *c = path + start;
                size_t len = i - start;
                if (!len)
                        break;
                switch (state) {
                case FIND_KUBEPODS:
                        /* a Guaranteed pod sits right under it (cgroupfs
                         * /kubepods/pod<uid>, systemd kubepods-pod<uid>.slice) */
                        if (pod_component(c, len, out))
                                state = FIND_CONTAINER;
                        else if (names_kubepods(c, len))
                                state = FIND_POD;
                        break;
                case FIND_POD:
                        if (pod_component(c, len, out))
                                state = FIND_CONTAINER;
                        else if (!(names_kubepods(c, len) ||
                                   (len == 9 && memcmp(c, "burstable", 9) == 0) ||
                                   (len == 10 && memcmp(c, "besteffort", 10) == 0)))
                                return false;
                        break;
                case FIND_CONTAINER:
                        return container_component(c, len, out);
                }
        }
        return false;
}

int kdev_usage_cgroup_parse(const char *text, size_t len, struct kdev_usage_cgroup *out,
                            struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        /* two passes: the unified line first, then v1 controller lines */
        for (int pass = 0; pass < 2; pass++) {
                size_t pos = 0;
                unsigned line = 0;
                while (pos < len) {
                        const char *s = text + pos;
                        const char *nl = memchr(s, '\n', len - pos);
                        size_t n = nl ? (size_t)(nl - s) : len - pos;
                        pos += n + (nl ? 1 : 0);
                        line++;
                        if (!n)
                                continue;
                        const char *c1 = memchr(s, ':', n);
                        const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - s)) : NULL;
                        if (!c2)
                                return kdev_err_set(err, EINVAL, "line %u: not a cgroup line",
                                                    line);
                        bool unified = c1 - s == 1 && s[0] == '0' && c2 == c1 + 1;
                        if (unified != (pass == 0))
                                continue;
                        struct kdev_usage_cgroup cg = {0};
                        if (parse_path(c2 + 1, n - (size_t)(c2 + 1 - s), &cg)) {
                                cg.version = unified ? 2 : 1;
                                *out = cg;
                                return 0;
                        }
                }
        }
        return 1;
}

int kdev_usage_proc_container(const char *proc_root, uint32_t pid, struct kdev_usage_cgroup *out,
                              struct kdev_err *err)
{
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%u/cgroup",
                     proc_root && *proc_root ? proc_root : "/proc", pid) >= (int)sizeof(path))
                return kdev_err_set(err, ENAMETOOLONG, "%s/%u/cgroup: path too long",
                                    proc_root, pid);
        /* The common case in one open and one read into the stack (a v2 file
         * is one line; run every sample for every process): a file that
         * fills the buffer, or is no regular file, goes through the bounded
         * reader, which says what is wrong with it. */
        char buf[4096];
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0) {
                ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                                    ? read(fd, buf, sizeof(buf))
                                    : -1;
                close(fd);
                if (n >= 0 && (size_t)n < sizeof(buf) && !memchr(buf, '\0', (size_t)n)) {
                        int rc = kdev_usage_cgroup_parse(buf, (size_t)n, out, err);
                        if (rc < 0)
                                kdev_err_wrap(err, "%s", path);
                        return rc;
                }
        }
        char *text = NULL;
        size_t len = 0;
        int rc = kdev_file_read(path, "cgroup file", CGROUP_FILE_MAX, KDEV_FILE_TEXT, &text, &len,
                                err);
        if (rc < 0)
                return rc;
        rc = kdev_usage_cgroup_parse(text, len, out, err);
        free(text);
        if (rc < 0)
                kdev_err_wrap(err, "%s", path);
        return rc;
}
