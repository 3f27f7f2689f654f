/* XID policy of the NVIDIA health monitor: which XID critical-error events
 * mark a GPU unhealthy.
 *
 * Follows NVIDIA's device plugin (NVIDIA/k8s-device-plugin
 * internal/rm/health.go and its unit tests, v0.18–v0.20):
 *   - XIDs 13, 31, 43, 45, 68 and 109 are application errors and ignored by
 *     default;
 *   - DP_DISABLE_HEALTHCHECKS is lower-cased and split at commas; each element
 *     is trimmed of white space and empty elements are skipped. An element
 *     "all" or "xids" disables every XID (and the elements after it are not
 *     read); otherwise each element that is a decimal unsigned 64-bit integer
 *     is one more ignored XID, and any other element is reported as a warning
 *     and skipped;
 *   - DP_ENABLE_HEALTHCHECKS is read the same way; its XIDs are monitored even
 *     when ignored by default or by DP_DISABLE_HEALTHCHECKS, and "all"/"xids"
 *     monitors every XID, the default-ignored ones included;
 *   - when DP_DISABLE_HEALTHCHECKS disables every XID, health checking is off
 *     entirely (no NVML event set) unless DP_ENABLE_HEALTHCHECKS is also
 *     "all"/"xids" (then every XID is monitored): a list of single XIDs to
 *     enable does not switch checking back on.
 * One deliberate difference: NVIDIA's map uses key 0 for "all", so the element
 * "0" there switches health checks off (disable) or monitors everything
 * (enable). kdev treats "0" as an ordinary XID number.
 *
 * All functions are pure (no environment access except
 * kdev_xid_policy_from_env) and thread-safe on distinct objects; a finished
 * policy is read-only and may be read from several threads.
 */
#ifndef KDEV_NVIDIA_XID_H
#define KDEV_NVIDIA_XID_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

#define KDEV_XID_ENV_DISABLE "DP_DISABLE_HEALTHCHECKS"
#define KDEV_XID_ENV_ENABLE "DP_ENABLE_HEALTHCHECKS"

/* The XIDs ignored by default, ascending (internal/rm/health.go). */
#define KDEV_XID_DEFAULT_IGNORED { 13, 31, 43, 45, 68, 109 }
#define KDEV_XID_N_DEFAULT_IGNORED 6

struct kdev_xid_policy {
        bool disabled;               /* health checks off entirely: no NVML event set */
        bool monitor_all;            /* every XID is critical ("all" enabled) */
        unsigned long long *ignored; /* ignored XIDs, ascending and unique (unused when
                                      * disabled or monitor_all); malloc'ed, NULL when
                                      * n_ignored is 0 */
        size_t n_ignored;
};

/* Receives one warning: |msg| is one line, valid during the call only. */
typedef void (*kdev_xid_warn_fn)(void *arg, const char *msg);

/* Builds the policy from the values of DP_DISABLE_HEALTHCHECKS (|disable|) and
 * DP_ENABLE_HEALTHCHECKS (|enable|); NULL means unset (same as ""). |out| is
 * overwritten (not cleared first); on success the caller releases it with
 * kdev_xid_policy_clear(). Each malformed element gives one warning through
 * |warn| (may be NULL), in order, disable list first:
 *   `DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value "abc"`
 * (the element after trimming and lower-casing, at most 64 bytes shown).
 * Returns 0, or -ENOMEM (|out| is then empty). */
KDEV_API int kdev_xid_policy_parse(const char *disable, const char *enable, struct kdev_xid_policy *out,
                          kdev_xid_warn_fn warn, void *warn_arg, struct kdev_err *err);

/* kdev_xid_policy_parse(getenv(DP_DISABLE_HEALTHCHECKS),
 * getenv(DP_ENABLE_HEALTHCHECKS), ...). */
KDEV_API int kdev_xid_policy_from_env(struct kdev_xid_policy *out, kdev_xid_warn_fn warn, void *warn_arg,
                             struct kdev_err *err);

/* Deep copy of |src| into |dst| (overwritten). Returns 0 or -ENOMEM (|dst|
 * then empty). */
KDEV_API int kdev_xid_policy_copy(struct kdev_xid_policy *dst, const struct kdev_xid_policy *src,
                         struct kdev_err *err);

/* Frees what |p| owns and zeroes it (a zeroed policy ignores no XID).
 * NULL-safe. */
KDEV_API void kdev_xid_policy_clear(struct kdev_xid_policy *p);

/* True when an XidCriticalError event with |xid| must mark the GPU unhealthy:
 * false when the policy is disabled, true when it monitors all, otherwise
 * true unless |xid| is ignored. */
KDEV_API bool kdev_xid_is_critical(const struct kdev_xid_policy *p, unsigned long long xid);

/* A one-line description for the log, into |buf| (|size| bytes, always
 * NUL-terminated when size > 0): "health checks disabled",
 * "all XIDs critical", or "ignored XIDs: 13,31,43,45,68,109" ("ignored XIDs:
 * none" when empty); truncated with "..." when it does not fit. Returns the
 * length written. */
KDEV_API size_t kdev_xid_policy_describe(const struct kdev_xid_policy *p, char *buf, size_t size);

#endif /* KDEV_NVIDIA_XID_H */
