/* MIG profile names, resource names, mig-minors and the DRA device names (see
 * mig.h). */
#include "nvidia/mig.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "nvml/discover.h"
#include "nvml/mig_config.h"
#include "nvml/nvml_api.h"

unsigned kdev_nvidia_mig_gi_slices(unsigned gi_index)
{
        switch (gi_index) {
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE:
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1:
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2:
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX:
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME:
                return 1;
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
                return 2;
        case NVML_GPU_INSTANCE_PROFILE_3_SLICE:
                return 3;
        case NVML_GPU_INSTANCE_PROFILE_4_SLICE:
        case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX:
                return 4;
        case NVML_GPU_INSTANCE_PROFILE_6_SLICE:
                return 6;
        case NVML_GPU_INSTANCE_PROFILE_7_SLICE:
                return 7;
        case NVML_GPU_INSTANCE_PROFILE_8_SLICE:
                return 8;
        default:
                return 0;
        }
}

unsigned kdev_nvidia_mig_ci_slices(unsigned ci_index)
{
        switch (ci_index) {
        case NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE:
        case NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1:
                return 1;
        case NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: return 2;
        case NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: return 3;
        case NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: return 4;
        case NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE: return 6;
        case NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE:
        case NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL:
                return 7;
        case NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE: return 8;
        default: return 0;
        }
}

/* The suffix of a GPU-instance profile index (go-nvlib attributes). */
static const char *gi_suffix(unsigned gi_index)
{
        switch (gi_index) {
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1:
                return "+me";
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
                return "+me.all";
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX:
        case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX:
                return "+gfx";
        case NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:
        case NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
                return "-me";
        default:
                return "";
        }
}

/* math.Ceil and math.Round (half away from zero) for 0 <= x < 2^52, without
 * libm. x - trunc(x) is exact in binary floating point. */
static double ceil_pos(double x)
{
        double t = (double)(unsigned long long)x;
        return t < x ? t + 1.0 : t;
}

static double round_pos(double x)
{
        double t = (double)(unsigned long long)x;
        return x - t >= 0.5 ? t + 1.0 : t;
}

unsigned long long kdev_nvidia_mig_memory_gb(unsigned long long mig_mib,
                                             unsigned long long parent_total_bytes)
{
        const double one_mib = 1024.0 * 1024.0;
        const unsigned long long one_gib = 1024ULL * 1024 * 1024;
        if (parent_total_bytes == 0)
                return 0;
        double frac = ((double)mig_mib * one_mib) / (double)parent_total_bytes;
        frac = ceil_pos(frac * 8.0) / 8.0;
        double total_gb = (double)((parent_total_bytes + one_gib - 1) / one_gib);
        return (unsigned long long)round_pos(frac * total_gb);
}

int kdev_nvidia_mig_profile_name(unsigned gi_index, unsigned ci_index,
                                 unsigned long long memory_mib,
                                 unsigned long long parent_total_bytes, char *buf, size_t size,
                                 struct kdev_err *err)
{
        unsigned g = kdev_nvidia_mig_gi_slices(gi_index);
        unsigned c = kdev_nvidia_mig_ci_slices(ci_index);
        if (g == 0)
                return kdev_err_set(err, EINVAL, "unknown GPU instance profile index 0x%x",
                                    gi_index);
        if (c == 0)
                return kdev_err_set(err, EINVAL, "unknown compute instance profile index 0x%x",
                                    ci_index);
        if (parent_total_bytes == 0)
                return kdev_err_set(err, EINVAL, "parent GPU memory size is 0");
        unsigned long long gb = kdev_nvidia_mig_memory_gb(memory_mib, parent_total_bytes);
        int n;
        if (c == g)
                n = snprintf(buf, size, "%ug.%llugb%s", g, gb, gi_suffix(gi_index));
        else
                n = snprintf(buf, size, "%uc.%ug.%llugb%s", c, g, gb, gi_suffix(gi_index));
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENOBUFS, "MIG profile name too long");
        return n;
}

int kdev_nvidia_mig_gi_profile_name(const struct kdev_nvml_mig_profile *p,
                                    unsigned long long parent_total_bytes, char *buf,
                                    size_t size, struct kdev_err *err)
{
        unsigned g = p->info.sliceCount;
        for (unsigned c = 0; c < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; c++)
                if (kdev_nvidia_mig_ci_slices(c) == g)
                        return kdev_nvidia_mig_profile_name(p->index, c, p->info.memorySizeMB,
                                                            parent_total_bytes, buf, size, err);
        return kdev_err_set(err, EINVAL, "no compute instance profile of %u slices", g);
}

int kdev_nvidia_mig_device_profile(const struct kdev_gpu *parent,
                                   const struct kdev_mig_device *m, char *buf, size_t size,
                                   struct kdev_err *err)
{
        if (parent->memory_ret != NVML_SUCCESS)
                return kdev_err_set(err, -kdev_nvml_errno(parent->memory_ret),
                                    "error getting MIG profile for MIG device at index "
                                    "'(%u, %u)': error getting parent memory info: %s",
                                    parent->index, m->index,
                                    kdev_nvml_builtin_strerror(parent->memory_ret));
        int rc = kdev_nvidia_mig_profile_name(m->gi_profile_index, m->ci_profile_index,
                                              m->attributes.memorySizeMB, parent->memory_total,
                                              buf, size, err);
        if (rc < 0)
                kdev_err_wrap(err, "error getting MIG profile for MIG device at index '(%u, %u)'",
                              parent->index, m->index);
        return rc;
}

int kdev_nvidia_mig_resource_name(const char *profile, char *buf, size_t size)
{
        int n = snprintf(buf, size, KDEV_NVIDIA_MIG_RESOURCE_PREFIX "%s", profile);
        if (n < 0 || (size_t)n >= size)
                return -ENOBUFS;
        for (char *p = buf; *p; p++) {
                if (*p == '+')
                        *p = '.';
        }
        return n;
}

void kdev_nvidia_mig_minors_clear(struct kdev_nvidia_mig_minors *m)
{
        if (!m)
                return;
        free(m->entries);
        memset(m, 0, sizeof(*m));
        m->config = m->monitor = -1;
}

/* Parses a decimal unsigned at *p (at least one digit), advancing *p. */
static int parse_uint(const char **p, unsigned *out)
{
        const char *s = *p;
        unsigned long v = 0;
        if (*s < '0' || *s > '9')
                return -1;
        while (*s >= '0' && *s <= '9') {
                v = v * 10 + (unsigned long)(*s - '0');
                if (v > 0xFFFFFFFFul)
                        return -1;
                s++;
        }
        *p = s;
        *out = (unsigned)v;
        return 0;
}

static int expect(const char **p, const char *lit)
{
        size_t n = strlen(lit);
        if (strncmp(*p, lit, n) != 0)
                return -1;
        *p += n;
        return 0;
}

/* One line: 0 parsed into |e| (ci -2 for config, -3 for monitor), -1 not. */
static int parse_line(const char *s, struct kdev_nvidia_mig_minor *e)
{
        const char *p = s;
        if (expect(&p, "config ") == 0 || (p = s, expect(&p, "monitor ") == 0)) {
                e->ci = s[0] == 'c' ? -2 : -3;
                e->gpu = e->gi = 0;
                return parse_uint(&p, &e->minor) == 0 && *p == '\0' ? 0 : -1;
        }
        p = s;
        unsigned ci = 0;
        if (expect(&p, "gpu") < 0 || parse_uint(&p, &e->gpu) < 0 || expect(&p, "/gi") < 0 ||
            parse_uint(&p, &e->gi) < 0)
                return -1;
        e->ci = -1;
        if (expect(&p, "/ci") == 0) {
                if (parse_uint(&p, &ci) < 0 || ci > 0x7FFFFFFF)
                        return -1;
                e->ci = (int)ci;
        }
        if (expect(&p, "/access ") < 0 || parse_uint(&p, &e->minor) < 0 || *p != '\0')
                return -1;
        return 0;
}

int kdev_nvidia_mig_minors_read(const char *proc_root, struct kdev_nvidia_mig_minors *out,
                                struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        out->config = out->monitor = -1;
        char path[4096];
        const char *root = proc_root && proc_root[0] ? proc_root : KDEV_NVIDIA_DEFAULT_PROC_ROOT;
        size_t rl = strlen(root);
        while (rl > 1 && root[rl - 1] == '/')
                rl--;
        snprintf(path, sizeof(path), "%.*s/%s", (int)rl, strcmp(root, "/") == 0 ? "" : root,
                 KDEV_NVIDIA_MIG_MINORS_FILE);
        /* a procfs file: st_size is 0, so only the bound while reading holds */
        char *text;
        size_t len;
        struct kdev_err ferr = {0};
        int rc = kdev_file_read(path, "MIG minors file", KDEV_NVIDIA_MIG_MINORS_FILE_MAX, 0,
                                &text, &len, &ferr);
        if (rc == -ENOENT || rc == -ENOTDIR)
                return 0;
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_err_set(err, -rc, "error opening MIG minors file: %s", ferr.msg);
        out->present = true;
        size_t alloc = 0;
        for (char *line = text; line < text + len;) {
                char *nl = memchr(line, '\n', (size_t)(text + len - line));
                char *end = nl ? nl : text + len;
                char *next = nl ? nl + 1 : text + len;
                while (end > line && end[-1] == '\r')
                        end--;
                bool has_nul = memchr(line, '\0', (size_t)(end - line)) != NULL;
                *end = '\0';
                struct kdev_nvidia_mig_minor e;
                if (has_nul || parse_line(line, &e) < 0) {
                        out->n_skipped++;
                        line = next;
                        continue;
                }
                line = next;
                if (e.ci == -2) {
                        out->config = (int)e.minor;
                        continue;
                }
                if (e.ci == -3) {
                        out->monitor = (int)e.minor;
                        continue;
                }
                if (out->n_entries == alloc) {
                        size_t na = alloc ? alloc * 2 : 256;
                        struct kdev_nvidia_mig_minor *v = realloc(out->entries, na * sizeof(*v));
                        if (!v) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                                break;
                        }
                        out->entries = v;
                        alloc = na;
                }
                out->entries[out->n_entries++] = e;
        }
        free(text);
        if (rc < 0)
                kdev_nvidia_mig_minors_clear(out);
        return rc;
}

/* The minor of gpu<g>/gi<i>[/ci<c>]/access; the last matching line wins. */
static int lookup(const struct kdev_nvidia_mig_minors *m, unsigned gpu, unsigned gi, int ci,
                  unsigned *minor)
{
        for (size_t k = m->n_entries; k-- > 0;) {
                const struct kdev_nvidia_mig_minor *e = &m->entries[k];
                if (e->gpu == gpu && e->gi == gi && e->ci == ci) {
                        *minor = e->minor;
                        return 0;
                }
        }
        return -1;
}

int kdev_nvidia_mig_caps(const struct kdev_nvidia_mig_minors *m, unsigned gpu_minor, unsigned gi,
                         unsigned ci, unsigned *gi_cap, unsigned *ci_cap, struct kdev_err *err)
{
        if (lookup(m, gpu_minor, gi, -1, gi_cap) < 0)
                return kdev_err_set(err, ENOENT,
                                    "missing MIG GPU instance capability path: "
                                    "/proc/driver/nvidia/capabilities/gpu%u/mig/gi%u/access",
                                    gpu_minor, gi);
        if (ci > 0x7FFFFFFF || lookup(m, gpu_minor, gi, (int)ci, ci_cap) < 0)
                return kdev_err_set(err, ENOENT,
                                    "missing MIG GPU instance capability path: "
                                    "/proc/driver/nvidia/capabilities/gpu%u/mig/gi%u/ci%u/access",
                                    gpu_minor, gi, ci);
        return 0;
}

/* --- DRA device names (NVIDIA's DRA driver for GPUs) --------------------- */

int kdev_nvidia_dra_gpu_name(const struct kdev_gpu *g, char *buf, size_t size)
{
        int len = snprintf(buf, size, "gpu-%u", g->minor);

        if (len < 0 || (size_t)len >= size)
                return -ENAMETOOLONG;
        return len;
}

bool kdev_nvidia_dra_name_minor(const char *name, unsigned *minor, bool *mig)
{
        int used = 0;

        if (sscanf(name, "gpu-%u%n", minor, &used) != 1 || name[4] < '0' || name[4] > '9')
                return false;
        *mig = name[used] != '\0';
        return true;
}

/* The MIG profile text of |m| as go-nvlib spells it when NVML's device name
 * does not carry it: "<g>g.<gb>gb" (or "<c>c.<g>g.<gb>gb" when the compute
 * instance does not span its GPU instance), "+me" for the media-extension
 * GI profiles; <gb> rounded as go-nvlib's getMigMemorySizeGB (the GI's share
 * of the parent's memory in eighths, times the parent's GiB) when the
 * parent's memory is known, else MiB / 1024 rounded up. Not
 * kdev_nvidia_mig_profile_name: NVIDIA's DRA driver falls back to the
 * profile's slice counts, knows only the "+me" suffix and still names a MIG
 * device whose parent's memory is unknown. */
static void dra_computed_profile(const struct kdev_gpu *g, const struct kdev_mig_device *m,
                             char *buf, size_t size)
{
        unsigned long long mb = m->gi_profile.memorySizeMB, gb;
        unsigned gs = m->gi_profile.sliceCount, cs = m->ci_profile.sliceCount;
        const char *me = m->gi_profile_index == NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 ||
                                         m->gi_profile_index ==
                                                 NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
                                 ? "+me"
                                 : "";

        if (g->memory_ret == NVML_SUCCESS && g->memory_total > 0) {
                unsigned long long total = g->memory_total;
                unsigned long long eighths = (mb * 1024ULL * 1024ULL * 8ULL + total - 1) / total;
                unsigned long long total_gb = (total + (1ULL << 30) - 1) >> 30;

                gb = (eighths * total_gb + 4) / 8;
        } else {
                gb = (mb + 1023) / 1024;
        }
        if (cs && cs != gs)
                snprintf(buf, size, "%uc.%ug.%llugb%s", cs, gs, gb, me);
        else
                snprintf(buf, size, "%ug.%llugb%s", gs, gb, me);
}

/* |text| made a DNS-label part as NVIDIA's driver does (mig.go
 * toRFC1123Compliant after dropping the dots) into |seg| (|size| bytes).
 * Returns its length. */
static size_t dra_label_part(const char *text, char *seg, size_t size)
{
        size_t n = 0;

        for (const char *t = text; *t && n + 1 < size; t++) {
                char ch = *t;

                if (ch == '.')
                        continue;
                if (ch >= 'A' && ch <= 'Z')
                        ch = (char)(ch - 'A' + 'a');
                if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')))
                        ch = '-';
                if (ch == '-' && n == 0)
                        continue;
                seg[n++] = ch;
        }
        while (n > 0 && seg[n - 1] == '-')
                n--;
        seg[n] = '\0';
        return n;
}

/* "gpu-<minor>-mig-<seg>-<id>-<start>" into |buf|, the profile part |seg|
 * (|n| characters, room for the NUL) shortened so that the name is a DNS
 * label. Returns the length, -ENAMETOOLONG or -EINVAL (no profile left). */
static int dra_mig_name_of(unsigned minor, char *seg, size_t n, unsigned id, unsigned start,
                           char *buf, size_t size)
{
        /* a DNS label holds at most 63 characters: shorten the profile part */
        int len = snprintf(NULL, 0, "gpu-%u-mig--%u-%u", minor, id, start);
        if (len < 0 || len >= KDEV_NVIDIA_DRA_NAME_MAX)
                return -ENAMETOOLONG;
        if (n > (size_t)(KDEV_NVIDIA_DRA_NAME_MAX - len))
                n = (size_t)(KDEV_NVIDIA_DRA_NAME_MAX - len);
        seg[n] = '\0';
        while (n > 0 && seg[n - 1] == '-')
                seg[--n] = '\0';
        if (n == 0)
                return -EINVAL;
        len = snprintf(buf, size, "gpu-%u-mig-%s-%u-%u", minor, seg, id, start);
        if (len < 0 || (size_t)len >= size)
                return -ENAMETOOLONG;
        return len;
}

int kdev_nvidia_dra_mig_name(const struct kdev_gpu *g, const struct kdev_mig_device *m,
                             char *buf, size_t size)
{
        const char *prof = strstr(m->name, " MIG ");
        char text[KDEV_GPU_NAME_MAX + 16], seg[64];
        size_t n = 0;

        if (prof)
                n = dra_label_part(prof + 5, seg, sizeof(seg));
        if (n == 0) {
                dra_computed_profile(g, m, text, sizeof(text));
                n = dra_label_part(text, seg, sizeof(seg));
        }
        /* a compute instance that does not span its GPU instance (NVIDIA's
         * driver publishes none): its CI placement keeps the name unique
         * among the CIs of one GI */
        if (m->ci_profile.sliceCount && m->ci_profile.sliceCount != m->gi_profile.sliceCount) {
                char ci[16];

                snprintf(ci, sizeof(ci), "-ci%u", m->ci_placement.start);
                if (n + strlen(ci) < sizeof(seg)) {
                        memcpy(seg + n, ci, strlen(ci) + 1);
                        n += strlen(ci);
                }
        }
        return dra_mig_name_of(g->minor, seg, n, m->gi_profile.id, m->gi_placement.start, buf,
                               size);
}

int kdev_nvidia_dra_placement_name(unsigned parent_minor, const char *profile,
                                   unsigned gi_profile_id, unsigned placement_start, char *buf,
                                   size_t size)
{
        char seg[64];
        size_t n = profile ? dra_label_part(profile, seg, sizeof(seg)) : 0;

        if (n == 0)
                return -EINVAL;
        return dra_mig_name_of(parent_minor, seg, n, gi_profile_id, placement_start, buf, size);
}

int kdev_nvidia_dra_counter_set_name(unsigned minor, char *buf, size_t size)
{
        int len = snprintf(buf, size, "gpu-%u-counter-set", minor);
        return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : len;
}

bool kdev_nvidia_is_plugin_socket_name(const char *file_name)
{
        static const char pre[] = "nvidia-", suf[] = ".sock";
        size_t n = strlen(file_name), np = sizeof(pre) - 1, ns = sizeof(suf) - 1;
        if (n <= np + ns || strncmp(file_name, pre, np) != 0 ||
            strcmp(file_name + n - ns, suf) != 0)
                return false;
        for (size_t i = np; i < n - ns; i++) {
                char c = file_name[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.'))
                        return false;
        }
        return true;
}
