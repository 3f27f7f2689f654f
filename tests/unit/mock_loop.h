/* Shared fixture for the unit tests that run a libuv loop over the mock
 * libnvidia-ml.so.1 (tests/unit/test_nvml_events.c, test_nvidia_health.c):
 * the mock opened on a topology with no control file, a loop with a steady
 * tick so that UV_RUN_ONCE returns regularly while a test polls, and the
 * loop's clock helpers.
 *
 * Linked into those tests by tests/CMakeLists.txt (tests/unit/mock_loop.c),
 * which the build gives the mock's compile definitions (see mock_fixture.h).
 * Include after <cmocka.h>. */
#ifndef KDEV_TESTS_UNIT_MOCK_LOOP_H
#define KDEV_TESTS_UNIT_MOCK_LOOP_H

#include <stdint.h>

#include <uv.h>

struct mock_nvml;

/* Opens the mock into |m| (mock_nvml_open), points it at topology file
 * |topology| with KDEV_MOCK_NVML_CONTROL unset and resets it, then
 * initialises |loop| with |tick| firing every 5 ms. Returns 0, or -1 when the
 * mock cannot be opened (nothing left open). Undo with mock_loop_close, then
 * mock_nvml_close. */
int mock_loop_open(struct mock_nvml *m, uv_loop_t *loop, uv_timer_t *tick,
                   const char *topology);

/* Closes |tick|, runs |loop| until every handle is released and closes it;
 * fails the test when a handle is left open. */
void mock_loop_close(uv_loop_t *loop, uv_timer_t *tick);

/* The monotonic clock in milliseconds. */
uint64_t mock_ms_now(void);

/* Runs |loop| (UV_RUN_ONCE) for |ms| milliseconds. */
void mock_loop_run_for(uv_loop_t *loop, unsigned ms);

#endif
