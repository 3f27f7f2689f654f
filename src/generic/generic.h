/* kdev generic backend: device nodes under /dev found by glob patterns and
 * grouped into extended resources (in the spirit of squat/generic-device-plugin).
 *
 * Config file (YAML, strict; see examples/generic-demo.yaml):
 *
 *   version: v1
 *   generic:
 *     rescanInterval: 10               # optional: seconds between rescans (1..3600)
 *     gracePeriod: 300                 # optional: seconds a vanished device stays
 *                                      # advertised Unhealthy (0..86400)
 *     devices:
 *       - name: example.com/fuse       # extended resource name
 *         groups:                      # each group yields device sets
 *           - paths:                   # every set has one match of each path
 *               - path: /dev/fuse      # absolute glob
 *                 mountPath: /dev/fuse # optional container path
 *                 permissions: rw      # optional subset of "rwm" (default "rw")
 *                 limit: 1             # optional: sets sharing one match (1..1000)
 *             count: 4                 # optional: replicas of each set (1..1000)
 *
 * Discovery never opens device nodes (glob, lstat, stat and realpath only) and
 * never walks directories recursively. While kdev-plugin serves, the matches
 * are followed by the live inventory (generic/live.h).
 */
#ifndef KDEV_GENERIC_GENERIC_H
#define KDEV_GENERIC_GENERIC_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "model/model.h"

#define KDEV_GENERIC_COUNT_MAX 1000      /* count: replicas per set */
#define KDEV_GENERIC_LIMIT_MAX 1000      /* limit: sets per match */
#define KDEV_GENERIC_MATCHES_MAX 4096    /* matches of one glob */
#define KDEV_GENERIC_DEVICES_MAX 16384   /* devices of one resource */
#define KDEV_GENERIC_RESOURCES_MAX 256   /* generic.devices entries */
#define KDEV_GENERIC_GROUPS_MAX 256      /* groups of one resource */
#define KDEV_GENERIC_PATHS_MAX 64        /* paths of one group */
#define KDEV_GENERIC_RESCAN_DEFAULT 10   /* rescanInterval: seconds */
#define KDEV_GENERIC_RESCAN_MAX 3600
#define KDEV_GENERIC_GRACE_DEFAULT 300   /* gracePeriod: seconds */
#define KDEV_GENERIC_GRACE_MAX 86400

/* One path of a group. */
struct kdev_generic_path {
        char *path;           /* absolute glob, no ".." component */
        char *mount_path;     /* NULL: the matched path as named; ending in '/': a directory,
                               * the match's basename is appended; else used as is */
        char permissions[4];  /* non-empty, canonical order subset of "rwm" */
        unsigned limit;       /* how many sets may use one match, >= 1 */
        unsigned line, column; /* position of the `path` value in the file (1-based) */
};

/* A group: sets of matches, one match of each path per set. */
struct kdev_generic_group {
        struct kdev_generic_path *paths;
        size_t n_paths;       /* >= 1 */
        unsigned count;       /* each set is advertised |count| times, 1..1000 */
        unsigned line, column; /* position of the group entry (1-based) */
};

/* One extended resource. */
struct kdev_generic_resource {
        char *name;           /* passes kdev_resource_name_check */
        struct kdev_generic_group *groups;
        size_t n_groups;      /* >= 1 */
        unsigned line, column; /* position of the entry (1-based) */
        unsigned name_line, name_column; /* position of the name value */
};

struct kdev_generic_config {
        char *source;         /* the display name of the file, used in messages */
        struct kdev_generic_resource *resources; /* unique names, file order */
        size_t n_resources;
        /* generic.rescanInterval: seconds between two rescans of every glob
         * while serving (the safety net under the inotify watches, the only
         * means when a watch cannot be added), 1..3600, default 10 */
        unsigned rescan_interval;
        /* generic.gracePeriod: seconds a device whose node vanished stays
         * advertised, Unhealthy, before it is dropped from the list
         * (src/generic/live.c), 0..86400, default 300 */
        unsigned grace_period;
};

/* Receives one warning from kdev_generic_discover. |msg| is one line without
 * a trailing newline, owned by the caller of the callback and valid only
 * during the call; |arg| is kdev_generic_options.warn_arg. */
typedef void (*kdev_generic_warn_fn)(void *arg, const char *msg);

/* Warnings shown for one path at most; the rest are summed up in one line. */
#define KDEV_GENERIC_WARN_PER_PATH 8

/* Discovery options. */
struct kdev_generic_options {
        /* Directory prepended to every glob for discovery (tests use a fixture
         * tree); NULL, "" or "/" means the real root. Host paths are reported
         * as the real path of the node (under |root|), container paths as
         * configured (or as matched, without |root|). Symlinks are resolved
         * in the host's namespace, not inside |root|. */
        const char *root;
        /* Accept regular files as device nodes (tests); by default only
         * character and block devices are used. */
        bool allow_regular_files;
        /* Called for each warning (see kdev_generic_discover); NULL: warnings
         * are dropped. */
        kdev_generic_warn_fn warn;
        void *warn_arg;
};

struct kdev_config_root;

/* Registers the `generic` section on kdev's config root |root|
 * (config/config.h) and allocates the config it fills: *out, empty, whose
 * source is |display_name| (NULL: "<config>"); free it with
 * kdev_generic_config_free, also after a failed read (it may then hold part
 * of the file). Errors (*out = NULL): -ENOMEM; those of kdev_config_register
 * ("config section \"generic\" defined twice", "too many config sections"). */
KDEV_API int kdev_generic_config_register(struct kdev_config_root *root, const char *display_name,
                                          struct kdev_generic_config **out, struct kdev_err *err);

/* Loads and checks the config file at |path| with the generic section alone
 * (and `version`). On success *out is a new config (free with
 * kdev_generic_config_free). Errors (*out = NULL): the errno of open/read
 * (`demo.yaml: cannot read: No such file or directory`), -EFBIG for files over
 * 1 MiB, -EINVAL for YAML syntax errors and schema violations, each as
 * `file:line:column: key.path: message`, e.g. `demo.yaml:7:16:
 * generic.devices[0].groups[0].count: must be an integer between 1 and 1000,
 * got "0"`; -ENOMEM. */
KDEV_API int kdev_generic_config_load(const char *path, struct kdev_generic_config **out,
                                      struct kdev_err *err);

/* Like kdev_generic_config_load, from |len| bytes of |text|; messages name
 * |display_name|. */
KDEV_API int kdev_generic_config_parse(const char *display_name, const char *text, size_t len,
                                       struct kdev_generic_config **out, struct kdev_err *err);

/* Frees |cfg|. NULL-safe. */
KDEV_API void kdev_generic_config_free(struct kdev_generic_config *cfg);

/* Finds the devices of every resource of |cfg| (|opts| may be NULL: defaults)
 * and appends one kdev_resource per config resource, in config order, to
 * |out| (which may already hold resources; their names must differ). A
 * resource whose globs match nothing has 0 devices; that is not an error.
 *
 * Per group: each path's glob is expanded (at most 4096 entries) and the
 * entries kept are character or block devices (and regular files when
 * allowed), reached directly or through symlinks; directories, other file
 * types and dangling symlinks are skipped.
 *
 * Warnings (through opts->warn; never an error): when a path's glob matched
 * entries but none of them was kept, each skipped entry is reported, in
 * natural order of the matched path (as named, without |root|), e.g.
 *   `example.com/x: /etc/passwd is a regular file, not a device node; skipped`
 *   `example.com/x: /dev is a directory; skipped`
 *   `example.com/x: /dev/a is a FIFO, not a device node; skipped` (also
 *     "a socket", and "not a device node" for other types)
 *   `example.com/x: /dev/l is a symlink to /etc/passwd, which is a regular
 *     file, not a device node; skipped` (target = its real path on the host)
 *   `example.com/x: /dev/l is a dangling symlink; skipped`
 *   `example.com/x: /dev/l cannot be resolved: <strerror>; skipped`
 * at most KDEV_GENERIC_WARN_PER_PATH of them, then
 *   `example.com/x: 4 more entries matching /dev/ttyS* skipped`.
 * A glob that matches nothing gives no warning (the device may be absent), nor
 * does a glob of which at least one entry was kept. Warnings that cannot be
 * allocated are dropped. Warnings of a call that then fails are still given.
 *
 * Kept matches are sorted in natural order of the matched path. sets = min
 * over paths of matches x limit (0 when a path has no match); set i uses match
 * (i mod matches) of every path. Each set gives |count| devices.
 *
 * Device ID: the basename of the set's first-path match; "-<k>" appended when
 * the group has more sets than first-path matches (k = i / matches, the k-th
 * reuse); "::<n>" appended when count > 1 (n = 0..count-1, the replica
 * convention). If an ID occurs in several groups of a resource, the IDs of
 * those groups get the prefix "g<group index>-". Device specs: one per path:
 * container path (mountPath rules above), host path = realpath of the match,
 * permissions. numa_node = -1, healthy.
 *
 * Returns 0, or (|out| unchanged) an error with `file:line:column: key.path:
 * message`: -E2BIG for a glob with more than 4096 entries or a resource with
 * more than 16384 devices; -EINVAL for an ID longer than 63 characters, with
 * characters outside printable ASCII, or still not unique. -ENOENT/-ENOTDIR
 * (`root "/x": ...`) when |root| is not a directory; -EEXIST when |out|
 * already has a resource of the same name; -ENOMEM. */
KDEV_API int kdev_generic_discover(const struct kdev_generic_config *cfg,
                                   const struct kdev_generic_options *opts,
                                   struct kdev_resource_set *out, struct kdev_err *err);

#endif /* KDEV_GENERIC_GENERIC_H */
