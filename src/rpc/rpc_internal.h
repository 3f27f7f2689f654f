/* kdev rpc internals shared by the server and the client: the HTTP/2
 * transport over a libuv pipe (read, write queue, deferred flush), gRPC
 * framing and grpc-timeout helpers. Not part of the public API; tests may
 * include it. */
#ifndef KDEV_RPC_RPC_INTERNAL_H
#define KDEV_RPC_RPC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "rpc/rpc.h"

/* Length of the gRPC message prefix: compressed flag + 32-bit big-endian
 * length (PROTOCOL-HTTP2 "Length-Prefixed-Message"). */
#define KDEV_RPC_PREFIX_LEN 5u

/* Bytes handed to the socket and not yet written: above this the transport
 * stops asking nghttp2 for more frames, so stream data stays in the streams
 * (where server streams coalesce), and stops reading from the peer until
 * half of it has drained. */
#define KDEV_RPC_WQ_HIGH (64u * 1024u)

/* A server stream appends a new message behind unsent data only while the
 * total fits the peer's flow-control windows and this bound; otherwise the
 * message waits as the single pending one. */
#define KDEV_RPC_STREAM_QUEUE_MAX (64u * 1024u)

/* Size of each socket read buffer (a server's connections share one, see
 * struct kdev_rpc_conn). */
#define KDEV_RPC_READ_BUF (64u * 1024u)

/* A graceful close waits at most this long (milliseconds) for queued frames
 * (GOAWAY included) to reach a peer that does not read, then closes anyway. */
#define KDEV_RPC_CLOSE_FLUSH_MS 1000u

/* Parses a grpc-timeout value (|len| bytes: 1-8 ASCII digits and a unit
 * H M S m u n) into milliseconds, rounding up so that any positive timeout
 * stays > 0. Returns 0 or -EINVAL. */
int kdev_rpc__timeout_parse(const char *v, size_t len, uint64_t *ms);

/* Formats |ms| (> 0) as a grpc-timeout value into |buf| (at least 16 bytes),
 * using the finest unit that fits 8 digits (rounding up). Returns the
 * length. */
size_t kdev_rpc__timeout_format(uint64_t ms, char *buf, size_t size);

/* Writes the 5-byte message prefix for an uncompressed |len|-byte message. */
void kdev_rpc__put_prefix(uint8_t *p, uint32_t len);

/* Reads a message prefix arriving in pieces: moves up to the bytes still
 * missing from |*d| (|*n| bytes; both advanced past what is taken) into
 * |prefix|, of which |*got| bytes are already in (updated). Returns false
 * while the prefix is incomplete (all of |*d| taken), true once all
 * KDEV_RPC_PREFIX_LEN bytes are in, with the compressed-flag byte in
 * |*flags| and the big-endian length in |*len| (PROTOCOL-HTTP2
 * "Length-Prefixed-Message"; the flag is not checked). The caller resets
 * |*got| to 0 before the next message. */
bool kdev_rpc__prefix_take(uint8_t prefix[KDEV_RPC_PREFIX_LEN], size_t *got, const uint8_t **d,
                           size_t *n, uint8_t *flags, uint32_t *len);

/* Returns true when |v| (|len| bytes) is a gRPC content type we decode:
 * "application/grpc" or "application/grpc+proto", optionally followed by
 * ";parameters". Sets |*is_grpc| when it starts with application/grpc at
 * all (so that "+json" can be told apart from "text/html"). */
bool kdev_rpc__content_type_ok(const char *v, size_t len, bool *is_grpc);

/* Connections |srv| holds now, closing ones included (for tests). */
size_t kdev_rpc__server_connections(const struct kdev_rpc_server *srv);

/* Bytes allocated now for request messages still arriving or being handled
 * (for tests: buffers grow with the bytes received, not the declared
 * length). */
size_t kdev_rpc__server_request_bytes(const struct kdev_rpc_server *srv);

/* Calls |srv| ended because their request stalled (recv_stall_ms), since
 * it was created (for tests). */
size_t kdev_rpc__server_stalls(const struct kdev_rpc_server *srv);

/* Serves one more connection on the already connected stream socket |fd|
 * (e.g. one end of a socketpair), exactly as one accepted from the listener
 * (the max_connections cap aside): tests and fuzzers drive the server
 * in-process without a socket file. |fd| is consumed: the server closes it
 * with the connection, or at once on failure. Returns 0, -EINVAL, -ESHUTDOWN
 * (server closing), -ENOMEM or a libuv error. */
int kdev_rpc__server_adopt_fd(struct kdev_rpc_server *srv, int fd);

/* An nghttp2 name/value pair for the string literal |n| and the string |v|
 * (neither copied: both must outlive the submit call). */
#define KDEV_RPC_NV(n, v) \
        { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

/* ------------------------------------------------------------------------ */
/* Call/stream plumbing shared by the server's and the client's calls        */
/* (stream.c, codec.c)                                                        */
/* ------------------------------------------------------------------------ */

/* Unlinks |node| from the doubly linked list at |head| (both sides keep
 * calls and connections in lists linked through prev/next). */
#define KDEV_RPC_LIST_UNLINK(head, node)                        \
        do {                                                    \
                if ((node)->prev)                               \
                        (node)->prev->next = (node)->next;      \
                else if ((head) == (node))                      \
                        (head) = (node)->next;                  \
                if ((node)->next)                               \
                        (node)->next->prev = (node)->prev;      \
                (node)->prev = (node)->next = NULL;             \
        } while (0)

/* Pushes |node| at the front of the doubly linked list at |head|. */
#define KDEV_RPC_LIST_PUSH(head, node)                          \
        do {                                                    \
                (node)->prev = NULL;                            \
                (node)->next = (head);                          \
                if (head)                                       \
                        (head)->prev = (node);                  \
                (head) = (node);                                \
        } while (0)

/* Allocates and initialises a timer on |loop| with |data| as its handle
 * data (not started). Returns it (close with kdev_rpc__timer_close) or NULL
 * when out of memory. */
uv_timer_t *kdev_rpc__timer_new(uv_loop_t *loop, void *data);

/* Closes the heap-allocated timer |*t| (if any) and frees it from its close
 * callback; sets |*t| to NULL. */
void kdev_rpc__timer_close(uv_timer_t **t);

/* Bytes of a stream waiting for nghttp2's data provider: framed messages
 * (request on the client, response on the server), buf[off..len) not yet
 * handed over. buf is malloc'd and owned; NULL when empty. */
struct kdev_rpc_outq {
        uint8_t *buf;
        size_t len, off;
};

/* Bytes of |q| not yet handed over. */
static inline size_t kdev_rpc__outq_unsent(const struct kdev_rpc_outq *q)
{
        return q->len - q->off;
}

/* Appends the |flen| bytes at |framed| (malloc'd; ownership taken, freed
 * even on failure) behind the unsent bytes of |q|; when nothing is unsent
 * |framed| becomes the buffer without a copy. Returns 0 or -ENOMEM (|q| is
 * then unchanged). */
int kdev_rpc__outq_append(struct kdev_rpc_outq *q, uint8_t *framed, size_t flen);

/* The body of an nghttp2 data provider: copies up to |max| unsent bytes of
 * |q| into |dst| and returns how many; once all is handed over the buffer
 * is freed (idle streams hold no buffers). */
size_t kdev_rpc__outq_read(struct kdev_rpc_outq *q, uint8_t *dst, size_t max);

/* Frees the buffer of |q| and empties it. */
void kdev_rpc__outq_free(struct kdev_rpc_outq *q);

/* Allocates a framed message: the 5-byte prefix for |len| bytes, then room
 * for them (copied from |msg| when not NULL). Returns the buffer
 * (KDEV_RPC_PREFIX_LEN + |len| bytes, malloc'd, caller frees) or NULL. */
uint8_t *kdev_rpc__frame(const uint8_t *msg, size_t len);

/* Writes the gRPC error for sending a |len|-byte message over the limit
 * |max| into |buf| ("trying to send message larger than max (...)", grpc-go's
 * text). */
void kdev_rpc__send_too_large(char *buf, size_t size, size_t len, size_t max);

/* Checks a received message prefix (compressed-flag byte |flags|, length
 * |len|) against what both sides accept: uncompressed only and at most
 * |max_recv| bytes (PROTOCOL-HTTP2 "Length-Prefixed-Message"; grpc-go's
 * texts). Returns KDEV_RPC_OK, or the gRPC status to end the call with and
 * its message in |msg|: UNIMPLEMENTED for the compressed flag, INTERNAL for
 * another flag (|response|: the text says it came in a response),
 * RESOURCE_EXHAUSTED over the limit. */
int kdev_rpc__prefix_check(uint8_t flags, uint32_t len, size_t max_recv, bool response, char *msg,
                           size_t size);

/* Moves up to the bytes still missing of a |want|-byte message from |*d|
 * (|*n| bytes; both advanced past what is taken) into |dst| + |*got|
 * (|*got| updated). Returns true once all |want| bytes are in. */
bool kdev_rpc__body_take(uint8_t *dst, size_t *got, size_t want, const uint8_t **d, size_t *n);

/* Fills |nv| (room for 2) with the status trailers grpc-status |status|
 * (formatted into |code|, 16 bytes, which must outlive the submit call)
 * and, when |enc_msg| (already percent-encoded, see
 * kdev_rpc_percent_encode()) is non-empty, grpc-message. Returns the number
 * of pairs (1 or 2). */
size_t kdev_rpc__status_nv(nghttp2_nv *nv, char code[16], int status, const char *enc_msg);

/* Parses an unsigned decimal header value (|len| bytes, 1-9 digits) of at
 * most |max|. Returns it, or -1 when malformed or over |max|. */
int kdev_rpc__parse_uint(const uint8_t *v, size_t len, int max);

/* Parses a grpc-status value: the code, or UNKNOWN when it is malformed. */
int kdev_rpc__status_parse(const uint8_t *v, size_t len);

/* The gRPC status of a response with HTTP status |http| other than 200
 * (grpc/grpc doc/http-grpc-status-mapping.md). */
int kdev_rpc__status_from_http(int http);

/* The gRPC status of a stream reset with HTTP/2 error |error_code| (not
 * NO_ERROR; grpc-go's mapping: REFUSED_STREAM UNAVAILABLE, CANCEL
 * CANCELLED, ENHANCE_YOUR_CALM RESOURCE_EXHAUSTED, INADEQUATE_SECURITY
 * PERMISSION_DENIED, others INTERNAL). */
int kdev_rpc__status_from_h2(uint32_t error_code);

/* ------------------------------------------------------------------------ */
/* HTTP/2 transport over a uv_pipe_t                                          */
/* ------------------------------------------------------------------------ */

struct kdev_rpc_conn;

struct kdev_rpc_conn_ops {
        /* The connection failed or ended (|uv_status|: UV_EOF for a clean end,
         * another negative libuv error otherwise). Runs at top level (never
         * inside nghttp2); the owner tears down with kdev_rpc__conn_close. */
        void (*lost)(struct kdev_rpc_conn *c, int uv_status);
        /* Every handle is closed: the owner deletes the session and frees. */
        void (*closed)(struct kdev_rpc_conn *c);
};

struct kdev_rpc_conn {
        uv_pipe_t pipe;
        uv_idle_t idle;              /* deferred flush / final flush */
        uv_timer_t linger;           /* bounds the final flush */
        nghttp2_session *session;    /* owned by the owner; may be NULL */
        uint8_t *rbuf;               /* read buffer lent by the owner
                                      * (KDEV_RPC_READ_BUF bytes, outliving the
                                      * connection; reads never nest, and
                                      * nothing keeps pointers into it after
                                      * nghttp2_session_mem_recv() returns, so
                                      * connections of one loop may share it),
                                      * or NULL: one is allocated per read */
        const struct kdev_rpc_conn_ops *ops;
        void *owner;
        size_t wq_bytes;             /* bytes in uv_write requests in flight,
                                      * each request's overhead included */
        unsigned handles;            /* handles not yet closed */
        int depth;                   /* > 0 while inside nghttp2 */
        bool dead;                   /* close requested */
        bool read_paused;            /* reading stopped: the peer does not read */
        bool final_flush;            /* flush once more, then close */
        bool draining;               /* final frames written: close when the
                                      * write queue empties or linger fires */
};

/* Initialises the pipe, idle and timer handles on |loop|. Returns 0 or a libuv
 * error (then nothing needs closing). */
int kdev_rpc__conn_init(struct kdev_rpc_conn *c, uv_loop_t *loop,
                        const struct kdev_rpc_conn_ops *ops, void *owner);

/* Starts reading and schedules a flush. Returns 0 or a libuv error. */
int kdev_rpc__conn_start(struct kdev_rpc_conn *c);

/* Writes what nghttp2 has to send, now when at top level, else deferred to
 * the idle handle. No-op on a dead connection. */
void kdev_rpc__conn_flush(struct kdev_rpc_conn *c);

/* Stops reading and closes the handles; with |flush_first|, frames queued
 * in the session (GOAWAY, RST_STREAM) are handed to the socket first (from
 * the idle callback), and the handles close only once every queued write
 * has completed, or after KDEV_RPC_CLOSE_FLUSH_MS when the peer does not
 * read (closing cancels what is left). ops->closed runs once everything is
 * closed. Idempotent. */
void kdev_rpc__conn_close(struct kdev_rpc_conn *c, bool flush_first);

/* nghttp2's memory for one server connection's session
 * (nghttp2_session_server_new3): blocks of a few size classes (64 bytes to
 * 4 KiB) that a freed block goes back to, up to KDEV_RPC_H2MEM_KEEP per
 * class, so that the streams, header buffers and frames of each call reuse
 * the last call's instead of going through malloc and free; larger blocks
 * are malloc'ed. Every block kept is freed by kdev_rpc__h2mem_release once
 * the session is deleted. */
#define KDEV_RPC_H2MEM_CLASSES 7u
#define KDEV_RPC_H2MEM_KEEP 16u

struct kdev_rpc_h2mem {
        nghttp2_mem mem; /* mem_user_data = this */
        void *spare[KDEV_RPC_H2MEM_CLASSES]; /* freed blocks, each class a list */
        unsigned n_spare[KDEV_RPC_H2MEM_CLASSES];
};

/* Sets up |m| (kept nothing yet). */
void kdev_rpc__h2mem_init(struct kdev_rpc_h2mem *m);

/* Frees the blocks |m| keeps; no session may use |m| any more. */
void kdev_rpc__h2mem_release(struct kdev_rpc_h2mem *m);

#endif /* KDEV_RPC_RPC_INTERNAL_H */
