"""The compute-share error of libkdev-share.so's pacing on the mock
libcuda.so.1 (called by bench/share/run.py): two containers with 1 ms
kernels on one GPU for --ms milliseconds, each split beside a plain run
without the library (which splits the GPU evenly whatever the shares)."""
import argparse
import os
import re
import shutil
import subprocess
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOPO = os.path.join(SRC, "mock", "nvml", "topologies", "h100-80gb-8x-nvswitch.yaml")


def run(build, shares, ms, preload):
    with open(TOPO, encoding="utf-8") as f:
        uuid = re.search(r"uuid: (GPU-[0-9a-f-]{36})", f.read()).group(1)
    dirs = [tempfile.mkdtemp(prefix="kdev-share-pace-") for _ in shares]
    fd, tl = tempfile.mkstemp(prefix="kdev-share-gpu-")
    os.close(fd)
    try:
        procs = []
        for d, pct in zip(dirs, shares):
            with open(os.path.join(d, "limits"), "w", encoding="utf-8") as f:
                f.write("%s %d %d\n" % (uuid, 1 << 30, pct))
            e = dict(os.environ)
            e.pop("LD_PRELOAD", None)
            e.update(KDEV_SHARE_DIR=d, KDEV_MOCK_NVML_TOPOLOGY=TOPO, KDEV_MOCK_CUDA_GPU_FILE=tl,
                     LD_LIBRARY_PATH=os.path.join(build, "mock", "cuda") + ":" +
                     os.path.join(build, "mock", "nvml"))
            if preload:
                e["LD_PRELOAD"] = os.path.join(build, "libkdev-share.so")
            procs.append(subprocess.Popen([os.path.join(build, "tests", "kdev-share-client"),
                                           "burn", "1000", str(ms)], env=e,
                                          stdout=subprocess.PIPE, text=True))
        return [float(re.search(r"share ([0-9.]+)", p.communicate()[0]).group(1)) for p in procs]
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        os.unlink(tl)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--ms", type=int, default=5000)
    a = ap.parse_args()
    b = os.path.abspath(a.build_dir)
    print("Compute share, two containers, 1 ms kernels, %d ms (percent of the GPU's time)" % a.ms)
    print("%-10s %-16s %-16s %s" % ("shares", "plain", "lib", "error (points)"))
    worst = 0.0
    for shares in ((30, 70), (50, 50), (20, 80)):
        plain = run(b, shares, a.ms, False)
        lib = run(b, shares, a.ms, True)
        err = max(abs(x - s) for x, s in zip(lib, shares))
        worst = max(worst, err)
        print("%-10s %-16s %-16s %.1f" % ("/".join(map(str, shares)),
                                          " / ".join("%.1f" % x for x in plain),
                                          " / ".join("%.1f" % x for x in lib), err))
    print("  worst error %.1f points (the test's stated bound: 8)" % worst)


if __name__ == "__main__":
    main()
