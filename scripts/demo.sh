#!/usr/bin/env bash
# The kdev demo (the main job): builds kdev, then runs kdevctl as kubelet and
# kdev-plugin in a temporary device-plugins directory, on this machine's real
# device nodes and on mock NVIDIA GPUs (the mock libnvidia-ml.so.1, 8x H100 on
# NVSwitch, through the same NVML code path as a real driver). It admits a
# scenario of pods, injects a GPU fault (XID 79) and shows its recovery,
# prints node capacity/allocatable and each container's allocation, and stops
# both cleanly.
# Usage: scripts/demo.sh [CONFIG [SCENARIO]]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
config=${1:-$root/examples/demo.yaml}
scenario=${2:-$root/examples/demo.scenario.yaml}
topology=${KDEV_DEMO_TOPOLOGY:-$root/mock/nvml/topologies/h100-80gb-8x-nvswitch.yaml}

# KDEV_BUILD_DIR: use binaries already built there (the test suite does).
# KDEV_WRAP: a command to run both daemons under (the valgrind test does).
build=${KDEV_BUILD_DIR:-}
if [ -z "$build" ]; then
  build=build
  scripts/deps.sh
  cmake -S . -B build -G Ninja >/dev/null
  ninja -C build kdev-plugin kdevctl kdev_mock_nvml >/dev/null
fi

work=$(mktemp -d /tmp/kdev-demo.XXXXXX)
dir=$work/device-plugins
mkdir "$dir"
plugin_pid=""
cleanup() {
  [ -n "$plugin_pid" ] && kill "$plugin_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "demo interrupted" >&2; exit 130' INT TERM

# The mock NVML: found by the dynamic loader like the real libnvidia-ml.so.1.
case "$build" in /*) ;; *) build=$root/$build ;; esac
export LD_LIBRARY_PATH="$build/mock/nvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KDEV_MOCK_NVML_TOPOLOGY="$topology"
export KDEV_MOCK_NVML_CONTROL="$work/nvml-control"
export KDEV_DEMO_CDI_DIR="$work/cdi"
: >"$KDEV_MOCK_NVML_CONTROL"

echo "== devices kdev-plugin finds with $(basename "$config")"
"$build"/kdev-plugin --config "$config" --cdi-dir "$KDEV_DEMO_CDI_DIR" --check 2>/dev/null
echo
echo "== kdevctl kubelet (device-plugins dir $dir) + kdev-plugin"
${KDEV_WRAP:-} "$build"/kdevctl kubelet --dir "$dir" --scenario "$scenario" 2>"$dir.kubelet.log" &
kubelet_pid=$!
${KDEV_WRAP:-} "$build"/kdev-plugin --config "$config" --device-plugin-dir "$dir" \
  --cdi-dir "$KDEV_DEMO_CDI_DIR" 2>"$dir.plugin.log" &
plugin_pid=$!

kubelet_status=0
wait "$kubelet_pid" || kubelet_status=$?
kill -TERM "$plugin_pid"
plugin_status=0
wait "$plugin_pid" || plugin_status=$?
plugin_pid=""

echo
echo "== kdev-plugin health log"
grep -E 'msg="GPU (unhealthy|healthy)|msg="GPU [a-z]' "$dir.plugin.log" | sed 's/^ts=[^ ]* //' || true
echo "CDI spec while running: $(cat "$KDEV_DEMO_CDI_DIR.while-running" 2>/dev/null || echo none)"
if [ -z "$(ls -A "$KDEV_DEMO_CDI_DIR" 2>/dev/null)" ]; then
  echo "CDI spec after exit: removed"
else
  echo "CDI spec after exit: still there: $(ls "$KDEV_DEMO_CDI_DIR")"
fi
echo
if [ "${KDEV_DEMO_VERBOSE:-0}" = 1 ] || [ "$kubelet_status" -ne 0 ] || [ "$plugin_status" -ne 0 ]; then
  echo "== kdev-plugin log"
  cat "$dir.plugin.log"
  echo "== kdevctl kubelet log"
  cat "$dir.kubelet.log"
else
  echo "== kdev-plugin: $(grep -c 'registered with kubelet' "$dir.plugin.log") registrations" \
       "(set KDEV_DEMO_VERBOSE=1 for both logs)"
fi
rm -f "$dir.plugin.log" "$dir.kubelet.log"
leftover=$(find "$dir" -type s | wc -l)
echo
echo "kdevctl kubelet exit status: $kubelet_status; kdev-plugin exit status: $plugin_status; sockets left: $leftover"
[ "$kubelet_status" -eq 0 ] && [ "$plugin_status" -eq 0 ]
