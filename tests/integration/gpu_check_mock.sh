#!/usr/bin/env bash
# scripts/gpu-check.sh against the mock NVML as far as it goes: the mock
# libnvidia-ml.so.1 stands in for the driver and tests/data/gpu-check/
# nvidia-smi for nvidia-smi (it prints the mock topology's values and
# refuses anything but the two read-only queries). Checks the exact summary
# (stdout and the saved file), that nvidia-smi was only queried, that the
# validator is handed the spec, and a run with a mismatching GPU name and a
# refusing validator (exit 1, the failing lines exact).
set -euo pipefail
src="${KDEV_SOURCE_DIR:-$(dirname "$0")/../..}"
build="${KDEV_BUILD_DIR:-$src/build}"
src=$(cd "$src" && pwd)
build=$(cd "$build" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

commit=$(sed -n 's/#define KDEV_BUILD_COMMIT "\(.*\)"/\1/p' "$build/gen/build_info.h")
desc=$(sed -n 's/#define KDEV_BUILD "\(.*\)"/\1/p' "$build/gen/build_info.h")
version=$("$build/kdev-plugin" --version | awk '{print $2}')

cat >"$tmp/validator" <<'EOF2'
#!/usr/bin/env bash
# stand-in CDI validator: records its argument and the spec's kind
echo "$#:$1" >>"$VALIDATOR_LOG"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kind"])' "$1" >>"$VALIDATOR_LOG"
[ -z "${VALIDATOR_REFUSE:-}" ] || { echo "spec refused: test"; exit 1; }
EOF2
chmod +x "$tmp/validator"

run() {
  PATH="$src/tests/data/gpu-check:$PATH" \
    KDEV_GPU_CHECK_MOCK_TOPOLOGY="$src/mock/nvml/topologies/h100-80gb-8x-nvswitch.yaml" \
    KDEV_GPU_CHECK_DATE=2026-12-01 FAKE_NVIDIA_SMI_LOG="$tmp/smi.log" \
    VALIDATOR_LOG="$tmp/validator.log" \
    "$src/scripts/gpu-check.sh" --no-build --build-dir "$build" --results "$tmp/results" \
    --cdi-validator "$tmp/validator" "$@"
}

gpu_line() { # gpu_line INDEX UUID BUS
  echo "gpu $1 $2: ok (name NVIDIA H100 80GB HBM3, memory 81559 MiB, pci $3, minor $1, mig Disabled)"
}
G0=GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e
{
  echo "kdev gpu-check 2026-12-01 (read-only: no GPU setting, MIG or compute mode changed)"
  echo "kdev $version, commit $commit, build $desc, driver root /"
  echo "driver: ok (kdev 550.90.07, nvidia-smi 550.90.07)"
  echo "gpus: ok (kdev 8, nvidia-smi 8)"
  gpu_line 0 $G0 00000000:18:00.0
  gpu_line 1 GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255 00000000:2A:00.0
  gpu_line 2 GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9 00000000:3A:00.0
  gpu_line 3 GPU-e468c3ab-0f10-9911-df74-2436cb131826 00000000:5D:00.0
  gpu_line 4 GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8 00000000:9A:00.0
  gpu_line 5 GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759 00000000:AB:00.0
  gpu_line 6 GPU-35ca105b-9262-0c50-b916-71c8b2d581d5 00000000:BA:00.0
  gpu_line 7 GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906 00000000:DB:00.0
  echo "mps replicas 48: ok (compute capability 9.0: --check-config accepts 48 replicas per GPU)"
  echo "mps replicas 49: ok (refused: invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48)"
  echo "mps: compute capability 9.0, compute mode Default (read, not changed), nvidia-cuda-mps-control not on PATH (not run)"
  echo "register: ok (nvidia.com/gpu capacity 8)"
  echo "allocate: ok (1 GPU $G0, NVIDIA_VISIBLE_DEVICES $G0, CDI device k8s.device-plugin.nvidia.com/gpu=$G0)"
  echo "cdi spec: ok (k8s.device-plugin.nvidia.com-gpu.json, cdiVersion 0.3.0, 9 devices, the allocated one among them)"
  echo "cdi validator: ok (validator accepts the spec)"
  echo "stop: ok (kdev-plugin exited 0 on SIGTERM)"
  echo "result: PASS"
} >"$tmp/want.txt"

rc=0
run >"$tmp/out.txt" 2>"$tmp/err.txt" || rc=$?
if [ "$rc" -ne 0 ] || ! diff -u "$tmp/want.txt" "$tmp/out.txt"; then
  echo "FAIL: gpu-check.sh exited $rc or printed another summary; stderr:"; cat "$tmp/err.txt"
  exit 1
fi
saved="$tmp/results/2026-12-01-gpu-check-nvidia-h100-80gb-hbm3.txt"
cmp "$tmp/want.txt" "$saved" || { echo "FAIL: saved summary differs"; exit 1; }
grep -qx "gpu-check.sh: saved $saved" "$tmp/err.txt" || { echo "FAIL: no 'saved' line"; cat "$tmp/err.txt"; exit 1; }
printf '%s\n' \
  "--query-gpu=uuid,name,memory.total,pci.bus_id,mig.mode.current,driver_version --format=csv,noheader" \
  "-q" "--query-gpu=uuid,compute_cap,compute_mode --format=csv,noheader" >"$tmp/smi-want.log"
diff -u "$tmp/smi-want.log" "$tmp/smi.log" || { echo "FAIL: nvidia-smi called otherwise"; exit 1; }
spec_arg=$(sed -n 1p "$tmp/validator.log")
case "$spec_arg" in
  1:/*/k8s.device-plugin.nvidia.com-gpu.json) ;;
  *) echo "FAIL: validator called with \"$spec_arg\""; exit 1 ;;
esac
[ "$(sed -n 2p "$tmp/validator.log")" = "k8s.device-plugin.nvidia.com/gpu" ] || {
  echo "FAIL: validator did not read the spec"; cat "$tmp/validator.log"; exit 1; }
echo "ok: summary, saved file, queries only, validator handed the spec"

# a mismatching name and a refusing validator: exit 1, the failures named
rm -f "$tmp/smi.log"
rc=0
FAKE_NVIDIA_SMI_GPU3_NAME="NVIDIA H100 PCIe" VALIDATOR_REFUSE=1 run >"$tmp/out2.txt" 2>"$tmp/err2.txt" || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: mismatch run exited $rc"; cat "$tmp/err2.txt"; exit 1; }
want3='gpu 3 GPU-e468c3ab-0f10-9911-df74-2436cb131826: FAIL (name MISMATCH kdev "NVIDIA H100 80GB HBM3" nvidia-smi "NVIDIA H100 PCIe", memory 81559 MiB, pci 00000000:5D:00.0, minor 3, mig Disabled)'
grep -qxF "$want3" "$tmp/out2.txt" || { echo "FAIL: no mismatch line"; cat "$tmp/out2.txt"; exit 1; }
grep -qxF "cdi validator: FAIL (validator: spec refused: test )" "$tmp/out2.txt" || {
  echo "FAIL: no validator failure line"; cat "$tmp/out2.txt"; exit 1; }
[ "$(tail -1 "$tmp/out2.txt")" = "result: FAIL (2 checks failed)" ] || {
  echo "FAIL: last line"; cat "$tmp/out2.txt"; exit 1; }
echo "ok: mismatch and refused spec fail the check"
