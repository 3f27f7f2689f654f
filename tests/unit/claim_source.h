/* The ResourceClaims a unit test's DRA plugin reads (dra/plugin.h
 * options.get_claim), shared by the tests that prepare claims. */
#ifndef KDEV_TESTS_CLAIM_SOURCE_H
#define KDEV_TESTS_CLAIM_SOURCE_H

#include <errno.h>
#include <stdio.h>

#include <jansson.h>

#include "common/err.h"

struct claim_source {
        json_t *claims; /* "ns/name" -> claim object, owned */
        unsigned calls; /* GETs answered so far */
};

/* kdev_dra_get_claim_fn over the claim_source |arg|: a deep copy of
 * "ns/name" into *claim, or -ENOENT "GET ns/name: 404 Not Found" as the
 * API server answers a claim it does not have. */
static inline int claim_source_get(void *arg, const char *ns, const char *name, json_t **claim,
                                   struct kdev_err *err)
{
        struct claim_source *s = arg;
        char key[256];
        json_t *c;

        s->calls++;
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        c = json_object_get(s->claims, key);
        if (!c)
                return kdev_err_set(err, ENOENT, "GET %s: 404 Not Found", key);
        *claim = json_deep_copy(c);
        return 0;
}

#endif /* KDEV_TESTS_CLAIM_SOURCE_H */
