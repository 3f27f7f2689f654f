/* Shared libuv fixture over the mock NVML (see mock_loop.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "mock_loop.h"

static void on_tick(uv_timer_t *t)
{
        (void)t;
}

int mock_loop_open(struct mock_nvml *m, uv_loop_t *loop, uv_timer_t *tick,
                   const char *topology)
{
        if (mock_nvml_open(m) != 0)
                return -1;
        setenv("KDEV_MOCK_NVML_TOPOLOGY", topology, 1);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        m->reset();
        uv_loop_init(loop);
        uv_timer_init(loop, tick);
        uv_timer_start(tick, on_tick, 5, 5);
        return 0;
}

void mock_loop_close(uv_loop_t *loop, uv_timer_t *tick)
{
        uv_close((uv_handle_t *)tick, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(loop), 0);
}

uint64_t mock_ms_now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void mock_loop_run_for(uv_loop_t *loop, unsigned ms)
{
        uint64_t end = mock_ms_now() + ms;
        while (mock_ms_now() < end)
                uv_run(loop, UV_RUN_ONCE);
}
