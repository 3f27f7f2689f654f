"""kdev-dra-plugin device health to kubelet (KEP-4680), on the mock NVML
(mig-a100-40gb: GPU 0 and 1 with MIG devices, GPU 2 in MIG mode without,
GPU 3 whole), this test acting as kubelet: GetInfo advertises
"v1alpha1.DRAResourceHealth"; /v1alpha1.DRAResourceHealth/NodeWatchResources
streams the complete device list at once (every device HEALTHY, no message,
pool = node, timeout 30 s); a critical XID (48) carrying GPU instance 9 /
compute instance 0 of GPU 0 streams UNHEALTHY for that one MIG device with
the exact reason while every other device stays HEALTHY; after the quiet
period a passing probe streams it HEALTHY again with the recovery reason.
The v1 path answers the same list. With --sysfs-root, the MIG devices of
the GPU sysfs places under a root complex carry resource.kubernetes.io/
pcieRoot and resource.kubernetes.io/numaNode, the others neither."""
import importlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
import dra_plugin as dp  # noqa: E402
from dra_plugin_more import claim_obj as claim  # noqa: E402

grpc = kt.grpc
MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")
GPU0 = "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
SICK_MIG = "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc"  # GPU 0, GPU instance 9
WATCH = "/v1alpha1.DRAResourceHealth/NodeWatchResources"
WATCH_V1 = "/v1.DRAResourceHealth/NodeWatchResources"


dp.compile_protos("dra_health/v1alpha1/api.proto")
hpb = importlib.import_module("dra_health.v1alpha1.api_pb2")


def watch(sock, method=WATCH):
    ch = grpc.insecure_channel("unix:" + sock)
    f = ch.unary_stream(method, request_serializer=hpb.NodeWatchResourcesRequest.SerializeToString,
                        response_deserializer=hpb.NodeWatchResourcesResponse.FromString)
    return ch, f(hpb.NodeWatchResourcesRequest(), timeout=120 * kt.TIMEOUT_SCALE)


def table(resp):
    """{device name: (health name, message)} of one response; checks the
    fields every device carries."""
    out = {}
    now = time.time()
    for d in resp.devices:
        assert d.device.pool_name == dp.NODE, d
        assert d.health_check_timeout_seconds == 30, d
        assert abs(d.last_updated_time - now) < 60, (d, now)
        assert d.device.device_name not in out, resp
        out[d.device.device_name] = (hpb.HealthStatus.Name(d.health), d.message)
    return out


def test_mig_device_health_streamed():
    with TempDir() as d:
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")  # mig-minors, written by the mock
        # --sysfs-root: GPU 0 (0000:07:00.0) behind a bridge of root
        # complex pci0000:00, on NUMA node 0; the other GPUs unknown there
        sysfs = os.path.join(root, "sys")
        dev = os.path.join(sysfs, "devices", "pci0000:00", "0000:00:01.0", "0000:07:00.0")
        os.makedirs(dev)
        with open(os.path.join(dev, "numa_node"), "w") as f:
            f.write("0\n")
        os.makedirs(os.path.join(sysfs, "bus", "pci", "devices"))
        os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:07:00.0",
                   os.path.join(sysfs, "bus", "pci", "devices", "0000:07:00.0"))
        e = dp.Env(root, topology=MIG_TOPO, env_extra={"KDEV_MOCK_NVML_PROC": proc},
                   extra=("--proc-root", proc, "--sysfs-root", sysfs,
                          "--health-probe-interval", "1", "--health-quiet-period", "2"))
        with kt.logged(e):
            info = e.register()
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin",
                                                     "v1alpha1.DRAResourceHealth"], info
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            names = {x["attributes"]["uuid"]["string"]: x["name"]
                     for s in sl for x in s["spec"]["devices"]}
            assert len(names) == 9, names  # 4 + 4 MIG devices, gpu-3
            # Kubernetes' standard attributes: GPU 0's MIG devices only
            std = {x["name"]: (x["attributes"].get("resource.kubernetes.io/pcieRoot"),
                               x["attributes"].get("resource.kubernetes.io/numaNode"))
                   for s in sl for x in s["spec"]["devices"]}
            for n, v in std.items():
                want = (({"string": "pci0000:00"}, {"int": 0}) if n.startswith("gpu-0-")
                        else (None, None))
                assert v == want, (n, v)
            assert sum(1 for n in std if n.startswith("gpu-0-")) == 4, std
            sick = names[SICK_MIG]
            assert sick == "gpu-0-mig-1g5gb-19-2", sick
            ch, stream = watch(e.dra_sock())
            first = table(next(stream))
            assert first == {n: ("HEALTHY", "") for n in names.values()}, first
            # the v1 copy of the service: the same list
            ch1, s1 = watch(e.dra_sock(), WATCH_V1)
            assert table(next(s1)) == first
            s1.cancel()
            ch1.close()

            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 48 9 0\n" % GPU0)
            want_bad = dict(first)
            want_bad[sick] = ("UNHEALTHY", "critical XID 48 (GPU instance 9, compute instance 0)")
            got = table(next(stream))
            while got == first:  # a resend before the event
                got = table(next(stream))
            assert got == want_bad, got
            # recovery: quiet period (2 s) then a passing probe
            want_ok = dict(first)
            want_ok[sick] = ("HEALTHY", "no critical event for 2000 ms and probe passed")
            got = table(next(stream))
            while got == want_bad:
                got = table(next(stream))
            assert got == want_ok, got
            stream.cancel()
            ch.close()
            e.stop()


KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
UID_A = "3a0c8f4e-aaaa-4c2e-9a43-000000000001"
UID_B = "3a0c8f4e-bbbb-4c2e-9a43-000000000002"


def test_kdevctl_health_per_claim():
    """kdevctl dra consumes the plugin's health stream and shows each claim
    device's health: Healthy before the XID, then (the claims answered from
    the checkpoint) Unhealthy with the reason for the claim on the faulted
    MIG device only, as kubelet would put it in the pod status."""
    other = "gpu-0-mig-2g10gb-14-0"
    sick = "gpu-0-mig-1g5gb-19-2"
    with TempDir() as d:
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")
        drv = kt.mock_driver_root(root, kt.CONTROL_NODES)
        e = dp.Env(root, topology=MIG_TOPO, env_extra={"KDEV_MOCK_NVML_PROC": proc},
                   objects=[claim("claim-a", UID_A, sick), claim("claim-b", UID_B, other)],
                   extra=("--proc-root", proc, "--driver-root", drv,
                          "--health-probe-interval", "1", "--health-quiet-period", "600"))
        with kt.logged(e):
            e.register()
            scen = os.path.join(root, "scen.yaml")
            with open(scen, "w") as f:
                f.write("- prepare:\n"
                        "    - {namespace: default, name: claim-a, uid: %s}\n"
                        "    - {namespace: default, name: claim-b, uid: %s}\n" % (UID_A, UID_B))

            def kdevctl(*extra):
                r = subprocess.run([KDEVCTL, "dra", "--registry", e.registry, "--scenario", scen,
                                    *extra], capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
                return r.stdout

            def health(doc):
                out = {}
                for uid, c in doc["steps"][0]["claims"].items():
                    for dv in c["devices"]:
                        out[uid] = (dv["resourceID"], dv["health"], dv.get("healthMessage"))
                return out

            doc = json.loads(kdevctl("-o", "json"))
            assert doc["plugins"][0]["healthService"] == "v1alpha1.DRAResourceHealth", doc
            assert health(doc) == {
                UID_A: ("gpu.nvidia.com/node-a/" + sick, "Healthy", None),
                UID_B: ("gpu.nvidia.com/node-a/" + other, "Healthy", None)}, doc
            ch, stream = watch(e.dra_sock())
            next(stream)
            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 48 9 0\n" % GPU0)
            reason = "critical XID 48 (GPU instance 9, compute instance 0)"
            while table(next(stream))[sick] != ("UNHEALTHY", reason):
                pass
            stream.cancel()
            ch.close()
            doc = json.loads(kdevctl("-o", "json"))
            assert health(doc) == {
                UID_A: ("gpu.nvidia.com/node-a/" + sick, "Unhealthy", reason),
                UID_B: ("gpu.nvidia.com/node-a/" + other, "Healthy", None)}, doc
            out = kdevctl()
            rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  3a0c")
                    or ln.startswith("3a0c")}
            assert "HEALTH" in out, out
            assert rows[UID_A].rstrip().endswith("Unhealthy: " + reason), out
            assert rows[UID_B].rstrip().endswith("Healthy"), out
            e.stop()


if __name__ == "__main__":
    if not os.path.exists(dp.EXE):
        print("SKIP: %s not built" % dp.EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_mig_device_health_streamed, test_kdevctl_health_per_claim])
