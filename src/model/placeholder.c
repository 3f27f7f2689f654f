/* placeholder so the module library is never empty */
typedef int kdev_model_placeholder_t;
