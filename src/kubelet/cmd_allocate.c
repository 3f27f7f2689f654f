#include <stdio.h>

#include "kubelet/cmds.h"

/* Placeholder until the command is implemented. */
int kdevctl_cmd_allocate(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        fprintf(stderr, "kdevctl allocate: not implemented yet\n");
        return 1;
}
