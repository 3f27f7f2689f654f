/* CDI names: vendor, class, device names, qualified names, file names and
 * annotation keys (CDI pkg/parser/parser.go, pkg/cdi/spec.go,
 * pkg/cdi/annotations.go; SPEC.md "Kind" and "CDI Devices"). */
#include "cdi/cdi.h"
#include "cdi/cdi_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool is_letter(char c)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

static bool is_alnum(char c)
{
        return is_letter(c) || is_digit(c);
}

/* Checks |s| (|len| bytes, |what| names it in messages): first character
 * letter (|letter_first|) or alphanumeric, last alphanumeric, in between
 * alphanumerics or one of |extra|, at most |max| bytes (0: no limit). */
static int check_label(const char *what, const char *s, size_t len, bool letter_first,
                       const char *extra, size_t max, struct kdev_err *err)
{
        if (len == 0)
                return kdev_err_set(err, EINVAL, "invalid %s: empty", what);
        if (max && len > max)
                return kdev_err_set(err, EINVAL, "invalid %s \"%.*s\": longer than %zu characters",
                                    what, (int)len, s, max);
        if (letter_first ? !is_letter(s[0]) : !is_alnum(s[0]))
                return kdev_err_set(err, EINVAL, "invalid %s \"%.*s\": should start with a %s", what,
                                    (int)len, s, letter_first ? "letter" : "letter or digit");
        for (size_t i = 1; i + 1 < len; i++) {
                char c = s[i];
                if (is_alnum(c) || (c != '\0' && strchr(extra, c)))
                        continue;
                if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
                        return kdev_err_set(err, EINVAL,
                                            "invalid %s \"%.*s\": invalid character 0x%02x", what,
                                            (int)len, s, (unsigned char)c);
                return kdev_err_set(err, EINVAL, "invalid %s \"%.*s\": invalid character '%c'",
                                    what, (int)len, s, c);
        }
        if (len > 1 && !is_alnum(s[len - 1]))
                return kdev_err_set(err, EINVAL,
                                    "invalid %s \"%.*s\": should end with a letter or digit", what,
                                    (int)len, s);
        return 0;
}

int kdev_cdi_validate_vendor(const char *vendor, struct kdev_err *err)
{
        if (!vendor)
                return kdev_err_set(err, EINVAL, "invalid CDI vendor: NULL");
        return check_label("CDI vendor", vendor, strlen(vendor), true, "_-.", KDEV_CDI_VENDOR_MAX,
                           err);
}

int kdev_cdi_validate_class(const char *class_name, struct kdev_err *err)
{
        if (!class_name)
                return kdev_err_set(err, EINVAL, "invalid CDI class: NULL");
        return check_label("CDI class", class_name, strlen(class_name), true, "_-.",
                           KDEV_CDI_CLASS_MAX, err);
}

int kdev_cdi_validate_kind(const char *kind, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        if (!kind)
                return kdev_err_set(err, EINVAL, "invalid CDI kind: NULL");
        const char *slash = strchr(kind, '/');
        if (!slash)
                return kdev_err_set(err, EINVAL,
                                    "invalid CDI kind \"%s\": expected \"vendor/class\"", kind);
        size_t vlen = (size_t)(slash - kind);
        int r = check_label("CDI vendor", kind, vlen, true, "_-.", KDEV_CDI_VENDOR_MAX, err);
        if (r == 0)
                r = check_label("CDI class", slash + 1, strlen(slash + 1), true, "_-.",
                                KDEV_CDI_CLASS_MAX, err);
        if (r < 0)
                return kdev_err_wrap(err, "kind \"%s\"", kind);
        return 0;
}

int kdev_cdi_validate_device_name(const char *name, struct kdev_err *err)
{
        if (!name)
                return kdev_err_set(err, EINVAL, "invalid CDI device name: NULL");
        return check_label("CDI device name", name, strlen(name), false, "_-.:", 0, err);
}

/* snprintf into |buf|: the length, or -ENAMETOOLONG. */
static int put(char *buf, size_t size, struct kdev_err *err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int put(char *buf, size_t size, struct kdev_err *err, const char *fmt, ...)
{
        va_list ap;
        if (!buf)
                size = 0;
        va_start(ap, fmt);
        int n = vsnprintf(buf, size, fmt, ap);
        va_end(ap);
        if (n < 0)
                return kdev_err_set(err, EINVAL, "formatting a CDI name failed");
        if ((size_t)n >= size) {
                if (size)
                        buf[0] = '\0';
                return kdev_err_set(err, ENAMETOOLONG, "CDI name needs %d bytes, buffer has %zu",
                                    n + 1, size);
        }
        return n;
}

int kdev_cdi_qualified_name(const char *kind, const char *name, char *buf, size_t size,
                            struct kdev_err *err)
{
        int r = kdev_cdi_validate_kind(kind, err);
        if (r < 0)
                return r;
        r = kdev_cdi_validate_device_name(name, err);
        if (r < 0)
                return r;
        return put(buf, size, err, "%s=%s", kind, name);
}

static int copy_part(char *dst, size_t size, const char *src, size_t len, struct kdev_err *err)
{
        if (!dst)
                return 0;
        if (len >= size) {
                if (size)
                        dst[0] = '\0';
                return kdev_err_set(err, ENAMETOOLONG, "CDI name part needs %zu bytes, buffer has %zu",
                                    len + 1, size);
        }
        memcpy(dst, src, len);
        dst[len] = '\0';
        return 0;
}

int kdev_cdi_parse_qualified_name(const char *qualified, char *kind, size_t kind_size,
                                  char *name, size_t name_size, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        if (!qualified)
                return kdev_err_set(err, EINVAL, "invalid CDI device: NULL");
        if (qualified[0] == '/')
                return kdev_err_set(err, EINVAL, "\"%s\" is a device path, not a CDI device name",
                                    qualified);
        const char *eq = strchr(qualified, '=');
        if (!eq || eq == qualified || eq[1] == '\0')
                return kdev_err_set(err, EINVAL,
                                    "unqualified CDI device \"%s\": expected \"vendor/class=name\"",
                                    qualified);
        size_t klen = (size_t)(eq - qualified);
        char kbuf[KDEV_CDI_VENDOR_MAX + 1 + KDEV_CDI_CLASS_MAX + 1];
        if (klen >= sizeof(kbuf))
                return kdev_err_set(err, EINVAL, "invalid CDI device \"%s\": kind too long",
                                    qualified);
        memcpy(kbuf, qualified, klen);
        kbuf[klen] = '\0';
        int r = kdev_cdi_validate_kind(kbuf, err);
        if (r == 0)
                r = kdev_cdi_validate_device_name(eq + 1, err);
        if (r < 0)
                return kdev_err_wrap(err, "CDI device \"%s\"", qualified);
        r = copy_part(kind, kind_size, qualified, klen, err);
        if (r == 0)
                r = copy_part(name, name_size, eq + 1, strlen(eq + 1), err);
        return r;
}

int kdev_cdi_spec_file_name(const char *kind, char *buf, size_t size, struct kdev_err *err)
{
        int r = kdev_cdi_validate_kind(kind, err);
        if (r < 0)
                return r;
        const char *slash = strchr(kind, '/');
        return put(buf, size, err, "%.*s-%s.json", (int)(slash - kind), kind, slash + 1);
}

int kdev_cdi_transient_file_name(const char *kind, const char *transient_id, char *buf,
                                 size_t size, struct kdev_err *err)
{
        int r = kdev_cdi_validate_kind(kind, err);
        if (r < 0)
                return r;
        if (!transient_id || !transient_id[0])
                return kdev_err_set(err, EINVAL, "invalid CDI transient ID: empty");
        for (const char *p = transient_id; *p; p++) {
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                        return kdev_err_set(err, EINVAL,
                                            "invalid CDI transient ID \"%s\": character 0x%02x",
                                            transient_id, (unsigned char)*p);
        }
        const char *slash = strchr(kind, '/');
        r = put(buf, size, err, "%.*s-%s_%s.json", (int)(slash - kind), kind, slash + 1,
                transient_id);
        if (r < 0)
                return r;
        /* the ID starts after "<vendor>-<class>_" */
        for (char *p = buf + strlen(kind) + 1; *p; p++) {
                if (*p == '/')
                        *p = '_';
        }
        return r;
}

int kdev_cdi_annotation_key(const char *plugin, const char *device_id, char *buf, size_t size,
                            struct kdev_err *err)
{
        if (!plugin || !plugin[0])
                return kdev_err_set(err, EINVAL, "invalid CDI annotation plugin name: empty");
        if (!device_id || !device_id[0])
                return kdev_err_set(err, EINVAL, "invalid CDI annotation device ID: empty");
        char name[64];
        size_t plen = strlen(plugin), dlen = strlen(device_id);
        if (plen + 1 + dlen > 63)
                return kdev_err_set(err, EINVAL,
                                    "invalid CDI annotation name \"%s_%s\": longer than 63 characters",
                                    plugin, device_id);
        /* bounded by sizeof(name) as well, so that no compiler doubts it */
        size_t k = 0;
        for (const char *p = plugin; *p && k < sizeof(name) - 1; p++)
                name[k++] = *p;
        if (k < sizeof(name) - 1)
                name[k++] = '_';
        for (const char *p = device_id; *p && k < sizeof(name) - 1; p++)
                name[k++] = *p == '/' ? '_' : *p;
        name[k] = '\0';
        int r = check_label("CDI annotation name", name, k, false, "_-.", 63, err);
        if (r < 0)
                return r;
        return put(buf, size, err, "cdi.k8s.io/%s", name);
}

/* Kubernetes qualified name (apimachinery IsQualifiedName): "[prefix/]name",
 * name <= 63 alnum at both ends with '-', '_', '.' between; prefix a DNS-1123
 * subdomain (lower case alnum labels with '-', joined by '.', <= 253). */
int kdev_cdi_validate_annotation_key(const char *key, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        if (!key || !key[0])
                return kdev_err_set(err, EINVAL, "invalid annotation key: empty");
        const char *slash = strchr(key, '/');
        const char *name = key;
        if (slash) {
                size_t plen = (size_t)(slash - key);
                name = slash + 1;
                if (plen == 0 || plen > 253)
                        return kdev_err_set(err, EINVAL,
                                            "invalid annotation key \"%s\": prefix must be 1 to 253 characters",
                                            key);
                /* labels of 1..63 lower-case alphanumerics and inner '-' */
                size_t label = 0;
                for (size_t i = 0; i <= plen; i++) {
                        char c = i < plen ? key[i] : '.';
                        bool ok;
                        if (c == '.') {
                                ok = label > 0 && label <= 63 && key[i - 1] != '-';
                                label = 0;
                        } else {
                                ok = (c >= 'a' && c <= 'z') || is_digit(c) ||
                                     (c == '-' && label > 0);
                                label++;
                        }
                        if (!ok)
                                return kdev_err_set(err, EINVAL,
                                                    "invalid annotation key \"%s\": prefix must be a lower-case DNS subdomain",
                                                    key);
                }
        }
        size_t nlen = strlen(name);
        int r = check_label("annotation name", name, nlen, false, "-_.", 63, err);
        if (r < 0)
                return kdev_err_wrap(err, "annotation key \"%s\"", key);
        return 0;
}
