/* libFuzzer target: the mock NVML's topology file loader
 * (mock/nvml/topology.c, mock_topology_load). The loader reads a path, so
 * the input goes into a memfd opened through /proc/self/fd. A failure must
 * come with a message; a loaded topology is freed again. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static int fd = -1;
        static char path[64];
        if (fd < 0) {
                fd = memfd_create("kdev-fuzz-topology", MFD_CLOEXEC);
                if (fd < 0)
                        abort();
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        }
        if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
                abort();
        char msg[1024];
        struct mock_state *s = mock_topology_load(path, msg, sizeof(msg));
        if (!s && !msg[0])
                abort(); /* a failure says why */
        mock_state_free(s);
        return 0;
}
