/* The limits file of a share region (region.h). libc only. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "share/region.h"

static const char *const policy_names[KDEV_SHARE_POLICY_COUNT] = KDEV_SHARE_POLICY_NAMES;

const char *kdev_share_policy_name(enum kdev_share_policy p)
{
        return (unsigned)p < KDEV_SHARE_POLICY_COUNT ? policy_names[p] : "?";
}

int kdev_share_policy_parse(const char *name, enum kdev_share_policy *out)
{
        for (unsigned i = 0; i < KDEV_SHARE_POLICY_COUNT; i++)
                if (strcmp(name, policy_names[i]) == 0) {
                        *out = (enum kdev_share_policy)i;
                        return 0;
                }
        return -1;
}

/* Next whitespace-separated field of [*p, end) into buf; 0 when none. */
static size_t field(const char **p, const char *end, char *buf, size_t size)
{
        const char *s = *p;
        while (s < end && (*s == ' ' || *s == '\t'))
                s++;
        const char *b = s;
        while (s < end && *s != ' ' && *s != '\t')
                s++;
        size_t n = (size_t)(s - b);
        *p = s;
        if (n == 0)
                return 0;
        if (n >= size)
                n = size - 1;  /* too long: truncated, rejected by the caller's checks */
        memcpy(buf, b, n);
        buf[n] = '\0';
        return (size_t)(s - b);
}

static int parse_u64(const char *s, uint64_t *out)
{
        if (*s < '0' || *s > '9')
                return -1;
        uint64_t v = 0;
        for (; *s; s++) {
                if (*s < '0' || *s > '9')
                        return -1;
                unsigned d = (unsigned)(*s - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -1;
                v = v * 10 + d;
        }
        *out = v;
        return 0;
}

int kdev_share_limits_parse(const char *text, size_t len, const char *path,
                            struct kdev_share_limits *out, char *msg, size_t msg_size)
{
        memset(out, 0, sizeof(*out));
        out->policy = KDEV_SHARE_POLICY_WORK_CONSERVING;
        bool have_policy = false;
        const char *p = text, *end = text + len;
        for (unsigned line = 1; p < end; line++) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                const char *le = nl ? nl : end;
                if (le > p && le[-1] == '\r')
                        le--;
                const char *q = p;
                p = nl ? nl + 1 : end;
                char f[4][KDEV_SHARE_UUID_MAX + 2];
                size_t lens[4] = {0};
                int n = 0;
                while (n < 4 && (lens[n] = field(&q, le, f[n], sizeof(f[n]))) > 0)
                        n++;
                if (n == 0 || f[0][0] == '#')
                        continue;
                if (strcmp(f[0], "policy") == 0) {
                        if (n != 2) {
                                snprintf(msg, msg_size, "%s:%u: policy takes one name ("
                                         KDEV_SHARE_POLICY_LIST ")", path, line);
                                return -1;
                        }
                        if (have_policy) {
                                snprintf(msg, msg_size, "%s:%u: policy is given twice", path,
                                         line);
                                return -1;
                        }
                        have_policy = true;
                        if (kdev_share_policy_parse(f[1], &out->policy) != 0) {
                                snprintf(msg, msg_size, "%s:%u: unknown policy %.64s (want "
                                         KDEV_SHARE_POLICY_LIST ")", path, line, f[1]);
                                return -1;
                        }
                        continue;
                }
                if (n != 3) {
                        snprintf(msg, msg_size, "%s:%u: want <GPU UUID> <memory bytes> "
                                 "<compute percent>, got %d field%s", path, line, n == 4 ? 4 : n,
                                 n == 1 ? "" : "s");
                        return -1;
                }
                if (lens[0] >= KDEV_SHARE_UUID_MAX ||
                    (strncmp(f[0], "GPU-", 4) != 0 && strncmp(f[0], "MIG-", 4) != 0)) {
                        snprintf(msg, msg_size, "%s:%u: %.100s is not a GPU or MIG device UUID "
                                 "(GPU-... or MIG-...)", path, line, f[0]);
                        return -1;
                }
                uint64_t mem, pct;
                if (parse_u64(f[1], &mem) != 0 || lens[1] >= sizeof(f[1])) {
                        snprintf(msg, msg_size, "%s:%u: memory limit %.40s is not a number "
                                 "of bytes", path, line, f[1]);
                        return -1;
                }
                if (parse_u64(f[2], &pct) != 0 || pct < 1 || pct > 100) {
                        snprintf(msg, msg_size, "%s:%u: compute share %.40s is not in 1..100",
                                 path, line, f[2]);
                        return -1;
                }
                for (size_t i = 0; i < out->n; i++)
                        if (strcmp(out->gpu[i].uuid, f[0]) == 0) {
                                snprintf(msg, msg_size, "%s:%u: GPU %s is listed twice", path,
                                         line, f[0]);
                                return -1;
                        }
                if (out->n == KDEV_SHARE_MAX_GPUS) {
                        snprintf(msg, msg_size, "%s:%u: more than %d GPUs", path, line,
                                 KDEV_SHARE_MAX_GPUS);
                        return -1;
                }
                struct kdev_share_limit *g = &out->gpu[out->n++];
                memcpy(g->uuid, f[0], lens[0] + 1);  /* lens[0] < KDEV_SHARE_UUID_MAX */
                g->memory = mem;
                g->compute = (unsigned)pct;
        }
        return 0;
}

int kdev_share_limits_load(const char *path, struct kdev_share_limits *out, char *msg,
                           size_t msg_size)
{
        static char buf[KDEV_SHARE_LIMITS_FILE_MAX + 1];  /* init runs once per process */
        memset(out, 0, sizeof(*out));
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 1;
                snprintf(msg, msg_size, "%s: cannot open: %s", path, strerror(errno));
                return -1;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
                snprintf(msg, msg_size, "%s: is not a regular file", path);
                close(fd);
                return -1;
        }
        size_t n = 0;
        for (;;) {
                ssize_t r = read(fd, buf + n, sizeof(buf) - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        snprintf(msg, msg_size, "%s: cannot read: %s", path, strerror(errno));
                        close(fd);
                        return -1;
                }
                if (r == 0)
                        break;
                n += (size_t)r;
                if (n > KDEV_SHARE_LIMITS_FILE_MAX) {
                        snprintf(msg, msg_size, "%s: the limits file is larger than %d bytes",
                                 path, KDEV_SHARE_LIMITS_FILE_MAX);
                        close(fd);
                        return -1;
                }
        }
        close(fd);
        const char *nul = memchr(buf, '\0', n);
        if (nul) {
                snprintf(msg, msg_size, "%s: contains a NUL byte at offset %zu", path,
                         (size_t)(nul - buf));
                return -1;
        }
        return kdev_share_limits_parse(buf, n, path, out, msg, msg_size);
}
