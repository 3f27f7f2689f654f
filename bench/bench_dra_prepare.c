/* Benchmark of the DRA plugin's NodePrepareResources work: claims per call
 * and claims already prepared, split into the API read and kdev's own work.
 *
 * Usage: bench_dra_prepare [OPTIONS]
 *
 * For each number P of claims already prepared (--prepared) and each number
 * S of claims in one call (--sizes), a fresh plugin (data dir and CDI dir
 * under --dir) first prepares P claims (untimed), then, --rounds times,
 * prepares S new claims and unprepares them again (untimed), so that P
 * stays. Every claim holds one whole GPU of P + S fake GPU records (the
 * plugin reads records, not NVML). Per call it prints the median and the
 * worst over the rounds, in milliseconds:
 *   total      the call from start to answer
 *   read       the claim reads (the claim source: the stand-in API server)
 *   kdev       total - read: kdev's own work, of which
 *   build      claim checks, CDI spec builds, checkpoint records in memory
 *   checkpoint checkpoint saves (write, fsync, rename, fsync of the dir)
 *   specs      CDI spec files (read of an existing one, atomic write, fsyncs)
 * and the checkpoint writes per call, for two ways of preparing the call:
 *   batch      kdev_dra_prepare_many: the call as the service runs it now
 *              (one checkpoint write for the call)
 *   per-claim  kdev_dra_prepare_claim once per claim: one checkpoint write
 *              per claim, the way calls were prepared before (the baseline)
 *
 * Claim source (--source):
 *   api     (default) tests/kubeapi/server.py, the stand-in API server, run
 *           with /usr/bin/python3 and seeded with every claim; read through
 *           kdev's client (kube/kube.h, HTTP/1.1 on 127.0.0.1)
 *   memory  the claims from memory (a deep copy each): kdev's work alone
 * Options:
 *   --dir DIR          where the data dir (the checkpoint) goes (default
 *                      /var/tmp: a disk, as /var/lib/kubelet/plugins is, so
 *                      the fsyncs cost what they cost there)
 *   --cdi-dir DIR      where the CDI dir goes (default /dev/shm: a tmpfs, as
 *                      /var/run/cdi is on a node)
 *   --prepared P,P...  (default 0,100,1000)
 *   --sizes S,S...     (default 1,10,100)
 *   --rounds R         (default 7)
 *   --kv               also print "kv NAME VALUE" lines
 * Figures only: it asserts nothing (tests assert behaviour).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dra/plugin.h"
#include "kube/kube.h"
#include "nvidia/gpus.h"

#define PY "/usr/bin/python3"
#define SERVER KDEV_SOURCE_DIR "/tests/kubeapi/server.py"
#define MAX_LIST 16

struct bench {
        const char *dir, *cdi_dir;
        bool api, kv;
        unsigned rounds;
        struct kdev_nvidia_gpus gpus;
        json_t *claims; /* "ns/name" -> claim (memory source) */
        struct kdev_kube *kube;
        uint64_t read_ns; /* time in the claim source */
        pid_t server;
        int server_in;
};

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int source(void *arg, const char *ns, const char *name, json_t **claim,
                  struct kdev_err *err)
{
        struct bench *b = arg;
        uint64_t t0 = now_ns();
        char key[256];
        int rc = 0;

        if (b->api) {
                rc = kdev_kube_get_claim(b->kube, ns, name, claim, err);
        } else {
                snprintf(key, sizeof(key), "%s/%s", ns, name);
                json_t *c = json_object_get(b->claims, key);

                if (c)
                        *claim = json_deep_copy(c);
                else
                        rc = kdev_err_set(err, ENOENT, "no claim %s", key);
        }
        b->read_ns += now_ns() - t0;
        return rc;
}

static void uid_of(unsigned i, char *buf, size_t size)
{
        snprintf(buf, size, "0b6a1c9e-%04x-4c2e-9a43-%012x", i >> 16, i);
}

static json_t *make_claim(unsigned i)
{
        char name[64], uid[64], dev[64];

        snprintf(name, sizeof(name), "claim-%u", i);
        snprintf(dev, sizeof(dev), "gpu-%u", i);
        uid_of(i, uid, sizeof(uid));
        return json_pack("{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:[{s:s,s:{s:s}}]}},"
                         "s:{s:{s:{s:[{s:s,s:s,s:s,s:s}]}}}}",
                         "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim", "metadata",
                         "name", name, "namespace", "bench", "uid", uid, "spec", "devices",
                         "requests", "name", "gpu", "exactly", "deviceClassName",
                         "gpu.nvidia.com", "status", "allocation", "devices", "results",
                         "request", "gpu", "driver", "gpu.nvidia.com", "pool", "node1",
                         "device", dev);
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        if (type == FTW_DP)
                rmdir(path);
        else
                unlink(path);
        return 0;
}

/* Removes |path| and what is under it (no symbolic link followed). */
static void rm_tree(const char *path)
{
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Starts the stand-in API server seeded with |n| claims (seed file |seed|). */
static int start_server(struct bench *b, const char *seed)
{
        int in[2], out[2];
        char line[4096];
        size_t len = 0;
        json_t *info;

        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
                return -1;
        b->server = fork();
        if (b->server < 0)
                return -1;
        if (b->server == 0) {
                dup2(in[0], 0);
                dup2(out[1], 1);
                execl(PY, PY, SERVER, "--seed", seed, (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        b->server_in = in[1];
        while (len < sizeof(line) - 1 && !memchr(line, '\n', len)) {
                struct pollfd pf = {.fd = out[0], .events = POLLIN};
                ssize_t r;

                if (poll(&pf, 1, 60000) <= 0)
                        break;
                r = read(out[0], line + len, sizeof(line) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
        }
        close(out[0]);
        line[len] = '\0';
        info = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        if (!info)
                return -1;
        struct kdev_kube_config cfg = {
                .server = (char *)json_string_value(json_object_get(info, "url"))};
        struct kdev_kube_opts o = {.version = "v1"};
        struct kdev_err err = {0};

        b->kube = kdev_kube_new(&cfg, &o, &err);
        json_decref(info);
        if (!b->kube)
                fprintf(stderr, "kube client: %s\n", err.msg);
        return b->kube ? 0 : -1;
}

static struct kdev_dra_plugin *new_plugin(struct bench *b, const char *root, const char *croot)
{
        char data[600], cdi[600];
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = data,
                .cdi_dir = cdi,
                .dev_root = root, /* no device nodes: the edits are the same size */
                .proc_root = root,
                .sysfs_root = root,
                .gpus = &b->gpus,
                .get_claim = source,
                .get_claim_arg = b,
        };
        struct kdev_dra_plugin *p = NULL;
        struct kdev_err err = {0};

        snprintf(data, sizeof(data), "%s/data", root);
        snprintf(cdi, sizeof(cdi), "%s/cdi", croot);
        if (kdev_dra_plugin_new(&o, &p, &err) < 0) {
                fprintf(stderr, "plugin: %s\n", err.msg);
                exit(1);
        }
        return p;
}

/* Claims |first| .. |first| + |n| - 1 as items (names and UIDs in |names|,
 * |uids|: n x 64 bytes each). */
static void items_of(struct kdev_dra_prepare_item *v, char *names, char *uids, unsigned first,
                     unsigned n)
{
        for (unsigned i = 0; i < n; i++) {
                snprintf(names + 64 * i, 64, "claim-%u", first + i);
                uid_of(first + i, uids + 64 * i, 64);
                v[i] = (struct kdev_dra_prepare_item){
                        .ns = "bench", .name = names + 64 * i, .uid = uids + 64 * i};
        }
}

struct figures {
        double total, read, kdev, build, checkpoint, specs, writes;
};

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
        qsort(v, n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double worst(const double *v, unsigned n)
{
        double m = 0;

        for (unsigned i = 0; i < n; i++)
                m = v[i] > m ? v[i] : m;
        return m;
}

/* One configuration: |prepared| claims there, calls of |size| claims. */
static void run_one(struct bench *b, unsigned prepared, unsigned size, bool batch)
{
        char root[512], croot[512], *names, *uids;
        struct kdev_dra_prepare_item *v;
        struct kdev_dra_plugin *p;
        unsigned rounds = b->rounds, chunk = 100;
        double *f[7];
        int failed = 0;

        snprintf(root, sizeof(root), "%s/kdev-bench-dra-XXXXXX", b->dir);
        if (!mkdtemp(root)) {
                perror(root);
                exit(1);
        }
        snprintf(croot, sizeof(croot), "%s/kdev-bench-dra-XXXXXX", b->cdi_dir);
        if (!mkdtemp(croot)) {
                perror(croot);
                exit(1);
        }
        p = new_plugin(b, root, croot);
        names = calloc(prepared + size + chunk, 64);
        uids = calloc(prepared + size + chunk, 64);
        v = calloc(prepared + size + chunk, sizeof(*v));
        for (unsigned i = 0; i < 7; i++)
                f[i] = calloc(rounds, sizeof(double));
        for (unsigned i = 0; i < prepared; i += chunk) {
                unsigned k = prepared - i < chunk ? prepared - i : chunk;

                items_of(v, names, uids, i, k);
                failed += kdev_dra_prepare_many(p, v, k);
        }
        for (unsigned r = 0; r < rounds; r++) {
                struct kdev_dra_prepare_stats s0, s1;
                uint64_t t0, t1, read0 = b->read_ns;

                items_of(v, names, uids, prepared, size);
                kdev_dra_plugin_stats(p, &s0);
                t0 = now_ns();
                if (batch) {
                        failed += kdev_dra_prepare_many(p, v, size);
                } else {
                        for (unsigned i = 0; i < size; i++)
                                failed += kdev_dra_prepare_claim(p, v[i].ns, v[i].name, v[i].uid,
                                                                 NULL, &v[i].err) < 0;
                }
                t1 = now_ns();
                kdev_dra_plugin_stats(p, &s1);
                f[0][r] = (double)(t1 - t0) / 1e6;
                f[1][r] = (double)(b->read_ns - read0) / 1e6;
                f[2][r] = f[0][r] - f[1][r];
                f[3][r] = (double)(s1.build_ns - s0.build_ns) / 1e6;
                f[4][r] = (double)(s1.checkpoint_ns - s0.checkpoint_ns) / 1e6;
                f[5][r] = (double)(s1.specs_ns - s0.specs_ns) / 1e6;
                f[6][r] = (double)(s1.checkpoint_writes - s0.checkpoint_writes);
                for (unsigned i = 0; i < size; i++)
                        kdev_dra_unprepare_claim(p, v[i].uid, NULL);
        }
        if (kdev_dra_plugin_prepared(p) != prepared || failed)
                fprintf(stderr, "warning: %u prepared (want %u), %d failed: %s\n",
                        (unsigned)kdev_dra_plugin_prepared(p), prepared, failed, v[0].err.msg);
        static const char *const what[] = {"total", "read", "kdev", "build", "checkpoint",
                                           "specs", "writes"};
        printf("%-9s prepared %4u  claims %3u ", batch ? "batch" : "per-claim", prepared, size);
        for (unsigned i = 0; i < 7; i++) {
                double w = worst(f[i], rounds);

                if (i == 6)
                        printf(" writes %.0f", median(f[i], rounds));
                else
                        printf(" %s %.3f/%.3f", what[i], median(f[i], rounds), w);
        }
        printf("\n");
        if (b->kv)
                for (unsigned i = 0; i < 7; i++)
                        printf("kv %s_p%u_n%u_%s_ms %.3f\n", batch ? "batch" : "perclaim",
                               prepared, size, what[i], median(f[i], rounds));
        fflush(stdout);
        for (unsigned i = 0; i < 7; i++)
                free(f[i]);
        kdev_dra_plugin_free(p);
        free(names);
        free(uids);
        free(v);
        rm_tree(root);
        rm_tree(croot);
}

static unsigned parse_list(const char *s, unsigned *out)
{
        unsigned n = 0;

        while (s && *s && n < MAX_LIST) {
                out[n++] = (unsigned)strtoul(s, (char **)&s, 10);
                if (*s == ',')
                        s++;
        }
        return n;
}

int main(int argc, char **argv)
{
        struct bench b = {.dir = "/var/tmp", .cdi_dir = "/dev/shm", .api = true, .rounds = 7, .server_in = -1};
        unsigned prepared[MAX_LIST] = {0, 100, 1000}, sizes[MAX_LIST] = {1, 10, 100};
        unsigned np = 3, ns = 3, max_p = 0, max_s = 0;
        static const struct option opts[] = {
                {"dir", required_argument, NULL, 'd'},   {"prepared", required_argument, NULL, 'p'},
                {"sizes", required_argument, NULL, 's'}, {"rounds", required_argument, NULL, 'r'},
                {"source", required_argument, NULL, 'S'}, {"kv", no_argument, NULL, 'k'},
                {"cdi-dir", required_argument, NULL, 'c'},
                {NULL, 0, NULL, 0}};
        char seed[600];
        int c;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 'd': b.dir = optarg; break;
                case 'c': b.cdi_dir = optarg; break;
                case 'p': np = parse_list(optarg, prepared); break;
                case 's': ns = parse_list(optarg, sizes); break;
                case 'r': b.rounds = (unsigned)atoi(optarg); break;
                case 'S': b.api = strcmp(optarg, "memory") != 0; break;
                case 'k': b.kv = true; break;
                default:
                        fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
                        return 2;
                }
        }
        if (b.rounds < 1)
                b.rounds = 1;
        for (unsigned i = 0; i < np; i++)
                max_p = prepared[i] > max_p ? prepared[i] : max_p;
        for (unsigned i = 0; i < ns; i++)
                max_s = sizes[i] > max_s ? sizes[i] : max_s;
        /* one whole GPU per claim */
        b.gpus.n_gpus = max_p + max_s;
        b.gpus.gpus = calloc(b.gpus.n_gpus, sizeof(*b.gpus.gpus));
        b.claims = json_object();
        json_t *list = json_array();

        for (unsigned i = 0; i < b.gpus.n_gpus; i++) {
                struct kdev_nvidia_gpu *g = &b.gpus.gpus[i];
                char key[64];

                g->index = g->minor = i;
                g->numa_node = -1;
                snprintf(g->uuid, sizeof(g->uuid), "GPU-%08x-0000-0000-0000-000000000000", i);
                snprintf(g->dra_name, sizeof(g->dra_name), "gpu-%u", i);
                snprintf(key, sizeof(key), "bench/claim-%u", i);
                json_object_set_new(b.claims, key, make_claim(i));
                json_array_append(list, json_object_get(b.claims, key));
        }
        if (b.api) {
                snprintf(seed, sizeof(seed), "%s/kdev-bench-dra-seed-%d.json", b.dir,
                         (int)getpid());
                if (json_dump_file(list, seed, JSON_COMPACT) < 0 || start_server(&b, seed) < 0) {
                        fprintf(stderr, "cannot start the stand-in API server %s\n", SERVER);
                        return 1;
                }
                unlink(seed);
        }
        json_decref(list);
        printf("# NodePrepareResources work, ms: median/worst of %u calls; source %s; data dir "
               "under %s, CDI dir under %s\n",
               b.rounds, b.api ? "stand-in API server (python3, HTTP on 127.0.0.1)" : "memory",
               b.dir, b.cdi_dir);
        for (unsigned i = 0; i < np; i++)
                for (unsigned j = 0; j < ns; j++) {
                        run_one(&b, prepared[i], sizes[j], true);
                        run_one(&b, prepared[i], sizes[j], false);
                }
        if (b.api) {
                kdev_kube_free(b.kube);
                close(b.server_in);
                kill(b.server, SIGTERM);
                waitpid(b.server, NULL, 0);
        }
        json_decref(b.claims);
        free(b.gpus.gpus);
        return 0;
}
