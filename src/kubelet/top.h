/* kdevctl top's pieces (src/kubelet/cmd_top.c runs them): where
 * kdev-plugin's metrics are, one HTTP GET of them, and the usage view built
 * from the text: one row per GPU and MIG device with the containers holding
 * it and the unattributed use, as a table or as JSON.
 *
 * The view reads the families of src/metrics/usage_metrics.c: dcgm-exporter's
 * DCGM_FI_DEV_* (labels gpu, UUID, modelName, GPU_I_PROFILE, GPU_I_ID, and
 * namespace/pod/container when one container holds the device; UUID is the
 * GPU's, also for a MIG device), kdev_container_gpu_* and
 * kdev_gpu_unattributed_* (labels UUID, gpu: the MIG device's own UUID on a
 * MIG device), kdev_usage_last_sample_timestamp_seconds, and
 * kdev_gpu_devices (gpu = the GPU's UUID) for the GPUs when there is no
 * usage sample. The metrics name a MIG device by GPU_I_ID in the DCGM
 * series and by its MIG UUID in kdev's: a MIG UUID is joined to its
 * GPU_I_ID through the device's one holder (its namespace/pod/container
 * labels), else when one device left on its GPU has an FB_USED that holds
 * the memory its processes use (NVML's per-process sums; never a share
 * region's); one that cannot be joined gets a row of its own (GPU
 * instance unknown, "?"). Other series are ignored. */
#ifndef KDEV_KUBELET_TOP_H
#define KDEV_KUBELET_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"

/* Default address, the answer size cap, the whole request's deadline. */
#define KDEV_TOP_DEFAULT_ADDRESS "127.0.0.1:9400"
#define KDEV_TOP_MAX_ANSWER (16u * 1024 * 1024)
#define KDEV_TOP_TIMEOUT_MS 5000

/* Where the metrics are: host (an IPv4 address, an IPv6 address without
 * brackets or a name), port and path. |addr| is "HOST:PORT" as messages
 * show it ("[::1]:9400" for IPv6). */
struct kdev_top_target {
        char host[256];
        char port[8];
        char path[1024];
        char addr[272];
};

/* Parses --metrics-address "HOST:PORT" ("[V6]:PORT"; ":PORT" means
 * 127.0.0.1, as kdev-plugin's ":PORT" listens on every IPv4 address; PORT
 * 1..65535) into |*t| with path "/metrics". Returns 0 or -EINVAL with
 * |err| 'invalid --metrics-address "x" (want HOST:PORT, e.g.
 * 127.0.0.1:9400 or [::1]:9400)'. */
KDEV_API int kdev_top_parse_address(const char *text, struct kdev_top_target *t,
                                    struct kdev_err *err);

/* Parses --metrics-url "http://HOST:PORT[/PATH]" (HOST:PORT as
 * kdev_top_parse_address() reads it; PATH default "/", a query kept) into
 * |*t|. Returns 0 or -EINVAL with |err| 'invalid --metrics-url "x" (want
 * http://HOST:PORT/PATH, e.g. http://127.0.0.1:9400/metrics)'; https, a
 * missing port, a fragment or blanks are refused. */
KDEV_API int kdev_top_parse_url(const char *text, struct kdev_top_target *t,
                                struct kdev_err *err);

/* GET |t|'s path over HTTP/1.0 (Connection: close) within |timeout_ms|
 * for the whole exchange. On success returns 0 with |*body| a malloc'ed,
 * NUL-terminated copy of the body (the caller frees it) and |*len| its
 * length. Errors (negative errno, |err| set, |*body| NULL):
 * - no connection: "cannot reach kdev-plugin's metrics at ADDR: Connection
 *   refused (is kdev-plugin running with --metrics-address?)" (the errno's
 *   text; a name that does not resolve, getaddrinfo's);
 * - "kdev-plugin's metrics at ADDR: ..." then "no complete answer within
 *   5 s", "answer larger than 16 MiB", "empty answer", "not an HTTP
 *   answer", "answer truncated (N of M bytes)" (Content-Length), a chunked
 *   body refused; "kdev-plugin's metrics at ADDR answered \"HTTP/1.1 404
 *   Not Found\"" for any status but 200 (its status line);
 * - -EINTR "interrupted" when a signal interrupts a wait. */
KDEV_API int kdev_top_http_get(const struct kdev_top_target *t, int timeout_ms, char **body,
                               size_t *len, struct kdev_err *err);

/* The usage view of one metrics text. */
struct kdev_top;

/* Builds the view from |len| bytes of Prometheus text |text| (copied: the
 * text may go once this returns). Returns the view (kdev_top_free()), or
 * NULL with |err| set: the parser's "line N: ..." (kubelet/promtext.h) or
 * "out of memory". */
KDEV_API struct kdev_top *kdev_top_new(const char *text, size_t len, struct kdev_err *err);

/* Whether the text had a usage sample (kdev_usage_last_sample_timestamp_seconds);
 * when it had, |*when| (may be NULL) is its Unix time in seconds. */
KDEV_API bool kdev_top_sampled(const struct kdev_top *v, double *when);

/* Prints the table to |f|: the columns GPU GI NAME UTIL MEMORY-MIB REPLICAS
 * SHARE SM; a device row (GI "-" for a whole GPU; NAME its model, "MODEL MIG
 * PROFILE" for a MIG device; memory "USED / TOTAL" MiB), under it one row
 * per container ("  NAMESPACE/POD/CONTAINER", memory "USED / LIMIT" MiB with
 * "-" for no limit, replicas, compute share %, SM utilization %) and one
 * per unattributed reason ("  unattributed (REASON): N process(es)", its
 * memory in MiB); "-" where a value is unknown. Without a usage sample a
 * last line "no usage samples yet (is usage.interval set in kdev-plugin's
 * config?)". Control characters of label values print as '?'. Returns 0
 * or -ENOMEM. */
KDEV_API int kdev_top_print_table(const struct kdev_top *v, FILE *f);

/* The view as JSON (a new reference, NULL on allocation failure):
 * {"gpus": [{"gpu", "uuid", "migUuid", "model", "migProfile",
 * "gpuInstanceId", "utilizationPercent", "memoryUsedMiB", "memoryTotalMiB",
 * "containers": [{"namespace", "pod", "container", "replicas",
 * "memoryUsedBytes", "memoryLimitBytes", "computeSharePercent",
 * "smUtilizationPercent"}], "unattributed": [{"reason", "processes",
 * "memoryBytes"}]}], "lastSampleTimestamp"}; null where a value is
 * unknown or absent (no limit, whole GPU's migProfile), numbers as integers
 * where they are whole. */
KDEV_API json_t *kdev_top_json(const struct kdev_top *v);

/* Frees |v|. NULL-safe. */
KDEV_API void kdev_top_free(struct kdev_top *v);

#endif /* KDEV_KUBELET_TOP_H */
