/* kdev-plugin: the device plugin daemon. Thin: parses flags, loads the
 * configuration, discovers devices and hands them to the plugin runtime. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "common/err.h"
#include "common/log.h"
#include "generic/generic.h"
#include "model/model.h"
#include "plugin/runtime.h"

#define KDEV_VERSION "0.1.0"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdev-plugin --config FILE [OPTIONS]\n"
                "\n"
                "Serves the devices described in FILE to kubelet through the device plugin API\n"
                "v1beta1: one socket per resource in the device-plugins directory, registered\n"
                "with kubelet.sock, re-registered whenever kubelet restarts.\n"
                "\n"
                "Options:\n"
                "  -c, --config FILE             configuration file (YAML; see examples/)\n"
                "  -d, --device-plugin-dir DIR   kubelet's device-plugins directory\n"
                "                                (default " KDEV_DP_DEFAULT_DIR ")\n"
                "      --socket-prefix PREFIX    socket file name prefix (default \"kdev-\")\n"
                "      --root DIR                look up device nodes under DIR instead of /\n"
                "      --log-level LEVEL         debug, info, warn or error (default info)\n"
                "      --log-format FORMAT       text or json (default text)\n"
                "      --check                   load the config, print the devices found, exit\n"
                "  -h, --help                    show this help\n"
                "      --version                 print the version\n"
                "\n"
                "Environment: KDEV_CONFIG and KDEV_DEVICE_PLUGIN_DIR set the defaults of\n"
                "--config and --device-plugin-dir.\n");
}

struct daemon {
        uv_loop_t loop;
        uv_signal_t sigterm;
        uv_signal_t sigint;
        struct kdev_dp_runtime *rt;
        bool stopping;
};

static void on_runtime_stopped(void *arg)
{
        struct daemon *d = arg;
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct daemon *d = h->data;
        if (d->stopping)
                return;
        d->stopping = true;
        kdev_log_info("stopping", "signal", signum == SIGTERM ? "SIGTERM" : "SIGINT");
        kdev_dp_runtime_stop(d->rt, on_runtime_stopped, d);
        d->rt = NULL;
}

static void on_discovery_warning(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn("device discovery", "warning", msg);
}

static void print_devices(const struct kdev_resource_set *set)
{
        for (size_t i = 0; i < set->n_resources; i++) {
                const struct kdev_resource *r = &set->resources[i];
                printf("%s: %zu device(s)\n", r->name, r->n_devices);
                for (size_t j = 0; j < r->n_devices; j++) {
                        const struct kdev_device *dev = &r->devices[j];
                        printf("  %s", dev->id);
                        for (size_t k = 0; k < dev->n_specs; k++)
                                printf(" %s->%s:%s", dev->specs[k].host_path,
                                       dev->specs[k].container_path, dev->specs[k].permissions);
                        printf("\n");
                }
        }
}

int main(int argc, char **argv)
{
        const char *config = getenv("KDEV_CONFIG");
        struct kdev_dp_options opts = {0};
        opts.plugin_dir = getenv("KDEV_DEVICE_PLUGIN_DIR");
        struct kdev_generic_options gopts = {0};
        enum kdev_log_level level = KDEV_LOG_INFO;
        bool json = false, check = false;

        enum { OPT_PREFIX = 256, OPT_ROOT, OPT_LEVEL, OPT_FORMAT, OPT_CHECK, OPT_VERSION };
        static const struct option longopts[] = {
                {"config", required_argument, NULL, 'c'},
                {"device-plugin-dir", required_argument, NULL, 'd'},
                {"socket-prefix", required_argument, NULL, OPT_PREFIX},
                {"root", required_argument, NULL, OPT_ROOT},
                {"log-level", required_argument, NULL, OPT_LEVEL},
                {"log-format", required_argument, NULL, OPT_FORMAT},
                {"check", no_argument, NULL, OPT_CHECK},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, OPT_VERSION},
                {NULL, 0, NULL, 0},
        };
        int c;
        while ((c = getopt_long(argc, argv, "c:d:h", longopts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        config = optarg;
                        break;
                case 'd':
                        opts.plugin_dir = optarg;
                        break;
                case OPT_PREFIX:
                        opts.socket_prefix = optarg;
                        break;
                case OPT_ROOT:
                        gopts.root = optarg;
                        break;
                case OPT_LEVEL:
                        if (kdev_log_level_parse(optarg, &level) < 0) {
                                fprintf(stderr, "kdev-plugin: invalid --log-level \"%s\": want debug, "
                                                "info, warn or error\n", optarg);
                                return 2;
                        }
                        break;
                case OPT_FORMAT:
                        if (strcmp(optarg, "json") != 0 && strcmp(optarg, "text") != 0) {
                                fprintf(stderr, "kdev-plugin: invalid --log-format \"%s\": want text "
                                                "or json\n", optarg);
                                return 2;
                        }
                        json = strcmp(optarg, "json") == 0;
                        break;
                case OPT_CHECK:
                        check = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case OPT_VERSION:
                        printf("kdev-plugin %s\n", KDEV_VERSION);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "kdev-plugin: unexpected argument \"%s\"\n", argv[optind]);
                return 2;
        }
        if (!config) {
                fprintf(stderr, "kdev-plugin: no configuration: pass --config FILE\n");
                return 2;
        }
        kdev_log_setup(level, json);
        gopts.warn = on_discovery_warning;

        struct kdev_err err = {0};
        struct kdev_generic_config *cfg = NULL;
        struct kdev_resource_set set = {0};
        if (kdev_generic_config_load(config, &cfg, &err) < 0 ||
            kdev_generic_discover(cfg, &gopts, &set, &err) < 0) {
                kdev_log_error("cannot load configuration", "error", err.msg);
                kdev_generic_config_free(cfg);
                kdev_resource_set_clear(&set);
                return 1;
        }
        kdev_generic_config_free(cfg);
        if (check) {
                print_devices(&set);
                kdev_resource_set_clear(&set);
                return 0;
        }

        struct daemon d = {0};
        int status = 1;
        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_log_error("cannot start", "error", uv_strerror(r));
                kdev_resource_set_clear(&set);
                return 1;
        }
        d.rt = kdev_dp_runtime_new(&d.loop, &opts, &err);
        if (!d.rt)
                goto out;
        for (size_t i = 0; i < set.n_resources; i++) {
                char count[32];
                snprintf(count, sizeof(count), "%zu", set.resources[i].n_devices);
                kdev_log_info("resource", "resource", set.resources[i].name, "devices", count);
                if (kdev_dp_runtime_add_resource(d.rt, &set.resources[i], &err) < 0)
                        goto out;
        }
        signal(SIGPIPE, SIG_IGN);
        if ((r = uv_signal_init(&d.loop, &d.sigterm)) < 0) {
                kdev_err_set(&err, -r, "cannot handle signals: %s", uv_strerror(r));
                goto out;
        }
        if ((r = uv_signal_init(&d.loop, &d.sigint)) < 0) {
                uv_close((uv_handle_t *)&d.sigterm, NULL);
                kdev_err_set(&err, -r, "cannot handle signals: %s", uv_strerror(r));
                goto out;
        }
        d.sigterm.data = d.sigint.data = &d;
        uv_signal_start(&d.sigterm, on_signal, SIGTERM);
        uv_signal_start(&d.sigint, on_signal, SIGINT);
        if (kdev_dp_runtime_start(d.rt, &err) < 0) {
                uv_close((uv_handle_t *)&d.sigterm, NULL);
                uv_close((uv_handle_t *)&d.sigint, NULL);
                goto out;
        }
        uv_run(&d.loop, UV_RUN_DEFAULT);
        status = 0;
        kdev_log_info("stopped");
out:
        if (status != 0) {
                kdev_log_error("cannot start", "error", err.msg);
                if (d.rt) {
                        kdev_dp_runtime_stop(d.rt, NULL, NULL);
                        uv_run(&d.loop, UV_RUN_DEFAULT);
                }
        }
        if (uv_loop_close(&d.loop) != 0)
                kdev_log_warn("event loop closed with handles still open");
        kdev_resource_set_clear(&set);
        return status;
}
