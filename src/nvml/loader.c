/* NVML loader: see loader.h. */
#include "nvml/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct sym_spec {
        const char *field;
        unsigned cap;
        const char *names[3];
        size_t offset;
};

static const struct sym_spec specs[] = {
#define KDEV_NVML_X_SPEC(f, c, n0, n1, n2) \
        { #f, (c), { (n0), (n1), (n2) }, offsetof(struct kdev_nvml_api, f) },
        KDEV_NVML_SYMBOLS(KDEV_NVML_X_SPEC)
#undef KDEV_NVML_X_SPEC
};

#define N_SPECS (sizeof(specs) / sizeof(specs[0]))

struct kdev_nvml {
        struct kdev_nvml_api api;
        unsigned caps;
        void *dl;
        char path[PATH_MAX];
        const char *resolved[N_SPECS];
        pthread_mutex_t lock;
        unsigned refs;
};

static const char *const driver_root_dirs[] = {
        "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
};

static void set_slot(struct kdev_nvml_api *api, size_t offset, void *p)
{
        /* POSIX guarantees that function pointers and void * convert through
         * dlsym; copy the representation into the typed member. */
        memcpy((char *)api + offset, &p, sizeof(p));
}

int kdev_nvml_find_library(const char *root, char *buf, size_t size, struct kdev_err *err)
{
        char searched[512] = "";
        size_t used = 0;
        size_t rlen = strlen(root);
        while (rlen > 1 && root[rlen - 1] == '/')
                rlen--;
        for (size_t i = 0; i < sizeof(driver_root_dirs) / sizeof(driver_root_dirs[0]); i++) {
                int n = snprintf(buf, size, "%.*s%s/%s", (int)rlen, root, driver_root_dirs[i],
                                 KDEV_NVML_LIBRARY);
                if (n < 0 || (size_t)n >= size)
                        return kdev_err_set(err, ENAMETOOLONG, "driver root %s: path too long",
                                            root);
                struct stat st;
                if (stat(buf, &st) == 0 && S_ISREG(st.st_mode))
                        return 0;
                n = snprintf(searched + used, sizeof(searched) - used, "%s%s",
                             i ? ", " : "", driver_root_dirs[i]);
                if (n > 0 && (size_t)n < sizeof(searched) - used)
                        used += (size_t)n;
        }
        return kdev_err_set(err, EOPNOTSUPP,
                            "NVML library %s not found under driver root %s (searched %s)",
                            KDEV_NVML_LIBRARY, root, searched);
}

static int resolve(struct kdev_nvml *lib, struct kdev_err *err)
{
        unsigned missing_caps = 0;
        for (size_t i = 0; i < N_SPECS; i++) {
                const struct sym_spec *s = &specs[i];
                void *p = NULL;
                char last_error[512] = "";
                for (size_t k = 0; k < 3 && s->names[k]; k++) {
                        dlerror();
                        p = dlsym(lib->dl, s->names[k]);
                        if (p) {
                                lib->resolved[i] = s->names[k];
                                break;
                        }
                        const char *e = dlerror();
                        snprintf(last_error, sizeof(last_error), "%s",
                                 e ? e : "symbol is NULL");
                }
                if (p) {
                        set_slot(&lib->api, s->offset, p);
                        continue;
                }
                if (s->cap != KDEV_NVML_REQUIRED) {
                        missing_caps |= s->cap;
                        continue;
                }
                char alts[256] = "";
                if (s->names[1])
                        snprintf(alts, sizeof(alts), " (or %s%s%s)", s->names[1],
                                 s->names[2] ? " or " : "", s->names[2] ? s->names[2] : "");
                return kdev_err_set(err, ENOSYS,
                                    "NVML library %s: missing required symbol %s%s: %s",
                                    lib->path, s->names[0], alts, last_error);
        }
        lib->caps = (KDEV_NVML_CAP_MIG | KDEV_NVML_CAP_CUDA_VERSION | KDEV_NVML_CAP_ARCH |
                     KDEV_NVML_CAP_ROW_REMAP | KDEV_NVML_CAP_BRAND | KDEV_NVML_CAP_USAGE |
                     KDEV_NVML_CAP_PROC_UTIL | KDEV_NVML_CAP_MIG_CONFIG) & ~missing_caps;
        for (size_t i = 0; i < N_SPECS; i++) {
                if (specs[i].cap & missing_caps) {
                        set_slot(&lib->api, specs[i].offset, NULL);
                        lib->resolved[i] = NULL;
                }
        }
        return 0;
}

int kdev_nvml_open(const struct kdev_nvml_options *opts, struct kdev_nvml **out,
                   struct kdev_err *err)
{
        *out = NULL;
        struct kdev_nvml *lib = calloc(1, sizeof(*lib));
        if (!lib)
                return kdev_err_set(err, ENOMEM, "out of memory");
        char want[PATH_MAX];
        bool explicit_path = false;
        const char *root = opts ? opts->driver_root : NULL;
        int rc;
        if (opts && opts->library_path && opts->library_path[0]) {
                snprintf(want, sizeof(want), "%s", opts->library_path);
                explicit_path = true;
        } else if (root && root[0] && strcmp(root, "/") != 0) {
                rc = kdev_nvml_find_library(root, want, sizeof(want), err);
                if (rc < 0) {
                        free(lib);
                        return rc;
                }
                explicit_path = true;
        } else {
                snprintf(want, sizeof(want), "%s", KDEV_NVML_LIBRARY);
        }

        dlerror();
        lib->dl = dlopen(want, RTLD_NOW | RTLD_LOCAL);
        if (!lib->dl) {
                const char *e = dlerror();
                struct stat st;
                if (explicit_path && stat(want, &st) == 0)
                        rc = kdev_err_set(err, ELIBBAD, "cannot load NVML library %s: %s", want,
                                          e ? e : "unknown error");
                else
                        rc = kdev_err_set(err, EOPNOTSUPP, "NVML library %s not found: %s", want,
                                          e ? e : "unknown error");
                free(lib);
                return rc;
        }
        struct link_map *lm = NULL;
        if (dlinfo(lib->dl, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
                snprintf(lib->path, sizeof(lib->path), "%s", lm->l_name);
        else
                snprintf(lib->path, sizeof(lib->path), "%s", want);

        rc = resolve(lib, err);
        if (rc < 0) {
                dlclose(lib->dl);
                free(lib);
                return rc;
        }
        pthread_mutex_init(&lib->lock, NULL);
        *out = lib;
        return 0;
}

void kdev_nvml_close(struct kdev_nvml *lib)
{
        if (!lib)
                return;
        if (lib->refs > 0)
                lib->api.nvmlShutdown();
        dlclose(lib->dl);
        pthread_mutex_destroy(&lib->lock);
        free(lib);
}

const struct kdev_nvml_api *kdev_nvml_api(const struct kdev_nvml *lib)
{
        return &lib->api;
}

unsigned kdev_nvml_caps(const struct kdev_nvml *lib)
{
        return lib->caps;
}

const char *kdev_nvml_path(const struct kdev_nvml *lib)
{
        return lib->path;
}

int kdev_nvml_init(struct kdev_nvml *lib, struct kdev_err *err)
{
        int rc = 0;
        pthread_mutex_lock(&lib->lock);
        if (lib->refs == 0) {
                nvmlReturn_t r = lib->api.nvmlInit();
                if (r != NVML_SUCCESS)
                        rc = kdev_nvml_fail(lib, r, err, "nvml init failed");
        }
        if (rc == 0)
                lib->refs++;
        pthread_mutex_unlock(&lib->lock);
        return rc;
}

int kdev_nvml_shutdown(struct kdev_nvml *lib, struct kdev_err *err)
{
        int rc = 0;
        pthread_mutex_lock(&lib->lock);
        if (lib->refs == 0) {
                rc = kdev_err_set(err, EALREADY, "nvml shutdown without a matching init");
        } else if (--lib->refs == 0) {
                nvmlReturn_t r = lib->api.nvmlShutdown();
                if (r != NVML_SUCCESS)
                        rc = kdev_nvml_fail(lib, r, err, "nvml shutdown failed");
        }
        pthread_mutex_unlock(&lib->lock);
        return rc;
}

unsigned kdev_nvml_refs(struct kdev_nvml *lib)
{
        pthread_mutex_lock(&lib->lock);
        unsigned n = lib->refs;
        pthread_mutex_unlock(&lib->lock);
        return n;
}

const char *kdev_nvml_strerror(const struct kdev_nvml *lib, nvmlReturn_t r)
{
        if (lib && lib->api.nvmlErrorString) {
                const char *s = lib->api.nvmlErrorString(r);
                if (s)
                        return s;
        }
        return kdev_nvml_builtin_strerror(r);
}

int kdev_nvml_errno(nvmlReturn_t r)
{
        switch (r) {
        case NVML_SUCCESS: return 0;
        case NVML_ERROR_UNINITIALIZED: return -EBADF;
        case NVML_ERROR_INVALID_ARGUMENT: return -EINVAL;
        case NVML_ERROR_NOT_SUPPORTED: return -EOPNOTSUPP;
        case NVML_ERROR_NO_PERMISSION: return -EACCES;
        case NVML_ERROR_ALREADY_INITIALIZED: return -EALREADY;
        case NVML_ERROR_NOT_FOUND: return -ENOENT;
        case NVML_ERROR_INSUFFICIENT_SIZE: return -ENOBUFS;
        case NVML_ERROR_DRIVER_NOT_LOADED: return -ENODEV;
        case NVML_ERROR_TIMEOUT: return -ETIMEDOUT;
        case NVML_ERROR_LIBRARY_NOT_FOUND: return -ELIBACC;
        case NVML_ERROR_FUNCTION_NOT_FOUND: return -ENOSYS;
        case NVML_ERROR_GPU_IS_LOST: return -ENXIO;
        case NVML_ERROR_RESET_REQUIRED: return -ESTALE;
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return -ELIBBAD;
        case NVML_ERROR_IN_USE: return -EBUSY;
        case NVML_ERROR_MEMORY: return -ENOMEM;
        case NVML_ERROR_NO_DATA: return -ENODATA;
        default: return -EIO;
        }
}

int kdev_nvml_fail(const struct kdev_nvml *lib, nvmlReturn_t r, struct kdev_err *err,
                   const char *fmt, ...)
{
        if (r == NVML_SUCCESS)
                return 0;
        int code = kdev_nvml_errno(r);
        if (err) {
                char ctx[512];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(ctx, sizeof(ctx), fmt, ap);
                va_end(ap);
                kdev_err_set(err, -code, "%s: %s", ctx, kdev_nvml_strerror(lib, r));
        }
        return code;
}

size_t kdev_nvml_symbol_count(void)
{
        return N_SPECS;
}

int kdev_nvml_symbol_info(const struct kdev_nvml *lib, size_t i, struct kdev_nvml_symbol *out)
{
        if (i >= N_SPECS)
                return -ERANGE;
        out->field = specs[i].field;
        for (size_t k = 0; k < 3; k++)
                out->names[k] = specs[i].names[k];
        out->cap = specs[i].cap;
        out->resolved = lib ? lib->resolved[i] : NULL;
        return 0;
}
