/* Writes the seed corpus of fuzz_dra_prepare (tests/fuzz/corpus/dra_prepare):
 * one file per scenario, the first byte choosing the call (fuzz_dra_prepare.c:
 * bit 0 v1, bit 1 prepare twice, bit 2 wipe the CDI specs in between) and the
 * rest a NodePrepareResourcesRequest packed by protobuf-c. Claim names are
 * device names of the target's node ('+'-separated; the list:
 * KDEV_FUZZ_DRA_DEVICES=1 build-fuzz/tests/fuzz/fuzz_dra_prepare /dev/null),
 * namespaces pick the stand-in API server's answer.
 * Usage: gen_dra_seeds OUT_DIR. Not part of the product; run by hand when the
 * scenarios change. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/v1beta1/api.pb-c.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest PrepReq;

struct claim {
        const char *ns, *name, *uid;
};

static void write_seed(const char *dir, const char *file, uint8_t mode, const struct claim *cs,
                       size_t n)
{
        PrepReq rq = K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        Claim *claims = calloc(n ? n : 1, sizeof(*claims));
        Claim **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        char path[4096];

        if (!claims || !ptrs)
                exit(1);
        for (size_t i = 0; i < n; i++) {
                Claim init = K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__CLAIM__INIT;

                claims[i] = init;
                claims[i].namespace_ = (char *)cs[i].ns;
                claims[i].name = (char *)cs[i].name;
                claims[i].uid = (char *)cs[i].uid;
                ptrs[i] = &claims[i];
        }
        rq.claims = ptrs;
        rq.n_claims = n;
        size_t len = k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__get_packed_size(&rq);
        uint8_t *buf = malloc(len + 1);
        if (!buf)
                exit(1);
        buf[0] = mode;
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__pack(&rq, buf + 1);
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len + 1, f) != len + 1 || fclose(f) != 0) {
                perror(path);
                exit(1);
        }
        free(buf);
        free(ptrs);
        free(claims);
}

#define N(a) (sizeof(a) / sizeof(a[0]))
#define UID(x) "0b6a1c9e-" x "-4c2e-9a43-aaaaaaaaaaaa"

int main(int argc, char **argv)
{
        static const struct claim one_gpu[] = {{"default", "gpu-4", UID("1111")}};
        static const struct claim mig[] = {
                {"team-a", "gpu-0-mig-2g20gb-14-0+gpu-1-mig-1g10gb-me-20-4", UID("2222")},
                {"team-a", "gpu-5+gpu-6", UID("3333")},
                {"team-b", "gpu-3-mig-1g10gb-19-0+gpu-3-mig-1g10gb-19-6", UID("4444")},
        };
        static const struct claim again[] = {
                {"default", "gpu-2-mig-7g80gb-0-0", UID("5555")},
                {"default", "gpu-2-mig-7g80gb-0-0", UID("5555")}, /* the same claim twice */
                {"default", "gpu-4+gpu-4", UID("6666")},          /* one device, two requests */
        };
        static const struct claim failures[] = {
                {"missing", "gpu-4", UID("a001")},
                {"replaced", "gpu-4", UID("a002")},
                {"unallocated", "gpu-4", UID("a003")},
                {"other-driver", "gpu-4", UID("a004")},
                {"other-pool", "gpu-4", UID("a005")},
                {"no-device", "gpu-4", UID("a006")},
                {"not-object", "gpu-4", UID("a007")},
                {"default", "gpu-9", UID("a008")},                /* not published */
                {"default", "gpu-0", UID("a009")},                /* in MIG mode */
                {"default", "gpu-7", UID("a00a")},                /* withdrawn */
                {"default", "gpu-0-mig-3g40gb-9-4", UID("a00b")}, /* withdrawn MIG device */
                {"default", "gpu-6", ""},                         /* no UID */
                {"default", "gpu-5", "a b"},                      /* not a valid file name */
        };
        static const struct claim mixed[] = {
                {"default", "gpu-5", UID("b001")},
                {"default", "gpu-5+gpu-99", UID("b002")},
                {"default", "gpu-6", UID("b003")},
        };

        if (argc != 2) {
                fprintf(stderr, "usage: gen_dra_seeds OUT_DIR\n");
                return 2;
        }
        write_seed(argv[1], "v1beta1_one_gpu", 0, one_gpu, N(one_gpu));
        write_seed(argv[1], "v1_one_gpu", 1, one_gpu, N(one_gpu));
        write_seed(argv[1], "v1_mig_and_gpus", 1, mig, N(mig));
        write_seed(argv[1], "v1beta1_twice", 2, again, N(again));
        write_seed(argv[1], "v1_twice_specs_wiped", 7, mig, N(mig));
        write_seed(argv[1], "v1beta1_failures", 0, failures, N(failures));
        write_seed(argv[1], "v1_failures_twice", 3, failures, N(failures));
        write_seed(argv[1], "v1beta1_mixed", 6, mixed, N(mixed));
        write_seed(argv[1], "v1beta1_no_claims", 0, NULL, 0);
        return 0;
}
