"""Prometheus scrapes kdev-plugin's usage metering (--usage-interval).

kdev-plugin runs on the mock NVML (8 H100, time-sliced 2x) with metrics on,
usage sampled every second and a fake /proc (KDEV_PROC_ROOT) holding the
cgroups of the processes the mock reports (control file `util`, `proc`):

- GPU 0 at 73 % (memory 12 %) with three processes: pid 100 in a
  containerd container under the systemd driver, pid 300 a host service,
  pid 500 without a /proc entry (exited);
- GPU 1 idle.

Without PodResources (--pod-resources-socket "") every process is
unattributed with its reason. A real Prometheus server must report
dcgm-exporter's device series with their labels and kdev's unattributed and
failure families with the exact values; and with --usage-interval 0 none of
them exist.

Then the whole chain on one GPU time-sliced 2x: `kdevctl kubelet` admits two
pods of one replica each and serves PodResources; kubelet's log names
(pods/, containers/ of --pod-log-dir, laid out here as kubelet does) give
their pod UIDs and container IDs; the mock runs one process in each
container's cgroup, and Prometheus must tell the two containers apart. On
that node the Grafana dashboard deploy/grafana/kdev-gpu-usage.json is
checked: valid JSON as Grafana reads it, every metric and label its queries
and variables name is one the endpoint serves, and every query runs in
Prometheus with a result (those of isolated replicas excepted).

Skipped (exit 77) when /usr/bin/prometheus is missing.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402
from prometheus_scrape import HAVE_PROMETHEUS, PROMETHEUS, Prometheus, L, free_port, scrape  # noqa: E402

UUIDS = kt.H100_UUIDS
RES = "nvidia.com/gpu"
MIB = 1024 * 1024
CID = "a" * 63 + "1"
UID_ = "0f5c4ac8_8fd7_4a9c_9d63_4b1f1e2f3a4b"

CONFIG = """version: v1
flags:
  failOnInitError: true
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
usage:
  interval: 1
"""


def fake_proc(root):
    for pid, text in ((100, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                            + UID_ + ".slice/cri-containerd-" + CID + ".scope\n"),
                      (300, "0::/system.slice/xorg.service\n")):
        os.makedirs(os.path.join(root, str(pid)))
        with open(os.path.join(root, str(pid), "cgroup"), "w") as f:
            f.write(text)


def start(d, extra=()):
    base = os.path.dirname(d)
    ctl = os.path.join(base, "control")
    with open(ctl, "w") as f:
        f.write("util %s 73 12\n" % UUIDS[0])
        f.write("proc %s 100 %d 40\n" % (UUIDS[0], 1024 * MIB))
        f.write("proc %s 300 %d\n" % (UUIDS[0], 256 * MIB))
        f.write("proc %s 500 %d\n" % (UUIDS[0], 64 * MIB))
    proc = os.path.join(base, "proc")
    if not os.path.isdir(proc):
        fake_proc(proc)
    env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
           "KDEV_MOCK_NVML_CONTROL": ctl, "KDEV_PROC_ROOT": proc, "NODE_NAME": "node-a"}
    return Plugin(d, CONFIG, extra=("--cdi-dir", os.path.join(base, "cdi"), *extra), env=env)


def dev_labels(i, **k8s):
    return dict(gpu=str(i), UUID=UUIDS[i], pci_bus_id=BUS[i], device="nvidia%d" % i,
                modelName="NVIDIA H100 80GB HBM3", Hostname="node-a", **k8s)


BUS = ["00000000:18:00.0", "00000000:2A:00.0"]


def test_usage_families_in_prometheus():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        mport = free_port()
        p = start(d, extra=("--metrics-address", "127.0.0.1:%d" % mport,
                            "--pod-resources-socket", ""))
        prom = None
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: "msg=\"sampling GPU usage\" interval=1 hostname=node-a"
                     in p.logtext(), what="usage start line")
            wait_for(lambda: "DCGM_FI_DEV_GPU_UTIL{" in scrape(mport)[1], what="first sample")
            prom = Prometheus(mport)
            prom.wait_ready()
            # empty label values (GPU_I_*, namespace, pod, container) are absent in PromQL
            prom.wait_values('DCGM_FI_DEV_GPU_UTIL{gpu=~"0|1"}',
                             {L(**dev_labels(0)): 73.0, L(**dev_labels(1)): 0.0})
            prom.wait_values('DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0"}', {L(**dev_labels(0)): 12.0})
            prom.wait_values('DCGM_FI_DEV_FB_USED{gpu=~"0|1"}',
                             {L(**dev_labels(0)): 1344.0, L(**dev_labels(1)): 0.0})
            prom.wait_values('DCGM_FI_DEV_FB_FREE{gpu="0"}', {L(**dev_labels(0)): 81559.0 - 1344})
            prom.wait_values('DCGM_FI_DEV_FB_TOTAL{gpu="1"}', {L(**dev_labels(1)): 81559.0})
            prom.wait_values("count(DCGM_FI_DEV_GPU_UTIL)", {L(): 8.0})
            prom.wait_values("kdev_gpu_unattributed_memory_bytes", {
                L(UUID=UUIDS[0], gpu="0", reason="unknown_container"): 1024.0 * MIB,
                L(UUID=UUIDS[0], gpu="0", reason="host"): 256.0 * MIB,
                L(UUID=UUIDS[0], gpu="0", reason="no_cgroup"): 64.0 * MIB})
            prom.wait_values("kdev_gpu_unattributed_processes", {
                L(UUID=UUIDS[0], gpu="0", reason="unknown_container"): 1.0,
                L(UUID=UUIDS[0], gpu="0", reason="host"): 1.0,
                L(UUID=UUIDS[0], gpu="0", reason="no_cgroup"): 1.0})
            # one failure per process and sample: the counters move with the samples
            prom.wait_values('kdev_usage_attribution_failures_total{reason="host"}'
                             ' - ignoring(reason, result) kdev_usage_samples_total{result="ok"}',
                             {L(): 0.0})
            prom.wait_values('kdev_usage_attribution_failures_total{reason=~"ambiguous|region"}',
                             {L(reason="ambiguous"): 0.0, L(reason="region"): 0.0})
            prom.wait_values('kdev_usage_samples_total{result="ok"} >= bool 2', {L(result="ok"): 1.0})
            prom.wait_values('kdev_usage_samples_total{result="error"}', {L(result="error"): 0.0})
            prom.wait_values("time() - kdev_usage_last_sample_timestamp_seconds < bool 10",
                             {L(): 1.0})
            # no container map: no per-container series
            prom.wait_values("count(kdev_container_gpu_memory_used_bytes) or vector(0)", {L(): 0.0})
            # a process ends: its use leaves with it
            with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
                f.write("proc-exit %s 300\n" % UUIDS[0])
            prom.wait_values('DCGM_FI_DEV_FB_USED{gpu="0"}', {L(**dev_labels(0)): 1088.0})
            prom.wait_values('kdev_gpu_unattributed_processes{reason="host"}', {})
        finally:
            if prom is not None:
                prom.stop()
            rc = p.stop()
            k.stop()
        assert rc == 0, p.logtext()


def test_usage_off():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        mport = free_port()
        p = start(d, extra=("--metrics-address", "127.0.0.1:%d" % mport,
                            "--usage-interval", "0"))
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            text = scrape(mport)[1]
            assert "kdev_devices{" in text, text
            assert "DCGM_" not in text and "kdev_usage_" not in text, text
            assert "sampling GPU usage" not in p.logtext(), p.logtext()
        finally:
            rc = p.stop()
            k.stop()
        assert rc == 0, p.logtext()


KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
TWO_PODS = """wait:
  timeout: 60
  resources:
    nvidia.com/gpu: 2
pods:
  - name: train-a
    containers:
      - name: main
        limits: {nvidia.com/gpu: 1}
  - name: train-b
    containers:
      - name: main
        limits: {nvidia.com/gpu: 1}
steps:
  - exec: "touch %s"
"""
UID_A, UID_B = "11111111-aaaa-4aaa-8aaa-000000000001", "22222222-bbbb-4bbb-8bbb-000000000002"
CID_A, CID_B = "a" * 63 + "2", "b" * 63 + "3"


def one_gpu_topology(path):
    """The H100 topology with its first GPU only."""
    out, skip = [], False
    for line in open(kt.H100_TOPO):
        if line.startswith("links:"):
            skip = True
        elif line and not line[0].isspace():
            skip = False
        if skip or (line.startswith("  - {uuid:") and UUIDS[0] not in line):
            continue
        out.append(line)
    with open(path, "w") as f:
        f.writelines(out)


DASHBOARD = os.path.join(kt.SOURCE_DIR, "deploy", "grafana", "kdev-gpu-usage.json")
METRIC = re.compile(r"\b(DCGM_FI_[A-Z_]+|kdev_[a-z_]+)\b")
# panels with no series on a node without isolated replicas
EMPTY_OK = {"Memory used of limit (isolated replicas)", "Compute share (isolated replicas)"}


def families(text):
    """{metric name: label names} of a /metrics text; a family with a TYPE
    line and no series yet (e.g. isolated replicas' limits) maps to None."""
    out = {}
    for line in text.splitlines():
        t = re.match(r"^# TYPE (\S+) ", line)
        if t:
            out.setdefault(t.group(1), None)
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(\{(.*)\})? ", line)
        if m and not line.startswith("#"):
            labels = re.findall(r'(\w+)="', m.group(3) or "")
            out[m.group(1)] = (out.get(m.group(1)) or set()) | set(labels)
    return out


def dashboard():
    """The dashboard's panels' (title, expr) and variables' (name, query),
    after its structure is checked."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    assert d["uid"] == "kdev-gpu-usage" and d["schemaVersion"] >= 36, d.keys()
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 10, ids
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "Hostname", "namespace"], names
    panels = []
    for p in d["panels"]:
        assert p["type"] == "timeseries" and p["title"] and p["description"], p
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and refs, p["title"]
        panels += [(p["title"], t["expr"]) for t in p["targets"]]
    variables = [(v["name"], v["query"]["query"]) for v in d["templating"]["list"]
                 if v["type"] == "query"]
    return panels, variables


def check_dashboard(prom, mport):
    fams = families(scrape(mport)[1])
    panels, variables = dashboard()
    for name, q in variables:
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", q)
        assert m and m.group(2) in fams.get(m.group(1), ()), (name, q, sorted(fams))
        assert prom.query("count by (%s) (%s)" % (m.group(2), m.group(1))), q
    for title, expr in panels:
        used = METRIC.findall(expr)
        assert used, (title, expr)
        for name in used:
            assert name in fams, "%s: %s is not served: %s" % (title, name, sorted(fams))
        if title in EMPTY_OK:
            prom.query(expr.replace("$namespace", ".*"))  # runs (a malformed query fails)
            continue
        for name, sel in re.findall(r"(\w+)\{([^}]*)\}", expr):
            for label in re.findall(r"(\w+)\s*(?:=~|!=|!~|=)", sel):
                assert label in fams[name], "%s: %s has no label %s" % (title, name, label)
        known = set().union(*(fams[n] for n in used)) | {"instance", "job"}
        for group in re.findall(r"\b(?:by|on|group_left|group_right)\s*\(([^)]*)\)", expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in known, "%s: no metric of it has label %s" % (title, label)
        q = (expr.replace("$Hostname", ".*").replace("$namespace", ".*")
                 .replace("$__rate_interval", "1m"))
        wait_for(lambda: prom.query(q), timeout=30, what="a result for panel " + title)


def test_two_containers_on_one_gpu():
    with TempDir() as d:
        base = os.path.dirname(d)
        topo = os.path.join(base, "one-gpu.yaml")
        one_gpu_topology(topo)
        done = os.path.join(base, "scenario-done")
        scn = os.path.join(base, "scenario.yaml")
        with open(scn, "w") as f:
            f.write(TWO_PODS % done)
        podres = os.path.join(base, "pod-resources.sock")
        kerr = open(os.path.join(base, "kubelet.err"), "w")
        k = subprocess.Popen([*kt.WRAP, KDEVCTL, "kubelet", "--dir", d, "--scenario", scn,
                              "--hold", "0", "-o", "json", "--pod-resources-socket", podres],
                             stdout=subprocess.PIPE, stderr=kerr, text=True)
        # the node as kubelet and containerd leave it: log names, cgroups
        logs = os.path.join(base, "log")
        for pod, uid, cid in (("train-a", UID_A, CID_A), ("train-b", UID_B, CID_B)):
            os.makedirs(os.path.join(logs, "pods", "default_%s_%s" % (pod, uid), "main"))
            os.makedirs(os.path.join(logs, "containers"), exist_ok=True)
            os.symlink(os.path.join(logs, "pods", "default_%s_%s" % (pod, uid), "main", "0.log"),
                       os.path.join(logs, "containers", "%s_default_main-%s.log" % (pod, cid)))
        proc = os.path.join(base, "proc")
        for pid, uid, cid in ((100, UID_A, CID_A), (200, UID_B, CID_B)):
            os.makedirs(os.path.join(proc, str(pid)))
            with open(os.path.join(proc, str(pid), "cgroup"), "w") as f:
                f.write("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s"
                        ".slice/cri-containerd-%s.scope\n" % (uid.replace("-", "_"), cid))
        ctl = os.path.join(base, "control")
        with open(ctl, "w") as f:
            f.write("util %s 60 20\n" % UUIDS[0])
            f.write("proc %s 100 %d 45\n" % (UUIDS[0], 3072 * MIB))
            f.write("proc %s 200 %d 15\n" % (UUIDS[0], 1024 * MIB))
        mport = free_port()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": topo,
               "KDEV_MOCK_NVML_CONTROL": ctl, "KDEV_PROC_ROOT": proc, "NODE_NAME": "node-a"}
        wait_for(lambda: os.path.exists(os.path.join(d, "kubelet.sock")), what="kubelet.sock")
        p = Plugin(d, CONFIG, env=env,
                   extra=("--cdi-dir", os.path.join(base, "cdi"), "--metrics-address",
                          "127.0.0.1:%d" % mport, "--pod-resources-socket", podres,
                          "--pod-log-dir", logs))
        prom = None
        try:
            wait_for(lambda: os.path.exists(done) or k.poll() is not None, timeout=90,
                     what="scenario end")
            assert k.poll() is None
            prom = Prometheus(mport)
            prom.wait_ready()
            who = dict(UUID=UUIDS[0], gpu="0", namespace="default", container="main")
            prom.wait_values("kdev_container_gpu_memory_used_bytes", {
                L(pod="train-a", source="processes", **who): 3072.0 * MIB,
                L(pod="train-b", source="processes", **who): 1024.0 * MIB})
            prom.wait_values("kdev_container_gpu_sm_utilization_percent", {
                L(pod="train-a", **who): 45.0, L(pod="train-b", **who): 15.0})
            prom.wait_values("kdev_container_gpu_replicas", {
                L(pod="train-a", resource=RES, **who): 1.0,
                L(pod="train-b", resource=RES, **who): 1.0})
            prom.wait_values("count(kdev_gpu_unattributed_processes) or vector(0)", {L(): 0.0})
            prom.wait_values('DCGM_FI_DEV_FB_USED{gpu="0"}', {L(**dev_labels(0)): 4096.0})
            # a third process in neither container: unattributed, the two unchanged
            with open(ctl, "a") as f:
                f.write("proc %s 300 %d\n" % (UUIDS[0], 512 * MIB))
            prom.wait_values("kdev_gpu_unattributed_processes", {
                L(UUID=UUIDS[0], gpu="0", reason="no_cgroup"): 1.0})
            prom.wait_values('kdev_container_gpu_memory_used_bytes{pod="train-a"}', {
                L(pod="train-a", source="processes", **who): 3072.0 * MIB})
            check_dashboard(prom, mport)
        finally:
            if prom is not None:
                prom.stop()
            rc = p.stop()
            k.send_signal(signal.SIGTERM)
            out, _ = k.communicate(timeout=60 * kt.TIMEOUT_SCALE)
            kerr.close()
        assert rc == 0, p.logtext()
        assert k.returncode == 0, out
        # kdevctl's own record: one replica of the one GPU each
        ids = {s["name"]: [i for c in s["containers"] for a in c["allocations"]
                           for i in a["deviceIDs"]]
               for s in json.loads(out)["steps"] if s["kind"] == "pod"}
        assert sorted(ids) == ["train-a", "train-b"], ids
        assert all(len(v) == 1 and v[0].startswith(UUIDS[0] + "::") for v in ids.values()), ids
        assert "cannot ask kubelet" not in p.logtext(), p.logtext()


if __name__ == "__main__":
    if not HAVE_PROMETHEUS:
        print("SKIP: %s is missing (Debian package prometheus)" % PROMETHEUS, flush=True)
        sys.exit(77)
    kt.run_tests([test_usage_families_in_prometheus, test_usage_off,
                  test_two_containers_on_one_gpu])
