/* The build description and the start-up line (common/version.h). */
#include "common/version.h"

#include "build_info.h" /* generated: KDEV_BUILD_COMMIT, KDEV_BUILD */
#include "common/log.h"

const char *kdev_build_commit(void)
{
        return KDEV_BUILD_COMMIT;
}

const char *kdev_build(void)
{
        return KDEV_BUILD;
}

void kdev_log_running_with_config(const char *config_json)
{
        kdev_log_info("Running with config", "version", KDEV_VERSION, "commit", KDEV_BUILD_COMMIT,
                      "build", KDEV_BUILD, KDEV_LOG_JSON("config", config_json));
}
