/* NVIDIA driver files as CDI common edits (see driver_files.h). */
#include "nvidia/driver_files.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/file.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* nvcdi pkg/lookup/library.go NewLibraryLocator's search paths. */
static const char *const lib_search[] = {
        "/",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu/nvidia/current",
        "/usr/lib/aarch64-linux-gnu/nvidia/current",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/lib/x86_64-linux-gnu/nvidia/current",
        "/lib/aarch64-linux-gnu/nvidia/current",
};

/* pkg/lookup/path.go defaultPATH */
static const char *const default_path[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                           "/usr/bin",        "/sbin",          "/bin"};

static const char *const binaries[] = {
        "nvidia-smi",           "nvidia-debugdump",       "nvidia-persistenced",
        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-imex",
        "nvidia-imex-ctl",
};

static const char *const explicit_libraries[] = {
        "libEGL.so",     "libGL.so",         "libGLESv1_CM.so",      "libGLESv2.so",
        "libGLX.so",     "libGLdispatch.so", "libOpenCL.so",         "libOpenGL.so",
        "libnvidia-api.so", "libnvidia-egl-xcb.so", "libnvidia-egl-xlib.so",
};

static const char *const ipc_sockets[] = {"/nvidia-persistenced/socket",
                                          "/nvidia-fabricmanager/socket"};

static const char *const mount_options[] = {"ro", "nosuid", "nodev", "rbind", "rprivate"};
static const char *const ipc_options[] = {"nosuid", "nodev", "rbind", "rprivate", "noexec"};

static const char *const hook_names[] = {
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
        "update-application-profile",
        "chmod",
};

static const char *const feature_names[] = {
        "enable-explicit-driver-libraries",   "disable-nvsandboxutils",
        "enable-coherent-annotations",        "disable-multiple-csv-devices",
        "no-additional-gids-for-device-nodes", "disable-ipc-discoverer",
};

/* A growable list of strings. */
struct strs {
        char **v;
        size_t n;
};

static int strs_add(struct strs *s, const char *str)
{
        char *copy = strdup(str);
        char **v = copy ? realloc(s->v, (s->n + 1) * sizeof(*v)) : NULL;
        if (!v) {
                free(copy);
                return -ENOMEM;
        }
        v[s->n++] = copy;
        s->v = v;
        return 0;
}

static void strs_free(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static bool strs_has(const struct strs *s, const char *str)
{
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->v[i], str) == 0)
                        return true;
        return false;
}

static int strs_add_new(struct strs *s, const char *str)
{
        return strs_has(s, str) ? 0 : strs_add(s, str);
}

/* --- names ------------------------------------------------------------------------ */

static int parse_names(const char *list, const char *const *names, size_t n, bool all,
                       unsigned *mask, const char *what, char *msg, size_t size)
{
        *mask = 0;
        const char *p = list ? list : "";
        while (*p) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                while (len > 0 && (*p == ' ' || *p == '\t'))
                        p++, len--;
                while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
                        len--;
                bool found = len == 0;
                if (all && len == 3 && strncmp(p, "all", 3) == 0) {
                        *mask = KDEV_NVIDIA_HOOK_ALL;
                        found = true;
                }
                for (size_t i = 0; !found && i < n; i++) {
                        if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0) {
                                *mask |= 1u << i;
                                found = true;
                        }
                }
                if (!found) {
                        size_t used = (size_t)snprintf(msg, size, "unknown CDI %s: %.*s (expected",
                                                       what, (int)len, p);
                        for (size_t i = 0; i < n && used < size; i++)
                                used += (size_t)snprintf(msg + used, size - used, "%s %s",
                                                         i ? "," : "", names[i]);
                        if (all && used < size)
                                used += (size_t)snprintf(msg + used, size - used, " or all");
                        if (used < size)
                                snprintf(msg + used, size - used, ")");
                        return -EINVAL;
                }
                p = end ? end + 1 : p + len;
        }
        return 0;
}

int kdev_nvidia_cdi_hooks_parse(const char *list, unsigned *mask, char *msg, size_t size)
{
        return parse_names(list, hook_names, N(hook_names), true, mask, "hook", msg, size);
}

int kdev_nvidia_cdi_features_parse(const char *list, unsigned *mask, char *msg, size_t size)
{
        return parse_names(list, feature_names, N(feature_names), false, mask, "feature flag",
                           msg, size);
}

/* --- lookup ----------------------------------------------------------------------- */

/* Strips trailing slashes; "/" and "" become "". Malloc'ed or NULL. */
static char *norm_root(const char *root)
{
        size_t len = root ? strlen(root) : 0;
        while (len > 0 && root[len - 1] == '/')
                len--;
        return strndup(root ? root : "", len);
}

const char *kdev_nvidia_driver_lookup_root(const char *driver_root,
                                           const char *container_driver_root)
{
        struct stat st;
        if (container_driver_root && container_driver_root[0] &&
            stat(container_driver_root, &st) == 0 && S_ISDIR(st.st_mode))
                return container_driver_root;
        return driver_root && driver_root[0] ? driver_root : "/";
}

/* The lookup state: the root as given and as resolved. */
struct look {
        const char *root;      /* normalised */
        char real[PATH_MAX];   /* realpath of the root ("" for "/") */
        struct kdev_err *err;
};

/* <root><path> into |buf|; -ENAMETOOLONG when it does not fit. */
static int under(const struct look *l, char *buf, size_t size, const char *path)
{
        int n = snprintf(buf, size, "%s%s", l->root, path);
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(l->err, ENAMETOOLONG, "path too long: %s%s", l->root, path);
        return 0;
}

/* The container path of host file |file| (under the root): its symlinks
 * resolved when the target stays under the root (nvcdi's symlink locator),
 * else the path itself, with the root stripped. */
static void container_path(const struct look *l, const char *file, char *out, size_t size)
{
        char real[PATH_MAX];
        size_t rl = strlen(l->real);
        if (realpath(file, real) && strncmp(real, l->real, rl) == 0 &&
            (real[rl] == '/' || (rl == 0 && real[0] == '/'))) {
                snprintf(out, size, "%s", real + rl);
                return;
        }
        snprintf(out, size, "%s", file + strlen(l->root));
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

enum kind { ANY_FILE, EXECUTABLE };

/* Appends to |out| (each once) the container paths of the files in
 * <root><dir> whose names match |pattern| (fnmatch; sorted by name, as Go's
 * filepath.Glob), that stat(2) as non-directories (executables: regular with
 * an x bit). At most |max| are added (0: all). Returns the number added or
 * a negative errno. */
static int glob_dir(const struct look *l, const char *dir, const char *pattern, enum kind kind,
                    size_t max, struct strs *out)
{
        char path[PATH_MAX], file[PATH_MAX], cpath[PATH_MAX];
        int rc = under(l, path, sizeof(path), strcmp(dir, "/") == 0 ? "" : dir);
        if (rc < 0)
                return rc;
        DIR *d = opendir(path[0] ? path : "/");
        if (!d)
                return 0;
        struct strs names = {0};
        struct dirent *de;
        while (rc == 0 && (de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    fnmatch(pattern, de->d_name, 0) != 0)
                        continue;
                rc = strs_add(&names, de->d_name);
        }
        closedir(d);
        if (rc == 0 && names.n > 1)
                qsort(names.v, names.n, sizeof(*names.v), cmp_str);
        int added = 0;
        for (size_t i = 0; rc == 0 && i < names.n && (max == 0 || (size_t)added < max); i++) {
                struct stat st;
                if (snprintf(file, sizeof(file), "%s/%s", path, names.v[i]) >= (int)sizeof(file))
                        continue;
                if (stat(file, &st) < 0 || S_ISDIR(st.st_mode))
                        continue;
                if (kind == EXECUTABLE && (!S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0))
                        continue;
                container_path(l, file, cpath, sizeof(cpath));
                if (strs_has(out, cpath))
                        continue;
                rc = strs_add(out, cpath);
                added++;
        }
        strs_free(names.v, names.n);
        if (rc == -ENOMEM)
                return kdev_err_set(l->err, ENOMEM, "out of memory");
        return rc < 0 ? rc : added;
}

/* The directory part of container path |p|. */
static void dir_of(const char *p, char *buf, size_t size)
{
        const char *slash = strrchr(p, '/');
        size_t len = slash && slash != p ? (size_t)(slash - p) : 1;
        snprintf(buf, size, "%.*s", (int)len, p);
}

/* --- ld.so.cache ------------------------------------------------------------------ */

#define LDCACHE_OLD "ld.so-1.7.0"
#define LDCACHE_NEW "glibc-ld.so.cache1.1"
#define LDCACHE_MAX (64u << 20)

static uint32_t le32(const unsigned char *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Appends the existing files named |pattern| among the 64-bit libraries of
 * <root>/etc/ld.so.cache (internal/ldcache/ldcache.go: ELF entries of
 * x86-64, AArch64 or ppc64le; paths under the root) to |out|. */
static int from_ldcache(const struct look *l, const char *pattern, struct strs *out)
{
        char path[PATH_MAX], file[PATH_MAX], cpath[PATH_MAX];
        int rc = under(l, path, sizeof(path), "/etc/ld.so.cache");
        if (rc < 0)
                return rc;
        struct stat st;
        unsigned char *data = NULL;
        size_t size = 0;
        struct kdev_err ignore = {0};
        if (kdev_file_read(path, "ld.so.cache", LDCACHE_MAX, 0, (char **)&data, &size,
                           &ignore) < 0)
                return 0; /* none or unreadable: no libraries from it */
        size_t off = 0;
        if (size >= 16 && memcmp(data, LDCACHE_OLD, strlen(LDCACHE_OLD)) == 0) {
                uint64_t n = le32(data + 12);
                off = 16 + (size_t)(n * 12 > size ? size : n * 12);
                off = (off + 3) & ~(size_t)3;
        }
        /* header: magic 17 + version 3, nlibs, len_strings, 5 words; entries of 24 bytes */
        if (off + 48 <= size && memcmp(data + off, LDCACHE_NEW, strlen(LDCACHE_NEW)) == 0) {
                const unsigned char *h = data + off;
                size_t avail = size - off;
                uint64_t n = le32(h + 20);
                for (uint64_t i = 0; rc == 0 && i < n && 48 + (i + 1) * 24 <= avail; i++) {
                        const unsigned char *e = h + 48 + i * 24;
                        uint32_t flags = le32(e), value = le32(e + 8);
                        uint32_t arch = flags & 0xff00;
                        if ((flags & 0x1) == 0 || (arch != 0x0300 && arch != 0x0a00 &&
                                                   arch != 0x0500))
                                continue;
                        if (value >= avail || !memchr(h + value, '\0', avail - value))
                                continue;
                        const char *lib = (const char *)h + value;
                        const char *base = strrchr(lib, '/');
                        if (lib[0] != '/' || fnmatch(pattern, base ? base + 1 : lib, 0) != 0)
                                continue;
                        if (snprintf(file, sizeof(file), "%s%s", l->root, lib) >=
                                    (int)sizeof(file) ||
                            stat(file, &st) < 0 || S_ISDIR(st.st_mode))
                                continue;
                        container_path(l, file, cpath, sizeof(cpath));
                        rc = strs_add_new(out, cpath);
                }
        }
        free(data);
        return rc == -ENOMEM ? kdev_err_set(l->err, ENOMEM, "out of memory") : rc;
}

/* --- the driver's files ------------------------------------------------------------ */

/* The library directories: those of lib*.so.<version> (root.go updateInfo). */
static int find_lib_dirs(const struct look *l, const char *version, struct strs *dirs)
{
        char pattern[160], dir[PATH_MAX];
        snprintf(pattern, sizeof(pattern), "lib*.so.%s", version);
        struct strs libs = {0};
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < N(lib_search); i++)
                rc = glob_dir(l, lib_search[i], pattern, ANY_FILE, 0, &libs);
        if (rc >= 0 && libs.n == 0)
                rc = from_ldcache(l, pattern, &libs);
        for (size_t i = 0; rc >= 0 && i < libs.n; i++) {
                dir_of(libs.v[i], dir, sizeof(dir));
                if (strs_add_new(dirs, dir) < 0)
                        rc = kdev_err_set(l->err, ENOMEM, "out of memory");
        }
        strs_free(libs.v, libs.n);
        return rc < 0 ? rc : 0;
}

static int find_libraries(const struct look *l, const char *version, unsigned features,
                          const struct strs *dirs, struct strs *out)
{
        char pattern[160], sub[PATH_MAX];
        snprintf(pattern, sizeof(pattern), "*.so.%s", version);
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < dirs->n; i++)
                rc = glob_dir(l, dirs->v[i], pattern, ANY_FILE, 0, out);
        for (size_t i = 0; rc >= 0 && i < dirs->n; i++) {
                snprintf(sub, sizeof(sub), "%s/vdpau", strcmp(dirs->v[i], "/") ? dirs->v[i] : "");
                rc = glob_dir(l, sub, pattern, ANY_FILE, 0, out);
        }
        for (size_t i = 0; rc >= 0 && i < dirs->n; i++)
                rc = glob_dir(l, dirs->v[i], "libnvidia-nvvm70.so.*", ANY_FILE, 0, out);
        for (size_t k = 0; rc >= 0 && (features & KDEV_NVIDIA_CDI_EXPLICIT_DRIVER_LIBRARIES) &&
                           k < N(explicit_libraries);
             k++)
                for (size_t i = 0; rc >= 0 && i < dirs->n; i++)
                        rc = glob_dir(l, dirs->v[i], explicit_libraries[k], ANY_FILE, 0, out);
        return rc < 0 ? rc : 0;
}

/* One file |rel| (may be a glob) in each of |dirs|, all matches or the first. */
static int find_in(const struct look *l, const char *const *dirs, size_t n_dirs,
                   const char *rel, enum kind kind, bool first, struct strs *out)
{
        char dir[PATH_MAX];
        const char *slash = strrchr(rel, '/');
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < n_dirs; i++) {
                snprintf(dir, sizeof(dir), "%s%.*s", strcmp(dirs[i], "/") ? dirs[i] : "",
                         slash ? (int)(slash - rel) : 0, rel);
                if (!dir[0])
                        snprintf(dir, sizeof(dir), "/");
                rc = glob_dir(l, dir, slash ? slash + 1 : rel, kind, first ? 1 : 0, out);
                if (first && rc > 0)
                        break;
        }
        return rc < 0 ? rc : 0;
}

static int find_ipc(const struct look *l, struct strs *out)
{
        static const char *const runs[] = {"/run", "/var/run"};
        static const char *const slash[] = {"/"};
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < N(ipc_sockets); i++)
                rc = find_in(l, runs, N(runs), ipc_sockets[i], ANY_FILE, true, out);
        if (rc >= 0)
                rc = find_in(l, slash, 1, "/tmp/nvidia-mps", ANY_FILE, true, out);
        return rc;
}

static int find_firmware(const struct look *l, const char *version, struct strs *out)
{
        char custom[PATH_MAX] = "", rel[256], d[4][PATH_MAX];
        const char *dirs[5];
        size_t n = 0;
        struct kdev_err ignore = {0};
        char *text = NULL;
        size_t len = 0;
        if (kdev_file_read("/sys/module/firmware_class/parameters/path", NULL, PATH_MAX,
                           KDEV_FILE_TEXT, &text, &len, &ignore) >= 0 && text) {
                while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
                        text[--len] = '\0';
                if (text[0] == '/')
                        snprintf(custom, sizeof(custom), "%s", text);
        }
        free(text);
        if (custom[0])
                dirs[n++] = custom;
        struct utsname u;
        const char *release = uname(&u) == 0 ? u.release : "";
        snprintf(d[0], sizeof(d[0]), "/lib/firmware/updates/%s", release);
        snprintf(d[1], sizeof(d[1]), "/lib/firmware/updates");
        snprintf(d[2], sizeof(d[2]), "/lib/firmware/%s", release);
        snprintf(d[3], sizeof(d[3]), "/lib/firmware");
        for (size_t i = 0; i < 4; i++)
                dirs[n++] = d[i];
        snprintf(rel, sizeof(rel), "/nvidia/%s/gsp*.bin", version);
        return find_in(l, dirs, n, rel, ANY_FILE, false, out);
}

static int find_binaries(const struct look *l, struct strs *out)
{
        struct strs dirs = {0};
        const char *env = getenv("PATH");
        int rc = 0;
        for (const char *p = env ? env : ""; rc == 0 && *p;) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                char d[PATH_MAX];
                if (len > 0 && len < sizeof(d) && p[0] == '/') {
                        memcpy(d, p, len);
                        d[len] = '\0';
                        rc = strs_add_new(&dirs, d);
                }
                p = end ? end + 1 : p + len;
        }
        for (size_t i = 0; rc == 0 && i < N(default_path); i++)
                rc = strs_add_new(&dirs, default_path[i]);
        if (rc < 0) {
                strs_free(dirs.v, dirs.n);
                return kdev_err_set(l->err, ENOMEM, "out of memory");
        }
        for (size_t b = 0; rc >= 0 && b < N(binaries); b++) {
                char rel[64];
                snprintf(rel, sizeof(rel), "/%s", binaries[b]);
                rc = find_in(l, (const char *const *)dirs.v, dirs.n, rel, EXECUTABLE, true, out);
        }
        strs_free(dirs.v, dirs.n);
        return rc;
}

int kdev_nvidia_driver_files_find(const struct kdev_nvidia_driver_files_options *opts,
                                  struct kdev_nvidia_driver_files *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        out->driver_root = norm_root(opts->driver_root);
        const char *lookup = opts->lookup_root && opts->lookup_root[0] ? opts->lookup_root
                                                                        : opts->driver_root;
        char *root = norm_root(lookup);
        const char *version = opts->driver_version ? opts->driver_version : "";
        out->version = strdup(version);
        if (!out->driver_root || !root || !out->version) {
                free(root);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        struct look l = {.root = root, .err = err};
        if (!realpath(root[0] ? root : "/", l.real))
                snprintf(l.real, sizeof(l.real), "%s", root);
        if (strcmp(l.real, "/") == 0)
                l.real[0] = '\0';
        struct strs dirs = {0}, libs = {0}, fw = {0}, bins = {0}, ipc = {0};
        int rc = 0;
        /* a version with '/' or a glob character would escape the patterns */
        if (version[0] && !strpbrk(version, "/*?[\\"))
                rc = find_lib_dirs(&l, version, &dirs);
        if (rc == 0 && dirs.n > 0)
                rc = find_libraries(&l, version, opts->features, &dirs, &libs);
        if (rc == 0 && libs.n > 0) {
                if (!(opts->features & KDEV_NVIDIA_CDI_DISABLE_IPC))
                        rc = find_ipc(&l, &ipc);
                if (rc == 0)
                        rc = find_firmware(&l, version, &fw);
                if (rc == 0)
                        rc = find_binaries(&l, &bins);
                if (rc == 0 && opts->hook_path && opts->hook_path[0] == '/') {
                        struct stat st;
                        out->hook_visible = stat(opts->hook_path, &st) == 0 &&
                                            S_ISREG(st.st_mode) &&
                                            access(opts->hook_path, X_OK) == 0;
                        out->hook_path = strdup(opts->hook_path);
                        if (!out->hook_path)
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        free(root);
        if (libs.n == 0) { /* nothing of this driver: no directories either */
                strs_free(dirs.v, dirs.n);
                dirs = (struct strs){0};
        }
        out->disabled_hooks = opts->disabled_hooks | KDEV_NVIDIA_HOOK_CHMOD;
        out->lib_dirs = dirs.v;
        out->n_lib_dirs = dirs.n;
        out->libraries = libs.v;
        out->n_libraries = libs.n;
        out->firmware = fw.v;
        out->n_firmware = fw.n;
        out->binaries = bins.v;
        out->n_binaries = bins.n;
        out->ipc = ipc.v;
        out->n_ipc = ipc.n;
        return rc < 0 ? rc : (int)libs.n;
}

void kdev_nvidia_driver_files_clear(struct kdev_nvidia_driver_files *f)
{
        if (!f)
                return;
        free(f->driver_root);
        free(f->version);
        strs_free(f->lib_dirs, f->n_lib_dirs);
        strs_free(f->libraries, f->n_libraries);
        strs_free(f->firmware, f->n_firmware);
        strs_free(f->binaries, f->n_binaries);
        strs_free(f->ipc, f->n_ipc);
        free(f->hook_path);
        memset(f, 0, sizeof(*f));
}

/* --- edits ------------------------------------------------------------------------ */

static int add_mounts(const char *driver_root, char *const *paths, size_t n,
                      const char *const *options, size_t n_options,
                      struct kdev_container_edits *e, struct kdev_err *err)
{
        char host[PATH_MAX];
        for (size_t i = 0; i < n; i++) {
                int r = snprintf(host, sizeof(host), "%s%s", driver_root, paths[i]);
                if (r < 0 || (size_t)r >= sizeof(host))
                        return kdev_err_set(err, ENAMETOOLONG, "path too long: %s%s",
                                            driver_root, paths[i]);
                int rc = kdev_edits_add_mount(e, host, paths[i], options, n_options, err);
                if (rc < 0)
                        return rc;
        }
        return (int)n;
}

int kdev_nvidia_hook_add(const char *hook_path, unsigned disabled, unsigned hook,
                         const char *const *args, size_t n_args,
                         struct kdev_container_edits *e, struct kdev_err *err)
{
        if (!hook_path || !hook_path[0] || (disabled & hook))
                return 0;
        if (hook == KDEV_NVIDIA_HOOK_CREATE_SYMLINKS && n_args == 0)
                return 0; /* nvcdi: create-symlinks needs links */
        const char *name = NULL;
        for (size_t i = 0; i < N(hook_names); i++)
                if (hook == 1u << i)
                        name = hook_names[i];
        if (!name)
                return kdev_err_set(err, EINVAL, "internal error: unknown hook");
        const char *slash = strrchr(hook_path, '/');
        const char *base = slash ? slash + 1 : hook_path;
        struct strs argv = {0};
        int rc = strs_add(&argv, base);
        if (rc == 0 && strcmp(base, "nvidia-ctk") == 0)
                rc = strs_add(&argv, "hook");
        if (rc == 0)
                rc = strs_add(&argv, name);
        const char *flag = hook == KDEV_NVIDIA_HOOK_CREATE_SYMLINKS ? "--link"
                           : hook == KDEV_NVIDIA_HOOK_UPDATE_LDCACHE ? "--folder"
                                                                     : NULL;
        for (size_t i = 0; rc == 0 && i < n_args; i++) {
                if (flag)
                        rc = strs_add(&argv, flag);
                if (rc == 0)
                        rc = strs_add(&argv, args[i]);
        }
        if (rc < 0) {
                strs_free(argv.v, argv.n);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        static const char *const env[] = {"NVIDIA_CTK_DEBUG=false"};
        struct kdev_edit_hook h = {.hook_name = "createContainer",
                                   .path = (char *)hook_path,
                                   .args = argv.v,
                                   .n_args = argv.n,
                                   .env = (char **)env,
                                   .n_env = 1};
        rc = kdev_edits_add_hook(e, &h, err);
        strs_free(argv.v, argv.n);
        return rc;
}

/* nvcdi's isDriverLibrary: |name| is <lib>.<version>. */
static bool is_driver_library(const char *name, const char *lib, const char *version)
{
        size_t n = strlen(lib);
        return strncmp(name, lib, n) == 0 && name[n] == '.' && strcmp(name + n + 1, version) == 0;
}

/* The create-symlinks links "<target>::<dir>/<link>" (symlinks.go getLinksForMount). */
static int symlink_args(const struct kdev_nvidia_driver_files *f, struct strs *args)
{
        char dir[PATH_MAX], arg[2 * PATH_MAX + 8];
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < f->n_libraries; i++) {
                const char *p = f->libraries[i];
                const char *name = strrchr(p, '/') + 1;
                dir_of(p, dir, sizeof(dir));
                const char *d = strcmp(dir, "/") ? dir : "";
                if (is_driver_library(name, "libcuda.so", f->version))
                        snprintf(arg, sizeof(arg), "libcuda.so.1::%s/libcuda.so", d);
                else if (is_driver_library(name, "libGLX_nvidia.so", f->version))
                        snprintf(arg, sizeof(arg), "%s::%s/libGLX_indirect.so.0", name, d);
                else if (is_driver_library(name, "libnvidia-opticalflow.so", f->version))
                        snprintf(arg, sizeof(arg),
                                 "libnvidia-opticalflow.so.1::%s/libnvidia-opticalflow.so", d);
                else
                        continue;
                rc = strs_add_new(args, arg);
        }
        return rc;
}

/* ldconfig.go isLibName: lib?*.so, lib?*.so.<anything> */
static bool is_lib_name(const char *name)
{
        if (fnmatch("lib?*.so*", name, 0) != 0)
                return false;
        const char *last = NULL;
        for (const char *p = strstr(name, ".so"); p; p = strstr(p + 1, ".so"))
                last = p;
        return last && (last[3] == '\0' || last[3] == '.');
}

int kdev_nvidia_driver_files_edits(const struct kdev_nvidia_driver_files *f,
                                   struct kdev_container_edits *e, struct kdev_err *err)
{
        const char *root = f->driver_root ? f->driver_root : "";
        int total = 0, rc = 0;
        if (f->n_libraries == 0)
                return 0;
        /* NVIDIA_CTK_LIBCUDA_DIR: the library directories */
        size_t len = 1;
        for (size_t i = 0; i < f->n_lib_dirs; i++)
                len += strlen(f->lib_dirs[i]) + 1;
        char *joined = calloc(1, len);
        if (!joined)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < f->n_lib_dirs; i++) {
                if (i)
                        strcat(joined, ":");
                strcat(joined, f->lib_dirs[i]);
        }
        rc = kdev_edits_set_env(e, "NVIDIA_CTK_LIBCUDA_DIR", joined, err);
        free(joined);
        if (rc < 0)
                return rc;
        struct {
                char *const *v;
                size_t n;
                const char *const *opts;
                size_t n_opts;
        } lists[] = {
                {f->libraries, f->n_libraries, mount_options, N(mount_options)},
                {f->ipc, f->n_ipc, ipc_options, N(ipc_options)},
                {f->firmware, f->n_firmware, mount_options, N(mount_options)},
                {f->binaries, f->n_binaries, mount_options, N(mount_options)},
        };
        for (size_t i = 0; i < N(lists); i++) {
                rc = add_mounts(root, lists[i].v, lists[i].n, lists[i].opts, lists[i].n_opts, e,
                                err);
                if (rc < 0)
                        return rc;
                total += rc;
        }
        if (!f->hook_path)
                return total;

        struct strs links = {0}, folders = {0};
        char dir[PATH_MAX], compat[192];
        rc = symlink_args(f, &links);
        for (size_t i = 0; rc == 0 && i < f->n_libraries; i++) {
                if (!is_lib_name(strrchr(f->libraries[i], '/') + 1))
                        continue;
                dir_of(f->libraries[i], dir, sizeof(dir));
                rc = strs_add_new(&folders, dir);
        }
        if (rc < 0)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        snprintf(compat, sizeof(compat), "--host-driver-version=%s", f->version);
        const char *compat_args[] = {compat};
        unsigned off = f->disabled_hooks;
        if (rc == 0)
                rc = kdev_nvidia_hook_add(f->hook_path, off, KDEV_NVIDIA_HOOK_CREATE_SYMLINKS,
                                          (const char *const *)links.v, links.n, e, err);
        if (rc == 0)
                rc = kdev_nvidia_hook_add(f->hook_path, off, KDEV_NVIDIA_HOOK_ENABLE_CUDA_COMPAT,
                                          compat_args, 1, e, err);
        if (rc == 0 && folders.n > 0)
                rc = kdev_nvidia_hook_add(f->hook_path, off, KDEV_NVIDIA_HOOK_UPDATE_LDCACHE,
                                          (const char *const *)folders.v, folders.n, e, err);
        if (rc == 0)
                rc = kdev_nvidia_hook_add(f->hook_path, off,
                                          KDEV_NVIDIA_HOOK_DISABLE_DEVICE_NODE_MODIFICATION,
                                          NULL, 0, e, err);
        if (rc == 0)
                rc = kdev_nvidia_hook_add(f->hook_path, off,
                                          KDEV_NVIDIA_HOOK_UPDATE_APPLICATION_PROFILE, NULL, 0,
                                          e, err);
        strs_free(links.v, links.n);
        strs_free(folders.v, folders.n);
        return rc < 0 ? rc : total;
}
