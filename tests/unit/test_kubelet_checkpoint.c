/* Checkpoint (kubelet_internal_checkpoint) decode / checksum / encode tests.
 * Expected checksums: values computed with Go 1.19 + go-spew 1.1.1 over
 * kubelet's checkpoint types (kubernetes pkg/kubelet/cm/devicemanager/
 * checkpoint: checkpoint.go, checkpointv1.go; checksum of k8s.io/utils
 * dump.ForHash). */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kubelet/checkpoint.h"

static const char FILE_A[] =
        "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{\"example.com/gpu\":"
        "[\"dev-0\",\"dev-1\"]}},\"Checksum\":665642510}";
static const char SPEW_A[] =
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> "
        "RegisteredDevices:(map[string][]string)map[example.com/gpu:[dev-0 dev-1]]}";

static const char FILE_B[] =
        "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"6b3c8a2e-1111-2222-3333-444455556666\","
        "\"ContainerName\":\"ctr0\",\"ResourceName\":\"example.com/gpu\",\"DeviceIDs\":{\"0\":"
        "[\"dev-0\"]},\"AllocResp\":\"ChQKC0VYQU1QTEVfR1BVEgVkZXYtMCoXChVleGFtcGxlLmNvbS9ncHU9"
        "ZGV2LTA=\"}],\"RegisteredDevices\":{\"example.com/gpu\":[\"dev-0\",\"dev-1\"]}},"
        "\"Checksum\":688751658}";
static const char SPEW_B[] =
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:"
        "(string)6b3c8a2e-1111-2222-3333-444455556666 ContainerName:(string)ctr0 ResourceName:"
        "(string)example.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[dev-0]] AllocResp:"
        "([]uint8)[10 20 10 11 69 88 65 77 80 76 69 95 71 80 85 18 5 100 101 118 45 48 42 23 10 "
        "21 101 120 97 109 112 108 101 46 99 111 109 47 103 112 117 61 100 101 118 45 48]}] "
        "RegisteredDevices:(map[string][]string)map[example.com/gpu:[dev-0 dev-1]]}";

/* Decodes |text|, verifies its checksum == |sum|, checks the spew text (when
 * given) and that encoding gives |text| back byte for byte. */
static void roundtrip(const char *text, uint32_t sum, const char *spew)
{
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_ckpt_decode(text, strlen(text), &cp, &err), 0);
        assert_int_equal(cp.layout, KDEV_CKPT_LAYOUT_CURRENT);
        if (spew) {
                char *s = kdev_ckpt_spew(&cp, cp.layout);
                assert_string_equal(s, spew);
                free(s);
        }
        uint32_t computed = 0;
        assert_int_equal(kdev_ckpt_verify(&cp, &computed, &err), 0);
        assert_int_equal(computed, sum);
        assert_int_equal(cp.checksum, sum);
        cp.checksum = 0;
        char *out = kdev_ckpt_encode(&cp);
        assert_string_equal(out, text);
        assert_int_equal(cp.checksum, sum);
        free(out);
        kdev_ckpt_clear(&cp);
}

static void test_example_a(void **state)
{
        (void)state;
        roundtrip(FILE_A, 665642510u, SPEW_A);
}

static void test_example_b(void **state)
{
        (void)state;
        roundtrip(FILE_B, 688751658u, SPEW_B);
        struct kdev_checkpoint cp = {0};
        assert_int_equal(kdev_ckpt_decode(FILE_B, strlen(FILE_B), &cp, NULL), 0);
        assert_int_equal(cp.n_entries, 1);
        assert_int_equal(cp.entries[0].alloc_resp_len, 47);
        assert_int_equal(cp.entries[0].alloc_resp[0], 0x0a);
        assert_int_equal(cp.entries[0].n_numa, 1);
        assert_int_equal(cp.entries[0].numa[0].node, 0);
        assert_string_equal(cp.entries[0].numa[0].ids[0], "dev-0");
        assert_int_equal(cp.n_notes, 0);
        kdev_ckpt_clear(&cp);
}

static void test_empty_and_null(void **state)
{
        (void)state;
        roundtrip("{\"Data\":{\"PodDeviceEntries\":[],\"RegisteredDevices\":{}},\"Checksum\":2932075448}",
                  2932075448u,
                  "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[] "
                  "RegisteredDevices:(map[string][]string)map[]}");
        roundtrip("{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":null},\"Checksum\":1944006890}",
                  1944006890u,
                  "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> "
                  "RegisteredDevices:(map[string][]string)<nil>}");
}

static void test_numa_minus_one(void **state)
{
        (void)state;
        /* File keys in another order: the spew sorts numerically, encoding
         * sorts like Go (by the key text). */
        const char *in = "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                         "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":{\"1\":[\"c\"],\"-1\":[\"a\"],"
                         "\"0\":[\"b\"]},\"AllocResp\":\"\"}],\"RegisteredDevices\":{\"example.com/r\":"
                         "[\"a\",\"b\",\"c\"]}},\"Checksum\":3361776228}";
        const char *canon = "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                            "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":{\"-1\":[\"a\"],\"0\":[\"b\"],"
                            "\"1\":[\"c\"]},\"AllocResp\":\"\"}],\"RegisteredDevices\":{\"example.com/r\":"
                            "[\"a\",\"b\",\"c\"]}},\"Checksum\":3361776228}";
        struct kdev_checkpoint cp = {0};
        assert_int_equal(kdev_ckpt_decode(in, strlen(in), &cp, NULL), 0);
        char *s = kdev_ckpt_spew(&cp, cp.layout);
        assert_string_equal(s, "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
                               "[{PodUID:(string)p ContainerName:(string)c ResourceName:(string)example.com/r "
                               "DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[a] 0:[b] 1:[c]] AllocResp:"
                               "([]uint8)[]}] RegisteredDevices:(map[string][]string)map[example.com/r:[a b c]]}");
        free(s);
        assert_int_equal(kdev_ckpt_verify(&cp, NULL, NULL), 0);
        kdev_ckpt_clear(&cp);
        roundtrip(canon, 3361776228u, NULL);
}

static void test_numa_text_order_and_nils(void **state)
{
        (void)state;
        /* map[int64] keys: spew numeric (-1 2 10), JSON text order (-1 10 2);
         * nil vs empty inner lists; AllocResp null. */
        roundtrip("{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                  "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":{\"-1\":[\"a\"],\"10\":[\"c\"],"
                  "\"2\":[\"b\"]},\"AllocResp\":null}],\"RegisteredDevices\":{\"a.com/x\":null,"
                  "\"b.com/r\":[]}},\"Checksum\":180004985}",
                  180004985u,
                  "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:"
                  "(string)p ContainerName:(string)c ResourceName:(string)example.com/r DeviceIDs:"
                  "(checkpoint.DevicesPerNUMA)map[-1:[a] 2:[b] 10:[c]] AllocResp:([]uint8)<nil>}] "
                  "RegisteredDevices:(map[string][]string)map[a.com/x:<nil> b.com/r:[]]}");
        roundtrip("{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                  "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":null,\"AllocResp\":null}],"
                  "\"RegisteredDevices\":{}},\"Checksum\":769222883}",
                  769222883u, NULL);
        roundtrip("{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                  "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":{},\"AllocResp\":null}],"
                  "\"RegisteredDevices\":{}},\"Checksum\":3783595588}",
                  3783595588u, NULL);
}

static void test_string_escapes(void **state)
{
        (void)state;
        /* Strings are raw in the spew text; JSON escapes follow Go's
         * encoding/json (HTML-safe, \b \f as Go >= 1.22 writes them). */
        roundtrip("{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"\",\"ContainerName\":\"c d\","
                  "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":{\"0\":[]},\"AllocResp\":\"\"}],"
                  "\"RegisteredDevices\":{\"b.com/r\":[\"x y\",\"\\\"q\\\"\",\"\xc3\xa9\\n\","
                  "\"\\u003c\\u0026\\u003e\\t\\u0001\\b\\f\\u2028\"]}},\"Checksum\":607854943}",
                  607854943u,
                  "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:"
                  "(string) ContainerName:(string)c d ResourceName:(string)example.com/r DeviceIDs:"
                  "(checkpoint.DevicesPerNUMA)map[0:[]] AllocResp:([]uint8)[]}] RegisteredDevices:"
                  "(map[string][]string)map[b.com/r:[x y \"q\" \xc3\xa9\n <&>\t\x01\b\f\xe2\x80\xa8]]}");
}

static void test_v1_layout(void **state)
{
        (void)state;
        const char *in = "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"c\","
                         "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":[\"a\",\"b\"],\"AllocResp\":\"\"}],"
                         "\"RegisteredDevices\":{\"example.com/r\":[\"a\",\"b\"]}},\"Checksum\":0}";
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_ckpt_decode(in, strlen(in), &cp, &err), 0);
        assert_int_equal(cp.layout, KDEV_CKPT_LAYOUT_V1);
        assert_int_equal(cp.entries[0].n_numa, 1);
        assert_int_equal(cp.entries[0].numa[0].node, 0);
        assert_int_equal(cp.entries[0].numa[0].n_ids, 2);
        /* The 1.19 text: flat list, 1.19 type names. */
        char *s = kdev_ckpt_spew(&cp, KDEV_CKPT_LAYOUT_V1);
        assert_string_equal(s, "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
                               "[{PodUID:(string)p ContainerName:(string)c ResourceName:(string)example.com/r "
                               "DeviceIDs:([]string)[a b] AllocResp:([]uint8)[]}] RegisteredDevices:"
                               "(map[string][]string)map[example.com/r:[a b]]}");
        free(s);
        uint32_t computed;
        assert_int_equal(kdev_ckpt_verify(&cp, &computed, &err), -EBADMSG);
        assert_string_equal(err.msg, "checksum mismatch: stored 0, computed 3915496863");
        kdev_ckpt_clear(&cp);

        /* Go-computed: a null flat list, and the name replacement reaching
         * into data (checkpointv1.go replaces every "PodDevicesEntryV1"). */
        const char *in2 =
                "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"p\",\"ContainerName\":\"PodDevicesEntryV1\","
                "\"ResourceName\":\"example.com/r\",\"DeviceIDs\":null,\"AllocResp\":\"\"},{\"PodUID\":\"p\","
                "\"ContainerName\":\"c\",\"ResourceName\":\"example.com/r\",\"DeviceIDs\":[\"a\",\"b\"],"
                "\"AllocResp\":\"ChQKC0VYQU1QTEVfR1BVEgVkZXYtMCoXChVleGFtcGxlLmNvbS9ncHU9ZGV2LTA=\"}],"
                "\"RegisteredDevices\":{\"example.com/r\":[\"a\",\"b\"]}},\"Checksum\":2094728300}";
        assert_int_equal(kdev_ckpt_decode(in2, strlen(in2), &cp, &err), 0);
        assert_int_equal(cp.layout, KDEV_CKPT_LAYOUT_V1);
        assert_true(cp.entries[0].numa[0].ids_null);
        assert_int_equal(kdev_ckpt_verify(&cp, &computed, &err), 0);
        assert_int_equal(computed, 2094728300u);
        /* Converted data, re-encoded in the current layout. */
        char *out = kdev_ckpt_encode(&cp);
        assert_non_null(strstr(out, "\"DeviceIDs\":{\"0\":null}"));
        assert_non_null(strstr(out, "\"DeviceIDs\":{\"0\":[\"a\",\"b\"]}"));
        free(out);
        kdev_ckpt_clear(&cp);
}

/* Decoding |text| fails with |rc| and exactly |msg|, leaving |cp| empty. */
static void expect_error(const char *text, int rc, const char *msg)
{
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_ckpt_decode(text, strlen(text), &cp, &err), rc);
        assert_string_equal(err.msg, msg);
        assert_int_equal(cp.n_entries, 0);
        assert_int_equal(cp.n_registered, 0);
        assert_null(cp.notes);
}

static void test_broken(void **state)
{
        (void)state;
        expect_error("", -EBADMSG, "not JSON: line 1 column 0: '[' or '{' expected near end of file");
        expect_error("{\"Data\":{\n\"PodDeviceEntries\":nul}", -EBADMSG,
                     "not JSON: line 2 column 22: invalid token near 'nul'");
        expect_error("[1]", -EINVAL, "top level: expected an object, got an array");
        expect_error("{\"Checksum\":1}", -EINVAL, "missing key \"Data\"");
        expect_error("{\"Data\":{}}", -EINVAL, "missing key \"Checksum\"");
        expect_error("{\"Data\":{},\"Checksum\":\"1\"}", -EINVAL,
                     "Checksum: expected an unsigned integer, got a string");
        expect_error("{\"Data\":{},\"Checksum\":-1}", -EINVAL,
                     "Checksum: expected an unsigned integer, got a negative number");
        expect_error("{\"Data\":{},\"Checksum\":1.5}", -EINVAL,
                     "Checksum: expected an unsigned integer, got a fraction");
        expect_error("{\"Data\":[],\"Checksum\":1}", -EINVAL, "Data: expected an object, got an array");
        expect_error("{\"Data\":{\"PodDeviceEntries\":{}},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries: expected an array or null, got an object");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[7]},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries[0]: expected an object, got a number");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[[]]},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries[0]: expected an object, got an array");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":1}]},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries[0].PodUID: expected a string, got a number");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"DeviceIDs\":{\"0\":[\"a\",2]}}]},\"Checksum\":1}",
                     -EINVAL, "Data.PodDeviceEntries[0].DeviceIDs[\"0\"][1]: expected a string, got a number");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"DeviceIDs\":{\"x\":[]}}]},\"Checksum\":1}",
                     -EINVAL,
                     "Data.PodDeviceEntries[0].DeviceIDs: key \"x\" is not a NUMA node number (int64)");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"DeviceIDs\":\"a\"}]},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries[0].DeviceIDs: expected an object (NUMA node -> device IDs), "
                     "an array or null, got a string");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"DeviceIDs\":{\"0\":[]}},{\"DeviceIDs\":[]}]},"
                     "\"Checksum\":1}",
                     -EINVAL,
                     "Data.PodDeviceEntries[1].DeviceIDs: flat list (pre-1.20 layout), but "
                     "Data.PodDeviceEntries[0].DeviceIDs is NUMA-keyed: layouts mixed");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"AllocResp\":\"abc\"}]},\"Checksum\":1}",
                     -EINVAL,
                     "Data.PodDeviceEntries[0].AllocResp: not valid base64: illegal base64 data at "
                     "input byte 3");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"AllocResp\":\"ab!c\"}]},\"Checksum\":1}",
                     -EINVAL,
                     "Data.PodDeviceEntries[0].AllocResp: not valid base64: illegal base64 data at "
                     "input byte 2");
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"AllocResp\":7}]},\"Checksum\":1}", -EINVAL,
                     "Data.PodDeviceEntries[0].AllocResp: expected a base64 string, got a number");
        /* 0x00: field number 0 is not valid protobuf. */
        expect_error("{\"Data\":{\"PodDeviceEntries\":[{\"AllocResp\":\"AA==\"}]},\"Checksum\":1}",
                     -EINVAL,
                     "Data.PodDeviceEntries[0].AllocResp: not a valid "
                     "v1beta1.ContainerAllocateResponse (1 bytes)");
        expect_error("{\"Data\":{\"RegisteredDevices\":[]},\"Checksum\":1}", -EINVAL,
                     "Data.RegisteredDevices: expected an object or null, got an array");
        expect_error("{\"Data\":{\"RegisteredDevices\":{\"a/b\":\"x\"}},\"Checksum\":1}", -EINVAL,
                     "Data.RegisteredDevices[\"a/b\"]: expected an array of strings or null, got a string");
        expect_error("{\"Data\":{\"RegisteredDevices\":{\"a/b\":[null]}},\"Checksum\":1}", -EINVAL,
                     "Data.RegisteredDevices[\"a/b\"][0]: expected a string, got null");
}

static void test_mismatch_and_notes(void **state)
{
        (void)state;
        char text[sizeof(FILE_A) + 8];
        strcpy(text, FILE_A);
        char *p = strstr(text, "665642510");
        memcpy(p, "665642511", 9);
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_ckpt_decode(text, strlen(text), &cp, &err), 0);
        assert_int_equal(kdev_ckpt_verify(&cp, NULL, &err), -EBADMSG);
        assert_string_equal(err.msg, "checksum mismatch: stored 665642511, computed 665642510");
        kdev_ckpt_clear(&cp);

        /* Absent inner keys are Go nil (checksum of the all-null data), noted. */
        const char *t = "{\"Data\":{\"Extra\":1},\"Checksum\":1944006890,\"More\":2}";
        assert_int_equal(kdev_ckpt_decode(t, strlen(t), &cp, &err), 0);
        assert_int_equal(kdev_ckpt_verify(&cp, NULL, &err), 0);
        assert_int_equal(cp.n_notes, 4);
        assert_string_equal(cp.notes[0], "\"More\": unknown key ignored (kubelet ignores it too)");
        assert_string_equal(cp.notes[1], "Data.\"Extra\": unknown key ignored (kubelet ignores it too)");
        assert_string_equal(cp.notes[2], "Data.PodDeviceEntries: absent, read as null like kubelet");
        assert_string_equal(cp.notes[3], "Data.RegisteredDevices: absent, read as null like kubelet");
        kdev_ckpt_clear(&cp);
}

/* kubelet's checkpoint is read with the bounded reader: odd files are
 * refused at once (kdevctl checkpoint FIFO must not block). */
static void test_read_odd_files(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-ckpt-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256], want[600];
        snprintf(path, sizeof(path), "%s/%s", dir, KDEV_CKPT_FILE);
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};

        assert_int_equal(mkfifo(path, 0600), 0);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s: is not a regular file (a FIFO)", path);
        assert_string_equal(err.msg, want);
        unlink(path);

        assert_int_equal(symlink("/dev/zero", path), 0);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s: is not a regular file (a character device)", path);
        assert_string_equal(err.msg, want);
        unlink(path);

        assert_int_equal(mkdir(path, 0700), 0);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EISDIR);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", path);
        assert_string_equal(err.msg, want);
        rmdir(path);

        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(ftruncate(fileno(f), KDEV_CKPT_FILE_MAX + 1), 0);
        fclose(f);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EFBIG);
        snprintf(want, sizeof(want), "%s: the kubelet checkpoint is larger than 16777216 bytes",
                 path);
        assert_string_equal(err.msg, want);

        f = fopen(path, "w");
        assert_non_null(f);
        fwrite("{\"Data\":\0}", 1, 10, f);
        fclose(f);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EILSEQ);
        snprintf(want, sizeof(want), "%s: contains a NUL byte at offset 8", path);
        assert_string_equal(err.msg, want);
        unlink(path);
        rmdir(dir);
}

static void test_read_write(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-ckpt-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", dir, KDEV_CKPT_FILE);

        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -ENOENT);
        char want[512];
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(err.msg, want);

        /* Build Example B in memory like the device manager does. */
        static const uint8_t resp[] = {
                0x0a, 0x14, 0x0a, 0x0b, 'E', 'X', 'A', 'M', 'P', 'L', 'E', '_', 'G', 'P', 'U',
                0x12, 0x05, 'd', 'e', 'v', '-', '0', 0x2a, 0x17, 0x0a, 0x15, 'e', 'x', 'a', 'm',
                'p', 'l', 'e', '.', 'c', 'o', 'm', '/', 'g', 'p', 'u', '=', 'd', 'e', 'v', '-', '0'};
        const char *ids[] = {"dev-0", "dev-1"};
        assert_int_equal(kdev_ckpt_add_resource(&cp, "example.com/gpu", ids, 2), 0);
        struct kdev_ckpt_entry *e = kdev_ckpt_add_entry(&cp, "6b3c8a2e-1111-2222-3333-444455556666",
                                                        "ctr0", "example.com/gpu", resp, sizeof(resp));
        assert_non_null(e);
        assert_int_equal(kdev_ckpt_entry_add_id(e, 0, "dev-0"), 0);
        assert_int_equal(kdev_ckpt_write(path, &cp, &err), 0);
        assert_int_equal(cp.checksum, 688751658u);
        kdev_ckpt_clear(&cp);

        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char buf[1024];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        assert_string_equal(buf, FILE_B);

        assert_int_equal(kdev_ckpt_read(path, &cp, &err), 0);
        assert_int_equal(kdev_ckpt_verify(&cp, NULL, &err), 0);
        kdev_ckpt_clear(&cp);

        /* A file that does not decode is an error of the read itself. */
        f = fopen(path, "w");
        assert_non_null(f);
        fputs("{\"Data\":[],\"Checksum\":1}", f);
        fclose(f);
        assert_int_equal(kdev_ckpt_read(path, &cp, &err), -EINVAL);
        assert_string_equal(err.msg, "Data: expected an object, got an array");
        assert_int_equal(cp.n_entries, 0);
        kdev_ckpt_clear(&cp);

        /* Only the checkpoint is left: the temporary file was renamed. */
        DIR *d = opendir(dir);
        struct dirent *de;
        int files = 0;
        while ((de = readdir(d)) != NULL)
                if (de->d_name[0] != '.')
                        files++;
        closedir(d);
        assert_int_equal(files, 1);

        /* A write that cannot happen leaves an error, not a partial file. */
        char bad[300];
        snprintf(bad, sizeof(bad), "%s/missing/%s", dir, KDEV_CKPT_FILE);
        assert_int_equal(kdev_ckpt_write(bad, &cp, &err), -ENOENT);
        kdev_ckpt_clear(&cp);

        unlink(path);
        rmdir(dir);
}

static void test_base64(void **state)
{
        (void)state;
        static const struct {
                const char *raw, *b64;
        } v[] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}};
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
                char *s = kdev_base64_encode((const uint8_t *)v[i].raw, strlen(v[i].raw));
                assert_string_equal(s, v[i].b64);
                free(s);
                uint8_t *out;
                size_t len;
                assert_int_equal(kdev_base64_decode(v[i].b64, strlen(v[i].b64), &out, &len, NULL), 0);
                assert_int_equal(len, strlen(v[i].raw));
                assert_memory_equal(out, v[i].raw, len);
                free(out);
        }
        uint8_t *out;
        size_t len;
        assert_int_equal(kdev_base64_decode("Zm9v\r\nYg==", 10, &out, &len, NULL), 0);
        assert_int_equal(len, 4);
        free(out);
        struct kdev_err err = {0};
        assert_int_equal(kdev_base64_decode("Zg==Zg==", 8, &out, &len, &err), -EINVAL);
        assert_string_equal(err.msg, "illegal base64 data at input byte 4");
        assert_int_equal(kdev_base64_decode("Z===", 4, &out, &len, &err), -EINVAL);
        assert_int_equal(kdev_fnv1a32("", 0), 2166136261u);
        assert_int_equal(kdev_fnv1a32("a", 1), 0xe40c292cu);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_example_a),
                cmocka_unit_test(test_example_b),
                cmocka_unit_test(test_empty_and_null),
                cmocka_unit_test(test_numa_minus_one),
                cmocka_unit_test(test_numa_text_order_and_nils),
                cmocka_unit_test(test_string_escapes),
                cmocka_unit_test(test_v1_layout),
                cmocka_unit_test(test_broken),
                cmocka_unit_test(test_mismatch_and_notes),
                cmocka_unit_test(test_read_write),
                cmocka_unit_test(test_read_odd_files),
                cmocka_unit_test(test_base64),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
