/* libFuzzer target: the structured allocator (sched/allocator.h). The input
 * is a JSON document {"node": ..., "slices": [...], "classes": [...],
 * "allocated": [...], "claims": [...]} (the shape of a case of
 * tests/data/sched/cases.json with the slices inline); anything else is
 * ignored. An allocator is built and each claim allocated in turn. Checked:
 * a failure always says why, an allocation has devices.results with at most
 * 32 entries (none only for a claim without requests), a claim that cannot be allocated has at least one reason, and
 * nothing leaks (the sanitizers). The search bound (KDEV_SCHED_MAX_STEPS)
 * keeps each input's time finite; inputs are limited to 64 KiB. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sched/allocator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > 64 * 1024)
                return 0;
        json_t *doc = json_loadb((const char *)data, size, 0, NULL);
        if (!json_is_object(doc)) {
                json_decref(doc);
                return 0;
        }
        const char *node = json_string_value(json_object_get(doc, "node"));
        const json_t *slices = json_object_get(doc, "slices");
        const json_t *classes = json_object_get(doc, "classes");
        const json_t *allocated = json_object_get(doc, "allocated");
        struct kdev_sched_input in = {
                .node = node ? node : "node-a",
                .node_labels = json_object_get(doc, "labels"),
                .slices = json_is_array(slices) ? slices : NULL,
                .classes = json_is_array(classes) ? classes : NULL,
                .allocated = json_is_array(allocated) ? allocated : NULL,
        };
        struct kdev_sched *s = NULL;
        struct kdev_err err = {0};
        int rc = kdev_sched_new(&in, &s, &err);
        if (rc < 0) {
                if (!err.msg[0] || s)
                        abort();
                json_decref(doc);
                return 0;
        }
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(doc, "claims"), i, c) {
                if (i >= 8)
                        break;
                json_t *alloc = NULL, *why = NULL;
                kdev_err_clear(&err);
                rc = kdev_sched_allocate(s, c, &alloc, &why, &err);
                if (rc == 1) {
                        const json_t *res = json_object_get(json_object_get(alloc, "devices"),
                                                            "results");
                        /* no results only for a claim without requests */
                        size_t nreq = json_array_size(json_object_get(
                                json_object_get(json_object_get(c, "spec"), "devices"), "requests"));
                        if (!json_is_array(res) || (json_array_size(res) == 0) != (nreq == 0) ||
                            json_array_size(res) > KDEV_SCHED_MAX_RESULTS || why)
                                abort();
                } else if (rc == 0) {
                        if (!json_is_array(why) || json_array_size(why) == 0 || alloc)
                                abort();
                } else if (!err.msg[0] || alloc || why) {
                        abort();
                }
                json_decref(alloc);
                json_decref(why);
        }
        kdev_sched_free(s);
        json_decref(doc);
        return 0;
}
