/* kdev's version, shared by every executable (kdev-plugin --version,
 * kdevctl --version). One place to bump at a release. */
#ifndef KDEV_COMMON_VERSION_H
#define KDEV_COMMON_VERSION_H

/* Semantic version of this kdev tree (major.minor.patch). */
#define KDEV_VERSION "0.1.0"

#endif /* KDEV_COMMON_VERSION_H */
