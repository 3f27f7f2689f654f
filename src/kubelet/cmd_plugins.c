#include <stdio.h>

#include "kubelet/cmds.h"

/* Placeholder until the command is implemented. */
int kdevctl_cmd_plugins(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        fprintf(stderr, "kdevctl plugins: not implemented yet\n");
        return 1;
}
