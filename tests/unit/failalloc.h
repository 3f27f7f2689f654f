/* Test-only failing allocator: counts the allocations made by the code linked
 * into a test executable and makes a chosen one fail, so that every
 * allocation-failure path can be driven.
 *
 * Mechanism: the test executable is linked with the linker's --wrap for
 * malloc, calloc, realloc, strdup, strndup, asprintf and vasprintf (see
 * tests/CMakeLists.txt: unit tests named test_*_oom get them). Every call to
 * those functions from an object file of the executable -- the test itself
 * and the static kdev_* libraries linked into it -- goes to __wrap_NAME here,
 * which counts it and either fails it (NULL, errno ENOMEM; -1 for asprintf)
 * or passes it to the real function (__real_NAME, i.e. ASan's interceptor
 * under ASan, valgrind's replacement under valgrind, glibc's otherwise).
 * Allocations made inside shared libraries (libc's own, nghttp2, libuv,
 * protobuf-c, cmocka) are neither counted nor failed. free() is not wrapped.
 *
 * Not thread-safe: meant for single-threaded tests.
 */
#ifndef KDEV_TESTS_FAILALLOC_H
#define KDEV_TESTS_FAILALLOC_H

#include <stdbool.h>

/* Stops failing and resets the count to 0. */
void failalloc_off(void);

/* Resets the count to 0 and makes allocation number |n| (1-based, counted
 * from now) fail; later ones succeed again. n = 0: none fails. */
void failalloc_fail_nth(unsigned long n);

/* Same, but allocation |n| and every one after it fail (until
 * failalloc_off() or failalloc_fail_nth()). */
void failalloc_fail_from(unsigned long n);

/* Allocations attempted since the last off/fail_* call (failed ones
 * included). */
unsigned long failalloc_count(void);

/* Allocations failed since the last off/fail_* call. */
unsigned long failalloc_failures(void);

/* Runs LeakSanitizer's recoverable leak check when the executable has it
 * (ASan builds) and returns the number of leak reports it printed (0 or 1);
 * returns 0 without ASan (valgrind checks leaks at exit instead). */
int failalloc_leak_check(void);

/* Whether the leak check above is real in this build. */
bool failalloc_have_leak_check(void);

#endif /* KDEV_TESTS_FAILALLOC_H */
