/* kdev DRA claim checkpoint (see checkpoint.h). */
#include "dra/checkpoint.h"
#include "common/json.h"

#include "common/dir.h"
#include "common/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t kdev_dra_fnv1a64(const void *data, size_t len)
{
        return kdev_fnv1a64(data, len);
}

int kdev_dra_cp_init(struct kdev_dra_cp *cp)
{
        cp->claims = json_object();
        cp->texts = json_object();
        if (cp->claims && cp->texts)
                return 0;
        kdev_dra_cp_free(cp);
        return -ENOMEM;
}

void kdev_dra_cp_free(struct kdev_dra_cp *cp)
{
        if (!cp)
                return;
        json_decref(cp->claims);
        json_decref(cp->texts);
        cp->claims = cp->texts = NULL;
}

static int checksum_of(const json_t *data, char *buf, size_t size)
{
        char *text = json_dumps(data, JSON_COMPACT | JSON_SORT_KEYS);

        if (!text)
                return -ENOMEM;
        snprintf(buf, size, "fnv1a64:%016" PRIx64, kdev_dra_fnv1a64(text, strlen(text)));
        free(text);
        return 0;
}

/* Each check below names a value of another JSON type by its path |at|
 * (common/json.h): "<at>: expected an array, got an object". */
static int check_str_array(const json_t *a, const char *at, struct kdev_err *err)
{
        size_t i;
        json_t *v;

        if (!a)
                return kdev_err_set(err, EINVAL, "%s: missing", at);
        if (kdev_json_expect(a, JSON_ARRAY, err, "%s", at) < 0)
                return -EINVAL;
        json_array_foreach(a, i, v) {
                if (kdev_json_expect(v, JSON_STRING, err, "%s[%zu]", at, i) < 0)
                        return -EINVAL;
        }
        return 0;
}

static int check_device_at(const json_t *dev, const char *at, struct kdev_err *err)
{
        const char *keys[] = {"pool", "device"};
        char path[192];

        if (kdev_json_expect(dev, JSON_OBJECT, err, "%s", at) < 0)
                return -EINVAL;
        for (size_t i = 0; i < 2; i++) {
                const json_t *s = json_object_get(dev, keys[i]);

                if (kdev_json_expect(s, JSON_STRING, err, "%s.%s", at, keys[i]) < 0)
                        return -EINVAL;
                if (!s || json_string_length(s) == 0)
                        return kdev_err_set(err, EINVAL, "%s: \"%s\" missing or empty", at,
                                            keys[i]);
        }
        snprintf(path, sizeof(path), "%s.requestNames", at);
        if (check_str_array(json_object_get(dev, "requestNames"), path, err))
                return -EINVAL;
        snprintf(path, sizeof(path), "%s.cdiDeviceIDs", at);
        if (check_str_array(json_object_get(dev, "cdiDeviceIDs"), path, err))
                return -EINVAL;
        /* optional; JSON_TRUE accepts either boolean (common/json.h) */
        if (kdev_json_expect(json_object_get(dev, "adminAccess"), JSON_TRUE, err,
                             "%s.adminAccess", at) < 0)
                return -EINVAL;
        /* optional: the device's share (dra/plugin.h "Shares") */
        if (kdev_json_expect(json_object_get(dev, "share"), JSON_OBJECT, err, "%s.share", at) <
            0)
                return -EINVAL;
        /* optional: the device's MIG placement (dra/plugin.h "Dynamic MIG") */
        if (kdev_json_expect(json_object_get(dev, "mig"), JSON_OBJECT, err, "%s.mig", at) < 0)
                return -EINVAL;
        /* optional: the claim's applied config (dra/claim_config.h) */
        if (kdev_json_expect(json_object_get(dev, "config"), JSON_OBJECT, err, "%s.config",
                             at) < 0)
                return -EINVAL;
        return 0;
}

int kdev_dra_cp_check_device(const json_t *dev, struct kdev_err *err)
{
        return check_device_at(dev, "device record", err);
}

static int check_record(const char *uid, const json_t *rec, struct kdev_err *err)
{
        const json_t *devs;
        size_t i;
        json_t *d;
        char at[160];

        if (!*uid)
                return kdev_err_set(err, EINVAL, "empty claim uid");
        snprintf(at, sizeof(at), ".data.claims[\"%s\"]", uid);
        if (kdev_json_expect(rec, JSON_OBJECT, err, "%s", at) < 0 ||
            kdev_json_member(rec, "namespace", JSON_STRING, NULL, NULL, at, err) < 0 ||
            kdev_json_member(rec, "name", JSON_STRING, NULL, NULL, at, err) < 0 ||
            kdev_json_member(rec, "devices", JSON_ARRAY, NULL, NULL, at, err) < 0 ||
            kdev_json_member(rec, "migPending", JSON_TRUE, NULL, NULL, at, err) < 0)
                return -EINVAL;
        if (!json_object_get(rec, "namespace") || !json_object_get(rec, "name"))
                return kdev_err_set(err, EINVAL, "claim %s: namespace or name missing", uid);
        devs = json_object_get(rec, "devices");
        if (!devs)
                return kdev_err_set(err, EINVAL, "claim %s: devices missing", uid);
        json_array_foreach(devs, i, d) {
                char dat[192];

                snprintf(dat, sizeof(dat), "%s.devices[%zu]", at, i);
                if (check_device_at(d, dat, err) < 0)
                        return -EINVAL;
        }
        return 0;
}

/* Parses the file text into a claims object; -EBADMSG with |err| on any
 * defect. */
static int parse(const char *text, json_t **claims, struct kdev_err *err)
{
        json_error_t je;
        json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
        json_t *ver, *sum, *data, *cl, *rec;
        char want[64];
        const char *uid;
        int rc = -EBADMSG;

        if (!root) {
                kdev_err_set(err, EBADMSG, "bad JSON at line %d column %d: %s", je.line,
                             je.column, je.text);
                return -EBADMSG;
        }
        /* a value of another JSON type is named by its path */
        if (kdev_json_expect(root, JSON_OBJECT, err, "top level") < 0 ||
            kdev_json_member(root, "version", JSON_INTEGER, &ver, NULL, "", err) < 0)
                goto out;
        if (json_is_integer(ver) && json_integer_value(ver) > KDEV_DRA_CP_VERSION) {
                /* a newer kdev's format: not ours to judge, nor to move aside */
                rc = kdev_err_set(err, ENOTSUP, "%" JSON_INTEGER_FORMAT, json_integer_value(ver));
                goto out;
        }
        if (kdev_json_member(root, "checksum", JSON_STRING, &sum, NULL, "", err) < 0 ||
            kdev_json_member(root, "data", JSON_OBJECT, &data, NULL, "", err) < 0 ||
            kdev_json_member(data, "claims", JSON_OBJECT, &cl, NULL, ".data", err) < 0)
                goto out;
        if (!json_is_integer(ver) || json_integer_value(ver) < KDEV_DRA_CP_VERSION_1) {
                kdev_err_set(err, EBADMSG, "unsupported version (want %d to %d)",
                             KDEV_DRA_CP_VERSION_1, KDEV_DRA_CP_VERSION);
                goto out;
        }
        if (!json_is_string(sum) || !json_is_object(data) || !json_is_object(cl)) {
                kdev_err_set(err, EBADMSG, "checksum, data or data.claims missing");
                goto out;
        }
        if (checksum_of(data, want, sizeof(want)) < 0) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if (strcmp(json_string_value(sum), want) != 0) {
                kdev_err_set(err, EBADMSG, "checksum mismatch (file %s, computed %s)",
                             json_string_value(sum), want);
                goto out;
        }
        json_object_foreach(cl, uid, rec) {
                if (check_record(uid, rec, err) < 0) {
                        err->code = EBADMSG;
                        goto out;
                }
        }
        *claims = json_incref(cl);
        rc = 0;
out:
        json_decref(root);
        return rc;
}

/* Splits |path| into its directory (into |dir|) and base name. Returns the
 * base name (inside |path|) or NULL when |path| does not fit |dir|. */
static const char *split_path(const char *path, char *dir, size_t size)
{
        const char *slash = strrchr(path, '/');

        if (!slash) {
                snprintf(dir, size, ".");
                return path;
        }
        if ((size_t)(slash - path) + 2 > size)
                return NULL;
        if (slash == path) {
                snprintf(dir, size, "/");
        } else {
                memcpy(dir, path, (size_t)(slash - path));
                dir[slash - path] = '\0';
        }
        return slash + 1;
}

struct aside {
        char *name;
        long long when;
        unsigned seq;
};

/* Newest first: by the seconds, then by the "-<n>" counter. */
static int aside_cmp(const void *a, const void *b)
{
        const struct aside *x = a, *y = b;

        if (x->when != y->when)
                return x->when < y->when ? 1 : -1;
        if (x->seq != y->seq)
                return x->seq < y->seq ? 1 : -1;
        return strcmp(y->name, x->name);
}

/* Parses "<seconds>" or "<seconds>-<n>" (the suffix after ".corrupt-"). */
static bool parse_aside(const char *s, long long *when, unsigned *seq)
{
        char *end;

        if (*s < '0' || *s > '9')
                return false;
        errno = 0;
        *when = strtoll(s, &end, 10);
        *seq = 0;
        if (errno)
                return false;
        if (*end == '-') {
                const char *q = end + 1;
                unsigned long v;

                if (*q < '0' || *q > '9')
                        return false;
                v = strtoul(q, &end, 10);
                if (v > 100000)
                        return false;
                *seq = (unsigned)v;
        }
        return *end == '\0';
}

/* Removes all but the newest |keep| "<path>.corrupt-<seconds>[-<n>]" files.
 * Returns the number removed (failures are skipped). */
static int prune_corrupt(const char *path, int keep)
{
        char dir[4096], file[8192], prefix[1024];
        const char *base = split_path(path, dir, sizeof(dir));
        struct aside *list = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        DIR *d;
        int removed = 0;

        if (!base || snprintf(prefix, sizeof(prefix), "%s.corrupt-", base) >= (int)sizeof(prefix))
                return 0;
        d = opendir(dir);
        if (!d)
                return 0;
        while ((e = readdir(d)) != NULL) {
                struct aside a = {0};

                if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
                    !parse_aside(e->d_name + strlen(prefix), &a.when, &a.seq))
                        continue;
                if (n == cap) {
                        size_t nc = cap ? cap * 2 : 16;
                        struct aside *nl = realloc(list, nc * sizeof(*nl));

                        if (!nl)
                                break;
                        list = nl;
                        cap = nc;
                }
                a.name = strdup(e->d_name);
                if (!a.name)
                        break;
                list[n++] = a;
        }
        closedir(d);
        if (n)
                qsort(list, n, sizeof(*list), aside_cmp);
        for (size_t i = 0; i < n; i++) {
                if (i >= (size_t)keep) {
                        snprintf(file, sizeof(file), "%s/%s", dir, list[i].name);
                        if (unlink(file) == 0)
                                removed++;
                }
                free(list[i].name);
        }
        free(list);
        return removed;
}

int kdev_dra_cp_load(struct kdev_dra_cp *cp, const char *path, struct kdev_err *err)
{
        return kdev_dra_cp_load_guarded(cp, path, NULL, err);
}

int kdev_dra_cp_load_guarded(struct kdev_dra_cp *cp, const char *path,
                             struct kdev_file_guard *guard, struct kdev_err *err)
{
        char *text = NULL;
        json_t *claims = NULL;
        struct kdev_err why = {0};
        char aside[4096];
        int rc;

        kdev_dra_cp_free(cp);
        size_t len;
        rc = kdev_file_read(path, "claim checkpoint", KDEV_DRA_CP_FILE_MAX, KDEV_FILE_TEXT, &text,
                            &len, &why);
        if (rc == -ENOENT)
                return kdev_dra_cp_init(cp) < 0 ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "%s", why.msg);
        if (rc == -EISDIR || rc == -EINVAL)
                /* not a file kdev wrote: neither read nor moved aside */
                return kdev_err_set(err, -rc, "claim checkpoint %s; refusing to start, it is left "
                                    "alone", why.msg);
        if (rc == -EFBIG)
                /* may hold prepared claims: not moved aside either */
                return kdev_err_set(err, EFBIG, "%s; refusing to start, it is left alone",
                                    why.msg);
        if (rc == -EILSEQ) {
                /* "PATH: contains a NUL byte at offset N" without the path */
                size_t pl = strlen(path);
                const char *m = strncmp(why.msg, path, pl) == 0 && why.msg[pl] == ':'
                                        ? why.msg + pl + 2
                                        : why.msg;
                memmove(why.msg, m, strlen(m) + 1);
                rc = -EBADMSG;
        } else if (rc < 0) {
                kdev_err_set(&why, EBADMSG, "cannot read: %s", strerror(-rc));
                rc = -EBADMSG;
        } else {
                rc = parse(text, &claims, &why);
        }
        if (rc == -ENOMEM || rc == -ENOTSUP)
                free(text);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "%s", why.msg);
        if (rc == -ENOTSUP)
                return kdev_err_set(err, ENOTSUP,
                                    "checkpoint %s was written by a newer kdev (version %s, this "
                                    "one reads %d to %d); refusing to start so prepared claims "
                                    "are not forgotten",
                                    path, why.msg, KDEV_DRA_CP_VERSION_1, KDEV_DRA_CP_VERSION);
        if (kdev_dra_cp_init(cp) < 0) {
                free(text);
                json_decref(claims);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        if (rc == 0) {
                json_decref(cp->claims);
                cp->claims = claims;
                /* what is loaded is kdev's from now on (file.h guard) */
                if (guard)
                        kdev_file_guard_note(guard, path, text, len, NULL);
                free(text);
                return 0;
        }
        free(text);
        long long now = (long long)time(NULL);

        snprintf(aside, sizeof(aside), "%s.corrupt-%lld", path, now);
        for (unsigned n = 1; n < 1000 && access(aside, F_OK) == 0; n++)
                snprintf(aside, sizeof(aside), "%s.corrupt-%lld-%u", path, now, n);
        if (rename(path, aside) == 0) {
                int pruned = prune_corrupt(path, KDEV_DRA_CP_KEEP_CORRUPT);

                if (pruned > 0)
                        return kdev_err_set(err, EBADMSG,
                                            "claim checkpoint %s is corrupt (%s); moved aside to "
                                            "%s (%d older copies removed, the newest %d kept), "
                                            "starting with no prepared claims",
                                            path, why.msg, aside, pruned,
                                            KDEV_DRA_CP_KEEP_CORRUPT);
                return kdev_err_set(err, EBADMSG,
                                    "claim checkpoint %s is corrupt (%s); moved aside to %s, "
                                    "starting with no prepared claims",
                                    path, why.msg, aside);
        }
        return kdev_err_set(err, EBADMSG,
                            "claim checkpoint %s is corrupt (%s); moving it aside to %s failed: "
                            "%s; starting with no prepared claims",
                            path, why.msg, aside, strerror(errno));
}

int kdev_dra_cp_save(const struct kdev_dra_cp *cp, const char *path, struct kdev_err *err)
{
        int rc = kdev_dra_cp_save_guarded(cp, path, NULL, NULL, 0, err);

        return rc < 0 ? rc : 0;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The canonical text of {"claims": cp->claims} (json_dumps with
 * JSON_COMPACT | JSON_SORT_KEYS, keys in strcmp order as jansson sorts
 * them), built from each claim's cached "<key>":<record> text (cp->texts:
 * uid -> [text, the record's address]; made again when the record is
 * another object). Malloc'ed, NULL when out of memory. */
static bool needs_v2(const json_t *rec)
{
        const json_t *d;
        size_t i;

        if (json_object_get(rec, "migPending"))
                return true;
        json_array_foreach(json_object_get(rec, "devices"), i, d) {
                if (json_object_get(d, "share") || json_object_get(d, "mig"))
                        return true;
        }
        return false;
}

static char *data_text(const struct kdev_dra_cp *cp, int *version)
{
        size_t n = json_object_size(cp->claims), i = 0, len = 0, o;
        const char **keys = calloc(n ? n : 1, sizeof(*keys));
        const char **parts = calloc(n ? n : 1, sizeof(*parts));
        char **made = calloc(n ? n : 1, sizeof(*made)); /* parts not cached */
        const char *uid;
        char *out = NULL;
        json_t *rec;

        if (!keys || !parts || !made)
                goto out;
        json_object_foreach(cp->claims, uid, rec)
                keys[i++] = uid;
        qsort(keys, n, sizeof(*keys), cmp_str);
        *version = KDEV_DRA_CP_VERSION_1;
        for (i = 0; i < n; i++) {
                const json_t *c = json_object_get(cp->texts, keys[i]);
                bool v2;

                rec = json_object_get(cp->claims, keys[i]);
                if (c && (json_int_t)(intptr_t)rec == json_integer_value(json_array_get(c, 1))) {
                        parts[i] = json_string_value(json_array_get(c, 0));
                        v2 = json_is_true(json_array_get(c, 2));
                } else {
                        json_t *k = json_string(keys[i]);
                        char *kt = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
                        char *rt = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);

                        if (kt && rt && asprintf(&made[i], "%s:%s", kt, rt) < 0)
                                made[i] = NULL;
                        json_decref(k);
                        free(kt);
                        free(rt);
                        if (!made[i])
                                goto out;
                        parts[i] = made[i];
                        v2 = needs_v2(rec);
                        if (cp->texts)
                                json_object_set_new(cp->texts, keys[i],
                                                    json_pack("[s,I,b]", made[i],
                                                              (json_int_t)(intptr_t)rec, v2));
                }
                if (v2)
                        *version = KDEV_DRA_CP_VERSION;
                len += strlen(parts[i]) + 1;
        }
        out = malloc(len + 16);
        if (!out)
                goto out;
        o = (size_t)sprintf(out, "{\"claims\":{");
        for (i = 0; i < n; i++) {
                size_t l = strlen(parts[i]);

                if (i)
                        out[o++] = ',';
                memcpy(out + o, parts[i], l);
                o += l;
        }
        memcpy(out + o, "}}", 3);
out:
        for (i = 0; made && i < n; i++)
                free(made[i]);
        free(made);
        free(parts);
        free(keys);
        return out;
}

int kdev_dra_cp_save_guarded(const struct kdev_dra_cp *cp, const char *path,
                             struct kdev_file_guard *guard, char *aside, size_t size,
                             struct kdev_err *err)
{
        char sum[64], tmp[4096], dirbuf[4096];
        char *text = NULL, *dtext = NULL;
        int rc = 0;

        if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp) ||
            snprintf(dirbuf, sizeof(dirbuf), "%s", path) >= (int)sizeof(dirbuf))
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        const char *dir = dirname(dirbuf);

        if ((rc = kdev_dir_create(dir, KDEV_DIR_MODE_PRIVATE, "claim checkpoint directory",
                                  err)) < 0)
                return rc;
        rc = 0;
        /* the canonical text of "data" (JSON_COMPACT | JSON_SORT_KEYS, what
         * the load checks the checksum against) serves both the checksum and
         * the file: with sorted keys the file is {"checksum":..,"data":..,
         * "version":..}, byte for byte what json_dumps of the whole object
         * would give; each claim's part is kept from the last save (its
         * record is replaced, never changed in place), so a save formats
         * only the claims that changed */
        int version;

        dtext = data_text(cp, &version);
        if (!dtext)
                goto nomem;
        snprintf(sum, sizeof(sum), "fnv1a64:%016" PRIx64, kdev_dra_fnv1a64(dtext, strlen(dtext)));
        if (asprintf(&text, "{\"checksum\":\"%s\",\"data\":%s,\"version\":%d}", sum, dtext,
                     version) < 0) {
                text = NULL;
                goto nomem;
        }
        rc = kdev_file_write_guarded(guard, path, tmp, text, strlen(text), 0600, true, aside,
                                     size, err);
        goto out;
nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
out:
        free(text);
        free(dtext);
        return rc;
}

const json_t *kdev_dra_cp_get(const struct kdev_dra_cp *cp, const char *uid)
{
        return json_object_get(cp->claims, uid);
}

int kdev_dra_cp_put(struct kdev_dra_cp *cp, const char *uid, const char *ns, const char *name,
                    json_t *devices, struct kdev_err *err)
{
        json_t *rec;
        int rc;

        if (!devices)
                return kdev_err_set(err, ENOMEM, "out of memory");
        rec = json_pack("{s:s,s:s,s:o}", "namespace", ns, "name", name, "devices", devices);
        if (!rec)
                return kdev_err_set(err, ENOMEM, "out of memory");
        rc = check_record(uid, rec, err);
        if (rc < 0) {
                json_decref(rec);
                return rc;
        }
        json_object_del(cp->texts, uid);
        if (json_object_set_new(cp->claims, uid, rec) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

int kdev_dra_cp_restore(struct kdev_dra_cp *cp, const char *uid, json_t *rec)
{
        json_object_del(cp->texts, uid);
        return json_object_set(cp->claims, uid, rec) < 0 ? -ENOMEM : 0;
}

void kdev_dra_cp_touch(struct kdev_dra_cp *cp, const char *uid)
{
        json_object_del(cp->texts, uid);
}

int kdev_dra_cp_remove(struct kdev_dra_cp *cp, const char *uid)
{
        json_object_del(cp->texts, uid);
        return json_object_del(cp->claims, uid) == 0 ? 1 : 0;
}

size_t kdev_dra_cp_count(const struct kdev_dra_cp *cp)
{
        return json_object_size(cp->claims);
}

/* Whether |s| is exactly six letters or digits (mkstemp's XXXXXX). */
static bool mkstemp_tail(const char *s)
{
        size_t i;

        for (i = 0; s[i]; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                      (s[i] >= '0' && s[i] <= '9')))
                        return false;
        return i == 6;
}

int kdev_dra_remove_temps(const char *dir, const char *prefix, const char *infix,
                          kdev_dra_removed_fn removed, void *arg, struct kdev_err *err)
{
        size_t plen = strlen(prefix), ilen = infix ? strlen(infix) : 0;
        char file[8192];
        struct dirent *e;
        struct stat st;
        int count = 0;
        DIR *d = opendir(dir);

        if (!d) {
                if (errno == ENOENT)
                        return 0;
                return kdev_err_set(err, errno, "open %s: %s", dir, strerror(errno));
        }
        while ((e = readdir(d)) != NULL) {
                const char *name = e->d_name;
                size_t len = strlen(name);

                if (!plen || len < plen + ilen + 6 || strncmp(name, prefix, plen) != 0 ||
                    !mkstemp_tail(name + len - 6))
                        continue;
                if (infix) {
                        /* <prefix><something><infix>XXXXXX */
                        if (len < plen + 1 + ilen + 6 ||
                            strncmp(name + len - 6 - ilen, infix, ilen) != 0)
                                continue;
                } else if (len != plen + 6) {
                        continue;  /* <prefix>XXXXXX */
                }
                if (snprintf(file, sizeof(file), "%s/%s", dir, name) >= (int)sizeof(file))
                        continue;
                if (lstat(file, &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (unlink(file) == 0) {
                        count++;
                        if (removed)
                                removed(arg, file, 0);
                } else if (errno != ENOENT && removed) {
                        removed(arg, file, errno);
                }
        }
        closedir(d);
        return count;
}

int kdev_dra_cp_remove_temps(const char *path, kdev_dra_removed_fn removed, void *arg,
                             struct kdev_err *err)
{
        char dir[4096], prefix[1024];
        const char *base = split_path(path, dir, sizeof(dir));

        if (!base || snprintf(prefix, sizeof(prefix), "%s.tmp.", base) >= (int)sizeof(prefix))
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        return kdev_dra_remove_temps(dir, prefix, NULL, removed, arg, err);
}
