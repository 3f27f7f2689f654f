"""kdevctl top against kdev-plugin's metrics endpoint on the mock NVML.

- Two containers on one H100 time-sliced 2x: `kdevctl kubelet` admits two
  pods of one replica each and serves PodResources, kubelet's log names and
  a fake /proc (KDEV_PROC_ROOT) put one process of the mock in each
  container's cgroup and a third in none; `kdevctl top --once` and
  `-o json` must print the GPU, both containers (memory, replicas, SM
  utilization) and the unattributed process exactly.
- MIG (4 A100-40GB, migStrategy mixed): every GPU and MIG device in index
  and GPU instance order, a process on one MIG device joined to it.
- usage.interval unset: the GPUs by UUID and "no usage samples yet"; a
  path kdev-plugin does not serve is its HTTP status line.
- Nobody listening: the connection-refused error, exit 1.
- On a terminal (a pty) the view is redrawn in place until SIGINT / SIGTERM
  (exit 0); on a pipe it is printed once.
"""
import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
# the two-pod node of prometheus_usage.py: its scenario, IDs and topology
from prometheus_scrape import free_port  # noqa: E402
from prometheus_usage import (TWO_PODS, UID_A, UID_B, CID_A, CID_B,  # noqa: E402
                              one_gpu_topology)

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
UUIDS = kt.H100_UUIDS
MIB = 1024 * 1024
CONFIG = """version: v1
flags:
  failOnInitError: true
  migStrategy: %s
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
usage:
  interval: 1
"""
MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")
A100 = ["GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69", "GPU-4603f764-b00c-271e-0980-eda368e40931",
        "GPU-0c8e873f-4cf7-689a-6647-0210cab49901", "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"]
MIG_1G10 = "MIG-13018ca6-7bdc-00c0-5fef-20d32e6a3980"  # 1g.10gb, GPU 1, GPU instance 3


def top(port, *args):
    p = subprocess.run([*kt.WRAP, KDEVCTL, "top", "--metrics-address", "127.0.0.1:%d" % port,
                        *args], capture_output=True, text=True, timeout=60 * kt.TIMEOUT_SCALE)
    return p.returncode, p.stdout, p.stderr


def top_json(port):
    rc, out, err = top(port, "-o", "json")
    assert rc == 0 and err == "", (rc, err)
    return json.loads(out)


def gpu(index, uuid, model, used, total, util=0, containers=(), unattributed=(), mig=None):
    """One entry of -o json's gpus: mig = (MIG UUID, profile, GPU instance)."""
    m = mig or (None, None, None)
    return {"gpu": str(index), "uuid": uuid, "migUuid": m[0], "model": model,
            "migProfile": m[1], "gpuInstanceId": m[2], "utilizationPercent": util,
            "memoryUsedMiB": used, "memoryTotalMiB": total, "containers": list(containers),
            "unattributed": list(unattributed)}


def cgroup(proc, pid, text):
    os.makedirs(os.path.join(proc, str(pid)))
    with open(os.path.join(proc, str(pid), "cgroup"), "w") as f:
        f.write(text)


TABLE_PODS = """\
GPU   GI   NAME                                    UTIL   MEMORY-MIB     REPLICAS   SHARE   SM
0     -    NVIDIA H100 80GB HBM3                   60%    4608 / 81559
             default/train-a/main                         3072 / -       1          -       45%
             default/train-b/main                         1024 / -       1          -       15%
             unattributed (no_cgroup): 1 process          512
"""


def test_containers_on_one_gpu():
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
                              "--hold", "0", "--pod-resources-socket", podres],
                             stdout=subprocess.DEVNULL, stderr=kerr)
        logs, proc = os.path.join(base, "log"), os.path.join(base, "proc")
        for pod, uid, cid, pid in (("train-a", UID_A, CID_A, 100), ("train-b", UID_B, CID_B, 200)):
            os.makedirs(os.path.join(logs, "pods", "default_%s_%s" % (pod, uid), "main"))
            os.makedirs(os.path.join(logs, "containers"), exist_ok=True)
            os.symlink(os.path.join(logs, "pods", "default_%s_%s" % (pod, uid), "main", "0.log"),
                       os.path.join(logs, "containers", "%s_default_main-%s.log" % (pod, cid)))
            cgroup(proc, pid, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                   "pod%s.slice/cri-containerd-%s.scope\n" % (uid.replace("-", "_"), cid))
        ctl = os.path.join(base, "control")
        with open(ctl, "w") as f:
            f.write("util %s 60 20\n" % UUIDS[0])
            f.write("proc %s 100 %d 45\n" % (UUIDS[0], 3072 * MIB))
            f.write("proc %s 200 %d 15\n" % (UUIDS[0], 1024 * MIB))
            f.write("proc %s 300 %d\n" % (UUIDS[0], 512 * MIB))  # in no container
        port = free_port()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": topo,
               "KDEV_MOCK_NVML_CONTROL": ctl, "KDEV_PROC_ROOT": proc, "NODE_NAME": "node-a"}
        wait_for(lambda: os.path.exists(os.path.join(d, "kubelet.sock")), what="kubelet.sock")
        p = Plugin(d, CONFIG % "none", env=env,
                   extra=("--cdi-dir", os.path.join(base, "cdi"), "--metrics-address",
                          "127.0.0.1:%d" % port, "--pod-resources-socket", podres,
                          "--pod-log-dir", logs))
        try:
            wait_for(lambda: os.path.exists(done) or k.poll() is not None, timeout=90,
                     what="scenario end")
            assert k.poll() is None
            who = {"namespace": "default", "container": "main", "replicas": 1,
                   "memoryLimitBytes": None, "computeSharePercent": None}
            want = {"gpus": [gpu(0, UUIDS[0], "NVIDIA H100 80GB HBM3", 4608, 81559, util=60,
                                 containers=[
                                     dict(who, pod="train-a", memoryUsedBytes=3072 * MIB,
                                          smUtilizationPercent=45),
                                     dict(who, pod="train-b", memoryUsedBytes=1024 * MIB,
                                          smUtilizationPercent=15)],
                                 unattributed=[{"reason": "no_cgroup", "processes": 1,
                                                "memoryBytes": 512 * MIB}])]}
            for c in want["gpus"][0]["containers"]:  # the key order of the output
                for key in ("memoryLimitBytes", "computeSharePercent", "smUtilizationPercent"):
                    c[key] = c.pop(key)

            def sampled():
                j = top_json(port)
                when = j.pop("lastSampleTimestamp")
                return j == want and isinstance(when, float) and abs(time.time() - when) < 60
            wait_for(sampled, timeout=30 * kt.TIMEOUT_SCALE, what="both containers in -o json")
            rc, out, err = top(port, "--once")
            assert (rc, err) == (0, ""), (rc, err)
            assert out == TABLE_PODS, out
            # the exact document, keys in order
            rc, out, _ = top(port, "-o", "json")
            doc = json.loads(out)
            assert list(doc) == ["gpus", "lastSampleTimestamp"], doc
            assert list(doc["gpus"][0]) == list(want["gpus"][0]), doc
            assert list(doc["gpus"][0]["containers"][0]) == [
                "namespace", "pod", "container", "replicas", "memoryUsedBytes",
                "memoryLimitBytes", "computeSharePercent", "smUtilizationPercent"], doc
            assert out.startswith('{\n  "gpus": [\n    {\n      "gpu": "0",\n'), out
        finally:
            rc = p.stop()
            k.send_signal(signal.SIGTERM)
            k.wait(timeout=60 * kt.TIMEOUT_SCALE)
            kerr.close()
        assert rc == 0, p.logtext()
        assert k.returncode == 0, open(os.path.join(base, "kubelet.err")).read()


TABLE_MIG = """\
GPU   GI   NAME                                    UTIL   MEMORY-MIB    REPLICAS   SHARE   SM
0     -    NVIDIA A100-SXM4-40GB                   0%     -
0     2    NVIDIA A100-SXM4-40GB MIG 3g.20gb       -      0 / 19968
0     3    NVIDIA A100-SXM4-40GB MIG 2g.10gb       -      0 / 9856
0     9    NVIDIA A100-SXM4-40GB MIG 1g.5gb        -      0 / 4864
0     10   NVIDIA A100-SXM4-40GB MIG 1g.5gb        -      0 / 4864
1     -    NVIDIA A100-SXM4-40GB                   0%     -
1     3    NVIDIA A100-SXM4-40GB MIG 1g.10gb       -      100 / 9856
             unattributed (no_cgroup): 1 process          100
1     5    NVIDIA A100-SXM4-40GB MIG 1g.10gb       -      0 / 9856
1     7    NVIDIA A100-SXM4-40GB MIG 1g.5gb+me     -      0 / 4864
1     13   NVIDIA A100-SXM4-40GB MIG 1g.5gb        -      0 / 4864
2     -    NVIDIA A100-SXM4-40GB                   0%     0 / 40960
3     -    NVIDIA A100-SXM4-40GB                   0%     300 / 40960
             unattributed (no_cgroup): 1 process          300
"""


def test_mig():
    with TempDir() as d:
        base = os.path.dirname(d)
        ctl, proc = os.path.join(base, "control"), os.path.join(base, "proc")
        os.makedirs(proc)
        with open(ctl, "w") as f:
            f.write("proc %s 100 %d 20\n" % (MIG_1G10, 100 * MIB))
            f.write("proc %s 200 %d\n" % (A100[3], 300 * MIB))
        port = free_port()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": MIG_TOPO,
               "KDEV_MOCK_NVML_CONTROL": ctl, "KDEV_PROC_ROOT": proc, "NODE_NAME": "node-a",
               "KDEV_MOCK_NVML_PROC": proc}
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, CONFIG % "mixed", env=env,
                   extra=("--cdi-dir", os.path.join(base, "cdi"), "--proc-root", proc,
                          "--metrics-address", "127.0.0.1:%d" % port,
                          "--pod-resources-socket", ""))
        try:
            wait_for(lambda: k.updates.get("nvidia.com/mig-1g.10gb"), what="ListAndWatch")
            wait_for(lambda: top(port, "--once")[1] == TABLE_MIG, timeout=30 * kt.TIMEOUT_SCALE,
                     what="the MIG table")
            g1 = [g for g in top_json(port)["gpus"] if g["gpu"] == "1"]
            model = "NVIDIA A100-SXM4-40GB"
            assert g1 == [
                gpu(1, A100[1], model, None, None),
                gpu(1, A100[1], model, 100, 9856, util=None, mig=(MIG_1G10, "1g.10gb", 3),
                    unattributed=[{"reason": "no_cgroup", "processes": 1,
                                   "memoryBytes": 100 * MIB}]),
                gpu(1, A100[1], model, 0, 9856, util=None, mig=(None, "1g.10gb", 5)),
                gpu(1, A100[1], model, 0, 4864, util=None, mig=(None, "1g.5gb+me", 7)),
                gpu(1, A100[1], model, 0, 4864, util=None, mig=(None, "1g.5gb", 13))], g1
        finally:
            rc = p.stop()
            k.stop()
        assert rc == 0, p.logtext()


def test_usage_off():
    with TempDir() as d:
        base = os.path.dirname(d)
        ctl = os.path.join(base, "control")
        open(ctl, "w").close()
        port = free_port()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
               "KDEV_MOCK_NVML_CONTROL": ctl}
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, CONFIG % "none", env=env,
                   extra=("--cdi-dir", os.path.join(base, "cdi"), "--usage-interval", "0",
                          "--metrics-address", "127.0.0.1:%d" % port))
        try:
            wait_for(lambda: k.updates.get("nvidia.com/gpu"), what="ListAndWatch")
            rc, out, err = top(port)  # stdout a pipe: once
            assert (rc, err) == (0, ""), (rc, err)
            rows = ["-     -    %s   -      -" % u for u in sorted(UUIDS)]
            assert out == "\n".join(
                ["GPU   GI   NAME                                       UTIL   MEMORY-MIB   "
                 "REPLICAS   SHARE   SM"] + rows +
                ["no usage samples yet (is usage.interval set in kdev-plugin's config?)", ""]), out
            rc, out, err = top(port, "-o", "json")
            assert rc == 0, err
            assert err == ("kdevctl top: no usage samples yet (is usage.interval set in "
                           "kdev-plugin's config?)\n"), err
            doc = json.loads(out)
            assert doc["lastSampleTimestamp"] is None, doc
            assert [g["uuid"] for g in doc["gpus"]] == sorted(UUIDS), doc
            assert all(g["gpu"] is None and g["containers"] == [] for g in doc["gpus"]), doc
            # a path kdev-plugin does not serve: its status line
            r = subprocess.run([*kt.WRAP, KDEVCTL, "top", "--metrics-url",
                                "http://127.0.0.1:%d/nothing" % port], capture_output=True,
                               text=True, timeout=60 * kt.TIMEOUT_SCALE)
            assert r.returncode == 1 and r.stdout == "", r
            assert r.stderr == ('kdevctl top: kdev-plugin\'s metrics at 127.0.0.1:%d answered '
                                '"HTTP/1.1 404 Not Found"\n' % port), r.stderr
        finally:
            rc = p.stop()
            k.stop()
        assert rc == 0, p.logtext()


def test_connection_refused():
    port = free_port()
    rc, out, err = top(port, "--once")
    assert (rc, out) == (1, ""), (rc, out, err)
    assert err == ("kdevctl top: cannot reach kdev-plugin's metrics at 127.0.0.1:%d: Connection "
                   "refused (is kdev-plugin running with --metrics-address?)\n" % port), err
    rc, out, err = top(port, "-o", "json")
    assert (rc, out) == (1, "") and "Connection refused" in err, (rc, out, err)


METRICS = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",modelName="M",GPU_I_PROFILE="",'
           'GPU_I_ID=""} 7\nkdev_usage_last_sample_timestamp_seconds 1\n').encode()


class Fixed(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(METRICS)))
        self.end_headers()
        self.wfile.write(METRICS)

    def log_message(self, *args):
        pass


def test_terminal_redraw():
    srv = HTTPServer(("127.0.0.1", 0), Fixed)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            master, slave = pty.openpty()
            p = subprocess.Popen([KDEVCTL, "top", "--metrics-address", "127.0.0.1:%d" % port,
                                  "--interval", "0.2"], stdout=slave, stderr=subprocess.PIPE)
            os.close(slave)
            seen = b""
            deadline = time.monotonic() + 30 * kt.TIMEOUT_SCALE
            while seen.count(b"\x1b[H\x1b[2J") < 3 and time.monotonic() < deadline:
                if select.select([master], [], [], 1)[0]:
                    seen += os.read(master, 65536)
            p.send_signal(sig)
            rc = p.wait(timeout=30 * kt.TIMEOUT_SCALE)
            err = p.stderr.read()
            p.stderr.close()
            os.close(master)
            assert rc == 0 and err == b"", (sig, rc, err)
            frames = seen.split(b"\x1b[H\x1b[2J")[1:]
            assert len(frames) >= 3, seen
            head, _, body = frames[1].partition(b"\r\n\r\n")
            assert (b"kdev-plugin's metrics at 127.0.0.1:%d, every 0.2 s, last sample " % port
                    in head), head
            assert body.startswith(b"GPU   GI   NAME   UTIL   MEMORY-MIB   REPLICAS   SHARE   "
                                   b"SM\r\n0     -    M      7%     -\r\n"), body
        # a pipe: printed once, no escape sequence
        r = subprocess.run([KDEVCTL, "top", "--metrics-address", "127.0.0.1:%d" % port],
                           capture_output=True, timeout=30 * kt.TIMEOUT_SCALE)
        assert r.returncode == 0 and b"\x1b" not in r.stdout and r.stdout.count(b"GPU ") == 1, r
    finally:
        srv.shutdown()
        srv.server_close()


if __name__ == "__main__":
    kt.run_tests([test_containers_on_one_gpu, test_mig, test_usage_off, test_connection_refused,
                  test_terminal_redraw])
