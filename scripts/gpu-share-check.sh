#!/usr/bin/env bash
# Real-GPU check of libkdev-share.so (docs/share.md) on a machine with an
# NVIDIA GPU and driver. Needs a C compiler and the driver (libcuda.so.1,
# libnvidia-ml.so.1, nvidia-smi); no CUDA toolkit and none of kdev's other
# dependencies: the library and two small driver-API programs are compiled
# here with cc, and reach the real driver through dlopen("libcuda.so.1") and
# cuGetProcAddress_v2, as the CUDA runtime does.
#
# STRICTLY READ-ONLY for the GPUs: it never changes GPU settings, MIG mode,
# compute mode, clocks, power limits, persistence or ECC. The only nvidia-smi
# call is the query `--query-gpu=uuid,memory.total,memory.used --format=csv`;
# GPU memory is allocated (at most the share below) and freed again.
# Files are written only in a temporary directory (removed at exit) and the
# summary file.
#
# Usage: scripts/gpu-share-check.sh [--gpu N] [--limit-mib M] [--results DIR]
#   --gpu N        CUDA ordinal to check (default 0)
#   --limit-mib M  the share's memory (default: the smaller of 4096 MiB and a
#                  quarter of the GPU's memory, rounded down to 2 MiB)
#   --results DIR  where the summary goes (default bench/results)
#
# Checks, each PASS or FAIL in the summary:
#   1. without the library: cuMemGetInfo / cuDeviceTotalMem give the GPU's own
#      memory (the baseline);
#   2. with it (LD_PRELOAD, a limits file for the GPU's UUID): cuMemAlloc,
#      cuMemCreate (VMM) and cuMemAllocAsync fill exactly limit / granularity
#      pieces and the next is refused with CUDA_ERROR_OUT_OF_MEMORY (2);
#      cuMemGetInfo's total is the limit, free the limit minus what is held;
#   3. NVML through the library (nvmlDeviceGetMemoryInfo) and nvidia-smi
#      under LD_PRELOAD report the limit as memory.total;
#   4. the cuGetProcAddress_v2 and dlsym doors return the library's hooks,
#      other entry points the driver's own pointers;
#   5. per-call cost with and without the library (pass-through, queries,
#      launch of an empty PTX kernel JIT-compiled by the driver, allocation +
#      free);
#   6. only where nvcc is found (PATH or /usr/local/cuda/bin): a CUDA runtime
#      program (tests/share/runtime_probe.cu) under the library, the runtime
#      resolving the driver itself: cudaMalloc succeeds and cudaMemGetInfo's
#      total is the limit. Without nvcc the step says so and is skipped.
# Exit status: 0 every check passed, 1 one failed, 2 usage error or no GPU.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gpu=0
limit_mib=
results=$src/bench/results
while [ $# -gt 0 ]; do
        case $1 in
        --gpu) gpu=$2; shift 2 ;;
        --limit-mib) limit_mib=$2; shift 2 ;;
        --results) results=$2; shift 2 ;;
        -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu-share-check: unknown argument $1" >&2; exit 2 ;;
        esac
done
command -v nvidia-smi >/dev/null || { echo "gpu-share-check: no nvidia-smi: not a GPU machine" >&2; exit 2; }
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- build (libc only) ---------------------------------------------------------
$cc -O2 -std=c17 -D_GNU_SOURCE -DKDEV_NO_EXPORT -fPIC -shared -fvisibility=hidden \
        -I"$src/src" "$src/src/share/preload/hook.c" "$src/src/share/region.c" \
        "$src/src/share/limits.c" -o "$tmp/libkdev-share.so" -ldl -lpthread
$cc -O2 -std=c17 -D_GNU_SOURCE -I"$src/src" "$src/tests/share/share_client.c" \
        -o "$tmp/client" -ldl
$cc -O2 -std=c17 -D_GNU_SOURCE -I"$src/src" "$src/bench/share/share_bench.c" \
        -o "$tmp/bench" -ldl
lib=$tmp/libkdev-share.so

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$gpu" | tr -d ' ')
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "$gpu" | tr -d ' ')
name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu")
if [ -z "$limit_mib" ]; then
        limit_mib=$(( total_mib / 4 < 4096 ? total_mib / 4 : 4096 ))
        limit_mib=$(( limit_mib / 2 * 2 ))
fi
limit=$(( limit_mib * 1024 * 1024 ))
gran=$(( 2 * 1024 * 1024 ))
region=$tmp/region
mkdir -p "$region"
echo "$uuid $limit 100" > "$region/limits"

out=$tmp/summary
fails=0
say() { echo "$*" | tee -a "$out"; }
check() { # NAME GOT WANT
        if [ "$2" = "$3" ]; then say "PASS $1: $2"; else say "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
kv() { sed -n "s/^$1 //p" | head -1; }

say "libkdev-share.so on $name ($uuid), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i "$gpu"), $(date -u +%Y-%m-%dT%H:%MZ)"
say "share: $limit bytes ($limit_mib MiB) of $total_mib MiB"

# 1. baseline
base=$("$tmp/client" -d "$gpu" info 0)
say "without the library: $(echo "$base" | head -2 | tr '\n' ';')"

# 2. boundary per entry point, with the library
for kind in alloc vmm async; do
        o=$(KDEV_SHARE_DIR=$region LD_PRELOAD=$lib "$tmp/client" -d "$gpu" boundary "$kind" "$limit" "$gran")
        check "$kind: pieces before the refusal" "$(echo "$o" | kv allocated)" "$(( limit / gran ))"
        check "$kind: refusal" "$(echo "$o" | kv refused)" 2
        check "$kind: cuMemGetInfo total at the boundary" "$(echo "$o" | kv total)" "$limit"
        check "$kind: cuMemGetInfo free at the boundary" "$(echo "$o" | kv free)" 0
        check "$kind: a freed piece is taken again" "$(echo "$o" | kv again)" 0
done

# 3. what the container sees: CUDA, NVML, nvidia-smi
o=$(KDEV_SHARE_DIR=$region LD_PRELOAD=$lib "$tmp/client" -d "$gpu" info $((64 * 1024 * 1024)))
check "cuMemGetInfo total" "$(echo "$o" | sed -n 's/^cuMemGetInfo 0 free [0-9]* total //p')" "$limit"
check "cuDeviceTotalMem" "$(echo "$o" | sed -n 's/^cuDeviceTotalMem 0 //p')" "$limit"
check "nvmlDeviceGetMemoryInfo total" "$(echo "$o" | sed -n 's/^nvmlDeviceGetMemoryInfo 0 total \([0-9]*\) .*/\1/p')" "$limit"
smi=$(KDEV_SHARE_DIR=$region LD_PRELOAD=$lib nvidia-smi --query-gpu=uuid,memory.total,memory.used --format=csv,noheader,nounits -i "$gpu")
check "nvidia-smi memory.total (MiB) under the library" "$(echo "$smi" | cut -d, -f2 | tr -d ' ')" "$limit_mib"

# 4. the doors
o=$(KDEV_SHARE_DIR=$region LD_PRELOAD=$lib "$tmp/client" -d "$gpu" procaddr)
say "$(echo "$o" | sed 's/^/  procaddr: /')"
check "cuGetProcAddress_v2(cuMemAlloc) is the library's" "$(echo "$o" | grep -c '^cuMemAlloc [0-9]* 0 -> 0 status 0 libkdev-share.so cuMemAlloc_v2$')" 1
check "dlsym(libcuda, cuMemAlloc_v2) is the library's" "$(echo "$o" | grep -c '^dlsym cuMemAlloc_v2 -> libkdev-share.so$')" 1
check "a non-intercepted entry point is the driver's own" "$(echo "$o" | kv passthrough-identical)" 1

# 5. per-call cost
say "per call (ns)        plain   with the library"
plain=$("$tmp/bench" calls 100000)
withl=$(KDEV_SHARE_DIR=$region LD_PRELOAD=$lib "$tmp/bench" calls 100000)
paste -d' ' <(echo "$plain") <(echo "$withl" | awk '{print $NF}') | while read -r k a b; do
        say "$(printf '  %-22s %8s %8s' "$k" "$a" "$b")"
done

# 6. the CUDA runtime's own resolution, where a toolkit is installed
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ]; then
        "$nvcc" -o "$tmp/probe" "$src/tests/share/runtime_probe.cu"
        o=$(CUDA_VISIBLE_DEVICES=$gpu KDEV_SHARE_DIR=$region LD_PRELOAD=$lib "$tmp/probe")
        say "$(echo "$o" | sed 's/^/  runtime: /')"
        check "runtime: cudaMalloc" "$(echo "$o" | sed -n 's/^cudaMalloc //p')" cudaSuccess
        check "runtime: cudaMemGetInfo total" "$(echo "$o" | sed -n 's/^cudaMemGetInfo cudaSuccess [0-9]* //p')" "$limit"
else
        say "SKIP runtime: no nvcc on this machine (the driver-API checks above need none)"
fi

mkdir -p "$results"
file=$results/$(date -u +%Y-%m-%d)-gpu-share-check-$(echo "$name" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-').txt
cp "$out" "$file"
echo "written to $file"
[ "$fails" -eq 0 ]
