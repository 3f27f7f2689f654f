/* Structured logging to stderr: one line per event, key=value text
 *   ts=2026-11-29T11:00:00.123Z level=info msg="registered" resource=example.com/fuse
 * or JSON lines ({"ts":...,"level":"info","msg":"registered","resource":...}).
 * Only executables and the daemon runtimes log; library modules return errors.
 * One exception: the gRPC server (src/rpc/server.c) logs a stalled request
 * once per connection, since no caller sees it (the peer has gone quiet).
 */
#ifndef KDEV_COMMON_LOG_H
#define KDEV_COMMON_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/export.h"

enum kdev_log_level { KDEV_LOG_DEBUG = 0, KDEV_LOG_INFO, KDEV_LOG_WARN, KDEV_LOG_ERROR };

/* Sets the minimum level printed and the format (JSON lines when |json|).
 * Defaults before any call: info, text. */
KDEV_API void kdev_log_setup(enum kdev_log_level min, bool json);

/* Parses "debug", "info", "warn" or "error" into |out|. Returns 0, or -EINVAL
 * for any other text. */
KDEV_API int kdev_log_level_parse(const char *text, enum kdev_log_level *out);

/* Parses a --log-format value: "text" (|*json| = false) or "json" (true).
 * Returns 0, or -EINVAL for any other text (|*json| unchanged). */
KDEV_API int kdev_log_format_parse(const char *text, bool *json);

/* The command-line options every long-running kdev program takes, spelled
 * the same everywhere (kdev-plugin, kdev-dra-plugin, kdevctl kubelet):
 *   --log-level debug|info|warn|error   (default info)
 *   --log-format text|json              (default text)
 * Their accepted values, for usage texts and error messages: */
#define KDEV_LOG_LEVEL_VALUES "debug, info, warn or error"
#define KDEV_LOG_FORMAT_VALUES "text or json"

/* Sets the clock that stamps log lines: |now| fills a CLOCK_REALTIME-like
 * time and returns 0. NULL restores clock_gettime(CLOCK_REALTIME). For tests
 * that compare whole lines. */
KDEV_API void kdev_log_set_clock(int (*now)(struct timespec *ts));

/* True when |level| would be printed. */
KDEV_API bool kdev_log_enabled(enum kdev_log_level level);

/* Logs |msg| with key/value pairs given as a NULL-terminated list of
 * alternating const char* keys and values, e.g.
 *   kdev_log(KDEV_LOG_INFO, "registered", "resource", name, NULL);
 * writes one line to stderr with a single write (lines of concurrent writers
 * never interleave):
 *   text: ts=2026-11-29T11:00:00.123Z level=info msg="registered" resource=nvidia.com/gpu
 *   json: {"ts":"2026-11-29T11:00:00.123Z","level":"info","msg":"registered","resource":"nvidia.com/gpu"}
 * Pairs may also be typed (numbers, booleans, JSON; see "typed values"
 * below). At most 32 pairs are printed; more are read and dropped.
 * Timestamps are UTC with milliseconds. In text, msg is always a quoted
 * string; a value is written bare unless it is empty or contains a blank,
 * '"', '=', '\\' or a control character, in which case it is quoted with JSON
 * string escapes (\" \\ \n \t \r, \u00XX for other control characters). A
 * NULL value prints as "". Levels below the kdev_log_setup() minimum print
 * nothing. */
KDEV_API void kdev_log(enum kdev_log_level level, const char *msg, ...) __attribute__((sentinel));

/* --- typed values ------------------------------------------------------------
 *
 * A plain pair ("key", "text") is a string: in JSON it is written as a JSON
 * string. A pair written with one of these macros carries its type, so that
 * JSON lines hold numbers and booleans as JSON numbers and booleans:
 *
 *   kdev_log_info("NVIDIA GPUs found", KDEV_LOG_UINT("gpus", n), "driver", v);
 *     text: ... msg="NVIDIA GPUs found" gpus=8 driver=550.54.15
 *     json: {...,"msg":"NVIDIA GPUs found","gpus":8,"driver":"550.54.15"}
 *
 *   KDEV_LOG_INT(key, v)    signed integer (converted to long long), "%lld"
 *   KDEV_LOG_UINT(key, v)   unsigned integer (unsigned long long), "%llu"
 *   KDEV_LOG_BOOL(key, v)   boolean (any scalar, tested for != 0): true/false
 *   KDEV_LOG_NUM(key, text) a number the caller formatted ("4.250", "1e3"):
 *                           a JSON number when |text| is one by RFC 8259's
 *                           grammar, else (or NULL) a JSON string, so a line
 *                           is always valid JSON
 *   KDEV_LOG_JSON(key, text) a JSON text (an object, array, ...) inserted as
 *                           is in JSON lines when jansson parses it, else
 *                           written as a string; NULL is null. In text lines
 *                           it is a value like any other (quoted, escaped).
 *
 * |key| must be a string literal (the macro prefixes a type tag to it, which
 * is never printed). In text lines a typed value prints exactly as the plain
 * string of the same text would (gpus=8, enabled=true), so converting a
 * caller from a formatted string to a typed pair changes only its JSON. The
 * limiter (below) compares typed pairs by type and text. Tags are the byte
 * KDEV_LOG_TAG (0x01) and one letter; a key starting with that byte is
 * reserved. */
#define KDEV_LOG_TAG "\001"
#define KDEV_LOG_INT(key, v) KDEV_LOG_TAG "i" key, (long long)(v)
#define KDEV_LOG_UINT(key, v) KDEV_LOG_TAG "u" key, (unsigned long long)(v)
#define KDEV_LOG_BOOL(key, v) KDEV_LOG_TAG "b" key, (int)((v) ? 1 : 0)
#define KDEV_LOG_NUM(key, text) KDEV_LOG_TAG "n" key, (const char *)(text)
#define KDEV_LOG_JSON(key, text) KDEV_LOG_TAG "j" key, (const char *)(text)

/* --- repeated lines --------------------------------------------------------
 *
 * A limiter bounds the lines a flood of identical events writes (an XID storm,
 * a peer repeating a failing call). Events are identical when their level,
 * message and key/value pairs (keys and values, in order) are all equal, so
 * the caller puts what makes an event distinct (GPU, XID, outcome, claim,
 * error) into the pairs. Per distinct event:
 *   - the first is printed as kdev_log() prints it and opens a window of
 *     |window_ms| (the limiter's, e.g. KDEV_LOG_REPEAT_WINDOW_MS);
 *   - identical events inside the window are counted, not printed;
 *   - when the window ends and some were counted, one line is printed: the
 *     same level and pairs, the message followed by ", repeated <N> times in
 *     the last <T> s" (<T> the seconds since the window opened, "5" or with
 *     milliseconds "4.250"), and a last pair repeated=<N> (a number in JSON
 *     lines), e.g.
 *       level=info msg="GPU still unhealthy; quiet period restarted, repeated
 *       4211 times in the last 5 s" uuid=GPU-... xid=79 reason="critical XID
 *       79" repeated=4211
 *     and a new window opens at once (a storm lasting 10 s prints its first
 *     event and one line per window); a window that ends with nothing counted
 *     forgets the event (the next one is printed again).
 * Windows end when kdev_log_limiter_flush() runs past them (the owner calls it
 * from a timer, at the times it returns) or when the next identical event
 * comes. So at most 1 + (duration / window) lines per distinct event, and at
 * most KDEV_LOG_LIMITER_KEYS distinct events are tracked at once (beyond,
 * after expired windows made no room: each such event printed as it comes). Lines below the kdev_log_setup() minimum are neither
 * printed nor counted. Time is kdev_log_now_ms(). Thread-safe (one mutex per
 * limiter). */
#define KDEV_LOG_REPEAT_WINDOW_MS 5000
#define KDEV_LOG_LIMITER_KEYS 64

struct kdev_log_limiter;

/* A limiter with windows of |window_ms| (> 0). Returns NULL when out of
 * memory. */
KDEV_API struct kdev_log_limiter *kdev_log_limiter_new(uint64_t window_ms);

/* Prints the repeat lines still pending (the counted events of open windows,
 * so no count is lost at shutdown) and frees |l|. NULL-safe. */
KDEV_API void kdev_log_limiter_free(struct kdev_log_limiter *l);

/* Logs |count| (>= 1) identical events at once through |l| (NULL: prints one
 * line, like kdev_log()), pairs as for kdev_log(). Returns true when a line
 * for the event itself was printed, false when it was counted. */
KDEV_API bool kdev_log_limited(struct kdev_log_limiter *l, unsigned count,
                               enum kdev_log_level level, const char *msg,
                               ...) __attribute__((sentinel));

/* Ends the windows that are over (all of them when |all|), printing their
 * repeat lines. Returns the milliseconds until the next open window ends, or
 * 0 when no window is open. */
KDEV_API uint64_t kdev_log_limiter_flush(struct kdev_log_limiter *l, bool all);

/* Milliseconds of the clock the limiters measure windows with: the
 * kdev_log_set_clock() clock when one is set (tests), else CLOCK_MONOTONIC. */
KDEV_API uint64_t kdev_log_now_ms(void);

#define kdev_log_debug(...) do { if (kdev_log_enabled(KDEV_LOG_DEBUG)) kdev_log(KDEV_LOG_DEBUG, __VA_ARGS__, NULL); } while (0)
#define kdev_log_info(...)  do { if (kdev_log_enabled(KDEV_LOG_INFO)) kdev_log(KDEV_LOG_INFO, __VA_ARGS__, NULL); } while (0)
#define kdev_log_warn(...)  do { if (kdev_log_enabled(KDEV_LOG_WARN)) kdev_log(KDEV_LOG_WARN, __VA_ARGS__, NULL); } while (0)
#define kdev_log_error(...) do { if (kdev_log_enabled(KDEV_LOG_ERROR)) kdev_log(KDEV_LOG_ERROR, __VA_ARGS__, NULL); } while (0)

#endif /* KDEV_COMMON_LOG_H */
