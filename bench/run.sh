#!/bin/bash
# kdev benchmarks, one command on a fresh clone:
#
#   bench/run.sh [-n RUNS] [--restarts N] [--calls N] [--scale-calls N] [--scale-cpu N]
#                [--scale-only] [--no-deps] [--build-dir DIR]
#
# Installs what is missing (scripts/deps.sh --test; needs root or sudo only when
# something is missing), builds kdev-plugin, the benchmarks and the mock NVML
# (CMake + Ninja, in build-bench/ unless --build-dir), builds the Go peer
# (bench/peers/go), then runs bench/run.py: every figure min / median / max over
# RUNS runs (default 3; env KDEV_BENCH_RUNS), kdev beside the Go peer, each
# target of docs/architecture.md "met" or "NOT MET". Prints the table and
# writes it to bench/results/<date>-<arch>-<N>cpu.txt (env KDEV_BENCH_HOST_KIND replaces
# "<arch>-<N>cpu", KDEV_BENCH_OUT the whole path).
# --scale-only runs only the table of Allocate by resource size (1 and 64 IDs at
# 16..16384 generic devices and 8 GPUs x 1024 / x 4096 replicas, beside the Go
# peer; --scale-calls calls per request size, default 2000; client and plugin
# pinned to CPU N-1 by --scale-cpu N, default 1, 0 = unpinned).
# Longer runs: bench/run.sh -n 10 --restarts 500 --calls 20000.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${KDEV_BENCH_RUNS:-3}
restarts=100
calls=5000
scale_calls=2000
scale_only=
scale_cpu=1
deps=1
build=$src/build-bench
while [ $# -gt 0 ]; do
        case $1 in
        -n|--runs) runs=$2; shift 2 ;;
        --restarts) restarts=$2; shift 2 ;;
        --calls) calls=$2; shift 2 ;;
        --scale-calls) scale_calls=$2; shift 2 ;;
        --scale-only) scale_only=--scale-only; shift ;;
        --scale-cpu) scale_cpu=$2; shift 2 ;;
        --no-deps) deps=0; shift ;;
        --build-dir) build=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
done

if [ "$deps" = 1 ]; then
        "$src/scripts/deps.sh" --test
fi
jobs=$(nproc)
[ "$jobs" -gt 2 ] || jobs=2
build_type=${KDEV_BENCH_BUILD_TYPE:-RelWithDebInfo}
echo "bench: building in $build ($build_type)" >&2
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DKDEV_SANITIZE=OFF \
        >/dev/null
ninja -C "$build" -j"$jobs" kdev-plugin kdev_mock_nvml bench_plugin bench_preferred \
        bench_listandwatch >/dev/null
echo "bench: building the Go peer" >&2
go_peer=$("$src/bench/peers/go/build.sh" "$build/peers")

kind=${KDEV_BENCH_HOST_KIND:-$(uname -m)-$(nproc)cpu}
out=${KDEV_BENCH_OUT:-$src/bench/results/$(date -u +%Y-%m-%d)-$kind.txt}
mkdir -p "$(dirname "$out")"
KDEV_BENCH_BUILD_TYPE=$build_type exec /usr/bin/python3 "$src/bench/run.py" --build "$build" \
        --go "$go_peer" --runs "$runs" --restarts "$restarts" --calls "$calls" \
        --scale-calls "$scale_calls" --scale-cpu "$scale_cpu" $scale_only --out "$out"
