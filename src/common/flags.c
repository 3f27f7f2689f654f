/* Shared flag and environment validators of the daemons (common/flags.h). */
#include "common/flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/version.h"

bool kdev_flag_log_level(const char *prog, const char *v, enum kdev_log_level *level)
{
        if (kdev_log_level_parse(v, level) == 0)
                return true;
        fprintf(stderr, "%s: invalid --log-level \"%s\": want " KDEV_LOG_LEVEL_VALUES "\n", prog,
                v);
        return false;
}

bool kdev_flag_log_format(const char *prog, const char *v, bool *json)
{
        if (kdev_log_format_parse(v, json) == 0)
                return true;
        fprintf(stderr, "%s: invalid --log-format \"%s\": want " KDEV_LOG_FORMAT_VALUES "\n",
                prog, v);
        return false;
}

bool kdev_seconds_parse(const char *text, double max, double *seconds)
{
        char *end = NULL;
        double s = strtod(text, &end);
        if (end == text || *end || !(s > 0 && s <= max))
                return false;
        *seconds = s;
        return true;
}

bool kdev_whole_seconds_parse(const char *text, unsigned long long min, unsigned long long max,
                              unsigned long long *seconds)
{
        char *end = NULL;
        errno = 0;
        unsigned long long u = strtoull(text, &end, 10);
        if (!(*text >= '0' && *text <= '9') || *end || errno != 0 || u < min || u > max)
                return false;
        *seconds = u;
        return true;
}

bool kdev_dns_subdomain(const char *s, size_t max)
{
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool an = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                bool edge = i == 0 || i == n - 1 || s[i - 1] == '.' || s[i + 1] == '.';
                if (an)
                        continue;
                if ((c == '-' || c == '.') && !edge)
                        continue;
                return false;
        }
        return true;
}

bool kdev_flag_paths_nonempty(const char *prog, const struct kdev_flag_path *paths, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (paths[i].value && !*paths[i].value) {
                        fprintf(stderr, "%s: --%s must not be empty\n", prog, paths[i].flag);
                        return false;
                }
        }
        return true;
}

int kdev_flag_common(const char *prog, int c, const char *arg, struct kdev_flag_common *out,
                     void (*usage)(FILE *f))
{
        switch (c) {
        case KDEV_FLAG_LOG_LEVEL:
                return kdev_flag_log_level(prog, arg, &out->level) ? 1 : 2;
        case KDEV_FLAG_LOG_FORMAT:
                return kdev_flag_log_format(prog, arg, &out->json) ? 1 : 2;
        case 'h':
                usage(stdout);
                return 0;
        case KDEV_FLAG_VERSION:
                printf("%s %s\n", prog, KDEV_VERSION);
                return 0;
        default:
                return -1;
        }
}

int kdev_flag_no_operands(const char *prog, int status, int argc, char **argv, int optind)
{
        if (status < 0 && optind < argc) {
                fprintf(stderr, "%s: unexpected argument \"%s\"\n", prog, argv[optind]);
                status = 2;
        }
        return status;
}

int kdev_flag_finish(const char *prog, int status)
{
        if (status == 2)
                fprintf(stderr, "Run '%s --help' for the options.\n", prog);
        return status;
}
