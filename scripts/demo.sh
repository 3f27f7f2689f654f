#!/usr/bin/env bash
# The kdev demo (the main job): builds kdev, then runs kdevctl as kubelet and
# kdev-plugin in temporary device-plugins directories for two nodes:
#   node 1: this machine's real device nodes and 8 mock H100 GPUs on NVSwitch
#           (two of them time-sliced as nvidia.com/gpu.shared); a GPU fault
#           (XID 79) and its recovery;
#   node 2: 4 mock A100-40GB, MIG strategy mixed: two with MIG devices (one
#           resource per MIG profile, one of them time-sliced), one with MIG
#           enabled and no MIG devices, one with MIG disabled, served whole as
#           nvidia.com/gpu;
#   node 3: DRA: kdev-dra-plugin publishes 8 mock H100 GPUs as a ResourceSlice
#           to the stand-in API server (tests/kubeapi/server.py, local only);
#           kdevctl dra allocate (as the scheduler) allocates the user's
#           ResourceClaims of examples/demo-dra-claims.json (CEL selectors on
#           the product and memory) and explains the one no GPU satisfies;
#           two claims share one GPU (consumable capacity, --shareable-gpus);
#           gpu-7 is in MIG mode and published as partitionable devices
#           (--dynamic-mig): a claim for a 3g.40gb MIG device gets one made
#           at prepare and destroyed at unprepare;
#           kdevctl dra (as kubelet) prepares the allocated claims, the
#           whole-GPU claim's CDI spec and the shares' limits are printed,
#           then they are unprepared.
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
  ninja -C build kdev-plugin kdev-dra-plugin kdevctl kdev_mock_nvml kdev-share >/dev/null
fi
case "$build" in /*) ;; *) build=$root/$build ;; esac

work=$(mktemp -d /tmp/kdev-demo.XXXXXX)
plugin_pid=""
api_pid=""
cleanup() {
  [ -n "$plugin_pid" ] && kill "$plugin_pid" 2>/dev/null || true
  [ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null || true
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

# run_dra_node TITLE TOPOLOGY: the stand-in API server holding a Node and the
# DeviceClass and pending ResourceClaims of examples/demo-dra-claims.json,
# kdev-dra-plugin on the mock NVML, kdevctl dra allocate as the scheduler and
# kdevctl dra as kubelet preparing and unpreparing the allocated claim.
# mig_instances WHEN: the MIG devices the mock driver holds (its state file,
# mock/nvml/README.md), one line each.
mig_instances() {
  /usr/bin/python3 -c 'import os, sys
gpu, gis, out = None, {}, []
path = sys.argv[1]
for line in (open(path) if os.path.exists(path) else []):
    w = line.split()
    if w and w[0] == "gpu":
        gpu = w[1]
    elif w and w[0] in ("gi", "ci"):
        kv = dict(zip(w[1::2], w[2::2]))
        if w[0] == "gi":
            gis[kv["id"]] = (int(kv["start"]), int(kv["size"]))
        elif kv.get("present") == "1":
            s, n = gis[kv["gi"]]
            out.append("%s GPU instance %s (memory slices %d-%d), compute instance %s: %s"
                       % (gpu, kv["gi"], s, s + n - 1, kv["id"], kv["uuid"]))
print("MIG devices in the driver %s: %s" % (sys.argv[2], len(out) or "none"))
for o in out:
    print("   " + o)' "$KDEV_MOCK_NVML_STATE" "$1"
}

run_dra_node() {
  local title=$1 topology=$2
  local node=$work/dra name=demo-node driver=gpu.nvidia.com token=kdev-demo-token
  local uid=5e1d3c2a-9b7f-4d61-8a20-0c4e6f8b1d37
  mkdir -p "$node/plugins_registry" "$node/plugins" "$node/cdi"
  export KDEV_MOCK_NVML_TOPOLOGY="$topology"
  export KDEV_MOCK_NVML_CONTROL="$node/nvml-control"
  # gpu-7 in MIG mode with no MIG devices: with --dynamic-mig it is published
  # whole and as its possible MIG placements, and a claim's MIG device is
  # made at prepare (the mock writes the MIG capability minors under proc/)
  echo "mig-mode GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906 1" >"$KDEV_MOCK_NVML_CONTROL"
  export KDEV_MOCK_NVML_PROC="$node/proc"
  # the mock driver's MIG instances, kept where the demo can show them
  export KDEV_MOCK_NVML_STATE="$node/nvml-state"
  mkdir -p "$node/proc"
  /usr/bin/python3 -c 'import json, sys
node = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": sys.argv[2], "uid": "7f3e0b52-demo-node"}}
with open(sys.argv[1]) as f:
    json.dump([node] + json.load(f), sys.stdout)' \
    "$root/examples/demo-dra-claims.json" "$name" >"$node/seed.json"

  echo "######## $title"
  # The server serves until its stdin reaches EOF (or SIGTERM): a FIFO held open.
  mkfifo "$node/api.in"
  /usr/bin/python3 "$root/tests/kubeapi/server.py" --token "$token" --seed "$node/seed.json" \
    <"$node/api.in" >"$node/api.json" 2>"$node/api.log" &
  api_pid=$!
  exec 3>"$node/api.in"
  local i url=""
  for ((i = 0; i < 300; i++)); do
    url=$(sed -n 's/.*"url": "\([^"]*\)".*/\1/p' "$node/api.json")
    [ -n "$url" ] && break
    kill -0 "$api_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$url" ]; then
    echo "the stand-in API server did not start:"; cat "$node/api.log"
    exec 3>&-; api_pid=""; failed=1; return
  fi
  cat >"$node/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: demo
clusters:
- name: stand-in
  cluster:
    server: $url
users:
- name: demo
  user:
    token: $token
contexts:
- name: demo
  context:
    cluster: stand-in
    user: demo
EOF
  echo "== stand-in API server (tests/kubeapi/server.py) at $url: Node $name," \
       "DeviceClasses $driver, mig.nvidia.com, pending ResourceClaims default/demo-gpu," \
       "default/demo-h200, default/demo-share-a, default/demo-share-b, default/demo-mig" \
       "(examples/demo-dra-claims.json)"
  /usr/bin/python3 -c 'import json, sys
for o in json.load(open(sys.argv[1])):
    if o["kind"] != "ResourceClaim":
        continue
    for r in o["spec"]["devices"]["requests"]:
        for sel in r["exactly"].get("selectors", []):
            print("   ResourceClaim %s/%s request %s: class %s, selector %s" % (
                o["metadata"]["namespace"], o["metadata"]["name"], r["name"],
                r["exactly"]["deviceClassName"], sel["cel"]["expression"]))
        cap = r["exactly"].get("capacity", {}).get("requests")
        if cap:
            print("   ResourceClaim %s/%s request %s: class %s, a share: capacity %s" % (
                o["metadata"]["namespace"], o["metadata"]["name"], r["name"],
                r["exactly"]["deviceClassName"],
                ", ".join("%s %s" % kv for kv in sorted(cap.items()))))' \
    "$root/examples/demo-dra-claims.json"
  echo "== kdev-dra-plugin on $(basename "$topology" .yaml)"
  ${KDEV_WRAP:-} "$build"/kdev-dra-plugin --node-name "$name" --driver-name "$driver" \
    --plugins-registry "$node/plugins_registry" --plugin-dir "$node/plugins/$driver" \
    --cdi-dir "$node/cdi" --kubeconfig "$node/kubeconfig" \
    --shareable-gpus --share-root "$node/share" --dynamic-mig --proc-root "$node/proc" \
    2>"$node/plugin.log" &
  plugin_pid=$!
  local dra_status=0 plugin_status=0 slices_status=0
  /usr/bin/python3 "$root/scripts/demo-dra-slices.py" "$url" "$token" "$name" "$driver" 60 \
    || slices_status=$?
  echo
  # the scheduler's part: demo-gpu fits (allocated, written to its status),
  # demo-h200 asks for a product the node does not have (explained, exit 1)
  echo "== kdevctl dra allocate --node $name (the scheduler's structured allocator)"
  local alloc_status=0
  "$build"/kdevctl dra allocate --kubeconfig "$node/kubeconfig" --node "$name" 2>&1 \
    || alloc_status=$?
  echo "kdevctl dra allocate exit status: $alloc_status (1: a claim cannot be allocated)"
  [ "$alloc_status" -eq 1 ] || dra_status=1
  echo
  echo "== kdevctl dra --scenario demo-dra.scenario.yaml (prepare)"
  "$build"/kdevctl dra --registry "$node/plugins_registry" \
    --scenario "$root/examples/demo-dra.scenario.yaml" 2>&1 || dra_status=$?
  echo
  local spec=$node/cdi/k8s.$driver-claim_$uid.json
  echo "== CDI spec $(basename "$spec")"
  if [ -e "$spec" ]; then
    cat "$spec"
    [ -z "$(tail -c1 "$spec")" ] || echo
  else
    echo "(missing)"; dra_status=1
  fi
  # the two shares of one GPU: each claim's libkdev-share.so limits
  local lim
  for lim in "$node"/share/claims/*/limits; do
    [ -e "$lim" ] || { echo "(no share limits)"; dra_status=1; break; }
    echo "== share limits $(basename "$(dirname "$lim")")/limits (GPU UUID, memory bytes, compute %)"
    grep -v '^#' "$lim"
  done
  # the dynamic MIG claim: the MIG device made for it, its capability nodes
  local mig_spec=$node/cdi/k8s.$driver-claim_9c5b7a6e-dfb3-41a5-8e64-4a8c0d2f5b7b.json
  echo "== dynamic MIG claim default/demo-mig: CDI device nodes"
  if [ -e "$mig_spec" ]; then
    /usr/bin/python3 -c 'import json, sys
for d in json.load(open(sys.argv[1]))["devices"]:
    print("   %s: %s" % (d["name"], " ".join(
        n["path"] for n in d["containerEdits"]["deviceNodes"])))' "$mig_spec"
  else
    echo "(missing)"; dra_status=1
  fi
  mig_instances "after prepare"
  echo
  echo "== kdevctl dra --scenario demo-dra-unprepare.scenario.yaml"
  "$build"/kdevctl dra --registry "$node/plugins_registry" \
    --scenario "$root/examples/demo-dra-unprepare.scenario.yaml" 2>&1 || dra_status=$?
  if [ -e "$spec" ]; then
    echo "CDI spec after unprepare: still there"; dra_status=1
  else
    echo "CDI spec after unprepare: removed"
  fi
  mig_instances "after unprepare"
  if compgen -G "$node/share/claims/*" >/dev/null; then
    echo "share regions after unprepare: still there"; dra_status=1
  else
    echo "share regions after unprepare: removed"
  fi
  kill -TERM "$plugin_pid" 2>/dev/null || true
  wait "$plugin_pid" || plugin_status=$?
  plugin_pid=""
  # one log line per claim prepared / unprepared (timestamps cut)
  echo "== kdev-dra-plugin claim log"
  sed -n 's/^ts=[^ ]* \(level=[a-z]* msg="claim .*\)$/\1/p' "$node/plugin.log"
  grep -q 'msg="claim prepared"' "$node/plugin.log" \
    && grep -q 'msg="claim unprepared"' "$node/plugin.log" || dra_status=1
  exec 3>&-   # EOF on the server's stdin: it exits
  local api_status=0
  wait "$api_pid" || api_status=$?
  api_pid=""
  echo
  if [ "${KDEV_DEMO_VERBOSE:-0}" = 1 ] || [ "$dra_status" -ne 0 ] || [ "$plugin_status" -ne 0 ] \
     || [ "$slices_status" -ne 0 ] || [ "$api_status" -ne 0 ]; then
    echo "== kdev-dra-plugin log"
    cat "$node/plugin.log"
    echo "== stand-in API server log (exit status $api_status)"
    cat "$node/api.log"
  else
    echo "== kdev-dra-plugin: $(grep -c 'registered with kubelet' "$node/plugin.log") registrations" \
         "(set KDEV_DEMO_VERBOSE=1 for its log)"
  fi
  local leftover
  leftover=$(find "$node/plugins_registry" "$node/plugins" -type s | wc -l)
  echo "kdevctl dra exit status: $dra_status; kdev-dra-plugin exit status: $plugin_status; sockets left: $leftover"
  echo
  [ "$dra_status" -eq 0 ] && [ "$plugin_status" -eq 0 ] && [ "$slices_status" -eq 0 ] \
    && [ "$api_status" -eq 0 ] && [ "$leftover" -eq 0 ] || failed=1
}

topologies=$root/mock/nvml/topologies
if [ $# -ge 2 ]; then
  run_node "your node" "$1" "$2" "${KDEV_DEMO_TOPOLOGY:-$topologies/h100-80gb-8x-nvswitch.yaml}"
else
  run_node "node 1: device nodes + 8x H100 (time-slicing, a GPU fault and its recovery)" \
    "$root/examples/demo.yaml" "$root/examples/demo.scenario.yaml" \
    "$topologies/h100-80gb-8x-nvswitch.yaml"
  run_node "node 2: 4x A100-40GB with MIG, strategy mixed" \
    "$root/examples/demo-mig.yaml" "$root/examples/demo-mig.scenario.yaml" \
    "$topologies/mig-a100-40gb.yaml"
  run_dra_node "node 3: DRA: 8x H100 as ResourceSlices, user ResourceClaims allocated (a whole GPU, two shares of one, a MIG device made on demand), prepared as CDI devices" \
    "$topologies/h100-80gb-8x-nvswitch.yaml"
fi
exit $failed
