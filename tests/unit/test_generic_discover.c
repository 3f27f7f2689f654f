/* Generic backend discovery on a fixture tree (regular files stand in for
 * device nodes) and on this machine's /dev. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "generic/generic.h"

static char g_root[64];            /* fixture root as created */
static char g_real_root[PATH_MAX]; /* its realpath */

static void touch(const char *rel)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s%s", g_root, rel);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

static void mkd(const char *rel)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s%s", g_root, rel);
        assert_int_equal(mkdir(p, 0755), 0);
}

static void lnk(const char *target, const char *rel)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s%s", g_root, rel);
        assert_int_equal(symlink(target, p), 0);
}

static int setup(void **state)
{
        (void)state;
        strcpy(g_root, "/tmp/kdev-gdisc-XXXXXX");
        if (!mkdtemp(g_root))
                return -1;
        if (!realpath(g_root, g_real_root))
                return -1;
        mkd("/dev");
        touch("/dev/fuse");
        for (int i = 0; i < 12; i++) {
                char n[64];
                snprintf(n, sizeof(n), "/dev/ttyS%d", i);
                touch(n);
        }
        lnk("ttyS3", "/dev/link0");
        lnk("/nonexistent/kdev", "/dev/link1");
        lnk("/dev/null", "/dev/link2"); /* a real char device outside the root */
        mkd("/dev/link3");              /* a directory: skipped */
        touch("/dev/a0");
        touch("/dev/a1");
        touch("/dev/a2");
        touch("/dev/b");
        mkd("/dev/p");
        mkd("/dev/q");
        touch("/dev/p/x");
        touch("/dev/q/x");
        touch("/dev/with space");
        touch("/dev/Laaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"); /* 64 */
        mkd("/dev/many");
        for (int i = 0; i <= KDEV_GENERIC_MATCHES_MAX; i++) {
                char n[64];
                snprintf(n, sizeof(n), "/dev/many/m%d", i);
                touch(n);
        }
        mkd("/r[1]");
        mkd("/r[1]/dev");
        touch("/r[1]/dev/fuse");
        touch("/file");
        mkd("/w");
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/w/fifo", g_root);
        if (mkfifo(p, 0644) < 0)
                return -1;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/w/sock", g_root);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -1;
        close(fd);
        return 0;
}

static int rm_tree(const char *p)
{
        struct stat st;
        if (lstat(p, &st) < 0)
                return -1;
        if (S_ISDIR(st.st_mode)) {
                char pat[PATH_MAX + 8];
                /* glob cannot take the bracketed name literally; list with opendir-free glob
                 * on an escaped pattern instead */
                size_t o = 0;
                for (const char *s = p; *s; s++) {
                        if (strchr("*?[]\\", *s))
                                pat[o++] = '\\';
                        pat[o++] = *s;
                }
                strcpy(pat + o, "/*");
                glob_t g;
                if (glob(pat, GLOB_PERIOD, NULL, &g) == 0) {
                        for (size_t i = 0; i < g.gl_pathc; i++) {
                                const char *b = strrchr(g.gl_pathv[i], '/') + 1;
                                if (strcmp(b, ".") && strcmp(b, ".."))
                                        rm_tree(g.gl_pathv[i]);
                        }
                }
                globfree(&g);
                return rmdir(p);
        }
        return unlink(p);
}

static int teardown(void **state)
{
        (void)state;
        return rm_tree(g_root);
}

/* Renders devices as "id[c=h:p,...] id[...]"; host paths under the fixture
 * root are shown as "@/rel". */
static void render(const struct kdev_resource *r, char *buf, size_t len)
{
        size_t used = 0;
        buf[0] = '\0';
        size_t rl = strlen(g_real_root);
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_device *d = &r->devices[i];
                assert_true(d->healthy);
                assert_int_equal(d->numa_node, -1);
                used += (size_t)snprintf(buf + used, len - used, "%s%s[", i ? " " : "", d->id);
                for (size_t k = 0; k < d->n_specs; k++) {
                        const char *h = d->specs[k].host_path;
                        bool under = strncmp(h, g_real_root, rl) == 0;
                        used += (size_t)snprintf(buf + used, len - used, "%s%s=%s%s:%s",
                                                 k ? "," : "", d->specs[k].container_path,
                                                 under ? "@" : "", under ? h + rl : h,
                                                 d->specs[k].permissions);
                }
                used += (size_t)snprintf(buf + used, len - used, "]");
        }
}

/* Collects warnings, one per line. */
struct warnings {
        char text[16384];
        size_t len;
        size_t n;
};

static void collect(void *arg, const char *msg)
{
        struct warnings *w = arg;
        assert_null(strchr(msg, '\n'));
        w->len += (size_t)snprintf(w->text + w->len, sizeof(w->text) - w->len, "%s\n", msg);
        assert_true(w->len < sizeof(w->text));
        w->n++;
}

static struct kdev_generic_config *parse(const char *text)
{
        struct kdev_generic_config *cfg = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_generic_config_parse("t.yaml", text, strlen(text), &cfg, &e) != 0)
                fail_msg("parse: %s", e.msg);
        return cfg;
}

#define HEAD "version: v1\ngeneric:\n  devices:\n"

struct disc_case {
        const char *yaml; /* one resource */
        const char *want;
};

static const struct disc_case cases[] = {
        /* count > 1: replicas */
        {HEAD "    - name: example.com/fuse\n"
              "      groups: [{count: 3, paths: [{path: /dev/fuse}]}]\n",
         "fuse::0[/dev/fuse=@/dev/fuse:rw] fuse::1[/dev/fuse=@/dev/fuse:rw] "
         "fuse::2[/dev/fuse=@/dev/fuse:rw]"},
        /* natural order; directory and dangling links skipped; symlinks resolved */
        {HEAD "    - name: example.com/tty\n"
              "      groups: [{paths: [{path: /dev/ttyS1*}]}]\n",
         "ttyS1[/dev/ttyS1=@/dev/ttyS1:rw] ttyS10[/dev/ttyS10=@/dev/ttyS10:rw] "
         "ttyS11[/dev/ttyS11=@/dev/ttyS11:rw]"},
        {HEAD "    - name: example.com/link\n"
              "      groups: [{paths: [{path: /dev/link*, permissions: rwm}]}]\n",
         "link0[/dev/link0=@/dev/ttyS3:rwm] link2[/dev/link2=/dev/null:rwm]"},
        /* empty match: 0 devices, no error */
        {HEAD "    - name: example.com/none\n"
              "      groups: [{paths: [{path: /dev/nothing*}]}]\n",
         ""},
        /* one path with no match empties the group */
        {HEAD "    - name: example.com/none\n"
              "      groups: [{paths: [{path: /dev/a*}, {path: /dev/nothing}]}]\n",
         ""},
        /* mountPath: literal and directory */
        {HEAD "    - name: example.com/m\n"
              "      groups: [{paths: [{path: /dev/a*, mountPath: /dev/serial/},\n"
              "                        {path: /dev/b, mountPath: /dev/bee, limit: 2}]}]\n",
         "a0[/dev/serial/a0=@/dev/a0:rw,/dev/bee=@/dev/b:rw] "
         "a1[/dev/serial/a1=@/dev/a1:rw,/dev/bee=@/dev/b:rw]"},
        /* sets = min(matches x limit): 3 a's, b shared 3 times */
        {HEAD "    - name: example.com/m\n"
              "      groups: [{paths: [{path: /dev/a*}, {path: /dev/b, limit: 5}]}]\n",
         "a0[/dev/a0=@/dev/a0:rw,/dev/b=@/dev/b:rw] a1[/dev/a1=@/dev/a1:rw,/dev/b=@/dev/b:rw] "
         "a2[/dev/a2=@/dev/a2:rw,/dev/b=@/dev/b:rw]"},
        /* first path reused: "-k" suffix; set i takes match i mod n */
        {HEAD "    - name: example.com/m\n"
              "      groups: [{count: 2, paths: [{path: /dev/b, limit: 2}, {path: /dev/a*}]}]\n",
         "b-0::0[/dev/b=@/dev/b:rw,/dev/a0=@/dev/a0:rw] "
         "b-0::1[/dev/b=@/dev/b:rw,/dev/a0=@/dev/a0:rw] "
         "b-1::0[/dev/b=@/dev/b:rw,/dev/a1=@/dev/a1:rw] "
         "b-1::1[/dev/b=@/dev/b:rw,/dev/a1=@/dev/a1:rw]"},
        /* IDs that collide across groups get g<index>- (only those groups) */
        {HEAD "    - name: example.com/c\n"
              "      groups:\n"
              "        - paths: [{path: /dev/ttyS1}]\n"
              "        - paths: [{path: /dev/fuse}]\n"
              "        - paths: [{path: /dev/ttyS1, permissions: r}]\n",
         "g0-ttyS1[/dev/ttyS1=@/dev/ttyS1:rw] fuse[/dev/fuse=@/dev/fuse:rw] "
         "g2-ttyS1[/dev/ttyS1=@/dev/ttyS1:r]"},
};

/* The physical devices: one per set, its replicas pointing to it; IDs
 * "<resource>/<device ID without ::n>". */
static void test_discover_physical(void **state)
{
        (void)state;
        struct kdev_generic_options opts = {.root = g_root, .allow_regular_files = true};
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/m\n"
                           "      groups: [{count: 2, paths: [{path: /dev/b, limit: 2}, "
                           "{path: /dev/a*}]}]\n"
                           "    - name: example.com/c\n"
                           "      groups:\n"
                           "        - paths: [{path: /dev/ttyS1}]\n"
                           "        - paths: [{path: /dev/ttyS1, permissions: r}]\n");
        struct kdev_resource_set set = {0};
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_generic_discover(cfg, &opts, &set, &e) != 0)
                fail_msg("%s", e.msg);
        assert_int_equal(set.n_physical, 4);
        static const char *const want[] = {"example.com/m/b-0", "example.com/m/b-1",
                                           "example.com/c/g0-ttyS1", "example.com/c/g1-ttyS1"};
        static const size_t n_logical[] = {2, 2, 1, 1};
        for (size_t i = 0; i < 4; i++) {
                assert_string_equal(set.physical[i]->id, want[i]);
                assert_int_equal(set.physical[i]->n_logical, n_logical[i]);
                assert_ptr_equal(kdev_physical_find(&set, want[i]), set.physical[i]);
        }
        const struct kdev_resource *m = &set.resources[0];
        assert_ptr_equal(m->devices[0].physical, set.physical[0]);
        assert_ptr_equal(m->devices[1].physical, set.physical[0]);
        assert_ptr_equal(m->devices[2].physical, set.physical[1]);
        assert_ptr_equal(m->devices[3].physical, set.physical[1]);
        assert_ptr_equal(set.resources[1].devices[1].physical, set.physical[3]);
        /* a fault of one set: its two replicas */
        assert_int_equal(kdev_physical_set_health(&set, set.physical[1], false, NULL), 2);
        assert_true(m->devices[0].healthy && m->devices[1].healthy);
        assert_false(m->devices[2].healthy || m->devices[3].healthy);
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

static void test_discover_cases(void **state)
{
        (void)state;
        struct kdev_generic_options opts = {.root = g_root, .allow_regular_files = true};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_generic_config *cfg = parse(cases[i].yaml);
                struct kdev_resource_set set = {0};
                struct kdev_err e;
                kdev_err_clear(&e);
                struct warnings w = {.len = 0};
                opts.warn = collect;
                opts.warn_arg = &w;
                int rc = kdev_generic_discover(cfg, &opts, &set, &e);
                if (rc != 0)
                        fail_msg("case %zu: %s", i, e.msg);
                /* something kept, or no match at all: no warning */
                if (w.n != 0)
                        fail_msg("case %zu: unexpected warnings:\n%s", i, w.text);
                assert_int_equal(set.n_resources, 1);
                assert_string_equal(set.resources[0].name, cfg->resources[0].name);
                char buf[4096];
                render(&set.resources[0], buf, sizeof(buf));
                if (strcmp(buf, cases[i].want) != 0)
                        fail_msg("case %zu:\n got: %s\nwant: %s", i, buf, cases[i].want);
                kdev_resource_set_clear(&set);
                kdev_generic_config_free(cfg);
        }
}

static void test_regular_files_need_option(void **state)
{
        (void)state;
        struct kdev_generic_options opts = {.root = g_root};
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/fuse\n"
                           "      groups: [{paths: [{path: /dev/*}]}]\n");
        struct kdev_resource_set set = {0};
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, NULL), 0);
        /* only link2 -> /dev/null is a device node */
        char buf[256];
        render(&set.resources[0], buf, sizeof(buf));
        assert_string_equal(buf, "link2[/dev/link2=/dev/null:rw]");
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

static void test_natural_match_order(void **state)
{
        (void)state;
        struct kdev_generic_options opts = {.root = g_root, .allow_regular_files = true};
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/tty\n"
                           "      groups: [{paths: [{path: /dev/ttyS*}]}]\n");
        struct kdev_resource_set set = {0};
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, NULL), 0);
        char buf[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < set.resources[0].n_devices; i++)
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? " " : "",
                                         set.resources[0].devices[i].id);
        assert_string_equal(buf, "ttyS0 ttyS1 ttyS2 ttyS3 ttyS4 ttyS5 ttyS6 ttyS7 ttyS8 ttyS9 "
                                 "ttyS10 ttyS11");
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

static void test_root_with_glob_chars(void **state)
{
        (void)state;
        char root[PATH_MAX];
        snprintf(root, sizeof(root), "%s/r[1]/", g_root);
        struct kdev_generic_options opts = {.root = root, .allow_regular_files = true};
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/fuse\n"
                           "      groups: [{paths: [{path: /dev/f*}]}]\n");
        struct kdev_resource_set set = {0};
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, NULL), 0);
        char buf[256];
        render(&set.resources[0], buf, sizeof(buf));
        assert_string_equal(buf, "fuse[/dev/fuse=@/r[1]/dev/fuse:rw]");
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

struct warn_case {
        const char *paths;  /* the group's paths, flow style */
        bool allow_regular_files;
        const char *want;   /* warnings, each line ending in '\n'; "@" = the fixture's real root */
};

#define RES "example.com/x: "

static const struct warn_case warn_cases[] = {
        {"[{path: /dev/fuse}]", false,
         RES "/dev/fuse is a regular file, not a device node; skipped\n"},
        {"[{path: /dev}]", false, RES "/dev is a directory; skipped\n"},
        {"[{path: /dev/link3}]", true, RES "/dev/link3 is a directory; skipped\n"},
        {"[{path: /dev/link1}]", true, RES "/dev/link1 is a dangling symlink; skipped\n"},
        {"[{path: /dev/link0}]", false,
         RES "/dev/link0 is a symlink to @/dev/ttyS3, which is a regular file, not a device "
             "node; skipped\n"},
        {"[{path: /w/*}]", true,
         RES "/w/fifo is a FIFO, not a device node; skipped\n"
         RES "/w/sock is a socket, not a device node; skipped\n"},
        /* natural order of the matched paths */
        {"[{path: \"/dev/[qp]\"}]", true,
         RES "/dev/p is a directory; skipped\n" RES "/dev/q is a directory; skipped\n"},
        /* at most 8 lines, then a count */
        {"[{path: /dev/ttyS*}]", false,
         RES "/dev/ttyS0 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS1 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS2 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS3 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS4 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS5 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS6 is a regular file, not a device node; skipped\n"
         RES "/dev/ttyS7 is a regular file, not a device node; skipped\n"
         RES "4 more entries matching /dev/ttyS* skipped\n"},
        /* every path of the group is reported */
        {"[{path: /dev/fuse}, {path: /dev/p}, {path: /dev/b}]", false,
         RES "/dev/fuse is a regular file, not a device node; skipped\n"
         RES "/dev/p is a directory; skipped\n"
         RES "/dev/b is a regular file, not a device node; skipped\n"},
        /* one match kept: the skipped ones are not reported */
        {"[{path: /dev/link*}]", false, ""},
        {"[{path: /dev/a*}]", true, ""},
        /* no match at all: not reported */
        {"[{path: /dev/nothing*}]", false, ""},
};

static void test_skip_warnings(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(warn_cases) / sizeof(warn_cases[0]); i++) {
                char yaml[512];
                snprintf(yaml, sizeof(yaml), HEAD "    - name: example.com/x\n"
                                                  "      groups: [{paths: %s}]\n",
                         warn_cases[i].paths);
                struct kdev_generic_config *cfg = parse(yaml);
                struct warnings w = {.len = 0};
                struct kdev_generic_options opts = {
                        .root = g_root,
                        .allow_regular_files = warn_cases[i].allow_regular_files,
                        .warn = collect,
                        .warn_arg = &w,
                };
                struct kdev_resource_set set = {0};
                struct kdev_err e;
                kdev_err_clear(&e);
                if (kdev_generic_discover(cfg, &opts, &set, &e) != 0)
                        fail_msg("case %zu: %s", i, e.msg);
                char want[4096];
                size_t o = 0;
                for (const char *q = warn_cases[i].want; *q; q++) {
                        if (*q == '@')
                                o += (size_t)snprintf(want + o, sizeof(want) - o, "%s",
                                                      g_real_root);
                        else
                                want[o++] = *q;
                }
                want[o] = '\0';
                if (strcmp(w.text, want) != 0)
                        fail_msg("case %zu:\n got: %s\nwant: %s", i, w.text, want);
                /* a warning is not an error: the resource is there, with what was kept */
                assert_int_equal(set.n_resources, 1);
                if (want[0])
                        assert_int_equal(set.resources[0].n_devices, 0);
                else if (i + 1 < sizeof(warn_cases) / sizeof(warn_cases[0]))
                        assert_true(set.resources[0].n_devices > 0);
                kdev_resource_set_clear(&set);
                kdev_generic_config_free(cfg);
        }
}

/* Warnings given before discovery fails still arrive; a NULL callback is fine. */
static void test_warnings_then_error(void **state)
{
        (void)state;
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/x\n"
                           "      groups: [{paths: [{path: /dev}]}]\n"
                           "    - name: example.com/many\n"
                           "      groups: [{paths: [{path: /dev/many/m*}]}]\n");
        struct warnings w = {.len = 0};
        struct kdev_generic_options opts = {.root = g_root, .warn = collect, .warn_arg = &w};
        struct kdev_resource_set set = {0};
        struct kdev_err e;
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), -E2BIG);
        assert_string_equal(w.text, RES "/dev is a directory; skipped\n");
        assert_int_equal(set.n_resources, 0);
        opts.warn = NULL;
        w.len = 0;
        w.text[0] = '\0';
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), -E2BIG);
        assert_string_equal(w.text, "");
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

struct err_case {
        const char *yaml;
        int rc;
        const char *want; /* after "t.yaml:" */
};

static const struct err_case err_cases[] = {
        {HEAD "    - name: example.com/many\n"
              "      groups: [{paths: [{path: /dev/many/m*}]}]\n",
         -E2BIG,
         "5:32: generic.devices[0].groups[0].paths[0].path: \"/dev/many/m*\" matches 4097 "
         "entries, more than the limit of 4096"},
        {HEAD "    - name: example.com/big\n"
              "      groups:\n"
              "        - {count: 1000, paths: [{path: /dev/ttyS*}]}\n"
              "        - {count: 1000, paths: [{path: /dev/a*}]}\n"
              "        - {count: 1000, paths: [{path: /dev/ttyS*}]}\n",
         -E2BIG, "4:7: generic.devices[0]: resource example.com/big has more than 16384 devices"},
        {HEAD "    - name: example.com/long\n"
              "      groups: [{paths: [{path: /dev/L*}]}]\n",
         -EINVAL,
         "5:16: generic.devices[0].groups[0]: device ID "
         "\"Laaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" of resource "
         "example.com/long is longer than 63 characters"},
        {HEAD "    - name: example.com/sp\n"
              "      groups: [{paths: [{path: /dev/with*}]}]\n",
         -EINVAL,
         "5:16: generic.devices[0].groups[0]: device ID \"with space\" of resource "
         "example.com/sp has a character that is not printable ASCII"},
        {HEAD "    - name: example.com/x\n"
              "      groups: [{paths: [{path: /dev/*/x}]}]\n",
         -EINVAL,
         "5:16: generic.devices[0].groups[0]: device ID \"x\" of resource example.com/x is not "
         "unique (matches of the first path must have distinct basenames)"},
};

static void test_discover_errors(void **state)
{
        (void)state;
        struct kdev_generic_options opts = {.root = g_root, .allow_regular_files = true};
        for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
                struct kdev_generic_config *cfg = parse(err_cases[i].yaml);
                /* |out| keeps what it had on error */
                struct kdev_resource_set set = {0};
                struct kdev_generic_config *pre =
                        parse(HEAD "    - name: example.com/pre\n"
                                   "      groups: [{paths: [{path: /dev/fuse}]}]\n");
                assert_int_equal(kdev_generic_discover(pre, &opts, &set, NULL), 0);
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_generic_discover(cfg, &opts, &set, &e);
                char want[1024];
                snprintf(want, sizeof(want), "t.yaml:%s", err_cases[i].want);
                if (rc != err_cases[i].rc || strcmp(e.msg, want) != 0)
                        fail_msg("case %zu: rc %d\n got: %s\nwant: %s", i, rc, e.msg, want);
                assert_int_equal(set.n_resources, 1);
                assert_string_equal(set.resources[0].name, "example.com/pre");
                assert_int_equal(set.resources[0].n_devices, 1);
                kdev_resource_set_clear(&set);
                kdev_generic_config_free(cfg);
                kdev_generic_config_free(pre);
        }
}

static void test_root_and_append(void **state)
{
        (void)state;
        struct kdev_generic_config *cfg =
                parse(HEAD "    - name: example.com/fuse\n"
                           "      groups: [{paths: [{path: /dev/fuse}]}]\n"
                           "    - name: example.com/none\n"
                           "      groups: [{paths: [{path: /dev/no}]}]\n");
        struct kdev_resource_set set = {0};
        struct kdev_err e;
        char p[PATH_MAX], want[PATH_MAX + 128];

        snprintf(p, sizeof(p), "%s/missing", g_root);
        struct kdev_generic_options opts = {.root = p, .allow_regular_files = true};
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), -ENOENT);
        snprintf(want, sizeof(want), "root \"%s\": No such file or directory", p);
        assert_string_equal(e.msg, want);

        snprintf(p, sizeof(p), "%s/file", g_root);
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), -ENOTDIR);
        snprintf(want, sizeof(want), "root \"%s\": Not a directory", p);
        assert_string_equal(e.msg, want);
        assert_int_equal(set.n_resources, 0);

        opts.root = g_root;
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), 0);
        assert_int_equal(set.n_resources, 2);
        assert_int_equal(set.resources[0].n_devices, 1);
        assert_string_equal(set.resources[1].name, "example.com/none");
        assert_int_equal(set.resources[1].n_devices, 0);
        /* appending the same resources again is refused */
        assert_int_equal(kdev_generic_discover(cfg, &opts, &set, &e), -EEXIST);
        assert_string_equal(e.msg, "resource example.com/fuse is already defined");
        assert_int_equal(set.n_resources, 2);
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

/* The shipped example on this machine's real /dev (no root, no regular files). */
static void test_example_on_real_dev(void **state)
{
        (void)state;
        struct kdev_generic_config *cfg = NULL;
        struct kdev_err e;
        assert_int_equal(kdev_generic_config_load(KDEV_SOURCE_DIR "/examples/generic-demo.yaml",
                                                  &cfg, &e),
                         0);
        struct kdev_resource_set set = {0};
        if (kdev_generic_discover(cfg, NULL, &set, &e) != 0)
                fail_msg("%s", e.msg);
        assert_int_equal(set.n_resources, 4);
        char buf[4096];
        render(&set.resources[0], buf, sizeof(buf));
        assert_string_equal(buf, "null::0[/dev/null=/dev/null:rw] null::1[/dev/null=/dev/null:rw]");
        render(&set.resources[1], buf, sizeof(buf));
        assert_string_equal(buf, "zero[/dev/zero=/dev/zero:r]");
        struct stat st;
        bool have_fuse = stat("/dev/fuse", &st) == 0 && S_ISCHR(st.st_mode);
        assert_int_equal(set.resources[2].n_devices, have_fuse ? 4 : 0);
        if (have_fuse)
                assert_string_equal(set.resources[2].devices[3].id, "fuse::3");
        /* ttyS*: one device per character device match */
        glob_t g;
        size_t n_tty = 0;
        if (glob("/dev/ttyS*", 0, NULL, &g) == 0) {
                for (size_t i = 0; i < g.gl_pathc; i++)
                        n_tty += stat(g.gl_pathv[i], &st) == 0 && S_ISCHR(st.st_mode);
        }
        globfree(&g);
        assert_int_equal(set.resources[3].n_devices, n_tty);
        for (size_t i = 0; i < set.resources[3].n_devices; i++)
                assert_memory_equal(set.resources[3].devices[i].id, "ttyS", 4);
        kdev_resource_set_clear(&set);
        kdev_generic_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_discover_cases),
                cmocka_unit_test(test_discover_physical),
                cmocka_unit_test(test_regular_files_need_option),
                cmocka_unit_test(test_natural_match_order),
                cmocka_unit_test(test_root_with_glob_chars),
                cmocka_unit_test(test_discover_errors),
                cmocka_unit_test(test_skip_warnings),
                cmocka_unit_test(test_warnings_then_error),
                cmocka_unit_test(test_root_and_append),
                cmocka_unit_test(test_example_on_real_dev),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
