/* Private to the NVIDIA module: the ops_data of an NVIDIA resource. */
#ifndef KDEV_NVIDIA_INTERNAL_H
#define KDEV_NVIDIA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvidia/config.h"
#include "nvidia/devinfo.h"
#include "nvidia/resources.h"
#include "nvml/loader.h"

/* NVML under the lookup root of |cfg|'s driver roots (nvidia/roots.h): the
 * options of kdev_nvml_open (library path in |buf|, |size| bytes), for the
 * backend and the usage sampler alike. |why| (may be NULL) gets the "not
 * found under driver root" note. Returns 0 or a negative errno with |err|. */
int kdev_nvidia_nvml_options(const struct kdev_nvidia_config *cfg, struct kdev_nvml_options *o,
                             char *buf, size_t size, struct kdev_err *why, struct kdev_err *err);

struct kdev_nvidia_rdata {
        struct kdev_nvidia_devinfo *infos; /* one per device, same order */
        size_t n_infos;
        /* Allocate settings, copied from the config */
        unsigned strategies;               /* KDEV_NVIDIA_LIST_* */
        enum kdev_nvidia_id_strategy id_strategy;
        bool pass_device_specs;
        bool gdrcopy, gds, mofed;
        /* passDeviceSpecs (NVIDIA apiDeviceSpecs): HostPath = <dev_root>/p,
         * the host dev root (--dev-root, default --driver-root:
         * roots.host_dev); the control nodes and IMEX channels are looked
         * up under dev_lookup, the device-node lookup root of the
         * driver-root rule (nvidia/roots.h roots.dev, "/" for "") */
        char *dev_root;                    /* absolute */
        char *dev_lookup;                  /* absolute */
        char *annotation_prefix;           /* e.g. "cdi.k8s.io/" */
        unsigned *imex_channels;           /* channels found at build time */
        size_t n_imex_channels;
        /* time-slicing failRequestsGreaterThanOne (set by sharing.c) */
        bool fail_gt1;
        /* Which of kdev_nvidia_control_nodes exist under dev_lookup, for
         * passDeviceSpecs (allocate.c): NVIDIA stats them on every Allocate;
         * kdev stats them again when the last check is older than ttl_ns, so
         * a node that appears or disappears is in the answers from at most
         * ttl_ns later. Plain values (a copy by kdev_nvidia_rdata_dup stays
         * right: same dev_lookup); zero (calloc): never checked. */
        struct kdev_nvidia_ctl_cache {
                uint64_t checked_ns; /* CLOCK_MONOTONIC of the last stat; 0: never */
                uint64_t ttl_ns;     /* 0: KDEV_NVIDIA_CONTROL_NODE_TTL_MS */
                unsigned present;    /* bit i: kdev_nvidia_control_nodes[i] exists */
        } ctl;
        /* GetPreferredAllocation data (preferred.h), owned; NULL until
         * kdev_nvidia_pref_attach, which runs once the devices are final.
         * kdev_nvidia_rdata_dup must not share it (copy NULL). */
        struct kdev_nvidia_pref *pref;
        /* Isolated replicas (nvidia/isolation.h): NULL when the resource's
         * replicas are not isolated. Owned; set by kdev_nvidia_apply_sharing,
         * duplicated by kdev_nvidia_rdata_dup. */
        struct kdev_nvidia_share_rdata *share;
        /* sharing.mps: the host MPS root (--mps-root) when this resource's
         * replicas are served by an MPS control daemon (nvidia/mps.h), NULL
         * otherwise. Owned; set by kdev_nvidia_apply_sharing. */
        char *mps_root;
        /* NOTE: a new owned pointer field must also be duplicated in
         * kdev_nvidia_rdata_dup (sharing.c) and freed in kdev_nvidia_rdata_free. */
};

/* How long Allocate trusts its last stat of the control nodes
 * (struct kdev_nvidia_ctl_cache), in milliseconds. */
#define KDEV_NVIDIA_CONTROL_NODE_TTL_MS 1000

/* The isolation of a resource's replicas, as Allocate needs it. */
struct kdev_nvidia_share_rdata {
        struct kdev_nvidia_isolated_resource iso; /* a copy: name and policy owned */
        unsigned replicas;                        /* the time-slicing replicas per device */
        char *root;                               /* --share-root */
        char *cdi_dir;                            /* where the per-container CDI specs go */
};

/* A share record for resource entry |iso| (copied), NULL when out of memory;
 * free with kdev_nvidia_share_free (NULL-safe). Equality of two (NULL equals
 * NULL only). (share_host.c) */
struct kdev_nvidia_share_rdata *kdev_nvidia_share_new(const struct kdev_nvidia_isolated_resource *iso,
                                                      unsigned replicas, const char *root,
                                                      const char *cdi_dir);
void kdev_nvidia_share_free(struct kdev_nvidia_share_rdata *s);
bool kdev_nvidia_share_same(const struct kdev_nvidia_share_rdata *a,
                            const struct kdev_nvidia_share_rdata *b);

/* The share edits of a container given the |n| isolated replicas |devs| of
 * |r| (d->share set): a region directory with its limits file under the
 * share root, then, with a CDI strategy, the container's CDI spec
 * "kdev.io/share=<id>" named in the answer (annotation
 * "<prefix>kdev-share_<id>" for cdi-annotations, a CDI device for cdi-cri),
 * otherwise the mounts and env in the answer itself (share_host.h); then
 * the regions of containers that are gone are removed. Errors: those of
 * kdev_nvidia_share_limits, the directory and file errors, -ENOMEM; nothing
 * is left behind on error. (share_host.c) */
int kdev_nvidia_share_allocate(const struct kdev_nvidia_rdata *d, const struct kdev_resource *r,
                               const struct kdev_device *const *devs, size_t n,
                               struct kdev_container_edits *out, struct kdev_err *err);

void kdev_nvidia_rdata_free(void *data);

/* A copy of |src| whose pointer fields are its own, with no infos (infos
 * NULL, n_infos 0): for a resource split off by time-slicing. Malloc'ed; free
 * with kdev_nvidia_rdata_free. NULL when out of memory. (sharing.c) */
struct kdev_nvidia_rdata *kdev_nvidia_rdata_dup(const struct kdev_nvidia_rdata *src);

/* filepath.Join(a, b) for absolute |a|: one '/' between, repeated and
 * trailing slashes dropped ("/" + "/dev/x" -> "/dev/x"). Malloc'ed or NULL. */
char *kdev_nvidia_join(const char *a, const char *b);

/* kdev_nvidia_join(a, b) written into |out| (room for strlen(a) + strlen(b)
 * + 2 bytes); returns its length. */
size_t kdev_nvidia_join_to(char *out, const char *a, const char *b);

/* Formats one warning (printf |fmt|; cut at 511 bytes) and hands it to
 * |warn| with |arg|, valid during the call; nothing when |warn| is NULL.
 * The building and time-slicing warnings (resources.c, sharing.c). */
void kdev_nvidia_warnf(kdev_nvidia_warn_fn warn, void *arg, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#endif /* KDEV_NVIDIA_INTERNAL_H */
