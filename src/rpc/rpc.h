/* kdev rpc: the subset of gRPC that kubelet's device APIs use, over HTTP/2
 * (nghttp2) on Unix sockets, driven by one libuv loop. Unary and
 * server-streaming methods, server and client. This is the only module that
 * includes nghttp2 headers.
 *
 * Follows the gRPC over HTTP/2 protocol (grpc/grpc doc/PROTOCOL-HTTP2.md):
 * 5-byte length-prefixed messages, `grpc-timeout` deadlines, `grpc-status` and
 * percent-encoded `grpc-message` trailers, trailers-only error responses.
 *
 * Threading: every function must be called on the loop thread, except where
 * noted. Callbacks run on the loop thread.
 *
 * Ownership: message bytes passed in are copied; message bytes handed to
 * callbacks are valid only during the callback.
 *
 * Signals: libuv writes to sockets with write(2), so a peer that went away
 * raises SIGPIPE. Processes using this module must ignore SIGPIPE
 * (signal(SIGPIPE, SIG_IGN)), as libuv itself requires.
 */
#ifndef KDEV_RPC_RPC_H
#define KDEV_RPC_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"

struct ProtobufCMessage;

/* gRPC status codes (grpc/grpc doc/statuscodes.md). */
enum kdev_rpc_status {
        KDEV_RPC_OK = 0,
        KDEV_RPC_CANCELLED = 1,
        KDEV_RPC_UNKNOWN = 2,
        KDEV_RPC_INVALID_ARGUMENT = 3,
        KDEV_RPC_DEADLINE_EXCEEDED = 4,
        KDEV_RPC_NOT_FOUND = 5,
        KDEV_RPC_ALREADY_EXISTS = 6,
        KDEV_RPC_PERMISSION_DENIED = 7,
        KDEV_RPC_RESOURCE_EXHAUSTED = 8,
        KDEV_RPC_FAILED_PRECONDITION = 9,
        KDEV_RPC_ABORTED = 10,
        KDEV_RPC_OUT_OF_RANGE = 11,
        KDEV_RPC_UNIMPLEMENTED = 12,
        KDEV_RPC_INTERNAL = 13,
        KDEV_RPC_UNAVAILABLE = 14,
        KDEV_RPC_DATA_LOSS = 15,
        KDEV_RPC_UNAUTHENTICATED = 16,
};

/* Default maximum message size in bytes, each direction (gRPC's default
 * receive limit, which kubelet keeps). */
#define KDEV_RPC_DEFAULT_MAX_MESSAGE (4u * 1024u * 1024u)

/* Returns the canonical upper-case name of |status| ("DEADLINE_EXCEEDED"),
 * or "UNKNOWN" for values outside 0..16. Static storage. */
KDEV_API const char *kdev_rpc_status_name(int status);

/* Writes grpc-go's name of |status| (codes.Code.String(): "OK", "Canceled",
 * "NotFound", "DeadlineExceeded", ...; "Code(N)" outside 0..16) into |buf|
 * (|size| bytes), as grpc-go's errors print it ("rpc error: code = <name>
 * desc = ..."). Derived from kdev_rpc_status_name(). Returns |buf|. */
KDEV_API const char *kdev_rpc_code_name(int status, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

struct kdev_rpc_server;
struct kdev_rpc_call; /* one server-side call (HTTP/2 stream) */

/* Called once per incoming call with the complete request message
 * (|req|, |req_len| bytes, valid only during the callback). The handler must
 * eventually answer with kdev_rpc_call_reply() (unary) or with
 * kdev_rpc_call_send()* and kdev_rpc_call_finish() (streaming), or
 * kdev_rpc_call_finish() with an error status — now or later. The call stays
 * valid until it is finished or its on_cancel callback has returned. */
typedef void (*kdev_rpc_handler_fn)(struct kdev_rpc_call *call, const uint8_t *req, size_t req_len,
                                    void *user_data);

/* Called when the call ends without the handler finishing it: client
 * cancellation (RST_STREAM), deadline expiry, connection loss or server
 * close. After it returns the call is freed; the handler must drop its
 * pointer. */
typedef void (*kdev_rpc_cancel_fn)(struct kdev_rpc_call *call, void *user_data);

/* Streams a client may have open at once on one connection: advertised in
 * SETTINGS_MAX_CONCURRENT_STREAMS. A stream opened beyond it before the
 * client acknowledged the SETTINGS is refused (RST_STREAM REFUSED_STREAM,
 * which gRPC clients retry); after the acknowledgement it is a connection
 * error PROTOCOL_ERROR (RFC 9113 section 5.1.2; nghttp2's behaviour). */
#define KDEV_RPC_MAX_CONCURRENT_STREAMS 100u

/* Default cap on connections a server holds at once. */
#define KDEV_RPC_DEFAULT_MAX_CONNECTIONS 256u

/* Default budgets of request-message bytes a server holds while requests
 * arrive: per connection and for the whole server. */
#define KDEV_RPC_DEFAULT_CONN_RECV_BUDGET (16u * 1024u * 1024u)
#define KDEV_RPC_DEFAULT_SERVER_RECV_BUDGET (64u * 1024u * 1024u)

/* Default share of the server budget kept for the priority connection
 * (kdev_rpc_server_set_priority_connection(): kubelet's): other connections
 * together use at most the server budget minus this while one is set. */
#define KDEV_RPC_DEFAULT_PRIORITY_SHARE (16u * 1024u * 1024u)

/* Default stall timeout of a request still arriving, in milliseconds: a call
 * whose request makes no progress for this long is ended and its budget
 * released. Progress: its header block completes, or another 1 KiB of its
 * message arrives (a trickle of single bytes does not count). */
#define KDEV_RPC_DEFAULT_RECV_STALL_MS 5000u

struct kdev_rpc_server_options {
        size_t max_recv_message; /* bytes; 0 = KDEV_RPC_DEFAULT_MAX_MESSAGE */
        size_t max_send_message; /* bytes; 0 = KDEV_RPC_DEFAULT_MAX_MESSAGE */
        /* Connections held at once; one accepted beyond it is sent GOAWAY
         * ENHANCE_YOUR_CALM ("too many connections") and closed at once.
         * 0 = KDEV_RPC_DEFAULT_MAX_CONNECTIONS. */
        size_t max_connections;
        /* Request-message bytes buffered at once, per connection and per
         * server. What counts is the buffer each arriving request holds: it
         * grows with the bytes received (the smallest power of two, at least
         * 1 KiB, that holds them, never past the declared length), so a 5-byte prefix declaring 4 MiB costs
         * nothing until the bytes come. A request whose buffer cannot grow
         * within either budget is answered RESOURCE_EXHAUSTED at once
         * (trailers-only, the rest of its body discarded, its bytes
         * released); its connection and other calls go on.
         * 0 = KDEV_RPC_DEFAULT_CONN_RECV_BUDGET /
         * KDEV_RPC_DEFAULT_SERVER_RECV_BUDGET. */
        size_t conn_recv_budget;
        size_t server_recv_budget;
        /* Bytes of server_recv_budget that only the priority connection may
         * use, while one is set (0 = KDEV_RPC_DEFAULT_PRIORITY_SHARE; capped
         * at server_recv_budget). */
        size_t priority_share;
        /* Stall timeout of a request still arriving, milliseconds (0 =
         * KDEV_RPC_DEFAULT_RECV_STALL_MS). A stalled call is answered
         * trailers-only CANCELLED "request stalled: no request data for N
         * ms" and its stream reset (RST_STREAM NO_ERROR; a stream whose
         * header block stalls halfway holds the whole connection, which is
         * then sent GOAWAY and closed). The first stall on a connection is
         * logged (warn, with the connection id), later ones on it are not.
         * Checked every quarter of the timeout, so a stall is acted on
         * between 1 and 1.25 timeouts after the last progress; time the
         * server's loop was blocked (the check ran late, e.g. a handler
         * waiting on a slow disk) does not count towards a stall. */
        uint64_t recv_stall_ms;
};

/* Creates a server on |loop| with |opts| (NULL = defaults). Returns NULL only
 * on allocation failure. Free with kdev_rpc_server_close().
 *
 * Memory held for requests is bounded by the options above: buffers grow as
 * message bytes arrive (a declared length is never allocated up front, nor
 * reserved) and are returned to the system when the request completes,
 * fails or stalls. The stall check runs on a timer that does not keep
 * |loop| alive (uv_unref). */
KDEV_API struct kdev_rpc_server *kdev_rpc_server_new(uv_loop_t *loop,
                                                     const struct kdev_rpc_server_options *opts);

/* Registers |handler| for the full method |path| ("/v1beta1.DevicePlugin/
 * Allocate"); |path| is copied. |server_streaming| marks a server-streaming
 * method. Unknown paths are answered UNIMPLEMENTED. Returns 0 or -ENOMEM. */
KDEV_API int kdev_rpc_server_add_method(struct kdev_rpc_server *srv, const char *path,
                                        bool server_streaming, kdev_rpc_handler_fn handler,
                                        void *user_data);

/* Mode of every socket file kdev_rpc_server_listen_unix() creates: owner read
 * and write only (kubelet, which connects, runs as root). */
#define KDEV_RPC_SOCKET_MODE 0600

/* Binds and listens on the Unix socket |path| (an existing file at |path| is
 * NOT removed: the caller owns that decision). The socket file gets mode
 * KDEV_RPC_SOCKET_MODE (0600) with chmod(2) after bind and before listen,
 * whatever the process umask. Returns 0, or a negative errno with |err|
 * filled: -ENAMETOOLONG when |path| does not fit sun_path, -EADDRINUSE,
 * -EACCES, ...; a failed chmod removes the file again ("listen unix:PATH:
 * chmod 0600: ..."). */
KDEV_API int kdev_rpc_server_listen_unix(struct kdev_rpc_server *srv, const char *path,
                                         struct kdev_err *err);

/* Stops accepting, sends GOAWAY to every connection, cancels every open call
 * (their on_cancel callbacks run), closes all handles, and frees the server
 * once libuv has released them; |done| (may be NULL) is called then. Frames
 * already queued for a connection (GOAWAY last) are written before it
 * closes, waiting up to 1 s for a peer that does not read. The socket file
 * is not unlinked. Safe with NULL |srv|. */
KDEV_API void kdev_rpc_server_close(struct kdev_rpc_server *srv, void (*done)(void *arg),
                                    void *arg);

/* Makes connection |conn_id| (kdev_rpc_call_connection(); 0 = none) the
 * priority connection: it may use the whole server budget, the others
 * together all but priority_share bytes of it. Meant for kubelet's
 * connection, once a caller has identified it (the device plugin: the
 * connection that opened kubelet's ListAndWatch after Register). Requests
 * already buffered are kept; the limit applies to new growth. A connection
 * that closes stops being the priority one. */
KDEV_API void kdev_rpc_server_set_priority_connection(struct kdev_rpc_server *srv,
                                                      uint64_t conn_id);

/* Number of calls currently open (for tests and metrics): every HTTP/2
 * stream the server still tracks, including finished calls whose response is
 * still being written. */
KDEV_API size_t kdev_rpc_server_open_calls(const struct kdev_rpc_server *srv);

/* Sets the cancel callback of |call| (see kdev_rpc_cancel_fn). */
KDEV_API void kdev_rpc_call_on_cancel(struct kdev_rpc_call *call, kdev_rpc_cancel_fn fn,
                                      void *user_data);

/* Unary answer: sends |msg| (|len| bytes, copied) then status OK, and ends the
 * call (it is freed). Returns 0 or a negative errno (the call is then ended
 * with INTERNAL). A message over max_send_message ends the call with
 * RESOURCE_EXHAUSTED and returns -EMSGSIZE. -ECANCELED when the call has
 * already ended (e.g. called from its on_cancel): nothing happens. */
KDEV_API int kdev_rpc_call_reply(struct kdev_rpc_call *call, const uint8_t *msg, size_t len);

/* Same as kdev_rpc_call_reply() for a protobuf-c message (packed here). */
KDEV_API int kdev_rpc_call_reply_pb(struct kdev_rpc_call *call, const struct ProtobufCMessage *msg);

/* Streaming: queues |msg| (|len| bytes, copied) on the call. Backpressure
 * coalesces: while the peer is not reading, at most one message waits, and a
 * newer message replaces the one waiting (the stream carries the latest
 * state). Returns 0, -EMSGSIZE (message over the limit: nothing sent),
 * -ENOMEM, or -ECANCELED (the call already ended). While the peer keeps up
 * (flow-control windows open, little queued for the socket) every message is
 * sent. */
KDEV_API int kdev_rpc_call_send(struct kdev_rpc_call *call, const uint8_t *msg, size_t len);

/* Same as kdev_rpc_call_send() for a protobuf-c message. */
KDEV_API int kdev_rpc_call_send_pb(struct kdev_rpc_call *call, const struct ProtobufCMessage *msg);

/* Ends the call with |status| and |message| (may be NULL; sent
 * percent-encoded in grpc-message). If nothing was sent yet this is a
 * trailers-only response. The call is freed; on_cancel does not run. */
KDEV_API void kdev_rpc_call_finish(struct kdev_rpc_call *call, int status, const char *message);

/* Request deadline in loop milliseconds (uv_now() base) from grpc-timeout,
 * or 0 when the client set none. When the deadline passes the server ends the
 * call with DEADLINE_EXCEEDED and runs on_cancel. */
KDEV_API uint64_t kdev_rpc_call_deadline(const struct kdev_rpc_call *call);

/* Identifies the connection |call| arrived on: a serial number unique within
 * its server, starting at 1 (0 for NULL). Calls on one HTTP/2 connection share
 * it, so a peer's calls can be told apart from another client's. */
KDEV_API uint64_t kdev_rpc_call_connection(const struct kdev_rpc_call *call);

/* The method path of |call| (static for the call's lifetime). */
KDEV_API const char *kdev_rpc_call_method(const struct kdev_rpc_call *call);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

struct kdev_rpc_client;
struct kdev_rpc_client_call;

/* One response message of a call (|msg|, |len| valid during the callback). */
typedef void (*kdev_rpc_message_fn)(struct kdev_rpc_client_call *call, const uint8_t *msg,
                                    size_t len, void *user_data);

/* The call ended with |status| and |message| (never NULL, may be empty).
 * Runs exactly once per started call, also on connection failure
 * (UNAVAILABLE; a peer that hung up, however the kernel reports it — EOF,
 * ECONNRESET or EPIPE — is "connection to unix:PATH closed by the peer"),
 * deadline (DEADLINE_EXCEEDED), cancel (CANCELLED), or an
 * oversized response (RESOURCE_EXHAUSTED). The call is freed after it
 * returns. */
typedef void (*kdev_rpc_done_fn)(struct kdev_rpc_client_call *call, int status,
                                 const char *message, void *user_data);

struct kdev_rpc_client_options {
        size_t max_recv_message; /* bytes; 0 = KDEV_RPC_DEFAULT_MAX_MESSAGE */
        size_t max_send_message; /* bytes; 0 = KDEV_RPC_DEFAULT_MAX_MESSAGE */
};

/* Creates a client for the Unix socket |path| (copied). Connects lazily on
 * the first call; a lost connection is re-dialled by the next call. Returns
 * NULL on allocation failure. */
KDEV_API struct kdev_rpc_client *kdev_rpc_client_new(uv_loop_t *loop, const char *path,
                                                     const struct kdev_rpc_client_options *opts);

/* Starts a call of |method| with request |req| (|len| bytes, copied).
 * |timeout_ms| > 0 sends grpc-timeout and enforces it locally; 0 = none.
 * |on_message| (may be NULL) runs for every response message; |on_done| runs
 * once at the end. Returns the call handle (valid until on_done returns), or
 * NULL with |err| filled (then no callback runs): -EINVAL, -ENOMEM,
 * -ESHUTDOWN (client closing). on_done never runs inside this function: a
 * request over max_send_message (RESOURCE_EXHAUSTED) or a path too long for
 * sun_path (UNAVAILABLE) are reported from the loop. */
KDEV_API struct kdev_rpc_client_call *
kdev_rpc_client_call(struct kdev_rpc_client *cl, const char *method, const uint8_t *req, size_t len,
                     uint64_t timeout_ms, kdev_rpc_message_fn on_message, kdev_rpc_done_fn on_done,
                     void *user_data, struct kdev_err *err);

/* Same as kdev_rpc_client_call() for a unary method: the call must end with
 * exactly one response message. Status OK with no message ends it INTERNAL
 * "unary call returned no message"; a second message ends it at once
 * INTERNAL "unary call received more than one response message" (the
 * stream is reset). Both as grpc-go's unary client (a cardinality
 * violation, grpc/grpc doc/statuscodes.md). */
KDEV_API struct kdev_rpc_client_call *
kdev_rpc_client_unary(struct kdev_rpc_client *cl, const char *method, const uint8_t *req,
                      size_t len, uint64_t timeout_ms, kdev_rpc_message_fn on_message,
                      kdev_rpc_done_fn on_done, void *user_data, struct kdev_err *err);

/* Cancels |call| (RST_STREAM CANCEL); on_done runs with CANCELLED, possibly
 * from within this function. */
KDEV_API void kdev_rpc_client_call_cancel(struct kdev_rpc_client_call *call);

/* Cancels every call (their on_done run with CANCELLED), closes the
 * connection and frees the client once libuv released its handles. Safe with
 * NULL. */
KDEV_API void kdev_rpc_client_close(struct kdev_rpc_client *cl);

/* Blocking convenience for command-line tools: runs a private loop, calls
 * |method| on socket |path| with |req|, and stores the single response message
 * in |*resp| (malloc'ed, caller frees; NULL when none) and its size in
 * |*resp_len|. Returns the gRPC status (>= 0; 0 = OK) with |err| holding the
 * grpc-message for non-OK statuses (err->code EREMOTEIO; the status name when
 * the message is empty), or a negative errno on local failure. A connection
 * failure is UNAVAILABLE. The call is a kdev_rpc_client_unary() one: no
 * response message, or more than one, is INTERNAL. */
KDEV_API int kdev_rpc_unary_sync(const char *path, const char *method, const uint8_t *req,
                                 size_t len, uint64_t timeout_ms, uint8_t **resp, size_t *resp_len,
                                 struct kdev_err *err);

/* Percent-encodes |in| for grpc-message (PROTOCOL-HTTP2: bytes outside
 * 0x20..0x7E and '%' become %XX). Returns a malloc'ed string or NULL. */
KDEV_API char *kdev_rpc_percent_encode(const char *in);

/* Decodes a grpc-message value; invalid escapes are kept verbatim. Returns a
 * malloc'ed string or NULL. */
KDEV_API char *kdev_rpc_percent_decode(const char *in, size_t len);

#endif /* KDEV_RPC_RPC_H */
