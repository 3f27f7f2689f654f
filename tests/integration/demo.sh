#!/usr/bin/env bash
# The README's demo runs end to end on the built binaries (generic devices and
# mock NVIDIA GPUs), exits 0 and prints the allocations, the GPU fault and its
# recovery, and the CDI spec's life.
set -uo pipefail
out=$(KDEV_BUILD_DIR="$KDEV_BUILD_DIR" timeout 240 "$KDEV_SOURCE_DIR/scripts/demo.sh" 2>&1)
rc=$?
fail() { echo "FAIL: $*"; echo "$out"; echo "0 passed, 1 failed"; exit 1; }
[ "$rc" -eq 0 ] || fail "demo exited $rc"
expect() { grep -qxF -- "$1" <<<"$out" || fail "missing line: $1"; }
expect "wait: satisfied: example.com/null allocatable 2 (wanted 2) nvidia.com/gpu allocatable 8 (wanted 8)"
expect "pod train (uid dee795a6-c508-4209-8e25-dca2ae87b6bd): admitted"
expect "    example.com/null: null::0"
expect "    device /dev/null from /dev/null (rw)"
expect "pod trainer (uid ecf2dc7c-f0a8-4902-85e3-b3ba3f8ac52a): admitted"
expect "    env NVIDIA_VISIBLE_DEVICES=GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255"
expect "    cdi k8s.device-plugin.nvidia.com/gpu=GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255"
expect "wait: satisfied: nvidia.com/gpu allocatable 7 (wanted exactly 7)"
expect "pod eval (uid d58d0f60-840e-48af-82e2-da2279c28a5b): rejected: UnexpectedAdmissionError: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 3, Available: 2, which is unexpected"
expect "wait: satisfied: nvidia.com/gpu allocatable 8 (wanted exactly 8)"
expect "pod eval-retry (uid 0f24b897-81ce-47cc-8db8-a0871337d3bc): admitted"
grep -qE '^nvidia.com/gpu +8 +8 +8 +kdev-nvidia.com_gpu.sock +connected$' <<<"$out" || fail "GPU capacity row"
grep -qE '^example.com/null +2 +2 +2 +kdev-example.com_null.sock +connected$' <<<"$out" || fail "null capacity row"
grep -qF 'msg="GPU unhealthy" uuid=GPU-e468c3ab-0f10-9911-df74-2436cb131826 xid=79' <<<"$out" || fail "health event"
grep -qF 'msg="GPU healthy again" uuid=GPU-e468c3ab-0f10-9911-df74-2436cb131826' <<<"$out" || fail "recovery"
expect "CDI spec while running: k8s.device-plugin.nvidia.com-gpu.json"
expect "CDI spec after exit: removed"
expect "kdevctl kubelet exit status: 0; kdev-plugin exit status: 0; sockets left: 0"
echo "1 passed, 0 failed"
