/* kdev's version, shared by every executable (kdev-plugin --version,
 * kdevctl --version). One place to bump at a release. */
#ifndef KDEV_COMMON_VERSION_H
#define KDEV_COMMON_VERSION_H

#include "common/export.h"

/* Semantic version of this kdev tree (major.minor.patch). */
#define KDEV_VERSION "0.1.0"

/* The commit the binary was built from: git's abbreviated HEAD (12 hex
 * digits) read at build time, the CMake cache value KDEV_BUILD_COMMIT when
 * set, or "unknown" (no git checkout). Static string, never NULL. */
KDEV_API const char *kdev_build_commit(void);

/* How the binary was built: CMake's build type, "+sanitize" appended for
 * KDEV_SANITIZE builds ("RelWithDebInfo", "Debug+sanitize"). Static string,
 * never NULL. */
KDEV_API const char *kdev_build(void);

/* The start-up line of the daemons, after their configuration is merged
 * (flags > environment > file > defaults) and before discovery, as NVIDIA's
 * device plugin logs "Running with config:" and the JSON of its merged
 * config (cmd/nvidia-device-plugin/main.go, startPlugins, v0.20.0). One info
 * line:
 *   msg="Running with config" version=0.1.0 commit=0123456789ab
 *   build=RelWithDebInfo config=<|config_json|>
 * |config_json| is a JSON object text (compact, one line; NVIDIA writes it
 * indented over many lines, kdev's logs are one line per event): in JSON log
 * lines it is the value of "config" as an object, in text lines a quoted
 * string. Borrowed. */
KDEV_API void kdev_log_running_with_config(const char *config_json);

#endif /* KDEV_COMMON_VERSION_H */
