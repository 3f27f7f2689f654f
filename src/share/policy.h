/* The compute pacing policies of libkdev-share.so: the one list of their
 * names, for the library's limits parser (`policy <name>` in the limits
 * file, share/region.h) and for kdev-plugin's `isolation` section
 * (nvidia/isolation.h), which accepts exactly these names so that a config
 * never makes the library fail closed. A header only, libc-free: the library
 * links nothing of kdev's. docs/share.md, "Compute", says what each does. */
#ifndef KDEV_SHARE_POLICY_H
#define KDEV_SHARE_POLICY_H

/* Compute pacing policies, indexes of KDEV_SHARE_POLICY_NAMES. */
enum kdev_share_policy {
        /* default: a launch waits only while another container used the
         * GPU within the last pacing window; an otherwise idle GPU is never
         * throttled */
        KDEV_SHARE_POLICY_WORK_CONSERVING = 0,
        /* the container never uses more than its share of each window */
        KDEV_SHARE_POLICY_STRICT = 1,
        /* no pacing at all (memory limits only) */
        KDEV_SHARE_POLICY_NONE = 2,
};

#define KDEV_SHARE_POLICY_COUNT 3
/* The names, in enum order: an initializer for a const char *[]. */
#define KDEV_SHARE_POLICY_NAMES {"work-conserving", "strict", "none"}
/* The names for messages. */
#define KDEV_SHARE_POLICY_LIST "work-conserving, strict or none"

#endif /* KDEV_SHARE_POLICY_H */
