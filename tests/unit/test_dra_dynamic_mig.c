/* Dynamic MIG in the DRA plugin (dra/plugin.h "Dynamic MIG") with NVML-free
 * GPU records and fake MIG operations whose instance table lives in shared
 * memory, so that a child killed with SIGKILL between making an instance
 * and recording it leaves the instance for the parent to reconcile. Exact
 * checkpoint records, CDI device nodes and error texts. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "claim_source.h"
#include "cdi/cdi.h"
#include "dra/checkpoint.h"
#include "dra/plugin.h"
#include "tmptree.h"

#define UID1 "0b6a1c9e-1111-4c2e-9a43-aaaaaaaaaaaa"
#define UID2 "0b6a1c9e-2222-4c2e-9a43-bbbbbbbbbbbb"
#define UID3 "0b6a1c9e-3333-4c2e-9a43-cccccccccccc"
#define GPU0 "GPU-00000000-0000-0000-0000-000000000000"

/* The fake GPU's instances (shared with a forked child). */
struct table {
        struct kdev_nvidia_mig_made v[8];
        bool used[8];
        unsigned creates, destroys;
        unsigned lists;
        bool kill_after_create; /* SIGKILL once an instance is made */
        unsigned kill_at_create; /* SIGKILL once the create with this count is made */
        unsigned lone_at_create; /* the create with this count makes the GPU instance
                                  * only, then SIGKILL (a kill inside a make) */
        bool foreign_at_create;  /* someone makes an instance at the placement just
                                  * before kdev's create (a race with nvidia-smi) */
        bool kill_after_destroy; /* SIGKILL once an instance is destroyed */
        bool fail_destroy;      /* destroy answers In use */
        bool fail_gi_destroy;   /* destroy removes the compute instance, then the GPU
                                 * instance's destroy answers In use */
        bool fail_create;       /* create answers Insufficient Resources */
        unsigned fail_create_at; /* the create with this count (1: the next) fails so */
        unsigned fail_list_at;  /* the list with this count fails */
        unsigned fail_alloc_at; /* jansson's next allocation after the create with this
                                 * count fails */
};

/* jansson's allocator: fails once after a create that asked it to (an out
 * of memory between making an instance and recording it). */
static bool alloc_fails;

static void *test_alloc(size_t n)
{
        if (alloc_fails) {
                alloc_fails = false;
                return NULL;
        }
        return malloc(n);
}

struct fix {
        char root[256], data[300], cdi[300], proc[300];
        struct kdev_nvidia_gpus gpus;
        struct kdev_nvidia_gpu gpu;
        struct kdev_nvidia_placement pl[4];
        struct table *t;
        struct kdev_dra_mig_ops ops;
        struct claim_source src;      /* the claims the plugin reads */
        struct kdev_dra_plugin *p;
};

static int fake_create(void *arg, const char *gpu, unsigned profile, unsigned start,
                       struct kdev_nvidia_mig_made *out, struct kdev_err *err)
{
        struct table *t = arg;
        unsigned size = profile == 0 ? 8 : profile == 9 ? 4 : 1;
        size_t free_slot = 8;

        assert_string_equal(gpu, GPU0);
        if (t->foreign_at_create) {
                t->foreign_at_create = false;
                t->used[7] = true;
                t->v[7] = (struct kdev_nvidia_mig_made){
                        .gi_id = 8, .ci_id = 0, .gi_profile_id = profile,
                        .placement_start = start, .placement_size = size};
                snprintf(t->v[7].uuid, sizeof(t->v[7].uuid), "MIG-someone-8");
        }
        if (t->fail_create || (t->fail_create_at && t->creates + 1 == t->fail_create_at))
                return kdev_err_set(err, EIO,
                                    "GPU 0 (%s): create GPU instance profile %u placement %u: "
                                    "Insufficient Resources",
                                    gpu, profile, start);
        for (size_t i = 0; i < 8; i++) {
                if (!t->used[i]) {
                        if (free_slot == 8)
                                free_slot = i;
                        continue;
                }
                if (start < t->v[i].placement_start + t->v[i].placement_size &&
                    t->v[i].placement_start < start + size)
                        return kdev_err_set(err, EIO,
                                            "GPU 0 (%s): create GPU instance profile %u "
                                            "placement %u: Insufficient Resources",
                                            gpu, profile, start);
        }
        t->used[free_slot] = true;
        t->v[free_slot] = (struct kdev_nvidia_mig_made){
                .gi_id = (unsigned)free_slot + 1, .ci_id = 0, .gi_profile_id = profile,
                .placement_start = start, .placement_size = size};
        snprintf(t->v[free_slot].uuid, sizeof(t->v[free_slot].uuid), "MIG-fake-%zu",
                 free_slot + 1);
        t->creates++;
        if (t->lone_at_create == t->creates) {
                t->v[free_slot].ci_id = KDEV_NVIDIA_NO_INSTANCE;
                t->v[free_slot].uuid[0] = '\0';
                raise(SIGKILL);
        }
        if (t->kill_after_create || t->kill_at_create == t->creates)
                raise(SIGKILL);
        *out = t->v[free_slot];
        alloc_fails = t->fail_alloc_at == t->creates;
        return 0;
}

static int fake_destroy(void *arg, const char *gpu, unsigned gi, unsigned ci, bool *gone,
                        struct kdev_err *err)
{
        struct table *t = arg;

        (void)ci;
        if (t->fail_gi_destroy) {
                for (size_t i = 0; i < 8; i++) {
                        if (t->used[i] && t->v[i].gi_id == gi) {
                                t->v[i].ci_id = KDEV_NVIDIA_NO_INSTANCE;
                                t->v[i].uuid[0] = '\0';
                        }
                }
                return kdev_err_set(err, EBUSY,
                                    "GPU 0 (%s): destroy GPU instance %u: In use by another "
                                    "client",
                                    gpu, gi);
        }
        if (t->fail_destroy)
                return kdev_err_set(err, EBUSY,
                                    "GPU 0 (%s): destroy compute instance 0 of GPU instance %u: "
                                    "In use by another client",
                                    gpu, gi);
        if (gone)
                *gone = true;
        for (size_t i = 0; i < 8; i++) {
                if (t->used[i] && t->v[i].gi_id == gi) {
                        t->used[i] = false;
                        t->destroys++;
                        if (t->kill_after_destroy)
                                raise(SIGKILL);
                        if (gone)
                                *gone = false;
                }
        }
        return 0;
}

static int fake_list(void *arg, const char *gpu, struct kdev_nvidia_mig_made *out, size_t cap,
                     size_t *n, struct kdev_err *err)
{
        struct table *t = arg;

        (void)gpu;
        *n = 0;
        if (++t->lists == t->fail_list_at)
                return kdev_err_set(err, EIO, "GPU 0 (%s): nvmlDeviceGetGpuInstances: Unknown "
                                              "Error", gpu);
        for (size_t i = 0; i < 8; i++)
                if (t->used[i] && *n < cap)
                        out[(*n)++] = t->v[i];
        return 0;
}

/* Claim |ns|/|name| (|uid|) allocated |dev1| and, when not NULL, |dev2|. */
static void add_claim(struct fix *f, const char *name, const char *uid, const char *dev1,
                      const char *dev2)
{
        json_t *results = json_array();
        const char *devs[2] = {dev1, dev2};

        for (int i = 0; i < 2 && devs[i]; i++)
                json_array_append_new(results,
                                      json_pack("{s:s,s:s,s:s,s:s}", "request", "mig", "driver",
                                                "gpu.nvidia.com", "pool", "node1", "device",
                                                devs[i]));
        json_t *c = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:o}}}}", "metadata", "name", name,
                              "namespace", "ns", "uid", uid, "status", "allocation", "devices",
                              "results", results);
        char key[256];

        assert_non_null(c);
        snprintf(key, sizeof(key), "ns/%s", name);
        json_object_set_new(f->src.claims, key, c);
}

static void placement(struct kdev_nvidia_placement *p, const char *name, const char *profile,
                      unsigned id, unsigned start, unsigned size)
{
        snprintf(p->dra_name, sizeof(p->dra_name), "%s", name);
        snprintf(p->profile, sizeof(p->profile), "%s", profile);
        p->gi_profile_id = id;
        p->placement_start = start;
        p->placement_size = size;
        p->memory_bytes = (unsigned long long)size * 10 << 30;
}

static void new_plugin(struct fix *f)
{
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = f->data,
                .cdi_dir = f->cdi,
                .dev_root = f->root,
                .proc_root = f->proc,
                .gpus = &f->gpus,
                .mig = &f->ops,
                .get_claim = claim_source_get,
                .get_claim_arg = &f->src,
        };
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
}

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));
        char path[400];
        FILE *fp;

        strcpy(f->root, "/tmp/kdev-dra-dynmig-XXXXXX");
        assert_non_null(mkdtemp(f->root));
        snprintf(f->data, sizeof(f->data), "%s/data", f->root);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->root);
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->root);
        snprintf(path, sizeof(path), "%s/driver", f->proc);
        assert_int_equal(mkdir(f->proc, 0755), 0);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps", f->proc);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps/mig-minors", f->proc);
        fp = fopen(path, "w");
        assert_non_null(fp);
        /* the real driver's numbering for GPU 0 (mock/nvml/README.md) */
        fprintf(fp, "config 1\nmonitor 2\n");
        for (unsigned gi = 0; gi < 15; gi++) {
                fprintf(fp, "gpu0/gi%u/access %u\n", gi, 3 + 9 * gi);
                for (unsigned ci = 0; ci < 8; ci++)
                        fprintf(fp, "gpu0/gi%u/ci%u/access %u\n", gi, ci, 3 + 9 * gi + 1 + ci);
        }
        fclose(fp);
        f->t = mmap(NULL, sizeof(*f->t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                    0);
        assert_true(f->t != MAP_FAILED);
        memset(f->t, 0, sizeof(*f->t));
        f->ops = (struct kdev_dra_mig_ops){.create = fake_create, .destroy = fake_destroy,
                                           .list = fake_list, .arg = f->t};
        f->gpu.minor = 0;
        snprintf(f->gpu.uuid, sizeof(f->gpu.uuid), GPU0);
        snprintf(f->gpu.dra_name, sizeof(f->gpu.dra_name), "gpu-0");
        f->gpu.mig_enabled = true;
        f->gpu.memory_bytes = 80ull << 30;
        placement(&f->pl[0], "gpu-0-mig-1g10gb-19-3", "1g.10gb", 19, 3, 1);
        placement(&f->pl[1], "gpu-0-mig-3g40gb-9-0", "3g.40gb", 9, 0, 4);
        placement(&f->pl[2], "gpu-0-mig-3g40gb-9-4", "3g.40gb", 9, 4, 4);
        placement(&f->pl[3], "gpu-0-mig-7g80gb-0-0", "7g.80gb", 0, 0, 8);
        f->gpu.placements = f->pl;
        f->gpu.n_placements = 4;
        f->gpu.memory_slices = 8;
        f->gpus.gpus = &f->gpu;
        f->gpus.n_gpus = 1;
        f->src.claims = json_object();
        add_claim(f, "c1", UID1, "gpu-0-mig-3g40gb-9-4", NULL);
        add_claim(f, "c2", UID2, "gpu-0-mig-1g10gb-19-3", NULL); /* overlaps c3 */
        add_claim(f, "c3", UID3, "gpu-0-mig-3g40gb-9-0", NULL);
        new_plugin(f);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fix *f = *state;

        kdev_dra_plugin_free(f->p);
        json_decref(f->src.claims);
        munmap(f->t, sizeof(*f->t));
        tmptree_remove(f->root);
        free(f);
        return 0;
}

static void assert_json(const json_t *got, const char *want_text)
{
        json_error_t je;
        json_t *want = json_loads(want_text, 0, &je);

        assert_non_null(want);
        if (!json_equal(want, (json_t *)got)) {
                char *s = json_dumps(got, JSON_SORT_KEYS);
                fail_msg("got %s\nwant %s", s, want_text);
        }
        json_decref(want);
}

static size_t instances(const struct fix *f)
{
        size_t n = 0;
        for (size_t i = 0; i < 8; i++)
                n += f->t->used[i];
        return n;
}

/* Prepare makes the instance at the allocated placement, records it and
 * writes the spec with the MIG capability nodes of its GI/CI; Unprepare
 * destroys it. */
static void test_prepare_unprepare(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024], want[256];
        struct kdev_cdi_spec *s = NULL;

        int rc = kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err);
        if (rc)
                fail_msg("%d %s", rc, err.msg);
        assert_int_equal(instances(f), 1);
        assert_int_equal(f->t->v[0].placement_start, 4);
        assert_int_equal(f->t->v[0].gi_profile_id, 9);
        assert_json(devs, "[{\"requestNames\":[\"mig\"],\"pool\":\"node1\","
                          "\"device\":\"gpu-0-mig-3g40gb-9-4\","
                          "\"mig\":{\"gpu\":\"" GPU0 "\",\"profileId\":9,\"start\":4,"
                          "\"size\":4,\"giId\":1,\"ciId\":0,\"uuid\":\"MIG-fake-1\"},"
                          "\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1
                          "-gpu-0-mig-3g40gb-9-4\"]}]");
        assert_true(kdev_dra_claim_spec_path(f->p, UID1, path, sizeof(path), NULL) > 0);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &err), 0);
        snprintf(want, sizeof(want), "%s-gpu-0-mig-3g40gb-9-4", UID1);
        const struct kdev_cdi_device *d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        assert_int_equal(d->edits.n_device_nodes, 3);
        assert_string_equal(d->edits.device_nodes[0].path, "/dev/nvidia0");
        /* gi 1: 3 + 9 = 12, ci 0: 13 */
        assert_string_equal(d->edits.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap12");
        assert_string_equal(d->edits.device_nodes[2].path, "/dev/nvidia-caps/nvidia-cap13");
        kdev_cdi_spec_free(s);
        /* a retry answers from the checkpoint and makes nothing */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(f->t->creates, 1);
        /* after a restart the claim is still prepared, its instance kept */
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, NULL, NULL, &err), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(access(path, F_OK), -1);
}

/* Overlapping placements: the second claim fails before anything is
 * made, naming both; the whole GPU and a placement exclude each other. */
static void test_overlap(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c3", UID3, NULL, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err), -EBUSY);
        assert_string_equal(err.msg,
                            "claim ns/c2 (" UID2 "): device gpu-0-mig-1g10gb-19-3 overlaps "
                            "device gpu-0-mig-3g40gb-9-0 of claim ns/c3 (" UID3 "): memory "
                            "slices 3-3 and 0-3");
        assert_int_equal(f->t->creates, 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        add_claim(f, "whole", UID2, "gpu-0", NULL);
        err = (struct kdev_err){0};
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "whole", UID2, NULL, &err), -EBUSY);
        assert_string_equal(err.msg,
                            "claim ns/whole (" UID2 "): device gpu-0 is already prepared for "
                            "claim ns/c3 (" UID3 ") (as gpu-0-mig-3g40gb-9-0): it is not "
                            "shareable and this allocation has no adminAccess");
        /* two overlapping placements in one claim */
        add_claim(f, "both", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-7g80gb-0-0");
        err = (struct kdev_err){0};
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "both", UID1, NULL, &err), -EBUSY);
        assert_string_equal(err.msg,
                            "claim ns/both (" UID1 "): device gpu-0-mig-7g80gb-0-0 overlaps "
                            "device gpu-0-mig-3g40gb-9-0 of claim ns/c3 (" UID3 "): memory "
                            "slices 0-7 and 0-3");
        assert_int_equal(instances(f), 1);
}

/* An instance kdev did not make is never touched: a placement over it
 * fails, naming it. */
static void test_foreign_instance(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_nvidia_mig_made m;

        assert_int_equal(fake_create(f->t, GPU0, 19, 5, &m, &err), 0);
        add_claim(f, "c4", UID2, "gpu-0-mig-3g40gb-9-4", NULL);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c4", UID2, NULL, &err), -EBUSY);
        assert_string_equal(err.msg,
                            "claim ns/c4 (" UID2 "): device gpu-0-mig-3g40gb-9-4: memory "
                            "slices 4-7 are taken by GPU instance 1 (MIG-fake-1), which "
                            "kdev-dra-plugin did not create");
        /* a restart does not touch it either */
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, NULL, NULL, &err), 0);
        assert_int_equal(instances(f), 1);
        assert_int_equal(f->t->destroys, 0);
}

struct report {
        char lines[4][256];
        int n;
};

static void on_report(void *arg, const char *action, const char *uid, const char *device,
                      const char *error)
{
        struct report *r = arg;
        if (r->n < 4)
                snprintf(r->lines[r->n++], 256, "%s %s %s %s", action, uid,
                         device ? device : "-", error ? error : "-");
}

/* What a killed child runs. */
enum step { PREPARE_C1, PREPARE_PAIR, UNPREPARE_UID1, RECONCILE };

/* Runs |step| in a child that the fake operations kill with SIGKILL (as
 * the caller armed them), disarms them and makes the plugin again from
 * the checkpoint, as a restart would. */
static void killed_during(struct fix *f, enum step step)
{
        struct kdev_err err = {0};
        int status = 0;
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0) {
                if (step == PREPARE_C1)
                        kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err);
                else if (step == PREPARE_PAIR)
                        kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, NULL, &err);
                else if (step == UNPREPARE_UID1)
                        kdev_dra_unprepare_claim(f->p, UID1, &err);
                else
                        kdev_dra_plugin_reconcile_mig(f->p, NULL, NULL, &err);
                _exit(0); /* not reached */
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGKILL);
        f->t->kill_after_create = f->t->kill_after_destroy = false;
        f->t->kill_at_create = f->t->lone_at_create = 0;
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
}

/* kill -9 between making the instance and recording it: the restart finds
 * the claim "migPending" and destroys the instance at its placement. */
static void test_kill_between_create_and_checkpoint(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        f->t->kill_after_create = true;
        killed_during(f, PREPARE_C1);
        assert_int_equal(instances(f), 1);
        /* the intent is on disk */
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "destroyed " UID1 " - -");
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        /* and saved: a second restart has nothing to do */
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, NULL, NULL, &err), 0);
        /* the claim prepares again */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(instances(f), 1);
}

/* A prepared claim whose instance is gone after a restart (a reboot) gets
 * it made again at the same placement, and its spec follows the new ids. */
static void test_recreate_after_reboot(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};
        struct kdev_nvidia_mig_made m;
        char path[1024], want[256];
        struct kdev_cdi_spec *s = NULL;

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        memset(f->t, 0, sizeof(*f->t)); /* the reboot */
        /* someone made an instance meanwhile: GI id 1 is taken */
        assert_int_equal(fake_create(f->t, GPU0, 19, 0, &m, &err), 0);
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "recreated " UID1 " gpu-0-mig-3g40gb-9-4 -");
        assert_int_equal(instances(f), 2);
        assert_int_equal(f->t->v[1].gi_id, 2);
        assert_int_equal(f->t->v[1].placement_start, 4);
        assert_true(kdev_dra_claim_spec_path(f->p, UID1, path, sizeof(path), NULL) > 0);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &err), 0);
        snprintf(want, sizeof(want), "%s-gpu-0-mig-3g40gb-9-4", UID1);
        const struct kdev_cdi_device *d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        /* gi 2: 3 + 18 = 21, ci 0: 22 */
        assert_string_equal(d->edits.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap21");
        assert_string_equal(d->edits.device_nodes[2].path, "/dev/nvidia-caps/nvidia-cap22");
        kdev_cdi_spec_free(s);
}

/* A destroy that fails keeps the claim for kubelet's retry. */
static void test_unprepare_in_use(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        f->t->fail_destroy = true;
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), -EBUSY);
        assert_string_equal(err.msg,
                            "claim " UID1 ": device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0 "): "
                            "destroy compute instance 0 of GPU instance 1: In use by another "
                            "client");
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        f->t->fail_destroy = false;
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A create that fails fails the claim with NVML's error; nothing stays
 * recorded, now or after a restart. */
static void test_create_fails(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        f->t->fail_create = true;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), -EIO);
        assert_string_equal(err.msg,
                            "claim ns/c1 (" UID1 "): device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                            "): create GPU instance profile 9 placement 4: Insufficient "
                            "Resources");
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        f->t->fail_create = false;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(instances(f), 1);
}

/* The two-device claim "pair" (UID1) as recorded: gpu-0-mig-3g40gb-9-4
 * (GI |g1|, |u1|) and gpu-0-mig-1g10gb-19-3 (GI |g2|, |u2|). */
#define PAIR(g1, u1, g2, u2)                                                                     \
        "[{\"requestNames\":[\"mig\"],\"pool\":\"node1\",\"device\":\"gpu-0-mig-3g40gb-9-4\","   \
        "\"mig\":{\"gpu\":\"" GPU0 "\",\"profileId\":9,\"start\":4,\"size\":4,\"giId\":" #g1      \
        ",\"ciId\":0,\"uuid\":\"" u1 "\"},\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1     \
        "-gpu-0-mig-3g40gb-9-4\"]},"                                                             \
        "{\"requestNames\":[\"mig\"],\"pool\":\"node1\",\"device\":\"gpu-0-mig-1g10gb-19-3\","   \
        "\"mig\":{\"gpu\":\"" GPU0 "\",\"profileId\":19,\"start\":3,\"size\":1,\"giId\":" #g2     \
        ",\"ciId\":0,\"uuid\":\"" u2 "\"},\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1     \
        "-gpu-0-mig-1g10gb-19-3\"]}]"

/* Prepares "pair" and checks its records against |want|. */
static void prepare_pair(struct fix *f, const char *want)
{
        struct kdev_err err = {0};
        const json_t *devs = NULL;

        if (!json_object_get(f->src.claims, "ns/pair"))
                add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        int rc = kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, &devs, &err);
        if (rc)
                fail_msg("%d %s", rc, err.msg);
        assert_json(devs, want);
}

/* Checks claim |uid|'s device records in the saved checkpoint. */
static void assert_saved(const struct fix *f, const char *uid, const char *want)
{
        char path[400];
        json_t *root;

        snprintf(path, sizeof(path), "%s/" KDEV_DRA_CP_FILE, f->data);
        root = json_load_file(path, 0, NULL);
        assert_non_null(root);
        assert_json(json_object_get(json_object_get(json_object_get(json_object_get(root, "data"),
                                                                    "claims"),
                                                    uid),
                                    "devices"),
                    want);
        json_decref(root);
}

static void restart(struct fix *f)
{
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
}

/* An instance NVML made for someone else under a GPU instance id a claim
 * recorded (its own were destroyed by a driver reload) is not destroyed by
 * the claim's Unprepare: the listed profile, start and MIG uuid must match
 * the record too. */
static void test_reused_instance_id_is_not_destroyed(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_nvidia_mig_made m;

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t)); /* the reload */
        /* at the same placement as the record, and at another */
        assert_int_equal(fake_create(f->t, GPU0, 9, 4, &m, &err), 0);
        snprintf(f->t->v[0].uuid, sizeof(f->t->v[0].uuid), "MIG-someone-1");
        assert_int_equal(fake_create(f->t, GPU0, 19, 0, &m, &err), 0);
        snprintf(f->t->v[1].uuid, sizeof(f->t->v[1].uuid), "MIG-someone-2");
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(f->t->destroys, 0);
        assert_int_equal(instances(f), 2);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A child prepares "pair" and is killed once create number |at| made its
 * instance; the plugin is then made again from the checkpoint. */
static void kill_in_prepare(struct fix *f, unsigned at)
{
        if (!json_object_get(f->src.claims, "ns/pair"))
                add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        f->t->kill_at_create = at;
        killed_during(f, PREPARE_PAIR);
}

/* A claim left "migPending" before any id was saved (a kill after both
 * makes) whose destroy failed at the restart: the next Prepare destroys
 * its instances by their placements and prepares it anew; an Unprepare of
 * such a claim destroys them too. */
static void test_pending_claim_without_ids(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        kill_in_prepare(f, 2);
        assert_int_equal(instances(f), 2);
        f->t->fail_destroy = true;
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                                        "): destroy compute instance 0 of GPU instance 1: In "
                                        "use by another client");
        f->t->fail_destroy = false;
        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        assert_int_equal(f->t->destroys, 2);
        assert_int_equal(f->t->creates, 4);
        assert_int_equal(instances(f), 2);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        /* Unprepare of a claim loaded "migPending" without ids */
        kill_in_prepare(f, 6);
        assert_int_equal(instances(f), 2);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* The restart's remake of a prepared claim's gone instances: a make that
 * fails destroys what it made and leaves both records as they were (on
 * disk too); the next restart makes them. */
static void test_remake_fails_keeps_the_records(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t)); /* the reboot */
        restart(f);
        f->t->fail_create_at = 2;
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-1g10gb-19-3: GPU 0 (" GPU0
                                        "): create GPU instance profile 19 placement 3: "
                                        "Insufficient Resources");
        assert_int_equal(instances(f), 0);
        assert_int_equal(f->t->destroys, 1);
        assert_saved(f, UID1, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        restart(f);
        f->t->fail_create_at = 0;
        r = (struct report){0};
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 2);
        assert_string_equal(r.lines[0], "recreated " UID1 " gpu-0-mig-3g40gb-9-4 -");
        assert_string_equal(r.lines[1], "recreated " UID1 " gpu-0-mig-1g10gb-19-3 -");
        assert_int_equal(instances(f), 2);
}

/* A list that fails while the remake reads the GPUs changes nothing: the
 * first record keeps its ids although its instance is gone. */
static void test_remake_list_fails_changes_nothing(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t));
        restart(f);
        f->t->fail_list_at = 2;
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-1g10gb-19-3: GPU 0 (" GPU0
                                        "): nvmlDeviceGetGpuInstances: Unknown Error");
        assert_int_equal(f->t->creates, 0);
        assert_saved(f, UID1, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
}

/* A child's reconcile remakes "pair" after a reboot and is killed: at
 * create |kill_at| after the instance is made, or at |lone_at| after the
 * GPU instance only. The plugin is then made again from the checkpoint. */
static void kill_in_remake(struct fix *f, unsigned kill_at, unsigned lone_at)
{
        f->t->kill_at_create = kill_at;
        f->t->lone_at_create = lone_at;
        killed_during(f, RECONCILE);
}

/* What a kill inside the remake left: the records were saved marked
 * "remaking" before the makes, so the next restart adopts the instance
 * made for the first (its compute instance there, not recorded) and
 * destroys the GPU instance the second's make left alone before making it
 * again. */
static void test_remake_killed_then_adopted(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t)); /* the reboot */
        restart(f);
        kill_in_remake(f, 0, 2);
        assert_int_equal(instances(f), 2);
        assert_int_equal(f->t->v[1].ci_id, KDEV_NVIDIA_NO_INSTANCE);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 2);
        assert_string_equal(r.lines[0], "adopted " UID1 " gpu-0-mig-3g40gb-9-4 -");
        assert_string_equal(r.lines[1], "recreated " UID1 " gpu-0-mig-1g10gb-19-3 -");
        assert_int_equal(f->t->creates, 3);
        assert_int_equal(f->t->destroys, 1);
        assert_int_equal(instances(f), 2);
        restart(f);
        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        /* the marks are gone: nothing more to do */
        r = (struct report){0};
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 0);
        assert_int_equal(r.n, 0);
}

/* After a reboot someone (nvidia-mig-manager, an admin) made an instance
 * at a prepared claim's placement before kdev started: it is not adopted
 * (no remake of kdev's was under way), the claim's remake fails naming
 * it, and the claim's Unprepare leaves it alone. The same for a GPU
 * instance without compute instance that NVML gave the recorded id. */
static void test_remake_leaves_foreign_instances(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};
        struct kdev_nvidia_mig_made m;

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t));
        assert_int_equal(fake_create(f->t, GPU0, 9, 4, &m, &err), 0);
        snprintf(f->t->v[0].uuid, sizeof(f->t->v[0].uuid), "MIG-someone-1");
        assert_int_equal(fake_create(f->t, GPU0, 19, 3, &m, &err), 0);
        f->t->v[1].ci_id = KDEV_NVIDIA_NO_INSTANCE;
        f->t->v[1].uuid[0] = '\0';
        restart(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-3g40gb-9-4: memory "
                                        "slices 4-7 are taken by GPU instance 1 (MIG-someone-1), "
                                        "which kdev-dra-plugin did not create");
        assert_int_equal(f->t->creates, 2);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(f->t->destroys, 0);
        assert_int_equal(instances(f), 2);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A create that fails because someone made an instance at the placement
 * since the overlap check: the undo destroys only what the call made
 * (the claim's first instance), never the other one at the placement. */
static void test_failed_make_leaves_a_racing_instance(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        f->t->fail_create_at = 2;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, NULL, &err), -EIO);
        assert_int_equal(f->t->destroys, 1);
        assert_int_equal(instances(f), 0);
        memset(f->t, 0, sizeof(*f->t));
        f->t->foreign_at_create = true;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-0-mig-3g40gb-9-4: GPU 0 "
                                     "(" GPU0 "): create GPU instance profile 9 placement 4: "
                                     "Insufficient Resources");
        assert_int_equal(f->t->destroys, 0);
        assert_int_equal(instances(f), 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A failed make whose undo fails too: both errors, the make's first; the
 * claim is kept "migPending" for the next call, which destroys it. */
static void test_failed_undo_error_text(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        f->t->fail_create_at = 2;
        f->t->fail_destroy = true;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, NULL, &err), -EIO);
        assert_string_equal(err.msg,
                            "claim ns/pair (" UID1 "): device gpu-0-mig-1g10gb-19-3: GPU 0 (" GPU0
                            "): create GPU instance profile 19 placement 3: Insufficient "
                            "Resources; undoing it: device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                            "): destroy compute instance 0 of GPU instance 1: In use by another "
                            "client");
        assert_int_equal(instances(f), 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        f->t->fail_destroy = false;
        f->t->fail_create_at = 0;
        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        assert_int_equal(f->t->destroys, 1);
        assert_int_equal(instances(f), 2);
}

/* With dynamic MIG off after a restart, the Unprepare of a MIG claim fails
 * and keeps the claim, instead of forgetting an instance it cannot
 * destroy; with it on again the retry destroys it. */
static void test_unprepare_with_dynamic_mig_off(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        kdev_dra_plugin_free(f->p);
        struct kdev_dra_plugin_options o = {
                .pool = "node1", .data_dir = f->data, .cdi_dir = f->cdi, .dev_root = f->root,
                .proc_root = f->proc, .gpus = &f->gpus, .get_claim = claim_source_get,
                .get_claim_arg = &f->src,
        };
        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), -ENOTSUP);
        assert_string_equal(err.msg, "claim " UID1 ": device gpu-0-mig-3g40gb-9-4: its MIG "
                                     "instance is not destroyed: dynamic MIG is off on this node "
                                     "(kdev-dra-plugin --dynamic-mig)");
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(instances(f), 1);
        restart(f);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
}

/* A spec write that fails after the claim was saved prepared: the claim is
 * saved "migPending" before its instance is destroyed, so a kill right
 * after the destroy leaves nothing for the restart to make again. */
static void test_spec_failure_saves_pending_first(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        tmptree_remove(f->cdi);
        FILE *fp = fopen(f->cdi, "w"); /* the CDI directory is a file */
        assert_non_null(fp);
        fclose(fp);
        f->t->kill_after_destroy = true;
        killed_during(f, PREPARE_C1);
        assert_int_equal(instances(f), 0);
        assert_int_equal(unlink(f->cdi), 0);
        restart(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "forgotten " UID1 " - -");
        assert_int_equal(instances(f), 0);
        assert_int_equal(f->t->creates, 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* kill -9 inside an Unprepare, after the first of two destroys: the claim
 * was saved "migPending" before, so the restart destroys the other
 * instance and forgets the claim instead of making the first again. */
static void test_kill_during_unprepare(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        f->t->kill_after_destroy = true;
        killed_during(f, UNPREPARE_UID1);
        assert_int_equal(instances(f), 1);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "destroyed " UID1 " - -");
        assert_int_equal(instances(f), 0);
        assert_int_equal(f->t->creates, 2);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* Out of memory between making an instance and recording it: that
 * instance is destroyed by the ids it was made with, the claim's other
 * one too, and nothing stays recorded. */
static void test_out_of_memory_after_a_make(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        f->t->fail_alloc_at = 2;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, NULL, &err), -ENOMEM);
        assert_string_equal(err.msg, "claim ns/pair (" UID1 "): device gpu-0-mig-1g10gb-19-3: "
                                     "out of memory");
        assert_int_equal(f->t->creates, 2);
        assert_int_equal(f->t->destroys, 2);
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A recorded claim's Prepare (kubelet repeats it) checks its instance as
 * the restart does: one gone while kdev ran (a driver reload) is made
 * again and the spec follows it; one whose placement someone else took
 * fails the claim naming that instance, and the spec is not written. */
static void test_prepare_again_checks_the_instance(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_nvidia_mig_made m;
        char path[1024];

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        memset(f->t, 0, sizeof(*f->t)); /* the reload */
        assert_int_equal(fake_create(f->t, GPU0, 19, 0, &m, &err), 0); /* GI 1 now */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(instances(f), 2);
        assert_int_equal(f->t->v[1].gi_id, 2);
        assert_saved(f, UID1,
                     "[{\"requestNames\":[\"mig\"],\"pool\":\"node1\","
                     "\"device\":\"gpu-0-mig-3g40gb-9-4\",\"mig\":{\"gpu\":\"" GPU0 "\","
                     "\"profileId\":9,\"start\":4,\"size\":4,\"giId\":2,\"ciId\":0,"
                     "\"uuid\":\"MIG-fake-2\"},\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1
                     "-gpu-0-mig-3g40gb-9-4\"]}]");
        /* gi 2: 3 + 18 = 21 */
        assert_true(kdev_dra_claim_spec_path(f->p, UID1, path, sizeof(path), NULL) > 0);
        struct kdev_cdi_spec *spec = NULL;
        assert_int_equal(kdev_cdi_spec_read(path, &spec, &err), 0);
        const struct kdev_cdi_device *cd =
                kdev_cdi_spec_find_device(spec, UID1 "-gpu-0-mig-3g40gb-9-4");
        assert_non_null(cd);
        assert_string_equal(cd->edits.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap21");
        kdev_cdi_spec_free(spec);
        /* someone's instance over the placement: the spec, which names
         * nvidia-cap21 (GI 2, the other's now), goes */
        memset(f->t, 0, sizeof(*f->t));
        assert_int_equal(fake_create(f->t, GPU0, 14, 4, &m, &err), 0);
        assert_int_equal(fake_create(f->t, GPU0, 19, 0, &m, &err), 0); /* GI 2 */
        snprintf(f->t->v[0].uuid, sizeof(f->t->v[0].uuid), "MIG-someone-1");
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), -EBUSY);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-0-mig-3g40gb-9-4: memory "
                                     "slices 4-7 are taken by GPU instance 1 (MIG-someone-1), "
                                     "which kdev-dra-plugin did not create");
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(f->t->destroys, 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
}

/* A destroy that removed the compute instance but not the GPU instance
 * fails the Unprepare; kubelet's retry destroys the GPU instance left
 * without compute instance (the claim was saved pending) instead of
 * taking it for someone else's. */
static void test_unprepare_retry_after_half_a_destroy(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        f->t->fail_gi_destroy = true;
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), -EBUSY);
        assert_string_equal(err.msg, "claim " UID1 ": device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                                     "): destroy GPU instance 1: In use by another client");
        assert_int_equal(instances(f), 1);
        assert_int_equal(f->t->v[0].ci_id, KDEV_NVIDIA_NO_INSTANCE);
        f->t->fail_gi_destroy = false;
        restart(f); /* or not: the pending claim is on disk */
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
}

/* A remake killed after its first make leaves both records "remaking";
 * when the next restart's remake cannot read the GPU, an Unprepare still
 * destroys the instance the killed remake made (found by the mark). */
static void test_unprepare_of_a_remaking_claim(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t));
        restart(f);
        kill_in_remake(f, 1, 0);
        assert_int_equal(instances(f), 1);
        f->t->fail_list_at = f->t->lists + 1;
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                                        "): nvmlDeviceGetGpuInstances: Unknown Error");
        f->t->fail_list_at = 0;
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(instances(f), 0);
        assert_int_equal(f->t->destroys, 1);
}

/* A failed remake whose undo fails too keeps that record "remaking"
 * (without the stale ids), so the next restart adopts kdev's instance
 * instead of taking it for someone else's; the other record, with nothing
 * at its placement, is as it was and made. */
static void test_failed_remake_undo_keeps_the_mark(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};
        struct kdev_nvidia_mig_made m;

        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
        memset(f->t, 0, sizeof(*f->t));
        assert_int_equal(fake_create(f->t, GPU0, 19, 0, &m, &err), 0); /* GI 1 */
        snprintf(f->t->v[0].uuid, sizeof(f->t->v[0].uuid), "MIG-someone-1");
        restart(f);
        f->t->fail_create_at = f->t->creates + 2;
        f->t->fail_destroy = true;
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "failed " UID1 " - device gpu-0-mig-1g10gb-19-3: GPU 0 (" GPU0
                                        "): create GPU instance profile 19 placement 3: "
                                        "Insufficient Resources");
        assert_int_equal(instances(f), 2);
        assert_saved(f, UID1,
                     "[{\"requestNames\":[\"mig\"],\"pool\":\"node1\","
                     "\"device\":\"gpu-0-mig-3g40gb-9-4\",\"mig\":{\"gpu\":\"" GPU0 "\","
                     "\"profileId\":9,\"start\":4,\"size\":4,\"remaking\":true},"
                     "\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1
                     "-gpu-0-mig-3g40gb-9-4\"]},"
                     "{\"requestNames\":[\"mig\"],\"pool\":\"node1\","
                     "\"device\":\"gpu-0-mig-1g10gb-19-3\",\"mig\":{\"gpu\":\"" GPU0 "\","
                     "\"profileId\":19,\"start\":3,\"size\":1,\"giId\":2,\"ciId\":0,"
                     "\"uuid\":\"MIG-fake-2\"},\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1
                     "-gpu-0-mig-1g10gb-19-3\"]}]");
        f->t->fail_destroy = false;
        f->t->fail_create_at = 0;
        restart(f);
        r = (struct report){0};
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 2);
        assert_string_equal(r.lines[0], "adopted " UID1 " gpu-0-mig-3g40gb-9-4 -");
        assert_string_equal(r.lines[1], "recreated " UID1 " gpu-0-mig-1g10gb-19-3 -");
        assert_saved(f, UID1, PAIR(2, "MIG-fake-2", 3, "MIG-fake-3"));
        assert_int_equal(instances(f), 3);
        assert_int_equal(f->t->destroys, 0);
}

/* A failed make whose undo removes the compute instance but not the GPU
 * instance: the claim stays "migPending" with both errors, and the restart
 * destroys that GPU instance (kdev's, by its recorded id) instead of
 * leaving it to look like someone else's. */
static void test_failed_make_with_half_an_undo(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct report r = {0};

        add_claim(f, "pair", UID1, "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-3");
        f->t->fail_create_at = 2;
        f->t->fail_gi_destroy = true;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "pair", UID1, NULL, &err), -EIO);
        assert_string_equal(err.msg,
                            "claim ns/pair (" UID1 "): device gpu-0-mig-1g10gb-19-3: GPU 0 (" GPU0
                            "): create GPU instance profile 19 placement 3: Insufficient "
                            "Resources; undoing it: device gpu-0-mig-3g40gb-9-4: GPU 0 (" GPU0
                            "): destroy GPU instance 1: In use by another client");
        assert_int_equal(instances(f), 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        f->t->fail_gi_destroy = false;
        f->t->fail_create_at = 0;
        restart(f);
        assert_int_equal(kdev_dra_plugin_reconcile_mig(f->p, on_report, &r, &err), 1);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.lines[0], "destroyed " UID1 " - -");
        assert_int_equal(instances(f), 0);
        prepare_pair(f, PAIR(1, "MIG-fake-1", 2, "MIG-fake-2"));
}

/* A repeated Prepare's remake that loses the placement to someone's
 * instance made between its check and its make (a race with nvidia-smi):
 * the make fails, nothing of kdev's is left, so the record is as it was
 * (not "remaking") and the next Prepare refuses that instance instead of
 * adopting it. */
static void test_remake_race_is_not_adopted(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char path[1024];

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        memset(f->t, 0, sizeof(*f->t)); /* a driver reload */
        f->t->foreign_at_create = true;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-0-mig-3g40gb-9-4: GPU 0 "
                                     "(" GPU0 "): create GPU instance profile 9 placement 4: "
                                     "Insufficient Resources");
        assert_int_equal(f->t->creates, 0);
        assert_saved(f, UID1,
                     "[{\"requestNames\":[\"mig\"],\"pool\":\"node1\","
                     "\"device\":\"gpu-0-mig-3g40gb-9-4\",\"mig\":{\"gpu\":\"" GPU0 "\","
                     "\"profileId\":9,\"start\":4,\"size\":4,\"giId\":1,\"ciId\":0,"
                     "\"uuid\":\"MIG-fake-1\"},\"cdiDeviceIDs\":[\"k8s.gpu.nvidia.com/claim=" UID1
                     "-gpu-0-mig-3g40gb-9-4\"]}]");
        assert_true(kdev_dra_claim_spec_path(f->p, UID1, path, sizeof(path), NULL) > 0);
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), -EBUSY);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-0-mig-3g40gb-9-4: memory "
                                     "slices 4-7 are taken by GPU instance 8 (MIG-someone-8), "
                                     "which kdev-dra-plugin did not create");
        assert_int_equal(f->t->destroys, 0);
        assert_int_equal(instances(f), 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_prepare_unprepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_overlap, setup, teardown),
                cmocka_unit_test_setup_teardown(test_foreign_instance, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_between_create_and_checkpoint, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_recreate_after_reboot, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_in_use, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_fails, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reused_instance_id_is_not_destroyed, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_pending_claim_without_ids, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remake_fails_keeps_the_records, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_remake_list_fails_changes_nothing, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_remake_killed_then_adopted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remake_leaves_foreign_instances, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_failed_make_leaves_a_racing_instance, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_failed_undo_error_text, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_with_dynamic_mig_off, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_spec_failure_saves_pending_first, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_prepare_again_checks_the_instance, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_retry_after_half_a_destroy, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_of_a_remaking_claim, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_failed_remake_undo_keeps_the_mark, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_failed_make_with_half_an_undo, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_remake_race_is_not_adopted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_during_unprepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_out_of_memory_after_a_make, setup, teardown),
        };
        json_set_alloc_funcs(test_alloc, free);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
