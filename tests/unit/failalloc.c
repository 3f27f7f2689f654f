/* Test-only failing allocator (see failalloc.h). Linked only into the unit
 * tests named test_*_oom, with -Wl,--wrap for each function below. */
#include "failalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_vasprintf(char **out, const char *fmt, va_list ap);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_vasprintf(char **out, const char *fmt, va_list ap);
int __wrap_asprintf(char **out, const char *fmt, ...);

/* LeakSanitizer's interface, present only in sanitizer builds. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static unsigned long count;    /* allocations since the last arm */
static unsigned long failures; /* of them, failed */
static unsigned long fail_at;  /* 0: none */
static bool sticky;            /* fail_at and every later one */

void failalloc_off(void)
{
        count = failures = fail_at = 0;
        sticky = false;
}

void failalloc_fail_nth(unsigned long n)
{
        failalloc_off();
        fail_at = n;
}

void failalloc_fail_from(unsigned long n)
{
        failalloc_fail_nth(n);
        sticky = n != 0;
}

unsigned long failalloc_count(void)
{
        return count;
}

unsigned long failalloc_failures(void)
{
        return failures;
}

bool failalloc_have_leak_check(void)
{
        return __lsan_do_recoverable_leak_check != NULL;
}

int failalloc_leak_check(void)
{
        return __lsan_do_recoverable_leak_check ? __lsan_do_recoverable_leak_check() : 0;
}

/* Counts one allocation; true when it must fail (errno is then ENOMEM). */
static bool should_fail(void)
{
        count++;
        if (fail_at == 0 || count < fail_at || (count > fail_at && !sticky))
                return false;
        failures++;
        errno = ENOMEM;
        return true;
}

void *__wrap_malloc(size_t size)
{
        return should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
        return should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
        return should_fail() ? NULL : __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
        return should_fail() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
        return should_fail() ? NULL : __real_strndup(s, n);
}

int __wrap_vasprintf(char **out, const char *fmt, va_list ap)
{
        if (should_fail())
                return -1; /* *out is then undefined, as glibc documents */
        return __real_vasprintf(out, fmt, ap);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int n = __wrap_vasprintf(out, fmt, ap);
        va_end(ap);
        return n;
}
