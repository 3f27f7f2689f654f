/* The generic backend's live inventory (generic/live.h) on a fixture tree
 * (regular files stand in for device nodes): nodes that appear (seen by
 * inotify, and by rescans alone), vanish (Unhealthy at once, dropped after
 * the grace period), come back, and symlinks re-pointed; the IDs of devices
 * that did not change stay, with exact device lists and bounded times. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "generic/generic.h"
#include "generic/live.h"
#include "model/withdrawn.h"

static char g_root[64];
static char g_real_root[PATH_MAX];

static void path_of(const char *rel, char *p, size_t n)
{
        snprintf(p, n, "%s%s", g_root, rel);
}

static void touch(const char *rel)
{
        char p[PATH_MAX];
        path_of(rel, p, sizeof(p));
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

static void rm(const char *rel)
{
        char p[PATH_MAX];
        path_of(rel, p, sizeof(p));
        assert_int_equal(unlink(p), 0);
}

static void mkd(const char *rel)
{
        char p[PATH_MAX];
        path_of(rel, p, sizeof(p));
        assert_int_equal(mkdir(p, 0755), 0);
}

/* Points symlink |rel| at |target| (made anew beside it and renamed over
 * it, as `ln -sfn` and udev do). */
static void relink(const char *target, const char *rel)
{
        char p[PATH_MAX], tmp[PATH_MAX + 8];
        path_of(rel, p, sizeof(p));
        snprintf(tmp, sizeof(tmp), "%s.tmp", p);
        assert_int_equal(symlink(target, tmp), 0);
        assert_int_equal(rename(tmp, p), 0);
}

static int setup(void **state)
{
        (void)state;
        strcpy(g_root, "/tmp/kdev-glive-XXXXXX");
        if (!mkdtemp(g_root) || !realpath(g_root, g_real_root))
                return -1;
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
        return system(cmd) == 0 ? 0 : -1;
}

/* A fresh tree for each test. */
static int fresh(void **state)
{
        if (teardown(state) < 0 || mkdir(g_root, 0755) < 0)
                return -1;
        char p[PATH_MAX];
        path_of("/dev", p, sizeof(p));
        return mkdir(p, 0755);
}

/* "id=host id!=host ..." ('!': Unhealthy; host paths under the root as
 * "@/rel", the first device node only). */
static const char *render(const struct kdev_resource *r)
{
        static char buf[4096];
        size_t used = 0, rl = strlen(g_real_root);
        buf[0] = '\0';
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_device *d = &r->devices[i];
                const char *h = d->n_specs ? d->specs[0].host_path : "";
                bool under = strncmp(h, g_real_root, rl) == 0;
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s%s=%s%s",
                                         i ? " " : "", d->id, d->healthy ? "" : "!",
                                         under ? "@" : "", under ? h + rl : h);
                /* the physical device follows: same health, "<res>/<id w/o ::n>" */
                assert_non_null(d->physical);
                assert_int_equal(d->physical->healthy, d->healthy);
        }
        return buf;
}

struct fx {
        uv_loop_t loop;
        struct kdev_generic_config *cfg;
        struct kdev_resource_set set;
        struct kdev_generic_live *live;
        unsigned changes;
        char last[64];
        uv_timer_t poll;
        bool (*until)(struct fx *);
        bool met;
        uint64_t t0;
};

static void on_changed(void *arg, const char *resource)
{
        struct fx *f = arg;
        f->changes++;
        snprintf(f->last, sizeof(f->last), "%s", resource);
}

/* The registry the next start() hands the tracker (NULL: its own). */
static struct kdev_withdrawn *g_withdrawn;

/* Starts a tracker over |f|'s config and set. */
static void relive(struct fx *f, uint64_t rescan_ms, int64_t grace_ms, bool no_watch)
{
        struct kdev_err e = {0};
        struct kdev_generic_options go = {.root = g_root, .allow_regular_files = true};
        struct kdev_generic_live_options lo = {
                .loop = &f->loop,
                .cfg = f->cfg,
                .discover = go,
                .set = &f->set,
                .changed = on_changed,
                .changed_arg = f,
                .rescan_interval_ms = rescan_ms,
                .grace_period_ms = grace_ms,
                .no_watch = no_watch,
                .withdrawn = g_withdrawn,
        };
        f->live = kdev_generic_live_start(&lo, &e);
        if (!f->live)
                fail_msg("live: %s", e.msg);
}

static void start(struct fx *f, const char *yaml, uint64_t rescan_ms, int64_t grace_ms,
                  bool no_watch)
{
        memset(f, 0, sizeof(*f));
        assert_int_equal(uv_loop_init(&f->loop), 0);
        struct kdev_err e = {0};
        if (kdev_generic_config_parse("t.yaml", yaml, strlen(yaml), &f->cfg, &e) != 0)
                fail_msg("parse: %s", e.msg);
        struct kdev_generic_options go = {.root = g_root, .allow_regular_files = true};
        if (kdev_generic_discover(f->cfg, &go, &f->set, &e) != 0)
                fail_msg("discover: %s", e.msg);
        relive(f, rescan_ms, grace_ms, no_watch);
}

static void stopped(void *arg)
{
        *(bool *)arg = true;
}

static void finish(struct fx *f)
{
        bool done = false;
        kdev_generic_live_stop(f->live, stopped, &done);
        assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
        assert_true(done);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        kdev_resource_set_clear(&f->set);
        kdev_generic_config_free(f->cfg);
}

static void on_poll(uv_timer_t *t)
{
        struct fx *f = t->data;
        if (f->until(f)) {
                f->met = true;
                uv_stop(&f->loop);
        }
}

static void on_deadline(uv_timer_t *t)
{
        uv_stop(t->loop);
}

/* Runs the loop until |until| holds or |ms| pass; returns the milliseconds
 * it took, or fails. */
static uint64_t run_until(struct fx *f, bool (*until)(struct fx *), uint64_t ms,
                          const char *what)
{
        uv_timer_t deadline;
        uv_update_time(&f->loop);
        uint64_t t0 = uv_hrtime();
        f->until = until;
        f->met = until(f);
        uv_timer_init(&f->loop, &f->poll);
        uv_timer_init(&f->loop, &deadline);
        f->poll.data = f;
        if (!f->met) {
                uv_timer_start(&f->poll, on_poll, 2, 2);
                uv_timer_start(&deadline, on_deadline, ms, 0);
                uv_run(&f->loop, UV_RUN_DEFAULT);
        }
        uv_close((uv_handle_t *)&f->poll, NULL);
        uv_close((uv_handle_t *)&deadline, NULL);
        uv_run(&f->loop, UV_RUN_NOWAIT);
        uint64_t took = (uv_hrtime() - t0) / 1000000;
        if (!f->met)
                fail_msg("not within %llu ms: %s; list: %s", (unsigned long long)ms, what,
                         render(&f->set.resources[0]));
        return took;
}

static const char *g_want;

static bool list_is(struct fx *f)
{
        return strcmp(render(&f->set.resources[0]), g_want) == 0;
}

static uint64_t wait_list(struct fx *f, const char *want, uint64_t ms)
{
        g_want = want;
        return run_until(f, list_is, ms, want);
}

#define HEAD "version: v1\ngeneric:\n  devices:\n"
#define TTY HEAD "    - name: example.com/tty\n      groups: [{paths: [{path: /dev/ttyS*}]}]\n"

/* A static inventory: the tracker's first scan changes nothing, the IDs
 * are kdev_generic_discover's, and rescans send nothing. */
static void test_static_inventory_unchanged(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        touch("/dev/ttyS1");
        struct fx f;
        start(&f, TTY, 20, 1000, false);
        assert_string_equal(render(&f.set.resources[0]), "ttyS0=@/dev/ttyS0 ttyS1=@/dev/ttyS1");
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f.live, &st);
        assert_int_equal(st.scans, 1);
        assert_int_equal(st.watches, 1);
        assert_int_equal(st.watch_failures, 0);
        /* a few rescans later: still nothing sent */
        uv_timer_t t;
        uv_timer_init(&f.loop, &t);
        uv_timer_start(&t, on_deadline, 150, 0);
        uv_run(&f.loop, UV_RUN_DEFAULT);
        uv_close((uv_handle_t *)&t, NULL);
        kdev_generic_live_stats(f.live, &st);
        assert_true(st.scans >= 3);
        assert_int_equal(f.changes, 0);
        assert_string_equal(render(&f.set.resources[0]), "ttyS0=@/dev/ttyS0 ttyS1=@/dev/ttyS1");
        finish(&f);
}

/* inotify: a node that appears is listed within 2 s (rescans an hour
 * apart: only the watch can have seen it); the physical devices follow. */
static void test_appear_by_inotify(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        touch("/dev/ttyS2");
        struct fx f;
        start(&f, TTY, 3600 * 1000, 1000, false);
        touch("/dev/ttyS1");
        touch("/dev/ttyS10");
        uint64_t ms = wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS1=@/dev/ttyS1 ttyS2=@/dev/ttyS2 "
                                    "ttyS10=@/dev/ttyS10",
                                2000);
        assert_true(ms < 2000);
        assert_string_equal(f.last, "example.com/tty");
        assert_int_equal(f.set.n_physical, 4);
        assert_non_null(kdev_physical_find(&f.set, "example.com/tty/ttyS10"));
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f.live, &st);
        assert_true(st.events >= 1);
        finish(&f);
}

/* A node that vanishes: Unhealthy at once (within 2 s of the unlink),
 * dropped once the grace period (300 ms) has passed, not before; one that
 * comes back within the grace period is Healthy again under its ID. */
static void test_vanish_grace_and_back(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        touch("/dev/ttyS1");
        touch("/dev/ttyS2");
        struct fx f;
        start(&f, TTY, 3600 * 1000, 300, false);
        rm("/dev/ttyS1");
        uint64_t t0 = uv_hrtime();
        wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2 ttyS1!=@/dev/ttyS1", 2000);
        assert_int_equal(f.changes, 1);
        assert_false(kdev_physical_find(&f.set, "example.com/tty/ttyS1")->healthy);
        wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2", 2000);
        uint64_t ms = (uv_hrtime() - t0) / 1000000;
        assert_true(ms >= 300);
        assert_true(ms < 2000);
        assert_int_equal(f.changes, 2);
        assert_null(kdev_physical_find(&f.set, "example.com/tty/ttyS1"));
        assert_int_equal(f.set.n_physical, 2);
        finish(&f);

        /* back within the grace period */
        touch("/dev/ttyS1");
        start(&f, TTY, 3600 * 1000, 60000, false);
        rm("/dev/ttyS0");
        wait_list(&f, "ttyS1=@/dev/ttyS1 ttyS2=@/dev/ttyS2 ttyS0!=@/dev/ttyS0", 2000);
        touch("/dev/ttyS0");
        wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS1=@/dev/ttyS1 ttyS2=@/dev/ttyS2", 2000);
        assert_int_equal(f.changes, 2);
        assert_true(kdev_physical_find(&f.set, "example.com/tty/ttyS0")->healthy);
        finish(&f);
}

/* A re-pointed symlink: same ID, the new host path. */
static void test_repointed_symlink(void **state)
{
        (void)state;
        touch("/dev/real0");
        touch("/dev/real1");
        char target[PATH_MAX];
        path_of("/dev/real0", target, sizeof(target));
        relink(target, "/dev/link0");
        struct fx f;
        start(&f, HEAD "    - name: example.com/l\n"
                       "      groups: [{paths: [{path: /dev/link*}]}]\n",
              3600 * 1000, 1000, false);
        assert_string_equal(render(&f.set.resources[0]), "link0=@/dev/real0");
        path_of("/dev/real1", target, sizeof(target));
        relink(target, "/dev/link0");
        wait_list(&f, "link0=@/dev/real1", 2000);
        assert_int_equal(f.changes, 1);
        finish(&f);
}

/* Rescans alone (no watch): a node that appears is listed within 2 s with
 * rescans every 200 ms, and one that vanishes is reported. */
static void test_rescan_only(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        struct fx f;
        start(&f, TTY, 200, 60000, true);
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f.live, &st);
        assert_int_equal(st.watches, 0);
        touch("/dev/ttyS1");
        uint64_t ms = wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS1=@/dev/ttyS1", 2000);
        assert_true(ms < 2000);
        rm("/dev/ttyS0");
        wait_list(&f, "ttyS1=@/dev/ttyS1 ttyS0!=@/dev/ttyS0", 2000);
        kdev_generic_live_stats(f.live, &st);
        assert_int_equal(st.events, 0);
        assert_true(st.scans >= 2);
        finish(&f);
}

static bool scanned_twice(struct fx *f)
{
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f->live, &st);
        return st.scans >= 2;
}

/* A glob directory created after the start: its ancestor is watched, then
 * the directory itself once a scan sees it. */
static void test_directory_created_later(void **state)
{
        (void)state;
        struct fx f;
        start(&f, HEAD "    - name: example.com/s\n"
                       "      groups: [{paths: [{path: /dev/serial/by-id/*}]}]\n",
              3600 * 1000, 1000, false);
        assert_string_equal(render(&f.set.resources[0]), "");
        mkd("/dev/serial");
        mkd("/dev/serial/by-id");
        /* the mkdir's event (on /dev, watched) rescans and moves the watch
         * down to /dev/serial/by-id */
        run_until(&f, scanned_twice, 2000, "a scan after the mkdir");
        wait_list(&f, "", 100);
        touch("/dev/serial/by-id/x");
        wait_list(&f, "x=@/dev/serial/by-id/x", 2000);
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f.live, &st);
        assert_int_equal(st.watches, 1);
        assert_int_equal(st.scans, 3);
        finish(&f);
}

/* IDs stay: "-k" reuse IDs when the set count shrinks, and a new match
 * whose name another group lists takes the group prefix; the devices that
 * were there keep their IDs. */
static void test_ids_stay(void **state)
{
        (void)state;
        touch("/dev/b");
        touch("/dev/a0");
        touch("/dev/a1");
        struct fx f;
        start(&f, HEAD "    - name: example.com/m\n"
                       "      groups: [{paths: [{path: /dev/b, limit: 2}, {path: /dev/a*}]}]\n",
              3600 * 1000, 60000, false);
        assert_string_equal(render(&f.set.resources[0]), "b-0=@/dev/b b-1=@/dev/b");
        rm("/dev/a1"); /* one set left: the rule alone would call it "b" */
        wait_list(&f, "b-0=@/dev/b b-1!=@/dev/b", 2000);
        finish(&f);

        mkd("/dev/p");
        mkd("/dev/q");
        touch("/dev/p/x");
        touch("/dev/q/y");
        start(&f, HEAD "    - name: example.com/c\n"
                       "      groups:\n"
                       "        - paths: [{path: /dev/p/*}]\n"
                       "        - paths: [{path: /dev/q/*}]\n",
              3600 * 1000, 60000, false);
        assert_string_equal(render(&f.set.resources[0]), "x=@/dev/p/x y=@/dev/q/y");
        touch("/dev/q/x"); /* the rule alone would rename x to g0-x */
        wait_list(&f, "x=@/dev/p/x g1-x=@/dev/q/x y=@/dev/q/y", 2000);
        struct kdev_generic_live_stats st;
        kdev_generic_live_stats(f.live, &st);
        assert_int_equal(st.watches, 2);
        finish(&f);

        /* both the name and the prefixed name taken: the new match is left
         * out (a warning), the list unchanged */
        rm("/dev/q/x");
        touch("/dev/p/g1-x");
        start(&f, HEAD "    - name: example.com/c\n"
                       "      groups:\n"
                       "        - paths: [{path: /dev/p/*}]\n"
                       "        - paths: [{path: /dev/q/*}]\n",
              3600 * 1000, 60000, true);
        assert_string_equal(render(&f.set.resources[0]),
                            "g1-x=@/dev/p/g1-x x=@/dev/p/x y=@/dev/q/y");
        touch("/dev/q/x");
        kdev_generic_live_scan(f.live);
        kdev_generic_live_scan(f.live);
        assert_string_equal(render(&f.set.resources[0]),
                            "g1-x=@/dev/p/g1-x x=@/dev/p/x y=@/dev/q/y");
        assert_int_equal(f.changes, 0);
        finish(&f);
}

/* A rebuild: the tracker stopped, |fresh| served in place of f->set (taken
 * over; a tracker is started over it by the caller). */
static void swap_set(struct fx *f, struct kdev_resource_set *fresh)
{
        bool done = false;
        kdev_generic_live_stop(f->live, stopped, &done);
        while (!done)
                uv_run(&f->loop, UV_RUN_ONCE);
        kdev_resource_set_clear(&f->set);
        f->set = *fresh;
        memset(fresh, 0, sizeof(*fresh));
}

/* A rebuild of the served set (kdev-plugin's reload, a new GPU inventory)
 * while a device is in its grace period: kdev_generic_carry_withdrawn keeps
 * it listed, Unhealthy, in the fresh set, and the tracker started over that
 * set with the same registry drops it when the grace period begun before the
 * rebuild ends (1000 ms after the unlink), not a grace period later. */
static void test_rebuild_keeps_the_grace_period(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        touch("/dev/ttyS1");
        touch("/dev/ttyS2");
        g_withdrawn = kdev_withdrawn_new();
        struct fx f;
        start(&f, TTY, 3600 * 1000, 1000, false);
        rm("/dev/ttyS1");
        uint64_t t0 = uv_hrtime();
        wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2 ttyS1!=@/dev/ttyS1", 2000);
        assert_true(kdev_withdrawn_has(g_withdrawn, "example.com/tty", "ttyS1", NULL));
        usleep(600 * 1000);
        /* the rebuild: discovered afresh, the withdrawn device carried */
        struct kdev_err e = {0};
        struct kdev_generic_options go = {.root = g_root, .allow_regular_files = true};
        struct kdev_resource_set fresh_set = {0};
        assert_int_equal(kdev_generic_discover(f.cfg, &go, &fresh_set, &e), 0);
        assert_string_equal(render(&fresh_set.resources[0]),
                            "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2");
        assert_int_equal(kdev_generic_carry_withdrawn(&fresh_set, f.cfg, &f.set),
                         0);
        assert_string_equal(render(&fresh_set.resources[0]),
                            "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2 ttyS1!=@/dev/ttyS1");
        assert_int_equal(fresh_set.n_physical, 3);
        assert_false(kdev_physical_find(&fresh_set, "example.com/tty/ttyS1")->healthy);
        swap_set(&f, &fresh_set);
        f.changes = 0;
        relive(&f, 3600 * 1000, 1000, false);
        /* the new tracker's first scan keeps it, Unhealthy */
        assert_string_equal(render(&f.set.resources[0]),
                            "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2 ttyS1!=@/dev/ttyS1");
        assert_int_equal(f.changes, 0);
        wait_list(&f, "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2", 2000);
        uint64_t ms = (uv_hrtime() - t0) / 1000000;
        assert_true(ms >= 999); /* the loop's clock counts whole milliseconds */
        assert_true(ms < 1550); /* a grace period restarted at the rebuild: >= 1600 */
        assert_int_equal(f.changes, 1);
        assert_int_equal(kdev_withdrawn_count(g_withdrawn), 0);
        /* nothing to carry now */
        struct kdev_resource_set again = {0};
        assert_int_equal(kdev_generic_discover(f.cfg, &go, &again, &e), 0);
        assert_int_equal(kdev_generic_carry_withdrawn(&again, f.cfg, &f.set), 0);
        assert_string_equal(render(&again.resources[0]), "ttyS0=@/dev/ttyS0 ttyS2=@/dev/ttyS2");
        kdev_resource_set_clear(&again);
        finish(&f);
        kdev_withdrawn_free(g_withdrawn);
        g_withdrawn = NULL;
}

/* The rebuild is the first to miss a device (it left after the tracker's
 * last scan): carried Unhealthy all the same, its grace period begun by the
 * new tracker's first scan, dropped 300 ms later. */
static void test_rebuild_first_to_miss(void **state)
{
        (void)state;
        touch("/dev/ttyS0");
        touch("/dev/ttyS1");
        g_withdrawn = kdev_withdrawn_new();
        struct fx f;
        start(&f, TTY, 3600 * 1000, 300, true); /* no watch: it scans at start only */
        rm("/dev/ttyS0");
        struct kdev_err e = {0};
        struct kdev_generic_options go = {.root = g_root, .allow_regular_files = true};
        struct kdev_resource_set fresh_set = {0};
        assert_int_equal(kdev_generic_discover(f.cfg, &go, &fresh_set, &e), 0);
        assert_int_equal(kdev_generic_carry_withdrawn(&fresh_set, f.cfg, &f.set), 0);
        assert_string_equal(render(&fresh_set.resources[0]),
                            "ttyS1=@/dev/ttyS1 ttyS0!=@/dev/ttyS0");
        assert_int_equal(kdev_withdrawn_count(g_withdrawn), 0);
        swap_set(&f, &fresh_set);
        uint64_t t0 = uv_hrtime();
        relive(&f, 3600 * 1000, 300, true);
        assert_true(kdev_withdrawn_has(g_withdrawn, "example.com/tty", "ttyS0", NULL));
        assert_string_equal(render(&f.set.resources[0]), "ttyS1=@/dev/ttyS1 ttyS0!=@/dev/ttyS0");
        wait_list(&f, "ttyS1=@/dev/ttyS1", 2000);
        /* the loop's clock counts whole milliseconds: 1 ms early at most */
        assert_true((uv_hrtime() - t0) / 1000000 >= 299);
        finish(&f);
        kdev_withdrawn_free(g_withdrawn);
        g_withdrawn = NULL;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_static_inventory_unchanged, fresh),
                cmocka_unit_test_setup(test_appear_by_inotify, fresh),
                cmocka_unit_test_setup(test_vanish_grace_and_back, fresh),
                cmocka_unit_test_setup(test_repointed_symlink, fresh),
                cmocka_unit_test_setup(test_rescan_only, fresh),
                cmocka_unit_test_setup(test_directory_created_later, fresh),
                cmocka_unit_test_setup(test_ids_stay, fresh),
                cmocka_unit_test_setup(test_rebuild_keeps_the_grace_period, fresh),
                cmocka_unit_test_setup(test_rebuild_first_to_miss, fresh),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
