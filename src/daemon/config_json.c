/* kdev-plugin's effective configuration as JSON (daemon/config_json.h). */
#include "daemon/config_json.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/runtime.h"

/* jansson's setters take the reference of a new value; a NULL value (out of
 * memory) makes json_object_set_new() fail, which |ok| collects. */
struct jb {
        bool ok;
};

static void put(struct jb *b, json_t *obj, const char *key, json_t *v)
{
        if (!obj || !v || json_object_set_new(obj, key, v) < 0)
                b->ok = false;
}

static void push(struct jb *b, json_t *arr, json_t *v)
{
        if (!arr || !v || json_array_append_new(arr, v) < 0)
                b->ok = false;
}

/* A string, or null for NULL. */
static json_t *str_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

static json_t *resource(struct jb *b, const char *pattern, const char *name)
{
        json_t *r = json_object();
        put(b, r, "pattern", json_string(pattern));
        put(b, r, "name", json_string(name));
        return r;
}

/* NVIDIA's ReplicatedResources (replicas.go) of sharing.timeSlicing or
 * sharing.mps; |mps|: failRequestsGreaterThanOne defaults to true. */
static json_t *replicated(struct jb *b, const struct kdev_nvidia_replicated *r, bool mps)
{
        json_t *o = json_object();
        if (r->rename_by_default)
                put(b, o, "renameByDefault", json_true());
        if (r->fail_requests_greater_than_one >= 0)
                put(b, o, "failRequestsGreaterThanOne",
                    json_boolean(r->fail_requests_greater_than_one));
        else if (mps)
                put(b, o, "failRequestsGreaterThanOne", json_true());
        if (r->n_resources > 0) {
                json_t *list = json_array();
                for (size_t i = 0; i < r->n_resources; i++) {
                        const struct kdev_nvidia_replicated_resource *x = &r->resources[i];
                        json_t *e = json_object();
                        put(b, e, "name", json_string(x->name));
                        if (x->rename)
                                put(b, e, "rename", json_string(x->rename));
                        json_t *dev;
                        if (x->devices_kind == KDEV_NVIDIA_DEVICES_COUNT) {
                                dev = json_integer(x->devices_count);
                        } else if (x->devices_kind == KDEV_NVIDIA_DEVICES_LIST) {
                                dev = json_array();
                                for (size_t j = 0; j < x->n_devices; j++)
                                        push(b, dev, json_string(x->devices[j]));
                        } else {
                                dev = json_string("all");
                        }
                        put(b, e, "devices", dev);
                        put(b, e, "replicas", json_integer(x->replicas));
                        push(b, list, e);
                }
                put(b, o, "resources", list);
        }
        return o;
}

static void nvidia_keys(struct jb *b, json_t *root, const struct kdev_nvidia_config *nv)
{
        static const char *const discovery[] = {"auto", "nvml", "tegra"};
        static const char *const policy[] = {"distributed", "packed"};
        json_t *flags = json_object();
        put(b, flags, "migStrategy", json_string(kdev_nvidia_mig_strategy_name(nv->mig_strategy)));
        put(b, flags, "failOnInitError", json_boolean(nv->fail_on_init_error));
        put(b, flags, "mpsRoot", json_string(nv->mps_root ? nv->mps_root : ""));
        put(b, flags, "nvidiaDriverRoot", str_or_null(nv->driver_root));
        put(b, flags, "nvidiaDevRoot",
            str_or_null(nv->dev_root && *nv->dev_root ? nv->dev_root : nv->driver_root));
        put(b, flags, "gdrcopyEnabled", json_boolean(nv->gdrcopy_enabled));
        put(b, flags, "gdsEnabled", json_boolean(nv->gds_enabled));
        put(b, flags, "mofedEnabled", json_boolean(nv->mofed_enabled));
        put(b, flags, "deviceDiscoveryStrategy", json_string(discovery[nv->discovery]));
        json_t *plugin = json_object();
        put(b, plugin, "passDeviceSpecs", json_boolean(nv->pass_device_specs));
        json_t *lists = json_array();
        static const char *const list_names[] = {"envvar", "volume-mounts", "cdi-annotations",
                                                 "cdi-cri"};
        for (unsigned i = 0; i < 4; i++)
                if (nv->device_list_strategies & (1u << i))
                        push(b, lists, json_string(list_names[i]));
        put(b, plugin, "deviceListStrategy", lists);
        put(b, plugin, "deviceIDStrategy",
            json_string(kdev_nvidia_id_strategy_name(nv->id_strategy)));
        put(b, plugin, "cdiAnnotationPrefix", str_or_null(nv->cdi_annotation_prefix));
        put(b, plugin, "nvidiaCTKPath", str_or_null(nv->nvidia_ctk_path));
        put(b, plugin, "containerDriverRoot", str_or_null(nv->container_driver_root));
        put(b, plugin, "sharedDevicesAllocationPolicy", json_string(policy[nv->shared_policy]));
        put(b, flags, "plugin", plugin);
        put(b, root, "flags", flags);

        json_t *res = json_object();
        json_t *gpus = json_array();
        push(b, gpus, resource(b, "*", "nvidia.com/gpu"));
        put(b, res, "gpus", gpus);
        if (nv->mig_strategy == KDEV_NVIDIA_MIG_SINGLE) {
                json_t *mig = json_array();
                push(b, mig, resource(b, "*", "nvidia.com/gpu"));
                put(b, res, "mig", mig);
        }
        put(b, root, "resources", res);

        json_t *sharing = json_object();
        put(b, sharing, "timeSlicing", replicated(b, &nv->time_slicing, false));
        if (nv->mps.present)
                put(b, sharing, "mps", replicated(b, &nv->mps, true));
        put(b, root, "sharing", sharing);

        json_t *imex = json_object();
        if (nv->n_imex_channel_ids > 0) {
                json_t *ids = json_array();
                for (size_t i = 0; i < nv->n_imex_channel_ids; i++)
                        push(b, ids, json_integer(nv->imex_channel_ids[i]));
                put(b, imex, "channelIDs", ids);
        }
        if (nv->imex_required)
                put(b, imex, "required", json_true());
        put(b, root, "imex", imex);
}

static json_t *generic_json(struct jb *b, const struct kdev_generic_config *g)
{
        json_t *devices = json_array();
        for (size_t i = 0; i < g->n_resources; i++) {
                const struct kdev_generic_resource *r = &g->resources[i];
                json_t *groups = json_array();
                for (size_t j = 0; j < r->n_groups; j++) {
                        const struct kdev_generic_group *gr = &r->groups[j];
                        json_t *paths = json_array();
                        for (size_t k = 0; k < gr->n_paths; k++) {
                                const struct kdev_generic_path *p = &gr->paths[k];
                                json_t *pj = json_object();
                                put(b, pj, "path", json_string(p->path));
                                if (p->mount_path)
                                        put(b, pj, "mountPath", json_string(p->mount_path));
                                put(b, pj, "permissions", json_string(p->permissions));
                                put(b, pj, "limit", json_integer(p->limit));
                                push(b, paths, pj);
                        }
                        json_t *gj = json_object();
                        put(b, gj, "paths", paths);
                        put(b, gj, "count", json_integer(gr->count));
                        push(b, groups, gj);
                }
                json_t *rj = json_object();
                put(b, rj, "name", json_string(r->name));
                put(b, rj, "groups", groups);
                push(b, devices, rj);
        }
        json_t *o = json_object();
        put(b, o, "devices", devices);
        return o;
}

/* NULL for NULL or "" (an option that is off). */
static const char *on(const char *s)
{
        return s && *s ? s : NULL;
}

/* kdev's `isolation` section (nvidia/isolation.h), every key: memory in
 * bytes and compute in percent, null for the defaults (the GPU's memory /
 * replicas, 100 / replicas) and for the library's default policy; then the
 * share root and library (null: found next to the binary). */
static json_t *isolation_json(struct jb *b, const struct kdev_nvidia_config *nv)
{
        json_t *iso = json_object(), *list = json_array();
        for (size_t i = 0; list && i < nv->isolation.n_resources; i++) {
                const struct kdev_nvidia_isolated_resource *r = &nv->isolation.resources[i];
                json_t *e = json_object();
                put(b, e, "name", json_string(r->name));
                put(b, e, "memory", r->memory ? json_integer((json_int_t)r->memory) : json_null());
                put(b, e, "compute", r->compute ? json_integer(r->compute) : json_null());
                put(b, e, "policy", str_or_null(r->policy));
                put(b, e, "preload",
                    json_string(r->preload == KDEV_NVIDIA_PRELOAD_ENV ? "env" : "file"));
                if (!e || json_array_append_new(list, e) < 0)
                        b->ok = false;
        }
        put(b, iso, "resources", list);
        put(b, iso, "shareRoot", str_or_null(nv->share_root));
        put(b, iso, "shareLibrary", str_or_null(on(nv->share_library)));
        return iso;
}

char *kdev_dp_config_json(const struct kdev_nvidia_config *nv,
                          const struct kdev_generic_config *generic,
                          const struct kdev_dp_daemon_options *o)
{
        struct jb b = {.ok = true};
        json_t *root = json_object();
        put(&b, root, "version", json_string("v1"));
        if (nv->wanted)
                nvidia_keys(&b, root, nv);
        json_t *health = json_object();
        put(&b, health, "probeInterval", json_integer(nv->probe_interval));
        put(&b, health, "quietPeriod", json_integer(nv->quiet_period));
        put(&b, root, "health", health);
        if (nv->usage_interval) {
                json_t *usage = json_object();
                put(&b, usage, "interval", json_integer(nv->usage_interval));
                put(&b, root, "usage", usage);
        }
        if (generic && generic->n_resources > 0)
                put(&b, root, "generic", generic_json(&b, generic));
        if (nv->isolation.present)
                put(&b, root, "isolation", isolation_json(&b, nv));

        const char *dir = o->dp.plugin_dir ? o->dp.plugin_dir : KDEV_DP_DEFAULT_DIR;
        char *kubelet = NULL;
        if (o->dp.kubelet_socket)
                kubelet = strdup(o->dp.kubelet_socket);
        else if (asprintf(&kubelet, "%s/%s", dir, KDEV_DP_KUBELET_SOCKET) < 0)
                kubelet = NULL;
        json_t *k = json_object();
        put(&b, k, "configFile", str_or_null(o->config));
        put(&b, k, "devicePluginDir", json_string(dir));
        put(&b, k, "kubeletSocket", kubelet ? json_string(kubelet) : NULL);
        const char *prefix = o->dp.socket_prefix ? o->dp.socket_prefix
                                                 : KDEV_DP_DEFAULT_SOCKET_PREFIX;
        put(&b, k, "socketPrefix", json_string(prefix));
        put(&b, k, "cdiDir", str_or_null(nv->cdi_dir));
        put(&b, k, "procRoot", str_or_null(nv->proc_root));
        put(&b, k, "root", str_or_null(on(o->generic_root)));
        put(&b, k, "metricsAddress", str_or_null(on(o->metrics_address)));
        put(&b, k, "nfdFeaturesFile", str_or_null(on(o->nfd_file)));
        put(&b, root, "kdev", k);
        free(kubelet);

        char *text = b.ok && root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(root);
        return text;
}
