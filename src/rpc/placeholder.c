/* placeholder so the module library is never empty */
typedef int kdev_rpc_placeholder_t;
