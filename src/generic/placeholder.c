/* placeholder so the module library is never empty */
typedef int kdev_generic_placeholder_t;
