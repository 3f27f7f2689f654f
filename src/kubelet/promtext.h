/* A reader of the Prometheus text exposition format (version 0.0.4), the
 * subset kdev-plugin's /metrics endpoint emits and `kdevctl top` reads:
 *
 *   # HELP ... / # TYPE ... / # any comment   skipped
 *   (empty line)                              skipped
 *   name{label="value",...} value [timestamp]
 *
 * Metric names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*;
 * blanks (spaces, tabs) are allowed between the tokens; a trailing comma
 * before '}' is accepted. Label values are double-quoted with the escapes
 * \\ \" and \n. The value is a float as strtod reads it (NaN, +Inf, -Inf
 * included); the optional timestamp is an integer (milliseconds) and is
 * ignored. Every line, the last one included, ends with '\n' (the format's
 * rule: text without it was cut short).
 *
 * Malformed input is an error naming the line (1-based), never a crash:
 * "line 12: label pod: unterminated value (no closing \")". A line longer
 * than KDEV_PROM_MAX_LINE bytes, a NUL byte, a duplicate label name and
 * anything after the value and timestamp are errors too. */
#ifndef KDEV_KUBELET_PROMTEXT_H
#define KDEV_KUBELET_PROMTEXT_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"

/* Longest line accepted, bytes without the '\n' (kdev's lines are < 1 KiB). */
#define KDEV_PROM_MAX_LINE 65536

struct kdev_prom_label {
        const char *name;  /* NUL-terminated, in the text's buffer */
        const char *value; /* unescaped, NUL-terminated; may hold '\n' */
};

struct kdev_prom_sample {
        const char *name;    /* metric name, e.g. "DCGM_FI_DEV_GPU_UTIL" */
        size_t label0;       /* index of its first label in kdev_prom_text.labels */
        size_t n_labels;
        double value;
        unsigned line;       /* 1-based line number in the text */
};

/* A parsed text. Owns one copy of the input (every string points into it)
 * and the two arrays; free with kdev_prom_text_clear(). */
struct kdev_prom_text {
        char *buf;
        struct kdev_prom_sample *samples;
        size_t n_samples;
        struct kdev_prom_label *labels;
        size_t n_labels;
};

/* Parses |len| bytes of |text| (need not be NUL-terminated) into |*out|,
 * which must be zeroed or cleared. Returns 0, or a negative errno with |err|
 * set and |*out| left empty: -EINVAL "line N: ..." for malformed input,
 * -ENOMEM "out of memory". */
KDEV_API int kdev_prom_parse(const char *text, size_t len, struct kdev_prom_text *out,
                             struct kdev_err *err);

/* The value of label |name| of sample |s| of |t|, or NULL when the sample
 * has no such label. The string belongs to |t|. */
KDEV_API const char *kdev_prom_label(const struct kdev_prom_text *t,
                                     const struct kdev_prom_sample *s, const char *name);

/* Frees what |t| holds and leaves it empty. NULL-safe. */
KDEV_API void kdev_prom_text_clear(struct kdev_prom_text *t);

#endif /* KDEV_KUBELET_PROMTEXT_H */
