/* The host side of isolated replicas (see share_host.h) and their Allocate
 * edits (nvidia_internal.h kdev_nvidia_share_allocate). */
#include "nvidia/share_host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "common/dir.h"
#include "model/edits.h"
#include "nvidia/isolation.h"
#include "nvidia/nvidia_internal.h"
#include "share/region.h"

#define LIMITS_MAX (64u * 1024)

/* --- paths and checks ------------------------------------------------------------ */

static int path_of(char *buf, size_t size, struct kdev_err *err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int path_of(char *buf, size_t size, struct kdev_err *err, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, size, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENAMETOOLONG, "share root path too long");
        return 0;
}

/* |path| is a directory (created with |mode| when missing), not a link. */
static int ensure_dir(const char *path, mode_t mode, struct kdev_err *err)
{
        int rc = kdev_dir_create(path, mode, "share directory", err);
        if (rc < 0)
                return rc;
        struct stat st;
        if (lstat(path, &st) < 0)
                return kdev_err_set(err, errno, "%s: %s", path, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return kdev_err_set(err, ENOTDIR, "%s: is not a directory (%s); not used", path,
                                    kdev_file_type_name(st.st_mode));
        return 0;
}

/* Replaces the regular file |path| with |data|: anything else there (a
 * symbolic link, a FIFO, a directory) is refused. */
static int replace_file(struct kdev_file_guard *guard, const char *path, const void *data,
                        size_t len, struct kdev_err *err)
{
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
                return kdev_err_set(err, S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                                    "%s: is not a regular file (%s); not replaced", path,
                                    kdev_file_type_name(st.st_mode));
        char tmpl[PATH_MAX], aside[PATH_MAX];
        const char *slash = strrchr(path, '/');
        int n = snprintf(tmpl, sizeof(tmpl), "%.*s/.%s.XXXXXX", (int)(slash - path), path,
                         slash + 1);
        if (n < 0 || (size_t)n >= sizeof(tmpl))
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        int rc = kdev_file_write_guarded(guard, path, tmpl, data, len, 0644, true, aside,
                                         sizeof(aside), err);
        return rc < 0 ? rc : 0;
}

int kdev_nvidia_share_library_default(const char *exe, char *buf, size_t size)
{
        const char *slash = strrchr(exe, '/');
        int dir = slash ? (int)(slash - exe) : 1;
        const char *base = slash ? exe : ".";
        int n = snprintf(buf, size, "%.*s/../lib/kdev/" KDEV_SHARE_LIBRARY_NAME, dir, base);
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode))
                return 0;
        n = snprintf(buf, size, "%.*s/" KDEV_SHARE_LIBRARY_NAME, dir, base);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int kdev_nvidia_share_install(const char *root, const char *library, const char *cdi_dir,
                              struct kdev_file_guard *guard, struct kdev_err *err)
{
        char lib[PATH_MAX], path[PATH_MAX];
        char *data = NULL;
        size_t len = 0;
        int rc = kdev_file_read(library, "share library", KDEV_SHARE_LIBRARY_MAX, 0, &data, &len,
                                err);
        if (rc < 0)
                return kdev_err_wrap(err, "installing the share library");
        if ((rc = kdev_dir_create_all(root, 0755, "share root", err)) < 0 ||
            (rc = ensure_dir(root, 0755, err)) < 0 ||
            (rc = path_of(lib, sizeof(lib), err, "%s/lib", root)) < 0 ||
            (rc = ensure_dir(lib, 0755, err)) < 0 ||
            (rc = path_of(path, sizeof(path), err, "%s/containers", root)) < 0 ||
            (rc = ensure_dir(path, 0700, err)) < 0 ||
            (rc = path_of(path, sizeof(path), err, "%s/" KDEV_SHARE_LIBRARY_NAME, lib)) < 0 ||
            (rc = replace_file(guard, path, data, len, err)) < 0 ||
            (rc = path_of(path, sizeof(path), err, "%s/ld.so.preload", root)) < 0 ||
            (rc = replace_file(guard, path, KDEV_SHARE_CTR_LIBRARY "\n",
                               strlen(KDEV_SHARE_CTR_LIBRARY "\n"), err)) < 0) {
                free(data);
                return rc;
        }
        free(data);
        return kdev_nvidia_share_cleanup(root, cdi_dir, NULL, err);
}

/* --- region directories ---------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        if (type == FTW_DP)
                return rmdir(path) < 0 ? -1 : 0;
        return unlink(path) < 0 ? -1 : 0;
}

/* rm -rf |path|: never follows a link, never crosses a mount. */
static int remove_tree(const char *path)
{
        return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 ? -errno : 0;
}

static void remove_region(const char *containers, const char *id, const char *cdi_dir)
{
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", containers, id) >= sizeof(path))
                return;
        remove_tree(path);
        if (!cdi_dir)
                return;
        char file[256];
        struct kdev_err e = {0};
        if (kdev_cdi_transient_file_name(KDEV_SHARE_CDI_KIND, id, file, sizeof(file), &e) >= 0)
                kdev_cdi_spec_remove(cdi_dir, file, &e);
}

/* Creates the share region of directory |dir| from the limits file text
 * |text| (written to |path|): the container's first process maps it
 * instead of parsing the limits file and racing its siblings to create it,
 * and the node side reads usage from the start. */
static int make_region(const char *dir, const char *text, const char *path,
                       struct kdev_err *err)
{
        struct kdev_share_limits l;
        char msg[512];
        if (kdev_share_limits_parse(text, strlen(text), path, &l, msg, sizeof(msg)) < 0)
                return kdev_err_set(err, EINVAL, "%s", msg);  /* a bug: kdev wrote it */
        struct kdev_share_region_file *m = kdev_share_region_map(dir, &l, false, msg,
                                                                 sizeof(msg));
        if (!m)
                return kdev_err_set(err, EIO, "%s", msg);
        kdev_share_region_unmap(m);
        return 0;
}

/* A region ID: the allocation's time, CLOCK_REALTIME nanoseconds as 16
 * lower-case hex digits (so IDs sort by time; strictly increasing within a
 * run of kdev-plugin, which allocates on one thread), '-', 8 random hex
 * digits: "18a3f0c2e4b5d6f7-9c1e2a4b" (25 characters: the CDI annotation key
 * "kdev-share_<id>" stays within 63). */
static int new_region_id(char *buf, size_t size)
{
        static uint64_t last;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        if (ns <= last)
                ns = last + 1;
        last = ns;
        char rnd[40];
        int rc = kdev_nvidia_uuid4(rnd, sizeof(rnd));
        if (rc < 0)
                return rc;
        snprintf(buf, size, "%016llx-%.8s", (unsigned long long)ns, rnd);
        return 0;
}

/* The allocation time of region ID |id| (new_region_id), 0 for another name. */
static uint64_t region_time(const char *id)
{
        uint64_t t = 0;
        for (size_t i = 0; i < 16; i++) {
                char c = id[i];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return 0;
                t = t * 16 + (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
        }
        return id[16] == '-' ? t : 0;
}

struct region {
        char *id;
        uint64_t time;         /* region_time */
        char *text;            /* the limits file; its "# device" lines are cut in place */
        const char *resource;
        const char **ids;
        size_t n_ids;
};

/* Reads the limits file of region |r| in |dir|. 0, or -1 when it has none. */
static int read_region(const char *dir, struct region *r)
{
        char path[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s/limits", dir, r->id) >= sizeof(path) ||
            lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
                return -1;
        size_t len = 0;
        struct kdev_err e = {0};
        if (kdev_file_read(path, "limits file", LIMITS_MAX, KDEV_FILE_TEXT, &r->text, &len, &e) <
            0)
                return -1;
        r->time = region_time(r->id);
        size_t lines = 1;
        for (const char *p = r->text; *p; p++)
                lines += *p == '\n';
        r->ids = calloc(lines, sizeof(*r->ids));
        if (!r->ids)
                return -1;
        static const char res_tag[] = "# kdev-plugin: isolated replicas of ";
        static const char dev_tag[] = "# device ";
        for (char *line = r->text; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                if (strncmp(line, res_tag, sizeof(res_tag) - 1) == 0)
                        r->resource = line + sizeof(res_tag) - 1;
                else if (strncmp(line, dev_tag, sizeof(dev_tag) - 1) == 0)
                        r->ids[r->n_ids++] = line + sizeof(dev_tag) - 1;
                line = nl ? nl + 1 : NULL;
        }
        return r->resource ? 0 : -1;
}

static int newest_first(const void *a, const void *b)
{
        const struct region *x = a, *y = b;
        if (x->time != y->time)
                return x->time > y->time ? -1 : 1;
        return strcmp(x->id, y->id);
}

/* Whether a region before |i| (newer) of the same resource names one of
 * |i|'s device IDs. */
static bool superseded(const struct region *v, size_t i)
{
        for (size_t j = 0; j < i; j++) {
                if (!v[j].resource || strcmp(v[j].resource, v[i].resource) != 0)
                        continue;
                for (size_t a = 0; a < v[i].n_ids; a++) {
                        for (size_t b = 0; b < v[j].n_ids; b++) {
                                if (strcmp(v[i].ids[a], v[j].ids[b]) == 0)
                                        return true;
                        }
                }
        }
        return false;
}

int kdev_nvidia_share_cleanup(const char *root, const char *cdi_dir, unsigned *removed,
                              struct kdev_err *err)
{
        char dir[PATH_MAX];
        if (removed)
                *removed = 0;
        int rc = path_of(dir, sizeof(dir), err, "%s/containers", root);
        if (rc < 0)
                return rc;
        DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : kdev_err_set(err, errno, "%s: %s", dir, strerror(errno));
        struct region *v = NULL;
        size_t n = 0, cap = 0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        rc = 0;
        for (struct dirent *e; (e = readdir(d));) {
                if (e->d_name[0] == '.')
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISDIR(st.st_mode))
                        continue;
                if (n == cap) {
                        size_t nc = cap ? 2 * cap : 16;
                        struct region *nv = realloc(v, nc * sizeof(*v));
                        if (!nv) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                                break;
                        }
                        v = nv;
                        cap = nc;
                }
                struct region *r = &v[n];
                memset(r, 0, sizeof(*r));
                if (!(r->id = strdup(e->d_name))) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
                n++;
                if (read_region(dir, r) < 0) {
                        r->resource = NULL;
                        if (now.tv_sec - st.st_mtim.tv_sec > KDEV_SHARE_STALE_SECONDS) {
                                remove_region(dir, r->id, cdi_dir);
                                if (removed)
                                        (*removed)++;
                        }
                }
        }
        closedir(d);
        if (rc == 0 && n > 0) {
                qsort(v, n, sizeof(*v), newest_first);
                for (size_t i = 0; i < n; i++) {
                        if (v[i].resource && superseded(v, i)) {
                                remove_region(dir, v[i].id, cdi_dir);
                                if (removed)
                                        (*removed)++;
                        }
                }
        }
        for (size_t i = 0; i < n; i++) {
                free(v[i].id);
                free(v[i].text);
                free(v[i].ids);
        }
        free(v);
        return rc;
}

/* --- Allocate -------------------------------------------------------------------- */

void kdev_nvidia_share_free(struct kdev_nvidia_share_rdata *s)
{
        if (!s)
                return;
        free(s->iso.name);
        free(s->iso.policy);
        free(s->root);
        free(s->cdi_dir);
        free(s);
}

struct kdev_nvidia_share_rdata *kdev_nvidia_share_new(const struct kdev_nvidia_isolated_resource *iso,
                                                      unsigned replicas, const char *root,
                                                      const char *cdi_dir)
{
        struct kdev_nvidia_share_rdata *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->iso = *iso;
        s->iso.name = NULL;
        s->iso.policy = NULL;
        s->replicas = replicas;
        if (!(s->iso.name = strdup(iso->name)) ||
            (iso->policy && !(s->iso.policy = strdup(iso->policy))) ||
            !(s->root = strdup(root)) || (cdi_dir && !(s->cdi_dir = strdup(cdi_dir)))) {
                kdev_nvidia_share_free(s);
                return NULL;
        }
        return s;
}

bool kdev_nvidia_share_same(const struct kdev_nvidia_share_rdata *a,
                            const struct kdev_nvidia_share_rdata *b)
{
        if (!a || !b)
                return a == b;
        return strcmp(a->iso.name, b->iso.name) == 0 && a->iso.memory == b->iso.memory &&
               a->iso.compute == b->iso.compute && a->iso.preload == b->iso.preload &&
               ((!a->iso.policy && !b->iso.policy) ||
                (a->iso.policy && b->iso.policy && strcmp(a->iso.policy, b->iso.policy) == 0)) &&
               a->replicas == b->replicas && strcmp(a->root, b->root) == 0 &&
               ((!a->cdi_dir && !b->cdi_dir) ||
                (a->cdi_dir && b->cdi_dir && strcmp(a->cdi_dir, b->cdi_dir) == 0));
}

/* The mounts and env of a container's share, as CDI edits (|spec|) or as
 * edits of the answer (|out|). */
struct share_mount {
        const char *host, *ctr;
        bool ro;
};

/* The createRuntime hook of a container's CDI spec that keeps the image's
 * own /etc/ld.so.preload working (preload: file): run by the runtime on the
 * host, after the container's mounts and before its process, it reads the
 * image's file from the container's root file system as the host sees it
 * (the runtime's namespace, where kdev's bind mount over
 * /etc/ld.so.preload is not visible) and writes the container's own preload
 * file ($1, already mounted at /etc/ld.so.preload; rewritten in place, so the
 * mount keeps it) again as the share library ($2) followed by the image's
 * file, at most 64 KiB: the same content at every start of the container. The root is the bundle's config.json
 * root.path (relative to the bundle, or absolute); an /etc or
 * /etc/ld.so.preload in the image that is a symbolic link, or a preload
 * file that is not a regular file, is not read (it could name a host file).
 * It exits 0 whatever happens: a container without the image's entries
 * still starts, with the share library. */
static const char preload_hook[] =
        "s=$(cat); "
        "b=$(printf '%s' \"$s\" | tr -d '\\n' | "
        "sed -n 's/.*\"bundle\": *\"\\([^\"]*\\)\".*/\\1/p'); "
        "[ -n \"$b\" ] && [ -f \"$b/config.json\" ] || exit 0; "
        "r=$(tr -d '\\n' < \"$b/config.json\" | "
        "sed -n 's/.*\"root\": *{[^}]*\"path\": *\"\\([^\"]*\\)\".*/\\1/p'); "
        "case \"$r\" in '') exit 0;; /*) ;; *) r=\"$b/$r\";; esac; "
        "f=\"$r/etc/ld.so.preload\"; "
        "if [ -d \"$r/etc\" ] && [ ! -L \"$r/etc\" ] && [ -f \"$f\" ] && [ ! -L \"$f\" ]; "
        "then { printf '%s\\n' \"$2\"; head -c 65536 \"$f\"; } > \"$1\"; fi; exit 0";

/* The CDI edits of a container's share: |env|, the mounts |m| (rw or ro,
 * nosuid, nodev, bind) and, with |preload| (the container's own preload
 * file on the host), the createRuntime hook preload_hook. */
static int share_cdi_edits(struct kdev_cdi_edits *e, const struct share_mount *m, size_t n_m,
                           const char *const *env, size_t n_env, const char *preload,
                           struct kdev_err *err)
{
        int rc = 0;

        for (size_t i = 0; rc == 0 && i < n_env; i++)
                rc = kdev_cdi_edits_add_env(e, env[i], err);
        for (size_t i = 0; rc == 0 && i < n_m; i++) {
                char *opts[] = {(char *)(m[i].ro ? "ro" : "rw"), "nosuid", "nodev", "bind"};
                struct kdev_cdi_mount cm = {.host_path = (char *)m[i].host,
                                            .container_path = (char *)m[i].ctr,
                                            .options = opts,
                                            .n_options = 4};
                rc = kdev_cdi_edits_add_mount(e, &cm, err);
        }
        if (rc == 0 && preload) {
                char *args[] = {"sh", "-c", (char *)preload_hook, "kdev-share-preload",
                                (char *)preload, KDEV_SHARE_CTR_LIBRARY};
                struct kdev_cdi_hook h = {.hook_name = "createRuntime",
                                          .path = "/bin/sh",
                                          .args = args,
                                          .n_args = 6};
                rc = kdev_cdi_edits_add_hook(e, &h, err);
        }
        return rc;
}

/* The mounts of a container's share into |m| (5 entries): the library
 * |lib|, the node's preload file |preload| (not with |env_mode|), the
 * region directory |dir|, its limits file |limits| and, with |own_preload|,
 * the container's own preload file |preload| (then <dir>/ld.so.preload) at
 * <share dir>/ld.so.preload too. Returns how many. */
static size_t share_mounts(const char *lib, const char *preload, const char *dir,
                           const char *limits, bool env_mode, bool own_preload,
                           struct share_mount *m)
{
        size_t n_m = 0;

        m[n_m++] = (struct share_mount){lib, KDEV_SHARE_CTR_LIBRARY, true};
        if (!env_mode)
                m[n_m++] = (struct share_mount){preload, KDEV_SHARE_CTR_PRELOAD, true};
        m[n_m++] = (struct share_mount){dir, KDEV_SHARE_CTR_DIR, false};
        m[n_m++] = (struct share_mount){limits, KDEV_SHARE_CTR_DIR "/limits", true};
        if (own_preload)
                m[n_m++] = (struct share_mount){preload, KDEV_SHARE_CTR_DIR "/ld.so.preload",
                                                true};
        return n_m;
}

int kdev_nvidia_share_region_fill(const char *dir, const char *limits_text, bool own_preload,
                                  struct kdev_err *err)
{
        char path[PATH_MAX], tmpl[PATH_MAX], preload[PATH_MAX], ptmpl[PATH_MAX];
        int rc;

        if ((rc = path_of(path, sizeof(path), err, "%s/limits", dir)) < 0 ||
            (rc = path_of(tmpl, sizeof(tmpl), err, "%s/.limits.XXXXXX", dir)) < 0 ||
            (rc = path_of(preload, sizeof(preload), err, "%s/ld.so.preload", dir)) < 0 ||
            (rc = path_of(ptmpl, sizeof(ptmpl), err, "%s/.ld.so.preload.XXXXXX", dir)) < 0)
                return rc;
        /* no fsync (nor below): the region matters only while its container
         * runs, which a crash of the node ends; the rename keeps a reader
         * from seeing half a file */
        if ((rc = kdev_file_write_atomic_flags(path, tmpl, limits_text, strlen(limits_text),
                                               0444, KDEV_FILE_NO_FSYNC, err)) < 0 ||
            (rc = make_region(dir, limits_text, path, err)) < 0)
                return rc;
        if (own_preload &&
            (rc = kdev_file_write_atomic_flags(preload, ptmpl, KDEV_SHARE_CTR_LIBRARY "\n",
                                               strlen(KDEV_SHARE_CTR_LIBRARY "\n"), 0444,
                                               KDEV_FILE_NO_FSYNC, err)) < 0)
                return rc;
        return 0;
}

int kdev_nvidia_share_claim_cdi_edits(const char *root, const char *dir,
                                      struct kdev_cdi_edits *e, struct kdev_err *err)
{
        char lib[PATH_MAX], preload[PATH_MAX], limits[PATH_MAX];
        struct share_mount m[5];
        const char *env[] = {KDEV_SHARE_ENV_DIR "=" KDEV_SHARE_CTR_DIR};
        int rc;

        if ((rc = path_of(lib, sizeof(lib), err, "%s/lib/" KDEV_SHARE_LIBRARY_NAME, root)) < 0 ||
            (rc = path_of(preload, sizeof(preload), err, "%s/ld.so.preload", dir)) < 0 ||
            (rc = path_of(limits, sizeof(limits), err, "%s/limits", dir)) < 0)
                return rc;
        /* preload: file with CDI, as kdev-plugin's cdi strategies: the
         * container's own preload file, completed by the hook */
        size_t n_m = share_mounts(lib, preload, dir, limits, false, true, m);
        return share_cdi_edits(e, m, n_m, env, 1, preload, err);
}

int kdev_nvidia_share_region_remove(const char *dir)
{
        struct stat st;

        if (lstat(dir, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
        return remove_tree(dir);
}

static int cdi_share_spec(const struct kdev_nvidia_share_rdata *s, const char *id,
                          const struct share_mount *m, size_t n_m, const char *const *env,
                          size_t n_env, const char *preload, struct kdev_err *err)
{
        struct kdev_cdi_spec *spec = kdev_cdi_spec_new(KDEV_SHARE_CDI_KIND, err);
        if (!spec)
                return -err->code;
        /* 0.5.0: a device name may start with a digit (a region ID does) */
        int rc = kdev_cdi_spec_set_min_version(spec, "0.5.0", err);
        struct kdev_cdi_device *dev = rc < 0 ? NULL : kdev_cdi_spec_add_device(spec, id, err);
        if (rc == 0 && !dev)
                rc = -err->code;
        struct kdev_cdi_edits *e = dev ? kdev_cdi_device_edits(dev) : NULL;
        if (rc == 0)
                rc = share_cdi_edits(e, m, n_m, env, n_env, preload, err);
        char file[256];
        if (rc == 0) {
                int fl = kdev_cdi_transient_file_name(KDEV_SHARE_CDI_KIND, id, file, sizeof(file),
                                                      err);
                rc = fl < 0 ? fl : kdev_cdi_spec_write_transient(spec, s->cdi_dir, file, err);
        }
        kdev_cdi_spec_free(spec);
        return rc;
}

int kdev_nvidia_share_allocate(const struct kdev_nvidia_rdata *d, const struct kdev_resource *r,
                               const struct kdev_device *const *devs, size_t n,
                               struct kdev_container_edits *out, struct kdev_err *err)
{
        const struct kdev_nvidia_share_rdata *s = d->share;
        const struct kdev_nvidia_devinfo **infos = calloc(n ? n : 1, sizeof(*infos));
        const char **ids = calloc(n ? n : 1, sizeof(*ids));
        struct kdev_nvidia_share_limit *limits = NULL;
        size_t n_limits = 0;
        char *text = NULL;
        char id[KDEV_SHARE_REGION_ID_MAX], containers[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
        char lib[PATH_MAX], preload[PATH_MAX];
        bool made = false;
        int rc;
        if (!infos || !ids) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                infos[i] = devs[i]->data;
                ids[i] = devs[i]->id;
        }
        if ((rc = kdev_nvidia_share_limits(&s->iso, s->replicas, infos, n, &limits, &n_limits,
                                           err)) < 0)
                goto out;
        if ((rc = path_of(containers, sizeof(containers), err, "%s/containers", s->root)) < 0)
                goto out;
        /* a new ID until its directory is new (a clash of 32 random bits in
         * the same nanosecond: never in practice) */
        do {
                if ((rc = new_region_id(id, sizeof(id))) < 0) {
                        rc = kdev_err_set(err, -rc, "cannot generate a random ID: %s",
                                          strerror(-rc));
                        goto out;
                }
                if ((rc = path_of(dir, sizeof(dir), err, "%s/%s", containers, id)) < 0 ||
                    (rc = kdev_dir_create(dir, 01777, "share region directory", err)) < 0)
                        goto out;
        } while (rc == 0);
        made = true;
        if ((rc = path_of(path, sizeof(path), err, "%s/limits", dir)) < 0 ||
            (rc = path_of(lib, sizeof(lib), err, "%s/lib/" KDEV_SHARE_LIBRARY_NAME, s->root)) <
                    0 ||
            (rc = path_of(preload, sizeof(preload), err, "%s/ld.so.preload", s->root)) < 0)
                goto out;
        if (!(text = kdev_nvidia_limits_text(r->name, ids, n, limits, n_limits, s->iso.policy))) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        bool env_mode = s->iso.preload == KDEV_NVIDIA_PRELOAD_ENV;
        bool cdi = d->strategies & KDEV_NVIDIA_LIST_CDI;
        /* With CDI, the container's own preload file, which the CDI hook
         * completes with the image's entries (preload_hook) */
        bool own_preload = cdi && !env_mode;
        if ((rc = kdev_nvidia_share_region_fill(dir, text, own_preload, err)) < 0)
                goto out;
        if (own_preload &&
            (rc = path_of(preload, sizeof(preload), err, "%s/ld.so.preload", dir)) < 0)
                goto out;
        struct share_mount m[5];
        size_t n_m = share_mounts(lib, preload, dir, path, env_mode, own_preload, m);
        const char *env[] = {KDEV_SHARE_ENV_DIR "=" KDEV_SHARE_CTR_DIR,
                             "LD_PRELOAD=" KDEV_SHARE_CTR_LIBRARY};
        size_t n_env = env_mode ? 2 : 1;
        if (cdi) {
                char name[128], *key = NULL;
                snprintf(name, sizeof(name), KDEV_SHARE_CDI_KIND "=%s", id);
                if (!s->cdi_dir) {
                        rc = kdev_err_set(err, EINVAL, "isolation: no CDI spec directory");
                        goto out;
                }
                if ((rc = cdi_share_spec(s, id, m, n_m, env, n_env,
                                         own_preload ? preload : NULL, err)) < 0)
                        goto out;
                rc = 0;
                if ((d->strategies & KDEV_NVIDIA_LIST_CDI_ANNOTATIONS) &&
                    (asprintf(&key, "%skdev-share_%s", d->annotation_prefix, id) < 0 ||
                     kdev_edits_add_annotation(out, key, name, NULL) < 0))
                        rc = -ENOMEM;
                free(key);
                if (rc == 0 && (d->strategies & KDEV_NVIDIA_LIST_CDI_CRI) &&
                    kdev_edits_add_cdi_device(out, name, NULL) < 0)
                        rc = -ENOMEM;
        } else {
                static const char *const ro[] = {"ro"};
                rc = 0;
                for (size_t i = 0; rc == 0 && i < n_env; i++) {
                        const char *eq = strchr(env[i], '=');
                        char key[32];
                        snprintf(key, sizeof(key), "%.*s", (int)(eq - env[i]), env[i]);
                        rc = kdev_edits_set_env(out, key, eq + 1, NULL);
                }
                for (size_t i = 0; rc == 0 && i < n_m; i++)
                        rc = kdev_edits_add_mount(out, m[i].host, m[i].ctr, m[i].ro ? ro : NULL,
                                                  m[i].ro ? 1 : 0, NULL);
        }
        if (rc == -ENOMEM) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        made = false;
        struct kdev_err cerr = {0};
        kdev_nvidia_share_cleanup(s->root, s->cdi_dir, NULL, &cerr);
out:
        if (made && rc < 0)
                remove_region(containers, id, s->cdi_dir);
        free(infos);
        free(ids);
        free(limits);
        free(text);
        return rc;
}
