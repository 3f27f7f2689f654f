"""kdev-plugin --nfd-features-file on the mock libnvidia-ml.so.1: the node
labels file (GPU Feature Discovery's names, Node Feature Discovery's
features.d format) is written at start with the exact expected labels
(tests/data/labels), follows the config (time-slicing), is filled in when the
driver appears (rediscovery), is rewritten only when its text changes, is
restored by SIGHUP, and is kept at exit."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
MOCK_DIR = kt.MOCK_NVML_DIR
DATA = os.path.join(kt.SOURCE_DIR, "tests", "data", "labels")
HEADER = ("# Written by kdev-plugin (NVIDIA GPU labels for Node Feature Discovery); "
          "do not edit.\n")
MACHINE_TEXT = "  NVIDIA DGX H100 (rev. 2)\n"  # as in tests/unit/test_nvidia_labels.c

CONFIG = """version: v1
flags:
  failOnInitError: %s
"""

TS_CONFIG = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
      - name: nvidia.com/mig-1g.10gb
        replicas: 2
      - name: nvidia.com/mig-1g.5gb
        replicas: 3
"""


def env_for(d, **extra):
    base = os.path.dirname(d)
    machine = os.path.join(base, "product_name")
    with open(machine, "w") as f:
        f.write(MACHINE_TEXT)
    env = {
        "LD_LIBRARY_PATH": MOCK_DIR,
        "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
        "KDEV_MOCK_NVML_CONTROL": os.path.join(base, "control"),
        "KDEV_NFD_MACHINE_TYPE_FILE": machine,
    }
    env.update(extra)
    open(env["KDEV_MOCK_NVML_CONTROL"], "a").close()
    return env


def control(d, line):
    with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
        f.write(line + "\n")


def features_dir(d):
    p = os.path.join(os.path.dirname(d), "features.d")
    os.makedirs(p, exist_ok=True)
    return p


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def expected(name):
    with open(os.path.join(DATA, name)) as f:
        return HEADER + f.read()


def normalised(text):
    """gpu.mode comes from the host's /sys (PCI class of the mock's bus ids):
    check its value, then blank it out for the exact comparison."""
    out = []
    for line in text.splitlines(True):
        if line.startswith("nvidia.com/gpu.mode="):
            assert line.strip().split("=", 1)[1] in ("unknown", "compute", "graphics"), line
            line = "nvidia.com/gpu.mode=<host>\n"
        out.append(line)
    return "".join(out)


def start(d, config_text, env, path):
    return Plugin(d, config_text, extra=("--nfd-features-file", path), env=env)


def test_written_at_start_exact_and_kept_at_exit():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "true", env_for(d), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            assert normalised(read(path)) == normalised(
                expected("h100-80gb-8x-nvswitch-none.txt")), read(path)
            assert oct(os.stat(path).st_mode & 0o777) == "0o644"
            assert "wrote node labels" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()
        # kept at exit (no label flapping across restarts), no temporary file left
        assert normalised(read(path)) == normalised(expected("h100-80gb-8x-nvswitch-none.txt"))
        assert os.listdir(os.path.dirname(path)) == ["kdev"], os.listdir(os.path.dirname(path))


def test_follows_time_slicing_config_and_env_var():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        # the environment variable instead of the flag
        p = Plugin(d, TS_CONFIG, env=env_for(d, KDEV_NFD_FEATURES_FILE=path))
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            text = read(path)
            assert normalised(text) == normalised(
                expected("h100-80gb-8x-nvswitch-none-ts.txt")), text
            assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED\n" in text
            assert "nvidia.com/gpu.replicas=4\n" in text
        finally:
            assert p.stop() == 0
            k.stop()


def test_rediscovery_fills_the_file():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        control(d, "init-error DRIVER_NOT_LOADED")
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "false", env_for(d, KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2"), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            # no GPUs yet: the header only (NFD then sets no GPU label)
            wait_for(lambda: read(path) is not None, what="labels file")
            assert read(path) == HEADER, read(path)
            control(d, "init-error SUCCESS")
            want = normalised(expected("h100-80gb-8x-nvswitch-none.txt"))
            wait_for(lambda: read(path) and normalised(read(path)) == want,
                     what="labels after the driver appears")
            wait_for(lambda: len(k.updates[RES]) >= 2, what="GPUs after the driver appears")
        finally:
            assert p.stop() == 0
            k.stop()


def test_written_only_on_change_and_restored_by_sighup():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "true", env_for(d), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            good = read(path)
            ino = os.stat(path).st_ino
            # SIGHUP with nothing changed: not rewritten (same inode)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: p.logtext().count("node labels unchanged") >= 1,
                     what="SIGHUP handled")
            assert os.stat(path).st_ino == ino
            # edited by hand: SIGHUP restores it (atomically: a new inode)
            with open(path, "w") as f:
                f.write("nvidia.com/gpu.product=bogus\n")
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: read(path) == good, what="labels restored")
            assert os.stat(path).st_ino != ino
            # removed: SIGHUP writes it again
            os.unlink(path)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: read(path) == good, what="labels written again")
            time.sleep(0.2)
            assert sorted(os.listdir(os.path.dirname(path))) == ["kdev"]
        finally:
            assert p.stop() == 0
            k.stop()


def test_missing_directory_is_logged_not_fatal():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(os.path.dirname(d), "no-such-dir", "kdev")
        p = start(d, CONFIG % "true", env_for(d), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: "cannot write the node labels" in p.logtext(), what="error logged")
            assert p.proc.poll() is None
        finally:
            assert p.stop() == 0
            k.stop()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_written_at_start_exact_and_kept_at_exit,
        test_follows_time_slicing_config_and_env_var,
        test_rediscovery_fills_the_file,
        test_written_only_on_change_and_restored_by_sighup,
        test_missing_directory_is_logged_not_fatal,
    ])
