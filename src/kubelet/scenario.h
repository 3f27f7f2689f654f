/* Scenario files for `kdevctl kubelet --scenario FILE`: what the simulated
 * kubelet does once it serves kubelet.sock. YAML, strict (unknown keys, wrong
 * types and bad values are errors with file:line:column and key path).
 * The format is documented in examples/scenario-reference.yaml:
 *
 *   wait:                  # optional: before anything else
 *     timeout: 30          # seconds (default 30)
 *     resources:           # resource -> at least N allocatable devices
 *       example.com/null: 2  # (0 = until the resource is registered)
 *     allocatable:         # resource -> exactly N allocatable devices
 *       example.com/gpu: 7   # (resources and/or allocatable; a resource
 *                            # under one of them only)
 *   pods:                  # admitted in order, after `wait`
 *     - name: train
 *       uid: optional      # default: derived from the name
 *       initContainers: [{name: init, limits: {example.com/null: 1}}]
 *       containers:
 *         - name: main
 *           limits: {example.com/null: 1}
 *   steps:                 # optional, after `pods`: an ordered list of
 *     - wait: {...}        #   the same wait,
 *     - pod: {...}         #   one pod admission,
 *     - delete: train      #   removal of a pod (frees its devices),
 *     - restart: true      #   a kubelet restart,
 *     - sleep: 0.5         #   a pause in seconds,
 *     - exec: "cmd args"   #   a /bin/sh -c command (30 s timeout), or
 *     - exec: {command: "cmd", timeout: 10}
 */
#ifndef KDEV_KUBELET_SCENARIO_H
#define KDEV_KUBELET_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"

/* Default wait timeout, seconds. */
#define KDEV_SCN_DEFAULT_WAIT_S 30
/* Default exec timeout, seconds. */
#define KDEV_SCN_DEFAULT_EXEC_S 30

struct kdev_scn_limit {
        char *resource;
        uint64_t count;
};

struct kdev_scn_container {
        char *name;
        bool init;                     /* an init container */
        struct kdev_scn_limit *limits; /* in file order */
        size_t n_limits;
};

struct kdev_scn_pod {
        char *name;
        char *uid;
        struct kdev_scn_container *containers; /* init containers first, file order */
        size_t n_containers;
};

/* Every condition must hold at the same moment; a resource appears in at
 * most one of the two lists. */
struct kdev_scn_wait {
        uint64_t timeout_ms;
        struct kdev_scn_limit *resources;   /* `resources`: allocatable >= count */
        size_t n_resources;
        struct kdev_scn_limit *allocatable; /* `allocatable`: allocatable == count */
        size_t n_allocatable;
};

enum kdev_scn_kind {
        KDEV_SCN_WAIT,
        KDEV_SCN_POD,
        KDEV_SCN_DELETE,
        KDEV_SCN_RESTART,
        KDEV_SCN_SLEEP,
        KDEV_SCN_EXEC,
};

struct kdev_scn_step {
        enum kdev_scn_kind kind;
        int line;                  /* line in the file (1-based) */
        struct kdev_scn_wait wait; /* KDEV_SCN_WAIT */
        struct kdev_scn_pod pod;   /* KDEV_SCN_POD */
        char *name;                /* KDEV_SCN_DELETE: pod name */
        uint64_t sleep_ms;         /* KDEV_SCN_SLEEP */
        char *command;             /* KDEV_SCN_EXEC: /bin/sh -c text, not empty */
        uint64_t timeout_ms;       /* KDEV_SCN_EXEC: > 0 (default 30000) */
};

struct kdev_scenario {
        struct kdev_scn_step *steps; /* wait, then pods, then steps */
        size_t n_steps;
};

/* Parses scenario YAML |text| (|len| bytes); |name| names the source in
 * messages. On success fills |scn| (free with kdev_scenario_clear()) and
 * returns 0; otherwise returns -EINVAL (or -ENOMEM) with |err| as
 * "<name>:<line>:<column>: <key path>: <problem>", e.g.
 * "s.yaml:4:9: pods[0].containers[0].limits.example.com/gpu: expected a
 * non-negative integer, got \"x\"". */
KDEV_API int kdev_scenario_parse(const char *text, size_t len, const char *name,
                                 struct kdev_scenario *scn, struct kdev_err *err);

/* Largest scenario file read (bytes): kind "scenario file" (kdevctl kubelet
 * and kdevctl dra scenarios). */
#define KDEV_SCENARIO_FILE_MAX (1024 * 1024)

/* Reads |path| with kdev_file_read (a regular file of at most
 * KDEV_SCENARIO_FILE_MAX bytes, no NUL bytes; its errors: "<path>: cannot
 * read: <reason>", "<path>: is not a regular file (a FIFO)", ...) and parses
 * it (see kdev_scenario_parse()). */
KDEV_API int kdev_scenario_load(const char *path, struct kdev_scenario *scn, struct kdev_err *err);

/* Frees the contents of |scn| and zeroes it. NULL-safe. */
KDEV_API void kdev_scenario_clear(struct kdev_scenario *scn);

/* Writes the default UID of pod |name| into |buf| (at least 37 bytes): a
 * UUID-shaped text derived from FNV-1a 64 of the name, so runs repeat. */
KDEV_API void kdev_scenario_default_uid(const char *name, char *buf, size_t size);

#endif /* KDEV_KUBELET_SCENARIO_H */
