/* kdev Kubernetes API server client (libcurl + jansson), for the DRA plugin.
 *
 * What it covers: the configuration a pod or a node agent gets (in-cluster
 * service account, or a kubeconfig file), plain REST requests with JSON
 * bodies (GET, LIST with field selectors and pagination, POST, PUT, DELETE,
 * DELETE collection), bounded retries with exponential backoff, an
 * update-with-retry helper for 409 Conflicts, and typed helpers for what a
 * DRA kubelet plugin needs from resource.k8s.io (ResourceSlices, ResourceClaims)
 * and core/v1 (Nodes). Paths and semantics follow the Kubernetes REST API
 * conventions (kubernetes.io "API Concepts"; k8s.io/api resource/v1/types.go
 * and core/v1/types.go); configuration follows client-go (rest.InClusterConfig,
 * clientcmd's kubeconfig rules).
 *
 * Blocking: every request runs on the calling thread with libcurl's easy
 * interface and blocks until it succeeds or its retries are spent: at most
 * attempts × (timeout_ms) plus the backoff sleeps (with the defaults ≈ 5 ×
 * 30 s + 0.2 + 0.4 + 0.8 + 1.6 s in the worst case). Run it off the event loop
 * (a worker thread, e.g. uv_queue_work). A struct kdev_kube is NOT
 * thread-safe: use one per thread. It keeps one connection alive between
 * requests.
 *
 * Shapes: the typed helpers (kdev_kube_*_slice*, kdev_kube_get_claim) take and
 * return resource.k8s.io objects in the v1 shape whatever version the client
 * speaks; with version "v1beta1" they convert on the wire (v1beta1 wraps a
 * device's fields except `name` in `basic`, and a claim request's `exactly`
 * fields sit directly in the request). kdev_kube_request() sends and returns
 * bodies as they are.
 *
 * Errors: negative errno, with |err| naming the method, the path, the HTTP
 * status and the API server's Status message, e.g.
 *   PUT /apis/resource.k8s.io/v1/resourceslices/s1: 409 Conflict: Operation
 *   cannot be fulfilled on resourceslices.resource.k8s.io "s1": the object has
 *   been modified; please apply your changes to the latest version and try again
 * (401 and 403 name the server URL instead of the path, like connection
 * errors) and " (after N attempts)" when retries were spent. Mapping:
 *   400 Bad Request, 422 Invalid -> -EINVAL     401 -> -EACCES   403 -> -EPERM
 *   404 -> -ENOENT    405 -> -EOPNOTSUPP        409 reason AlreadyExists -> -EEXIST
 *   409 (Conflict, failed precondition), 410 Gone -> -ESTALE
 *   429, 500, 502, 503, 504 once the retries are spent -> -EAGAIN
 *   other HTTP statuses, or a 2xx body that is not a JSON object -> -EPROTO
 *   connection refused -> -ECONNREFUSED, name resolution -> -EHOSTUNREACH,
 *   timeout -> -ETIMEDOUT, dropped connection -> -ECONNRESET,
 *   server certificate not trusted -> -EKEYREJECTED, other TLS errors -> -EPROTO,
 *   body larger than KDEV_KUBE_BODY_MAX -> -EFBIG, out of memory -> -ENOMEM,
 *   client aborted (kdev_kube_abort) or work cancelled (kdev_kube_cancel) ->
 *   -ECANCELED, the work's deadline already past -> -ETIMEDOUT.
 */
#ifndef KDEV_KUBE_KUBE_H
#define KDEV_KUBE_KUBE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"

/* Service account directory of a pod (client-go rest.InClusterConfig). */
#define KDEV_KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* Largest response body accepted (bytes). */
#define KDEV_KUBE_BODY_MAX (64 * 1024 * 1024)

/* Largest files read (bytes); past them the read fails with "PATH: the
 * <kind> is larger than <max> bytes" (-EFBIG). */
#define KDEV_KUBE_KUBECONFIG_MAX (1024 * 1024)   /* kind "kubeconfig" */
#define KDEV_KUBE_PEM_FILE_MAX (1024 * 1024)     /* "CA file", "client certificate file",
                                                  * "client key file" */
#define KDEV_KUBE_TOKEN_FILE_MAX (64 * 1024)     /* "token file" (also when re-read) */
#define KDEV_KUBE_NAMESPACE_FILE_MAX 4096        /* "namespace file" */

/* Page size of kdev_kube_list_slices() (LIST ?limit=). */
#define KDEV_KUBE_LIST_LIMIT 500

/* Where and how to reach the API server. All fields are owned by the struct
 * (kdev_kube_config_free releases them). PEM buffers are NUL-terminated; the
 * lengths exclude the NUL. */
struct kdev_kube_config {
        char *server;       /* base URL without trailing '/', "https://10.0.0.1:443" */
        char *token;        /* bearer token, or NULL */
        char *token_file;   /* file the token came from (re-read periodically), or NULL */
        char *ca_pem;       /* CA bundle to trust, or NULL: the system's CAs */
        size_t ca_len;
        char *cert_pem;     /* client certificate (PEM), or NULL */
        size_t cert_len;
        char *key_pem;      /* client key (PEM), or NULL */
        size_t key_len;
        bool insecure;      /* insecure-skip-tls-verify: no server certificate check */
        char *namespace;    /* the pod's or the context's namespace, or NULL */
        char *context;      /* the kubeconfig context used, or NULL (in-cluster) */
};

/* In-cluster configuration (client-go rest.InClusterConfig): server
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6 addresses
 * bracketed), bearer token from <sa_dir>/token (whitespace trimmed; re-read by
 * the client, see token_reload_ms), CA from <sa_dir>/ca.crt, namespace from
 * <sa_dir>/namespace when present. |sa_dir| NULL means KDEV_KUBE_SA_DIR.
 * Fills *cfg (zeroed first; free with kdev_kube_config_free, also on error).
 * Errors: -ENOENT when either variable is unset ("not running in a cluster:
 * KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined") or the
 * token or CA file cannot be read (unlike client-go, a missing ca.crt is an
 * error, not a fall-back to the system CAs); -EINVAL for an empty token or
 * one with control characters; -ENOMEM. */
KDEV_API int kdev_kube_config_in_cluster(struct kdev_kube_config *cfg, const char *sa_dir,
                                         struct kdev_err *err);

/* Reads the kubeconfig file |path| (YAML, at most 1 MiB) and resolves
 * |context| (NULL: the file's current-context) to cluster and user, like
 * clientcmd: cluster `server` (required), `certificate-authority-data`
 * (base64 PEM) or `certificate-authority` (file; the -data form wins),
 * `insecure-skip-tls-verify`; user `token` or `tokenFile` (token wins),
 * `client-certificate-data`/`client-certificate` and
 * `client-key-data`/`client-key` (both or neither); context `namespace`.
 * Relative file names are relative to the kubeconfig's directory. Unknown keys
 * are ignored. Fills *cfg (zeroed first; free with kdev_kube_config_free, also
 * on error). Errors: -ENOENT unreadable file (or a file it names), no
 * current-context, or a context/cluster/user that is not in the file;
 * -EINVAL YAML errors (with line:column), wrong node kinds, bad base64, a
 * server that is not http(s)://, a certificate without its key;
 * -ENOTSUP users with `exec`, `auth-provider`, `username`/`password`;
 * -EFBIG; -ENOMEM. Messages start with |path|. */
KDEV_API int kdev_kube_config_kubeconfig(struct kdev_kube_config *cfg, const char *path,
                                         const char *context, struct kdev_err *err);

/* The same from text in memory: |text| (|len| bytes) named |display| in
 * messages; relative file names resolve against |base_dir| (NULL: the current
 * directory). */
KDEV_API int kdev_kube_config_parse(struct kdev_kube_config *cfg, const char *text, size_t len,
                                    const char *display, const char *base_dir, const char *context,
                                    struct kdev_err *err);

/* kdev-plugin's rule: |kubeconfig| non-NULL -> that file (current context),
 * NULL -> in-cluster from KDEV_KUBE_SA_DIR. */
KDEV_API int kdev_kube_config_load(struct kdev_kube_config *cfg, const char *kubeconfig,
                                   struct kdev_err *err);

/* Releases everything *cfg owns and zeroes it. NULL is fine. */
KDEV_API void kdev_kube_config_free(struct kdev_kube_config *cfg);

/* Decodes standard base64 (RFC 4648 §4, '=' padding optional, ASCII
 * whitespace ignored) into a malloc'ed, NUL-terminated buffer (*out, caller
 * frees; *out_len excludes the NUL). Errors: -EINVAL (bad character or
 * length), -ENOMEM. */
KDEV_API int kdev_kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len);

/* Client options; zero fields take the default given. */
struct kdev_kube_opts {
        const char *version;         /* resource.k8s.io version: "v1" (NULL) or "v1beta1" */
        unsigned attempts;           /* tries per request, first included: 5 */
        unsigned backoff_ms;         /* sleep before the 2nd try, doubled each time: 200 */
        unsigned backoff_max_ms;     /* cap of one sleep: 5000 */
        unsigned timeout_ms;         /* per try, whole transfer: 30000 */
        unsigned connect_timeout_ms; /* per try: 10000 */
        unsigned conflict_retries;   /* kdev_kube_update_retry re-reads after 409: 5 */
        unsigned token_reload_ms;    /* re-read config token_file at most this often: 60000 */
        const char *user_agent;      /* "kdev/" KDEV_VERSION */
};

struct kdev_kube;

/* Cancellation of one piece of work's requests, whatever client they use
 * (e.g. the claim reads of one NodePrepareResources call). Bind it to the
 * calling thread with kdev_kube_cancel_scope(); every request that thread
 * then makes:
 *   - fails at once with -ECANCELED "<METHOD> <path>: cancelled" once
 *     kdev_kube_cancel_fire() was called (from any thread); a transfer in
 *     progress stops within about a second, a backoff sleep within 50 ms;
 *   - with a deadline, fails with -ETIMEDOUT "<METHOD> <path>: deadline
 *     exceeded" when it is already past; a try's timeout_ms is cut to the
 *     time left, and a retry whose backoff would end past the deadline is
 *     not made: the last try's error is returned with " (stopped by the
 *     deadline)" or " (after N attempts, stopped by the deadline)" appended.
 * Unlike kdev_kube_abort() the client stays usable. Like gRPC deadlines
 * (grpc.io "Deadlines"), the deadline bounds the whole call, retries
 * included. */
struct kdev_kube_cancel {
        atomic_bool cancelled;
        uint64_t deadline_ms; /* kdev_kube_now_ms() base; 0: none */
};

/* Monotonic clock (CLOCK_MONOTONIC) in milliseconds. */
KDEV_API uint64_t kdev_kube_now_ms(void);

/* Initialises *c: not cancelled, deadline |deadline_ms| (kdev_kube_now_ms()
 * base; 0: none). */
KDEV_API void kdev_kube_cancel_init(struct kdev_kube_cancel *c, uint64_t deadline_ms);

/* Cancels |c| (any thread; idempotent). */
KDEV_API void kdev_kube_cancel_fire(struct kdev_kube_cancel *c);

/* Whether |c| is cancelled or its deadline has passed. NULL: false. */
KDEV_API bool kdev_kube_cancel_done(const struct kdev_kube_cancel *c);

/* Binds |c| (NULL: none) to the calling thread for the requests it makes
 * from now on and returns the previous binding (restore it when done). |c|
 * must outlive the binding. */
KDEV_API const struct kdev_kube_cancel *kdev_kube_cancel_scope(const struct kdev_kube_cancel *c);

/* Aborts |k| from any thread (the one call on a client that is
 * thread-safe): the request running on another thread stops within about a
 * second (libcurl's progress callback; a backoff sleep within 50 ms) and
 * fails, as does every later request, with -ECANCELED "<METHOD> <path>:
 * cancelled". There is no undo: free the client afterwards. NULL is fine. */
KDEV_API void kdev_kube_abort(struct kdev_kube *k);

/* Creates a client for |cfg| (copied; the caller keeps ownership of cfg) and
 * |opts| (NULL: defaults). The first client of the process loads libcurl
 * (dlopen("libcurl.so.4") and curl_global_init, once, thread-safe): a process
 * that creates none never maps it. Returns NULL with |err| set on failure
 * (-EINVAL no server or an unknown version; -ENOENT "cannot load
 * libcurl.so.4: <dlerror>", -ENOSYS "libcurl.so.4 has no <symbol>: ...", -EIO
 * curl_global_init, for this and every later client; -ENOMEM, curl_easy_init).
 * Free with kdev_kube_free. */
KDEV_API struct kdev_kube *kdev_kube_new(const struct kdev_kube_config *cfg,
                                         const struct kdev_kube_opts *opts, struct kdev_err *err);

/* Closes the connection and frees |k|. NULL is fine. */
KDEV_API void kdev_kube_free(struct kdev_kube *k);

/* Releases libcurl's global state (curl_global_cleanup) when a client has
 * loaded libcurl; nothing otherwise. For the end of a process (leak checkers):
 * every client must be freed first, and none created afterwards. */
KDEV_API void kdev_kube_global_cleanup(void);

/* "v1" or "v1beta1", and "resource.k8s.io/<version>". */
KDEV_API const char *kdev_kube_version(const struct kdev_kube *k);
KDEV_API const char *kdev_kube_api_version(const struct kdev_kube *k);

/* HTTP status of the last response received by the last request (0: none,
 * e.g. connection refused), and how many tries that request took. */
KDEV_API long kdev_kube_last_status(const struct kdev_kube *k);
KDEV_API unsigned kdev_kube_last_attempts(const struct kdev_kube *k);

/* Delay before try |attempt| + 1 after try |attempt| (1-based) failed:
 * min(backoff_ms << (attempt-1), backoff_max_ms); a Retry-After of
 * |retry_after_s| > 0 seconds raises it, still capped at backoff_max_ms.
 * Milliseconds. */
KDEV_API unsigned kdev_kube_backoff_ms(const struct kdev_kube *k, unsigned attempt,
                                       long retry_after_s);

/* Sends |method| ("GET", "POST", "PUT", "DELETE") to |path| (starting with
 * '/', query included) with |body| (NULL: none; serialised compactly as
 * application/json) and, on 2xx, stores the parsed response object in *out
 * (new reference, caller json_decref's; NULL |out|: discarded). Retries with
 * backoff on connection errors and 429/500/502/503/504, for every method
 * (a retried POST with generateName may thus create twice if the first
 * answer was lost: reconcile by listing). Returns 0 or a negative errno (see
 * the table above). */
KDEV_API int kdev_kube_request(struct kdev_kube *k, const char *method, const char *path,
                               const json_t *body, json_t **out, struct kdev_err *err);

/* Mutation callback of kdev_kube_update_retry: changes |obj| (the object just
 * read) in place. Returns 0 to write it, KDEV_KUBE_UNCHANGED to write
 * nothing, or a negative errno (with |err| set) to stop. */
#define KDEV_KUBE_UNCHANGED 1
typedef int (*kdev_kube_mutate_fn)(json_t *obj, void *arg, struct kdev_err *err);

/* Read-modify-write of the object at |path|: GET, |fn|, PUT (the object keeps
 * the resourceVersion it was read with); on 409 Conflict re-reads and calls
 * |fn| again, at most conflict_retries times more (client-go
 * retry.RetryOnConflict). *out (optional) receives the object written, or the
 * one read when |fn| returned KDEV_KUBE_UNCHANGED. Raw shapes (no conversion).
 * Returns 0, |fn|'s error, or the request's error (-ESTALE when conflicts
 * persist). */
KDEV_API int kdev_kube_update_retry(struct kdev_kube *k, const char *path, kdev_kube_mutate_fn fn,
                                    void *arg, json_t **out, struct kdev_err *err);

/* Builds a request path into |buf| (|size| bytes): resource "nodes" ->
 * /api/v1/nodes[/name]; any other -> /apis/resource.k8s.io/<version>/
 * [namespaces/<ns>/]<resource>[/<name>[/<sub>]]. |ns|, |name|, |sub| may be
 * NULL. Names must be DNS subdomains (lower-case letters, digits, '-', '.',
 * at most 253). Returns the length, -EINVAL (bad name, with |err|) or
 * -ENAMETOOLONG. */
KDEV_API int kdev_kube_path(const struct kdev_kube *k, char *buf, size_t size, const char *ns,
                            const char *resource, const char *name, const char *sub,
                            struct kdev_err *err);

/* ResourceSlice collection path with fieldSelector
 * spec.nodeName=<node>,spec.driver=<driver> (either may be NULL to leave it
 * out), URL-encoded. Returns the length or a negative errno. */
KDEV_API int kdev_kube_slices_path(const struct kdev_kube *k, char *buf, size_t size,
                                   const char *node, const char *driver, struct kdev_err *err);

/* v1 <-> wire shape of a ResourceSlice / ResourceClaim in place (no-ops for a
 * v1 client except apiVersion and kind, which are always set). */
KDEV_API int kdev_kube_slice_to_wire(const struct kdev_kube *k, json_t *slice);
KDEV_API int kdev_kube_slice_from_wire(const struct kdev_kube *k, json_t *slice);
KDEV_API int kdev_kube_claim_from_wire(const struct kdev_kube *k, json_t *claim);

/* One event of a watch stream: |event| is the WatchEvent object
 * ({"type": "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR",
 * "object": ...}; apimachinery pkg/apis/meta/v1 WatchEvent), borrowed for
 * the call. Return 0 to read on, non-zero to end the watch. */
typedef int (*kdev_kube_watch_fn)(void *arg, const json_t *event);

/* Watches: GET |path| (the caller's query: watch=1, resourceVersion,
 * timeoutSeconds=|timeout_s|, fieldSelector), handing each newline-ended JSON
 * event of the streamed answer to |fn| as it arrives (Kubernetes "API
 * Concepts", efficient detection of changes). One try, no retries: the
 * caller re-lists and watches again. The transfer may last |timeout_s| + 30
 * seconds. Returns 0 when the server ended the stream or |fn| ended the
 * watch; -ECANCELED after kdev_kube_abort() (within about a second) or a
 * cancelled scope; the request's errors as kdev_kube_request() (an HTTP error
 * status with the Status message); -EPROTO "GET <path>: 200: a watch event is
 * not a JSON object". */
KDEV_API int kdev_kube_watch(struct kdev_kube *k, const char *path, unsigned timeout_s,
                             kdev_kube_watch_fn fn, void *arg, struct kdev_err *err);

/* GET /api/v1/nodes/<name> into *node (new reference). */
KDEV_API int kdev_kube_get_node(struct kdev_kube *k, const char *name, json_t **node,
                                struct kdev_err *err);

/* Owner reference for |node| (a Node object): {"apiVersion":"v1","kind":"Node",
 * "name":…,"uid":…,"controller":true} (new reference), or NULL when |node|
 * lacks metadata.name or metadata.uid. */
KDEV_API json_t *kdev_kube_node_owner_ref(const json_t *node);

/* GET the ResourceClaim <ns>/<name> into *claim (new reference, v1 shape). */
KDEV_API int kdev_kube_get_claim(struct kdev_kube *k, const char *ns, const char *name,
                                 json_t **claim, struct kdev_err *err);

/* LISTs the ResourceSlices matching spec.nodeName=<node> and
 * spec.driver=<driver> (either NULL: not filtered), following `continue`
 * pages of KDEV_KUBE_LIST_LIMIT. *items receives a JSON array (new
 * reference) of v1-shaped slices with apiVersion and kind set, so each can be
 * PUT back. Returns the number of slices. A 404 means the API server does
 * not serve the client's resource.k8s.io version: -EPROTONOSUPPORT "the API
 * server does not serve resource.k8s.io/v1 (GET <path>: 404 Not Found); run
 * with --resource-api-version v1beta1 (Kubernetes < 1.34)" (for v1beta1: "run
 * with --resource-api-version v1"). */
KDEV_API int kdev_kube_list_slices(struct kdev_kube *k, const char *node, const char *driver,
                                   json_t **items, struct kdev_err *err);

/* POSTs |slice| (v1 shape; metadata.name or metadata.generateName set;
 * apiVersion and kind are filled in on a copy). *out (optional) receives the
 * created slice, v1 shape, with its name, uid and resourceVersion. */
KDEV_API int kdev_kube_create_slice(struct kdev_kube *k, const json_t *slice, json_t **out,
                                    struct kdev_err *err);

/* PUTs |slice| (v1 shape) to its metadata.name; metadata.resourceVersion must
 * be set (-EINVAL otherwise): a stale one is -ESTALE (409). *out optional. */
KDEV_API int kdev_kube_update_slice(struct kdev_kube *k, const json_t *slice, json_t **out,
                                    struct kdev_err *err);

/* DELETEs the slice |name|; |uid| and |resource_version| (each may be NULL)
 * are sent as DeleteOptions preconditions (409 -> -ESTALE on mismatch). */
KDEV_API int kdev_kube_delete_slice(struct kdev_kube *k, const char *name, const char *uid,
                                    const char *resource_version, struct kdev_err *err);

/* DELETE collection of the slices matching spec.nodeName=<node> and
 * spec.driver=<driver> (at least one non-NULL). Returns how many the server
 * reports deleted. */
KDEV_API int kdev_kube_delete_slices(struct kdev_kube *k, const char *node, const char *driver,
                                     struct kdev_err *err);

#endif /* KDEV_KUBE_KUBE_H */
