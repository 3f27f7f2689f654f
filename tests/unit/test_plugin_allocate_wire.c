/* Allocate's wire code (plugin/allocate_wire_internal.h) against protobuf-c, byte for
 * byte: the request decoder on the AllocateRequest vector
 * (tests/data/vectors/deviceplugin-v1beta1), every vector, crafted inputs and
 * seeded mutations of them (what the decoder takes, protobuf-c takes with the
 * same IDs; what it leaves, it leaves to the generic path), and the answer
 * encoder against kdev_plugin_allocate_response + protobuf-c's pack. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "plugin/allocate.h"
#include "plugin/allocate_wire_internal.h"
#include "plugin/arena_internal.h"
#include "plugin/pbcheck.h"

#define VEC KDEV_SOURCE_DIR "/tests/data/vectors/deviceplugin-v1beta1/"

static uint8_t *read_file(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t *buf = malloc(1 << 16);
        assert_non_null(buf);
        *len = fread(buf, 1, 1 << 16, f);
        fclose(f);
        return buf;
}

/* Decodes |buf| both ways. Returns the decoder's result; when it is 0, checks
 * that protobuf-c (after the NUL check) gives the same container requests
 * with the same ID bytes. */
static int differential(const uint8_t *buf, size_t len)
{
        _Alignas(max_align_t) char stack[512];
        struct kdev_arena a;
        kdev_arena_init(&a, stack, sizeof(stack));
        struct kdev_alloc_request r;
        int rc = kdev_alloc_request_decode(buf, len, &a, &r);
        if (rc == 0) {
                struct kdev_err err = {0};
                assert_int_equal(kdev_pb_check_strings(&v1beta1__allocate_request__descriptor, buf,
                                                       len, &err),
                                 0);
                V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, len, buf);
                assert_non_null(m);
                assert_int_equal(r.n_containers, m->n_container_requests);
                for (size_t i = 0; i < r.n_containers; i++) {
                        V1beta1__ContainerAllocateRequest *c = m->container_requests[i];
                        assert_int_equal(r.containers[i].n_ids, c->n_devices_ids);
                        if (c->n_devices_ids == 0)
                                assert_null(r.containers[i].ids);
                        for (size_t j = 0; j < c->n_devices_ids; j++)
                                assert_string_equal(r.containers[i].ids[j], c->devices_ids[j]);
                }
                v1beta1__allocate_request__free_unpacked(m, NULL);
        }
        kdev_arena_release(&a);
        return rc;
}

static void test_vector(void **state)
{
        (void)state;
        size_t len;
        uint8_t *buf = read_file(VEC "08_allocate_request.bin", &len);
        _Alignas(max_align_t) char stack[512];
        struct kdev_arena a;
        kdev_arena_init(&a, stack, sizeof(stack));
        struct kdev_alloc_request r;
        assert_int_equal(kdev_alloc_request_decode(buf, len, &a, &r), 0);
        /* the vector's JSON: [["gpu-0", "gpu-1"], ["gpu-2"]] */
        assert_int_equal(r.n_containers, 2);
        assert_int_equal(r.containers[0].n_ids, 2);
        assert_string_equal(r.containers[0].ids[0], "gpu-0");
        assert_string_equal(r.containers[0].ids[1], "gpu-1");
        assert_int_equal(r.containers[1].n_ids, 1);
        assert_string_equal(r.containers[1].ids[0], "gpu-2");
        kdev_arena_release(&a);
        assert_int_equal(differential(buf, len), 0);
        free(buf);
}

/* Every vector of the API, whatever its type: taken ones must agree. */
static void test_every_vector(void **state)
{
        (void)state;
        static const char *const files[] = {
                "01_register_request_with_options.bin", "02_register_request_minimal.bin",
                "03_device_plugin_options.bin", "04_device_plugin_options_all.bin",
                "05_empty.bin", "06_list_and_watch_response.bin",
                "07_list_and_watch_response_no_devices.bin", "08_allocate_request.bin",
                "09_allocate_response.bin", "10_preferred_allocation_request.bin",
                "11_preferred_allocation_response.bin", "12_prestart_container_request.bin",
                "13_prestart_container_response.bin"};
        size_t taken = 0;
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                char path[512];
                snprintf(path, sizeof(path), VEC "%s", files[i]);
                size_t len;
                uint8_t *buf = read_file(path, &len);
                if (differential(buf, len) == 0)
                        taken++;
                free(buf);
        }
        /* 05 (empty), 08, and 10/12, whose field 1 holds plain strings or
         * plain nested strings too */
        assert_true(taken >= 2);
}

struct crafted {
        const char *what;
        const char *bytes;
        size_t len;
        int rc; /* the decoder's: 0 taken, 1 left to protobuf-c */
        int pb_ok; /* protobuf-c (and the NUL check) accepts it */
};

#define C(what, lit, rc, ok) {what, lit, sizeof(lit) - 1, rc, ok}

static const struct crafted crafted[] = {
        C("empty request", "", 0, 1),
        C("one empty container request", "\x0a\x00", 0, 1),
        C("an empty ID", "\x0a\x02\x0a\x00", 0, 1),
        C("two IDs", "\x0a\x06\x0a\x01" "a" "\x0a\x01" "b", 0, 1),
        C("a NUL in an ID", "\x0a\x05\x0a\x03" "a\0b", 1, 0),
        C("unknown top-level field", "\x12\x01" "x", 1, 1),
        C("unknown nested field", "\x0a\x03\x12\x01" "x", 1, 1),
        C("two-byte tag", "\x8a\x00\x00", 1, 1),
        C("varint where a message goes", "\x08\x01", 1, 0),
        C("nested varint where a string goes", "\x0a\x02\x08\x01", 1, 0),
        C("truncated container", "\x0a\x05\x0a\x01", 1, 0),
        C("truncated ID", "\x0a\x03\x0a\x05" "a", 1, 0),
        C("unterminated length", "\x0a\x80", 1, 0),
        C("length over INT_MAX", "\x0a\x80\x80\x80\x80\x08", 1, 0),
        C("length of six bytes", "\x0a\x80\x80\x80\x80\x80\x00", 1, 0),
        C("non-minimal length", "\x0a\x82\x00\x0a\x00", 0, 1),
        C("tag 0", "\x00", 1, 0),
        C("group wire type", "\x0b", 1, 0),
        C("trailing byte", "\x0a\x00\x0a", 1, 0),
};

static void test_crafted(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(crafted) / sizeof(crafted[0]); i++) {
                const struct crafted *c = &crafted[i];
                const uint8_t *b = (const uint8_t *)c->bytes;
                print_message("%s\n", c->what);
                assert_int_equal(differential(b, c->len), c->rc);
                struct kdev_err err = {0};
                int ok = kdev_pb_check_strings(&v1beta1__allocate_request__descriptor, b, c->len,
                                               &err) == 0;
                V1beta1__AllocateRequest *m = NULL;
                if (ok) {
                        m = v1beta1__allocate_request__unpack(NULL, c->len, b);
                        ok = m != NULL;
                }
                assert_int_equal(ok, c->pb_ok);
                if (m)
                        v1beta1__allocate_request__free_unpacked(m, NULL);
        }
}

/* Seeded mutations of plain requests: each byte flipped, dropped,
 * duplicated, or replaced at random; the decoder never takes what protobuf-c
 * would read differently. */
static void test_mutations(void **state)
{
        (void)state;
        V1beta1__ContainerAllocateRequest c0 = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT,
                                          c1 = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        char *ids0[] = {"GPU-8b7c3e52-9f4a-4d1b-a6e7-3c2f1d0e9b8a::17", "g0-null::3", ""};
        char long_id[300];
        memset(long_id, 'x', sizeof(long_id) - 1);
        long_id[sizeof(long_id) - 1] = '\0';
        char *ids1[] = {long_id, "b"};
        c0.devices_ids = ids0;
        c0.n_devices_ids = 3;
        c1.devices_ids = ids1;
        c1.n_devices_ids = 2;
        V1beta1__ContainerAllocateRequest *cs[] = {&c0, &c1};
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.container_requests = cs;
        req.n_container_requests = 2;
        size_t len = v1beta1__allocate_request__get_packed_size(&req);
        uint8_t *orig = malloc(len), *buf = malloc(len + 8);
        assert_non_null(orig);
        assert_non_null(buf);
        v1beta1__allocate_request__pack(&req, orig);
        assert_int_equal(differential(orig, len), 0);
        unsigned seed = 12345, taken = 0, left = 0;
        for (int round = 0; round < 20000; round++) {
                memcpy(buf, orig, len);
                size_t n = len;
                for (int k = 0; k < 1 + round % 3; k++) {
                        seed = seed * 1103515245u + 12345u;
                        size_t at = (seed >> 8) % n;
                        switch ((seed >> 4) % 4) {
                        case 0: buf[at] ^= (uint8_t)(1u << ((seed >> 12) % 8)); break;
                        case 1: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
                        case 2:
                                if (n < len + 8) {
                                        memmove(buf + at + 1, buf + at, n - at);
                                        n++;
                                }
                                break;
                        default: buf[at] = (uint8_t)(seed >> 16); break;
                        }
                        if (n == 0)
                                break;
                }
                if (differential(buf, n) == 0)
                        taken++;
                else
                        left++;
        }
        assert_true(taken > 0 && left > 0); /* both paths were exercised */
        free(orig);
        free(buf);
}

/* Edits with every kind of entry, empty strings (left out by proto3) and a
 * taken-over entry (skipped). */
static void fill(struct kdev_container_edits *e)
{
        struct kdev_err err;
        assert_int_equal(kdev_edits_set_env(e, "NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b", &err), 0);
        assert_int_equal(kdev_edits_set_env(e, "EMPTY", "", &err), 0);
        assert_int_equal(kdev_edits_set_env(e, "", "no key", &err), 0);
        assert_int_equal(kdev_edits_add_mount(e, "/dev/null", "/var/run/x/GPU-a", NULL, 0, &err),
                         0);
        const char *opts[] = {"ro"};
        assert_int_equal(kdev_edits_add_mount(e, "", "/only/container", opts, 1, &err), 0);
        assert_int_equal(kdev_edits_add_node(e, "/dev/nvidiactl", "/root/dev/nvidiactl", "rw",
                                             &err),
                         0);
        assert_int_equal(kdev_edits_add_node(e, "/dev/nvidia0", "/dev/nvidia0", "", &err), 0);
        assert_int_equal(kdev_edits_add_node(e, "/dev/taken", "/dev/taken", "r", &err), 0);
        free(e->nodes[2].path);
        free(e->nodes[2].host_path);
        free(e->nodes[2].permissions);
        e->nodes[2].path = e->nodes[2].host_path = e->nodes[2].permissions = NULL;
        char long_value[200];
        memset(long_value, 'v', sizeof(long_value) - 1);
        long_value[sizeof(long_value) - 1] = '\0'; /* a two-byte length */
        assert_int_equal(kdev_edits_add_annotation(e, "cdi.k8s.io/x", long_value, &err), 0);
        assert_int_equal(kdev_edits_add_cdi_device(e, "k8s.device-plugin.nvidia.com/gpu=0", &err),
                         0);
        assert_int_equal(kdev_edits_add_cdi_device(e, "", &err), 0);
}

static void check_pack(struct kdev_container_edits *e)
{
        /* the encoder first (the conversion below takes the strings) */
        size_t n = kdev_alloc_edits_packed_size(e);
        uint8_t *mine = malloc(n + 1);
        assert_non_null(mine);
        assert_ptr_equal(kdev_alloc_edits_pack(e, mine), mine + n);
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        struct kdev_err err;
        assert_int_equal(kdev_plugin_allocate_response(e, &out, &err), 0);
        size_t want = v1beta1__container_allocate_response__get_packed_size(&out);
        uint8_t *pb = malloc(want + 1);
        assert_non_null(pb);
        v1beta1__container_allocate_response__pack(&out, pb);
        assert_int_equal(n, want);
        assert_memory_equal(mine, pb, n);
        kdev_allocate_response_free_contents(&out);
        kdev_container_edits_clear(e);
        free(mine);
        free(pb);
}

static void test_pack_matches_protobuf_c(void **state)
{
        (void)state;
        struct kdev_container_edits e = {0};
        check_pack(&e); /* nothing: 0 bytes */
        fill(&e);
        check_pack(&e);
        /* many nodes: an entry list of more than 127 bytes in all */
        struct kdev_err err;
        for (unsigned i = 0; i < 40; i++) {
                char p[32];
                snprintf(p, sizeof(p), "/dev/nvidia%u", i);
                assert_int_equal(kdev_edits_add_node(&e, p, p, "rwm", &err), 0);
        }
        check_pack(&e);
}

/* A mount with the option "ro" is read_only in the answer (v1beta1 Mount
 * field 3, "\x18\x01" at the end of its entry); others are not. */
static void test_read_only_mount(void **state)
{
        (void)state;
        struct kdev_container_edits e = {0};
        struct kdev_err err;
        const char *ro[] = {"nosuid", "ro"};
        assert_int_equal(kdev_edits_add_mount(&e, "/h/a", "/c/a", ro, 2, &err), 0);
        assert_int_equal(kdev_edits_add_mount(&e, "/h/b", "/c/b", ro, 1, &err), 0);
        size_t n = kdev_alloc_edits_packed_size(&e);
        uint8_t buf[64];
        assert_true(n <= sizeof(buf));
        assert_ptr_equal(kdev_alloc_edits_pack(&e, buf), buf + n);
        static const uint8_t want[] = {0x12, 0x0e, 0x0a, 0x04, '/', 'c', '/', 'a', 0x12, 0x04,
                                       '/', 'h', '/', 'a', 0x18, 0x01, 0x12, 0x0c, 0x0a, 0x04,
                                       '/', 'c', '/', 'b', 0x12, 0x04, '/', 'h', '/', 'b'};
        assert_int_equal(n, sizeof(want));
        assert_memory_equal(buf, want, n);
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate_response(&e, &out, &err), 0);
        assert_int_equal(out.n_mounts, 2);
        assert_true(out.mounts[0]->read_only);
        assert_false(out.mounts[1]->read_only);
        kdev_allocate_response_free_contents(&out);
        kdev_container_edits_clear(&e);
}

static void test_varint(void **state)
{
        (void)state;
        static const struct {
                size_t v;
                const char *bytes;
                size_t n;
        } cases[] = {
                {0, "\x00", 1},           {1, "\x01", 1},
                {127, "\x7f", 1},         {128, "\x80\x01", 2},
                {300, "\xac\x02", 2},     {16383, "\xff\x7f", 2},
                {16384, "\x80\x80\x01", 3}, {(size_t)INT_MAX, "\xff\xff\xff\xff\x07", 5},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint8_t b[16];
                uint8_t *end = kdev_alloc_put_varint(b, cases[i].v);
                assert_int_equal((size_t)(end - b), cases[i].n);
                assert_int_equal(kdev_alloc_varint_size(cases[i].v), cases[i].n);
                assert_memory_equal(b, cases[i].bytes, cases[i].n);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vector),
                cmocka_unit_test(test_every_vector),
                cmocka_unit_test(test_crafted),
                cmocka_unit_test(test_mutations),
                cmocka_unit_test(test_pack_matches_protobuf_c),
                cmocka_unit_test(test_read_only_mount),
                cmocka_unit_test(test_varint),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
