/* The driver-root rule (nvidia/roots.h) as a table over the layouts kdev
 * meets, with exact values: where NVML, the driver files and the device
 * nodes are looked up, and which host paths the CDI edits carry.
 *
 * Layouts (host driver root + container driver root):
 *   - "/" + "/": NVIDIA's chart with the host's root mounted as the root;
 *   - "/run/nvidia/driver" + "<tmp>/driver-root": the GPU operator's driver
 *     container, its root mounted in the plugin's pod (with dev/);
 *   - a custom pair "/opt/nvidia" + "<tmp>/ctr" without dev/ and
 *     --dev-root "/srv/dev-root": device nodes from the plugin's own /dev,
 *     written under the dev root;
 *   - "/opt/nvidia" + a missing container root: kdev on the host, the host
 *     roots looked at directly.
 * The fake container roots hold one driver of version 550.90.07 and the
 * control node files. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvidia/container_edits.h"
#include "nvidia/driver_files.h"
#include "nvidia/roots.h"

#define VERSION "550.90.07"
#define LIBDIR "/usr/lib/x86_64-linux-gnu"

static char tmp[64];

static void put(const char *base, const char *rel)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", base, rel);
        for (char *p = path + 1; *p; p++) {
                if (*p == '/') {
                        *p = '\0';
                        mkdir(path, 0755);
                        *p = '/';
                }
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

static void fake_driver(const char *root, bool dev)
{
        put(root, "usr/lib/x86_64-linux-gnu/libcuda.so." VERSION);
        put(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so." VERSION);
        put(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
        if (dev) {
                put(root, "dev/nvidiactl");
                put(root, "dev/nvidia-uvm");
        }
}

static int setup(void **state)
{
        (void)state;
        snprintf(tmp, sizeof(tmp), "/tmp/kdev-roots-XXXXXX");
        if (!mkdtemp(tmp))
                return -1;
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/driver-root", tmp);
        fake_driver(p, true);
        snprintf(p, sizeof(p), "%s/ctr", tmp);
        fake_driver(p, false);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        return system(cmd) == 0 ? 0 : -1;
}

struct row {
        const char *name;
        const char *driver_root, *dev_root, *ctr; /* ctr: relative to tmp, or absolute */
        /* expected: lookup roots (relative to tmp when they start with '@') */
        const char *driver, *dev, *dev_host;
        bool in_container;
        const char *nvml;     /* the NVML library path (from tmp), NULL: by name */
        const char *ctl_host; /* host path of /dev/nvidiactl in the edits, NULL: absent */
        const char *lib_host; /* host path of libcuda's mount, NULL: no driver found */
};

static const struct row rows[] = {
        {"/ + /", "/", NULL, "/", "", "", "", true, NULL, NULL, NULL},
        {"/run/nvidia/driver + /driver-root", "/run/nvidia/driver", NULL, "@/driver-root",
         "@/driver-root", "@/driver-root", "/run/nvidia/driver", true,
         "@/driver-root" LIBDIR "/libnvidia-ml.so.1", "/run/nvidia/driver/dev/nvidiactl",
         "/run/nvidia/driver" LIBDIR "/libcuda.so." VERSION},
        {"custom /opt/nvidia + ctr without dev/", "/opt/nvidia/", "/srv/dev-root", "@/ctr/",
         "@/ctr", "", "/srv/dev-root", true, "@/ctr" LIBDIR "/libnvidia-ml.so.1",
         "/srv/dev-root/dev/nvidiactl", "/opt/nvidia" LIBDIR "/libcuda.so." VERSION},
        {"host /opt/nvidia, no container root", "/opt/nvidia", NULL, "@/missing",
         "/opt/nvidia", "/opt/nvidia", "/opt/nvidia", false, NULL, NULL, NULL},
};

/* |v| with a leading '@' replaced by tmp. */
static const char *at(const char *v, char *buf, size_t size)
{
        if (!v || v[0] != '@')
                return v;
        snprintf(buf, size, "%s%s", tmp, v + 1);
        return buf;
}

static void test_layouts(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
                const struct row *r = &rows[i];
                char b1[PATH_MAX], b2[PATH_MAX], b3[PATH_MAX], b4[PATH_MAX];
                struct kdev_nvidia_roots roots;
                struct kdev_err e = {0};
                print_message("layout %s\n", r->name);
                assert_int_equal(kdev_nvidia_roots_resolve(r->driver_root, r->dev_root,
                                                           at(r->ctr, b1, sizeof(b1)), &roots,
                                                           &e),
                                 0);
                assert_string_equal(roots.driver, at(r->driver, b2, sizeof(b2)));
                assert_string_equal(roots.dev, at(r->dev, b3, sizeof(b3)));
                assert_string_equal(roots.dev_host, r->dev_host);
                assert_int_equal(roots.in_container, r->in_container);

                /* NVML: under the lookup root, else by name */
                struct kdev_nvml_options no;
                int found = kdev_nvidia_roots_nvml(&roots, &no, b4, sizeof(b4), NULL);
                if (r->nvml) {
                        assert_int_equal(found, 1);
                        assert_string_equal(no.library_path, at(r->nvml, b2, sizeof(b2)));
                } else {
                        assert_int_equal(found, 0);
                        assert_null(no.library_path);
                }
                assert_null(no.driver_root);

                /* the common edits: control nodes and driver files */
                struct kdev_nvidia_driver_files files;
                struct kdev_nvidia_driver_files_options fo = {
                        .driver_root = roots.host_driver,
                        .lookup_root = kdev_nvidia_root_text(roots.driver),
                        .driver_version = VERSION,
                        .hook_path = "/usr/bin/nvidia-cdi-hook"};
                assert_true(kdev_nvidia_driver_files_find(&fo, &files, &e) >= 0);
                struct kdev_container_edits ed = {0};
                assert_int_equal(kdev_nvidia_common_edits_at(&roots, &files, &ed, &e), 0);
                const char *ctl = NULL;
                for (size_t k = 0; k < ed.n_nodes; k++)
                        if (strcmp(ed.nodes[k].path, "/dev/nvidiactl") == 0)
                                ctl = ed.nodes[k].host_path;
                /* looked up in this machine's /dev when roots.dev is "/" */
                struct stat st;
                bool here = r->dev[0] != '\0' || stat("/dev/nvidiactl", &st) == 0;
                if (r->ctl_host && here) {
                        assert_non_null(ctl);
                        assert_string_equal(ctl, r->ctl_host);
                } else if (r->dev[0] != '\0') {
                        assert_null(ctl); /* not under that root */
                }
                if (r->lib_host) {
                        assert_int_equal(files.n_libraries, 2);
                        assert_string_equal(ed.mounts[0].host_path, r->lib_host);
                        assert_string_equal(ed.mounts[0].container_path,
                                            LIBDIR "/libcuda.so." VERSION);
                        assert_int_equal(ed.n_hooks, 5);
                        assert_string_equal(ed.hooks[0].path, "/usr/bin/nvidia-cdi-hook");
                        assert_string_equal(ed.hooks[0].args[3],
                                            "libcuda.so.1::" LIBDIR "/libcuda.so");
                        assert_string_equal(ed.env[0].key, "NVIDIA_CTK_LIBCUDA_DIR");
                        assert_string_equal(ed.env[0].value, LIBDIR);
                }
                /* a GPU's node: under dev_host */
                struct kdev_nvidia_logical gpu = {.minor = 3};
                struct kdev_container_edits dv = {0};
                assert_int_equal(kdev_nvidia_device_edits_at(&roots, &gpu, &dv, &e), 0);
                snprintf(b1, sizeof(b1), "%s/dev/nvidia3", r->dev_host);
                assert_string_equal(dv.nodes[0].host_path, b1);
                kdev_container_edits_clear(&dv);
                kdev_container_edits_clear(&ed);
                kdev_nvidia_driver_files_clear(&files);
        }
}

/* A whole GPU's DRM nodes and by-path links (nvcdi v1.20 dgpu), in the
 * driver-container layout: sysfs from a fake tree, nodes and links looked up
 * under the container root, written under the host driver root. */
static void test_drm_nodes(void **state)
{
        (void)state;
        char sys[256], ctr[256], p[PATH_MAX];
        snprintf(sys, sizeof(sys), "%s/sys", tmp);
        snprintf(ctr, sizeof(ctr), "%s/driver-root", tmp);
        /* sysfs: card1, renderD128 and a controlD65 without a node */
        put(sys, "bus/pci/devices/0000:3b:00.0/drm/card1/dev");
        put(sys, "bus/pci/devices/0000:3b:00.0/drm/renderD128/dev");
        put(sys, "bus/pci/devices/0000:3b:00.0/drm/controlD65/dev");
        put(ctr, "dev/dri/card1");
        put(ctr, "dev/dri/renderD128");
        put(ctr, "dev/dri/card2");
        snprintf(p, sizeof(p), "%s/dev/dri/by-path", ctr);
        mkdir(p, 0755);
        static const char *const links[][2] = {
                {"../card1", "pci-0000:3b:00.0-card"},
                {"../renderD128", "pci-0000:3b:00.0-render"},
                {"../card2", "pci-0000:3c:00.0-card"}, /* another GPU's */
        };
        for (size_t i = 0; i < 3; i++) {
                snprintf(p, sizeof(p), "%s/dev/dri/by-path/%s", ctr, links[i][1]);
                assert_int_equal(symlink(links[i][0], p), 0);
        }
        struct kdev_nvidia_roots roots;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_roots_resolve("/run/nvidia/driver", NULL, ctr, &roots, &e), 0);
        struct kdev_nvidia_logical gpu = {.minor = 3,
                                          .pci_bus_id = "0000:3b:00.0",
                                          .sysfs_root = sys,
                                          .hook_path = "/usr/bin/nvidia-cdi-hook"};
        struct kdev_container_edits ed = {0};
        assert_int_equal(kdev_nvidia_device_edits_at(&roots, &gpu, &ed, &e), 0);
        assert_int_equal(ed.n_nodes, 3);
        static const char *const want[3][2] = {
                {"/dev/nvidia3", "/run/nvidia/driver/dev/nvidia3"},
                {"/dev/dri/card1", "/run/nvidia/driver/dev/dri/card1"},
                {"/dev/dri/renderD128", "/run/nvidia/driver/dev/dri/renderD128"},
        };
        for (size_t i = 0; i < 3; i++) {
                assert_string_equal(ed.nodes[i].path, want[i][0]);
                assert_string_equal(ed.nodes[i].host_path, want[i][1]);
                assert_string_equal(ed.nodes[i].permissions, "rw");
        }
        assert_int_equal(ed.n_hooks, 1);
        assert_string_equal(ed.hooks[0].hook_name, "createContainer");
        assert_string_equal(ed.hooks[0].path, "/usr/bin/nvidia-cdi-hook");
        static const char *const args[] = {
                "nvidia-cdi-hook", "create-symlinks", "--link",
                "../card1::/dev/dri/by-path/pci-0000:3b:00.0-card", "--link",
                "../renderD128::/dev/dri/by-path/pci-0000:3b:00.0-render"};
        assert_int_equal(ed.hooks[0].n_args, 6);
        for (size_t i = 0; i < 6; i++)
                assert_string_equal(ed.hooks[0].args[i], args[i]);
        kdev_container_edits_clear(&ed);

        /* create-symlinks disabled: the nodes, no hook */
        gpu.disabled_hooks = KDEV_NVIDIA_HOOK_CREATE_SYMLINKS;
        assert_int_equal(kdev_nvidia_device_edits_at(&roots, &gpu, &ed, &e), 0);
        assert_int_equal(ed.n_nodes, 3);
        assert_int_equal(ed.n_hooks, 0);
        kdev_container_edits_clear(&ed);

        /* a MIG device, or a GPU without a drm directory: its nodes only */
        struct kdev_nvidia_logical mig = {.minor = 3, .mig = true, .gi_cap = 21, .ci_cap = 22,
                                          .pci_bus_id = "0000:3b:00.0", .sysfs_root = sys,
                                          .hook_path = "/usr/bin/nvidia-cdi-hook"};
        assert_int_equal(kdev_nvidia_device_edits_at(&roots, &mig, &ed, &e), 0);
        assert_int_equal(ed.n_nodes, 3);
        assert_string_equal(ed.nodes[1].path, "/dev/nvidia-caps/nvidia-cap21");
        assert_int_equal(ed.n_hooks, 0);
        kdev_container_edits_clear(&ed);
        struct kdev_nvidia_logical other = {.minor = 4, .pci_bus_id = "0000:3c:00.0",
                                            .sysfs_root = sys,
                                            .hook_path = "/usr/bin/nvidia-cdi-hook"};
        assert_int_equal(kdev_nvidia_device_edits_at(&roots, &other, &ed, &e), 0);
        assert_int_equal(ed.n_nodes, 1);
        assert_string_equal(ed.nodes[0].path, "/dev/nvidia4");
        assert_int_equal(ed.n_hooks, 0);
        kdev_container_edits_clear(&ed);
}

static void test_errors(void **state)
{
        (void)state;
        char longp[PATH_MAX + 8];
        memset(longp, 'a', sizeof(longp) - 1);
        longp[0] = '/';
        longp[sizeof(longp) - 1] = '\0';
        struct kdev_nvidia_roots roots;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_roots_resolve(longp, NULL, NULL, &roots, &e),
                         -ENAMETOOLONG);
        assert_memory_equal(e.msg, "driver root too long: /aaa", 26);
        /* NULLs: "/" everywhere, no container */
        assert_int_equal(kdev_nvidia_roots_resolve(NULL, NULL, NULL, &roots, &e), 0);
        assert_string_equal(roots.host_driver, "");
        assert_string_equal(kdev_nvidia_root_text(roots.dev_host), "/");
        assert_false(roots.in_container);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_layouts),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_drm_nodes),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
