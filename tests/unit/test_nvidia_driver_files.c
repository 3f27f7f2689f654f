/* Tests of the NVIDIA driver files as CDI common edits (nvidia/driver_files.h):
 * a fake driver root with files named for the mock NVML's driver version
 * 550.90.07 and a fake hook binary, checked against exact spec JSON (what
 * nvidia-container-toolkit v1.20.0's nvcdi writes for the same tree). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "nvidia/container_edits.h"
#include "nvidia/driver_files.h"

#define VERSION "550.90.07"

struct fx {
        char dir[64];   /* temp dir */
        char root[128]; /* <dir>/root: the fake driver root */
        char hook[128]; /* <dir>/bin/nvidia-cdi-hook */
};

static void mkdirs(const char *path)
{
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", path);
        for (char *p = buf + 1; *p; p++) {
                if (*p == '/') {
                        *p = '\0';
                        mkdir(buf, 0755);
                        *p = '/';
                }
        }
        mkdir(buf, 0755);
}

/* Creates <base>/<rel> (parents too) with |mode|. */
static void touch(const char *base, const char *rel, mode_t mode)
{
        char path[512], dir[512];
        snprintf(path, sizeof(path), "%s/%s", base, rel);
        snprintf(dir, sizeof(dir), "%s", path);
        *strrchr(dir, '/') = '\0';
        mkdirs(dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "x", 1), 1);
        close(fd);
        assert_int_equal(chmod(path, mode), 0);
}

static void link_at(const char *base, const char *rel, const char *target)
{
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", base, rel);
        assert_int_equal(symlink(target, path), 0);
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        snprintf(f->dir, sizeof(f->dir), "/tmp/kdev-drvfiles-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->root, sizeof(f->root), "%s/root", f->dir);
        snprintf(f->hook, sizeof(f->hook), "%s/bin/nvidia-cdi-hook", f->dir);
        const char *r = f->root;
        /* libraries of this version, others that must not be taken */
        touch(r, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so." VERSION, 0644);
        touch(r, "usr/lib/x86_64-linux-gnu/libcuda.so." VERSION, 0644);
        touch(r, "usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." VERSION, 0644);
        touch(r, "usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so." VERSION, 0644);
        touch(r, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03", 0644);
        /* nvcdi takes every "*.so.<version>" of a library directory */
        touch(r, "usr/lib/x86_64-linux-gnu/nvidia-foo.so." VERSION, 0644);
        touch(r, "usr/lib/x86_64-linux-gnu/libfoo.so." VERSION ".bak", 0644);
        touch(r, "usr/local/lib/libnvidia-other.so." VERSION, 0644); /* not a search path */
        char d[512];
        snprintf(d, sizeof(d), "%s/usr/lib/x86_64-linux-gnu/libnvidia-sub.so." VERSION, r);
        mkdirs(d); /* a directory with a library's name */
        link_at(r, "usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so." VERSION);
        touch(r, "usr/lib64/libnvidia-opticalflow.so." VERSION, 0644);
        link_at(r, "lib64", "usr/lib64"); /* merged /usr: listed once */
        /* firmware */
        touch(r, "lib/firmware/nvidia/" VERSION "/gsp_tu10x.bin", 0644);
        touch(r, "lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", 0644);
        touch(r, "lib/firmware/nvidia/" VERSION "/README", 0644);
        /* binaries: nvidia-debugdump is not executable */
        touch(r, "usr/bin/nvidia-smi", 0755);
        touch(r, "usr/bin/nvidia-debugdump", 0644);
        touch(r, "usr/bin/nvidia-cuda-mps-control", 0755);
        touch(r, "bin/nvidia-persistenced", 0755);
        touch(r, "bin/nvidia-smi", 0755); /* /usr/bin comes first */
        /* IPC */
        touch(r, "var/run/nvidia-persistenced/socket", 0644);
        snprintf(d, sizeof(d), "%s/tmp/nvidia-mps", r);
        mkdirs(d); /* a directory: nvcdi's file locator leaves it out */
        /* hooks */
        touch(f->dir, "bin/nvidia-cdi-hook", 0755);
        touch(f->dir, "bin/nvidia-ctk", 0755);
        touch(f->dir, "bin/not-executable", 0644);
        /* the binaries' search order depends on $PATH (nvcdi GetPaths) */
        setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
        assert_int_equal(system(cmd), 0);
        free(f);
        return 0;
}

/* Replaces every "@HOOK@" in |tmpl| with |hook|. Malloc'ed. */
static char *subst(const char *tmpl, const char *hook)
{
        size_t cap = strlen(tmpl) * 2 + 4096, n = 0;
        char *out = malloc(cap);
        for (const char *p = tmpl; *p;) {
                if (strncmp(p, "@HOOK@", 6) == 0) {
                        n += (size_t)snprintf(out + n, cap - n, "%s", hook);
                        p += 6;
                } else {
                        out[n++] = *p++;
                }
        }
        out[n] = '\0';
        return out;
}

/* Renders a spec with one device and |f|'s edits at spec level, and checks it
 * equals the JSON |want| (with @HOOK@ replaced by |hook|). */
static void check_spec(const struct kdev_nvidia_driver_files *files, const char *want,
                       const char *hook, int want_mounts)
{
        struct kdev_err e = {0};
        struct kdev_cdi_spec *spec = kdev_cdi_spec_new("k8s.test.com/gpu", &e);
        assert_non_null(spec);
        struct kdev_cdi_device *dev = kdev_cdi_spec_add_device(spec, "d", &e);
        struct kdev_cdi_device_node n = {.path = "/dev/nvidia0"};
        assert_int_equal(kdev_cdi_edits_add_device_node(kdev_cdi_device_edits(dev), &n, &e), 0);
        struct kdev_container_edits ed = {0};
        int rc = kdev_nvidia_driver_files_edits(files, &ed, &e);
        if (rc < 0)
                fail_msg("%s", e.msg);
        if (kdev_nvidia_edits_to_cdi(&ed, kdev_cdi_spec_edits(spec), &e) < 0)
                fail_msg("%s", e.msg);
        kdev_container_edits_clear(&ed);
        assert_int_equal(rc, want_mounts);
        json_t *got = NULL;
        if (kdev_cdi_spec_to_json(spec, &got, &e) != 0)
                fail_msg("%s", e.msg);
        char *text = subst(want, hook ? hook : "");
        json_error_t je;
        json_t *exp = json_loads(text, 0, &je);
        if (!exp)
                fail_msg("bad expected JSON: %s (line %d)", je.text, je.line);
        if (!json_equal(got, exp)) {
                char *g = json_dumps(got, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fprintf(stderr, "got:\n%s\n", g);
                free(g);
                fail_msg("spec differs");
        }
        json_decref(exp);
        json_decref(got);
        free(text);
        kdev_cdi_spec_free(spec);
}

#define OPTS "\"ro\", \"nosuid\", \"nodev\", \"rbind\", \"rprivate\""
#define MOUNT(host, ctr) \
        "{\"hostPath\": \"" host "\", \"containerPath\": \"" ctr "\", \"options\": [" OPTS "]}"
#define LIBDIR "/usr/lib/x86_64-linux-gnu"
#define DRV "/run/nvidia/driver"

#define IPCOPTS "\"nosuid\", \"nodev\", \"rbind\", \"rprivate\", \"noexec\""
#define IPC_MOUNT(host, ctr) \
        "{\"hostPath\": \"" host "\", \"containerPath\": \"" ctr "\", \"options\": [" IPCOPTS "]}"

/* nvcdi's order: libraries (the library directories, then their vdpau/),
 * IPC, firmware, binaries */
#define MOUNTS_UNDER(R)                                                                          \
        MOUNT(R "/usr/lib64/libnvidia-opticalflow.so." VERSION,                                  \
              "/usr/lib64/libnvidia-opticalflow.so." VERSION) ","                                \
        MOUNT(R LIBDIR "/libcuda.so." VERSION, LIBDIR "/libcuda.so." VERSION) ","                \
        MOUNT(R LIBDIR "/libnvidia-ml.so." VERSION, LIBDIR "/libnvidia-ml.so." VERSION) ","      \
        MOUNT(R LIBDIR "/libnvidia-ptxjitcompiler.so." VERSION,                                  \
              LIBDIR "/libnvidia-ptxjitcompiler.so." VERSION) ","                                \
        MOUNT(R LIBDIR "/nvidia-foo.so." VERSION, LIBDIR "/nvidia-foo.so." VERSION) ","          \
        MOUNT(R LIBDIR "/vdpau/libvdpau_nvidia.so." VERSION,                                     \
              LIBDIR "/vdpau/libvdpau_nvidia.so." VERSION) ","                                   \
        IPC_MOUNT(R "/var/run/nvidia-persistenced/socket",                                       \
                  "/var/run/nvidia-persistenced/socket") ","                                     \
        MOUNT(R "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin",                                \
              "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin") ","                              \
        MOUNT(R "/lib/firmware/nvidia/" VERSION "/gsp_tu10x.bin",                                \
              "/lib/firmware/nvidia/" VERSION "/gsp_tu10x.bin") ","                              \
        MOUNT(R "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi") ","                                \
        MOUNT(R "/bin/nvidia-persistenced", "/bin/nvidia-persistenced") ","                      \
        MOUNT(R "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control")

#define ENV_LIBCUDA "\"env\": [\"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64:" LIBDIR "\"], "

#define SPEC_HEAD                                                                                \
        "{\"cdiVersion\": \"0.3.0\", \"kind\": \"k8s.test.com/gpu\", \"devices\": [{\"name\": " \
        "\"d\", \"containerEdits\": {\"deviceNodes\": [{\"path\": \"/dev/nvidia0\"}]}}], "        \
        "\"containerEdits\": {"

#define HOOK(FIXED, ARGS) \
        "{\"hookName\": \"createContainer\", \"path\": \"@HOOK@\", \"args\": [" FIXED ARGS "], " \
        "\"env\": [\"NVIDIA_CTK_DEBUG=false\"]}"

/* nvcdi v1.20's five hooks, in its order */
#define HOOKS(FIXED)                                                                             \
        "\"hooks\": ["                                                                           \
        HOOK(FIXED, ", \"create-symlinks\", \"--link\", \"libnvidia-opticalflow.so.1::/usr/lib64/" \
                    "libnvidia-opticalflow.so\", \"--link\", \"libcuda.so.1::" LIBDIR            \
                    "/libcuda.so\"") ","                                                         \
        HOOK(FIXED, ", \"enable-cuda-compat\", \"--host-driver-version=" VERSION "\"") ","        \
        HOOK(FIXED, ", \"update-ldcache\", \"--folder\", \"/usr/lib64\", \"--folder\", \""        \
                    LIBDIR "\", \"--folder\", \"" LIBDIR "/vdpau\"") ","                          \
        HOOK(FIXED, ", \"disable-device-node-modification\"") ","                                \
        HOOK(FIXED, ", \"update-application-profile\"") "], "

/* The full set, looked up under the fake root, host paths under another
 * driver root (the plugin-in-a-container case), nvidia-cdi-hook. */
static void test_full_spec(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_driver_files files;
        struct kdev_err e = {0};
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = DRV "/", .lookup_root = f->root, .driver_version = VERSION,
                .hook_path = f->hook};
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 6);
        assert_int_equal(files.n_libraries, 6);
        assert_int_equal(files.n_lib_dirs, 2);
        assert_string_equal(files.lib_dirs[0], "/usr/lib64");
        assert_string_equal(files.lib_dirs[1], LIBDIR);
        assert_int_equal(files.n_firmware, 2);
        assert_int_equal(files.n_binaries, 3);
        assert_int_equal(files.n_ipc, 1);
        assert_string_equal(files.hook_path, f->hook);
        assert_true(files.hook_visible);
        assert_string_equal(files.driver_root, DRV);
        check_spec(&files,
                   SPEC_HEAD ENV_LIBCUDA HOOKS("\"nvidia-cdi-hook\"") "\"mounts\": ["
                             MOUNTS_UNDER(DRV) "]}}",
                   f->hook, 12);
        kdev_nvidia_driver_files_clear(&files);
        kdev_nvidia_driver_files_clear(&files); /* idempotent */
        kdev_nvidia_driver_files_clear(NULL);
}

/* nvidia-ctk takes the hooks under its "hook" subcommand; lookup_root NULL
 * looks under the driver root, which is then the host path prefix. */
static void test_ctk_and_same_root(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_driver_files files;
        struct kdev_err e = {0};
        char root_slash[160];
        snprintf(root_slash, sizeof(root_slash), "%s//", f->root);
        char ctk[256];
        snprintf(ctk, sizeof(ctk), "%s/../bin/nvidia-ctk", f->root);
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = root_slash, .driver_version = VERSION, .hook_path = ctk};
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 6);
        assert_string_equal(files.hook_path, ctk);
        /* host paths: <root>/<path>; built from a template with @HOOK@ = root */
        char *hooks = subst(HOOKS("\"nvidia-ctk\", \"hook\""), "@HOOK@/../bin/nvidia-ctk");
        char tmpl[16384];
        snprintf(tmpl, sizeof(tmpl), "%s%s%s%s%s", SPEC_HEAD, ENV_LIBCUDA, hooks,
                 "\"mounts\": [", MOUNTS_UNDER("@HOOK@") "]}}");
        free(hooks);
        check_spec(&files, tmpl, f->root, 12);
        kdev_nvidia_driver_files_clear(&files);
}

/* A hook binary kdev does not see (a host path, or not executable here):
 * the hooks are written with the path as given (NVIDIA does; the daemon
 * warns). No path, or a relative one (CDI needs absolute hook paths): the
 * mounts only. */
static void test_no_hook(void **state)
{
        struct fx *f = *state;
        char missing[160], notexec[160];
        snprintf(missing, sizeof(missing), "%s/bin/nvidia-cdi-hook-missing", f->dir);
        snprintf(notexec, sizeof(notexec), "%s/bin/not-executable", f->dir);
        const char *hooks[] = {missing, notexec, f->dir, "", NULL, "nvidia-cdi-hook"};
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
                struct kdev_nvidia_driver_files files;
                struct kdev_err e = {0};
                struct kdev_nvidia_driver_files_options o = {
                        .driver_root = "/", .lookup_root = f->root, .driver_version = VERSION,
                        .hook_path = hooks[i]};
                assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 6);
                assert_false(files.hook_visible);
                assert_string_equal(files.driver_root, "");
                if (i < 3) {
                        assert_string_equal(files.hook_path, hooks[i]);
                        const char *slash = strrchr(hooks[i], '/');
                        char fixed[128], *h;
                        snprintf(fixed, sizeof(fixed), "\"%s\"", slash + 1);
                        h = subst(HOOKS("@FIXED@"), "@HOOK@");
                        char *spec = malloc(strlen(h) + 16384), *q;
                        /* @FIXED@ -> the base name */
                        size_t n = 0;
                        for (q = h; *q;) {
                                if (strncmp(q, "@FIXED@", 7) == 0) {
                                        n += (size_t)sprintf(spec + n, "%s", fixed);
                                        q += 7;
                                } else {
                                        spec[n++] = *q++;
                                }
                        }
                        spec[n] = '\0';
                        char tmpl[16384];
                        snprintf(tmpl, sizeof(tmpl), "%s%s%s\"mounts\": [%s]}}", SPEC_HEAD,
                                 ENV_LIBCUDA, spec, MOUNTS_UNDER(""));
                        free(spec);
                        free(h);
                        check_spec(&files, tmpl, hooks[i], 12);
                } else {
                        assert_null(files.hook_path);
                        check_spec(&files, SPEC_HEAD ENV_LIBCUDA "\"mounts\": [" MOUNTS_UNDER("") "]}}",
                                   NULL, 12);
                }
                kdev_nvidia_driver_files_clear(&files);
        }
}

/* --cdi-disable-hooks: each named hook is left out; "all" leaves none.
 * --cdi-feature-flags disable-ipc-discoverer: no IPC sockets. */
static void test_disabled_hooks_and_features(void **state)
{
        struct fx *f = *state;
        unsigned off = 0, feat = 0;
        char msg[512];
        assert_int_equal(kdev_nvidia_cdi_hooks_parse("enable-cuda-compat, update-ldcache,,"
                                                     "disable-device-node-modification,"
                                                     "update-application-profile",
                                                     &off, msg, sizeof(msg)),
                         0);
        assert_int_equal(off, KDEV_NVIDIA_HOOK_ENABLE_CUDA_COMPAT |
                                      KDEV_NVIDIA_HOOK_UPDATE_LDCACHE |
                                      KDEV_NVIDIA_HOOK_DISABLE_DEVICE_NODE_MODIFICATION |
                                      KDEV_NVIDIA_HOOK_UPDATE_APPLICATION_PROFILE);
        assert_int_equal(kdev_nvidia_cdi_features_parse("disable-ipc-discoverer", &feat, msg,
                                                        sizeof(msg)),
                         0);
        assert_int_equal(feat, KDEV_NVIDIA_CDI_DISABLE_IPC);
        struct kdev_nvidia_driver_files files;
        struct kdev_err e = {0};
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = "/", .lookup_root = f->root, .driver_version = VERSION,
                .hook_path = f->hook, .disabled_hooks = off, .features = feat};
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 6);
        assert_int_equal(files.n_ipc, 0);
        struct kdev_container_edits ed = {0};
        assert_int_equal(kdev_nvidia_driver_files_edits(&files, &ed, &e), 11);
        assert_int_equal(ed.n_hooks, 1);
        assert_string_equal(ed.hooks[0].args[1], "create-symlinks");
        kdev_container_edits_clear(&ed);
        kdev_nvidia_driver_files_clear(&files);

        assert_int_equal(kdev_nvidia_cdi_hooks_parse("all", &off, msg, sizeof(msg)), 0);
        assert_int_equal(off, KDEV_NVIDIA_HOOK_ALL);
        o.disabled_hooks = off;
        o.features = 0;
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 6);
        ed = (struct kdev_container_edits){0};
        assert_int_equal(kdev_nvidia_driver_files_edits(&files, &ed, &e), 12);
        assert_int_equal(ed.n_hooks, 0);
        assert_int_equal(ed.n_env, 1);
        kdev_container_edits_clear(&ed);
        kdev_nvidia_driver_files_clear(&files);

        assert_int_equal(kdev_nvidia_cdi_hooks_parse("update-ldcache,create-symlink", &off, msg,
                                                     sizeof(msg)),
                         -EINVAL);
        assert_string_equal(msg, "unknown CDI hook: create-symlink (expected create-symlinks, "
                                 "enable-cuda-compat, update-ldcache, "
                                 "disable-device-node-modification, update-application-profile,"
                                 " chmod or all)");
        assert_int_equal(kdev_nvidia_cdi_features_parse("all", &feat, msg, sizeof(msg)), -EINVAL);
        assert_string_equal(msg, "unknown CDI feature flag: all (expected "
                                 "enable-explicit-driver-libraries, disable-nvsandboxutils, "
                                 "enable-coherent-annotations, disable-multiple-csv-devices, "
                                 "no-additional-gids-for-device-nodes, disable-ipc-discoverer)");
}

/* No library of the version: nothing at all (not even the binaries or the
 * hook, which exist), and the spec keeps its device-level edits only. */
static void test_nothing_found(void **state)
{
        struct fx *f = *state;
        char empty[160];
        snprintf(empty, sizeof(empty), "%s/empty", f->dir);
        mkdirs(empty);
        struct {
                const char *root, *version;
        } cases[] = {
                {f->root, "535.54.04"}, {f->root, ""}, {f->root, NULL}, {f->root, "../" VERSION},
                {empty, VERSION},       {"/nonexistent-kdev-root", VERSION},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_nvidia_driver_files files;
                struct kdev_err e = {0};
                struct kdev_nvidia_driver_files_options o = {
                        .driver_root = cases[i].root, .driver_version = cases[i].version,
                        .hook_path = f->hook};
                assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 0);
                assert_int_equal(files.n_libraries + files.n_firmware + files.n_binaries +
                                         files.n_ipc,
                                 0);
                assert_null(files.hook_path);
                check_spec(&files,
                           "{\"cdiVersion\": \"0.3.0\", \"kind\": \"k8s.test.com/gpu\", "
                           "\"devices\": [{\"name\": \"d\", \"containerEdits\": {\"deviceNodes\":"
                           " [{\"path\": \"/dev/nvidia0\"}]}}]}",
                           NULL, 0);
                kdev_nvidia_driver_files_clear(&files);
        }
}

/* Only libcuda, no opticalflow: one link; libGLX_nvidia gets the indirect link. */
static void test_links(void **state)
{
        struct fx *f = *state;
        char root[160];
        snprintf(root, sizeof(root), "%s/root2", f->dir);
        touch(root, "usr/lib64/libcuda.so." VERSION, 0644);
        touch(root, "usr/lib64/libGLX_nvidia.so." VERSION, 0644);
        struct kdev_nvidia_driver_files files;
        struct kdev_err e = {0};
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = "/", .lookup_root = root, .driver_version = VERSION,
                .hook_path = f->hook};
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 2);
#define TAIL_HOOKS(DIR)                                                                          \
        HOOK("\"nvidia-cdi-hook\"", ", \"enable-cuda-compat\", \"--host-driver-version=" VERSION    \
                                    "\"") ","                                                    \
        HOOK("\"nvidia-cdi-hook\"", ", \"update-ldcache\", \"--folder\", \"" DIR "\"") ","         \
        HOOK("\"nvidia-cdi-hook\"", ", \"disable-device-node-modification\"") ","                \
        HOOK("\"nvidia-cdi-hook\"", ", \"update-application-profile\"")
        check_spec(&files,
                   SPEC_HEAD "\"env\": [\"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64\"], \"hooks\": ["
                   HOOK("\"nvidia-cdi-hook\"",
                        ", \"create-symlinks\", \"--link\", \"libGLX_nvidia.so." VERSION
                        "::/usr/lib64/libGLX_indirect.so.0\", \"--link\", "
                        "\"libcuda.so.1::/usr/lib64/libcuda.so\"") ","
                   TAIL_HOOKS("/usr/lib64") "], \"mounts\": ["
                   MOUNT("/usr/lib64/libGLX_nvidia.so." VERSION,
                         "/usr/lib64/libGLX_nvidia.so." VERSION) ","
                   MOUNT("/usr/lib64/libcuda.so." VERSION,
                         "/usr/lib64/libcuda.so." VERSION) "]}}",
                   f->hook, 2);
        kdev_nvidia_driver_files_clear(&files);

        /* a library with no link: no create-symlinks */
        snprintf(root, sizeof(root), "%s/root3", f->dir);
        touch(root, "lib64/libnvidia-ml.so." VERSION, 0644);
        o.lookup_root = root;
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 1);
        check_spec(&files,
                   SPEC_HEAD "\"env\": [\"NVIDIA_CTK_LIBCUDA_DIR=/lib64\"], \"hooks\": ["
                   TAIL_HOOKS("/lib64") "], \"mounts\": ["
                   MOUNT("/lib64/libnvidia-ml.so." VERSION, "/lib64/libnvidia-ml.so." VERSION)
                   "]}}",
                   f->hook, 1);
        kdev_nvidia_driver_files_clear(&files);
}

/* No library of the version in the search paths: the root's ld.so.cache
 * names the directory (a library outside the search paths, as a
 * distribution's ld.so.conf.d puts it). The cache is glibc's new format
 * behind an old-format table, one 64-bit entry, one 32-bit entry. */
static void test_ldcache(void **state)
{
        struct fx *f = *state;
        char root[160], path[256];
        snprintf(root, sizeof(root), "%s/root4", f->dir);
        touch(root, "opt/nvidia/lib/libcuda.so." VERSION, 0644);
        touch(root, "opt/nvidia/lib/libnvidia-ml.so." VERSION, 0644);
        touch(root, "opt/nvidia/lib32/libcuda.so." VERSION, 0644);
        const char *libs[] = {"/opt/nvidia/lib/libcuda.so." VERSION,
                              "/opt/nvidia/lib32/libcuda.so." VERSION};
        const int32_t flags[] = {0x0303, 0x0003}; /* x86-64 libc6, i386 libc6 */
        unsigned char buf[1024] = {0};
        size_t off = 0;
        /* old table: magic, nlibs 0; then the new header at a 4-byte boundary */
        memcpy(buf, "ld.so-1.7.0", 11);
        off = 16;
        unsigned char *h = buf + off;
        memcpy(h, "glibc-ld.so.cache1.1", 20);
        uint32_t n = 2;
        memcpy(h + 20, &n, 4);
        size_t strings = 48 + 2 * 24;
        for (size_t i = 0; i < 2; i++) {
                unsigned char *ent = h + 48 + i * 24;
                uint32_t key = (uint32_t)strings, value = (uint32_t)strings;
                memcpy(ent, &flags[i], 4);
                memcpy(ent + 4, &key, 4);
                memcpy(ent + 8, &value, 4);
                memcpy(h + strings, libs[i], strlen(libs[i]) + 1);
                strings += strlen(libs[i]) + 1;
        }
        snprintf(path, sizeof(path), "%s/etc", root);
        mkdirs(path);
        snprintf(path, sizeof(path), "%s/etc/ld.so.cache", root);
        FILE *c = fopen(path, "wb");
        assert_non_null(c);
        assert_int_equal(fwrite(buf, 1, off + strings, c), off + strings);
        fclose(c);
        struct kdev_nvidia_driver_files files;
        struct kdev_err e = {0};
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = "/", .lookup_root = root, .driver_version = VERSION};
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 2);
        assert_int_equal(files.n_lib_dirs, 1);
        assert_string_equal(files.lib_dirs[0], "/opt/nvidia/lib");
        assert_string_equal(files.libraries[0], "/opt/nvidia/lib/libcuda.so." VERSION);
        assert_string_equal(files.libraries[1], "/opt/nvidia/lib/libnvidia-ml.so." VERSION);
        kdev_nvidia_driver_files_clear(&files);
        /* a truncated cache: no library, no crash */
        c = fopen(path, "wb");
        assert_int_equal(fwrite(buf, 1, off + 60, c), off + 60);
        fclose(c);
        assert_int_equal(kdev_nvidia_driver_files_find(&o, &files, &e), 0);
        kdev_nvidia_driver_files_clear(&files);
}

static void test_lookup_root(void **state)
{
        struct fx *f = *state;
        char missing[160];
        snprintf(missing, sizeof(missing), "%s/no-such-dir", f->dir);
        assert_string_equal(kdev_nvidia_driver_lookup_root("/", f->root), f->root);
        assert_string_equal(kdev_nvidia_driver_lookup_root("/drv", missing), "/drv");
        assert_string_equal(kdev_nvidia_driver_lookup_root("/drv", ""), "/drv");
        assert_string_equal(kdev_nvidia_driver_lookup_root("/drv", NULL), "/drv");
        assert_string_equal(kdev_nvidia_driver_lookup_root(NULL, NULL), "/");
        assert_string_equal(kdev_nvidia_driver_lookup_root("", missing), "/");
        /* a file is not a directory */
        char file[256];
        snprintf(file, sizeof(file), "%s/usr/bin/nvidia-smi", f->root);
        assert_string_equal(kdev_nvidia_driver_lookup_root("/drv", file), "/drv");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_full_spec),
                cmocka_unit_test(test_ctk_and_same_root),
                cmocka_unit_test(test_no_hook),
                cmocka_unit_test(test_disabled_hooks_and_features),
                cmocka_unit_test(test_nothing_found),
                cmocka_unit_test(test_links),
                cmocka_unit_test(test_ldcache),
                cmocka_unit_test(test_lookup_root),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
