/* NVIDIA driver files as CDI common edits (see driver_files.h). */
#include "nvidia/driver_files.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const lib_dirs[] = {
        "/usr/lib64",    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/lib64",        "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
};

static const char *const bin_dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                       "/usr/bin",        "/sbin",          "/bin"};

static const char *const binaries[] = {
        "nvidia-smi",           "nvidia-debugdump",       "nvidia-persistenced",
        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-imex",
        "nvidia-imex-ctl",
};

static const char *const ipc_paths[] = {"/var/run/nvidia-persistenced/socket",
                                        "/var/run/nvidia-fabricmanager/socket",
                                        "/tmp/nvidia-mps"};

static const char *const mount_options[] = {"ro", "nosuid", "nodev", "rbind", "rprivate"};

#define N(a) (sizeof(a) / sizeof((a)[0]))

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

/* <root><path> into |buf|; -ENAMETOOLONG when it does not fit. */
static int under(char *buf, size_t size, const char *root, const char *path, struct kdev_err *err)
{
        int n = snprintf(buf, size, "%s%s", root, path);
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENAMETOOLONG, "path too long: %s%s", root, path);
        return 0;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Identities (device, inode) of the directories already listed. */
struct seen {
        dev_t dev[2 * N(lib_dirs) + N(bin_dirs)];
        ino_t ino[2 * N(lib_dirs) + N(bin_dirs)];
        size_t n;
};

/* Whether directory |path| exists and was not seen yet (then records it). */
static bool new_dir(struct seen *s, const char *path)
{
        struct stat st;
        if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return false;
        for (size_t i = 0; i < s->n; i++)
                if (s->dev[i] == st.st_dev && s->ino[i] == st.st_ino)
                        return false;
        if (s->n < N(s->dev)) {
                s->dev[s->n] = st.st_dev;
                s->ino[s->n] = st.st_ino;
                s->n++;
        }
        return true;
}

/* Whether |name| starts with |prefix| and ends with |suffix| (not overlapping). */
static bool matches(const char *name, const char *prefix, const char *suffix)
{
        size_t n = strlen(name), p = strlen(prefix), s = strlen(suffix);
        return n > p + s && strncmp(name, prefix, p) == 0 && strcmp(name + n - s, suffix) == 0;
}

/* Appends to |out| the container paths <dir>/<name> of the regular files in
 * <root><dir> named <prefix>*<suffix>, sorted by name. */
static int list_dir(const char *root, const char *dir, const char *prefix, const char *suffix,
                    struct strs *out, struct kdev_err *err)
{
        char path[PATH_MAX], file[PATH_MAX];
        int rc = under(path, sizeof(path), root, dir, err);
        if (rc < 0)
                return rc;
        DIR *d = opendir(path);
        if (!d)
                return 0;
        struct strs names = {0};
        struct dirent *de;
        while (rc == 0 && (de = readdir(d)) != NULL) {
                struct stat st;
                if (!matches(de->d_name, prefix, suffix))
                        continue;
                if (snprintf(file, sizeof(file), "%s/%s", path, de->d_name) >= (int)sizeof(file))
                        continue;
                if (stat(file, &st) == 0 && S_ISREG(st.st_mode))
                        rc = strs_add(&names, de->d_name);
        }
        closedir(d);
        if (rc == 0 && names.n > 1)
                qsort(names.v, names.n, sizeof(*names.v), cmp_str);
        for (size_t i = 0; rc == 0 && i < names.n; i++) {
                if (snprintf(file, sizeof(file), "%s/%s", dir, names.v[i]) >= (int)sizeof(file))
                        rc = kdev_err_set(err, ENAMETOOLONG, "path too long: %s/%s", dir,
                                          names.v[i]);
                else
                        rc = strs_add(out, file);
        }
        strs_free(names.v, names.n);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return rc;
}

static int find_libraries(const char *root, const char *version, struct strs *out,
                          struct kdev_err *err)
{
        char suffix[128], path[PATH_MAX], sub[PATH_MAX];
        struct seen seen = {0};
        if (snprintf(suffix, sizeof(suffix), ".so.%s", version) >= (int)sizeof(suffix))
                return 0; /* no library has such a name */
        for (size_t i = 0; i < N(lib_dirs); i++) {
                int rc = under(path, sizeof(path), root, lib_dirs[i], err);
                if (rc < 0)
                        return rc;
                if (!new_dir(&seen, path))
                        continue;
                rc = list_dir(root, lib_dirs[i], "lib", suffix, out, err);
                if (rc < 0)
                        return rc;
                snprintf(sub, sizeof(sub), "%s/vdpau", lib_dirs[i]);
                rc = under(path, sizeof(path), root, sub, err);
                if (rc == 0 && new_dir(&seen, path))
                        rc = list_dir(root, sub, "lib", suffix, out, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int find_binaries(const char *root, struct strs *out, struct kdev_err *err)
{
        char path[PATH_MAX], file[PATH_MAX];
        const char *dirs[N(bin_dirs)];
        size_t n_dirs = 0;
        struct seen seen = {0};
        for (size_t i = 0; i < N(bin_dirs); i++) {
                int rc = under(path, sizeof(path), root, bin_dirs[i], err);
                if (rc < 0)
                        return rc;
                if (new_dir(&seen, path))
                        dirs[n_dirs++] = bin_dirs[i];
        }
        for (size_t b = 0; b < N(binaries); b++) {
                for (size_t i = 0; i < n_dirs; i++) {
                        struct stat st;
                        snprintf(file, sizeof(file), "%s/%s", dirs[i], binaries[b]);
                        int rc = under(path, sizeof(path), root, file, err);
                        if (rc < 0)
                                return rc;
                        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
                            (st.st_mode & 0111) == 0)
                                continue;
                        if (strs_add(out, file) < 0)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
        }
        return 0;
}

static int find_ipc(const char *root, struct strs *out, struct kdev_err *err)
{
        char path[PATH_MAX];
        for (size_t i = 0; i < N(ipc_paths); i++) {
                struct stat st;
                int rc = under(path, sizeof(path), root, ipc_paths[i], err);
                if (rc < 0)
                        return rc;
                if (stat(path, &st) == 0 && strs_add(out, ipc_paths[i]) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

int kdev_nvidia_driver_files_find(const struct kdev_nvidia_driver_files_options *opts,
                                  struct kdev_nvidia_driver_files *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        out->driver_root = norm_root(opts->driver_root);
        const char *lookup = opts->lookup_root && opts->lookup_root[0] ? opts->lookup_root
                                                                        : opts->driver_root;
        char *root = norm_root(lookup);
        if (!out->driver_root || !root) {
                free(root);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        const char *version = opts->driver_version ? opts->driver_version : "";
        struct strs libs = {0}, fw = {0}, bins = {0}, ipc = {0};
        int rc = 0;
        /* a version with '/' would escape the listed directories */
        if (version[0] && !strchr(version, '/'))
                rc = find_libraries(root, version, &libs, err);
        if (rc == 0 && libs.n > 0) {
                char dir[PATH_MAX];
                snprintf(dir, sizeof(dir), "/lib/firmware/nvidia/%s", version);
                rc = list_dir(root, dir, "gsp", ".bin", &fw, err);
                if (rc == 0)
                        rc = find_binaries(root, &bins, err);
                if (rc == 0)
                        rc = find_ipc(root, &ipc, err);
                struct stat st;
                if (rc == 0 && opts->hook_path && opts->hook_path[0] == '/' &&
                    stat(opts->hook_path, &st) == 0 && S_ISREG(st.st_mode) &&
                    access(opts->hook_path, X_OK) == 0) {
                        out->hook_path = strdup(opts->hook_path);
                        if (!out->hook_path)
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        free(root);
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
        strs_free(f->libraries, f->n_libraries);
        strs_free(f->firmware, f->n_firmware);
        strs_free(f->binaries, f->n_binaries);
        strs_free(f->ipc, f->n_ipc);
        free(f->hook_path);
        memset(f, 0, sizeof(*f));
}

static int add_mounts(const char *driver_root, char *const *paths, size_t n,
                      struct kdev_container_edits *e, struct kdev_err *err)
{
        char host[PATH_MAX];
        for (size_t i = 0; i < n; i++) {
                int rc = under(host, sizeof(host), driver_root, paths[i], err);
                if (rc < 0)
                        return rc;
                rc = kdev_edits_add_mount(e, host, paths[i], mount_options, N(mount_options),
                                          err);
                if (rc < 0)
                        return rc;
        }
        return (int)n;
}

/* The directory part of container path |p| (it has a '/' after the first). */
static void dir_of(const char *p, char *buf, size_t size)
{
        const char *slash = strrchr(p, '/');
        size_t len = slash && slash != p ? (size_t)(slash - p) : 1;
        snprintf(buf, size, "%.*s", (int)len, p);
}

/* Adds a hook running "<base> [hook] <name> <args...>". */
static int add_hook(const char *hook_path, const char *name, const struct strs *args,
                    struct kdev_container_edits *e, struct kdev_err *err)
{
        const char *slash = strrchr(hook_path, '/');
        const char *base = slash ? slash + 1 : hook_path;
        struct strs argv = {0};
        int rc = strs_add(&argv, base);
        if (rc == 0 && strcmp(base, "nvidia-ctk") == 0)
                rc = strs_add(&argv, "hook");
        if (rc == 0)
                rc = strs_add(&argv, name);
        for (size_t i = 0; rc == 0 && i < args->n; i++)
                rc = strs_add(&argv, args->v[i]);
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

/* The create-symlinks links "<target>::<dir>/<link>" for the libraries. */
static int symlink_args(const struct kdev_nvidia_driver_files *f, struct strs *args)
{
        struct strs done = {0};
        char dir[PATH_MAX], arg[2 * PATH_MAX + 8];
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < f->n_libraries; i++) {
                const char *p = f->libraries[i];
                const char *name = strrchr(p, '/') + 1;
                const char *target, *link;
                if (strncmp(name, "libcuda.so", 10) == 0) {
                        target = "libcuda.so.1";
                        link = "libcuda.so";
                } else if (strncmp(name, "libnvidia-opticalflow.so", 24) == 0) {
                        target = "libnvidia-opticalflow.so.1";
                        link = "libnvidia-opticalflow.so";
                } else if (strncmp(name, "libGLX_nvidia.so", 16) == 0) {
                        target = name;
                        link = "libGLX_indirect.so.0";
                } else {
                        continue;
                }
                if (strs_has(&done, link))
                        continue;
                dir_of(p, dir, sizeof(dir));
                snprintf(arg, sizeof(arg), "%s::%s/%s", target, dir, link);
                rc = strs_add(&done, link);
                if (rc == 0)
                        rc = strs_add(args, "--link");
                if (rc == 0)
                        rc = strs_add(args, arg);
        }
        strs_free(done.v, done.n);
        return rc;
}

int kdev_nvidia_driver_files_edits(const struct kdev_nvidia_driver_files *f,
                                   struct kdev_container_edits *e, struct kdev_err *err)
{
        const char *root = f->driver_root ? f->driver_root : "";
        int total = 0;
        char *const *lists[] = {f->libraries, f->firmware, f->binaries, f->ipc};
        size_t counts[] = {f->n_libraries, f->n_firmware, f->n_binaries, f->n_ipc};
        for (size_t i = 0; i < N(lists); i++) {
                int rc = add_mounts(root, lists[i], counts[i], e, err);
                if (rc < 0)
                        return rc;
                total += rc;
        }
        if (!f->hook_path || f->n_libraries == 0)
                return total;

        struct strs links = {0}, folders = {0};
        char dir[PATH_MAX];
        int rc = symlink_args(f, &links);
        for (size_t i = 0; rc == 0 && i < f->n_libraries; i++) {
                dir_of(f->libraries[i], dir, sizeof(dir));
                if (!strs_has(&folders, dir)) {
                        rc = strs_add(&folders, "--folder");
                        if (rc == 0)
                                rc = strs_add(&folders, dir);
                }
        }
        if (rc < 0)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        if (rc == 0 && links.n > 0)
                rc = add_hook(f->hook_path, "create-symlinks", &links, e, err);
        if (rc == 0)
                rc = add_hook(f->hook_path, "update-ldcache", &folders, e, err);
        strs_free(links.v, links.n);
        strs_free(folders.v, folders.n);
        return rc < 0 ? rc : total;
}
