/* The share region and its limits file (share/region.h): the parser's exact
 * results and messages, the region's creation and validation, slots,
 * reservations at the exact limit, concurrent threads, and a killed
 * process's slot reaped. Runs under ASan+UBSan (no preload involved). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "share/region.h"

#define U0 "GPU-4603f764-b00c-271e-0980-eda368e40931"
#define U1 "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e"

static int parse(const char *text, struct kdev_share_limits *l, char *msg)
{
        return kdev_share_limits_parse(text, strlen(text), "limits", l, msg, 256);
}

static void test_limits_ok(void **state)
{
        (void)state;
        struct kdev_share_limits l;
        char msg[256] = "";
        assert_int_equal(parse("# comment\n\n" U0 " 42949672960 50\r\n"
                               "\t" U1 "\t1 100\npolicy strict", &l, msg), 0);
        assert_int_equal(l.n, 2);
        assert_string_equal(l.gpu[0].uuid, U0);
        assert_true(l.gpu[0].memory == 42949672960ull);
        assert_int_equal(l.gpu[0].compute, 50);
        assert_string_equal(l.gpu[1].uuid, U1);
        assert_true(l.gpu[1].memory == 1);
        assert_int_equal(l.gpu[1].compute, 100);
        assert_int_equal(l.policy, KDEV_SHARE_POLICY_STRICT);
        assert_int_equal(parse("", &l, msg), 0);
        assert_int_equal(l.n, 0);
        assert_int_equal(l.policy, KDEV_SHARE_POLICY_WORK_CONSERVING);
        assert_string_equal(kdev_share_policy_name(KDEV_SHARE_POLICY_NONE), "none");
}

static void test_limits_bad(void **state)
{
        (void)state;
        static const struct {
                const char *in, *msg;
        } bad[] = {
                {U0 " 1 0\n", "limits:1: compute share 0 is not in 1..100"},
                {U0 " 1 101\n", "limits:1: compute share 101 is not in 1..100"},
                {"\n" U0 " 1x 5\n", "limits:2: memory limit 1x is not a number of bytes"},
                {U0 " 99999999999999999999 5\n",
                 "limits:1: memory limit 99999999999999999999 is not a number of bytes"},
                {"gpu-1 1 5\n", "limits:1: gpu-1 is not a GPU or MIG device UUID (GPU-... or MIG-...)"},
                {U0 " 1\n", "limits:1: want <GPU UUID> <memory bytes> <compute percent>, got 2 fields"},
                {U0 " 1 2 3\n", "limits:1: want <GPU UUID> <memory bytes> <compute percent>, got 4 fields"},
                {U0 " 1 5\n" U0 " 2 5\n", "limits:2: GPU " U0 " is listed twice"},
                {"policy fast\n", "limits:1: unknown policy fast (want work-conserving, strict or none)"},
                {"policy\n", "limits:1: policy takes one name (work-conserving, strict or none)"},
                {"policy none\npolicy strict\n", "limits:2: policy is given twice"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_share_limits l;
                char msg[256] = "";
                if (parse(bad[i].in, &l, msg) != -1 || strcmp(msg, bad[i].msg) != 0)
                        fail_msg("%zu: got \"%s\", want \"%s\"", i, msg, bad[i].msg);
        }
        /* 17 GPUs */
        char text[4096] = "";
        for (int i = 0; i < 17; i++)
                snprintf(text + strlen(text), sizeof(text) - strlen(text),
                         "GPU-00000000-0000-0000-0000-0000000000%02d 1 1\n", i);
        struct kdev_share_limits l;
        char msg[256];
        assert_int_equal(parse(text, &l, msg), -1);
        assert_string_equal(msg, "limits:17: more than 16 GPUs");
}

static char *tmpdir(void)
{
        char *d = strdup("/tmp/kdev-share-test-XXXXXX");
        assert_non_null(mkdtemp(d));
        return d;
}

static void rmdir_all(char *d)
{
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
        assert_int_equal(system(cmd), 0);
        free(d);
}

static void test_limits_load(void **state)
{
        (void)state;
        char *d = tmpdir();
        char path[256], msg[512];
        snprintf(path, sizeof(path), "%s/limits", d);
        struct kdev_share_limits l;
        assert_int_equal(kdev_share_limits_load(path, &l, msg, sizeof(msg)), 1);
        FILE *f = fopen(path, "w");
        fputs(U0 " 1024 50\n", f);
        fclose(f);
        assert_int_equal(kdev_share_limits_load(path, &l, msg, sizeof(msg)), 0);
        assert_true(l.n == 1 && l.gpu[0].memory == 1024);
        f = fopen(path, "w");
        fwrite("x\0y", 1, 3, f);
        fclose(f);
        assert_int_equal(kdev_share_limits_load(path, &l, msg, sizeof(msg)), -1);
        char want[512];
        snprintf(want, sizeof(want), "%s: contains a NUL byte at offset 1", path);
        assert_string_equal(msg, want);
        rmdir_all(d);
}

static struct kdev_share_region_file *map(const char *dir, uint64_t limit)
{
        struct kdev_share_limits l = {0};
        l.n = 1;
        strcpy(l.gpu[0].uuid, U0);
        l.gpu[0].memory = limit;
        l.gpu[0].compute = 50;
        char msg[512];
        struct kdev_share_region_file *r = kdev_share_region_map(dir, &l, false, msg, sizeof(msg));
        if (!r)
                fail_msg("%s", msg);
        return r;
}

static void test_region_reserve_exact(void **state)
{
        (void)state;
        char *d = tmpdir();
        struct kdev_share_region_file *r = map(d, 1000);
        /* a second mapping sees the same file (the limits given are ignored) */
        struct kdev_share_region_file *r2 = map(d, 5);
        assert_true(r2->gpu[0].memory == 1000);
        /* live pids (a dead one's slot is reaped by the next claim) */
        int a = kdev_share_region_claim(r, getpid(), 0, 0);
        int b = kdev_share_region_claim(r2, getppid(), 0, 1000);
        assert_int_equal(a, 0);
        assert_int_equal(b, 1);
        assert_int_equal(kdev_share_region_reserve(r, a, 0, 600), 0);
        assert_int_equal(kdev_share_region_reserve(r2, b, 0, 401), -1);
        assert_int_equal(kdev_share_region_reserve(r2, b, 0, 400), 0);
        assert_true(kdev_share_region_used(r, 0) == 1000);
        assert_int_equal(kdev_share_region_reserve(r, a, 0, 1), -1);
        kdev_share_region_unreserve(r, a, 0, 100);
        assert_true(kdev_share_region_used(r2, 0) == 900);
        kdev_share_region_unreserve(r, a, 0, 100000);  /* never below 0 */
        assert_true(kdev_share_region_used(r, 0) == 400);

        struct kdev_share_usage *u = malloc(sizeof(*u));
        char msg[512];
        assert_int_equal(kdev_share_usage_read(d, u, msg, sizeof(msg)), 0);
        assert_int_equal(u->n_gpus, 1);
        assert_string_equal(u->gpu[0].uuid, U0);
        assert_true(u->used[0] == 400);
        assert_int_equal(u->n_procs, 2);
        assert_int_equal(u->proc[1].pid, getppid());
        assert_int_equal(u->proc[1].uid, 1000);
        kdev_share_region_release(r, b, getppid());
        assert_int_equal(kdev_share_usage_read(d, u, msg, sizeof(msg)), 0);
        assert_int_equal(u->n_procs, 1);
        assert_true(u->used[0] == 0);
        free(u);
        kdev_share_region_unmap(r);
        kdev_share_region_unmap(r2);
        rmdir_all(d);
}

static void test_region_bad_files(void **state)
{
        (void)state;
        char *d = tmpdir();
        char path[256], msg[512], want[512];
        snprintf(path, sizeof(path), "%s/region", d);
        FILE *f = fopen(path, "w");
        fputs("not a region", f);
        fclose(f);
        assert_null(kdev_share_region_map(d, NULL, false, msg, sizeof(msg)));
        snprintf(want, sizeof(want), "%s: is not a share region (12 bytes, want %zu)", path,
                 sizeof(struct kdev_share_region_file));
        assert_string_equal(msg, want);
        /* right size, wrong version */
        struct kdev_share_region_file *z = calloc(1, sizeof(*z));
        memcpy(z->magic, KDEV_SHARE_REGION_MAGIC, 8);
        z->version = 9;
        z->size = sizeof(*z);
        z->max_procs = KDEV_SHARE_MAX_PROCS;
        f = fopen(path, "w");
        fwrite(z, sizeof(*z), 1, f);
        fclose(f);
        free(z);
        struct kdev_share_usage *u = malloc(sizeof(*u));
        assert_int_equal(kdev_share_usage_read(d, u, msg, sizeof(msg)), -1);
        snprintf(want, sizeof(want), "%s: region version 9 (want 1) or layout differs", path);
        assert_string_equal(msg, want);
        free(u);
        rmdir_all(d);
}

static void test_region_reap_dead(void **state)
{
        (void)state;
        char *d = tmpdir();
        struct kdev_share_region_file *r = map(d, 1 << 20);
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
                int s = kdev_share_region_claim(r, getpid(), 0, 0);
                kdev_share_region_reserve(r, s, 0, 1 << 19);
                char c = 'x';
                if (write(fds[1], &c, 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        char c;
        assert_int_equal(read(fds[0], &c, 1), 1);
        assert_true(kdev_share_region_used(r, 0) == 1 << 19);
        assert_int_equal(kdev_share_region_reap(r), 0);  /* alive */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        assert_int_equal(kdev_share_region_reap(r), 1);
        assert_true(kdev_share_region_used(r, 0) == 0);
        close(fds[0]);
        close(fds[1]);
        kdev_share_region_unmap(r);
        rmdir_all(d);
}

/* A pid that no longer exists: a child that exited and was waited for. */
static pid_t dead_pid(void)
{
        pid_t pid = fork();
        if (pid == 0)
                _exit(0);
        waitpid(pid, NULL, 0);
        return pid;
}

/* Claims: our own earlier image's slot is taken back (exec keeps the pid;
 * whatever its start time), a dead process's slot is left alone until the
 * slots in use reach a multiple of 32, then reaped and reused. */
static void test_region_claim_rules(void **state)
{
        (void)state;
        char *d = tmpdir();
        struct kdev_share_region_file *r = map(d, 1 << 20);
        pid_t dead = dead_pid();
        assert_int_equal(kdev_share_region_claim(r, dead, 0, 0), 0);
        assert_int_equal(kdev_share_region_reserve(r, 0, 0, 4096), 0);
        /* our previous image (exec): slot 1, with memory, another start time */
        assert_int_equal(kdev_share_region_claim(r, getpid(), 77, 0), 1);
        assert_int_equal(kdev_share_region_reserve(r, 1, 0, 8192), 0);
        assert_true(kdev_share_region_used(r, 0) == 4096 + 8192);
        assert_int_equal(kdev_share_region_claim(r, getpid(), 0, 5), 1);
        assert_true(r->proc[1].used[0] == 0);
        assert_int_equal(r->proc[1].uid, 5);
        /* the dead process's slot is kept (hwm 2): a claim makes no kill() */
        assert_int_equal(kdev_share_region_claim(r, getppid(), 0, 0), 2);
        assert_int_equal(r->proc[0].pid, dead);
        assert_true(kdev_share_region_used(r, 0) == 4096);
        /* slots 3..31 held by a live process (pid 1): at 32, a claim that
         * would grow reaps first and takes the dead process's slot 0 */
        for (int i = 3; i < 32; i++)
                atomic_store(&r->proc[i].pid, 1);
        atomic_store(&r->procs_hwm, 32);
        pid_t other = dead_pid();  /* any pid no slot holds */
        assert_int_equal(kdev_share_region_claim(r, other, 0, 0), 0);
        assert_int_equal(r->proc[0].pid, other);
        assert_true(kdev_share_region_used(r, 0) == 0);
        assert_int_equal(r->procs_hwm, 32);
        kdev_share_region_unmap(r);
        rmdir_all(d);
}

/* The start time is noted once, for the slot's own pid only. */
static void test_region_note_start(void **state)
{
        (void)state;
        char *d = tmpdir();
        struct kdev_share_region_file *r = map(d, 1 << 20);
        int s = kdev_share_region_claim(r, getpid(), 0, 0);
        assert_int_equal(s, 0);
        kdev_share_region_note_start(r, s, getppid());  /* not its pid */
        assert_true(r->proc[0].start_time == 0);
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)getpid());
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *p = strrchr(buf, ')') + 2;
        for (int field = 3; field < 22; field++)
                p = strchr(p, ' ') + 1;
        unsigned long long want = strtoull(p, NULL, 10);
        kdev_share_region_note_start(r, s, getpid());
        assert_true(r->proc[0].start_time == want);
        r->proc[0].start_time = 12345;
        kdev_share_region_note_start(r, s, getpid());  /* already noted */
        assert_true(r->proc[0].start_time == 12345);
        /* a live pid whose start time differs from the slot's: reused, reaped;
         * the same start time: kept */
        assert_int_equal(kdev_share_region_reap(r), 1);
        assert_int_equal(r->proc[0].pid, 0);
        s = kdev_share_region_claim(r, getpid(), 0, 0);
        kdev_share_region_note_start(r, s, getpid());
        assert_int_equal(kdev_share_region_reap(r), 0);
        assert_int_equal(r->proc[s].pid, getpid());
        kdev_share_region_unmap(r);
        rmdir_all(d);
}

/* kdev_share_region_open never creates: ENOENT when absent; a FIFO in the
 * region's place is refused at once (no open that waits for a writer). */
static void test_region_open(void **state)
{
        (void)state;
        char *d = tmpdir();
        char msg[512], want[512], path[256];
        snprintf(path, sizeof(path), "%s/region", d);
        errno = 0;
        assert_null(kdev_share_region_open(d, msg, sizeof(msg)));
        assert_int_equal(errno, ENOENT);
        snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", path);
        assert_string_equal(msg, want);
        struct stat st;
        assert_int_equal(stat(path, &st), -1);
        assert_int_equal(mkfifo(path, 0600), 0);
        assert_null(kdev_share_region_open(d, msg, sizeof(msg)));
        assert_int_equal(errno, EINVAL);
        snprintf(want, sizeof(want), "%s: is not a regular file", path);
        assert_string_equal(msg, want);
        unlink(path);
        struct kdev_share_region_file *r = map(d, 1000);
        struct kdev_share_region_file *r2 = kdev_share_region_open(d, msg, sizeof(msg));
        assert_non_null(r2);
        assert_true(r2->gpu[0].memory == 1000);
        kdev_share_region_unmap(r2);
        kdev_share_region_unmap(r);
        rmdir_all(d);
}

struct worker {
        struct kdev_share_region_file *r;
        int slot;
        unsigned got;
};

static void *work(void *arg)
{
        struct worker *w = arg;
        for (int i = 0; i < 1000; i++)
                if (kdev_share_region_reserve(w->r, w->slot, 0, 7) == 0)
                        w->got++;
        return NULL;
}

static void test_region_threads_never_exceed(void **state)
{
        (void)state;
        char *d = tmpdir();
        struct kdev_share_region_file *r = map(d, 7000);
        struct worker w[8];
        pthread_t t[8];
        pid_t kids[8];
        for (int i = 0; i < 8; i++) {
                /* eight live processes' slots (claims never reap a live pid) */
                kids[i] = fork();
                if (kids[i] == 0) {
                        pause();
                        _exit(0);
                }
                w[i] = (struct worker){r, kdev_share_region_claim(r, kids[i], 0, 0), 0};
                assert_int_equal(w[i].slot, i);
        }
        for (int i = 0; i < 8; i++)
                pthread_create(&t[i], NULL, work, &w[i]);
        unsigned total = 0;
        for (int i = 0; i < 8; i++) {
                pthread_join(t[i], NULL);
                total += w[i].got;
        }
        assert_true(total <= 1000);
        assert_true(kdev_share_region_used(r, 0) == (uint64_t)total * 7);
        for (int i = 0; i < 8; i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        assert_int_equal(kdev_share_region_reap(r), 8);
        assert_true(kdev_share_region_used(r, 0) == 0);
        kdev_share_region_unmap(r);
        rmdir_all(d);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_limits_ok),
                cmocka_unit_test(test_limits_bad),
                cmocka_unit_test(test_limits_load),
                cmocka_unit_test(test_region_reserve_exact),
                cmocka_unit_test(test_region_bad_files),
                cmocka_unit_test(test_region_reap_dead),
                cmocka_unit_test(test_region_claim_rules),
                cmocka_unit_test(test_region_note_start),
                cmocka_unit_test(test_region_open),
                cmocka_unit_test(test_region_threads_never_exceed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
