/* kdev-plugin's usage metering loop (src/nvidia/usage_loop.h) in the
 * daemon, in-process on the mock NVML: at each sample it asks a
 * PodResources server (here on a thread of the test: List answered with one
 * container holding a time-slicing replica) and reads kubelet's log names
 * (pods/, containers/ of --pod-log-dir) for the pod UID and container ID; the
 * replica is resolved to its GPU's UUID through the served resources, the
 * mock's process is matched by its cgroup, and the metrics endpoint then
 * shows the container's series. The mock is found as
 * <driver root>/usr/lib64/libnvidia-ml.so.1. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "daemon/dp_daemon.h"
#include "nvidia/config.h"
#include "podres/client.h"
#include "podresources/v1/api.pb-c.h"
#include "rpc/rpc.h"

#define GPU0 "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e"
#define CID "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
#define CID_OTHER "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"
#define UID_ "0f5c4ac8_8fd7_4a9c_9d63_4b1f1e2f3a4b"
#define UID_DASHES "0f5c4ac8-8fd7-4a9c-9d63-4b1f1e2f3a4b"

static char root[64];
static unsigned port;
static char scraped[1 << 17];
static bool found;

/* --- the PodResources server, on a thread with its own loop ---------------- */

static uv_loop_t srv_loop;
static uv_async_t srv_stop;
static struct kdev_rpc_server *srv;
static char srv_path[PATH_MAX];
static volatile int lists;

static void on_list(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *arg)
{
        (void)req;
        (void)len;
        (void)arg;
        char *ids[] = {GPU0 "::1"};
        V1__ContainerDevices cd = V1__CONTAINER_DEVICES__INIT;
        cd.resource_name = "nvidia.com/gpu";
        cd.device_ids = ids;
        cd.n_device_ids = 1;
        V1__ContainerDevices *cds[] = {&cd};
        V1__ContainerResources c = V1__CONTAINER_RESOURCES__INIT;
        c.name = "trainer";
        c.devices = cds;
        c.n_devices = 1;
        V1__ContainerResources *cs[] = {&c};
        V1__PodResources p = V1__POD_RESOURCES__INIT;
        p.name = "train-0";
        p.namespace_ = "ml";
        p.containers = cs;
        p.n_containers = 1;
        V1__PodResources *ps[] = {&p};
        V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
        r.pod_resources = ps;
        r.n_pod_resources = 1;
        lists++;
        kdev_rpc_call_reply_pb(call, &r.base);
}

static void srv_closed(void *arg)
{
        (void)arg;
}

static void on_srv_stop(uv_async_t *a)
{
        kdev_rpc_server_close(srv, srv_closed, NULL);
        uv_close((uv_handle_t *)a, NULL);
}

static void *srv_main(void *arg)
{
        (void)arg;
        uv_run(&srv_loop, UV_RUN_DEFAULT);
        return NULL;
}

static pthread_t srv_thread;

static void srv_start(void)
{
        snprintf(srv_path, sizeof(srv_path), "%s/pod-resources.sock", root);
        assert_int_equal(uv_loop_init(&srv_loop), 0);
        srv = kdev_rpc_server_new(&srv_loop, NULL);
        assert_non_null(srv);
        assert_int_equal(kdev_rpc_server_add_method(srv, KDEV_PODRES_LIST, false, on_list, NULL),
                         0);
        struct kdev_err err = {0};
        assert_int_equal(kdev_rpc_server_listen_unix(srv, srv_path, &err), 0);
        assert_int_equal(uv_async_init(&srv_loop, &srv_stop, on_srv_stop), 0);
        assert_int_equal(pthread_create(&srv_thread, NULL, srv_main, NULL), 0);
}

static void srv_end(void)
{
        uv_async_send(&srv_stop);
        pthread_join(srv_thread, NULL);
        uv_run(&srv_loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&srv_loop), 0);
}

static void put(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static unsigned free_port(void)
{
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t n = sizeof(a);
        assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(s, (struct sockaddr *)&a, &n), 0);
        close(s);
        return ntohs(a.sin_port);
}

/* GET /metrics into |scraped|; 0 or -1. */
static int get_metrics(void)
{
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
                close(s);
                return -1;
        }
        const char *req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
        if (write(s, req, strlen(req)) < 0) {
                close(s);
                return -1;
        }
        size_t n = 0;
        ssize_t r;
        while (n < sizeof(scraped) - 1 && (r = read(s, scraped + n, sizeof(scraped) - 1 - n)) > 0)
                n += (size_t)r;
        scraped[n] = '\0';
        close(s);
        return 0;
}

#define WANT_USED                                                                          \
        "kdev_container_gpu_memory_used_bytes{namespace=\"ml\",pod=\"train-0\","           \
        "container=\"trainer\",UUID=\"" GPU0 "\",gpu=\"0\",source=\"processes\"} 1073741824\n"

/* Scrapes until the container's series is there (or 60 s), then stops the
 * daemon with SIGTERM. */
static void *scraper(void *arg)
{
        (void)arg;
        for (int i = 0; i < 600 && !found; i++) {
                if (get_metrics() == 0 && strstr(scraped, WANT_USED))
                        found = true;
                else
                        usleep(100000);
        }
        kill(getpid(), SIGTERM);
        return NULL;
}

static pthread_t thread;

static void started(void *arg, struct kdev_dp_daemon *d)
{
        (void)arg;
        (void)d;
        assert_int_equal(pthread_create(&thread, NULL, scraper, NULL), 0);
}

static void test_map_to_series(void **state)
{
        (void)state;
        strcpy(root, "/tmp/kdev-dp-usage-XXXXXX");
        assert_non_null(mkdtemp(root));
        char path[PATH_MAX], cmd[PATH_MAX * 2];
        snprintf(cmd, sizeof(cmd),
                 "mkdir -p %s/driver/usr/lib64 %s/proc/100 %s/dp %s/log/pods/ml_train-0_" UID_DASHES
                 " %s/log/containers && ln -s %s %s/driver/usr/lib64/libnvidia-ml.so.1 && "
                 "ln -s /dev/null %s/log/containers/train-0_ml_trainer-" CID ".log && "
                 "ln -s /dev/null %s/log/containers/train-0_ml_sidecar-" CID_OTHER ".log",
                 root, root, root, root, root, KDEV_MOCK_NVML_LIB, root, root, root);
        assert_int_equal(system(cmd), 0);
        snprintf(path, sizeof(path), "%s/proc/100/cgroup", root);
        put(path, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                  ".slice/cri-containerd-" CID ".scope\n");
        snprintf(path, sizeof(path), "%s/control", root);
        put(path, "proc " GPU0 " 100 1073741824\n");
        setenv("KDEV_MOCK_NVML_CONTROL", path, 1);
        setenv("KDEV_MOCK_NVML_TOPOLOGY",
               KDEV_MOCK_NVML_TOPOLOGIES "/h100-80gb-8x-nvswitch.yaml", 1);
        setenv("NODE_NAME", "node-t", 1);
        char config[PATH_MAX];
        snprintf(config, sizeof(config), "%s/config.yaml", root);
        put(config, "version: v1\n"
                    "flags:\n"
                    "  failOnInitError: true\n"
                    "sharing:\n"
                    "  timeSlicing:\n"
                    "    resources:\n"
                    "      - name: nvidia.com/gpu\n"
                    "        replicas: 2\n"
                    "usage:\n"
                    "  interval: 1\n");

        struct kdev_nvidia_config nv;
        struct kdev_err err = {0};
        assert_int_equal(kdev_nvidia_config_init(&nv, &err), 0);
        char driver[PATH_MAX], proc[PATH_MAX], dp[PATH_MAX], cdi[PATH_MAX], address[64];
        snprintf(driver, sizeof(driver), "%s/driver", root);
        snprintf(proc, sizeof(proc), "%s/proc", root);
        snprintf(dp, sizeof(dp), "%s/dp", root);
        snprintf(cdi, sizeof(cdi), "%s/cdi", root);
        assert_int_equal(kdev_nvidia_config_apply_flag(&nv, "driver-root", driver, &err), 0);
        assert_int_equal(kdev_nvidia_config_apply_flag(&nv, "proc-root", proc, &err), 0);
        assert_int_equal(kdev_nvidia_config_apply_flag(&nv, "cdi-dir", cdi, &err), 0);
        port = free_port();
        srv_start();
        char logs[PATH_MAX];
        snprintf(logs, sizeof(logs), "%s/log", root);
        snprintf(address, sizeof(address), "127.0.0.1:%u", port);
        struct kdev_dp_daemon_options o = {
                .config = config,
                .dp = {.plugin_dir = dp},
                .metrics_address = address,
                .nv = &nv,
                .podres_socket = srv_path,
                .pod_log_dir = logs,
                .on_started = started,
        };
        int rc = kdev_dp_daemon_run(&o, &err);
        pthread_join(thread, NULL);
        srv_end();
        if (rc != 0)
                fail_msg("%s", err.msg);
        if (!found)
                fail_msg("no container series in:\n%s", scraped);
        assert_true(lists >= 1);
        /* the one holder of GPU 0: dcgm-exporter's pod labels on its device series */
        const char *fb = "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"" GPU0 "\",pci_bus_id=\"00000000:18:00.0\","
                         "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-t\","
                         "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"ml\",pod=\"train-0\","
                         "container=\"trainer\"} 1024\n";
        if (!strstr(scraped, fb))
                fail_msg("no %s in:\n%s", fb, scraped);
        const char *replicas = "kdev_container_gpu_replicas{namespace=\"ml\",pod=\"train-0\","
                               "container=\"trainer\",UUID=\"" GPU0 "\",gpu=\"0\","
                               "resource=\"nvidia.com/gpu\"} 1\n";
        if (!strstr(scraped, replicas))
                fail_msg("no %s in:\n%s", replicas, scraped);
        assert_null(strstr(scraped, "kdev_gpu_unattributed_processes{"));
        kdev_nvidia_config_clear(&nv);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        assert_int_equal(system(cmd), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_map_to_series),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
