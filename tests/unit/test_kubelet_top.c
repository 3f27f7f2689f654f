/* kdevctl top (src/kubelet/top.h, promtext.h): the Prometheus text reader
 * (escapes, comments, timestamps, malformed lines with their errors), the
 * view of a fixed kdev-plugin metrics text as its exact table and JSON (a
 * time-sliced GPU, MIG devices joined through their holder and by
 * memory, unattributed use, numeric order, label escapes), the view
 * without a usage sample, the address and URL options, and the HTTP GET
 * against a forked one-shot server (200, a status line, a truncated body,
 * an answer over 16 MiB, a silent server, nobody listening). */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kubelet/promtext.h"
#include "kubelet/top.h"

#define DEV(gpu, uuid, bus, minor, gi_profile, gi, ns, pod, ctr)                              \
        "{gpu=\"" gpu "\",UUID=\"" uuid "\",pci_bus_id=\"" bus "\",device=\"nvidia" minor      \
        "\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\",GPU_I_PROFILE=\"" gi_profile \
        "\",GPU_I_ID=\"" gi "\",namespace=\"" ns "\",pod=\"" pod "\",container=\"" ctr "\"}"
#define G0 DEV("0", "GPU-a", "00000000:07:00.0", "0", "", "", "", "", "")
#define G10 DEV("10", "GPU-k", "00000000:9F:00.0", "10", "", "", "", "", "")
#define M5 DEV("1", "GPU-b", "00000000:0F:00.0", "1", "1g.10gb", "5", "ml", "mig-0", "main")
#define M3 DEV("1", "GPU-b", "00000000:0F:00.0", "1", "1g.10gb", "3", "", "", "")
#define WHO(ns, pod, ctr, uuid, gpu)                                                             \
        "{namespace=\"" ns "\",pod=\"" pod "\",container=\"" ctr "\",UUID=\"" uuid "\",gpu=\"" \
        gpu "\""

/* kdev-plugin's usage families, as src/metrics/usage_metrics.c renders
 * them (label order included); GPU 1 has two MIG devices: GI 5 held by one
 * container (its pod labels), GI 3 by nobody but an unattributed process. */
static const char METRICS[] =
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        "DCGM_FI_DEV_GPU_UTIL" G10 " 5\n"
        "DCGM_FI_DEV_GPU_UTIL" G0 " 40\n"
        "# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge\n"
        "DCGM_FI_DEV_MEM_COPY_UTIL" G0 " 7\n"
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        "DCGM_FI_DEV_FB_USED" G0 " 4096\n"
        "DCGM_FI_DEV_FB_USED" M5 " 300\n"
        "DCGM_FI_DEV_FB_USED" M3 " 13\n"
        "DCGM_FI_DEV_FB_USED" G10 " 0\n"
        "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        "DCGM_FI_DEV_FB_FREE" G0 " 36863\n"
        "# TYPE DCGM_FI_DEV_FB_TOTAL gauge\n"
        "DCGM_FI_DEV_FB_TOTAL" G0 " 40960\n"
        "DCGM_FI_DEV_FB_TOTAL" M5 " 9856\n"
        "DCGM_FI_DEV_FB_TOTAL" M3 " 9856\n"
        "DCGM_FI_DEV_FB_TOTAL" G10 " 40960\n"
        "# TYPE kdev_container_gpu_memory_used_bytes gauge\n"
        "kdev_container_gpu_memory_used_bytes" WHO("web", "infer-7", "server", "GPU-a", "0")
        ",source=\"processes\"} 3145728000\n"
        "kdev_container_gpu_memory_used_bytes" WHO("ml", "train-0", "trainer", "GPU-a", "0")
        ",source=\"processes\"} 1073741824\n"
        "kdev_container_gpu_memory_used_bytes" WHO("ml", "mig-0", "main", "MIG-c", "1")
        ",source=\"region\"} 268435456\n"
        "# TYPE kdev_container_gpu_memory_limit_bytes gauge\n"
        "kdev_container_gpu_memory_limit_bytes" WHO("ml", "mig-0", "main", "MIG-c", "1")
        "} 10334765056\n"
        "# TYPE kdev_container_gpu_compute_share_percent gauge\n"
        "kdev_container_gpu_compute_share_percent" WHO("ml", "mig-0", "main", "MIG-c", "1")
        "} 100\n"
        "# TYPE kdev_container_gpu_replicas gauge\n"
        "kdev_container_gpu_replicas" WHO("ml", "train-0", "trainer", "GPU-a", "0")
        ",resource=\"nvidia.com/gpu\"} 2\n"
        "kdev_container_gpu_replicas" WHO("web", "infer-7", "server", "GPU-a", "0")
        ",resource=\"nvidia.com/gpu\"} 1\n"
        "kdev_container_gpu_replicas" WHO("ml", "mig-0", "main", "MIG-c", "1")
        ",resource=\"nvidia.com/mig-1g.10gb\"} 1\n"
        "# TYPE kdev_container_gpu_sm_utilization_percent gauge\n"
        "kdev_container_gpu_sm_utilization_percent" WHO("ml", "train-0", "trainer", "GPU-a", "0")
        "} 30\n"
        "# TYPE kdev_gpu_unattributed_memory_bytes gauge\n"
        "kdev_gpu_unattributed_memory_bytes{UUID=\"GPU-a\",gpu=\"0\",reason=\"host\"} 52428800\n"
        "kdev_gpu_unattributed_memory_bytes{UUID=\"MIG-d\",gpu=\"1\",reason=\"no_cgroup\"} 8388608\n"
        "# TYPE kdev_gpu_unattributed_processes gauge\n"
        "kdev_gpu_unattributed_processes{UUID=\"GPU-a\",gpu=\"0\",reason=\"host\"} 1\n"
        "kdev_gpu_unattributed_processes{UUID=\"MIG-d\",gpu=\"1\",reason=\"no_cgroup\"} 2\n"
        "# TYPE kdev_usage_attribution_failures_total counter\n"
        "kdev_usage_attribution_failures_total{reason=\"host\"} 1\n"
        "# TYPE kdev_usage_last_sample_timestamp_seconds gauge\n"
        "kdev_usage_last_sample_timestamp_seconds 1764700000.5\n"
        "kdev_gpu_devices{gpu=\"GPU-a\",resource=\"nvidia.com/gpu\"} 4\n";

static const char TABLE[] =
        "GPU   GI   NAME                                      UTIL   MEMORY-MIB     REPLICAS   SHARE   SM\n"
        "0     -    NVIDIA A100-SXM4-40GB                     40%    4096 / 40960\n"
        "             ml/train-0/trainer                             1024 / -       2          -       30%\n"
        "             web/infer-7/server                             3000 / -       1          -       -\n"
        "             unattributed (host): 1 process                 50\n"
        "1     -    NVIDIA A100-SXM4-40GB                     -      -\n"
        "1     3    NVIDIA A100-SXM4-40GB MIG 1g.10gb         -      13 / 9856\n"
        "             unattributed (no_cgroup): 2 processes          8\n"
        "1     5    NVIDIA A100-SXM4-40GB MIG 1g.10gb         -      300 / 9856\n"
        "             ml/mig-0/main                                  256 / 9856     1          100%    -\n"
        "10    -    NVIDIA A100-SXM4-40GB                     5%     0 / 40960\n";

static const char JSON_TEXT[] =
        "{\"gpus\": ["
        "{\"gpu\": \"0\", \"uuid\": \"GPU-a\", \"migUuid\": null, \"model\": \"NVIDIA A100-SXM4-40GB\", "
        "\"migProfile\": null, \"gpuInstanceId\": null, \"utilizationPercent\": 40, "
        "\"memoryUsedMiB\": 4096, \"memoryTotalMiB\": 40960, \"containers\": ["
        "{\"namespace\": \"ml\", \"pod\": \"train-0\", \"container\": \"trainer\", \"replicas\": 2, "
        "\"memoryUsedBytes\": 1073741824, \"memoryLimitBytes\": null, \"computeSharePercent\": null, "
        "\"smUtilizationPercent\": 30}, "
        "{\"namespace\": \"web\", \"pod\": \"infer-7\", \"container\": \"server\", \"replicas\": 1, "
        "\"memoryUsedBytes\": 3145728000, \"memoryLimitBytes\": null, \"computeSharePercent\": null, "
        "\"smUtilizationPercent\": null}], "
        "\"unattributed\": [{\"reason\": \"host\", \"processes\": 1, \"memoryBytes\": 52428800}]}, "
        "{\"gpu\": \"1\", \"uuid\": \"GPU-b\", \"migUuid\": null, \"model\": \"NVIDIA A100-SXM4-40GB\", "
        "\"migProfile\": null, \"gpuInstanceId\": null, \"utilizationPercent\": null, "
        "\"memoryUsedMiB\": null, \"memoryTotalMiB\": null, \"containers\": [], \"unattributed\": []}, "
        "{\"gpu\": \"1\", \"uuid\": \"GPU-b\", \"migUuid\": \"MIG-d\", \"model\": \"NVIDIA A100-SXM4-40GB\", "
        "\"migProfile\": \"1g.10gb\", \"gpuInstanceId\": 3, \"utilizationPercent\": null, "
        "\"memoryUsedMiB\": 13, \"memoryTotalMiB\": 9856, \"containers\": [], "
        "\"unattributed\": [{\"reason\": \"no_cgroup\", \"processes\": 2, \"memoryBytes\": 8388608}]}, "
        "{\"gpu\": \"1\", \"uuid\": \"GPU-b\", \"migUuid\": \"MIG-c\", \"model\": \"NVIDIA A100-SXM4-40GB\", "
        "\"migProfile\": \"1g.10gb\", \"gpuInstanceId\": 5, \"utilizationPercent\": null, "
        "\"memoryUsedMiB\": 300, \"memoryTotalMiB\": 9856, \"containers\": ["
        "{\"namespace\": \"ml\", \"pod\": \"mig-0\", \"container\": \"main\", \"replicas\": 1, "
        "\"memoryUsedBytes\": 268435456, \"memoryLimitBytes\": 10334765056, "
        "\"computeSharePercent\": 100, \"smUtilizationPercent\": null}], \"unattributed\": []}, "
        "{\"gpu\": \"10\", \"uuid\": \"GPU-k\", \"migUuid\": null, \"model\": \"NVIDIA A100-SXM4-40GB\", "
        "\"migProfile\": null, \"gpuInstanceId\": null, \"utilizationPercent\": 5, "
        "\"memoryUsedMiB\": 0, \"memoryTotalMiB\": 40960, \"containers\": [], \"unattributed\": []}], "
        "\"lastSampleTimestamp\": 1764700000.5}";

static char *table_of(const char *text)
{
        struct kdev_err err = {0};
        struct kdev_top *v = kdev_top_new(text, strlen(text), &err);
        if (!v)
                fail_msg("%s", err.msg);
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        assert_non_null(f);
        assert_int_equal(kdev_top_print_table(v, f), 0);
        fclose(f);
        kdev_top_free(v);
        return out;
}

static char *json_of(const char *text)
{
        struct kdev_top *v = kdev_top_new(text, strlen(text), NULL);
        assert_non_null(v);
        json_t *j = kdev_top_json(v);
        assert_non_null(j);
        char *s = json_dumps(j, JSON_PRESERVE_ORDER);
        json_decref(j);
        kdev_top_free(v);
        return s;
}

static void test_view(void **state)
{
        (void)state;
        char *t = table_of(METRICS);
        assert_string_equal(t, TABLE);
        free(t);
        char *j = json_of(METRICS);
        assert_string_equal(j, JSON_TEXT);
        free(j);
        struct kdev_top *v = kdev_top_new(METRICS, strlen(METRICS), NULL);
        double when = 0;
        assert_true(kdev_top_sampled(v, &when));
        assert_true(when == 1764700000.5);
        kdev_top_free(v);
}

/* Two MIG devices of one GPU, no holder to tell them apart: each MIG UUID
 * of the kdev series gets a row of its own, GPU instance unknown. Label
 * escapes reach the table with control characters as '?'. */
static void test_unjoined_and_escapes(void **state)
{
        (void)state;
        const char *text =
                "DCGM_FI_DEV_FB_USED{gpu=\"2\",UUID=\"GPU-e\",modelName=\"A \\\"B\\\"\\\\C\\nD\","
                "GPU_I_PROFILE=\"\",GPU_I_ID=\"\"} 1\n"
                "DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-b\",modelName=\"M\",GPU_I_PROFILE=\"1g.5gb\","
                "GPU_I_ID=\"9\",pod=\"\"} 2\n"
                "DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-b\",modelName=\"M\",GPU_I_PROFILE=\"1g.5gb\","
                "GPU_I_ID=\"10\"} 3\n"
                "kdev_container_gpu_replicas{namespace=\"a\",pod=\"p\",container=\"c\",UUID=\"MIG-y\","
                "gpu=\"1\",resource=\"r\"} 1\n"
                "kdev_container_gpu_replicas{namespace=\"a\",pod=\"q\",container=\"c\",UUID=\"MIG-x\","
                "gpu=\"1\",resource=\"r\"} 1\n"
                "kdev_container_gpu_memory_used_bytes{namespace=\"a\",pod=\"q\",container=\"c\","
                "UUID=\"MIG-x\",gpu=\"1\",source=\"processes\"} 1572864\n"
                "kdev_usage_last_sample_timestamp_seconds 1\n";
        char *t = table_of(text);
        assert_string_equal(t,
                "GPU   GI   NAME           UTIL   MEMORY-MIB   REPLICAS   SHARE   SM\n"
                "1     -    M              -      -\n"
                "1     9    M MIG 1g.5gb   -      2 / -\n"
                "1     10   M MIG 1g.5gb   -      3 / -\n"
                "1     ?    M MIG MIG-x    -      -\n"
                "             a/q/c               1 / -        1          -       -\n"
                "1     ?    M MIG MIG-y    -      -\n"
                "             a/p/c               - / -        1          -       -\n"
                "2     -    A \"B\"\\C?D      -      1 / -\n");
        free(t);
        char *j = json_of(text);
        assert_non_null(strstr(j, "\"model\": \"A \\\"B\\\"\\\\C\\nD\""));
        assert_non_null(strstr(j, "{\"gpu\": \"1\", \"uuid\": \"GPU-b\", \"migUuid\": \"MIG-x\", "
                                  "\"model\": \"M\", \"migProfile\": null, \"gpuInstanceId\": null"));
        free(j);
        /* not UTF-8: JSON has the non-ASCII bytes as '?' */
        j = json_of("DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-\xc3\xa9\",modelName=\"A\xff\xc3\"} 1\n"
                    "kdev_usage_last_sample_timestamp_seconds 1\n");
        assert_non_null(strstr(j, "\"uuid\": \"GPU-\u00e9\", \"migUuid\": null, \"model\": \"A??\""));
        free(j);
}

/* No holder: a MIG UUID joins the one device left whose FB_USED holds its
 * processes' memory (100 MiB: GI 10 only), then the last one the last
 * device; a share region's sum does not count. */
static void test_join_by_memory(void **state)
{
        (void)state;
        const char *text =
                "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",modelName=\"M\",GPU_I_PROFILE=\"p\","
                "GPU_I_ID=\"9\"} 0\n"
                "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",modelName=\"M\",GPU_I_PROFILE=\"p\","
                "GPU_I_ID=\"10\"} 100\n"
                "kdev_container_gpu_memory_used_bytes{namespace=\"a\",pod=\"p\",container=\"c\","
                "UUID=\"MIG-v\",gpu=\"0\",source=\"region\"} 524288000\n"
                "kdev_gpu_unattributed_processes{UUID=\"MIG-w\",gpu=\"0\",reason=\"host\"} 1\n"
                "kdev_gpu_unattributed_memory_bytes{UUID=\"MIG-w\",gpu=\"0\",reason=\"host\"} "
                "104857600\n"
                "kdev_usage_last_sample_timestamp_seconds 1\n";
        char *t = table_of(text);
        assert_string_equal(t,
                "GPU   GI   NAME                               UTIL   MEMORY-MIB   REPLICAS   SHARE   SM\n"
                "0     -    M                                  -      -\n"
                "0     9    M MIG p                            -      0 / -\n"
                "             a/p/c                                   500 / -      -          -       -\n"
                "0     10   M MIG p                            -      100 / -\n"
                "             unattributed (host): 1 process          100\n");
        free(t);
}

/* usage.interval unset: no usage series; the GPUs from kdev_gpu_devices. */
static void test_no_sample(void **state)
{
        (void)state;
        const char *text = "# TYPE kdev_gpu_devices gauge\n"
                           "kdev_gpu_devices{gpu=\"GPU-b\",resource=\"nvidia.com/gpu\"} 2\n"
                           "kdev_gpu_devices{gpu=\"GPU-a\",resource=\"nvidia.com/gpu\"} 2\n"
                           "kdev_gpu_devices{gpu=\"GPU-a\",resource=\"nvidia.com/gpu.shared\"} 2\n"
                           "kdev_devices{resource=\"nvidia.com/gpu\",health=\"Healthy\"} 4\n";
        char *t = table_of(text);
        assert_string_equal(t,
                "GPU   GI   NAME    UTIL   MEMORY-MIB   REPLICAS   SHARE   SM\n"
                "-     -    GPU-a   -      -\n"
                "-     -    GPU-b   -      -\n"
                "no usage samples yet (is usage.interval set in kdev-plugin's config?)\n");
        free(t);
        char *j = json_of(text);
        assert_string_equal(j,
                "{\"gpus\": [{\"gpu\": null, \"uuid\": \"GPU-a\", \"migUuid\": null, \"model\": null, "
                "\"migProfile\": null, \"gpuInstanceId\": null, \"utilizationPercent\": null, "
                "\"memoryUsedMiB\": null, \"memoryTotalMiB\": null, \"containers\": [], "
                "\"unattributed\": []}, {\"gpu\": null, \"uuid\": \"GPU-b\", \"migUuid\": null, "
                "\"model\": null, \"migProfile\": null, \"gpuInstanceId\": null, "
                "\"utilizationPercent\": null, \"memoryUsedMiB\": null, \"memoryTotalMiB\": null, "
                "\"containers\": [], \"unattributed\": []}], \"lastSampleTimestamp\": null}");
        free(j);
        t = table_of("");
        assert_string_equal(t, "no usage samples yet (is usage.interval set in kdev-plugin's "
                               "config?)\n");
        free(t);
        t = table_of("kdev_usage_last_sample_timestamp_seconds 5\n");
        assert_string_equal(t, "no GPU in kdev-plugin's usage sample\n");
        free(t);
}

static void test_parse(void **state)
{
        (void)state;
        const char *text = "# HELP x help with \"quotes\n"
                           "\n"
                           "  a_b:c 1.5\n"
                           "m{l=\"x\\\\y\\\"z\\nw\", k = \"\" ,} -Inf 1700000000000\n"
                           "n{}\tNaN\n"
                           "o{a=\"1\"} +Inf -12\n";
        struct kdev_prom_text t = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_prom_parse(text, strlen(text), &t, &err), 0);
        assert_int_equal(t.n_samples, 4);
        assert_string_equal(t.samples[0].name, "a_b:c");
        assert_true(t.samples[0].value == 1.5);
        assert_int_equal(t.samples[0].line, 3);
        assert_string_equal(t.samples[1].name, "m");
        assert_int_equal(t.samples[1].n_labels, 2);
        assert_string_equal(kdev_prom_label(&t, &t.samples[1], "l"), "x\\y\"z\nw");
        assert_string_equal(kdev_prom_label(&t, &t.samples[1], "k"), "");
        assert_null(kdev_prom_label(&t, &t.samples[1], "zz"));
        assert_true(t.samples[1].value < -1e308);
        assert_true(t.samples[2].value != t.samples[2].value); /* NaN */
        assert_int_equal(t.samples[2].n_labels, 0);
        assert_string_equal(kdev_prom_label(&t, &t.samples[3], "a"), "1");
        kdev_prom_text_clear(&t);

        static const struct {
                const char *text, *msg;
        } bad[] = {
                {"a 1\nb{x=\"1\"", "line 2: truncated (the text does not end with a newline)"},
                {"a{x=\"1} 2\n", "line 1: label x: unterminated value (no closing \")"},
                {"a{x=\"1\\\n", "line 1: label x: unterminated value (no closing \")"},
                {"a{x=\"\\t\"} 2\n", "line 1: label x: invalid escape: backslash before 't' "
                                     "(want \\\\, \\\" or \\n)"},
                {"a{x=1} 2\n", "line 1: label x: expected a quoted value, found '1'"},
                {"a{x=\"1\" y=\"2\"} 2\n",
                 "line 1: label x: expected ',' or '}' after the value, found 'y'"},
                {"a{x=\"1\",x=\"2\"} 2\n", "line 1: a: label x given twice"},
                {"a{x} 2\n", "line 1: a: expected '=' after a label name, found '}'"},
                {"a{1=\"\"} 2\n", "line 1: a: expected a label name or '}', found '1'"},
                {"# ok\na\n", "line 2: a: no value"},
                {"a{x=\"1\"}\n", "line 1: a: no value"},
                {"a 12abc\n", "line 1: a: invalid value \"12abc\""},
                {"a 1 2 3\n", "line 1: a: unexpected text after the timestamp"},
                {"a 1 1.5\n", "line 1: a: invalid timestamp \"1.5\""},
                {"a-b 1\n", "line 1: a: unexpected '-' after the metric name"},
                {"1a 1\n", "line 1: expected a metric name, found '1'"},
                {"a 1\r\n", "line 1: a: invalid value \"1\r\""},
                {"a\x01 1\n", "line 1: a: unexpected \\x01 after the metric name"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_prom_text bt = {0};
                assert_int_equal(kdev_prom_parse(bad[i].text, strlen(bad[i].text), &bt, &err),
                                 -EINVAL);
                assert_string_equal(err.msg, bad[i].msg);
                assert_null(bt.buf);
                assert_int_equal(bt.n_samples, 0);
        }
        /* a NUL byte, a huge line (the view reports the parser's error) */
        assert_int_equal(kdev_prom_parse("a 1\nb\0 1\n", 9, &t, &err), -EINVAL);
        assert_string_equal(err.msg, "line 2: NUL byte");
        size_t n = KDEV_PROM_MAX_LINE + 10;
        char *huge = malloc(n + 1);
        assert_non_null(huge);
        memcpy(huge, "a 1\n", 4);
        memset(huge + 4, 'x', n - 4);
        huge[n - 1] = '\n';
        huge[n] = '\0';
        assert_null(kdev_top_new(huge, n, &err));
        assert_string_equal(err.msg, "line 2: longer than 65536 bytes");
        huge[n - 1] = 'x'; /* and without its newline */
        assert_null(kdev_top_new(huge, n, &err));
        assert_string_equal(err.msg, "line 2: longer than 65536 bytes");
        free(huge);
}

static void test_targets(void **state)
{
        (void)state;
        struct kdev_top_target t;
        struct kdev_err err = {0};
        assert_int_equal(kdev_top_parse_address("127.0.0.1:9400", &t, &err), 0);
        assert_string_equal(t.host, "127.0.0.1");
        assert_string_equal(t.port, "9400");
        assert_string_equal(t.path, "/metrics");
        assert_string_equal(t.addr, "127.0.0.1:9400");
        assert_int_equal(kdev_top_parse_address("[::1]:80", &t, &err), 0);
        assert_string_equal(t.host, "::1");
        assert_string_equal(t.addr, "[::1]:80");
        assert_int_equal(kdev_top_parse_address(":9400", &t, &err), 0);
        assert_string_equal(t.addr, "127.0.0.1:9400");
        assert_int_equal(kdev_top_parse_address("node-1.example:65535", &t, &err), 0);
        assert_string_equal(t.host, "node-1.example");
        const char *bad_addr[] = {"", "host", "host:", "host:0", "host:65536", "host:9x",
                                  "::1:80", "[::1]80", "[]:80", "a b:1", "a/b:1"};
        for (size_t i = 0; i < sizeof(bad_addr) / sizeof(bad_addr[0]); i++) {
                assert_int_equal(kdev_top_parse_address(bad_addr[i], &t, &err), -EINVAL);
                char want[512];
                snprintf(want, sizeof(want),
                         "invalid --metrics-address \"%s\" (want HOST:PORT, e.g. 127.0.0.1:9400 "
                         "or [::1]:9400)", bad_addr[i]);
                assert_string_equal(err.msg, want);
        }
        assert_int_equal(kdev_top_parse_url("http://10.0.0.5:9400/metrics", &t, &err), 0);
        assert_string_equal(t.addr, "10.0.0.5:9400");
        assert_string_equal(t.path, "/metrics");
        assert_int_equal(kdev_top_parse_url("http://node:80", &t, &err), 0);
        assert_string_equal(t.addr, "node:80");
        assert_string_equal(t.path, "/");
        assert_int_equal(kdev_top_parse_url("http://[::1]:9400/m?x=1", &t, &err), 0);
        assert_string_equal(t.addr, "[::1]:9400");
        assert_string_equal(t.path, "/m?x=1");
        assert_int_equal(kdev_top_parse_url("http://n:1?x", &t, &err), 0);
        assert_string_equal(t.path, "/?x");
        const char *bad_url[] = {"https://h:1/metrics", "h:1/metrics", "http://", "http:///m",
                                 "http://h:0/", "http://h:1/a b", "http://h:1/#x", "http://node/m",
                                 "http://[::1]/m", "http"};
        for (size_t i = 0; i < sizeof(bad_url) / sizeof(bad_url[0]); i++) {
                assert_int_equal(kdev_top_parse_url(bad_url[i], &t, &err), -EINVAL);
                char want[512];
                snprintf(want, sizeof(want),
                         "invalid --metrics-url \"%s\" (want http://HOST:PORT/PATH, e.g. "
                         "http://127.0.0.1:9400/metrics)", bad_url[i]);
                assert_string_equal(err.msg, want);
        }
}

/* A listening socket on 127.0.0.1 and a child that answers one connection
 * with |answer| (NULL: reads and never answers) then exits. */
static pid_t serve(const char *answer, size_t len, struct kdev_top_target *t)
{
        int l = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(l >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof(a);
        assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(l, 1), 0);
        assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
        char addr[32];
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
        assert_int_equal(kdev_top_parse_address(addr, t, NULL), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                int c = accept(l, NULL, NULL);
                char req[2048];
                ssize_t n = c >= 0 ? recv(c, req, sizeof(req) - 1, 0) : -1;
                int ok = n > 0 && strncmp(req, "GET /metrics HTTP/1.0\r\n", 23) == 0;
                if (answer && ok && write(c, answer, len) != (ssize_t)len)
                        ok = 0;
                if (!answer)
                        pause();
                _exit(ok ? 0 : 3);
        }
        close(l);
        return pid;
}

static void test_http_get(void **state)
{
        (void)state;
        struct kdev_top_target t;
        struct kdev_err err = {0};
        char *body;
        size_t len;
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                                 "Content-Length: 4\r\n\r\na 1\n";
        pid_t pid = serve(ok, sizeof(ok) - 1, &t);
        assert_int_equal(kdev_top_http_get(&t, 5000, &body, &len, &err), 0);
        assert_int_equal(len, 4);
        assert_string_equal(body, "a 1\n");
        free(body);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_int_equal(st, 0);

        static const struct {
                const char *answer, *msg;
        } bad[] = {
                {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                 "answered \"HTTP/1.1 404 Not Found\""},
                {"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\na 1\n", ": answer truncated (4 of 10 bytes)"},
                {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na 1\n\r\n0\r\n\r\n",
                 ": Transfer-Encoding chunked refused (an HTTP/1.0 request was sent)"},
                {"SSH-2.0-OpenSSH\r\n", ": not an HTTP answer"},
                {"", ": empty answer"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                pid = serve(bad[i].answer, strlen(bad[i].answer), &t);
                assert_true(kdev_top_http_get(&t, 5000, &body, &len, &err) < 0);
                assert_null(body);
                char want[512];
                snprintf(want, sizeof(want), "kdev-plugin's metrics at %s%s%s", t.addr,
                         bad[i].msg[0] == ':' ? "" : " ", bad[i].msg);
                assert_string_equal(err.msg, want);
                assert_int_equal(waitpid(pid, &st, 0), pid);
        }
        /* more than 16 MiB */
        size_t big_n = KDEV_TOP_MAX_ANSWER + 4096;
        char *big = malloc(big_n);
        assert_non_null(big);
        memset(big, 'a', big_n);
        memcpy(big, "HTTP/1.1 200 OK\r\n\r\n", 19);
        pid = serve(big, big_n, &t);
        assert_int_equal(kdev_top_http_get(&t, 5000, &body, &len, &err), -EFBIG);
        char msg[512];
        snprintf(msg, sizeof(msg), "kdev-plugin's metrics at %s: answer larger than 16 MiB", t.addr);
        assert_string_equal(err.msg, msg);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        free(big);
        /* a server that never answers: the deadline */
        pid = serve(NULL, 0, &t);
        assert_int_equal(kdev_top_http_get(&t, 300, &body, &len, &err), -ETIMEDOUT);
        char want[512];
        snprintf(want, sizeof(want), "kdev-plugin's metrics at %s: no complete answer within "
                                     "0.3 s", t.addr);
        assert_string_equal(err.msg, want);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        /* nobody listens there any more */
        assert_int_equal(kdev_top_http_get(&t, 5000, &body, &len, &err), -ECONNREFUSED);
        snprintf(want, sizeof(want), "cannot reach kdev-plugin's metrics at %s: Connection "
                                     "refused (is kdev-plugin running with --metrics-address?)",
                 t.addr);
        assert_string_equal(err.msg, want);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_view),
                cmocka_unit_test(test_unjoined_and_escapes),
                cmocka_unit_test(test_join_by_memory),
                cmocka_unit_test(test_no_sample),
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_targets),
                cmocka_unit_test(test_http_get),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
