#!/usr/bin/env bash
# The kdev demo (the main job): builds kdev, then runs kdevctl as kubelet and
# kdev-plugin on this machine's real device nodes in a temporary
# device-plugins directory, admits a small scenario of pods, prints node
# capacity/allocatable and each container's allocation, stops both cleanly.
# Usage: scripts/demo.sh [CONFIG [SCENARIO]]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
config=${1:-$root/examples/generic-demo.yaml}
scenario=${2:-$root/examples/demo-scenario.yaml}

# KDEV_BUILD_DIR: use binaries already built there (the test suite does).
# KDEV_WRAP: a command to run both daemons under (the valgrind test does).
build=${KDEV_BUILD_DIR:-}
if [ -z "$build" ]; then
  build=build
  scripts/deps.sh
  cmake -S . -B build -G Ninja >/dev/null
  ninja -C build kdev-plugin kdevctl >/dev/null
fi

dir=$(mktemp -d /tmp/kdev-demo.XXXXXX)
plugin_pid=""
cleanup() {
  [ -n "$plugin_pid" ] && kill "$plugin_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

echo "== devices kdev-plugin finds with $(basename "$config")"
"$build"/kdev-plugin --config "$config" --check
echo
echo "== kdevctl kubelet (device-plugins dir $dir) + kdev-plugin"
${KDEV_WRAP:-} "$build"/kdevctl kubelet --dir "$dir" --scenario "$scenario" 2>"$dir.kubelet.log" &
kubelet_pid=$!
${KDEV_WRAP:-} "$build"/kdev-plugin --config "$config" --device-plugin-dir "$dir" 2>"$dir.plugin.log" &
plugin_pid=$!

kubelet_status=0
wait "$kubelet_pid" || kubelet_status=$?
kill -TERM "$plugin_pid"
plugin_status=0
wait "$plugin_pid" || plugin_status=$?
plugin_pid=""

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
