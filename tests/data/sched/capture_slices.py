"""Captures the ResourceSlices kdev-dra-plugin publishes for node-a on a mock
NVML topology (the daemon on the mock libnvidia-ml.so.1 against the stand-in
API server, as tests/integration/dra_plugin.py runs it) and writes them in the
form of slices-h100-8x.json (one device a line, the slice renamed):

  KDEV_BUILD_DIR=build KDEV_SOURCE_DIR=. /usr/bin/python3 \\
      tests/data/sched/capture_slices.py h100-80gb-8x-nvswitch slices-h100-8x.json h100
  ... mig-h100-80gb-8x-mixed slices-mig-h100-8x-mixed.json mig
"""
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import dra_plugin as dp  # noqa: E402


def dump(slices, path):
    lines = ["["]
    for i, s in enumerate(slices):
        spec = dict(s["spec"])
        devs = spec.pop("devices")
        end = "," if i < len(slices) - 1 else ""
        lines.append(" " + json.dumps({"metadata": s["metadata"], "spec": spec})[:-2] +
                     ', "devices": [')
        for j, d in enumerate(devs):
            lines.append("   " + json.dumps(d) + ("," if j < len(devs) - 1 else ""))
        lines.append(" ]}}" + end)
    lines.append("]")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    topology, out, suffix = sys.argv[1:4]
    root = tempfile.mkdtemp(prefix="kdev-capture-")
    env = dp.Env(root, topology=os.path.join(dp.kt.SOURCE_DIR, "mock", "nvml", "topologies",
                                             topology + ".yaml"))
    try:
        env.register()
        dp.wait_for(lambda: len(env.api.slices()) > 0, timeout=30, what="slices")
        time.sleep(1)
        slices = [{"metadata": {"name": "node-a-gpu.nvidia.com-" + suffix}, "spec": s["spec"]}
                  for s in env.api.slices()]
    finally:
        env.close()
    dump(slices, os.path.join(HERE, out))


if __name__ == "__main__":
    main()
