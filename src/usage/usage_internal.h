/* Shared by the files of src/usage only. */
#ifndef KDEV_USAGE_USAGE_INTERNAL_H
#define KDEV_USAGE_USAGE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the |n| bytes at |s| are a runtime container ID as cgroups and
 * kubelet's log names give it: 64 lower-case hex digits. */
bool kdev_usage_is_container_id(const char *s, size_t n);

#endif /* KDEV_USAGE_USAGE_INTERNAL_H */
