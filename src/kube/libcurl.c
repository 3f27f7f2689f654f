/* libcurl loaded on first use: see libcurl_internal.h. */
#include "kube/libcurl_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kube/kube.h"

/* The soname loaded; Debian's package libcurl4 (scripts/runtime-deps.sh
 * lists it among the DLOPENED libraries of the image). */
#define KDEV_LIBCURL_LIBRARY "libcurl.so.4"

static const struct {
        const char *name;
        size_t offset;
} symbols[] = {
        {"curl_global_init", offsetof(struct kdev_curl_api, global_init)},
        {"curl_global_cleanup", offsetof(struct kdev_curl_api, global_cleanup)},
        {"curl_easy_init", offsetof(struct kdev_curl_api, easy_init)},
        {"curl_easy_setopt", offsetof(struct kdev_curl_api, easy_setopt)},
        {"curl_easy_perform", offsetof(struct kdev_curl_api, easy_perform)},
        {"curl_easy_getinfo", offsetof(struct kdev_curl_api, easy_getinfo)},
        {"curl_easy_reset", offsetof(struct kdev_curl_api, easy_reset)},
        {"curl_easy_cleanup", offsetof(struct kdev_curl_api, easy_cleanup)},
        {"curl_easy_strerror", offsetof(struct kdev_curl_api, easy_strerror)},
        {"curl_slist_append", offsetof(struct kdev_curl_api, slist_append)},
        {"curl_slist_free_all", offsetof(struct kdev_curl_api, slist_free_all)},
};

/* Written once inside load(), read only after pthread_once returns (which
 * orders them); |ready| is what kdev_curl_loaded reads without the once. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *library = KDEV_LIBCURL_LIBRARY;
static struct kdev_curl_api api;
static struct kdev_err load_err;
static _Atomic(const struct kdev_curl_api *) ready;

void kdev_curl_set_library(const char *name)
{
        library = name ? name : KDEV_LIBCURL_LIBRARY;
}

static void load(void)
{
        dlerror();
        void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                const char *e = dlerror();
                kdev_err_set(&load_err, ENOENT, "cannot load %s: %s", library,
                             e ? e : "unknown error");
                return;
        }
        struct kdev_curl_api t;
        for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
                dlerror();
                void *p = dlsym(h, symbols[i].name);
                if (!p) {
                        const char *e = dlerror();
                        kdev_err_set(&load_err, ENOSYS, "%s has no %s: %s", library,
                                     symbols[i].name, e ? e : "symbol is NULL");
                        dlclose(h);
                        return;
                }
                /* POSIX: a dlsym() result converts to a function pointer;
                 * copy the representation into the typed member. */
                memcpy((char *)&t + symbols[i].offset, &p, sizeof(p));
        }
        CURLcode c = t.global_init(CURL_GLOBAL_DEFAULT);
        if (c != CURLE_OK) {
                kdev_err_set(&load_err, EIO, "%s: curl_global_init failed: %s", library,
                             t.easy_strerror(c));
                dlclose(h);
                return;
        }
        api = t;
        atomic_store(&ready, &api); /* the handle stays open: never unloaded */
}

const struct kdev_curl_api *kdev_curl_load(struct kdev_err *err)
{
        pthread_once(&once, load);
        const struct kdev_curl_api *t = atomic_load(&ready);
        if (!t && err)
                *err = load_err;
        return t;
}

const struct kdev_curl_api *kdev_curl_loaded(void)
{
        return atomic_load(&ready);
}

void kdev_kube_global_cleanup(void)
{
        const struct kdev_curl_api *t = atomic_load(&ready);
        if (t)
                t->global_cleanup();
}
