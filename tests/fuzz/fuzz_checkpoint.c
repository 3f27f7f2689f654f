/* libFuzzer target: the kubelet checkpoint decoder (kubelet/checkpoint.h).
 * The input is the file's text. A decoded checkpoint is also verified and
 * re-encoded, and the encoding must decode again to the same encoding (the
 * writer's output is always readable, and stable). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubelet/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct kdev_checkpoint cp = {0};
        struct kdev_err err = {0};
        if (kdev_ckpt_decode((const char *)data, size, &cp, &err) < 0) {
                if (!err.msg[0] || cp.n_entries || cp.n_registered)
                        abort(); /* a failure says why and leaves |cp| cleared */
                return 0;
        }
        uint32_t computed = 0;
        (void)kdev_ckpt_verify(&cp, &computed, &err);
        char *text = kdev_ckpt_encode(&cp);
        if (!text)
                abort();
        struct kdev_checkpoint again = {0};
        if (kdev_ckpt_decode(text, strlen(text), &again, &err) < 0) {
                fprintf(stderr, "re-encoded checkpoint does not decode: %s\n%s\n", err.msg, text);
                abort();
        }
        if (kdev_ckpt_verify(&again, NULL, &err) < 0) {
                fprintf(stderr, "re-encoded checkpoint fails its checksum: %s\n%s\n", err.msg,
                        text);
                abort();
        }
        char *text2 = kdev_ckpt_encode(&again);
        if (!text2 || strcmp(text, text2) != 0) {
                fprintf(stderr, "encoding not stable:\n%s\n%s\n", text, text2 ? text2 : "(null)");
                abort();
        }
        free(text2);
        free(text);
        kdev_ckpt_clear(&again);
        kdev_ckpt_clear(&cp);
        return 0;
}
