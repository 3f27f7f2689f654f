/* LD_PRELOAD shim for the integration tests: inotify_init1, inotify_init and
 * inotify_add_watch fail with the errno named by KDEV_TEST_INOTIFY_ERRNO
 * ("ENOSPC": the watch limit fs.inotify.max_user_watches reached; "EMFILE":
 * the instance limit fs.inotify.max_user_instances reached), as libuv's
 * uv_fs_event_start then reports them. Unset or another value: the calls
 * go to libc. Built as a test module (tests/CMakeLists.txt); loaded with
 * LD_PRELOAD next to an ASan build with ASAN_OPTIONS=verify_asan_link_order=0. */
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
        if (e) {
                errno = e;
                return -1;
        }
        int (*real)(int, const char *, uint32_t) =
                (int (*)(int, const char *, uint32_t))dlsym(RTLD_NEXT, "inotify_add_watch");
        return real(fd, path, mask);
}
