/* NVIDIA MPS sharing: paths, Allocate edits, the control daemon's commands
 * (see mps.h). */
#include "nvidia/mps.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvidia/devinfo.h"
#include "nvidia/nvidia_internal.h"

char *kdev_nvidia_mps_path(const char *root, const char *resource, enum kdev_nvidia_mps_path which)
{
        static const char *const leaf[] = {"pipe", "log", ".started"};
        char *rel = NULL;
        if (which == KDEV_NVIDIA_MPS_SHM)
                return kdev_nvidia_join(root, "shm");
        if (asprintf(&rel, "%s/%s", resource, leaf[which]) < 0)
                return NULL;
        char *p = kdev_nvidia_join(root, rel);
        free(rel);
        return p;
}

int kdev_nvidia_mps_edits(const char *host_root, const char *resource,
                          struct kdev_container_edits *out, struct kdev_err *err)
{
        char *ctr = kdev_nvidia_mps_path(KDEV_NVIDIA_MPS_CONTAINER_ROOT, resource,
                                         KDEV_NVIDIA_MPS_PIPE);
        char *host = kdev_nvidia_mps_path(host_root, resource, KDEV_NVIDIA_MPS_PIPE);
        char *shm = kdev_nvidia_mps_path(host_root, resource, KDEV_NVIDIA_MPS_SHM);
        int rc = -ENOMEM;
        if (ctr && host && shm && kdev_edits_set_env(out, "CUDA_MPS_PIPE_DIRECTORY", ctr, NULL) == 0 &&
            kdev_edits_add_mount(out, host, ctr, NULL, 0, NULL) == 0 &&
            kdev_edits_add_mount(out, shm, "/dev/shm", NULL, 0, NULL) == 0)
                rc = 0;
        free(ctr);
        free(host);
        free(shm);
        return rc < 0 ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
}

/* --- the daemons' commands ------------------------------------------------ */

static int push(char ***v, size_t *n, char *s)
{
        if (!s)
                return -ENOMEM;
        char **g = realloc(*v, (*n + 1) * sizeof(**v));
        if (!g) {
                free(s);
                return -ENOMEM;
        }
        *v = g;
        g[(*n)++] = s;
        return 0;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
        va_list ap;
        va_start(ap, f);
        char *s = NULL;
        int r = vasprintf(&s, f, ap);
        va_end(ap);
        return r < 0 ? NULL : s;
}

void kdev_nvidia_mps_plan_free(struct kdev_nvidia_mps_daemon *d, size_t n)
{
        for (size_t i = 0; d && i < n; i++) {
                free(d[i].resource);
                for (size_t k = 0; k < d[i].n_commands; k++)
                        free(d[i].commands[k]);
                free(d[i].commands);
                for (size_t k = 0; k < d[i].n_uuids; k++)
                        free(d[i].uuids[k]);
                free(d[i].uuids);
        }
        free(d);
}

/* The commands of resource |r| into |d|. */
static int plan_one(const struct kdev_resource *r, struct kdev_nvidia_mps_daemon *d)
{
        if (!(d->resource = strdup(r->name)))
                return -ENOMEM;
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_nvidia_devinfo *in = r->devices[i].data;
                bool seen = false;
                for (size_t k = 0; k < i && !seen; k++) {
                        const struct kdev_nvidia_devinfo *o = r->devices[k].data;
                        seen = o && strcmp(o->parent_uuid, in->parent_uuid) == 0;
                }
                if (seen)
                        continue;
                size_t reps = 0;
                for (size_t k = 0; k < r->n_devices; k++) {
                        const struct kdev_nvidia_devinfo *o = r->devices[k].data;
                        reps += o && strcmp(o->parent_uuid, in->parent_uuid) == 0;
                }
                if (push(&d->uuids, &d->n_uuids, strdup(in->parent_uuid)) < 0)
                        return -ENOMEM;
                if (in->memory &&
                    push(&d->commands, &d->n_commands,
                         fmt("set_default_device_pinned_mem_limit %s %lluM", in->index,
                             in->memory / reps / 1024 / 1024)) < 0)
                        return -ENOMEM;
        }
        if (d->n_uuids &&
            push(&d->commands, &d->n_commands,
                 fmt("set_default_active_thread_percentage %zu",
                     100 / (r->n_devices / d->n_uuids))) < 0)
                return -ENOMEM;
        return 0;
}

int kdev_nvidia_mps_plan(const struct kdev_resource_set *set, struct kdev_nvidia_mps_daemon **out,
                         size_t *n, struct kdev_err *err)
{
        *out = NULL;
        *n = 0;
        struct kdev_nvidia_mps_daemon *v = calloc(set->n_resources ? set->n_resources : 1,
                                                  sizeof(*v));
        if (!v)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t k = 0;
        for (size_t i = 0; i < set->n_resources; i++) {
                const struct kdev_resource *r = &set->resources[i];
                const struct kdev_nvidia_rdata *d = r->ops_data;
                if (r->ops != &kdev_nvidia_resource_ops || !d || !d->mps_root || !r->n_devices)
                        continue;
                if (plan_one(r, &v[k++]) < 0) {
                        kdev_nvidia_mps_plan_free(v, k);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        *out = v;
        *n = k;
        return 0;
}

/* --- running nvidia-cuda-mps-control -------------------------------------- */

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kdev_nvidia_mps_send(const char *bin, const char *root, const char *resource,
                         const char *command, unsigned timeout_ms, char *out, size_t size,
                         struct kdev_err *err)
{
        char *pipe_dir = kdev_nvidia_mps_path(root, resource, KDEV_NVIDIA_MPS_PIPE);
        char *log_dir = kdev_nvidia_mps_path(root, resource, KDEV_NVIDIA_MPS_LOG);
        int in[2] = {-1, -1}, so[2] = {-1, -1}, rc = 0;
        if (out && size)
                out[0] = '\0';
        if (!pipe_dir || !log_dir) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto done;
        }
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(so, O_CLOEXEC) < 0) {
                rc = kdev_err_set(err, errno, "failed to start NVIDIA MPS command: %s",
                                  strerror(errno));
                goto done;
        }
        pid_t pid = fork();
        if (pid < 0) {
                rc = kdev_err_set(err, errno, "failed to start NVIDIA MPS command: %s",
                                  strerror(errno));
                goto done;
        }
        if (pid == 0) {
                dup2(in[0], 0);
                dup2(so[1], 1);
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                if (null >= 0)
                        dup2(null, 2); /* as Go's exec.Cmd with no Stderr (NVIDIA) */
                setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
                setenv("CUDA_MPS_LOG_DIRECTORY", log_dir, 1);
                if (command)
                        execlp(bin, bin, (char *)NULL);
                else
                        execlp(bin, bin, "-d", (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(so[1]);
        in[0] = so[1] = -1;
        if (command) {
                size_t len = strlen(command);
                ssize_t w = write(in[1], command, len);
                (void)w; /* a program that exits early is judged by its status */
        }
        close(in[1]);
        in[1] = -1;
        long long deadline = now_ms() + timeout_ms;
        size_t used = 0;
        bool timed_out = false;
        for (;;) {
                struct pollfd p = {.fd = so[0], .events = POLLIN};
                long long left = deadline - now_ms();
                int pr = left <= 0 ? 0 : poll(&p, 1, (int)left);
                if (pr < 0 && errno == EINTR)
                        continue;
                if (pr <= 0) {
                        timed_out = true;
                        break;
                }
                char buf[512];
                ssize_t got = read(so[0], buf, sizeof(buf));
                if (got < 0 && errno == EINTR)
                        continue;
                if (got <= 0)
                        break;
                for (ssize_t i = 0; out && i < got && used + 1 < size; i++)
                        out[used++] = buf[i];
                if (out && size)
                        out[used] = '\0';
        }
        int status = 0;
        if (timed_out) {
                kill(pid, SIGKILL);
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                rc = kdev_err_set(err, ETIMEDOUT, "timed out after %u ms", timeout_ms);
                goto done;
        }
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                rc = kdev_err_set(err, EIO, "%s: exit status %d",
                                  command ? "failed to send command to MPS daemon"
                                          : "failed to start MPS daemon",
                                  code);
        }
done:
        for (int i = 0; i < 2; i++) {
                if (in[i] >= 0)
                        close(in[i]);
                if (so[i] >= 0)
                        close(so[i]);
        }
        free(pipe_dir);
        free(log_dir);
        return rc;
}

/* mkdir -p |dir| (0755). */
static int mkdirs(const char *dir)
{
        char *p = strdup(dir);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1;; s++) {
                if (*s == '/' || *s == '\0') {
                        char c = *s;
                        *s = '\0';
                        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
                                int e = -errno;
                                free(p);
                                return e;
                        }
                        *s = c;
                        if (!c)
                                break;
                }
        }
        free(p);
        return 0;
}

int kdev_nvidia_mps_mount_shm(const char *root, struct kdev_err *err)
{
        char *dir = kdev_nvidia_mps_path(root, NULL, KDEV_NVIDIA_MPS_SHM);
        if (!dir)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = 0;
        /* every mount stacked there (mount-utils CleanupMountPoint); EINVAL:
         * not a mount point, ENOENT / ENOTDIR: no directory (mkdirs says why) */
        int u = 0;
        for (int i = 0; i < 64 && (u = umount2(dir, 0)) == 0; i++)
                ;
        if (u < 0 && errno != EINVAL && errno != ENOENT && errno != ENOTDIR)
                rc = kdev_err_set(err, errno, "error unmounting %s: %s", dir, strerror(errno));
        int m = rc == 0 ? mkdirs(dir) : 0;
        if (m < 0)
                rc = kdev_err_set(err, -m, "error creating directory %s: %s", dir, strerror(-m));
        if (rc == 0 && mount("shm", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RELATIME,
                             "size=" KDEV_NVIDIA_MPS_SHM_SIZE) < 0)
                rc = kdev_err_set(err, errno, "error mounting %s as tmpfs: %s", dir,
                                  strerror(errno));
        free(dir);
        return rc;
}

/* Prefixes |err|'s message with |what| ("...: "). */
static int wrap(struct kdev_err *err, int rc, const char *what)
{
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        return kdev_err_set(err, -rc, "%s: %s", what, msg);
}

int kdev_nvidia_mps_start(const char *bin, const char *root, const struct kdev_nvidia_mps_daemon *d,
                          unsigned timeout_ms, struct kdev_err *err)
{
        for (int w = KDEV_NVIDIA_MPS_PIPE; w <= KDEV_NVIDIA_MPS_LOG; w++) {
                char *dir = kdev_nvidia_mps_path(root, d->resource, (enum kdev_nvidia_mps_path)w);
                int rc = dir ? mkdirs(dir) : -ENOMEM;
                if (rc < 0) {
                        rc = kdev_err_set(err, -rc, "error creating directory %s: %s",
                                          dir ? dir : "", strerror(-rc));
                        free(dir);
                        return rc;
                }
                free(dir);
        }
        int rc = kdev_nvidia_mps_send(bin, root, d->resource, NULL, timeout_ms, NULL, 0, err);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < d->n_commands; i++) {
                const char *c = d->commands[i];
                rc = kdev_nvidia_mps_send(bin, root, d->resource, c, timeout_ms, NULL, 0, err);
                if (rc < 0) {
                        char what[160];
                        const char *arg = strchr(c, ' ');
                        if (strncmp(c, "set_default_device_pinned_mem_limit", 35) == 0)
                                snprintf(what, sizeof(what),
                                         "error setting pinned memory limit for device %.*s",
                                         (int)strcspn(arg + 1, " "), arg + 1);
                        else
                                snprintf(what, sizeof(what), "error setting active thread percentage");
                        return wrap(err, rc, what);
                }
        }
        char *started = kdev_nvidia_mps_path(root, d->resource, KDEV_NVIDIA_MPS_STARTED);
        int fd = started ? open(started, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
        rc = fd < 0 ? (started ? kdev_err_set(err, errno, "%s: %s", started, strerror(errno))
                               : kdev_err_set(err, ENOMEM, "out of memory"))
                    : 0;
        if (fd >= 0)
                close(fd);
        free(started);
        return rc;
}

int kdev_nvidia_mps_stop(const char *bin, const char *root, const char *resource,
                         unsigned timeout_ms, struct kdev_err *err)
{
        int rc = kdev_nvidia_mps_send(bin, root, resource, "quit", timeout_ms, NULL, 0, err);
        if (rc < 0)
                return wrap(err, rc, "error sending quit message");
        char *started = kdev_nvidia_mps_path(root, resource, KDEV_NVIDIA_MPS_STARTED);
        if (!started)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (unlink(started) < 0 && errno != ENOENT)
                rc = kdev_err_set(err, errno, "failed to remove started file: %s", strerror(errno));
        free(started);
        return rc;
}

int kdev_nvidia_mps_health(const char *bin, const char *root, const char *resource,
                           unsigned timeout_ms, struct kdev_err *err)
{
        int rc = kdev_nvidia_mps_send(bin, root, resource, KDEV_NVIDIA_MPS_HEALTH_QUERY,
                                      timeout_ms, NULL, 0, err);
        return rc < 0 ? wrap(err, rc, "error checking MPS daemon health") : 0;
}
