#!/usr/bin/env bash
# The kdev demo (the main job): builds kdev, then runs kdevctl as kubelet and
# kdev-plugin in temporary device-plugins directories for two nodes:
#   node 1: this machine's real device nodes and 8 mock H100 GPUs on NVSwitch
#           (two of them time-sliced as nvidia.com/gpu.shared); a GPU fault
#           (XID 79) and its recovery;
#   node 2: mock A100-40GB GPUs with MIG, strategy mixed (one resource per MIG
#           profile, one of them time-sliced).
# The mock libnvidia-ml.so.1 is loaded through the same dlopen path as a real
# driver. For each node it admits a scenario of pods, prints node
# capacity/allocatable and each container's allocation, and stops both
# daemons cleanly.
# Usage: scripts/demo.sh                      both nodes
#        scripts/demo.sh CONFIG SCENARIO      one node with your own files
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# KDEV_BUILD_DIR: use binaries already built there (the test suite does).
# KDEV_WRAP: a command to run both daemons under (the valgrind test does).
build=${KDEV_BUILD_DIR:-}
if [ -z "$build" ]; then
  build=build
  scripts/deps.sh
  cmake -S . -B build -G Ninja >/dev/null
  ninja -C build kdev-plugin kdevctl kdev_mock_nvml >/dev/null
fi
case "$build" in /*) ;; *) build=$root/$build ;; esac

work=$(mktemp -d /tmp/kdev-demo.XXXXXX)
plugin_pid=""
cleanup() {
  [ -n "$plugin_pid" ] && kill "$plugin_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "demo interrupted" >&2; exit 130' INT TERM

# The mock NVML: found by the dynamic loader like the real libnvidia-ml.so.1.
export LD_LIBRARY_PATH="$build/mock/nvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0

# run_node TITLE CONFIG SCENARIO TOPOLOGY [kdev-plugin flags...]
run_node() {
  local title=$1 config=$2 scenario=$3 topology=$4
  shift 4
  local node=$work/$(basename "$config" .yaml)
  local dir=$node/device-plugins
  mkdir -p "$dir" "$node/proc"
  export KDEV_MOCK_NVML_TOPOLOGY="$topology"
  export KDEV_MOCK_NVML_CONTROL="$node/nvml-control"
  export KDEV_MOCK_NVML_PROC="$node/proc"   # the mock writes driver/nvidia-caps/mig-minors there
  export KDEV_DEMO_CDI_DIR="$node/cdi"
  : >"$KDEV_MOCK_NVML_CONTROL"
  local flags=(--cdi-dir "$KDEV_DEMO_CDI_DIR" --proc-root "$node/proc" "$@")

  echo "######## $title"
  echo "== devices kdev-plugin finds with $(basename "$config") on $(basename "$topology" .yaml)"
  "$build"/kdev-plugin --config "$config" "${flags[@]}" --check 2>/dev/null
  echo
  echo "== kdevctl kubelet + kdev-plugin"
  ${KDEV_WRAP:-} "$build"/kdevctl kubelet --dir "$dir" --scenario "$scenario" 2>"$node/kubelet.log" &
  local kubelet_pid=$!
  ${KDEV_WRAP:-} "$build"/kdev-plugin --config "$config" --device-plugin-dir "$dir" "${flags[@]}" \
    2>"$node/plugin.log" &
  plugin_pid=$!

  local kubelet_status=0 plugin_status=0
  wait "$kubelet_pid" || kubelet_status=$?
  kill -TERM "$plugin_pid"
  wait "$plugin_pid" || plugin_status=$?
  plugin_pid=""

  echo
  if grep -qE 'msg="GPU (unhealthy|healthy)' "$node/plugin.log"; then
    echo "== kdev-plugin health log"
    grep -E 'msg="GPU (unhealthy|healthy)|msg="GPU [a-z]' "$node/plugin.log" | sed 's/^ts=[^ ]* //' || true
  fi
  if [ -e "$KDEV_DEMO_CDI_DIR.while-running" ]; then
    echo "CDI spec while running: $(cat "$KDEV_DEMO_CDI_DIR.while-running")"
    if [ -z "$(ls -A "$KDEV_DEMO_CDI_DIR" 2>/dev/null)" ]; then
      echo "CDI spec after exit: removed"
    else
      echo "CDI spec after exit: still there: $(ls "$KDEV_DEMO_CDI_DIR")"
    fi
  fi
  if [ "${KDEV_DEMO_VERBOSE:-0}" = 1 ] || [ "$kubelet_status" -ne 0 ] || [ "$plugin_status" -ne 0 ]; then
    echo "== kdev-plugin log"
    cat "$node/plugin.log"
    echo "== kdevctl kubelet log"
    cat "$node/kubelet.log"
  else
    echo "== kdev-plugin: $(grep -c 'registered with kubelet' "$node/plugin.log") registrations" \
         "(set KDEV_DEMO_VERBOSE=1 for both logs)"
  fi
  local leftover
  leftover=$(find "$dir" -type s | wc -l)
  echo "kdevctl kubelet exit status: $kubelet_status; kdev-plugin exit status: $plugin_status; sockets left: $leftover"
  echo
  [ "$kubelet_status" -eq 0 ] && [ "$plugin_status" -eq 0 ] || failed=1
}

topologies=$root/mock/nvml/topologies
if [ $# -ge 2 ]; then
  run_node "your node" "$1" "$2" "${KDEV_DEMO_TOPOLOGY:-$topologies/h100-80gb-8x-nvswitch.yaml}"
else
  run_node "node 1: device nodes + 8x H100 (time-slicing, a GPU fault and its recovery)" \
    "$root/examples/demo.yaml" "$root/examples/demo.scenario.yaml" \
    "$topologies/h100-80gb-8x-nvswitch.yaml"
  run_node "node 2: 3x A100-40GB with MIG, strategy mixed" \
    "$root/examples/demo-mig.yaml" "$root/examples/demo-mig.scenario.yaml" \
    "$topologies/mig-a100-40gb.yaml"
fi
exit $failed
