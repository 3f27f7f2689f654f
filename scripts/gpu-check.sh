#!/usr/bin/env bash
# Real-GPU check of kdev on a machine with an NVIDIA GPU and driver: proves the
# NVML path in minutes and leaves one summary under bench/results/.
#
# STRICTLY READ-ONLY for the GPUs. It never changes GPU settings, MIG mode,
# compute mode, clocks, power limits, persistence mode or ECC: the only
# nvidia-smi calls are the three queries below (--query-gpu ... --format=csv
# twice and -q), never a set option; kdev-plugin only queries NVML (discovery
# and health events), and no MPS daemon is started. Files are written only in the build directory, a temporary
# directory (removed at exit) and the summary file.
#
# Steps:
#   1. build kdev (scripts/build.sh --build-dir DIR; skipped with --no-build);
#   2. discovery: `kdev-plugin --list-gpus` against the real driver, compared
#      per GPU (by UUID) with `nvidia-smi --query-gpu=uuid,name,memory.total,
#      pci.bus_id,mig.mode.current,driver_version --format=csv,noheader` and
#      the "Minor Number" of `nvidia-smi -q`: UUID, name, memory, PCI bus ID,
#      minor number, MIG mode, and the driver version; then MPS capability,
#      by query only: the compute capability and compute mode
#      (`--query-gpu=uuid,compute_cap,compute_mode`) and kdev's sharing.mps
#      replica limit for it (48 from 7.5, else 16): `--check-config` accepts
#      the limit and refuses one more with NVIDIA's text;
#   3. kdev-plugin serves nvidia.com/gpu (device list strategies envvar and
#      cdi-cri, CDI spec for --driver-root) to `kdevctl kubelet`, which waits
#      for every GPU and admits one pod asking for one GPU (Allocate);
#   4. the CDI spec kdev wrote is read back as JSON (cdiVersion, kind, one
#      device per GPU, the allocated CDI device among them) and, when a
#      validator is given (--cdi-validator PATH, or KDEV_CDI_VALIDATOR, or
#      BUILD/tests/cdi/cdi-validate when it exists), passed to it as
#      `VALIDATOR SPEC` (exit 0: valid);
#   5. one summary on stdout, also saved as
#      RESULTS/<date>-gpu-check-<GPU name>.txt; exit 0 when every check
#      passed, 1 otherwise, 2 for a usage error.
#
# Usage: scripts/gpu-check.sh [--build-dir DIR] [--no-build] [--driver-root DIR]
#                             [--cdi-validator PATH] [--results DIR]
#   --build-dir DIR       build tree (default: build-gpu-check)
#   --no-build            use the binaries already in DIR
#   --driver-root DIR     NVIDIA driver root (default /; /run/nvidia/driver
#                         with the GPU operator's driver container)
#   --cdi-validator PATH  CDI spec validator to run on the spec
#   --results DIR         where the summary is saved (default bench/results)
# Needs bash, python3 (JSON) and nvidia-smi on PATH.
#
# Test mode (tests/integration/gpu_check_mock.sh): KDEV_GPU_CHECK_MOCK_TOPOLOGY
# names a mock/nvml topology: kdev then loads the mock libnvidia-ml.so.1 from
# the build tree, and the nvidia-smi on PATH is a stand-in printing the
# topology's values. KDEV_GPU_CHECK_DATE sets the date (default: today, UTC).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD

build_dir=build-gpu-check
build=1
driver_root=/
validator="${KDEV_CDI_VALIDATOR:-}"
results=bench/results
usage() { sed -n '31,38p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --driver-root) driver_root="$2"; shift 2 ;;
    --cdi-validator) validator="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v nvidia-smi >/dev/null || { echo "gpu-check.sh: nvidia-smi not found on PATH" >&2; exit 1; }
command -v python3 >/dev/null || { echo "gpu-check.sh: python3 not found" >&2; exit 1; }

if [ "$build" -eq 1 ]; then
  scripts/build.sh --build-dir "$build_dir" >&2
fi
case "$build_dir" in /*) ;; *) build_dir="$src/$build_dir" ;; esac
for b in kdev-plugin kdevctl; do
  [ -x "$build_dir/$b" ] || { echo "gpu-check.sh: $build_dir/$b not built" >&2; exit 1; }
done
if [ -z "$validator" ] && [ -x "$build_dir/tests/cdi/cdi-validate" ]; then
  validator="$build_dir/tests/cdi/cdi-validate"
fi

if [ -n "${KDEV_GPU_CHECK_MOCK_TOPOLOGY:-}" ]; then
  export LD_LIBRARY_PATH="$build_dir/mock/nvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KDEV_MOCK_NVML_TOPOLOGY="$KDEV_GPU_CHECK_MOCK_TOPOLOGY"
fi
# kdev-plugin reads only its flags here, not a node's deployment settings.
unset KDEV_CONFIG CONFIG_FILE KUBELET_SOCKET KDEV_DEVICE_PLUGIN_DIR KDEV_METRICS_ADDRESS \
  KDEV_NFD_FEATURES_FILE DEVICE_LIST_STRATEGY KDEV_CDI_DIR

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdev-gpu-check.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
date_text="${KDEV_GPU_CHECK_DATE:-$(date -u +%F)}"
fails=0
out=()
say() { out+=("$*"); }
check() { # check NAME OK? DETAIL
  if [ "$2" = ok ]; then say "$1: ok ($3)"; else say "$1: FAIL ($3)"; fails=$((fails + 1)); fi
}

# --- 2. discovery ------------------------------------------------------------
plugin="$build_dir/kdev-plugin"
version=$("$plugin" --version | awk '{print $2}')
if ! "$plugin" --list-gpus --driver-root "$driver_root" >"$tmp/kdev.csv" 2>"$tmp/kdev.log"; then
  sed 's/^/  /' "$tmp/kdev.log" >&2
fi
# read-only queries (with the compute_cap one of 2b, the only nvidia-smi
# calls of this script)
nvidia-smi --query-gpu=uuid,name,memory.total,pci.bus_id,mig.mode.current,driver_version \
  --format=csv,noheader >"$tmp/smi.csv"
nvidia-smi -q >"$tmp/smi-q.txt"
start=$(grep -m1 'msg="Running with config"' "$tmp/kdev.log" || true)
commit=$(sed -n 's/.* commit=\([^ ]*\) .*/\1/p' <<<"$start")
build_desc=$(sed -n 's/.* build=\([^ ]*\) .*/\1/p' <<<"$start")
kdev_driver=$(sed -n 's/.*msg="NVIDIA GPUs found" .*driver=\([^ ]*\) .*/\1/p' "$tmp/kdev.log" | head -1)

python3 - "$tmp" "$kdev_driver" >"$tmp/discovery.txt" <<'EOF'
import re, sys
tmp, kdev_driver = sys.argv[1], sys.argv[2]
def rows(path):
    return [[c.strip() for c in line.split(",")] for line in open(path) if line.strip()]
kdev = {r[0]: r for r in rows(tmp + "/kdev.csv")}
smi = rows(tmp + "/smi.csv")
minors, bus = {}, None
for line in open(tmp + "/smi-q.txt"):
    m = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])\s*$", line)
    if m:
        bus = m.group(1).upper()
    m = re.match(r"^\s*Minor Number\s*:\s*(\S+)", line)
    if m and bus:
        minors[bus] = m.group(1)
drivers = sorted({r[5] for r in smi if len(r) > 5})
ok = kdev_driver != "" and drivers == [kdev_driver]
print("driver:%s:kdev %s, nvidia-smi %s" % ("ok" if ok else "FAIL", kdev_driver or "none",
                                            ",".join(drivers) or "none"))
ok = len(kdev) == len(smi) and len(smi) > 0
print("gpus:%s:kdev %d, nvidia-smi %d" % ("ok" if ok else "FAIL", len(kdev), len(smi)))
for i, s in enumerate(smi):
    uuid, name, mem, pci, mig = s[0], s[1], s[2], s[3], s[4]
    minor = minors.get(pci.upper(), "?")
    k = kdev.get(uuid)
    if k is None:
        print("gpu %d %s:FAIL:not found by kdev" % (i, uuid))
        continue
    parts, bad = [], False
    for what, kv, sv in (("name", k[1], name), ("memory", k[2], mem), ("pci", k[3], pci),
                         ("minor", k[4], minor), ("mig", k[5], mig)):
        if kv == sv:
            parts.append("%s %s" % (what, sv))
        else:
            bad = True
            parts.append('%s MISMATCH kdev "%s" nvidia-smi "%s"' % (what, kv, sv))
    print("gpu %d %s:%s:%s" % (i, uuid, "FAIL" if bad else "ok", ", ".join(parts)))
for uuid in kdev:
    if uuid not in {s[0] for s in smi}:
        print("gpu - %s:FAIL:found by kdev, not by nvidia-smi" % uuid)
EOF
while IFS=: read -r name status detail; do
  check "$name" "$status" "$detail"
done <"$tmp/discovery.txt"

# --- 2b. MPS capability: queries only, no MPS daemon is started ---------------
# The replica limit kdev enforces for sharing.mps (NVIDIA mps/device.go: 48 at
# compute capability >= 7.5, else 16) against the real compute capability:
# --check-config with that many replicas passes, one more fails with NVIDIA's
# text. --check-config discovers through NVML and starts nothing.
nvidia-smi --query-gpu=uuid,compute_cap,compute_mode --format=csv,noheader \
  >"$tmp/smi-mps.csv" 2>/dev/null || true
cc=$(awk -F', ' 'NR == 1 {print $2}' "$tmp/smi-mps.csv")
mode=$(awk -F', ' 'NR == 1 {print $3}' "$tmp/smi-mps.csv")
if [[ "$cc" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
  if (( BASH_REMATCH[1] > 7 || (BASH_REMATCH[1] == 7 && BASH_REMATCH[2] >= 5) )); then
    mps_max=48
  else
    mps_max=16
  fi
  for n in "$mps_max" $((mps_max + 1)); do
    printf 'version: v1\nflags:\n  mpsRoot: %s/mps\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: %s}]\n' \
      "$tmp" "$n" >"$tmp/mps-$n.yaml"
    mps_rc=0
    "$plugin" --check-config "$tmp/mps-$n.yaml" --driver-root "$driver_root" \
      >"$tmp/mps-$n.out" 2>&1 || mps_rc=$?
    if [ "$n" = "$mps_max" ]; then
      if [ "$mps_rc" = 0 ] && grep -q "^nvidia.com/gpu: .* replicas of " "$tmp/mps-$n.out"; then
        check "mps replicas $n" ok "compute capability $cc: --check-config accepts $n replicas per GPU"
      else
        check "mps replicas $n" FAIL "exit $mps_rc: $(tail -1 "$tmp/mps-$n.out")"
      fi
    else
      want="invalid MPS configuration: invalid device maximum allowed replicas exceeded: $n > $mps_max"
      if [ "$mps_rc" = 1 ] && grep -qF "$want" "$tmp/mps-$n.out"; then
        check "mps replicas $n" ok "refused: $want"
      else
        check "mps replicas $n" FAIL "exit $mps_rc: $(tail -1 "$tmp/mps-$n.out")"
      fi
    fi
  done
  say "mps: compute capability $cc, compute mode ${mode:-unknown} (read, not changed), nvidia-cuda-mps-control $(command -v nvidia-cuda-mps-control || echo 'not on PATH') (not run)"
else
  say "mps: skipped (nvidia-smi gave no compute_cap: driver too old for that query)"
fi

first_name=$(awk -F', ' 'NR == 1 {print $2}' "$tmp/smi.csv")
n_gpus=$(grep -c . "$tmp/smi.csv" || true)

# --- 3. register and allocate one GPU ------------------------------------------
dp="$tmp/device-plugins"
cdi="$tmp/cdi"
mkdir -p "$dp" "$cdi"
cat >"$tmp/scenario.yaml" <<EOF
wait:
  timeout: 60
  resources:
    nvidia.com/gpu: ${n_gpus:-1}
pods:
  - name: gpu-check
    containers:
      - name: main
        limits:
          nvidia.com/gpu: 1
EOF
"$build_dir/kdevctl" kubelet --dir "$dp" --scenario "$tmp/scenario.yaml" -o json \
  >"$tmp/kubelet.json" 2>"$tmp/kubelet.log" &
kubelet_pid=$!
pids+=("$kubelet_pid")
for _ in $(seq 100); do [ -S "$dp/kubelet.sock" ] && break; sleep 0.1; done
"$plugin" --device-plugin-dir "$dp" --driver-root "$driver_root" --cdi-dir "$cdi" \
  --device-list-strategy envvar --device-list-strategy cdi-cri >"$tmp/plugin.log" 2>&1 &
plugin_pid=$!
pids+=("$plugin_pid")
kubelet_rc=0
wait "$kubelet_pid" || kubelet_rc=$?
# the spec is removed when kdev-plugin stops: read it while it serves
cp "$cdi"/*.json "$tmp/" 2>/dev/null || true
spec=$(ls "$tmp"/k8s.device-plugin.nvidia.com-gpu.json 2>/dev/null || true)
kill -TERM "$plugin_pid" 2>/dev/null || true
plugin_rc=0
wait "$plugin_pid" || plugin_rc=$?
pids=()

python3 - "$tmp/kubelet.json" "$kubelet_rc" "${n_gpus:-0}" "${spec:-}" >"$tmp/serve.txt" <<'EOF'
import json, sys
path, rc, n, spec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
try:
    r = json.load(open(path))
except (OSError, ValueError) as e:
    r = None
    print("register:FAIL:kdevctl kubelet exited %d, no result (%s)" % (rc, e))
cdi_name = None
if r is not None:
    gpu = [x for x in r.get("resources", []) if x.get("name") == "nvidia.com/gpu"]
    wait = [s for s in r.get("steps", []) if s.get("kind") == "wait"]
    if gpu and wait and wait[0].get("ok") and gpu[0]["capacity"] == n:
        print("register:ok:nvidia.com/gpu capacity %d" % gpu[0]["capacity"])
    else:
        print("register:FAIL:%s" % (wait[0].get("result") if wait else "no wait result"))
    pods = [s for s in r.get("steps", []) if s.get("kind") == "pod"]
    c = pods[0]["containers"][0] if pods and pods[0].get("admitted") else None
    ids = c["allocations"][0]["deviceIDs"] if c and c.get("allocations") else []
    cdis = [d["name"] for d in c.get("cdiDevices", [])] if c else []
    if len(ids) == 1 and len(cdis) == 1 and c["envs"].get("NVIDIA_VISIBLE_DEVICES") == ids[0]:
        cdi_name = cdis[0]
        print("allocate:ok:1 GPU %s, NVIDIA_VISIBLE_DEVICES %s, CDI device %s"
              % (ids[0], ids[0], cdi_name))
    else:
        why = pods[0].get("message", "not admitted") if pods else "no pod result"
        print("allocate:FAIL:%s" % (why if not c else "devices %s, CDI devices %s" % (ids, cdis)))
if not spec:
    print("cdi spec:FAIL:no spec written")
else:
    try:
        s = json.load(open(spec))
        names = ["%s=%s" % (s["kind"], d["name"]) for d in s.get("devices", [])]
        ok = s.get("kind") == "k8s.device-plugin.nvidia.com/gpu" and len(names) >= n and \
            (cdi_name is None or cdi_name in names)
        print("cdi spec:%s:%s, cdiVersion %s, %d devices%s" % (
            "ok" if ok else "FAIL", spec.rsplit("/", 1)[1], s.get("cdiVersion"), len(names),
            ", the allocated one among them" if cdi_name in names else ""))
    except (OSError, ValueError, KeyError) as e:
        print("cdi spec:FAIL:not a CDI spec: %s" % e)
EOF
while IFS=: read -r name status detail; do
  check "$name" "$status" "$detail"
done <"$tmp/serve.txt"
if [ -n "$validator" ] && [ -n "$spec" ]; then
  if "$validator" "$spec" >"$tmp/validator.log" 2>&1; then
    check "cdi validator" ok "$(basename "$validator") accepts the spec"
  else
    check "cdi validator" FAIL "$(basename "$validator"): $(tr '\n' ' ' <"$tmp/validator.log")"
  fi
else
  say "cdi validator: skipped (none given)"
fi
if [ "$plugin_rc" -eq 0 ]; then
  check "stop" ok "kdev-plugin exited 0 on SIGTERM"
else
  check "stop" FAIL "kdev-plugin exited $plugin_rc; its log: $(tail -3 "$tmp/plugin.log" | tr '\n' ' ')"
fi

# --- 5. summary -----------------------------------------------------------------
result=PASS
[ "$fails" -eq 0 ] || result="FAIL ($fails checks failed)"
summary="$tmp/summary.txt"
{
  echo "kdev gpu-check $date_text (read-only: no GPU setting, MIG or compute mode changed)"
  echo "kdev $version, commit ${commit:-unknown}, build ${build_desc:-unknown}, driver root $driver_root"
  printf '%s\n' "${out[@]}"
  echo "result: $result"
} >"$summary"
slug=$(tr 'A-Z' 'a-z' <<<"${first_name:-no-gpu}" | tr -cs 'a-z0-9' '-' | sed 's/-$//')
case "$results" in /*) ;; *) results="$src/$results" ;; esac
mkdir -p "$results"
saved="$results/$date_text-gpu-check-$slug.txt"
cp "$summary" "$saved"
cat "$summary"
echo "gpu-check.sh: saved $saved" >&2
[ "$fails" -eq 0 ]
