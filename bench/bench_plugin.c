/* Benchmark of kdev-plugin against an in-process stand-in for kubelet.
 *
 * Usage: bench_plugin [OPTIONS] KDEV_PLUGIN CONFIG [ALLOCATE_CALLS [RESTARTS]]
 *
 * Starts KDEV_PLUGIN with CONFIG in a temporary device-plugins directory,
 * serves /v1beta1.Registration/Register on kubelet.sock, and prints:
 *   - start -> registered (ms): the first Register, or the --registrations'th
 *   - RSS and peak RSS (VmRSS, VmHWM, KiB) and thread count of the plugin
 *     process, from /proc
 *   - Allocate round trip over the socket, p50/p99/max (us), one device each call
 *   - with --client CMD: CMD's output after running `CMD SOCKET REQUEST_HEX CALLS`
 *     (another client timing the same Allocate request, e.g. Python grpcio)
 *   - with --health-control FILE --health-uuid UUID...: for each UUID, "xid
 *     UUID 79" appended to the mock NVML's control file, and the time until
 *     both of two ListAndWatch streams (two connections) deliver a list with
 *     that GPU's devices Unhealthy: from the write, and from the moment the
 *     mock read the line (inotify IN_ACCESS on FILE; the mock polls its control
 *     file every 20 ms while nvmlEventSetWait blocks, so the write adds 0-20 ms
 *     that is the mock's, not the plugin's)
 *   - with --metrics-scrapes N: the plugin also runs with --metrics-address
 *     127.0.0.1:0 (and --log-level info, to read the bound port from its
 *     "serving metrics" log line); after registration, N plain HTTP/1.1
 *     GET /metrics (one connection each), then RSS and VmHWM; then
 *     --metrics-timed M more GETs timed from connect to the end of the
 *     answer, p50/p99/max (us)
 *   - kubelet restart (sockets removed, kubelet.sock re-created) -> registered
 *     again, p50/p99/max (ms), and RSS / fd count before and after
 * Options:
 *   --kv                  also print "kv NAME VALUE" lines (bench/run.py reads them)
 *   --registrations N     Register calls that make "registered" (one per resource)
 *   --resource NAME       resource for Allocate and health (default: the first registered)
 *   --plugin-arg ARG      extra argument for KDEV_PLUGIN (repeatable)
 *   --client CMD          see above
 *   --health-control FILE, --health-uuid UUID (repeatable)   see above
 *   --metrics-scrapes N, --metrics-timed M (default 200)       see above
 *   --alloc-sizes K,K...  also time Allocate of one container request of K IDs
 *                         for each K (ALLOCATE_CALLS calls each, p50/p99 us; kv
 *                         alloc_k<K>_p50_us / _p99_us / _failed): the IDs of the
 *                         plugin's first ListAndWatch list at positions
 *                         (i+1)*n/K-1, i = 0..K-1, so spread over the list and
 *                         ending at its last device (the worst case of a linear
 *                         search); a K above the list's size is skipped
 *   --allocate-only       stop after the Allocate figures (no health, no restarts)
 *   --cpu N               run this benchmark and the plugin on CPU N-1 only (1: the first)
 *                         (sched_setaffinity before the fork), so that a round
 *                         trip does not wait for another, idle CPU to wake up
 *   --start-timeout S     seconds the plugin has to register (default 10; more for a
 *                         plugin started under valgrind, e.g. callgrind instruction counts)
 * Figures only: it asserts nothing (tests assert behaviour).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "rpc/rpc.h"

struct bench {
        uv_loop_t loop;
        char dir[256];
        char kubelet_sock[300];
        struct kdev_rpc_server *srv;
        unsigned registrations;
        char endpoint[256];
        char resource[256];
        char first_device[128];
        char **ids; /* the first ListAndWatch list's device IDs */
        size_t n_ids;
        const char *want_resource; /* --resource; NULL: the first registered */
};

static int g_kv; /* --kv */

/* Prints "kv NAME VALUE" for bench/run.py when --kv was given. */
static void kv(const char *name, double value)
{
        if (g_kv)
                printf("kv %s %.3f\n", name, value);
}

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void on_register(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct bench *b = ud;
        V1beta1__RegisterRequest *r = v1beta1__register_request__unpack(NULL, len, req);
        if (r) {
                if (b->endpoint[0] == '\0' &&
                    (!b->want_resource || strcmp(b->want_resource, r->resource_name) == 0)) {
                        snprintf(b->endpoint, sizeof(b->endpoint), "%s", r->endpoint);
                        snprintf(b->resource, sizeof(b->resource), "%s", r->resource_name);
                }
                v1beta1__register_request__free_unpacked(r, NULL);
        }
        b->registrations++;
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        kdev_rpc_call_reply_pb(call, &e.base);
}

static int serve_kubelet(struct bench *b)
{
        struct kdev_err err = {0};
        b->srv = kdev_rpc_server_new(&b->loop, NULL);
        kdev_rpc_server_add_method(b->srv, "/v1beta1.Registration/Register", false, on_register, b);
        if (kdev_rpc_server_listen_unix(b->srv, b->kubelet_sock, &err) < 0) {
                fprintf(stderr, "bench: %s\n", err.msg);
                return -1;
        }
        return 0;
}

static pid_t g_child;

/* Runs the loop until |*counter| reaches |want|, |timeout_ms| passes or the
 * plugin exits. Returns 0, -1 on timeout, -2 when the plugin exited. */
static int wait_count(struct bench *b, unsigned *counter, unsigned want, double timeout_ms)
{
        double end = now_ms() + timeout_ms;
        while (*counter < want) {
                if (now_ms() > end)
                        return -1;
                if (g_child > 0 && waitpid(g_child, NULL, WNOHANG) == g_child) {
                        g_child = 0;
                        return -2;
                }
                uv_run(&b->loop, UV_RUN_NOWAIT);
                usleep(50);
        }
        return 0;
}

/* Parses a positive count argument; exits with a usage error otherwise. */
static int parse_count(const char *text, const char *what)
{
        char *end = NULL;
        long v = strtol(text, &end, 10);
        if (!*text || *end || v <= 0 || v > 10000000) {
                fprintf(stderr, "bench_plugin: %s must be a positive integer, got \"%s\"\n", what,
                        text);
                exit(2);
        }
        return (int)v;
}

static char g_dir[256];

static void cleanup_dir(void)
{
        if (g_dir[0]) {
                char cmd[300];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
                if (system(cmd) != 0)
                        fprintf(stderr, "bench_plugin: cannot remove %s\n", g_dir);
        }
}

static void print_plugin_log(void)
{
        char path[300], line[512];
        snprintf(path, sizeof(path), "%s.log", g_dir);
        FILE *f = fopen(path, "r");
        if (!f)
                return;
        fprintf(stderr, "kdev-plugin's log:\n");
        while (fgets(line, sizeof(line), f))
                fputs(line, stderr);
        fclose(f);
}

static long g_hwm_kib = -1; /* VmHWM of the last proc_stat() */

static void proc_stat(pid_t pid, long *rss_kib, long *threads)
{
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        FILE *f = fopen(path, "r");
        *rss_kib = *threads = g_hwm_kib = -1;
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "VmRSS:", 6) == 0)
                        *rss_kib = strtol(line + 6, NULL, 10);
                else if (strncmp(line, "VmHWM:", 6) == 0)
                        g_hwm_kib = strtol(line + 6, NULL, 10);
                else if (strncmp(line, "Threads:", 8) == 0)
                        *threads = strtol(line + 8, NULL, 10);
        }
        fclose(f);
}

static long count_fds(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        DIR *d = opendir(path);
        long n = 0;
        if (!d)
                return -1;
        for (struct dirent *e; (e = readdir(d));)
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

static void percentiles(double *v, size_t n, double *p50, double *p99, double *max)
{
        qsort(v, n, sizeof(*v), cmp_double);
        *p50 = v[n / 2];
        *p99 = v[(n * 99) / 100 >= n ? n - 1 : (n * 99) / 100];
        *max = v[n - 1];
}

/* Reads the first device ID from one ListAndWatch message. */
static void on_lw_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        struct bench *b = ud;
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
        if (r && r->n_devices > 0 && !b->ids) {
                b->ids = calloc(r->n_devices, sizeof(*b->ids));
                for (size_t i = 0; b->ids && i < r->n_devices; i++) {
                        if (!(b->ids[b->n_ids] = strdup(r->devices[i]->id)))
                                break;
                        b->n_ids++;
                }
        }
        if (r && r->n_devices > 0)
                snprintf(b->first_device, sizeof(b->first_device), "%s", r->devices[0]->id);
        if (r)
                v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        kdev_rpc_client_call_cancel(call);
}

static void on_lw_done(struct kdev_rpc_client_call *call, int status, const char *m, void *ud)
{
        (void)call;
        (void)status;
        (void)m;
        (void)ud;
}

struct unary_wait {
        int done;
        int status;
};

static void on_unary_done(struct kdev_rpc_client_call *call, int status, const char *m, void *ud)
{
        struct unary_wait *w = ud;
        (void)call;
        (void)m;
        w->status = status;
        w->done = 1;
}

static void remove_sockets(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return;
        for (struct dirent *e; (e = readdir(d));) {
                char p[600];
                struct stat st;
                snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
                if (lstat(p, &st) == 0 && S_ISSOCK(st.st_mode))
                        unlink(p);
        }
        closedir(d);
}

static void on_closed(void *arg)
{
        *(int *)arg = 1;
}

/* --- health event -> ListAndWatch update (--health-control, --health-uuid) --- */

struct hstream {
        struct kdev_rpc_client *cl;
        unsigned msgs;       /* ListAndWatch messages received */
        const char *uuid;    /* GPU whose Unhealthy devices we wait for */
        double t_seen;       /* ms; 0 until a list shows |uuid| Unhealthy */
};

static void on_health_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                              void *ud)
{
        struct hstream *h = ud;
        (void)call;
        h->msgs++;
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
        if (!r)
                return;
        for (size_t i = 0; h->uuid && !h->t_seen && i < r->n_devices; i++) {
                if (strncmp(r->devices[i]->id, h->uuid, strlen(h->uuid)) == 0 &&
                    strcmp(r->devices[i]->health, "Unhealthy") == 0)
                        h->t_seen = now_ms();
        }
        v1beta1__list_and_watch_response__free_unpacked(r, NULL);
}

struct inotify_wait {
        double t_read; /* ms; when the mock read the control file */
};

static void on_inotify(uv_poll_t *p, int status, int events)
{
        struct inotify_wait *w = p->data;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        (void)status;
        (void)events;
        double t = now_ms();
        ssize_t n;
        while ((n = read(p->io_watcher.fd, buf, sizeof(buf))) > 0) {
                for (char *q = buf; q < buf + n;) {
                        struct inotify_event *ev = (struct inotify_event *)q;
                        if ((ev->mask & IN_ACCESS) && !w->t_read)
                                w->t_read = t;
                        q += sizeof(*ev) + ev->len;
                }
        }
}

/* For each of |uuids|: appends "xid UUID 79" to |control| and times the
 * Unhealthy list on two streams of |sock|. Prints the medians/max. */
static void bench_health(struct bench *b, const char *sock, const char *control,
                         const char **uuids, int n_uuids)
{
        struct hstream hs[2] = {{0}};
        struct kdev_err err = {0};
        for (int i = 0; i < 2; i++) {
                hs[i].cl = kdev_rpc_client_new(&b->loop, sock, NULL);
                kdev_rpc_client_call(hs[i].cl, "/v1beta1.DevicePlugin/ListAndWatch", NULL, 0, 0,
                                     on_health_message, on_lw_done, &hs[i], &err);
        }
        for (double end = now_ms() + 5000; (!hs[0].msgs || !hs[1].msgs) && now_ms() < end;) {
                uv_run(&b->loop, UV_RUN_NOWAIT);
                usleep(100);
        }
        int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (ifd < 0 || inotify_add_watch(ifd, control, IN_ACCESS) < 0) {
                perror("bench_plugin: inotify");
                return;
        }
        struct inotify_wait iw = {0};
        uv_poll_t poll;
        uv_poll_init(&b->loop, &poll, ifd);
        poll.data = &iw;
        uv_poll_start(&poll, UV_READABLE, on_inotify);
        double *from_write = calloc((size_t)n_uuids, sizeof(double));
        double *from_read = calloc((size_t)n_uuids, sizeof(double));
        int missed = 0, n = 0;
        for (int u = 0; u < n_uuids; u++) {
                hs[0].uuid = hs[1].uuid = uuids[u];
                hs[0].t_seen = hs[1].t_seen = 0;
                iw.t_read = 0;
                FILE *f = fopen(control, "a");
                if (!f) {
                        perror(control);
                        break;
                }
                double t0 = now_ms();
                fprintf(f, "xid %s 79\n", uuids[u]);
                fclose(f);
                double end = t0 + 5000;
                while ((!hs[0].t_seen || !hs[1].t_seen) && now_ms() < end)
                        uv_run(&b->loop, UV_RUN_ONCE);
                if (!hs[0].t_seen || !hs[1].t_seen || !iw.t_read) {
                        missed++;
                        continue;
                }
                double seen = hs[0].t_seen > hs[1].t_seen ? hs[0].t_seen : hs[1].t_seen;
                from_write[n] = seen - t0;
                from_read[n] = seen - iw.t_read;
                n++;
        }
        if (n > 0) {
                qsort(from_write, (size_t)n, sizeof(double), cmp_double);
                qsort(from_read, (size_t)n, sizeof(double), cmp_double);
                printf("  health event -> Unhealthy list on 2 streams (%d XIDs, %d missed):\n",
                       n_uuids, missed);
                printf("                               from the mock's read: median %.2f ms, max "
                       "%.2f ms (target <= 5)\n", from_read[n / 2], from_read[n - 1]);
                printf("                               from the control-file write: median %.2f "
                       "ms, max %.2f ms (mock polls every 20 ms)\n", from_write[n / 2],
                       from_write[n - 1]);
                kv("health_ms", from_read[n / 2]);
                kv("health_max_ms", from_read[n - 1]);
                kv("health_write_ms", from_write[n / 2]);
        } else {
                printf("  health event -> Unhealthy list: no update seen (%d XIDs)\n", n_uuids);
        }
        kv("health_missed", missed);
        free(from_write);
        free(from_read);
        uv_poll_stop(&poll);
        uv_close((uv_handle_t *)&poll, NULL);
        for (int i = 0; i < 2; i++)
                kdev_rpc_client_close(hs[i].cl);
        uv_run(&b->loop, UV_RUN_NOWAIT);
        close(ifd);
}

/* --- GET /metrics (--metrics-scrapes) --------------------------------------- */

/* Waits up to 5 s for kdev-plugin's "serving metrics" log line in its log
 * file (logfmt: port=N; JSON: "port":"N"). Returns the port or -1. */
static int metrics_port_from_log(void)
{
        char path[300], line[1024];
        snprintf(path, sizeof(path), "%s.log", g_dir);
        for (double end = now_ms() + 5000; now_ms() < end; usleep(1000)) {
                FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                int port = -1;
                while (port < 0 && fgets(line, sizeof(line), f)) {
                        if (!strstr(line, "serving metrics"))
                                continue;
                        const char *p = strstr(line, " port=");
                        if (p)
                                port = atoi(p + 6);
                        else if ((p = strstr(line, "\"port\":\"")))
                                port = atoi(p + 8);
                }
                fclose(f);
                if (port > 0)
                        return port;
        }
        return -1;
}

/* One GET /metrics on a new connection to 127.0.0.1:|port|, read to EOF.
 * Returns the answer's size in bytes (headers included) when the status is
 * 200, -1 otherwise. */
static long metrics_get(int port)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  "Connection: close\r\n\r\n";
        char head[16] = "", buf[16384];
        long total = 0;
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
                close(fd);
                return -1;
        }
        for (ssize_t n; (n = read(fd, buf, sizeof(buf))) != 0;) {
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        close(fd);
                        return -1;
                }
                if (total < (long)sizeof(head) - 1) {
                        size_t k = sizeof(head) - 1 - (size_t)total;
                        memcpy(head + total, buf, (size_t)n < k ? (size_t)n : k);
                }
                total += n;
        }
        close(fd);
        return strncmp(head, "HTTP/1.1 200", 12) == 0 || strncmp(head, "HTTP/1.0 200", 12) == 0
                       ? total : -1;
}

/* |scrapes| GETs, then RSS/VmHWM of |pid|, then |timed| timed GETs. */
static void bench_metrics(pid_t pid, int scrapes, int timed)
{
        int port = metrics_port_from_log();
        if (port < 0) {
                printf("  GET /metrics:                skipped (no \"serving metrics\" log line)\n");
                kv("metrics_failed", scrapes + timed);
                return;
        }
        int failed = 0;
        long bytes = 0;
        for (int i = 0; i < scrapes; i++) {
                long n = metrics_get(port);
                failed += n < 0;
                if (n > 0)
                        bytes = n;
        }
        long rss, threads;
        proc_stat(pid, &rss, &threads);
        printf("  after %d GET /metrics (port %d, %ld bytes, %d failed):\n", scrapes, port,
               bytes, failed);
        printf("                               RSS %ld KiB, peak %ld KiB, %ld threads\n", rss,
               g_hwm_kib, threads);
        kv("metrics_rss_kib", (double)rss);
        kv("metrics_hwm_kib", (double)g_hwm_kib);
        kv("metrics_threads", (double)threads);
        kv("metrics_bytes", (double)bytes);
        if (timed > 0) {
                double *lat = calloc((size_t)timed, sizeof(double));
                for (int i = 0; i < timed; i++) {
                        double s = now_ms();
                        failed += metrics_get(port) < 0;
                        lat[i] = (now_ms() - s) * 1000.0;
                }
                double p50, p99, max;
                percentiles(lat, (size_t)timed, &p50, &p99, &max);
                printf("  GET /metrics round trip (%d, new connection each): p50 %.1f us, "
                       "p99 %.1f us, max %.1f us\n", timed, p50, p99, max);
                kv("metrics_p50_us", p50);
                kv("metrics_p99_us", p99);
                free(lat);
        }
        kv("metrics_failed", failed);
}

/* Times |calls| Allocate calls of one container request of |k| IDs spread
 * over b->ids (positions (i+1)*n/k-1) and prints the figures. */
static void bench_alloc_k(struct bench *b, struct kdev_rpc_client *cl, size_t k, int calls)
{
        char **ids = calloc(k, sizeof(*ids));
        if (!ids)
                return;
        for (size_t i = 0; i < k; i++)
                ids[i] = b->ids[(i + 1) * b->n_ids / k - 1];
        V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        cr.n_devices_ids = k;
        cr.devices_ids = ids;
        V1beta1__ContainerAllocateRequest *crs[1] = {&cr};
        V1beta1__AllocateRequest ar = V1BETA1__ALLOCATE_REQUEST__INIT;
        ar.n_container_requests = 1;
        ar.container_requests = crs;
        size_t len = v1beta1__allocate_request__get_packed_size(&ar);
        uint8_t *buf = malloc(len ? len : 1);
        double *lat = calloc((size_t)calls, sizeof(double));
        if (!buf || !lat) {
                free(buf);
                free(lat);
                free(ids);
                return;
        }
        v1beta1__allocate_request__pack(&ar, buf);
        struct kdev_err err = {0};
        int failed = 0;
        for (int i = 0; i < calls; i++) {
                struct unary_wait w = {0};
                double s = now_ms();
                kdev_rpc_client_call(cl, "/v1beta1.DevicePlugin/Allocate", buf, len, 5000, NULL,
                                     on_unary_done, &w, &err);
                while (!w.done)
                        uv_run(&b->loop, UV_RUN_ONCE);
                lat[i] = (now_ms() - s) * 1000.0;
                failed += w.status != 0;
        }
        double p50, p99, max;
        percentiles(lat, (size_t)calls, &p50, &p99, &max);
        printf("  Allocate round trip (%d calls, %zu of %zu devices of %s, %d failed):\n", calls,
               k, b->n_ids, b->resource, failed);
        printf("                               p50 %.1f us, p99 %.1f us, max %.1f us\n", p50,
               p99, max);
        char name[64];
        snprintf(name, sizeof(name), "alloc_k%zu_p50_us", k);
        kv(name, p50);
        snprintf(name, sizeof(name), "alloc_k%zu_p99_us", k);
        kv(name, p99);
        snprintf(name, sizeof(name), "alloc_k%zu_failed", k);
        kv(name, failed);
        free(lat);
        free(buf);
        free(ids);
}

static void usage(const char *argv0)
{
        fprintf(stderr, "usage: %s [--kv] [--registrations N] [--resource NAME] "
                "[--plugin-arg ARG]... [--client CMD] [--health-control FILE "
                "--health-uuid UUID...] [--metrics-scrapes N [--metrics-timed M]] "
                "[--alloc-sizes K,K...] [--allocate-only] [--cpu N (1-based)] [--start-timeout S] KDEV_PLUGIN CONFIG [ALLOCATE_CALLS [RESTARTS]]\n", argv0);
}

int main(int argc, char **argv)
{
        /* first: a plugin that went away must not kill the benchmark (src/rpc/rpc.h) */
        signal(SIGPIPE, SIG_IGN);
        static const struct option longopts[] = {
                {"kv", no_argument, NULL, 'k'},
                {"registrations", required_argument, NULL, 'n'},
                {"resource", required_argument, NULL, 'r'},
                {"plugin-arg", required_argument, NULL, 'a'},
                {"client", required_argument, NULL, 'c'},
                {"health-control", required_argument, NULL, 'H'},
                {"health-uuid", required_argument, NULL, 'u'},
                {"metrics-scrapes", required_argument, NULL, 'm'},
                {"metrics-timed", required_argument, NULL, 'M'},
                {"alloc-sizes", required_argument, NULL, 's'},
                {"allocate-only", no_argument, NULL, 'A'},
                {"cpu", required_argument, NULL, 'C'},
                {"start-timeout", required_argument, NULL, 'T'},
                {NULL, 0, NULL, 0},
        };
        enum { MAX_EXTRA = 16 };
        const char *extra[MAX_EXTRA], *uuids[64], *client = NULL, *control = NULL;
        const char *want_resource = NULL;
        int n_extra = 0, n_uuids = 0, want_regs = 1, scrapes = 0, timed = 200;
        int alloc_sizes[16], n_sizes = 0, allocate_only = 0, cpu = -1, start_timeout_s = 10;
        for (int o; (o = getopt_long(argc, argv, "+", longopts, NULL)) != -1;) {
                switch (o) {
                case 'k': g_kv = 1; break;
                case 'n': want_regs = parse_count(optarg, "--registrations"); break;
                case 'r': want_resource = optarg; break;
                case 'c': client = optarg; break;
                case 'm': scrapes = parse_count(optarg, "--metrics-scrapes"); break;
                case 'M': timed = parse_count(optarg, "--metrics-timed"); break;
                case 'H': control = optarg; break;
                case 'A': allocate_only = 1; break;
                case 'C': cpu = parse_count(optarg, "--cpu") - 1; break; /* 1-based */
                case 'T': start_timeout_s = parse_count(optarg, "--start-timeout"); break;
                case 's':
                        for (char *save = NULL, *tok = strtok_r(optarg, ",", &save); tok;
                             tok = strtok_r(NULL, ",", &save)) {
                                if (n_sizes == 16) {
                                        fprintf(stderr, "bench_plugin: too many --alloc-sizes\n");
                                        return 2;
                                }
                                alloc_sizes[n_sizes++] = parse_count(tok, "--alloc-sizes");
                        }
                        break;
                case 'a':
                        if (n_extra == MAX_EXTRA) {
                                fprintf(stderr, "bench_plugin: too many --plugin-arg\n");
                                return 2;
                        }
                        extra[n_extra++] = optarg;
                        break;
                case 'u':
                        if (n_uuids == 64) {
                                fprintf(stderr, "bench_plugin: too many --health-uuid\n");
                                return 2;
                        }
                        uuids[n_uuids++] = optarg;
                        break;
                default: usage(argv[0]); return 2;
                }
        }
        argc -= optind - 1;
        argv += optind - 1;
        if (argc < 3) {
                usage(argv[0]);
                return 2;
        }
        if (scrapes > 0) {
                static const char *const marg[] = {"--metrics-address", "127.0.0.1:0",
                                                   "--log-level", "info"};
                if (n_extra + 4 > MAX_EXTRA) {
                        fprintf(stderr, "bench_plugin: too many --plugin-arg\n");
                        return 2;
                }
                for (int i = 0; i < 4; i++)
                        extra[n_extra++] = marg[i];
        }
        if (cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0) {
                        perror("bench_plugin: sched_setaffinity");
                        return 1;
                }
        }
        int calls = argc > 3 ? parse_count(argv[3], "ALLOCATE_CALLS") : 5000;
        int restarts = argc > 4 ? parse_count(argv[4], "RESTARTS") : 100;
        struct bench b = {0};
        b.want_resource = want_resource;
        snprintf(b.dir, sizeof(b.dir), "/tmp/kdev-bench.XXXXXX");
        if (!mkdtemp(b.dir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(g_dir, sizeof(g_dir), "%s", b.dir);
        atexit(cleanup_dir);
        snprintf(b.kubelet_sock, sizeof(b.kubelet_sock), "%s/kubelet.sock", b.dir);
        uv_loop_init(&b.loop);
        if (serve_kubelet(&b) < 0)
                return 1;

        double t0 = now_ms();
        pid_t pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
                char log[300];
                snprintf(log, sizeof(log), "%s.log", g_dir);
                if (!freopen(log, "w", stderr))
                        _exit(127);
                const char *av[8 + MAX_EXTRA] = {argv[1], "--config", argv[2],
                                                  "--device-plugin-dir", b.dir, "--log-level",
                                                  "warn"};
                for (int i = 0; i < n_extra; i++)
                        av[7 + i] = extra[i];
                execv(argv[1], (char *const *)av);
                _exit(127);
        }
        g_child = pid;
        int wr = wait_count(&b, &b.registrations, (unsigned)want_regs, start_timeout_s * 1000.0);
        if (wr < 0) {
                if (wr == -2)
                        fprintf(stderr, "bench_plugin: kdev-plugin exited before registering\n");
                else
                        fprintf(stderr, "bench_plugin: kdev-plugin did not register within %d s\n",
                                start_timeout_s);
                if (wr == -1) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                }
                print_plugin_log();
                char log[300];
                snprintf(log, sizeof(log), "%s.log", g_dir);
                unlink(log);
                return 1;
        }
        double t_reg = now_ms() - t0;
        usleep(200000);
        uv_run(&b.loop, UV_RUN_NOWAIT);
        long rss, threads;
        proc_stat(pid, &rss, &threads);
        printf("kdev-plugin benchmark (config %s)\n", argv[2]);
        printf("  start -> registered:         %.1f ms (fork+exec included)\n", t_reg);
        printf("  RSS after registration:      %ld KiB\n", rss);
        printf("  peak RSS (VmHWM):            %ld KiB\n", g_hwm_kib);
        printf("  threads:                     %ld\n", threads);
        kv("start_ms", t_reg);
        kv("rss_kib", (double)rss);
        kv("hwm_kib", (double)g_hwm_kib);
        kv("threads", (double)threads);
        if (scrapes > 0)
                bench_metrics(pid, scrapes, timed);

        /* Allocate round trips on the first registered resource. */
        char sock[600];
        snprintf(sock, sizeof(sock), "%s/%s", b.dir, b.endpoint);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&b.loop, sock, NULL);
        struct kdev_err err = {0};
        kdev_rpc_client_call(cl, "/v1beta1.DevicePlugin/ListAndWatch", NULL, 0, 5000, on_lw_message,
                             on_lw_done, &b, &err);
        for (double end = now_ms() + 5000; !b.first_device[0] && now_ms() < end;) {
                uv_run(&b.loop, UV_RUN_NOWAIT); /* a resource with 0 devices sends an empty list */
                usleep(100);
        }
        if (!b.first_device[0]) {
                printf("  Allocate:                    skipped (resource %s has no devices)\n",
                       b.resource);
        } else {
                char *ids[1] = {b.first_device};
                V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
                cr.n_devices_ids = 1;
                cr.devices_ids = ids;
                V1beta1__ContainerAllocateRequest *crs[1] = {&cr};
                V1beta1__AllocateRequest ar = V1BETA1__ALLOCATE_REQUEST__INIT;
                ar.n_container_requests = 1;
                ar.container_requests = crs;
                uint8_t buf[512];
                size_t len = v1beta1__allocate_request__pack(&ar, buf);
                double *lat = calloc((size_t)calls, sizeof(double));
                int failed = 0;
                for (int i = 0; i < calls; i++) {
                        struct unary_wait w = {0};
                        double s = now_ms();
                        kdev_rpc_client_call(cl, "/v1beta1.DevicePlugin/Allocate", buf, len, 5000,
                                             NULL, on_unary_done, &w, &err);
                        while (!w.done)
                                uv_run(&b.loop, UV_RUN_ONCE);
                        lat[i] = (now_ms() - s) * 1000.0;
                        failed += w.status != 0;
                }
                double p50, p99, max;
                percentiles(lat, (size_t)calls, &p50, &p99, &max);
                printf("  Allocate round trip (%d calls, 1 device of %s, %d failed):\n", calls,
                       b.resource, failed);
                printf("                               p50 %.1f us, p99 %.1f us, max %.1f us "
                       "(target p50 <= 50, p99 <= 250)\n", p50, p99, max);
                kv("alloc_p50_us", p50);
                kv("alloc_p99_us", p99);
                kv("alloc_failed", failed);
                free(lat);
                if (client) {
                        char cmd[2048];
                        int off = snprintf(cmd, sizeof(cmd), "%s '%s' ", client, sock);
                        for (size_t i = 0; i < len && off < (int)sizeof(cmd) - 16; i++)
                                off += snprintf(cmd + off, sizeof(cmd) - (size_t)off, "%02x",
                                                buf[i]);
                        snprintf(cmd + off, sizeof(cmd) - (size_t)off, " %d", calls);
                        fflush(stdout);
                        if (system(cmd) != 0)
                                fprintf(stderr, "bench_plugin: --client failed\n");
                }
        }
        for (int i = 0; i < n_sizes; i++) {
                if ((size_t)alloc_sizes[i] <= b.n_ids)
                        bench_alloc_k(&b, cl, (size_t)alloc_sizes[i], calls);
                else
                        printf("  Allocate of %d IDs:           skipped (%s has %zu devices)\n",
                               alloc_sizes[i], b.resource, b.n_ids);
        }
        kv("devices", (double)b.n_ids);
        for (size_t i = 0; i < b.n_ids; i++)
                free(b.ids[i]);
        free(b.ids);
        kdev_rpc_client_close(cl);
        if (allocate_only)
                restarts = 0;
        if (control && n_uuids > 0 && !allocate_only)
                bench_health(&b, sock, control, uuids, n_uuids);

        /* kubelet restarts. */
        if (restarts == 0)
                goto stop;
        long fds0 = count_fds(pid), rss0 = rss;
        unsigned regs0 = b.registrations;
        double *lat = calloc((size_t)restarts, sizeof(double));
        int missed = 0;
        for (int i = 0; i < restarts; i++) {
                int closed = 0;
                kdev_rpc_server_close(b.srv, on_closed, &closed);
                while (!closed)
                        uv_run(&b.loop, UV_RUN_ONCE);
                remove_sockets(b.dir);
                unsigned want = b.registrations + 1;
                double s = now_ms();
                serve_kubelet(&b);
                want += (unsigned)want_regs - 1;
                if (wait_count(&b, &b.registrations, want, 5000) < 0) {
                        missed++;
                        lat[i] = 5000;
                        continue;
                }
                lat[i] = now_ms() - s;
        }
        usleep(200000);
        uv_run(&b.loop, UV_RUN_NOWAIT);
        double p50, p99, max;
        percentiles(lat, (size_t)restarts, &p50, &p99, &max);
        proc_stat(pid, &rss, &threads);
        printf("  kubelet restart -> re-registered (%d restarts, %d missed):\n", restarts, missed);
        printf("                               p50 %.1f ms, p99 %.1f ms, max %.1f ms (target p50 <= 3, "
               "p99 <= 20)\n",
               p50, p99, max);
        /* One Register per resource per restart: anything beyond (a late
         * duplicate within the 200 ms above) is an extra registration. */
        unsigned want_total = (unsigned)restarts * (unsigned)want_regs;
        unsigned dup = b.registrations - regs0 > want_total ? b.registrations - regs0 - want_total
                                                                : 0;
        printf("  registrations beyond one per resource per restart: %u\n", dup);
        kv("restart_extra_registrations", dup);
        printf("  RSS before/after restarts:   %ld / %ld KiB (peak %ld KiB)\n", rss0, rss,
               g_hwm_kib);
        long fds1 = count_fds(pid);
        printf("  fds before/after restarts:   %ld / %ld\n", fds0, fds1);
        kv("restart_p50_ms", p50);
        kv("restart_p99_ms", p99);
        kv("restart_missed", missed);
        kv("rss_after_restarts_kib", (double)rss);
        kv("hwm_end_kib", (double)g_hwm_kib);
        kv("fds_before", (double)fds0);
        kv("fds_after", (double)fds1);
        free(lat);

stop:
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        g_child = 0;
        char log[300];
        snprintf(log, sizeof(log), "%s.log", g_dir);
        unlink(log);
        printf("  kdev-plugin exit status:     %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        int closed = 0;
        kdev_rpc_server_close(b.srv, on_closed, &closed);
        while (!closed)
                uv_run(&b.loop, UV_RUN_ONCE);
        uv_run(&b.loop, UV_RUN_DEFAULT);
        uv_loop_close(&b.loop);
        return 0;
}
