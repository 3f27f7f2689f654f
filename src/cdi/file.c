/* CDI spec files: atomic write, remove, read. */
#include "cdi/cdi.h"
#include "cdi/cdi_internal.h"
#include "common/dir.h"
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool ends_with(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);
        return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A plain file name ending in ".json": no '/', no leading '.', short
 * enough that the temporary name ".<name>.XXXXXX" fits NAME_MAX. */
static int check_file_name(const char *file_name, struct kdev_err *err)
{
        if (!file_name || !file_name[0])
                return kdev_err_set(err, EINVAL, "CDI spec file name: empty");
        if (strchr(file_name, '/') || file_name[0] == '.')
                return kdev_err_set(err, EINVAL,
                                    "CDI spec file name \"%s\": must be a plain name not starting with '.'",
                                    file_name);
        if (!ends_with(file_name, ".json") || strlen(file_name) == strlen(".json"))
                return kdev_err_set(err, EINVAL, "CDI spec file name \"%s\": must end in \".json\"",
                                    file_name);
        if (strlen(file_name) + 8 > NAME_MAX)
                return kdev_err_set(err, EINVAL, "CDI spec file name \"%s\": too long", file_name);
        return 0;
}

static int check_dir(const char *dir, struct kdev_err *err)
{
        if (!dir || !dir[0])
                return kdev_err_set(err, EINVAL, "CDI spec directory: empty");
        return 0;
}

/* mkdir -p |dir|: new components get exactly 0755, whatever the umask. */
static int make_dirs(const char *dir, struct kdev_err *err)
{
        int r = kdev_dir_create_all(dir, KDEV_DIR_MODE_CDI, "CDI spec directory", err);
        if (r < 0)
                return r;
        struct stat st;
        if (stat(dir, &st) < 0)
                return kdev_err_set(err, errno, "CDI spec directory \"%s\": %s", dir,
                                    strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return kdev_err_set(err, ENOTDIR, "CDI spec directory \"%s\": not a directory", dir);
        return 0;
}

int kdev_cdi_spec_write(const struct kdev_cdi_spec *spec, const char *dir, const char *file_name,
                        struct kdev_err *err)
{
        int r = kdev_cdi_spec_write_guarded(spec, dir, file_name, NULL, NULL, 0, err);

        return r < 0 ? r : 0;
}

/* The writers' one body: |durable| false writes without fsync; |guard| may
 * be NULL. */
static int write_spec(const struct kdev_cdi_spec *spec, const char *dir, const char *file_name,
                      struct kdev_file_guard *guard, char *aside, size_t size, bool durable,
                      struct kdev_err *err)
{
        int r;
        if ((r = check_dir(dir, err)) < 0 || (r = check_file_name(file_name, err)) < 0)
                return r;
        char *text = NULL;
        int len = kdev_cdi_spec_format(spec, &text, err);
        if (len < 0)
                return len;
        char *tmp = NULL, *target = NULL;
        if (asprintf(&tmp, "%s/.%s.XXXXXX", dir, file_name) < 0) {
                tmp = NULL;
                r = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if (asprintf(&target, "%s/%s", dir, file_name) < 0) {
                target = NULL;
                r = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if ((r = make_dirs(dir, err)) < 0)
                goto out;
        r = kdev_file_write_guarded_flags(guard, target, tmp, text, (size_t)len, 0644,
                                          durable ? KDEV_FILE_SYNC_DIR : KDEV_FILE_NO_FSYNC,
                                          aside, size, err);
out:
        free(tmp);
        free(target);
        free(text);
        return r;
}

int kdev_cdi_spec_write_guarded(const struct kdev_cdi_spec *spec, const char *dir,
                                const char *file_name, struct kdev_file_guard *guard, char *aside,
                                size_t size, struct kdev_err *err)
{
        return write_spec(spec, dir, file_name, guard, aside, size, true, err);
}

int kdev_cdi_spec_write_guarded_transient(const struct kdev_cdi_spec *spec, const char *dir,
                                          const char *file_name, struct kdev_file_guard *guard,
                                          char *aside, size_t size, struct kdev_err *err)
{
        return write_spec(spec, dir, file_name, guard, aside, size, false, err);
}

int kdev_cdi_spec_write_transient(const struct kdev_cdi_spec *spec, const char *dir,
                                  const char *file_name, struct kdev_err *err)
{
        int r = write_spec(spec, dir, file_name, NULL, NULL, 0, false, err);
        return r < 0 ? r : 0;
}

int kdev_cdi_spec_remove(const char *dir, const char *file_name, struct kdev_err *err)
{
        return kdev_cdi_spec_remove_guarded(dir, file_name, NULL, NULL, 0, err);
}

int kdev_cdi_spec_remove_guarded(const char *dir, const char *file_name,
                                 struct kdev_file_guard *guard, char *aside, size_t size,
                                 struct kdev_err *err)
{
        int r;
        if ((r = check_dir(dir, err)) < 0 || (r = check_file_name(file_name, err)) < 0)
                return r;
        char *path;
        if (asprintf(&path, "%s/%s", dir, file_name) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        r = kdev_file_guard_check(guard, path, aside, size, err);
        if (r != 0) {
                free(path);
                return r < 0 ? r : 2; /* someone else's: kept aside, not deleted */
        }
        kdev_file_guard_forget(guard, path);
        if (unlink(path) < 0) {
                r = errno == ENOENT ? 0
                                    : kdev_err_set(err, errno, "removing CDI spec \"%s\": %s", path,
                                                   strerror(errno));
        } else {
                r = 1;
        }
        free(path);
        return r;
}

int kdev_cdi_spec_read(const char *path, struct kdev_cdi_spec **out, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        *out = NULL;
        if (!path || !path[0])
                return kdev_err_set(err, EINVAL, "CDI spec path: empty");
        if (ends_with(path, ".yaml") || ends_with(path, ".yml"))
                return kdev_err_set(err, EOPNOTSUPP, "CDI spec \"%s\": YAML specs are not supported",
                                    path);
        char *text;
        size_t len;
        int rc = kdev_file_read(path, "CDI spec", KDEV_CDI_SPEC_FILE_MAX, KDEV_FILE_TEXT, &text,
                                &len, err);
        if (rc < 0)
                return rc;
        json_error_t jerr;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        free(text);
        if (!root)
                return kdev_err_set(err, EINVAL, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                                    jerr.text);
        int r = kdev_cdi_spec_from_json(root, out, err);
        json_decref(root);
        if (r < 0)
                return kdev_err_wrap(err, "%s", path);
        return 0;
}
