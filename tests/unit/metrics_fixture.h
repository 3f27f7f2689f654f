/* Shared helpers of the tests of kdev-plugin's metric set
 * (tests/unit/test_metrics_plugin.c, test_metrics_usage.c): the rendered
 * exposition text and line checks. Include after <cmocka.h>. */
#ifndef KDEV_TESTS_UNIT_METRICS_FIXTURE_H
#define KDEV_TESTS_UNIT_METRICS_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "metrics/plugin_metrics.h"

/* The exposition text of |pm|'s registry (malloc'ed). */
static inline char *render(struct kdev_plugin_metrics *pm)
{
        char *out = NULL;
        size_t len = 0;
        assert_int_equal(kdev_metrics_render(kdev_plugin_metrics_registry(pm), &out, &len, NULL),
                         0);
        return out;
}

/* Asserts that |text| has the whole line |line|. */
static inline void assert_line(const char *text, const char *line)
{
        size_t n = strlen(line);
        for (const char *p = text; (p = strstr(p, line)); p++) {
                if ((p == text || p[-1] == '\n') && p[n] == '\n')
                        return;
        }
        fail_msg("line \"%s\" not in:\n%s", line, text);
}

/* Asserts that |part| is nowhere in |text|. */
static inline void assert_no(const char *text, const char *part)
{
        if (strstr(text, part))
                fail_msg("\"%s\" unexpected in:\n%s", part, text);
}

#endif /* KDEV_TESTS_UNIT_METRICS_FIXTURE_H */
