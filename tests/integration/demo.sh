#!/usr/bin/env bash
# The README's demo runs end to end on the built binaries, exits 0 and prints,
# for node 1 (generic devices and 8 mock H100, two of them time-sliced) the
# allocations, the GPU fault and its recovery and the CDI spec's life, and for
# node 2 (mock A100-40GB, MIG strategy mixed) the MIG resources and their
# device nodes, and for node 3 (DRA) the ResourceSlice published to the
# stand-in API server, the prepared claim's CDI device ID and CDI spec, the
# spec's removal on unprepare and the plugin's log line for each, after
# kdevctl dra allocate allocated the user's claim and explained the claim no
# GPU of the node satisfies.
set -uo pipefail
out=$(KDEV_BUILD_DIR="$KDEV_BUILD_DIR" timeout 300 "$KDEV_SOURCE_DIR/scripts/demo.sh" 2>&1)
rc=$?
fail() { echo "FAIL: $*"; echo "$out"; echo "0 passed, 1 failed"; exit 1; }
[ "$rc" -eq 0 ] || fail "demo exited $rc"
expect() { grep -qxF -- "$1" <<<"$out" || fail "missing line: $1"; }
row() { grep -qE "^$1$" <<<"$out" || fail "missing table row: $1"; }
# node 1
expect "wait: satisfied: example.com/null allocatable 2 (wanted 2) nvidia.com/gpu allocatable 6 (wanted 6) nvidia.com/gpu.shared allocatable 8 (wanted 8)"
expect "pod train (uid dee795a6-c508-4209-8e25-dca2ae87b6bd): admitted"
expect "    example.com/null: null::0"
expect "    device /dev/null from /dev/null (rw)"
expect "    nvidia.com/gpu: GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e,GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255,GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9,GPU-e468c3ab-0f10-9911-df74-2436cb131826"
expect "    env NVIDIA_VISIBLE_DEVICES=GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8"
expect "    cdi k8s.device-plugin.nvidia.com/gpu=GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8"
expect "    nvidia.com/gpu.shared: GPU-35ca105b-9262-0c50-b916-71c8b2d581d5::0,GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906::0"
expect "    env NVIDIA_VISIBLE_DEVICES=GPU-35ca105b-9262-0c50-b916-71c8b2d581d5,GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906"
expect "wait: satisfied: nvidia.com/gpu allocatable 5 (wanted exactly 5)"
expect "pod eval (uid d58d0f60-840e-48af-82e2-da2279c28a5b): rejected: UnexpectedAdmissionError: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"
expect "wait: satisfied: nvidia.com/gpu allocatable 6 (wanted exactly 6)"
expect "    nvidia.com/gpu: GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759"
row 'nvidia.com/gpu +6 +6 +6 +kdev-nvidia.com_gpu.sock +connected'
row 'nvidia.com/gpu.shared +8 +8 +2 +kdev-nvidia.com_gpu.shared.sock +connected'
row 'example.com/null +2 +2 +2 +kdev-example.com_null.sock +connected'
grep -qF 'msg="GPU unhealthy" uuid=GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759 xid=79' <<<"$out" || fail "health event"
grep -qF 'msg="GPU healthy again" uuid=GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759' <<<"$out" || fail "recovery"
expect "CDI spec while running: k8s.device-plugin.nvidia.com-gpu.json"
expect "CDI spec after exit: removed"
# node 2
expect "nvidia.com/mig-1g.5gb: 6 devices (6 replicas of 3 devices): MIG-d49257bf-597e-857d-3bb4-e6384c9909cc::0 MIG-d49257bf-597e-857d-3bb4-e6384c9909cc::1 MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2::0 MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2::1 MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8::0 MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8::1"
expect "    nvidia.com/mig-3g.20gb: MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"
expect "    device /dev/nvidia-caps/nvidia-cap21 from /dev/nvidia-caps/nvidia-cap21 (rw)"
expect "    nvidia.com/mig-1g.5gb.me: MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046"
row 'nvidia.com/mig-1g.5gb +6 +6 +2 +kdev-nvidia.com_mig-1g.5gb.sock +connected'
row 'nvidia.com/mig-2g.10gb +1 +1 +0 +kdev-nvidia.com_mig-2g.10gb.sock +connected'
# node 3: DRA
uid=5e1d3c2a-9b7f-4d61-8a20-0c4e6f8b1d37
# gpu-7 in MIG mode, published with --dynamic-mig: its counter set in a slice
# of its own (the stand-in answers Kubernetes 1.35), then every device
expect "ResourceSlice for demo-node: driver gpu.nvidia.com, pool demo-node (generation 1, 2 slice(s)), counter sets: gpu-7-counter-set"
expect "ResourceSlice for demo-node: driver gpu.nvidia.com, pool demo-node (generation 1, 2 slice(s)), 33 devices: gpu-0 gpu-1 gpu-2 gpu-3 gpu-4 gpu-5 gpu-6 gpu-7 gpu-7-mig-1g10gb-19-0 gpu-7-mig-1g10gb-19-1 gpu-7-mig-1g10gb-19-2 gpu-7-mig-1g10gb-19-3 gpu-7-mig-1g10gb-19-4 gpu-7-mig-1g10gb-19-5 gpu-7-mig-1g10gb-19-6 gpu-7-mig-2g20gb-14-0 gpu-7-mig-2g20gb-14-2 gpu-7-mig-2g20gb-14-4 gpu-7-mig-3g40gb-9-0 gpu-7-mig-3g40gb-9-4 gpu-7-mig-4g40gb-5-0 gpu-7-mig-7g80gb-0-0 gpu-7-mig-1g10gb-me-20-0 gpu-7-mig-1g10gb-me-20-1 gpu-7-mig-1g10gb-me-20-2 gpu-7-mig-1g10gb-me-20-3 gpu-7-mig-1g10gb-me-20-4 gpu-7-mig-1g10gb-me-20-5 gpu-7-mig-1g10gb-me-20-6 gpu-7-mig-1g20gb-15-0 gpu-7-mig-1g20gb-15-2 gpu-7-mig-1g20gb-15-4 gpu-7-mig-1g20gb-15-6"
expect "   ResourceClaim default/demo-gpu request gpu: class gpu.nvidia.com, selector device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100') && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
expect "default/demo-gpu: allocated on node demo-node"
expect "  gpu: gpu.nvidia.com/demo-node/gpu-0 (share e8e54b71-abf6-446c-80d2-edfe1a7e4379)"
expect "   ResourceClaim default/demo-share-a request gpu: class gpu.nvidia.com, a share: capacity compute 25, memory 20Gi"
expect "default/demo-share-a: allocated on node demo-node"
expect "  gpu: gpu.nvidia.com/demo-node/gpu-1 (share f5f5f4c7-70c4-4241-9368-06a474fcbe50)"
expect "  gpu: gpu.nvidia.com/demo-node/gpu-1 (share 45a03269-9ce2-407f-9fcf-9bf13e8773a4)"
expect "default/demo-h200: cannot allocate all claims on node demo-node"
expect "  request gpu: no device of class gpu.nvidia.com matches \`device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'\`: 33 devices checked, 33 rejected (25 by the class's selectors) — productName is \"NVIDIA H100 80GB HBM3\""
expect "kdevctl dra allocate exit status: 1 (1: a claim cannot be allocated)"
# the dynamic MIG claim: a 3g.40gb placement of gpu-7, its MIG device made at
# prepare (GPU instance 1: capability minors 3 + 135*7 + 9 = 957 and 958),
# destroyed at unprepare
expect "   ResourceClaim default/demo-mig request mig: class mig.nvidia.com, selector device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
expect "default/demo-mig: allocated on node demo-node"
expect "  mig: gpu.nvidia.com/demo-node/gpu-7-mig-3g40gb-9-0"
mig=9c5b7a6e-dfb3-41a5-8e64-4a8c0d2f5b7b
row "  $mig +demo-node +gpu-7-mig-3g40gb-9-0 +mig +k8s\\.gpu\\.nvidia\\.com/claim=$mig-gpu-7-mig-3g40gb-9-0 +Healthy"
expect "   $mig-gpu-7-mig-3g40gb-9-0: /dev/nvidia7 /dev/nvidia-caps/nvidia-cap957 /dev/nvidia-caps/nvidia-cap958"
expect "MIG devices in the driver after prepare: 1"
expect "   GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906 GPU instance 1 (memory slices 0-3), compute instance 0: MIG-acc8f7bb-2945-5872-9d2d-cd5f6b969dd7"
expect "MIG devices in the driver after unprepare: none"
row "  $mig +unprepared"
row "  $uid +demo-node +gpu-0 +gpu +k8s\\.gpu\\.nvidia\\.com/claim=$uid-gpu-0 +Healthy"
expect "== CDI spec k8s.gpu.nvidia.com-claim_$uid.json"
expect '  "kind": "k8s.gpu.nvidia.com/claim",'
expect "      \"name\": \"$uid-gpu-0\","
expect '            "path": "/dev/nvidia0"'
row "  $uid +unprepared"
# two shares of gpu-1, each limited by libkdev-share.so; the whole-GPU claim a
# share of all of gpu-0
expect "== share limits 7a3f5e4c-bd91-4f83-8c42-2e6a8b0d3f59-gpu-1/limits (GPU UUID, memory bytes, compute %)"
expect "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255 21474836480 25"
expect "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255 42949672960 50"
expect "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e 85520809984 100"
row "  8b4a6f5d-cea2-4094-9d53-3f7b9c1e4a6a +demo-node +gpu-1 +gpu +k8s\\.gpu\\.nvidia\\.com/claim=8b4a6f5d-cea2-4094-9d53-3f7b9c1e4a6a-gpu-1 +Healthy"
expect "share regions after unprepare: removed"
expect "CDI spec after unprepare: removed"
expect "level=info msg=\"claim prepared\" claim=default/demo-gpu uid=$uid devices=gpu-0 cdi_devices=\"k8s.gpu.nvidia.com/claim=$uid-gpu-0\""
expect "level=info msg=\"claim unprepared\" claim=default/demo-gpu uid=$uid devices=gpu-0 cdi_devices=\"k8s.gpu.nvidia.com/claim=$uid-gpu-0\""
expect "kdevctl dra exit status: 0; kdev-dra-plugin exit status: 0; sockets left: 0"
n=$(grep -cxF "kdevctl kubelet exit status: 0; kdev-plugin exit status: 0; sockets left: 0" <<<"$out")
[ "$n" -eq 2 ] || fail "expected two clean node runs, got $n"
echo "1 passed, 0 failed"
