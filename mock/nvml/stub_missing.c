/* A libnvidia-ml.so.1 stand-in that exports only nvmlInit (the v1 name),
 * nvmlShutdown and nvmlErrorString: the loader must resolve nvmlInit through
 * its fallback and then fail on the first missing required entry point,
 * nvmlSystemGetDriverVersion. */
#include "nvml/nvml_api.h"

#define STUB_EXPORT __attribute__((visibility("default")))

STUB_EXPORT kdev_nvmlInit_fn nvmlInit;
STUB_EXPORT kdev_nvmlShutdown_fn nvmlShutdown;
STUB_EXPORT kdev_nvmlErrorString_fn nvmlErrorString;

nvmlReturn_t nvmlInit(void)
{
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
        return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
        return kdev_nvml_builtin_strerror(result);
}
