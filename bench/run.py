"""kdev benchmarks side by side with a Go device plugin; called by bench/run.sh.

Usage: python3 bench/run.py --build DIR --go BIN [--runs N] [--restarts N]
                            [--calls N] [--scale-calls N] [--scale-only] [--out FILE]

Runs every scenario N times (kdev and the Go peer interleaved, so both see the
same machine), each figure of each run coming from one fresh plugin process,
and prints, for each figure, min / median / max over the N runs, the kdev/Go
ratio where the Go peer does the same job, and the target (docs/architecture.md,
"Performance targets") with "met" or "not met" (judged on the worst run).
Writes the same text to FILE.

Allocate by resource size (also alone with --scale-only): Allocate p50 of one
container request of 1 and of 64 IDs (spread over the device list, ending at
its last device) at 16, 256, 4096 and 16384 generic devices and at 8 GPUs x
1024 and x 4096 time-slicing replicas (mock NVML), kdev and the Go peer
alternating in each run; targets: flat within 2x from 16 to 16384 devices, and
<= 0.5x the Go peer at every size.
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPO = "mock/nvml/topologies/mig-h100-80gb-8x-mixed.yaml"
MIG_CONFIG = "bench/configs/mig-mixed-16.yaml"
NULL_CONFIG = "bench/configs/generic-null.yaml"
DEMO_CONFIG = "examples/generic-demo.yaml"
# whole GPUs of TOPO (GPUs 4-7, not in MIG mode): one XID each per run
HEALTH_UUIDS = [
    "GPU-5b4c2b60-7f8e-4a9d-ceab-4f5061728394",
    "GPU-6a5d3c71-809f-4bae-dfbc-5061728394a5",
    "GPU-796e4d82-91a0-4cbf-e0cd-61728394a5b6",
    "GPU-887f5e93-a2b1-4dc0-f1de-728394a5b6c7",
]
# metrics on: GET /metrics before the RSS figure, then timed GETs
METRICS_SCRAPES = 20
METRICS_TIMED = 200
PY_CLIENT = "/usr/bin/python3 " + os.path.join(SRC, "bench", "py_allocate.py")
# Allocate by resource size: generic devices (/dev/null sets) and replicas per
# GPU on SCALE_TOPO (8 whole GPUs), request sizes SCALE_KS
SCALE_GENERIC = [16, 256, 4096, 16384]
SCALE_REPLICAS = [1024, 4096]
SCALE_TOPO = "mock/nvml/topologies/h100-80gb-8x-nvswitch.yaml"
SCALE_GPUS = 8
SCALE_KS = [1, 64]
# the Go peer has no NVML: at the replica sizes it serves as many plain IDs of
# the same shape (first GPU's UUID of SCALE_TOPO, "::<n>")
SCALE_GO_REPLICA_PREFIX = "GPU-8b7c3e52-9f4a-4d1b-a6e7-3c2f1d0e9b8a::"
GENERIC_COUNT_MAX = 1000   # src/generic/generic.h KDEV_GENERIC_COUNT_MAX


def kv_lines(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"kv (\S+) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def run(cmd, env=None, timeout=300):
    t0 = time.time()
    p = subprocess.run(cmd, cwd=SRC, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write("bench: %s failed (%d)\n%s%s" % (" ".join(cmd), p.returncode,
                                                         p.stdout, p.stderr))
        raise SystemExit(1)
    if os.environ.get("KDEV_BENCH_VERBOSE"):
        sys.stderr.write("bench: %.1f s: %s\n" % (time.time() - t0, " ".join(
            os.path.basename(c) for c in cmd)))
    return p.stdout


def count_resources(build, config, env, extra):
    out = run([os.path.join(build, "kdev-plugin"), "--check-config", config] + extra, env=env)
    return len(re.findall(r"^\S+/\S+: \d+ devices?", out, re.M))


def bench_plugin(build, plugin, config, calls, restarts, regs=1, resource=None, env=None,
                 extra=(), client=None, health=None, metrics=None, alloc_sizes=None,
                 allocate_only=False, cpu=0):
    cmd = [os.path.join(build, "bench", "bench_plugin"), "--kv", "--registrations", str(regs)]
    if cpu:
        cmd += ["--cpu", str(cpu)]
    if alloc_sizes:
        cmd += ["--alloc-sizes", alloc_sizes]
    if allocate_only:
        cmd += ["--allocate-only"]
    if metrics:
        cmd += ["--metrics-scrapes", str(metrics[0]), "--metrics-timed", str(metrics[1])]
    if resource:
        cmd += ["--resource", resource]
    for a in extra:
        cmd += ["--plugin-arg", a]
    if client:
        cmd += ["--client", client]
    if health:
        cmd += ["--health-control", health[0]]
        for u in health[1]:
            cmd += ["--health-uuid", u]
    cmd += [plugin, config, str(calls), str(restarts)]
    return kv_lines(run(cmd, env=env))


def generic_config(path, n):
    """example.com/null with |n| devices: /dev/null sets of at most
    GENERIC_COUNT_MAX each (IDs g<k>-null::<i>)."""
    groups, left = [], n
    while left > 0:
        c = min(GENERIC_COUNT_MAX, left)
        left -= c
        groups.append("        - paths:\n            - path: /dev/null\n          count: %d\n" % c)
    with open(path, "w") as f:
        f.write("version: v1\ngeneric:\n  devices:\n    - name: example.com/null\n"
                "      groups:\n" + "".join(groups))


def replicas_config(path, replicas):
    """nvidia.com/gpu time-sliced |replicas| ways (envvar, passDeviceSpecs)."""
    with open(path, "w") as f:
        f.write("version: v1\nflags:\n  migStrategy: none\n  plugin:\n"
                "    deviceListStrategy: envvar\n    passDeviceSpecs: true\n"
                "health:\n  probeInterval: 60\n  quietPeriod: 3600\n"
                "sharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n"
                "        replicas: %d\n" % replicas)


def scale_sizes():
    """(label, kind, size): kind "generic" (size devices) or "replicas" (per GPU)."""
    out = [("%d generic devices" % n, "generic", n) for n in SCALE_GENERIC]
    out += [("%d GPUs x %d replicas" % (SCALE_GPUS, r), "replicas", r) for r in SCALE_REPLICAS]
    return out


def bench_scale(build, go, tmp, calls, cpu, add):
    """One run of Allocate by resource size, kdev then the Go peer per size."""
    kdev = os.path.join(build, "kdev-plugin")
    ks = ",".join(str(k) for k in SCALE_KS)
    proc = os.path.join(tmp, "scale-proc")
    control = os.path.join(tmp, "scale-control")
    os.makedirs(proc, exist_ok=True)
    nv_env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "mock", "nvml"),
                  KDEV_MOCK_NVML_TOPOLOGY=os.path.join(SRC, SCALE_TOPO),
                  KDEV_MOCK_NVML_PROC=proc, KDEV_MOCK_NVML_CONTROL=control)
    for label, kind, size in scale_sizes():
        cfg = os.path.join(tmp, "scale-%s-%d.yaml" % (kind, size))
        n = size if kind == "generic" else SCALE_GPUS * size
        if kind == "generic":
            generic_config(cfg, size)
            add(("scale", label, "kdev"), bench_plugin(
                build, kdev, cfg, calls, 1, alloc_sizes=ks, allocate_only=True, cpu=cpu))
            go_extra = ["--devices=%d" % n]
        else:
            replicas_config(cfg, size)
            open(control, "w").close()
            add(("scale", label, "kdev"), bench_plugin(
                build, kdev, cfg, calls, 1, resource="nvidia.com/gpu", env=nv_env,
                extra=["--proc-root", proc], alloc_sizes=ks, allocate_only=True, cpu=cpu))
            go_extra = ["--devices=%d" % n, "--id-prefix=" + SCALE_GO_REPLICA_PREFIX]
        add(("scale", label, "go"), bench_plugin(build, go, cfg, calls, 1, extra=go_extra,
                                                 alloc_sizes=ks, allocate_only=True, cpu=cpu))


def parse_preferred(text):
    """Worst kdev whole-call median per GPU count, optimality, random 16-GPU worst."""
    worst, cases, same = {}, 0, 0
    for line in text.splitlines():
        f = line.split()
        if len(f) == 12 and f[1].isdigit():
            gpus, kdev_us = int(f[1]), float(f[4])
            worst[gpus] = max(worst.get(gpus, 0.0), kdev_us)
            cases += 1
            same += f[8] == "yes"
    m = re.search(r"slowest search ([\d.]+) us", text)
    return worst, cases, same, float(m.group(1)) if m else None


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") or line.startswith("Model"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            mem = "%.1f GiB" % (kib / 1048576.0)
    except (OSError, ValueError, IndexError):
        pass
    return model, mem


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "MiB":
        return "%.2f" % (v / 1024.0)
    if unit in ("", "B", "count", "KiB"):
        return "%d" % round(v)
    return "%.3g" % v if v < 10 else "%.1f" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--go", required=True, help="the Go peer's binary")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=100)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--scale-calls", type=int, default=2000,
                    help="Allocate calls per request size in the by-size table")
    ap.add_argument("--scale-cpu", type=int, default=1,
                    help="by-size table: client and plugin on this CPU only (1-based; 0: "
                    "unpinned)")
    ap.add_argument("--scale-only", action="store_true",
                    help="run only the Allocate by resource size table")
    ap.add_argument("--out")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    kdev = os.path.join(build, "kdev-plugin")
    t_start = time.time()
    load0 = loadavg()

    samples = {}   # (scenario, key) -> [value per run]

    def add(scn, kvs):
        for k, v in kvs.items():
            samples.setdefault((scn, k), []).append(v)

    tmp = tempfile.mkdtemp(prefix="kdev-bench-run.")
    try:
        proc = os.path.join(tmp, "proc")
        control = os.path.join(tmp, "control")
        nv_env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "mock", "nvml"),
                      KDEV_MOCK_NVML_TOPOLOGY=os.path.join(SRC, TOPO),
                      KDEV_MOCK_NVML_PROC=proc, KDEV_MOCK_NVML_CONTROL=control)
        open(control, "w").close()
        nv_extra = ["--proc-root", proc]
        mig_regs = count_resources(build, MIG_CONFIG, nv_env, nv_extra)
        demo_regs = count_resources(build, DEMO_CONFIG, None, [])
        for i in range(a.runs):
            sys.stderr.write("bench: run %d of %d\n" % (i + 1, a.runs))
            if not a.scale_only:
                add("demo", bench_plugin(build, kdev, DEMO_CONFIG, 1000, 10, regs=demo_regs))
                open(control, "w").close()    # the mock reads a shrunk file from its start
                add("mig", bench_plugin(build, kdev, MIG_CONFIG, a.calls, a.restarts,
                                        regs=mig_regs, resource="nvidia.com/gpu", env=nv_env,
                                        extra=nv_extra, health=(control, HEALTH_UUIDS)))
                open(control, "w").close()
                add("migm", bench_plugin(build, kdev, MIG_CONFIG, 100, 1, regs=mig_regs,
                                         resource="nvidia.com/gpu", env=nv_env, extra=nv_extra,
                                         metrics=(METRICS_SCRAPES, METRICS_TIMED)))
                add("null", bench_plugin(build, kdev, NULL_CONFIG, a.calls, a.restarts,
                                         client=PY_CLIENT))
                add("go", bench_plugin(build, a.go, NULL_CONFIG, a.calls, a.restarts,
                                       client=PY_CLIENT))
                add("lw", kv_lines(run([os.path.join(build, "bench", "bench_listandwatch"),
                                        "128", "501"])))
                worst, cases, same, rnd = parse_preferred(
                    run([os.path.join(build, "bench", "bench_preferred"), "201"]))
                add("pref", {"pref8_us": worst.get(8), "pref16_us": worst.get(16),
                             "pref_rand16_us": rnd, "pref_cases": cases, "pref_same": same})
            bench_scale(build, a.go, tmp, a.scale_calls, a.scale_cpu, add)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def st(scn, key):
        v = [x for x in samples.get((scn, key), []) if x is not None]
        return (min(v), statistics.median(v), max(v)) if v else None

    rows = []   # (figure, unit, kdev stats, go stats, target text, verdict)

    def row(fig, unit, k, g=None, target="", ok=None):
        rows.append((fig, unit, k, g, target, ok))

    def le(stats, limit):
        """"met" when every run is within |limit|, "met*" when the median is
        (not the worst run), "NOT MET" otherwise."""
        if stats is None:
            return None
        return "met" if stats[2] <= limit else "met*" if stats[1] <= limit else "NOT MET"

    if not a.scale_only:
        mib = 1024.0
        for scn, label in (("demo", "generic demo"), ("mig", "8 GPUs MIG mixed x16"),
                           ("null", "2x /dev/null")):
            g = st("go", "rss_kib") if scn == "null" else None
            gh = st("go", "hwm_end_kib") if scn == "null" else None
            gt = st("go", "threads") if scn == "null" else None
            tgt = scn == "mig"
            row("RSS (VmRSS) after registration, %s" % label, "MiB", st(scn, "rss_kib"), g,
                "<= 4 MiB" if tgt else "", le(st(scn, "rss_kib"), 4 * mib) if tgt else None)
            row("peak RSS (VmHWM) at exit, %s" % label, "MiB", st(scn, "hwm_end_kib"), gh,
                "<= 4 MiB" if tgt else "", le(st(scn, "hwm_end_kib"), 4 * mib) if tgt else None)
            row("threads, %s" % label, "count", st(scn, "threads"), gt, "<= 2",
                le(st(scn, "threads"), 2))
        row("RSS (VmRSS) after reg. + %d scrapes, 8 GPUs MIG mixed x16, metrics on"
            % METRICS_SCRAPES, "MiB", st("migm", "metrics_rss_kib"))
        row("peak RSS (VmHWM) after reg. + %d scrapes, MIG mixed x16, metrics on"
            % METRICS_SCRAPES, "MiB", st("migm", "metrics_hwm_kib"))
        row("GET /metrics latency p50, %d scrapes, 8 GPUs MIG mixed x16" % METRICS_TIMED, "us",
            st("migm", "metrics_p50_us"))
        row("GET /metrics latency p99, %d scrapes, 8 GPUs MIG mixed x16" % METRICS_TIMED, "us",
            st("migm", "metrics_p99_us"))
        row("start -> registered, 8 GPUs MIG mixed x16 (mock NVML, %d resources)" % mig_regs, "ms",
            st("mig", "start_ms"), None, "<= 20 ms", le(st("mig", "start_ms"), 20))
        row("start -> registered, 2x /dev/null", "ms", st("null", "start_ms"), st("go", "start_ms"),
            "<= 20 ms", le(st("null", "start_ms"), 20))
        for scn, label in (("mig", "nvidia.com/gpu replica"), ("null", "/dev/null")):
            g = scn == "null"
            row("Allocate p50, C client, %s" % label, "us", st(scn, "alloc_p50_us"),
                st("go", "alloc_p50_us") if g else None, "<= 50 us", le(st(scn, "alloc_p50_us"), 50))
            row("Allocate p99, C client, %s" % label, "us", st(scn, "alloc_p99_us"),
                st("go", "alloc_p99_us") if g else None, "<= 250 us",
                le(st(scn, "alloc_p99_us"), 250))
        row("Allocate p50, Python grpcio client, /dev/null", "us", st("null", "py_alloc_p50_us"),
            st("go", "py_alloc_p50_us"))
        row("Allocate p99, Python grpcio client, /dev/null", "us", st("null", "py_alloc_p99_us"),
            st("go", "py_alloc_p99_us"))
        row("health: XID read by the mock -> Unhealthy list on 2 streams, median of 4", "ms",
            st("mig", "health_ms"), None, "<= 5 ms", le(st("mig", "health_ms"), 5))
        row("health: same, slowest of 4", "ms", st("mig", "health_max_ms"), None, "<= 5 ms",
            le(st("mig", "health_max_ms"), 5))
        row("health: control-file write -> list (incl. mock's 20 ms poll)", "ms",
            st("mig", "health_write_ms"))
        for scn, label in (("mig", "8 GPUs MIG mixed x16"), ("null", "2x /dev/null")):
            g = scn == "null"
            row("kubelet restart -> re-registered p50, %s" % label, "ms",
                st(scn, "restart_p50_ms"), st("go", "restart_p50_ms") if g else None, "<= 3 ms",
                le(st(scn, "restart_p50_ms"), 3))
            row("kubelet restart -> re-registered p99, %s" % label, "ms",
                st(scn, "restart_p99_ms"), st("go", "restart_p99_ms") if g else None, "<= 20 ms",
                le(st(scn, "restart_p99_ms"), 20))
            row("kubelet restart: registrations beyond one per restart, %s" % label, "count",
                st(scn, "restart_extra_registrations"),
                st("go", "restart_extra_registrations") if g else None, "0",
                le(st(scn, "restart_extra_registrations"), 0))
        for scn, label in (("mig", "8 GPUs MIG mixed x16"), ("null", "2x /dev/null")):
            g = scn == "null"
            growth = [b - a_ for a_, b in zip(samples[(scn, "rss_kib")],
                                              samples[(scn, "rss_after_restarts_kib")])]
            gs = (min(growth), statistics.median(growth), max(growth))
            gg = None
            if g:
                ggr = [b - a_ for a_, b in zip(samples[("go", "rss_kib")],
                                               samples[("go", "rss_after_restarts_kib")])]
                gg = (min(ggr), statistics.median(ggr), max(ggr))
            row("RSS growth over %d restarts, %s" % (a.restarts, label), "KiB", gs, gg,
                "flat (<= 256 KiB)", le(gs, 256))
            fd = [b - a_ for a_, b in zip(samples[(scn, "fds_before")], samples[(scn, "fds_after")])]
            fds = (min(fd), statistics.median(fd), max(fd))
            gf = None
            if g:
                gfd = [b - a_ for a_, b in zip(samples[("go", "fds_before")],
                                               samples[("go", "fds_after")])]
                gf = (min(gfd), statistics.median(gfd), max(gfd))
            row("fd count change over %d restarts, %s" % (a.restarts, label), "count", fds, gf,
                "flat (<= 0)", le(fds, 0))
            missed = st(scn, "restart_missed")
            row("restarts not re-registered within 5 s, %s" % label, "count", missed,
                st("go", "restart_missed") if g else None, "0", le(missed, 0))
        pc, ps = st("pref", "pref_cases"), st("pref", "pref_same")
        optimal = pc is not None and ps is not None and ps[0] == pc[2]
        row("GetPreferredAllocation, 8 GPUs NVSwitch, slowest size (whole call)", "us",
            st("pref", "pref8_us"), None, "<= 1000 us, optimal",
            le(st("pref", "pref8_us"), 1000) if optimal else "NOT MET")
        row("GetPreferredAllocation, 16 GPUs 2 NVLink islands, slowest size", "us",
            st("pref", "pref16_us"), None, "<= 1000 us, optimal",
            le(st("pref", "pref16_us"), 1000) if optimal else "NOT MET")
        row("GetPreferredAllocation, slowest of 50 random 16-GPU tables (search)", "us",
            st("pref", "pref_rand16_us"), None, "<= 1000 us", le(st("pref", "pref_rand16_us"), 1000))
        row("ListAndWatch message, 8 GPUs x 128 replicas (%d devices)"
            % round(st("lw", "lw_devices")[1]), "B", st("lw", "lw_bytes"))
        row("ListAndWatch build (pack + free), 8 GPUs x 128 replicas", "us", st("lw", "lw_build_us"))

    # Allocate by resource size
    def scale(label, who, k):
        return st(("scale", label, who), "alloc_k%d_p50_us" % k)

    def ratio_stats(num, den):
        """min/median/max of per-run ratios num[i] / den[i]."""
        if not num or not den or len(num) != len(den):
            return None
        v = [x / y for x, y in zip(num, den) if y]
        return (min(v), statistics.median(v), max(v)) if v else None

    def runs(label, who, k):
        return samples.get((("scale", label, who), "alloc_k%d_p50_us" % k), [])

    sizes = scale_sizes()
    for k in SCALE_KS:
        for label, kind, size in sizes:
            ks, gs = scale(label, "kdev", k), scale(label, "go", k)
            r = ratio_stats(runs(label, "kdev", k), runs(label, "go", k))
            go_note = ", Go: plain IDs" if kind == "replicas" else ""
            n = size if kind == "generic" else SCALE_GPUS * size
            fig = "Allocate p50, %d ID%s, %s%s" % (k, "s" if k > 1 else "", label, go_note)
            if k > n:
                row(fig, "us", None, None, "n/a (%d devices)" % n)
                continue
            row(fig, "us", ks, gs, "<= 0.5x Go", le(r, 0.5))
        generic = [x for x in sizes if x[1] == "generic" and x[2] >= k]
        small, big = generic[0][0], generic[-1][0]
        flat = ratio_stats(runs(big, "kdev", k), runs(small, "kdev", k))
        row("Allocate p50, %d ID%s: %s / %s (kdev, per run)" % (
            k, "s" if k > 1 else "", big.split(" ")[0], small), "x", flat, None, "<= 2x (flat)",
            le(flat, 2))

    # --- the report --------------------------------------------------------------------
    model, mem = machine()
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = []
    w = lines.append
    w("kdev benchmarks (bench/run.sh), %s" % now.strftime("%Y-%m-%d %H:%M UTC"))
    w("machine: %s, %s CPUs (nproc), %s, %s memory; %s %s" % (
        platform.machine(), os.cpu_count() if not hasattr(os, "sched_getaffinity")
        else len(os.sched_getaffinity(0)), model, mem, platform.system(), platform.release()))
    try:
        gover = subprocess.run(["go", "version"], stdout=subprocess.PIPE,
                               universal_newlines=True).stdout.strip()
    except OSError:
        gover = "go: unknown"
    w("kdev: %s build; Go peer: bench/peers/go (%s, Debian grpc-go)" % (
        os.environ.get("KDEV_BENCH_BUILD_TYPE", "RelWithDebInfo"), gover))
    if a.scale_only:
        w("runs: %d (each figure: min / median / max over the runs; each run is a fresh plugin "
          "process per size); only Allocate by resource size (--scale-only): %d calls per "
          "request size per run" % (a.runs, a.scale_calls))
    else:
        w("runs: %d (each figure: min / median / max over the runs; each run is a fresh plugin "
          "process); Allocate: %d calls per run; restarts: %d per run; Allocate by resource "
          "size: %d calls per request size" % (a.runs, a.calls, a.restarts, a.scale_calls))
    w("verdict: met = every run within the target; met* = the median run within it, not the "
      "worst; kdev/Go = ratio of the medians")
    w("load average (1/5/15 min) at start: %s; at end: %s (other work on the machine shows "
      "up in the max columns)" % (load0, loadavg()))
    w("")
    hdr = "%-72s %-5s %-26s %-26s %-8s %-20s %s" % ("figure", "unit", "kdev min/med/max",
                                                  "Go peer min/med/max", "kdev/Go", "target",
                                                  "verdict")
    w(hdr)
    w("-" * len(hdr))
    for fig, unit, k, g, target, ok in rows:
        ks = "/".join(fmt(x, unit) for x in k) if k else "-"
        gs = "/".join(fmt(x, unit) for x in g) if g else "-"
        ratio = "-"
        if k and g and g[1]:
            ratio = "%.2f" % (k[1] / g[1])
        verdict = ok or ""
        w("%-72s %-5s %-26s %-26s %-8s %-20s %s" % (fig, unit if unit != "count" else "",
                                                    ks, gs, ratio, target, verdict))
    w("")
    w("notes:")
    if not a.scale_only:
        w("- configs: generic demo = examples/generic-demo.yaml; 2x /dev/null = "
          "bench/configs/generic-null.yaml (the Go peer serves the same two devices and answers")
        w("  Allocate with the same DeviceSpec); 8 GPUs MIG mixed x16 = "
          "bench/configs/mig-mixed-16.yaml on " + TOPO + " (mock NVML).")
        w("- start -> registered: fork+exec to the last Register received; for the GPU node it "
          "includes NVML (mock) init and discovery, the mock")
        w("  parsing its YAML topology, MIG capability lookup, 8 sockets and 8 Register calls. "
          "met*/NOT MET rows: see the load average.")
        w("- health: \"read by the mock\" starts when the mock NVML read the XID line from its "
          "control file (inotify IN_ACCESS);")
        w("  the mock polls that file every 20 ms while nvmlEventSetWait blocks, so the write-based "
          "figure is the mock's, not kdev's.")
        w("- kubelet restart: kdev registers on the loop iteration after kubelet.sock's inotify "
          "event (src/plugin/runtime.c),")
        w("  and coalesces what follows within KDEV_DP_COALESCE_MS = 10 ms of a Register to the "
          "same kubelet; the Go peer re-registers at once.")
        w("- the Go peer's restart p99 near 1 s: inotify reports kubelet.sock at bind(), before "
          "listen(); its first dial is refused and")
        w("  grpc-go's reconnect backoff starts at 1 s (the same watch-then-dial pattern as NVIDIA's "
          "plugin).")
        w("- GetPreferredAllocation: bench/bench_preferred, medians of 201 calls per case; optimal = "
          "every answer scores as the exhaustive subset search (%s of %s cases)." % (
              fmt(ps[0], "") if ps else "-", fmt(pc[2], "") if pc else "-"))
        mf = st("migm", "metrics_failed")
        w("- metrics on: kdev-plugin --metrics-address 127.0.0.1:0 (port from its \"serving "
          "metrics\" log line, so --log-level info), libmicrohttpd")
        w("  dlopen'ed; RSS/VmHWM after registration and %d GET /metrics (%s B each), before any "
          "Allocate; metrics off: the rows above." % (METRICS_SCRAPES,
                                                       fmt(st("migm", "metrics_bytes")[1], "B")
                                                       if st("migm", "metrics_bytes") else "-"))
        w("  Metrics on, before the first GET: %s MiB (median). Latency: plain HTTP/1.1 GET from C, "
          "a new connection each, connect to EOF; %s failed." % (
              fmt(st("migm", "rss_kib")[1], "MiB") if st("migm", "rss_kib") else "-",
              fmt(mf[2], "") if mf else "-"))
        w("  No target: docs/architecture.md sets none with metrics on (README \"Metrics\": "
          "about 2.8 MiB more RSS, mostly GnuTLS).")
        w("- the Go peer has no NVML and no health checks: its column is empty where it does not do "
          "the job.")
    w("- Allocate by resource size: one container request of 1 or 64 IDs taken from the "
      "plugin's ListAndWatch list at positions")
    w("  (i+1)*n/K-1 (spread, ending at the last device); %d calls per request size and run; "
      "generic = example.com/null with n" % a.scale_calls)
    w("  /dev/null devices (sets of %d, IDs g<k>-null::<i>); replicas = nvidia.com/gpu "
      "time-sliced on %s" % (GENERIC_COUNT_MAX, SCALE_TOPO))
    w("  (mock NVML; envvar, passDeviceSpecs). The Go peer has no NVML and cannot serve "
      "replicas on the mock: at the replica sizes it")
    w("  serves as many plain IDs \"<uuid>::<n>\" (--devices, --id-prefix), looked up in a Go "
      "map; it checks only that each ID is known")
    w("  (kdev also checks health and repeats and builds one DeviceSpec per distinct node). "
      "<= 0.5x Go: judged on the per-run ratio kdev/Go;")
    w("  %s" % ("client and plugin (kdev or Go) pinned to CPU %d (bench_plugin --cpu %d, "
                "GOMAXPROCS then 1): unpinned, a round trip" % (a.scale_cpu - 1, a.scale_cpu)
                if a.scale_cpu else "client and plugin unpinned (--scale-cpu 0): a round trip"))
    w("  that wakes an idle CPU costs ~70 us more at random on a VM, for either plugin, "
      "which swamps both; pinned, the figures are the plugins' own.")
    w("  flat: kdev's p50 at 16384 generic devices over its p50 at the smallest size with "
      "enough devices (16; 256 for 64 IDs), per run.")
    w("wall time: %.0f s" % (time.time() - t_start))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        sys.stderr.write("bench: results written to %s\n" % os.path.relpath(a.out, SRC))


if __name__ == "__main__":
    main()
