/* A preload shim for the integration tests (LD_PRELOAD): inotify_add_watch
 * fails with ENOSPC (the inotify watch limit, fs.inotify.max_user_watches,
 * reached) for every path under $KDEV_TEST_INOTIFY_FAIL_UNDER, and works as
 * usual for the others (the device-plugins directory stays watched).
 * tests/integration/generic_live.py runs kdev-plugin under it to check that
 * the generic devices are then followed by rescans alone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>

int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
        static int (*real)(int, const char *, uint32_t);
        if (!real)
                real = (int (*)(int, const char *, uint32_t))dlsym(RTLD_NEXT,
                                                                   "inotify_add_watch");
        const char *under = getenv("KDEV_TEST_INOTIFY_FAIL_UNDER");
        if (under && *under && strncmp(path, under, strlen(under)) == 0) {
                errno = ENOSPC;
                return -1;
        }
        if (!real) {
                errno = ENOSYS;
                return -1;
        }
        return real(fd, path, mask);
}
