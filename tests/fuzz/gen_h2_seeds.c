/* Writes the seed corpus of fuzz_h2_server: client byte streams made with
 * nghttp2's client session (connection preface, SETTINGS, HEADERS, DATA,
 * ...), one file per scenario, carrying the repository's wire vectors as
 * request messages. Usage: gen_h2_seeds OUT_DIR VECTORS_DIR
 * (VECTORS_DIR = tests/data/vectors/deviceplugin-v1beta1). Not part of the
 * product; run by hand when the scenarios change. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

struct body {
        uint8_t *p;
        size_t len, off;
};

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
        struct body *b = src->ptr;
        (void)s;
        (void)id;
        (void)ud;
        size_t n = b->len - b->off < length ? b->len - b->off : length;
        memcpy(buf, b->p + b->off, n);
        b->off += n;
        if (b->off == b->len)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
}

static uint8_t *read_file(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                perror(path);
                exit(1);
        }
        uint8_t *p = malloc(65536);
        *len = fread(p, 1, 65536, f);
        fclose(f);
        return p;
}

/* |msg| framed as one gRPC message (or |nmsgs| copies). */
static struct body *frame(const uint8_t *msg, size_t len, int nmsgs)
{
        struct body *b = calloc(1, sizeof(*b));
        b->p = malloc((len + 5) * (size_t)nmsgs + 1);
        for (int i = 0; i < nmsgs; i++) {
                uint8_t *q = b->p + b->len;
                q[0] = 0;
                q[1] = (uint8_t)(len >> 24);
                q[2] = (uint8_t)(len >> 16);
                q[3] = (uint8_t)(len >> 8);
                q[4] = (uint8_t)len;
                memcpy(q + 5, msg, len);
                b->len += len + 5;
        }
        return b;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

struct req {
        const char *path;
        const char *ctype;   /* NULL: application/grpc */
        const char *timeout; /* NULL: none */
        const char *encoding;
        struct body *body;   /* NULL: headers only (END_STREAM) */
};

static int32_t submit(nghttp2_session *s, const struct req *r)
{
        nghttp2_nv nva[8] = {
                NV(":method", "POST"),
                NV(":scheme", "http"),
                NV(":path", r->path),
                NV(":authority", "localhost"),
                NV("content-type", r->ctype ? r->ctype : "application/grpc"),
                NV("te", "trailers"),
        };
        size_t n = 6;
        if (r->timeout)
                nva[n++] = (nghttp2_nv)NV("grpc-timeout", r->timeout);
        if (r->encoding)
                nva[n++] = (nghttp2_nv)NV("grpc-encoding", r->encoding);
        nghttp2_data_provider prd = { .source.ptr = r->body, .read_callback = body_read };
        return nghttp2_submit_request(s, NULL, nva, n, r->body ? &prd : NULL, NULL);
}

static nghttp2_session *start(void)
{
        nghttp2_session_callbacks *cbs;
        nghttp2_session *s;
        nghttp2_session_callbacks_new(&cbs);
        nghttp2_session_client_new(&s, cbs, NULL);
        nghttp2_session_callbacks_del(cbs);
        nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                                        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535 } };
        nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, 2);
        return s;
}

/* Bytes of the scenario being written. */
static uint8_t outbuf[1 << 20];
static size_t outlen;

static void flush(nghttp2_session *s)
{
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(s, &p)) > 0) {
                if (outlen + (size_t)n > sizeof(outbuf))
                        exit(1);
                memcpy(outbuf + outlen, p, (size_t)n);
                outlen += (size_t)n;
        }
}

static void finish(nghttp2_session *s, const char *dir, const char *name)
{
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        flush(s);
        FILE *f = fopen(path, "wb");
        if (!f) {
                perror(path);
                exit(1);
        }
        fwrite(outbuf, 1, outlen, f);
        fclose(f);
        outlen = 0;
        nghttp2_session_del(s);
}

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s OUT_DIR VECTORS_DIR\n", argv[0]);
                return 2;
        }
        const char *out = argv[1];
        char path[1024];
        size_t alen, plen, slen;
        snprintf(path, sizeof(path), "%s/08_allocate_request.bin", argv[2]);
        uint8_t *alloc = read_file(path, &alen);
        snprintf(path, sizeof(path), "%s/10_preferred_allocation_request.bin", argv[2]);
        uint8_t *pref = read_file(path, &plen);
        snprintf(path, sizeof(path), "%s/12_prestart_container_request.bin", argv[2]);
        uint8_t *pre = read_file(path, &slen);
        static const uint8_t big[4000] = { 0 };

        nghttp2_session *s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, NULL, NULL, frame(alloc, alen, 1) });
        finish(s, out, "unary_allocate");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, "1S", "identity",
                                 frame(pref, plen, 1) });
        finish(s, out, "unary_timeout_preferred");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Stream", "application/grpc+proto", NULL, NULL,
                                 frame(NULL, 0, 1) });
        finish(s, out, "stream_empty");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Stream", NULL, "100m", NULL, frame(pre, slen, 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Later", NULL, NULL, NULL, frame(alloc, alen, 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Fail", NULL, NULL, NULL, frame(pre, slen, 1) });
        finish(s, out, "three_streams");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, NULL, NULL, frame(alloc, alen, 2) });
        finish(s, out, "unary_two_messages");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, NULL, "gzip", frame(alloc, alen, 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", "application/json", NULL, NULL,
                                 frame(alloc, alen, 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Nope", NULL, NULL, NULL, frame(alloc, alen, 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, "zz", NULL, NULL });
        finish(s, out, "rejected_calls");

        s = start();
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, NULL, NULL,
                                 frame(big, sizeof(big), 1) });
        submit(s, &(struct req){ "/kdev.Fuzz/Unary", NULL, NULL, NULL,
                                 frame(big, sizeof(big), 2) });
        finish(s, out, "large_messages");

        s = start();
        int32_t id = submit(s, &(struct req){ "/kdev.Fuzz/Later", NULL, NULL, NULL,
                                              frame(alloc, alen, 1) });
        flush(s);
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        nghttp2_submit_ping(s, NGHTTP2_FLAG_NONE, (const uint8_t *)"pingpong");
        nghttp2_submit_window_update(s, NGHTTP2_FLAG_NONE, 0, 1 << 20);
        nghttp2_submit_goaway(s, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
        finish(s, out, "cancel_ping_goaway");
        return 0;
}
