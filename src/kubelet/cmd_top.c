/* kdevctl top: a node's GPU usage per GPU, MIG device and container, read
 * from kdev-plugin's metrics endpoint (top.h); once, or redrawn in place
 * every interval on a terminal. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "kubelet/top.h"

#define CMD "top"
#define DEFAULT_INTERVAL_MS 2000

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl top [--metrics-address HOST:PORT | --metrics-url URL]\n"
                "                   [-o table|json] [--interval SEC] [--once]\n"
                "\n"
                "Shows a node's GPU usage, like nvidia-smi for pods, from kdev-plugin's\n"
                "metrics (kdev-plugin --metrics-address, with usage.interval set in its\n"
                "config): one row per GPU and MIG device (model, utilization, memory used /\n"
                "total in MiB), under it one row per container holding it (namespace/pod/\n"
                "container, memory used / limit in MiB, replicas held, compute share,\n"
                "SM utilization) and the use no container could be given, by reason.\n"
                "On a terminal the view is redrawn every SEC seconds until SIGINT or\n"
                "SIGTERM (exit 0); with --once, -o json or stdout not a terminal it is\n"
                "printed once.\n"
                "\n"
                "Options:\n"
                "      --metrics-address HOST:PORT\n"
                "                       kdev-plugin's metrics address, GET\n"
                "                       http://HOST:PORT/metrics (default " KDEV_TOP_DEFAULT_ADDRESS
                ";\n"
                "                       [::1]:9400 for IPv6)\n"
                "      --metrics-url URL\n"
                "                       the metrics' URL instead, http://HOST:PORT/PATH\n"
                "  -o, --output FORMAT  table (default) or json\n"
                "      --interval SEC   time between two redraws (default %d)\n"
                "      --once           print once, also on a terminal\n"
                "  -h, --help           show this help\n"
                "\n"
                "Table columns: GPU GI NAME UTIL MEMORY-MIB REPLICAS SHARE SM (\"-\": unknown,\n"
                "no memory limit or no compute share; GI \"?\": a MIG device whose GPU\n"
                "instance the metrics do not tell).\n"
                "\n"
                "Exit status: 0 printed (or interrupted while redrawing), 1 the metrics\n"
                "could not be read (connection, HTTP status, timeout of %d s, an answer\n"
                "over 16 MiB, malformed text), 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl top\n"
                "  kdevctl top --metrics-address 10.0.0.5:9400 --once\n"
                "  kdevctl top -o json\n",
                DEFAULT_INTERVAL_MS / 1000, KDEV_TOP_TIMEOUT_MS / 1000);
}

enum { OPT_OUTPUT, OPT_ADDRESS, OPT_URL, OPT_INTERVAL, OPT_ONCE };

struct args {
        struct kdev_top_target target;
        bool have_target;
        enum kdev_cli_output output;
        uint64_t interval_ms;
        bool once;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_ADDRESS:
        case OPT_URL:
                if (a->have_target)
                        return kdev_err_set(err, EINVAL, "give one of --metrics-address and "
                                            "--metrics-url, once");
                a->have_target = true;
                return id == OPT_URL ? kdev_top_parse_url(value, &a->target, err)
                                     : kdev_top_parse_address(value, &a->target, err);
        case OPT_INTERVAL: {
                int rc = kdev_cli_parse_seconds(value, "--interval", NULL, &a->interval_ms, err);
                if (rc == 0 && a->interval_ms == 0)
                        return kdev_err_set(err, EINVAL, "invalid --interval \"%s\" (want more "
                                            "than 0 seconds)", value);
                return rc;
        }
        case OPT_ONCE:
                a->once = true;
                return 0;
        default:
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        }
}

/* One view of the metrics into |*view|; |err| says why not. */
static int fetch(const struct args *a, struct kdev_top **view, struct kdev_err *err)
{
        char *body;
        size_t len;
        *view = NULL;
        int rc = kdev_top_http_get(&a->target, KDEV_TOP_TIMEOUT_MS, &body, &len, err);
        if (rc < 0)
                return rc;
        *view = kdev_top_new(body, len, err);
        free(body);
        if (!*view)
                return kdev_err_wrap(err, "kdev-plugin's metrics at %s", a->target.addr);
        return 0;
}

static int once(const struct args *a)
{
        struct kdev_top *v;
        struct kdev_err err = {0};
        if (fetch(a, &v, &err) < 0)
                return kdev_cli_fail(CMD, "%s", err.msg);
        int ret = KDEV_CLI_OK;
        if (a->output == KDEV_CLI_OUTPUT_JSON) {
                ret = kdev_cli_print_json_value(CMD, kdev_top_json(v));
                if (ret == KDEV_CLI_OK && !kdev_top_sampled(v, NULL))
                        fprintf(stderr, "kdevctl " CMD ": no usage samples yet (is "
                                        "usage.interval set in kdev-plugin's config?)\n");
        } else if (kdev_top_print_table(v, stdout) < 0) {
                ret = kdev_cli_fail(CMD, "out of memory");
        }
        kdev_top_free(v);
        return ret;
}

/* One frame: clear and home, a header line, the table or the error. */
static void frame(const struct args *a)
{
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return;
        struct kdev_top *v;
        struct kdev_err err = {0};
        int rc = fetch(a, &v, &err);
        time_t now = time(NULL);
        double when = 0;
        char clock[16] = "", sample[64] = "", at[16];
        struct tm tm;
        if (localtime_r(&now, &tm))
                strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
        /* a timestamp from the text: only a sane one becomes a time_t */
        if (rc == 0 && kdev_top_sampled(v, &when) && when >= 0 && when < 1e11 &&
            localtime_r(&(time_t){(time_t)when}, &tm)) {
                strftime(at, sizeof(at), "%H:%M:%S", &tm);
                snprintf(sample, sizeof(sample), ", last sample %s", at);
        }
        fprintf(f, "\033[H\033[2J%s  kdev-plugin's metrics at %s, every %.3g s%s\n\n", clock,
                a->target.addr, (double)a->interval_ms / 1000.0, sample);
        if (rc == 0 && kdev_top_print_table(v, f) < 0)
                fprintf(f, "kdevctl " CMD ": out of memory\n");
        else if (rc < 0 && rc != -EINTR)
                fprintf(f, "kdevctl " CMD ": %s\n", err.msg);
        kdev_top_free(v);
        fclose(f);
        if (text)
                fwrite(text, 1, len, stdout);
        fflush(stdout);
        free(text);
}

static void on_signal(int sig)
{
        (void)sig;
}

/* Redraws until SIGINT or SIGTERM: both stay blocked but while sleeping,
 * so that a signal ends the sleep (or the next one) at once. */
static int watch(const struct args *a)
{
        sigset_t stop, old;
        sigemptyset(&stop);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGTERM);
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigprocmask(SIG_BLOCK, &stop, &old);
        for (;;) {
                frame(a);
                struct timespec ts = {(time_t)(a->interval_ms / 1000),
                                      (long)(a->interval_ms % 1000) * 1000000L};
                if (pselect(0, NULL, NULL, NULL, &ts, &old) < 0 && errno == EINTR)
                        break;
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        return KDEV_CLI_OK;
}

int kdevctl_cmd_top(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"metrics-address", 0, true, OPT_ADDRESS},
                {"metrics-url", 0, true, OPT_URL},
                {"interval", 0, true, OPT_INTERVAL},
                {"once", 0, false, OPT_ONCE},
        };
        struct args a = {.interval_ms = DEFAULT_INTERVAL_MS};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a,
                                &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.have_target)
                kdev_top_parse_address(KDEV_TOP_DEFAULT_ADDRESS, &a.target, NULL);
        if (a.once || a.output == KDEV_CLI_OUTPUT_JSON || !isatty(STDOUT_FILENO))
                return once(&a);
        return watch(&a);
}
