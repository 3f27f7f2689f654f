/* placeholder so the module library is never empty */
typedef int kdev_plugin_placeholder_t;
