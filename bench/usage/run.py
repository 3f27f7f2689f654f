"""kdev-plugin's RSS and CPU with usage metering on, beside metrics on
without it (README "Usage metering"; targets: <= 1 MiB more RSS than metrics
on without usage, <= 0.5 % of one core at a 1 s interval).

Each run starts kdev-plugin (a release build) on the mock NVML, 8 H100 GPUs
time-sliced 16x (128 nvidia.com/gpu devices), registered with a fake
kubelet, metrics on and scraped every SCRAPE_S seconds, three ways: usage off
(metrics as before), usage every 1 s, usage every 10 s. The mock reports 16
running processes per GPU (128 in all, from its control file) whose cgroups
are in a fake /proc (--proc-root): containerd containers under the systemd
driver, so every sample reads 128 cgroup files. A PodResources server (grpcio,
on a thread of this script) answers List with 128 pods of one container, each
holding one replica of the GPU its process runs on, and kubelet's log
directories (--pod-log-dir) hold their names, so every sample asks
PodResources, reads 256 log names and attributes each process to its
container: the whole chain a node runs.

Figures per mode, min / median / max over the runs: CPU (utime + stime of
the process from /proc/<pid>/stat) over a window of WINDOW seconds after a
warm-up, as percent of one core, VmRSS and the thread count at the end of
the window. The mock NVML takes a lock and stats its control file on every
call, and polls it every 20 ms while the health thread waits for events
(a driver blocks in the kernel there): the "no health" rows run with
DP_DISABLE_HEALTHCHECKS=all, without that thread, so that they show kdev's
own work; read every CPU figure as an upper bound.

Usage: /usr/bin/python3 bench/usage/run.py [--build-dir DIR] [--runs N] [--window S]
       [--out FILE]
Prints the table and writes it to bench/results/<date>-<arch>-<N>cpu-usage.txt."""
import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOPO = os.path.join(SRC, "mock", "nvml", "topologies", "h100-80gb-8x-nvswitch.yaml")
PROCS_PER_GPU = 16
SCRAPE_S = 10
WARMUP_S = 12
MIB = 1024 * 1024

CONFIG = """version: v1
flags:
  failOnInitError: true
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 16
"""


def uuids():
    import re
    with open(TOPO, encoding="utf-8") as f:
        return re.findall(r"uuid: (GPU-[0-9a-f-]{36})", f.read())


def fake_world(base):
    """The control file (utilization and 128 processes) and the fake /proc."""
    ctl = os.path.join(base, "control")
    proc = os.path.join(base, "proc")
    pid = 1000
    with open(ctl, "w", encoding="utf-8") as f:
        for g, u in enumerate(uuids()):
            f.write("util %s %d 10\n" % (u, 10 + g))
            for k in range(PROCS_PER_GPU):
                cid = "%064x" % (g * 100 + k + 1)
                uid = "0f5c4ac8_8fd7_4a9c_9d63_%012d" % (g * 100 + k)
                os.makedirs(os.path.join(proc, str(pid)))
                with open(os.path.join(proc, str(pid), "cgroup"), "w", encoding="utf-8") as c:
                    c.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                            "%s.slice/cri-containerd-%s.scope\n" % (uid, cid))
                f.write("proc %s %d %d %d\n" % (u, pid, (256 + k) * MIB, k))
                pid += 1
    return ctl, proc


def podres_server(sock, ids):
    """A PodResources v1 server on |sock| whose List gives pod p<g>-<k>
    (namespace bench, container main) replica ids[g][k]."""
    from concurrent import futures
    import importlib
    import grpc
    out = tempfile.mkdtemp(prefix="kdev-bench-pb-")
    subprocess.run(["protoc", "--proto_path=" + os.path.join(SRC, "proto"),
                    "--python_out=" + out, "podresources/v1/api.proto"], check=True)
    sys.path.insert(0, out)
    pr = importlib.import_module("podresources.v1.api_pb2")
    resp = pr.ListPodResourcesResponse()
    for g, gpu_ids in enumerate(ids):
        for k, i in enumerate(gpu_ids[:PROCS_PER_GPU]):
            pod = resp.pod_resources.add(name="p%d-%d" % (g, k), namespace="bench")
            c = pod.containers.add(name="main")
            c.devices.add(resource_name="nvidia.com/gpu", device_ids=[i])
    answer = resp.SerializeToString()
    h = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: answer, request_deserializer=lambda b: b,
            response_serializer=lambda b: b)})
    srv = grpc.server(futures.ThreadPoolExecutor(1))
    srv.add_generic_rpc_handlers((h,))
    srv.add_insecure_port("unix:" + sock)
    srv.start()
    shutil.rmtree(out, ignore_errors=True)
    return srv


def pod_logs(base):
    """kubelet's log names of the 128 pods (pods/, containers/)."""
    logs = os.path.join(base, "log")
    os.makedirs(os.path.join(logs, "containers"))
    for g in range(len(uuids())):
        for k in range(PROCS_PER_GPU):
            uid = "0f5c4ac8-8fd7-4a9c-9d63-%012d" % (g * 100 + k)
            cid = "%064x" % (g * 100 + k + 1)
            pdir = os.path.join(logs, "pods", "bench_p%d-%d_%s" % (g, k, uid), "main")
            os.makedirs(pdir)
            os.symlink(os.path.join(pdir, "0.log"), os.path.join(
                logs, "containers", "p%d-%d_bench_main-%s.log" % (g, k, cid)))
    return logs


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_s(pid):
    with open("/proc/%d/stat" % pid, encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status(pid, key):
    with open("/proc/%d/status" % pid, encoding="utf-8") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no " + key)


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def one(build, kt, interval, window, extra_env):
    base = tempfile.mkdtemp(prefix="kdev-usage-bench-")
    d = os.path.join(base, "dp")
    os.makedirs(d)
    try:
        ctl, proc = fake_world(base)
        cfg = os.path.join(base, "config.yaml")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write(CONFIG)
        k = kt.FakeKubelet(d)
        k.start()
        port = free_port()
        sock = os.path.join(base, "pod-resources.sock")
        logs = pod_logs(base)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "mock", "nvml"),
                   KDEV_MOCK_NVML_TOPOLOGY=TOPO, KDEV_MOCK_NVML_CONTROL=ctl, **extra_env)
        log = open(os.path.join(base, "plugin.log"), "w", encoding="utf-8")
        p = subprocess.Popen([os.path.join(build, "kdev-plugin"), "--config", cfg,
                              "--device-plugin-dir", d, "--cdi-dir", os.path.join(base, "cdi"),
                              "--proc-root", proc, "--metrics-address", "127.0.0.1:%d" % port,
                              "--usage-interval", str(interval), "--pod-resources-socket", sock,
                              "--pod-log-dir", logs],
                             env=env, stdout=log, stderr=subprocess.STDOUT)
        srv = None
        try:
            deadline = time.time() + 60
            while not k.updates.get("nvidia.com/gpu"):
                assert p.poll() is None and time.time() < deadline, "kdev-plugin did not serve"
                time.sleep(0.1)
            listed = [i for i, _ in k.updates["nvidia.com/gpu"][-1]]
            srv = podres_server(sock, [sorted((i for i in listed if i.startswith(u + "::")),
                                              key=lambda x: int(x.rsplit("::", 1)[1]))
                                       for u in uuids()])
            if interval:
                while 'kdev_usage_samples_total{result="ok"} 0\n' in scrape(port):
                    assert time.time() < deadline, "no usage sample"
                    time.sleep(0.2)
            time.sleep(WARMUP_S)
            scrape(port)
            c0, t0 = cpu_s(p.pid), time.monotonic()
            end = t0 + window
            while time.monotonic() < end:
                time.sleep(min(SCRAPE_S, max(0.0, end - time.monotonic())))
                text = scrape(port)
            c1, t1 = cpu_s(p.pid), time.monotonic()
            rss = status(p.pid, "VmRSS")
            threads = status(p.pid, "Threads")
            if interval:
                attributed = [ln for ln in text.splitlines()
                              if ln.startswith("kdev_container_gpu_memory_used_bytes{")]
                assert len(attributed) == 8 * PROCS_PER_GPU, text
                assert "kdev_gpu_unattributed_processes{" not in text, text
        finally:
            if srv is not None:
                srv.stop(0)
            p.terminate()
            p.wait(30)
            log.close()
            k.stop()
        return 100.0 * (c1 - c0) / (t1 - t0), rss / 1024.0, threads
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--out")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    os.environ["KDEV_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SRC, "tests", "pylib"))
    import kdevtest as kt  # noqa: E402
    off = {"DP_DISABLE_HEALTHCHECKS": "all"}
    modes = [("metrics on, usage off", 0, {}), ("usage every 1 s", 1, {}),
             ("usage every 10 s", 10, {}),
             ("no health: usage off", 0, off), ("no health: usage 1 s", 1, off)]
    got = {m: [] for m, _, _ in modes}
    for _ in range(a.runs):
        for m, interval, e in modes:  # interleaved: every mode sees the same machine
            got[m].append(one(build, kt, interval, a.window, e))
    lines = ["kdev-plugin usage metering: 8 H100 x 16 replicas, %d processes attributed to %d "
             "containers through PodResources, scrape every %d s,"
             " window %g s, %d runs (min / median / max)" % (8 * PROCS_PER_GPU,
                                                             8 * PROCS_PER_GPU, SCRAPE_S,
                                                             a.window, a.runs),
             "%s, %s, %d CPUs, %s" % (datetime.date.today(), platform.machine(), os.cpu_count(),
                                      platform.release()),
             "%-24s %-26s %-26s %-8s %s" % ("mode", "CPU, % of one core", "VmRSS, MiB",
                                           "threads", "vs. usage off (median RSS)")]
    verdict = []
    for m, interval, e in modes:
        base = modes[3][0] if e else modes[0][0]
        base_rss = statistics.median(r for _, r, _ in got[base])
        cpu = sorted(c for c, _, _ in got[m])
        rss = sorted(r for _, r, _ in got[m])
        threads = max(t for _, _, t in got[m])
        extra = statistics.median(rss) - base_rss
        lines.append("%-24s %-26s %-26s %-8d %+.2f MiB" % (
            m, "%.3f / %.3f / %.3f" % (cpu[0], statistics.median(cpu), cpu[-1]),
            "%.2f / %.2f / %.2f" % (rss[0], statistics.median(rss), rss[-1]), threads, extra))
        if interval == 1:
            base_cpu = statistics.median(c for c, _, _ in got[base])
            verdict.append("%s:" % m)
            verdict.append("target <= 0.5 %% of one core at 1 s: %s (worst run %.3f %% in all; "
                           "%+.3f %% over the usage-off median)"
                           % ("met" if cpu[-1] <= 0.5 else "not met", cpu[-1],
                              cpu[-1] - base_cpu))
            verdict.append("target <= 1 MiB more RSS than usage off: %s (median %+.2f MiB)"
                           % ("met" if extra <= 1.0 else "not met", extra))
    text = "\n".join(lines + verdict) + "\n"
    print(text, end="")
    out = a.out or os.path.join(SRC, "bench", "results", "%s-%s-%dcpu-usage.txt" % (
        datetime.date.today(), platform.machine(), os.cpu_count()))
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
