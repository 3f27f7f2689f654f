#!/usr/bin/env bash
# Allocate of one replica on the mock NVML (8 H100, 4 time-slicing replicas
# each): a plain replica beside an isolated one (isolation section:
# region directory, limits file, and with cdi-cri the per-container CDI
# spec), p50 / p99 / max of N round trips (bench_plugin --allocate-only,
# the same device ID each time: each isolated Allocate also removes the
# region of the previous one, as kubelet's re-use of a device ID does).
#
# Usage: bench/share/allocate.sh [--build DIR] [--calls N] [--runs N]
#   The share root and CDI directory are under a temporary folder (TMPDIR,
#   default /tmp): a disk, as /var/lib/kdev/share on a node.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build calls=2000 runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --calls) calls="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    *) echo "allocate.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
bench="$build/bench/bench_plugin"
[ -x "$bench" ] || { echo "allocate.sh: $bench is not built" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdev-bench-share.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH="$PWD/$build/mock/nvml"
export KDEV_MOCK_NVML_TOPOLOGY="$PWD/mock/nvml/topologies/h100-80gb-8x-nvswitch.yaml"
: > "$tmp/control"
export KDEV_MOCK_NVML_CONTROL="$tmp/control"
config() {  # STRATEGY ISOLATED
  printf 'version: v1\nflags:\n  plugin:\n    deviceListStrategy: %s\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n' "$1"
  [ "$2" = 1 ] && printf 'isolation:\n  resources:\n  - name: nvidia.com/gpu.shared\n'
  return 0
}
echo "Allocate of one time-slicing replica, $calls round trips, best of $runs runs by p50 (mock NVML, $(nproc) CPUs, $(uname -m))"

for strategy in envvar cdi-cri; do
  for iso in 0 1; do
    config "$strategy" "$iso" > "$tmp/config.yaml"
    best=""
    for r in $(seq "$runs"); do
      rm -rf "$tmp/share" "$tmp/cdi"
      line=$("$bench" --allocate-only --resource nvidia.com/gpu.shared \
               --plugin-arg --share-root --plugin-arg "$tmp/share" \
               --plugin-arg --share-library --plugin-arg "$PWD/$build/libkdev-share.so" \
               --plugin-arg --cdi-dir --plugin-arg "$tmp/cdi" \
               "$build/kdev-plugin" "$tmp/config.yaml" "$calls" 1 | grep -A1 'Allocate round trip' | tail -1)
      p50=$(sed -n 's/.*p50 \([0-9.]*\) us.*/\1/p' <<<"$line")
      if [ -z "$best" ] || awk "BEGIN{exit !($p50 < ${best%% *})}"; then
        best="$p50 $line"
      fi
    done
    printf '  %-8s %-9s %s\n' "$strategy" "$([ "$iso" = 1 ] && echo isolated || echo plain)" \
      "$(sed 's/^ *//; s/ (target.*//' <<<"${best#* }")"
  done
done
