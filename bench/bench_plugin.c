/* Benchmark of kdev-plugin against an in-process stand-in for kubelet.
 *
 * Usage: bench_plugin KDEV_PLUGIN CONFIG [ALLOCATE_CALLS [RESTARTS]]
 *
 * Starts KDEV_PLUGIN with CONFIG in a temporary device-plugins directory,
 * serves /v1beta1.Registration/Register on kubelet.sock, and prints:
 *   - start -> first Register received (ms)
 *   - RSS (KiB) and thread count of the plugin process, from /proc
 *   - Allocate round trip over the socket, p50/p99/max (us), one device each call
 *   - kubelet restart (sockets removed, kubelet.sock re-created) -> Register
 *     received, p50/p99/max (ms), and RSS / fd count before and after
 * Figures only: it asserts nothing (tests assert behaviour).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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
};

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
                if (b->endpoint[0] == '\0') {
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

static void proc_stat(pid_t pid, long *rss_kib, long *threads)
{
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        FILE *f = fopen(path, "r");
        *rss_kib = *threads = -1;
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "VmRSS:", 6) == 0)
                        *rss_kib = strtol(line + 6, NULL, 10);
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

int main(int argc, char **argv)
{
        if (argc < 3) {
                fprintf(stderr, "usage: %s KDEV_PLUGIN CONFIG [ALLOCATE_CALLS [RESTARTS]]\n", argv[0]);
                return 2;
        }
        int calls = argc > 3 ? parse_count(argv[3], "ALLOCATE_CALLS") : 5000;
        int restarts = argc > 4 ? parse_count(argv[4], "RESTARTS") : 100;
        struct bench b = {0};
        snprintf(b.dir, sizeof(b.dir), "/tmp/kdev-bench.XXXXXX");
        if (!mkdtemp(b.dir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(g_dir, sizeof(g_dir), "%s", b.dir);
        atexit(cleanup_dir);
        snprintf(b.kubelet_sock, sizeof(b.kubelet_sock), "%s/kubelet.sock", b.dir);
        uv_loop_init(&b.loop);
        signal(SIGPIPE, SIG_IGN);
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
                execl(argv[1], argv[1], "--config", argv[2], "--device-plugin-dir", b.dir,
                      "--log-level", "warn", (char *)NULL);
                _exit(127);
        }
        g_child = pid;
        int wr = wait_count(&b, &b.registrations, 1, 10000);
        if (wr < 0) {
                fprintf(stderr, "bench_plugin: kdev-plugin %s\n",
                        wr == -2 ? "exited before registering" : "did not register within 10 s");
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
        printf("  threads:                     %ld\n", threads);

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
                free(lat);
        }
        kdev_rpc_client_close(cl);

        /* kubelet restarts. */
        long fds0 = count_fds(pid), rss0 = rss;
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
        printf("                               p50 %.1f ms, p99 %.1f ms, max %.1f ms (target <= 100)\n",
               p50, p99, max);
        printf("  RSS before/after restarts:   %ld / %ld KiB\n", rss0, rss);
        printf("  fds before/after restarts:   %ld / %ld\n", fds0, count_fds(pid));
        free(lat);

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
