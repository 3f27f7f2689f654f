/* The generic backend's own interface between discovery (discover.c) and the
 * live inventory (live.c): one resource discovered with the keys that say
 * which devices are the same from one scan to the next. */
#ifndef KDEV_GENERIC_GENERIC_INTERNAL_H
#define KDEV_GENERIC_GENERIC_INTERNAL_H

#include <stddef.h>

#include "common/err.h"
#include "generic/generic.h"
#include "model/model.h"

/* One resource as discovered now. Each device has a key, the same for the
 * same device from scan to scan whatever else appears or vanishes:
 * "<group index>\x1f<reuse k>\x1f<replica r>\x1f<first-path match as named>"
 * (the set's first-path match, its k-th reuse, replica r), and a base, its
 * ID without the "g<group>-" prefix. */
struct kdev_generic_scan {
        struct kdev_resource_set set; /* one resource and its physical devices, linked */
        char **keys;                  /* per device, owned */
        char **bases;                 /* per device, owned */
        size_t *groups;               /* per device: group index */
};

/* Discovers resource |ri| of |cfg| as kdev_generic_discover() does (same
 * devices, IDs, order, warnings and errors) into |out| (overwritten), with
 * the keys. |opts| may be NULL. Returns 0, or a negative errno with |err|
 * (|out| then empty). Free with kdev_generic_scan_clear(). */
int kdev_generic_scan_resource(const struct kdev_generic_config *cfg, size_t ri,
                               const struct kdev_generic_options *opts,
                               struct kdev_generic_scan *out, struct kdev_err *err);

/* Frees what |s| holds and empties it. NULL-safe. */
void kdev_generic_scan_clear(struct kdev_generic_scan *s);

#endif /* KDEV_GENERIC_GENERIC_INTERNAL_H */
