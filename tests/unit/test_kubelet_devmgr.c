/* Device manager model: registration checks, ListAndWatch updates, capacity,
 * device choice, records, restart from the checkpoint, option merging. No
 * sockets: plugin answers are given as data. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kubelet/devmgr.h"

/* A ListAndWatch message from "id:health[:numa,numa]" specs. */
struct lw {
        V1beta1__ListAndWatchResponse msg;
        V1beta1__Device dev[8];
        V1beta1__Device *devp[8];
        V1beta1__TopologyInfo topo[8];
        V1beta1__NUMANode node[8][2];
        V1beta1__NUMANode *nodep[8][2];
        char buf[8][64];
};

static void lw_build(struct lw *l, size_t n, const char *const *specs)
{
        memset(l, 0, sizeof(*l));
        v1beta1__list_and_watch_response__init(&l->msg);
        for (size_t i = 0; i < n; i++) {
                v1beta1__device__init(&l->dev[i]);
                snprintf(l->buf[i], sizeof(l->buf[i]), "%s", specs[i]);
                char *id = l->buf[i];
                char *health = strchr(id, ':');
                *health++ = '\0';
                char *numa = strchr(health, ':');
                if (numa)
                        *numa++ = '\0';
                l->dev[i].id = id;
                l->dev[i].health = health;
                if (numa) {
                        v1beta1__topology_info__init(&l->topo[i]);
                        size_t k = 0;
                        for (char *tok = strtok(numa, ","); tok && k < 2; tok = strtok(NULL, ",")) {
                                v1beta1__numanode__init(&l->node[i][k]);
                                l->node[i][k].id = atoi(tok);
                                l->nodep[i][k] = &l->node[i][k];
                                k++;
                        }
                        l->topo[i].nodes = l->nodep[i];
                        l->topo[i].n_nodes = k;
                        l->dev[i].topology = &l->topo[i];
                }
                l->devp[i] = &l->dev[i];
        }
        l->msg.devices = l->devp;
        l->msg.n_devices = n;
}

static void update(struct kdev_devmgr *dm, const char *res, size_t n, const char *const *specs)
{
        struct lw l;
        lw_build(&l, n, specs);
        struct kdev_err err = {0};
        assert_int_equal(kdev_dm_update(dm, res, &l.msg, &err), 0);
}

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        static char buf[8192];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        return buf;
}

struct fixture {
        char dir[64];
        char ckpt[128];
        struct kdev_devmgr *dm;
};

static int setup(void **state)
{
        struct fixture *fx = calloc(1, sizeof(*fx));
        strcpy(fx->dir, "/tmp/kdev-dm-XXXXXX");
        if (!mkdtemp(fx->dir))
                return -1;
        snprintf(fx->ckpt, sizeof(fx->ckpt), "%s/%s", fx->dir, KDEV_CKPT_FILE);
        fx->dm = kdev_dm_new(fx->ckpt);
        *state = fx;
        return fx->dm ? 0 : -1;
}

static int teardown(void **state)
{
        struct fixture *fx = *state;
        kdev_dm_free(fx->dm);
        unlink(fx->ckpt);
        rmdir(fx->dir);
        free(fx);
        return 0;
}

static void test_register_checks(void **state)
{
        (void)state;
        struct kdev_err err = {0};
        assert_int_equal(kdev_dm_check_register("v1beta1", "example.com/gpu", &err), 0);
        assert_int_equal(kdev_dm_check_register("v1alpha", "example.com/gpu", &err), -EINVAL);
        assert_string_equal(err.msg, "requested API version \"v1alpha\" is not supported by kubelet. "
                                     "Supported version is [\"v1beta1\"]");
        /* The version is checked before the name. */
        assert_int_equal(kdev_dm_check_register("", "gpu", &err), -EINVAL);
        assert_string_equal(err.msg, "requested API version \"\" is not supported by kubelet. "
                                     "Supported version is [\"v1beta1\"]");
        assert_int_equal(kdev_dm_check_register("v1beta1", "gpu", &err), -EINVAL);
        assert_string_equal(err.msg, "the ResourceName \"gpu\" is invalid");
        assert_int_equal(kdev_dm_check_register("v1beta1", "foo.kubernetes.io/x", &err), -EINVAL);
        assert_string_equal(err.msg, "the ResourceName \"foo.kubernetes.io/x\" is invalid");
        assert_int_equal(kdev_dm_check_register("v1beta1", "Vendor.com/gpu", &err), -EINVAL);
}

static void test_update_capacity_checkpoint(void **state)
{
        struct fixture *fx = *state;
        struct kdev_devmgr *dm = fx->dm;
        assert_non_null(kdev_dm_connect(dm, "example.com/gpu", "gpu.sock", false, false));
        /* Only "Healthy" exactly is healthy. */
        const char *s1[] = {"dev-0:Healthy", "dev-1:healthy", "dev-2:Unhealthy", "dev-3:Healthy"};
        update(dm, "example.com/gpu", 4, s1);
        struct kdev_dm_resource *r = kdev_dm_find(dm, "example.com/gpu");
        size_t cap, alloc, used;
        kdev_dm_counts(dm, r, &cap, &alloc, &used);
        assert_int_equal(cap, 4);
        assert_int_equal(alloc, 2);
        assert_int_equal(used, 0);
        assert_string_equal(slurp(fx->ckpt),
                            "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{"
                            "\"example.com/gpu\":[\"dev-0\",\"dev-3\"]}},\"Checksum\":2121335212}");

        /* Each message replaces the list. */
        const char *s2[] = {"dev-0:Healthy", "dev-1:Healthy"};
        update(dm, "example.com/gpu", 2, s2);
        kdev_dm_counts(dm, r, &cap, &alloc, NULL);
        assert_int_equal(cap, 2);
        assert_int_equal(alloc, 2);
        assert_string_equal(slurp(fx->ckpt),
                            "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{"
                            "\"example.com/gpu\":[\"dev-0\",\"dev-1\"]}},\"Checksum\":665642510}");

        /* Stream end: all unhealthy, endpoint stopped. */
        kdev_dm_disconnect(dm, "example.com/gpu");
        kdev_dm_counts(dm, r, &cap, &alloc, NULL);
        assert_int_equal(cap, 2);
        assert_int_equal(alloc, 0);
        assert_true(r->stopped);
        /* Device recovery through a new registration. */
        assert_non_null(kdev_dm_connect(dm, "example.com/gpu", "gpu2.sock", true, true));
        assert_false(r->stopped);
        assert_string_equal(r->endpoint, "gpu2.sock");
        assert_true(r->pre_start_required);
}

static void test_pick_errors(void **state)
{
        struct fixture *fx = *state;
        struct kdev_devmgr *dm = fx->dm;
        struct kdev_dm_pick pick;
        struct kdev_err err = {0};
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 1, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "cannot allocate unregistered device example.com/gpu");
        kdev_dm_pick_clear(&pick);

        kdev_dm_connect(dm, "example.com/gpu", "gpu.sock", false, false);
        const char *bad[] = {"dev-0:Unhealthy"};
        update(dm, "example.com/gpu", 1, bad);
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 1, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg,
                            "no healthy devices present; cannot allocate unhealthy devices example.com/gpu");
        kdev_dm_pick_clear(&pick);

        const char *two[] = {"dev-0:Healthy", "dev-1:Unhealthy", "dev-2:Healthy"};
        update(dm, "example.com/gpu", 3, two);
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 3, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "requested number of devices unavailable for example.com/gpu. "
                                     "Requested: 3, Available: 2");
        kdev_dm_pick_clear(&pick);

        /* Plugin without GetPreferredAllocation: list order. */
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 2, NULL, 0, &pick, &err), 0);
        assert_false(pick.want_preferred);
        assert_false(pick.cached);
        assert_int_equal(pick.n_available, 2);
        assert_int_equal(kdev_dm_pick_finish(&pick, NULL, 0, &err), 0);
        assert_int_equal(pick.n_picked, 2);
        assert_string_equal(pick.picked[0], "dev-0");
        assert_string_equal(pick.picked[1], "dev-2");
        assert_int_equal(kdev_dm_record(dm, "u1", "c", "example.com/gpu", pick.picked, pick.n_picked,
                                        (const uint8_t *)"", 0), 0);
        kdev_dm_pick_clear(&pick);

        /* Allocated devices are not given to another pod. */
        assert_int_equal(kdev_dm_pick_begin(dm, "u2", "c", "example.com/gpu", 1, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "requested number of devices unavailable for example.com/gpu. "
                                     "Requested: 1, Available: 0");
        kdev_dm_pick_clear(&pick);

        /* Same container again: held devices, no Allocate. */
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 2, NULL, 0, &pick, &err), 0);
        assert_true(pick.cached);
        assert_int_equal(pick.n_picked, 2);
        kdev_dm_pick_clear(&pick);
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 1, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "pod \"u1\" container \"c\" changed request for resource "
                                     "\"example.com/gpu\" from 2 to 1");
        kdev_dm_pick_clear(&pick);

        /* A held device turned unhealthy. */
        const char *sick[] = {"dev-0:Unhealthy", "dev-1:Healthy", "dev-2:Healthy"};
        update(dm, "example.com/gpu", 3, sick);
        assert_int_equal(kdev_dm_pick_begin(dm, "u1", "c", "example.com/gpu", 2, NULL, 0, &pick, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "previously allocated devices are no longer healthy; cannot "
                                     "allocate unhealthy devices example.com/gpu");
        kdev_dm_pick_clear(&pick);

        /* Inactive pods free their devices. */
        assert_int_equal(kdev_dm_drop_inactive(dm), 1);
        assert_null(kdev_dm_entry(dm, "u1", "c", "example.com/gpu"));
}

static void test_pick_preferred_and_reuse(void **state)
{
        struct fixture *fx = *state;
        struct kdev_devmgr *dm = fx->dm;
        kdev_dm_connect(dm, "example.com/gpu", "gpu.sock", false, true);
        const char *devs[] = {"a:Healthy", "b:Healthy", "c:Healthy", "d:Healthy"};
        update(dm, "example.com/gpu", 4, devs);
        struct kdev_dm_pick pick;
        struct kdev_err err = {0};

        /* Reused init-container device first, then the plugin's choice. */
        char *reuse[] = {"b"};
        assert_int_equal(kdev_dm_pick_begin(dm, "u", "main", "example.com/gpu", 3, reuse, 1, &pick,
                                            &err), 0);
        assert_true(pick.want_preferred);
        assert_int_equal(pick.needed, 2);
        V1beta1__PreferredAllocationRequest req;
        V1beta1__ContainerPreferredAllocationRequest creq;
        assert_int_equal(kdev_dm_pick_preferred_req(&pick, &req, &creq), 0);
        assert_int_equal(req.n_container_requests, 1);
        assert_int_equal(creq.allocation_size, 3);
        /* available ∪ picked; "b" is available too (not held by anyone). */
        assert_int_equal(creq.n_available_deviceids, 4);
        assert_string_equal(creq.available_deviceids[0], "a");
        assert_string_equal(creq.available_deviceids[3], "d");
        assert_int_equal(creq.n_must_include_deviceids, 1);
        assert_string_equal(creq.must_include_deviceids[0], "b");
        kdev_dm_preferred_req_clear(&req, &creq);

        /* The answer is advisory: unknown IDs are ignored, its order kept,
         * the shortfall filled from the list. */
        char *pref[] = {"zz", "d", "b"};
        assert_int_equal(kdev_dm_pick_finish(&pick, pref, 3, &err), 0);
        assert_int_equal(pick.n_picked, 3);
        assert_string_equal(pick.picked[0], "b");
        assert_string_equal(pick.picked[1], "d");
        assert_string_equal(pick.picked[2], "a");
        kdev_dm_pick_clear(&pick);

        /* Reuse alone covers the request: no preferred call needed. */
        char *reuse2[] = {"c", "a"};
        assert_int_equal(kdev_dm_pick_begin(dm, "u", "side", "example.com/gpu", 2, reuse2, 2, &pick,
                                            &err), 0);
        assert_int_equal(pick.needed, 0);
        assert_false(pick.want_preferred);
        assert_int_equal(pick.n_picked, 2);
        assert_string_equal(pick.picked[0], "c");
        kdev_dm_pick_clear(&pick);
}

static void test_record_numa_and_restart(void **state)
{
        struct fixture *fx = *state;
        struct kdev_devmgr *dm = fx->dm;
        kdev_dm_connect(dm, "example.com/gpu", "gpu.sock", false, false);
        const char *devs[] = {"g0:Healthy:0", "g1:Healthy:0,1", "g2:Healthy"};
        update(dm, "example.com/gpu", 3, devs);
        char *ids[] = {"g1", "g2", "g0"};
        static const uint8_t resp[] = {0x2a, 0x05, 0x0a, 0x03, 'x', '=', 'y'}; /* cdi x=y */
        assert_int_equal(kdev_dm_record(dm, "pod-1", "main", "example.com/gpu", ids, 3, resp,
                                        sizeof(resp)), 0);
        assert_int_equal(kdev_dm_set_active(dm, "pod-1", true), 0);
        struct kdev_err err = {0};
        assert_int_equal(kdev_dm_write_checkpoint(dm, &err), 0);
        assert_string_equal(slurp(fx->ckpt),
                            "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"pod-1\",\"ContainerName\":"
                            "\"main\",\"ResourceName\":\"example.com/gpu\",\"DeviceIDs\":{\"-1\":[\"g2\"],"
                            "\"0\":[\"g1\",\"g0\"],\"1\":[\"g1\"]},\"AllocResp\":\"KgUKA3g9eQ==\"}],"
                            "\"RegisteredDevices\":{\"example.com/gpu\":[\"g0\",\"g1\",\"g2\"]}},"
                            "\"Checksum\":2615740148}");
        size_t n;
        const char **dids = kdev_dm_entry_ids(kdev_dm_entry(dm, "pod-1", "main", "example.com/gpu"), &n);
        assert_int_equal(n, 3);
        assert_string_equal(dids[0], "g2");
        assert_string_equal(dids[1], "g1");
        assert_string_equal(dids[2], "g0");
        free(dids);

        /* Restart: entries back, resource known with no devices, stopped. */
        assert_int_equal(kdev_dm_restart(dm, &err), 0);
        struct kdev_dm_resource *r = kdev_dm_find(dm, "example.com/gpu");
        assert_non_null(r);
        assert_true(r->stopped);
        assert_false(r->has_options);
        size_t cap, alloc, used;
        kdev_dm_counts(dm, r, &cap, &alloc, &used);
        assert_int_equal(cap, 0);
        assert_int_equal(alloc, 0);
        assert_int_equal(used, 3);
        assert_true(kdev_dm_is_plugin_resource(dm, "example.com/gpu"));
        struct kdev_dm_pick pick;
        assert_int_equal(kdev_dm_pick_begin(dm, "pod-1", "main", "example.com/gpu", 3, NULL, 0, &pick,
                                            &err), -EINVAL);
        assert_string_equal(err.msg, "no healthy devices present; cannot allocate unhealthy devices "
                                     "example.com/gpu");
        kdev_dm_pick_clear(&pick);
        /* The checkpoint written now keeps the resource with no healthy IDs. */
        assert_int_equal(kdev_dm_write_checkpoint(dm, &err), 0);
        assert_non_null(strstr(slurp(fx->ckpt), "\"RegisteredDevices\":{\"example.com/gpu\":[]}"));

        /* A corrupt checkpoint: start empty, error says why. */
        FILE *f = fopen(fx->ckpt, "w");
        fputs("{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":null},\"Checksum\":1}", f);
        fclose(f);
        assert_int_equal(kdev_dm_restart(dm, &err), -EBADMSG);
        assert_string_equal(err.msg, "checksum mismatch: stored 1, computed 1944006890");
        assert_int_equal(dm->n_res, 0);
        assert_int_equal(dm->pods.n_entries, 0);
}

/* A ContainerAllocateResponse built from parts. */
struct car {
        V1beta1__ContainerAllocateResponse r;
        V1beta1__ContainerAllocateResponse__EnvsEntry env[4], *envp[4];
        V1beta1__ContainerAllocateResponse__AnnotationsEntry ann[2], *annp[2];
        V1beta1__Mount mnt[2], *mntp[2];
        V1beta1__DeviceSpec dev[2], *devp[2];
        V1beta1__CDIDevice cdi[2], *cdip[2];
};

static void car_init(struct car *c)
{
        memset(c, 0, sizeof(*c));
        v1beta1__container_allocate_response__init(&c->r);
        c->r.envs = c->envp;
        c->r.annotations = c->annp;
        c->r.mounts = c->mntp;
        c->r.devices = c->devp;
        c->r.cdi_devices = c->cdip;
}

static void car_env(struct car *c, char *k, char *v)
{
        size_t i = c->r.n_envs++;
        v1beta1__container_allocate_response__envs_entry__init(&c->env[i]);
        c->env[i].key = k;
        c->env[i].value = v;
        c->envp[i] = &c->env[i];
}

static void car_dev(struct car *c, char *cp, char *hp, char *perm)
{
        size_t i = c->r.n_devices++;
        v1beta1__device_spec__init(&c->dev[i]);
        c->dev[i].container_path = cp;
        c->dev[i].host_path = hp;
        c->dev[i].permissions = perm;
        c->devp[i] = &c->dev[i];
}

static void car_mount(struct car *c, char *cp, char *hp, bool ro)
{
        size_t i = c->r.n_mounts++;
        v1beta1__mount__init(&c->mnt[i]);
        c->mnt[i].container_path = cp;
        c->mnt[i].host_path = hp;
        c->mnt[i].read_only = ro;
        c->mntp[i] = &c->mnt[i];
}

static void car_ann(struct car *c, char *k, char *v)
{
        size_t i = c->r.n_annotations++;
        v1beta1__container_allocate_response__annotations_entry__init(&c->ann[i]);
        c->ann[i].key = k;
        c->ann[i].value = v;
        c->annp[i] = &c->ann[i];
}

static void car_cdi(struct car *c, char *name)
{
        size_t i = c->r.n_cdi_devices++;
        v1beta1__cdidevice__init(&c->cdi[i]);
        c->cdi[i].name = name;
        c->cdip[i] = &c->cdi[i];
}

static void test_merge_options(void **state)
{
        (void)state;
        struct car a, b;
        car_init(&a);
        car_env(&a, "Z", "1");
        car_env(&a, "A", "x");
        car_env(&a, "A", "y"); /* same message: the later value (proto map) */
        car_dev(&a, "/dev/gpu0", "/dev/nvidia0", "rw");
        car_mount(&a, "/usr/lib/x", "/host/lib/x", true);
        car_ann(&a, "k", "v1");
        car_cdi(&a, "vendor.com/gpu=0");
        car_init(&b);
        car_env(&b, "A", "other");
        car_env(&b, "B", "2");
        car_dev(&b, "/dev/gpu0", "/dev/nvidia9", "r");
        car_dev(&b, "/dev/gpu1", "/dev/nvidia1", "rwm");
        car_mount(&b, "/usr/lib/x", "/host/lib/other", false);
        car_ann(&b, "k", "v2");
        car_cdi(&b, "vendor.com/gpu=0");
        car_cdi(&b, "vendor.com/gpu=1");

        struct kdev_dm_opts o = {0};
        assert_int_equal(kdev_dm_opts_add(&o, &a.r), 0);
        assert_int_equal(kdev_dm_opts_add(&o, &b.r), 0);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        kdev_dm_opts_print(f, "  ", &o);
        fclose(f);
        assert_string_equal(text,
                            "  env A=y\n"
                            "  env B=2\n"
                            "  env Z=1\n"
                            "  mount /usr/lib/x from /host/lib/x (ro)\n"
                            "  device /dev/gpu0 from /dev/nvidia0 (rw)\n"
                            "  device /dev/gpu1 from /dev/nvidia1 (rwm)\n"
                            "  annotation k=v1\n"
                            "  cdi vendor.com/gpu=0\n"
                            "  cdi vendor.com/gpu=1\n"
                            "  conflict env A: kept \"y\", dropped \"other\"\n"
                            "  conflict mount /usr/lib/x: kept \"/host/lib/x\", dropped \"/host/lib/other\"\n"
                            "  conflict device /dev/gpu0: kept \"/dev/nvidia0\", dropped \"/dev/nvidia9\"\n"
                            "  conflict annotation k: kept \"v1\", dropped \"v2\"\n");
        free(text);
        json_t *j = kdev_dm_opts_json(&o);
        char *s = json_dumps(j, JSON_COMPACT);
        assert_string_equal(s,
                            "{\"envs\":{\"Z\":\"1\",\"A\":\"y\",\"B\":\"2\"},\"mounts\":[{\"containerPath\":"
                            "\"/usr/lib/x\",\"hostPath\":\"/host/lib/x\",\"readOnly\":true}],\"devices\":"
                            "[{\"containerPath\":\"/dev/gpu0\",\"hostPath\":\"/dev/nvidia0\",\"permissions\":"
                            "\"rw\"},{\"containerPath\":\"/dev/gpu1\",\"hostPath\":\"/dev/nvidia1\","
                            "\"permissions\":\"rwm\"}],\"annotations\":{\"k\":\"v1\"},\"cdiDevices\":"
                            "[{\"name\":\"vendor.com/gpu=0\"},{\"name\":\"vendor.com/gpu=1\"}],\"conflicts\":"
                            "[\"env A: kept \\\"y\\\", dropped \\\"other\\\"\",\"mount /usr/lib/x: kept "
                            "\\\"/host/lib/x\\\", dropped \\\"/host/lib/other\\\"\",\"device /dev/gpu0: kept "
                            "\\\"/dev/nvidia0\\\", dropped \\\"/dev/nvidia9\\\"\",\"annotation k: kept "
                            "\\\"v1\\\", dropped \\\"v2\\\"\"]}");
        free(s);
        json_decref(j);
        kdev_dm_opts_clear(&o);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_register_checks),
                cmocka_unit_test_setup_teardown(test_update_capacity_checkpoint, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pick_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pick_preferred_and_reuse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_record_numa_and_restart, setup, teardown),
                cmocka_unit_test(test_merge_options),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
