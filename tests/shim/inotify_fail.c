/* LD_PRELOAD shim for the integration tests, making inotify fail as the
 * kernel does when its limits are reached:
 *
 * - KDEV_TEST_INOTIFY_ERRNO=ENOSPC or EMFILE: inotify_init1, inotify_init and
 *   inotify_add_watch all fail with that errno (ENOSPC: the watch limit
 *   fs.inotify.max_user_watches reached; EMFILE: the instance limit
 *   fs.inotify.max_user_instances reached), as libuv's uv_fs_event_start then
 *   reports them (tests/integration/faults_directories.py);
 * - KDEV_TEST_INOTIFY_FAIL_UNDER=DIR: inotify_add_watch fails with ENOSPC for
 *   every path under DIR and works for the others, so the device-plugins
 *   directory stays watched (tests/integration/generic_live.py: generic
 *   devices followed by rescans alone).
 *
 * Neither set: the calls go to libc. Built as a test module
 * (tests/CMakeLists.txt) without sanitizers; loaded with LD_PRELOAD next to
 * an ASan build with the ASan runtime first or
 * ASAN_OPTIONS=verify_asan_link_order=0. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>

static int shim_errno(void)
{
        const char *v = getenv("KDEV_TEST_INOTIFY_ERRNO");
        if (!v)
                return 0;
        if (strcmp(v, "ENOSPC") == 0)
                return ENOSPC;
        if (strcmp(v, "EMFILE") == 0)
                return EMFILE;
        return 0;
}

int inotify_init(void)
{
        int e = shim_errno();
        if (e) {
                errno = e;
                return -1;
        }
        int (*real)(void) = (int (*)(void))dlsym(RTLD_NEXT, "inotify_init");
        return real();
}

int inotify_init1(int flags)
{
        int e = shim_errno();
        if (e) {
                errno = e;
                return -1;
        }
        int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "inotify_init1");
        return real(flags);
}

int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
        int e = shim_errno();
        const char *under = getenv("KDEV_TEST_INOTIFY_FAIL_UNDER");
        if (!e && under && *under && strncmp(path, under, strlen(under)) == 0)
                e = ENOSPC;
        if (e) {
                errno = e;
                return -1;
        }
        int (*real)(int, const char *, uint32_t) =
                (int (*)(int, const char *, uint32_t))dlsym(RTLD_NEXT, "inotify_add_watch");
        if (!real) {
                errno = ENOSYS;
                return -1;
        }
        return real(fd, path, mask);
}
