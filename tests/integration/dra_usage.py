"""kdev-dra-plugin's usage metering, end to end without a cluster.

The node: the mock NVML (8 H100), the stand-in API server holding three
ResourceClaims allocated to gpu-0, gpu-1 and gpu-2 of the node's pool, and
`kdevctl dra` as kubelet: it registers the plugin, prepares claim-1 for
container main of pod train-a and claim-2 for pod train-b, prepares claim-3
for pod gone-c and unprepares it again, then keeps watching with
`--pod-resources-socket`, serving PodResources v1 as kubelet's DRA manager
feeds it. kubelet's log names (pods/, containers/ of --pod-log-dir) give the
pods' UIDs and container IDs; the mock runs one process in each container's
cgroup (a fake --proc-root) and one host process.

Checked exactly:
- `kdevctl podresources map` against kdevctl dra's socket: the two claims'
  devices with the CDI IDs the plugin answered (claim-3's pod gone), and Get
  of an unknown pod gives kubelet's error;
- kdev-dra-plugin's /metrics: dcgm-exporter's device series and kdev's
  per-container ones with dcgm-exporter's dra_* labels, the host process
  unattributed, no series for the unprepared claim;
- a real Prometheus (where installed) returns them from PromQL.
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
from dra_plugin import CLAIM_UID, DRIVER, NODE, Env, metric_lines  # noqa: E402
from dra_plugin_more import claim_obj as claim  # noqa: E402
from prometheus_scrape import HAVE_PROMETHEUS, Prometheus, L, free_port  # noqa: E402

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
UUIDS = kt.H100_UUIDS
MIB = 1024 * 1024
UID_A, UID_B = "11111111-aaaa-4aaa-8aaa-000000000001", "22222222-bbbb-4bbb-8bbb-000000000002"
CID_A, CID_B = "a" * 63 + "2", "b" * 63 + "3"
CLAIM2_UID = "2c7d5e1f-8f4b-4c1f-8e66-3a2b1d4f0b02"
CLAIM3_UID = "3d8e6f20-904c-4d20-9f77-4b3c2e5a1c03"


SCENARIO = """- prepare:
    - {namespace: default, name: claim-1, uid: %s, pod: train-a, container: main}
    - {namespace: default, name: claim-2, uid: %s, pod: train-b, container: main}
- prepare:
    - {namespace: default, name: claim-3, uid: %s, pod: gone-c, container: main}
- unprepare:
    - {namespace: default, name: claim-3, uid: %s}
""" % (CLAIM_UID, CLAIM2_UID, CLAIM3_UID, CLAIM3_UID)


def node_files(base):
    """kubelet's log names and the containers' cgroups, as on a node."""
    logs = os.path.join(base, "log")
    os.makedirs(os.path.join(logs, "containers"))
    for pod, uid, cid in (("train-a", UID_A, CID_A), ("train-b", UID_B, CID_B)):
        pdir = os.path.join(logs, "pods", "default_%s_%s" % (pod, uid), "main")
        os.makedirs(pdir)
        os.symlink(os.path.join(pdir, "0.log"),
                   os.path.join(logs, "containers", "%s_default_main-%s.log" % (pod, cid)))
    proc = os.path.join(base, "proc")
    for pid, text in ((100, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                            "pod%s.slice/cri-containerd-%s.scope\n" % (UID_A.replace("-", "_"),
                                                                       CID_A)),
                      (200, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                            "pod%s.slice/cri-containerd-%s.scope\n" % (UID_B.replace("-", "_"),
                                                                       CID_B)),
                      (300, "0::/system.slice/xorg.service\n")):
        os.makedirs(os.path.join(proc, str(pid)))
        with open(os.path.join(proc, str(pid), "cgroup"), "w") as f:
            f.write(text)
    with open(os.path.join(base, "control"), "w") as f:
        f.write("util %s 60 20\n" % UUIDS[0])
        f.write("util %s 30 10\n" % UUIDS[1])
        f.write("proc %s 100 %d 45\n" % (UUIDS[0], 3072 * MIB))
        f.write("proc %s 200 %d 25\n" % (UUIDS[1], 1024 * MIB))
        f.write("proc %s 300 %d\n" % (UUIDS[1], 256 * MIB))
    return logs, proc


def dra(i):
    return dict(dra_claim_name="claim-%d" % (i + 1), dra_claim_namespace="default",
                dra_device_name="gpu-%d" % i, dra_driver_name=DRIVER, dra_pool_name=NODE)


NO_DRA = dict(dra_claim_name="", dra_claim_namespace="", dra_device_name="",
              dra_driver_name="", dra_pool_name="")
POD = {0: "train-a", 1: "train-b"}


def series(name, labels):
    return name + "{" + ",".join('%s="%s"' % kv for kv in labels) + "}"


def dev_labels(i, held):
    k8s = (dict(namespace="default", pod=POD[i], container="main", **dra(i)) if held
           else dict(namespace="", pod="", container="", **NO_DRA))
    bus = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"][i]
    return [("gpu", str(i)), ("UUID", UUIDS[i]), ("pci_bus_id", bus), ("device", "nvidia%d" % i),
            ("modelName", "NVIDIA H100 80GB HBM3"), ("Hostname", NODE), ("GPU_I_PROFILE", ""),
            ("GPU_I_ID", ""), ("namespace", k8s["namespace"]), ("pod", k8s["pod"]),
            ("container", k8s["container"])] + [(k, k8s[k]) for k in (
                "dra_claim_name", "dra_claim_namespace", "dra_device_name", "dra_driver_name",
                "dra_pool_name")]


def ctr_labels(i, *extra):
    return ([("namespace", "default"), ("pod", POD[i]), ("container", "main"),
             ("UUID", UUIDS[i]), ("gpu", str(i))] + list(extra) +
            [(k, v) for k, v in dra(i).items()])


def test_claimed_devices_metered():
    with TempDir() as d:
        base = os.path.dirname(d)
        logs, proc = node_files(base)
        podres = os.path.join(base, "pod-resources", "kubelet.sock")
        port = free_port()
        e = Env(base, objects=[claim("claim-2", CLAIM2_UID, "gpu-1"),
                               claim("claim-3", CLAIM3_UID, "gpu-2")],
                extra=("--metrics-address", "127.0.0.1:%d" % port, "--usage-interval", "1",
                       "--pod-resources-socket", podres, "--pod-log-dir", logs,
                       "--proc-root", proc))
        scn = os.path.join(base, "scenario.yaml")
        with open(scn, "w") as f:
            f.write(SCENARIO)
        k = None
        prom = None
        try:
            wait_for(lambda: os.path.exists(e.reg_sock()), timeout=60, what="registration socket")
            kerr = open(os.path.join(base, "kdevctl.err"), "w")
            k = subprocess.Popen([*kt.WRAP, KDEVCTL, "dra", "--registry", e.registry,
                                  "--scenario", scn, "--watch", "0", "--pod-resources-socket",
                                  podres, "-o", "json"],
                                 stdout=subprocess.PIPE, stderr=kerr, text=True)
            wait_for(lambda: os.path.exists(podres) or k.poll() is not None, timeout=60,
                     what="PodResources socket")
            assert k.poll() is None, open(kerr.name).read()
            # kdevctl dra's PodResources: the two prepared claims, exactly
            rc = subprocess.run([KDEVCTL, "podresources", "map", "--socket", podres, "-o",
                                 "json"], capture_output=True, text=True)
            assert rc.returncode == 0, rc.stderr

            def row(pod, name, uid, dev):
                return {"namespace": "default", "pod": pod, "container": "main",
                        "claimNamespace": "default", "claimName": name, "driver": DRIVER,
                        "pool": NODE, "device": dev,
                        "cdiDevices": ["k8s.gpu.nvidia.com/claim=%s-%s" % (uid, dev)]}
            assert json.loads(rc.stdout) == {"devices": [], "claims": [
                row("train-a", "claim-1", CLAIM_UID, "gpu-0"),
                row("train-b", "claim-2", CLAIM2_UID, "gpu-1")]}, rc.stdout
            rc = subprocess.run([KDEVCTL, "podresources", "get", "default", "gone-c", "--socket",
                                 podres], capture_output=True, text=True)
            assert rc.returncode == 1, rc
            assert "pod gone-c in namespace default not found" in rc.stderr, rc.stderr

            # kdev-dra-plugin's usage series, exact
            want = {
                series("DCGM_FI_DEV_GPU_UTIL", dev_labels(0, True)): 60.0,
                series("DCGM_FI_DEV_GPU_UTIL", dev_labels(1, True)): 30.0,
                series("DCGM_FI_DEV_FB_USED", dev_labels(0, True)): 3072.0,
                series("DCGM_FI_DEV_FB_USED", dev_labels(1, True)): 1280.0,
                series("kdev_container_gpu_memory_used_bytes",
                       ctr_labels(0, ("source", "processes"))): 3072.0 * MIB,
                series("kdev_container_gpu_memory_used_bytes",
                       ctr_labels(1, ("source", "processes"))): 1024.0 * MIB,
                series("kdev_container_gpu_replicas", ctr_labels(0)): 1.0,
                series("kdev_container_gpu_replicas", ctr_labels(1)): 1.0,
                series("kdev_container_gpu_sm_utilization_percent", ctr_labels(0)): 45.0,
                series("kdev_container_gpu_sm_utilization_percent", ctr_labels(1)): 25.0,
                'kdev_gpu_unattributed_processes{UUID="%s",gpu="1",reason="host"}' % UUIDS[1]:
                    1.0,
                'kdev_gpu_unattributed_memory_bytes{UUID="%s",gpu="1",reason="host"}' % UUIDS[1]:
                    256.0 * MIB,
            }
            got = {}

            def sampled():
                got.clear()
                got.update(metric_lines(port)[1])
                return all(got.get(s) == v for s, v in want.items())
            try:
                wait_for(sampled, timeout=30, what="usage series")
            except AssertionError:
                raise AssertionError("\n".join("%s: got %r want %r" % (s, got.get(s), v)
                                               for s, v in want.items() if got.get(s) != v)
                                     + "\n" + "\n".join(sorted(got))) from None
            # GPU 2 (claim-3 unprepared) has device series with no holder,
            # and no container series names claim-3 or gone-c
            assert got[series("DCGM_FI_DEV_GPU_UTIL", dev_labels(2, False))] == 0.0
            assert not [s for s in got if "claim-3" in s or "gone-c" in s], sorted(got)
            assert [s for s in got if s.startswith("kdev_container_gpu_replicas")] == [
                series("kdev_container_gpu_replicas", ctr_labels(i)) for i in (0, 1)], got
            if HAVE_PROMETHEUS:
                prom = Prometheus(port)
                prom.wait_ready()
                prom.wait_values("kdev_container_gpu_memory_used_bytes", {
                    L(**dict(ctr_labels(0, ("source", "processes")))): 3072.0 * MIB,
                    L(**dict(ctr_labels(1, ("source", "processes")))): 1024.0 * MIB})
                prom.wait_values('sum by (dra_claim_name) (DCGM_FI_DEV_FB_USED{pod!=""})', {
                    L(dra_claim_name="claim-1"): 3072.0, L(dra_claim_name="claim-2"): 1280.0})
            else:
                print("Prometheus part skipped: no prometheus")
            assert "sampling GPU usage" in e.logtext(), e.logtext()
            assert "cannot ask kubelet" not in e.logtext(), e.logtext()
        finally:
            if prom is not None:
                prom.stop()
            if k is not None:
                k.send_signal(signal.SIGTERM)
                k.communicate(timeout=60 * kt.TIMEOUT_SCALE)
            e.stop()
            e.close()
        assert k.returncode == 0, open(os.path.join(base, "kdevctl.err")).read()
        assert not os.path.exists(podres)


def test_usage_needs_metrics_and_bad_interval():
    """--usage-interval without --metrics-address: a warning, no sampling;
    a bad value: exit 2 naming the flag or KDEV_USAGE_INTERVAL."""
    exe = os.path.join(kt.BUILD_DIR, "kdev-dra-plugin")
    for args, env, want in ((["--usage-interval", "3601"], {}, 'invalid --usage-interval "3601"'),
                            ([], {"KDEV_USAGE_INTERVAL": "x"}, 'invalid KDEV_USAGE_INTERVAL "x"')):
        r = subprocess.run([exe, "--node-name", NODE, *args], capture_output=True, text=True,
                           env=dict(os.environ, **env))
        assert r.returncode == 2, r
        assert r.stderr.startswith("kdev-dra-plugin: %s: want whole seconds between 0 and "
                                   "3600\n" % want), r.stderr
    with TempDir() as d:
        e = Env(os.path.dirname(d), extra=("--usage-interval", "1"))
        try:
            wait_for(lambda: "usage metering needs --metrics-address" in e.logtext(),
                     timeout=60, what="the warning")
            assert "sampling GPU usage" not in e.logtext()
            e.stop()
        finally:
            e.close()


def test_kdevctl_dra_podres_flag_errors():
    for args, want in ((["--pod-resources-socket", "/tmp/x.sock"],
                        "--pod-resources-socket serves while watching: it needs --watch SEC"),
                       (["--watch", "1", "--pod-resources-socket", ""],
                        "--pod-resources-socket: empty path")):
        r = subprocess.run([KDEVCTL, "dra", "--registry", "/nonexistent", *args],
                           capture_output=True, text=True)
        assert r.returncode == 2, r
        assert want in r.stderr, r.stderr


if __name__ == "__main__":
    kt.run_tests([test_claimed_devices_metered, test_usage_needs_metrics_and_bad_interval,
                  test_kdevctl_dra_podres_flag_errors])
