/* libFuzzer target: kdev's config file loader, the generic section plus the
 * NVIDIA ones (kdev_config_parse on a root with kdev_generic_config_register
 * and kdev_nvidia_config_sections, then kdev_nvidia_config_finish), as
 * kdev-plugin reads --config. The input
 * is the file's text. Every outcome is fine except a crash, a sanitizer
 * report or a leak; a failure must come with a message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "config/config.h"
#include "generic/generic.h"
#include "nvidia/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct kdev_nvidia_config nv;
        struct kdev_err err = {0};
        if (kdev_nvidia_config_init(&nv, &err) < 0)
                abort();
        struct kdev_config_root root;
        struct kdev_config_sections ext;
        kdev_config_root_init(&root);
        kdev_nvidia_config_sections(&nv, &ext);
        struct kdev_generic_config *cfg = NULL;
        if (kdev_generic_config_register(&root, "fuzz.yaml", &cfg, &err) < 0 ||
            kdev_config_register(&root, &ext, &err) < 0)
                abort();
        int rc = kdev_config_parse(&root, "fuzz.yaml", (const char *)data, size, &err);
        if (rc < 0 && !err.msg[0])
                abort(); /* an error says why */
        if (rc == 0) {
                if (!cfg)
                        abort();
                kdev_err_clear(&err);
                if (kdev_nvidia_config_finish(&nv, true, &err) < 0 && !err.msg[0])
                        abort();
        }
        kdev_generic_config_free(cfg);
        kdev_nvidia_config_clear(&nv);
        return 0;
}
