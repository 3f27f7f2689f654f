#include <stdio.h>

#include "kubelet/cmds.h"

/* Placeholder until the command is implemented. */
int kdevctl_cmd_watch(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        fprintf(stderr, "kdevctl watch: not implemented yet\n");
        return 1;
}
