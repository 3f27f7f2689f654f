/* Test fixture for the NVIDIA unit tests that read whole config files: the
 * root is built as kdev-plugin builds it (src/daemon/dp_daemon.c): `version`,
 * then the generic backend's section, then NVIDIA's. Those tests link
 * kdev_generic besides kdev_nvidia (tests/CMakeLists.txt). */
#ifndef KDEV_TEST_NVIDIA_CONFIG_FIXTURE_H
#define KDEV_TEST_NVIDIA_CONFIG_FIXTURE_H

#include <string.h>

#include "config/config.h"
#include "generic/generic.h"
#include "nvidia/config.h"

/* Reads |text| (or, when |text| is NULL, the file |name|) as kdev-plugin
 * reads its config file, the NVIDIA sections into |cfg|. Returns the
 * reader's result; |e| holds the message. */
static int parse_file(struct kdev_nvidia_config *cfg, const char *name, const char *text,
                      struct kdev_err *e)
{
        struct kdev_config_root root;
        struct kdev_config_sections ext;
        struct kdev_generic_config *g = NULL;
        kdev_config_root_init(&root);
        kdev_nvidia_config_sections(cfg, &ext);
        int rc = kdev_generic_config_register(&root, name, &g, e);
        if (rc == 0)
                rc = kdev_config_register(&root, &ext, e);
        if (rc == 0)
                rc = text ? kdev_config_parse(&root, name, text, strlen(text), e)
                          : kdev_config_load(&root, name, e);
        kdev_generic_config_free(g);
        return rc;
}

#endif /* KDEV_TEST_NVIDIA_CONFIG_FIXTURE_H */
