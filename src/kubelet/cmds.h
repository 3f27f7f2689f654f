/* kdevctl subcommands. Each takes the arguments after the subcommand name
 * (argv[0] is the subcommand name itself), prints its result to stdout and
 * its errors to stderr, and returns the process exit status: 0 success,
 * 1 failure, 2 usage error. Every command answers --help / -h with its usage
 * on stdout and status 0. */
#ifndef KDEV_KUBELET_CMDS_H
#define KDEV_KUBELET_CMDS_H

#include "common/export.h"

KDEV_API int kdevctl_cmd_kubelet(int argc, char **argv);    /* kubelet --dir DIR [--scenario FILE] */
KDEV_API int kdevctl_cmd_plugins(int argc, char **argv);    /* plugins DIR */
KDEV_API int kdevctl_cmd_watch(int argc, char **argv);      /* watch SOCKET */
KDEV_API int kdevctl_cmd_options(int argc, char **argv);    /* options SOCKET */
KDEV_API int kdevctl_cmd_allocate(int argc, char **argv);   /* allocate SOCKET ID... */
KDEV_API int kdevctl_cmd_preferred(int argc, char **argv);  /* preferred SOCKET --available ... */
KDEV_API int kdevctl_cmd_checkpoint(int argc, char **argv); /* checkpoint FILE */
KDEV_API int kdevctl_cmd_dra(int argc, char **argv);        /* dra --registry DIR [--scenario FILE] */
/* dra allocate --node NAME: the structured allocator against an API server
 * (kdevctl_cmd_dra passes "dra allocate ..." here, argv[0] "allocate") */
KDEV_API int kdevctl_cmd_dra_allocate(int argc, char **argv);
KDEV_API int kdevctl_cmd_share(int argc, char **argv);      /* share REGION [-o json] */
KDEV_API int kdevctl_cmd_podresources(int argc, char **argv); /* podresources [list|...] */
KDEV_API int kdevctl_cmd_schedule(int argc, char **argv);   /* schedule --node FILE POD_FILE... */
KDEV_API int kdevctl_cmd_quota(int argc, char **argv);      /* quota --quota FILE OBJECT_FILE... */
KDEV_API int kdevctl_cmd_top(int argc, char **argv);        /* top [--metrics-address HOST:PORT] [-o json] */

#endif /* KDEV_KUBELET_CMDS_H */
