/* kdevctl: the kubelet side of the device plugin API, for debugging and for
 * running kdev without a cluster. Thin: parses the subcommand and calls the
 * library. */
#include <stdio.h>
#include <string.h>

#include "kubelet/cmds.h"

struct command {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *summary;
};

static const struct command commands[] = {
        {"kubelet", kdevctl_cmd_kubelet, "act as kubelet: serve Registration, watch plugins, admit a scenario"},
        {"plugins", kdevctl_cmd_plugins, "list plugin sockets in a device-plugins directory"},
        {"watch", kdevctl_cmd_watch, "stream ListAndWatch from a plugin socket"},
        {"options", kdevctl_cmd_options, "call GetDevicePluginOptions on a plugin socket"},
        {"allocate", kdevctl_cmd_allocate, "call Allocate for device IDs on a plugin socket"},
        {"preferred", kdevctl_cmd_preferred, "call GetPreferredAllocation on a plugin socket"},
        {"checkpoint", kdevctl_cmd_checkpoint, "decode and verify a kubelet_internal_checkpoint file"},
};

static void usage(FILE *f)
{
        fprintf(f, "Usage: kdevctl COMMAND [ARGS...]\n\nCommands:\n");
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
        fprintf(f, "\nRun 'kdevctl COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
            strcmp(argv[1], "help") == 0) {
                usage(stdout);
                return 0;
        }
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
                if (strcmp(argv[1], commands[i].name) == 0)
                        return commands[i].run(argc - 1, argv + 1);
        }
        fprintf(stderr, "kdevctl: unknown command \"%s\"\n\n", argv[1]);
        usage(stderr);
        return 2;
}
