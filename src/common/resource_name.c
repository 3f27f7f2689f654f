/* Extended resource names: kubelet's IsExtendedResourceName rules
 * (common/resource_name.h). */
#include "common/resource_name.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define REQUESTS_PREFIX "requests."
/* DNS-1123 subdomain limit; the domain is checked as part of "requests.<domain>". */
#define DNS1123_SUBDOMAIN_MAX 253
#define QUALIFIED_NAME_MAX 63

static int is_lower_alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(char c)
{
        return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* k8s IsDNS1123Subdomain regex without the length:
 * [a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)* */
static int is_dns1123_subdomain(const char *s, size_t len)
{
        size_t label_start = 0;
        for (size_t i = 0; i <= len; i++) {
                if (i == len || s[i] == '.') {
                        if (i == label_start)
                                return 0; /* empty label */
                        if (!is_lower_alnum(s[label_start]) || !is_lower_alnum(s[i - 1]))
                                return 0;
                        label_start = i + 1;
                } else if (!is_lower_alnum(s[i]) && s[i] != '-') {
                        return 0;
                }
        }
        return 1;
}

/* k8s qualified name part: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9] */
static int is_qualified_name_part(const char *s, size_t len)
{
        if (len == 0 || !is_alnum(s[0]) || !is_alnum(s[len - 1]))
                return 0;
        for (size_t i = 0; i < len; i++) {
                if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
                        return 0;
        }
        return 1;
}

int kdev_resource_name_check(const char *name, struct kdev_err *err)
{
        const size_t domain_max = DNS1123_SUBDOMAIN_MAX - (sizeof(REQUESTS_PREFIX) - 1);

        if (!name)
                name = "";
        const char *slash = strchr(name, '/');
        if (!slash)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: it must have the form "
                                    "<domain>/<name>",
                                    name);
        if (strstr(name, "kubernetes.io/"))
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the \"kubernetes.io\" domain "
                                    "is reserved for native resources",
                                    name);
        if (strncmp(name, REQUESTS_PREFIX, sizeof(REQUESTS_PREFIX) - 1) == 0)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: it must not start with "
                                    "\"" REQUESTS_PREFIX "\"",
                                    name);
        if (strchr(slash + 1, '/'))
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: it must contain exactly one "
                                    "\"/\"",
                                    name);
        size_t dlen = (size_t)(slash - name);
        if (dlen == 0)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the domain before \"/\" is "
                                    "empty",
                                    name);
        if (dlen > domain_max)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the domain must be at most "
                                    "%zu characters, got %zu",
                                    name, domain_max, dlen);
        if (!is_dns1123_subdomain(name, dlen))
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the domain \"%.*s\" must "
                                    "be a DNS-1123 subdomain (lower-case letters, digits, '-' and "
                                    "'.', each label starting and ending with a letter or digit)",
                                    name, (int)dlen, name);
        const char *part = slash + 1;
        size_t plen = strlen(part);
        if (plen == 0)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the name after \"/\" is "
                                    "empty",
                                    name);
        if (plen > QUALIFIED_NAME_MAX)
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the name after \"/\" must be "
                                    "at most %d characters, got %zu",
                                    name, QUALIFIED_NAME_MAX, plen);
        if (!is_qualified_name_part(part, plen))
                return kdev_err_set(err, EINVAL,
                                    "resource name \"%s\" is invalid: the name \"%s\" must consist "
                                    "of letters, digits, '-', '_' or '.', and start and end with a "
                                    "letter or digit",
                                    name, part);
        return 0;
}
