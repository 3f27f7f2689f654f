/* Shared fixture for the unit tests that drive the mock libnvidia-ml.so.1
 * (mock/nvml) through kdev's real NVML loader: opening the loader and the
 * mock's control entry points, scratch directories, loading a topology and
 * discovering it.
 *
 * Only for tests/unit/test_nvml_*.c, test_nvidia_*.c and test_dra_cdi_*.c,
 * which the build gives KDEV_MOCK_NVML_LIB, KDEV_MOCK_NVML_TOPOLOGIES and the mock's include
 * directory. Include after <cmocka.h>. Everything here is static inline so
 * that a test may use any subset of it. */
#ifndef KDEV_TESTS_UNIT_MOCK_FIXTURE_H
#define KDEV_TESTS_UNIT_MOCK_FIXTURE_H

#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kdev_mock_nvml.h"
#include "tmptree.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

/* Path of the shipped mock topology |f| (a string literal). */
#define TOPO(f) KDEV_MOCK_NVML_TOPOLOGIES "/" f

/* The loader opened on the mock, and the mock's control entry points. */
struct mock_nvml {
        struct kdev_nvml *lib;
        void *h; /* the mock, as the loader loaded it (RTLD_NOLOAD reference) */
        kdevMockReset_fn *reset;
        kdevMockWriteSysfs_fn *write_sysfs;
        kdevMockWriteProc_fn *write_proc;
        kdevMockSetLost_fn *set_lost;
        kdevMockSetResetRequired_fn *set_reset;
        kdevMockSetPendingRemap_fn *set_remap;
        kdevMockSetError_fn *set_error;
        kdevMockSetInitError_fn *set_init_error;
        kdevMockInjectXid_fn *xid;
        kdevMockInjectEvent_fn *event;
        kdevMockInitCount_fn *count;
        kdevMockLastError_fn *last_error;
        kdevMockSetPresent_fn *set_present;
        kdevMockSetMigMode_fn *set_mig_mode;
        kdevMockCrashAfter_fn *crash_after;
        kdevMockLastStateError_fn *state_error;
};

#define MOCK_NVML_SYM(m, field, name) \
        ((m)->field = (__typeof__((m)->field))dlsym((m)->h, name))

/* Opens KDEV_MOCK_NVML_LIB through kdev_nvml_open and resolves every control
 * entry point into |m|. Returns 0, or -1 (the loader's message on stderr)
 * with nothing left open. Undo with mock_nvml_close. */
static inline int mock_nvml_open(struct mock_nvml *m)
{
        struct kdev_nvml_options o = { .library_path = KDEV_MOCK_NVML_LIB };
        struct kdev_err e;
        if (kdev_nvml_open(&o, &m->lib, &e) != 0) {
                fprintf(stderr, "%s\n", e.msg);
                return -1;
        }
        m->h = dlopen(KDEV_MOCK_NVML_LIB, RTLD_NOW | RTLD_NOLOAD);
        if (!m->h) {
                kdev_nvml_close(m->lib);
                return -1;
        }
        MOCK_NVML_SYM(m, reset, "kdevMockReset");
        MOCK_NVML_SYM(m, write_sysfs, "kdevMockWriteSysfs");
        MOCK_NVML_SYM(m, write_proc, "kdevMockWriteProc");
        MOCK_NVML_SYM(m, set_lost, "kdevMockSetLost");
        MOCK_NVML_SYM(m, set_reset, "kdevMockSetResetRequired");
        MOCK_NVML_SYM(m, set_remap, "kdevMockSetPendingRemap");
        MOCK_NVML_SYM(m, set_error, "kdevMockSetError");
        MOCK_NVML_SYM(m, set_init_error, "kdevMockSetInitError");
        MOCK_NVML_SYM(m, xid, "kdevMockInjectXid");
        MOCK_NVML_SYM(m, event, "kdevMockInjectEvent");
        MOCK_NVML_SYM(m, count, "kdevMockInitCount");
        MOCK_NVML_SYM(m, last_error, "kdevMockLastError");
        MOCK_NVML_SYM(m, set_present, "kdevMockSetPresent");
        MOCK_NVML_SYM(m, set_mig_mode, "kdevMockSetMigMode");
        MOCK_NVML_SYM(m, crash_after, "kdevMockCrashAfter");
        MOCK_NVML_SYM(m, state_error, "kdevMockLastStateError");
        if (!m->reset || !m->write_sysfs || !m->write_proc || !m->set_lost || !m->set_reset ||
            !m->set_remap || !m->set_error || !m->set_init_error || !m->xid || !m->event ||
            !m->count || !m->last_error || !m->set_present || !m->set_mig_mode ||
            !m->crash_after || !m->state_error) {
                dlclose(m->h);
                kdev_nvml_close(m->lib);
                return -1;
        }
        return 0;
}

/* Resets the mock's state, then drops the handle and closes the loader. */
static inline void mock_nvml_close(struct mock_nvml *m)
{
        m->reset();
        dlclose(m->h);
        kdev_nvml_close(m->lib);
}

/* Makes a fresh directory /tmp/|prefix|-XXXXXX into |dir| (|size| bytes).
 * Returns 0 or -1. Remove it with mock_rmtree. */
static inline int mock_tmpdir(char *dir, size_t size, const char *prefix)
{
        snprintf(dir, size, "/tmp/%s-XXXXXX", prefix);
        return mkdtemp(dir) ? 0 : -1;
}

/* Removes |dir| and everything below it (links are not followed). */
static inline void mock_rmtree(const char *dir)
{
        tmptree_remove(dir);
}

/* Creates the empty file |dir|/|name| (mode 0644); fails the test if it cannot. */
static inline void mock_touch(const char *dir, const char *name)
{
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

/* Points the mock at topology |file|, resets it and writes the topology's
 * sysfs files under |sysfs|. */
static inline void mock_nvml_load(struct mock_nvml *m, const char *file, const char *sysfs)
{
        setenv("KDEV_MOCK_NVML_TOPOLOGY", file, 1);
        m->reset();
        assert_int_equal(m->write_sysfs(sysfs), NVML_SUCCESS);
}

/* Discovers what the mock holds now, with sysfs root |sysfs| and discovery
 * |flags| (KDEV_NVML_DISCOVER_*). Fails the test with the error (after
 * "|what|: " unless |what| is NULL). The caller frees the set. */
static inline struct kdev_gpu_set *mock_nvml_discover_loaded(struct mock_nvml *m,
                                                             const char *sysfs,
                                                             unsigned flags, const char *what)
{
        struct kdev_nvml_discover_options o = { .sysfs_root = sysfs, .flags = flags };
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvml_discover(m->lib, &o, &set, &e) != 0) {
                if (what)
                        fail_msg("%s: %s", what, e.msg);
                else
                        fail_msg("%s", e.msg);
        }
        return set;
}

/* mock_nvml_load then mock_nvml_discover_loaded (errors name |file|). */
static inline struct kdev_gpu_set *mock_nvml_discover(struct mock_nvml *m, const char *file,
                                                      const char *sysfs, unsigned flags)
{
        mock_nvml_load(m, file, sysfs);
        return mock_nvml_discover_loaded(m, sysfs, flags, file);
}

/* Warnings collected by mock_collect (a warn callback whose argument is a
 * struct mock_warns): the first 8, each cut to 255 bytes. */
struct mock_warns {
        char msgs[8][256];
        size_t n;
};

static inline void mock_collect(void *arg, const char *msg)
{
        struct mock_warns *w = arg;
        if (w->n < 8)
                snprintf(w->msgs[w->n++], sizeof(w->msgs[0]), "%s", msg);
}

#endif
