/* libcurl, loaded on first use: dlopen("libcurl.so.4") when the first API
 * server client is created (kdev_kube_new), and one typed table of the entry
 * points the kube module calls. A process that never creates a client (e.g.
 * kdev-plugin without --config-dir) never maps libcurl nor the ~30 libraries
 * it pulls in (TLS, Kerberos, LDAP, SSH, ...): about 6 MiB of resident memory.
 * <curl/curl.h> supplies the types and constants only; nothing links
 * libcurl. The same pattern as src/metrics/http.c (libmicrohttpd) and
 * src/nvml/loader.c (libnvidia-ml). Internal to the kube module and its
 * tests. */
#ifndef KDEV_KUBE_LIBCURL_INTERNAL_H
#define KDEV_KUBE_LIBCURL_INTERNAL_H

#include <curl/curl.h>

#include "common/err.h"

/* The libcurl functions the kube module calls, typed from curl.h (libcurl's
 * "libcurl-easy" API; every one exists since 7.17, CURLOPT_*_BLOB need
 * 7.71, CURLOPT_PROTOCOLS_STR 7.85). curl_easy_setopt and
 * curl_easy_getinfo are variadic: pass exactly the type the option documents
 * (long, a pointer, curl_off_t). */
struct kdev_curl_api {
        CURLcode (*global_init)(long flags);
        void (*global_cleanup)(void);
        CURL *(*easy_init)(void);
        CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
        CURLcode (*easy_perform)(CURL *curl);
        CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
        void (*easy_reset)(CURL *curl);
        void (*easy_cleanup)(CURL *curl);
        const char *(*easy_strerror)(CURLcode code);
        struct curl_slist *(*slist_append)(struct curl_slist *list, const char *string);
        void (*slist_free_all)(struct curl_slist *list);
};

/* Loads libcurl once per process (pthread_once: any thread, concurrently),
 * resolves every entry of struct kdev_curl_api and calls
 * curl_global_init(CURL_GLOBAL_DEFAULT) (not thread-safe in libcurl before
 * 7.84, hence inside the once). Returns the table (static storage, valid
 * until process exit; libcurl is never unloaded), or NULL with |err| set:
 *   -ENOENT "cannot load libcurl.so.4: <dlerror>" (the library is missing
 *           or unloadable; Debian package libcurl4),
 *   -ENOSYS "libcurl.so.4 has no <symbol>: <dlerror>",
 *   -EIO    "libcurl.so.4: curl_global_init failed: <curl_easy_strerror>".
 * The outcome is kept: after a failure every later call fails with the same
 * message. */
const struct kdev_curl_api *kdev_curl_load(struct kdev_err *err);

/* The table when libcurl is loaded and initialised, NULL before the first
 * successful kdev_curl_load (no loading; never blocks). */
const struct kdev_curl_api *kdev_curl_loaded(void);

/* Test hook: the library kdev_curl_load opens instead of libcurl.so.4 (a
 * soname or a path; the string is kept, not copied; NULL: the default). Only
 * effective before the first kdev_curl_load of the process. */
void kdev_curl_set_library(const char *name);

#endif /* KDEV_KUBE_LIBCURL_INTERNAL_H */
