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
#include <time.h>

enum kdev_log_level { KDEV_LOG_DEBUG = 0, KDEV_LOG_INFO, KDEV_LOG_WARN, KDEV_LOG_ERROR };

/* Sets the minimum level printed and the format (JSON lines when |json|).
 * Defaults before any call: info, text. */
void kdev_log_setup(enum kdev_log_level min, bool json);

/* Parses "debug", "info", "warn" or "error" into |out|. Returns 0, or -EINVAL
 * for any other text. */
int kdev_log_level_parse(const char *text, enum kdev_log_level *out);

/* Parses a --log-format value: "text" (|*json| = false) or "json" (true).
 * Returns 0, or -EINVAL for any other text (|*json| unchanged). */
int kdev_log_format_parse(const char *text, bool *json);

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
void kdev_log_set_clock(int (*now)(struct timespec *ts));

/* True when |level| would be printed. */
bool kdev_log_enabled(enum kdev_log_level level);

/* Logs |msg| with key/value pairs given as a NULL-terminated list of
 * alternating const char* keys and values, e.g.
 *   kdev_log(KDEV_LOG_INFO, "registered", "resource", name, NULL);
 * writes one line to stderr with a single write (lines of concurrent writers
 * never interleave):
 *   text: ts=2026-11-29T11:00:00.123Z level=info msg="registered" resource=nvidia.com/gpu
 *   json: {"ts":"2026-11-29T11:00:00.123Z","level":"info","msg":"registered","resource":"nvidia.com/gpu"}
 * Timestamps are UTC with milliseconds. In text, msg is always a quoted
 * string; a value is written bare unless it is empty or contains a blank,
 * '"', '=', '\\' or a control character, in which case it is quoted with JSON
 * string escapes (\" \\ \n \t \r, \u00XX for other control characters). A
 * NULL value prints as "". Levels below the kdev_log_setup() minimum print
 * nothing. */
void kdev_log(enum kdev_log_level level, const char *msg, ...) __attribute__((sentinel));

#define kdev_log_debug(...) do { if (kdev_log_enabled(KDEV_LOG_DEBUG)) kdev_log(KDEV_LOG_DEBUG, __VA_ARGS__, NULL); } while (0)
#define kdev_log_info(...)  do { if (kdev_log_enabled(KDEV_LOG_INFO)) kdev_log(KDEV_LOG_INFO, __VA_ARGS__, NULL); } while (0)
#define kdev_log_warn(...)  do { if (kdev_log_enabled(KDEV_LOG_WARN)) kdev_log(KDEV_LOG_WARN, __VA_ARGS__, NULL); } while (0)
#define kdev_log_error(...) do { if (kdev_log_enabled(KDEV_LOG_ERROR)) kdev_log(KDEV_LOG_ERROR, __VA_ARGS__, NULL); } while (0)

#endif /* KDEV_COMMON_LOG_H */
