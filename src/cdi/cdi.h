/* kdev CDI (Container Device Interface) spec writer.
 *
 * Builds a CDI spec in memory, checks it against the rules of the CDI
 * specification (cncf-tags/container-device-interface SPEC.md 1.1.0 and the
 * checks its Go loader makes: pkg/parser/parser.go, pkg/cdi/container-edits.go,
 * specs-go/version.go), renders it as JSON, writes it atomically into a CDI
 * spec directory, and reads it back. Generic: it knows nothing of GPUs.
 *
 * Ownership: a struct kdev_cdi_spec owns every string and array reachable from
 * it; the add/set functions copy their inputs. The structures are public for
 * reading; change them only through these functions. Pointers returned by
 * kdev_cdi_spec_add_device(), kdev_cdi_spec_edits() and kdev_cdi_device_edits()
 * stay valid until the spec is freed.
 *
 * Errors: functions return 0 (or a count) on success and a negative errno on
 * failure, filling |err| (may be NULL) with a message that names the offending
 * part ("device \"gpu 0\": invalid character ' ' in device name").
 */
#ifndef KDEV_CDI_CDI_H
#define KDEV_CDI_CDI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"
#include "common/file.h"

/* Default CDI spec directories (CDI pkg/cdi/spec-dirs.go): static, and
 * dynamic/generated. A spec in the later directory wins on conflicts. */
#define KDEV_CDI_STATIC_DIR "/etc/cdi"
#define KDEV_CDI_DYNAMIC_DIR "/var/run/cdi"

/* Newest CDI spec version this module knows. */
#define KDEV_CDI_CURRENT_VERSION "1.1.0"

/* Length limits (CDI SPEC.md "Kind": the prefix is a DNS subdomain of at most
 * 253 characters, the name segment at most 63 characters). */
#define KDEV_CDI_VENDOR_MAX 253
#define KDEV_CDI_CLASS_MAX 63

/* One device node (CDI "deviceNodes" entry). Only |path| is required. */
struct kdev_cdi_device_node {
        char *path;        /* path in the container (required, non-empty) */
        char *host_path;   /* path on the host; NULL: same as path (needs cdiVersion >= 0.5.0) */
        char *type;        /* NULL or "b", "c", "u", "p" */
        char *permissions; /* NULL (runtime default "rwm"), "none", or letters of "rwm" */
        bool has_major, has_minor;
        int64_t major, minor; /* device numbers, emitted only when has_* */
        bool has_file_mode;
        uint32_t file_mode; /* file mode bits (CDI "fileMode"), when has_file_mode */
        bool has_uid, has_gid;
        uint32_t uid, gid; /* owner in the container namespace, when has_* */
};

/* One mount (CDI "mounts" entry). */
struct kdev_cdi_mount {
        char *host_path;      /* required, non-empty */
        char *container_path; /* required, non-empty */
        char **options;       /* |n_options| mount options, e.g. "ro", "bind" */
        size_t n_options;
        char *type; /* NULL or a filesystem type (needs cdiVersion >= 0.4.0) */
};

/* One OCI hook (CDI "hooks" entry). */
struct kdev_cdi_hook {
        char *hook_name; /* prestart|createRuntime|createContainer|startContainer|poststart|poststop */
        char *path;      /* absolute path of the executable (SPEC.md: MUST be absolute) */
        char **args;     /* argv, |n_args| strings (argv[0] included, as in OCI) */
        size_t n_args;
        char **env; /* "K=V" strings */
        size_t n_env;
        bool has_timeout;
        int timeout; /* seconds, > 0, when has_timeout */
};

/* One network device moved into the container (CDI "netDevices", >= 1.1.0). */
struct kdev_cdi_net_device {
        char *host_interface_name;
        char *name;
};

/* Container edits: at spec level (applied when any device of the spec is
 * requested) or device level (applied when that device is requested). */
struct kdev_cdi_edits {
        char **env; /* "K=V" strings, in insertion order */
        size_t n_env;
        struct kdev_cdi_device_node *device_nodes;
        size_t n_device_nodes;
        struct kdev_cdi_mount *mounts;
        size_t n_mounts;
        struct kdev_cdi_hook *hooks;
        size_t n_hooks;
        uint32_t *additional_gids; /* CDI "additionalGids" (needs >= 0.7.0) */
        size_t n_additional_gids;
        struct kdev_cdi_net_device *net_devices; /* needs >= 1.1.0 */
        size_t n_net_devices;
};

/* One key/value annotation (CDI "annotations", needs cdiVersion >= 0.6.0). */
struct kdev_cdi_annotation {
        char *key;
        char *value;
};

/* Annotations, kept sorted by key (byte order), keys unique. */
struct kdev_cdi_annotations {
        struct kdev_cdi_annotation *items;
        size_t n;
};

struct kdev_cdi_device {
        char *name; /* CDI device name, unique within the spec */
        struct kdev_cdi_annotations annotations;
        struct kdev_cdi_edits edits;
};

struct kdev_cdi_spec {
        char *kind;        /* "vendor/class" */
        char *min_version; /* NULL, or the lowest cdiVersion to emit (see kdev_cdi_spec_version) */
        struct kdev_cdi_annotations annotations;
        struct kdev_cdi_device **devices; /* in insertion order */
        size_t n_devices;
        struct kdev_cdi_edits edits; /* spec-level containerEdits */
};

/* ---- names ---------------------------------------------------------------- */

/* Checks a CDI vendor (the part of the kind before '/'): a letter first,
 * then letters, digits, '_', '-', '.', a letter or digit last, at most
 * KDEV_CDI_VENDOR_MAX characters (CDI parser.go ValidateVendorName, SPEC.md).
 * Returns 0 or -EINVAL. */
KDEV_API int kdev_cdi_validate_vendor(const char *vendor, struct kdev_err *err);

/* Checks a CDI class (the part of the kind after '/'): the vendor rules, at
 * most KDEV_CDI_CLASS_MAX characters. Dots are allowed (they raise the
 * cdiVersion to 0.6.0). Returns 0 or -EINVAL. */
KDEV_API int kdev_cdi_validate_class(const char *class_name, struct kdev_err *err);

/* Checks a kind "vendor/class" (exactly one '/'). Returns 0 or -EINVAL. */
KDEV_API int kdev_cdi_validate_kind(const char *kind, struct kdev_err *err);

/* Checks a CDI device name: a letter or digit first and last, letters, digits
 * and '_', '-', '.', ':' between (CDI parser.go ValidateDeviceName). A digit
 * first raises the cdiVersion to 0.5.0. Returns 0 or -EINVAL. */
KDEV_API int kdev_cdi_validate_device_name(const char *name, struct kdev_err *err);

/* Writes the fully-qualified device name "vendor/class=name" for |kind| and
 * |name| into |buf| (|size| bytes, NUL-terminated). Returns its length, or
 * -EINVAL (invalid kind or name), or -ENAMETOOLONG when |buf| is too small. */
KDEV_API int kdev_cdi_qualified_name(const char *kind, const char *name, char *buf, size_t size,
                                     struct kdev_err *err);

/* Splits a fully-qualified name "vendor/class=name". On success copies the
 * kind ("vendor/class") into |kind| (|kind_size| bytes) and the device name
 * into |name| (|name_size| bytes); either buffer may be NULL. A string
 * starting with '/' is a device path, not a CDI name (-EINVAL).
 * Returns 0, -EINVAL or -ENAMETOOLONG. */
KDEV_API int kdev_cdi_parse_qualified_name(const char *qualified, char *kind, size_t kind_size,
                                           char *name, size_t name_size, struct kdev_err *err);

/* The spec file name for |kind|, "<vendor>-<class>.json" (the '/' of the kind
 * mapped to '-': CDI pkg/cdi/spec.go GenerateSpecName, which NVIDIA's plugin
 * uses: /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json). Returns the
 * length, -EINVAL or -ENAMETOOLONG. */
KDEV_API int kdev_cdi_spec_file_name(const char *kind, char *buf, size_t size,
                                     struct kdev_err *err);

/* The transient spec file name "<vendor>-<class>_<id>.json", every '/' of
 * |transient_id| mapped to '_' (CDI GenerateTransientSpecName); for specs whose
 * life is tied to something else (a DRA claim). |transient_id| must be
 * non-empty printable ASCII without spaces. Returns the length, -EINVAL or
 * -ENAMETOOLONG. */
KDEV_API int kdev_cdi_transient_file_name(const char *kind, const char *transient_id, char *buf,
                                          size_t size, struct kdev_err *err);

/* The device-plugin annotation key "cdi.k8s.io/<plugin>_<device_id>" with
 * every '/' in |device_id| mapped to '_'; the part after the prefix must be at
 * most 63 characters, alphanumeric at both ends, letters, digits, '_', '-', '.'
 * between (CDI pkg/cdi/annotations.go AnnotationKey). Returns the length,
 * -EINVAL or -ENAMETOOLONG. */
KDEV_API int kdev_cdi_annotation_key(const char *plugin, const char *device_id, char *buf,
                                     size_t size, struct kdev_err *err);

/* ---- building a spec ------------------------------------------------------ */

/* A new empty spec of |kind| ("vendor/class"). Returns NULL with -EINVAL
 * (invalid kind) or -ENOMEM in |err|. Free with kdev_cdi_spec_free(). */
KDEV_API struct kdev_cdi_spec *kdev_cdi_spec_new(const char *kind, struct kdev_err *err);

/* Frees |spec| and everything it owns. NULL-safe. */
KDEV_API void kdev_cdi_spec_free(struct kdev_cdi_spec *spec);

/* Sets the lowest cdiVersion to emit (NULL: none). |version| must be a known
 * CDI version ("0.1.0" ... "1.1.0", an optional leading 'v' is dropped).
 * Returns 0, -EINVAL or -ENOMEM. */
KDEV_API int kdev_cdi_spec_set_min_version(struct kdev_cdi_spec *spec, const char *version,
                                           struct kdev_err *err);

/* Sets the spec-level annotation |key| to |value| (replacing an existing one).
 * |key| must be a Kubernetes qualified name ("[prefix/]name", the name at most
 * 63 characters, alphanumeric at both ends, '-', '_', '.' between; the prefix a
 * lower-case DNS subdomain of at most 253 characters), as CDI checks annotations
 * with Kubernetes' rules. Returns 0, -EINVAL or -ENOMEM. */
KDEV_API int kdev_cdi_spec_set_annotation(struct kdev_cdi_spec *spec, const char *key,
                                          const char *value, struct kdev_err *err);

/* The spec-level container edits (owned by |spec|). */
KDEV_API struct kdev_cdi_edits *kdev_cdi_spec_edits(struct kdev_cdi_spec *spec);

/* Appends a device named |name| with no edits; returns it (owned by |spec|),
 * or NULL with EINVAL (invalid name), EEXIST (a device of that name exists)
 * or ENOMEM in |err|. */
KDEV_API struct kdev_cdi_device *kdev_cdi_spec_add_device(struct kdev_cdi_spec *spec,
                                                          const char *name, struct kdev_err *err);

/* The device named |name|, or NULL. */
KDEV_API const struct kdev_cdi_device *kdev_cdi_spec_find_device(const struct kdev_cdi_spec *spec,
                                                                 const char *name);

/* Sets a device-level annotation (rules as kdev_cdi_spec_set_annotation). */
KDEV_API int kdev_cdi_device_set_annotation(struct kdev_cdi_device *dev, const char *key,
                                            const char *value, struct kdev_err *err);

/* The device-level container edits (owned by the device's spec). */
KDEV_API struct kdev_cdi_edits *kdev_cdi_device_edits(struct kdev_cdi_device *dev);

/* Appends "K=V" |kv| (a '=' after a non-empty name). Returns 0, -EINVAL, -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_env(struct kdev_cdi_edits *e, const char *kv, struct kdev_err *err);

/* Appends a deep copy of |node| (path non-empty; type and permissions as in
 * struct kdev_cdi_device_node). Returns 0, -EINVAL, -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_device_node(struct kdev_cdi_edits *e,
                                            const struct kdev_cdi_device_node *node,
                                            struct kdev_err *err);

/* Appends a deep copy of |m| (both paths non-empty). Returns 0, -EINVAL, -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_mount(struct kdev_cdi_edits *e, const struct kdev_cdi_mount *m,
                                      struct kdev_err *err);

/* Appends a deep copy of |h| (known hook name, absolute path, "K=V" env,
 * timeout > 0 when set). Returns 0, -EINVAL, -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_hook(struct kdev_cdi_edits *e, const struct kdev_cdi_hook *h,
                                     struct kdev_err *err);

/* Appends an additional group ID. Returns 0 or -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_additional_gid(struct kdev_cdi_edits *e, uint32_t gid,
                                               struct kdev_err *err);

/* Appends a network device (both names non-empty, each unique within |e|,
 * CDI ValidateNetDevices). Returns 0, -EINVAL, -ENOMEM. */
KDEV_API int kdev_cdi_edits_add_net_device(struct kdev_cdi_edits *e,
                                           const char *host_interface_name, const char *name,
                                           struct kdev_err *err);

/* Appends to |dst| the edits of |src| that |dst| lacks: env strings not
 * already present, device nodes whose path is not present, mounts whose
 * container path is not present, hooks not already present (all fields
 * equal), group IDs not present, net devices whose host interface is not
 * present. Order: |dst|'s first, then |src|'s in its order. Used to build an
 * "all" device holding the union of the others. Returns the number of items
 * added, or -ENOMEM (|dst| then holds a prefix of the additions). */
KDEV_API int kdev_cdi_edits_merge(struct kdev_cdi_edits *dst, const struct kdev_cdi_edits *src,
                                  struct kdev_err *err);

/* ---- versions ------------------------------------------------------------- */

/* The minimum cdiVersion the fields of |spec| require, following CDI's
 * specs-go/version.go MinimumRequiredVersion (first rule that matches):
 *   1.1.0  netDevices (spec or device level)
 *   0.7.0  additionalGids (spec or device level)
 *   0.6.0  annotations (spec or device), or a '.' in the class
 *   0.5.0  a device name starting with a digit, or a deviceNode hostPath
 *   0.4.0  a mount type
 *   0.3.0  otherwise (the earliest version CDI loaders accept)
 * (1.0.0 and 0.8.0 add no fields; intelRdt, 0.7.0/1.1.0, is not supported.)
 * Returns a static string; |why| (may be NULL) gets a static phrase naming the
 * field ("annotations", ...; "baseline" for 0.3.0). */
KDEV_API const char *kdev_cdi_required_version(const struct kdev_cdi_spec *spec, const char **why);

/* The cdiVersion emitted for |spec|: the higher of the required version and
 * spec->min_version. Static string. */
KDEV_API const char *kdev_cdi_spec_version(const struct kdev_cdi_spec *spec);

/* Compares two dotted versions "a.b.c" (optional leading 'v'). Returns <0, 0,
 * >0; a malformed version sorts lowest. */
KDEV_API int kdev_cdi_version_compare(const char *a, const char *b);

/* ---- validation, JSON, files ---------------------------------------------- */

/* Checks the whole spec as a CDI loader would: valid kind, at least one
 * device, unique valid device names, every device with at least one edit,
 * every edit valid. Returns 0 or -EINVAL naming the part
 * ("devices[2] \"all\": no container edits"). */
KDEV_API int kdev_cdi_spec_validate(const struct kdev_cdi_spec *spec, struct kdev_err *err);

/* Validates |spec| and renders it as a new JSON object (caller json_decref).
 * Key order is fixed and equals the Go CDI library's json.Marshal order:
 * cdiVersion, kind, annotations, devices, containerEdits; device: name,
 * annotations, containerEdits; edits: env, deviceNodes, netDevices, hooks,
 * mounts, additionalGids; deviceNode: path, hostPath, type, major, minor,
 * fileMode, permissions, uid, gid; mount: hostPath, containerPath, options,
 * type; hook: hookName, path, args, env, timeout; annotations sorted by key.
 * Empty lists and unset fields are omitted; a device's containerEdits is
 * always present, the spec-level one only when not empty.
 * Returns 0, -EINVAL or -ENOMEM. */
KDEV_API int kdev_cdi_spec_to_json(const struct kdev_cdi_spec *spec, json_t **out,
                                   struct kdev_err *err);

/* The text written by kdev_cdi_spec_write(): kdev_cdi_spec_to_json() printed
 * with a 2-space indent and a final newline. |*out| is malloc'ed (caller
 * frees). Returns its length, -EINVAL or -ENOMEM. */
KDEV_API int kdev_cdi_spec_format(const struct kdev_cdi_spec *spec, char **out,
                                  struct kdev_err *err);

/* Parses a CDI spec from a JSON value strictly, as the Go loader does:
 * unknown fields, wrong types, an unknown cdiVersion, a cdiVersion lower than
 * the fields require, and anything kdev_cdi_spec_validate() rejects are errors
 * naming the JSON path ("devices[0].containerEdits.mounts[1]: ..."). The file's
 * cdiVersion becomes spec->min_version, so re-rendering keeps it. intelRdt is
 * not supported (-EOPNOTSUPP). |*out| is a new spec (caller frees).
 * Returns 0, -EINVAL, -EOPNOTSUPP or -ENOMEM. */
KDEV_API int kdev_cdi_spec_from_json(const json_t *root, struct kdev_cdi_spec **out,
                                     struct kdev_err *err);

/* Largest CDI spec file read (bytes): kind "CDI spec". */
#define KDEV_CDI_SPEC_FILE_MAX (4 * 1024 * 1024)

/* Reads (kdev_file_read: a regular file of at most KDEV_CDI_SPEC_FILE_MAX
 * bytes, no NUL bytes) and parses the JSON spec file |path|
 * (kdev_cdi_spec_from_json). YAML files ("*.yaml") are not supported
 * (-EOPNOTSUPP). Returns 0, kdev_file_read's errors ("<path>: cannot read:
 * <reason>", "<path>: is not a regular file (a FIFO)", "<path>: the CDI spec
 * is larger than 4194304 bytes", ...), -EINVAL (bad JSON, with line:column)
 * or as above. */
KDEV_API int kdev_cdi_spec_read(const char *path, struct kdev_cdi_spec **out, struct kdev_err *err);

/* Writes |spec| (kdev_cdi_spec_format) to |dir|/|file_name| atomically: the
 * text goes to a temporary file ".<file_name>.XXXXXX" in |dir| (a name CDI
 * caches ignore: no .json/.yaml extension), which is set to mode 0644,
 * fsync'ed and renamed over the target; then |dir| is fsync'ed. |dir| and
 * missing parents are created with mode 0755 exactly (chmod after mkdir: the
 * umask has no say). |file_name| must be a plain name ending in ".json"
 * (see kdev_cdi_spec_file_name). A failure leaves no temporary file and the
 * previous target untouched.
 * Returns 0, -EINVAL, or a negative errno from the file system. */
KDEV_API int kdev_cdi_spec_write(const struct kdev_cdi_spec *spec, const char *dir,
                                 const char *file_name, struct kdev_err *err);

/* kdev_cdi_spec_write without fsync (common/file.h KDEV_FILE_NO_FSYNC): the
 * rename still makes the spec appear whole or not at all to a runtime, but
 * a crash of the node may lose it. For a spec that matters only while its
 * container runs (kdev-plugin's per-container specs of isolated replicas),
 * which a node crash ends anyway. Same inputs and errors. */
KDEV_API int kdev_cdi_spec_write_transient(const struct kdev_cdi_spec *spec, const char *dir,
                                           const char *file_name, struct kdev_err *err);

/* Removes |dir|/|file_name|. Returns 1 when removed, 0 when it did not exist,
 * -EINVAL for a bad file name, or a negative errno. */
KDEV_API int kdev_cdi_spec_remove(const char *dir, const char *file_name, struct kdev_err *err);

/* kdev_cdi_spec_write guarded by |guard| (common/file.h; may be NULL:
 * unguarded): when |dir|/|file_name| is no longer what kdev last wrote
 * there, it is first moved aside to "|dir|/.<file_name>.foreign-<unix
 * seconds>" (no .json/.yaml extension: CDI ignores it; its path into
 * |aside|, |size| bytes) and |spec| is written. Returns 0 written, 1 written
 * after a move aside, or the errors of kdev_cdi_spec_write and
 * kdev_file_guard_check (nothing written then). */
KDEV_API int kdev_cdi_spec_write_guarded(const struct kdev_cdi_spec *spec, const char *dir,
                                         const char *file_name, struct kdev_file_guard *guard,
                                         char *aside, size_t size, struct kdev_err *err);

/* kdev_cdi_spec_write_guarded without fsync (as kdev_cdi_spec_write_transient):
 * the same guard, results and errors; a crash of the node may lose the spec.
 * For specs that are rebuilt from durable state before they are used again
 * (the DRA plugin's claim specs, dra/plugin.h). */
KDEV_API int kdev_cdi_spec_write_guarded_transient(const struct kdev_cdi_spec *spec,
                                                   const char *dir, const char *file_name,
                                                   struct kdev_file_guard *guard, char *aside,
                                                   size_t size, struct kdev_err *err);

/* kdev_cdi_spec_remove guarded by |guard| (may be NULL): a file someone
 * else changed is moved aside as above instead of deleted (returns 2, its
 * path in |aside|). Returns 1 removed, 0 not there, 2 moved aside, or a
 * negative errno. */
KDEV_API int kdev_cdi_spec_remove_guarded(const char *dir, const char *file_name,
                                          struct kdev_file_guard *guard, char *aside,
                                          size_t size, struct kdev_err *err);

/* Deep equality of two specs (same JSON rendering, version included,
 * without validation). NULL equals only NULL. */
KDEV_API bool kdev_cdi_spec_equal(const struct kdev_cdi_spec *a, const struct kdev_cdi_spec *b);

#endif /* KDEV_CDI_CDI_H */
