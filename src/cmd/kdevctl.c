/* kdevctl: the kubelet side of the device plugin API, for debugging and for
 * running kdev without a cluster. Thin: parses the subcommand and calls the
 * library. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/version.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"

struct command {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *summary;
};

static int version_arg(int id, const char *value, void *user_data, struct kdev_err *err)
{
        (void)id;
        (void)user_data;
        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
}

/* kdevctl version / kdevctl --version: "kdevctl 0.1.0" on stdout. */
static int cmd_version(int argc, char **argv)
{
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, NULL, 0, version_arg, NULL, &err);
        if (rc == 1) {
                printf("Usage: kdevctl version\n"
                       "\n"
                       "Prints kdevctl's version (also 'kdevctl --version').\n");
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error("version", "%s", err.msg);
        printf("kdevctl %s\n", KDEV_VERSION);
        return KDEV_CLI_OK;
}

static const struct command commands[] = {
        {"kubelet", kdevctl_cmd_kubelet, "act as kubelet: serve Registration, watch plugins, admit a scenario"},
        {"plugins", kdevctl_cmd_plugins, "list plugin sockets in a device-plugins directory"},
        {"watch", kdevctl_cmd_watch, "stream ListAndWatch from a plugin socket"},
        {"options", kdevctl_cmd_options, "call GetDevicePluginOptions on a plugin socket"},
        {"allocate", kdevctl_cmd_allocate, "call Allocate for device IDs on a plugin socket"},
        {"preferred", kdevctl_cmd_preferred, "call GetPreferredAllocation on a plugin socket"},
        {"checkpoint", kdevctl_cmd_checkpoint, "decode and verify a kubelet_internal_checkpoint file"},
        {"dra", kdevctl_cmd_dra, "act as kubelet for DRA plugins: register, prepare/unprepare claims"},
        {"share", kdevctl_cmd_share, "print a container's share region: memory and compute per GPU and process"},
        {"podresources", kdevctl_cmd_podresources, "call kubelet's PodResources API: list, allocatable, get, device -> pod map"},
        {"schedule", kdevctl_cmd_schedule, "would pods fit a node? extended-resource fit as kube-scheduler checks it"},
        {"quota", kdevctl_cmd_quota, "would ResourceQuota admit pods and claims? as the API server checks it"},
        {"top", kdevctl_cmd_top, "GPU usage per GPU, MIG device and container from kdev-plugin's metrics"},
        {"version", cmd_version, "print kdevctl's version (also --version)"},
};

static void usage(FILE *f)
{
        fprintf(f, "Usage: kdevctl COMMAND [ARGS...]\n"
                   "       kdevctl --help | --version\n"
                   "\n"
                   "The kubelet side of the Kubernetes device plugin API (v1beta1) and of DRA\n"
                   "kubelet plugins: talks to device plugins over their Unix sockets the way\n"
                   "kubelet does, for debugging plugins and running kdev without a cluster.\n"
                   "\n"
                   "Commands:\n");
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
        fprintf(f, "\n"
                   "Options:\n"
                   "  -h, --help     show this help (also 'kdevctl help')\n"
                   "      --version  print the version\n"
                   "\n"
                   "Run 'kdevctl COMMAND --help' for a command's options, files and examples.\n"
                   "\n"
                   "Exit status: 0 success, 1 failure, 2 usage error (every command).\n"
                   "\n"
                   "Examples:\n"
                   "  kdevctl plugins\n"
                   "  kdevctl kubelet --dir /tmp/dp --scenario examples/scenario-reference.yaml\n"
                   "  kdevctl watch kdev-nvidia.com_gpu.sock --count 1\n");
}

/* A usage error: "kdevctl: MESSAGE" and a hint on stderr; returns exit status 2. */
static int usage_error(const char *msg)
{
        fprintf(stderr, "kdevctl: %s\nRun 'kdevctl --help' for usage.\n", msg);
        return 2;
}

int main(int argc, char **argv)
{
        /* Before anything else, for every command: a peer (plugin, kubelet,
         * a server at its connection cap) that hangs up makes write(2) fail
         * with EPIPE, which the RPC layer reports as a one-line error, instead
         * of SIGPIPE killing kdevctl without a word (src/rpc/rpc.h). */
        signal(SIGPIPE, SIG_IGN);
        if (argc < 2)
                return usage_error("missing command");
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
            strcmp(argv[1], "help") == 0) {
                usage(stdout);
                return 0;
        }
        if (strcmp(argv[1], "--version") == 0)
                return cmd_version(argc - 1, argv + 1);
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
                if (strcmp(argv[1], commands[i].name) == 0)
                        return commands[i].run(argc - 1, argv + 1);
        }
        fprintf(stderr, "kdevctl: unknown command \"%s\"\nRun 'kdevctl --help' for usage.\n",
                argv[1]);
        return 2;
}
