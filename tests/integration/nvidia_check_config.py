"""kdev-plugin --check-config FILE on the mock libnvidia-ml.so.1: prints one
line per resource the node would advertise after time-slicing (name, device
count, replicas, IDs) and exits 0; a bad file exits 1 with its
file:line:column message; NVIDIA's example configs are accepted."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir  # noqa: E402

MOCK_DIR = kt.MOCK_NVML_DIR
PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
TOPO = kt.H100_TOPO
CONFIGS = os.path.join(kt.SOURCE_DIR, "tests", "nvidia-configs")
UUIDS = kt.H100_UUIDS


def check(d, path, *extra, topo=TOPO, control_text="", log_level="error", timeout=120):
    control = os.path.join(d, "control")
    with open(control, "w") as f:
        f.write(control_text)
    env = dict(os.environ, LD_LIBRARY_PATH=MOCK_DIR, KDEV_MOCK_NVML_TOPOLOGY=topo,
               KDEV_MOCK_NVML_CONTROL=control, KDEV_MOCK_NVML_PROC=d)
    for k in ("KDEV_CONFIG", "CONFIG_FILE", "MIG_STRATEGY", "DEVICE_LIST_STRATEGY"):
        env.pop(k, None)
    return subprocess.run([PLUGIN, "--check-config", path, "-d", os.path.join(d, "dp"),
                           "--log-level", log_level, "--proc-root", d] + list(extra),
                          env=env, capture_output=True, text=True, timeout=timeout)


def warnings(stderr):
    return [line for line in stderr.splitlines() if "level=warn" in line]


def write(d, text):
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_time_slicing_rename_and_devices():
    with TempDir() as d:
        p = write(d, "version: v1\n"
                     "sharing:\n"
                     "  timeSlicing:\n"
                     "    resources:\n"
                     "      - name: nvidia.com/gpu\n"
                     "        rename: gpu-shared\n"
                     "        devices: [0, \"2\"]\n"
                     "        replicas: 2\n")
        r = check(d, p)
        assert r.returncode == 0, r.stderr
        kept = [u for i, u in enumerate(UUIDS) if i not in (0, 2)]
        shared = [UUIDS[0] + "::0", UUIDS[0] + "::1", UUIDS[2] + "::0", UUIDS[2] + "::1"]
        want = ("nvidia.com/gpu: 6 devices: " + " ".join(kept) + "\n"
                "nvidia.com/gpu-shared: 4 devices (4 replicas of 2 devices): "
                + " ".join(shared) + "\n")
        assert r.stdout == want, r.stdout


def test_devices_without_rename_shares_all():
    """Review 4, F2: `devices` without a new name is ignored as NVIDIA does
    (every GPU shared, one warning); with rename the subset moves and a
    list covering every GPU renames in place."""
    with TempDir() as d:
        p = write(d, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                     "      - {name: nvidia.com/gpu, replicas: 2, devices: [0]}\n")
        r = check(d, p, log_level="warn")
        assert r.returncode == 0, r.stderr
        ids = " ".join("%s::%d" % (u, n) for u in UUIDS for n in range(2))
        assert r.stdout == ("nvidia.com/gpu: 16 devices (16 replicas of 8 devices): %s\n"
                            % ids), r.stdout
        w = warnings(r.stderr)
        assert len(w) == 1, r.stderr
        assert ("sharing.timeSlicing.resources[0].devices: honoured only together with rename "
                "(or renameByDefault); sharing every device of nvidia.com/gpu, as NVIDIA does"
                in w[0]), w
        p = write(d, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                     "      - {name: gpu, replicas: 2, devices: 8, rename: ts}\n")
        r = check(d, p, log_level="warn")
        assert r.returncode == 0, r.stderr
        assert r.stdout == ("nvidia.com/ts: 16 devices (16 replicas of 8 devices): %s\n"
                            % ids), r.stdout
        assert warnings(r.stderr) == [], r.stderr


MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies",
                        "mig-a100-80gb-single.yaml")
MIG_GPU0 = "GPU-3f1e2d4c-5b6a-4798-8a7b-6c5d4e3f2a10"


def test_faulted_mig_gpu():
    """Review 4, F1: a MIG GPU that needs a reset is still known to be
    MIG-enabled: under single the node starts with the other GPU's MIG
    devices, under mixed it is not advertised whole next to them."""
    migs = " ".join("MIG-5a0b1c2d-3e4f-5a6b-7c8d-9e0f1a2b3c1%d" % j for j in range(7))
    want_warn = ("GPU 0 (%s): MIG enabled but its MIG devices could not be read (GPU "
                 "requires restart); not advertised" % MIG_GPU0)
    with TempDir() as d:
        for strategy, name in (("single", "nvidia.com/gpu"), ("mixed", "nvidia.com/mig-1g.10gb")):
            p = write(d, "version: v1\nflags: {migStrategy: %s}\n" % strategy)
            r = check(d, p, topo=MIG_TOPO, control_text="reset-required %s\n" % MIG_GPU0,
                      log_level="warn")
            assert r.returncode == 0, r.stderr
            assert r.stdout == "%s: 7 devices: %s\n" % (name, migs), r.stdout
            w = warnings(r.stderr)
            assert len(w) == 1 and want_warn in w[0], r.stderr


def test_null_flags_accepted():
    """Review 4, F4: keys without a value under flags are left out."""
    with TempDir() as d:
        for text in ("version: v1\nflags:\n  migStrategy:\n",
                     "version: v1\nflags:\n  plugin:\n"):
            r = check(d, write(d, text))
            assert r.returncode == 0, r.stderr
            assert r.stdout == "nvidia.com/gpu: 8 devices: %s\n" % " ".join(UUIDS), r.stdout


def test_nvidia_examples():
    with TempDir() as d:
        r = check(d, os.path.join(CONFIGS, "good", "time-slicing.yaml"))
        assert r.returncode == 0, r.stderr
        ids = " ".join("%s::%d" % (u, n) for u in UUIDS for n in range(10))
        assert r.stdout == ("nvidia.com/gpu: 80 devices (80 replicas of 8 devices): %s\n"
                            % ids), r.stdout
        r = check(d, os.path.join(CONFIGS, "good", "time-slicing-rename-by-default.yaml"))
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("nvidia.com/gpu.shared: 80 devices (80 replicas of 8 "
                                   "devices): "), r.stdout
        assert r.stdout.count("\n") == 1
        r = check(d, os.path.join(CONFIGS, "good", "full-flags.yaml"))
        assert r.returncode == 0, r.stderr
        assert r.stdout == "nvidia.com/gpu: 8 devices: %s\n" % " ".join(UUIDS), r.stdout


def test_bad_config_exits_1():
    with TempDir() as d:
        p = os.path.join(CONFIGS, "bad", "replicas-1.yaml")
        r = check(d, p)
        assert r.returncode == 1
        assert r.stdout == ""
        assert ("%s:6:19: sharing.timeSlicing.resources[0].replicas: must be >= 2" % p
                in r.stderr), r.stderr


def test_odd_config_files():
    """A FIFO (no writer: a plain open would block forever), a link to
    /dev/zero (never ends), a directory, an oversized file and a NUL byte are
    refused at once with one message and exit 1; the timeout turns a hang into
    a failure."""
    with TempDir() as d:
        fifo = os.path.join(d, "fifo.yaml")
        os.mkfifo(fifo)
        zero = os.path.join(d, "zero.yaml")
        os.symlink("/dev/zero", zero)
        sub = os.path.join(d, "sub.yaml")
        os.mkdir(sub)
        big = os.path.join(d, "big.yaml")
        with open(big, "wb") as f:
            f.truncate(1024 * 1024 + 1)
        nul = os.path.join(d, "nul.yaml")
        with open(nul, "wb") as f:
            f.write(b"version: v1\n\0")
        for path, what in ((fifo, "is not a regular file (a FIFO)"),
                           (zero, "is not a regular file (a character device)"),
                           (sub, "is not a regular file (a directory)"),
                           (big, "the config file is larger than 1048576 bytes"),
                           (nul, "contains a NUL byte at offset 12")):
            r = check(d, path, timeout=20)
            assert r.returncode == 1, (path, r.returncode, r.stderr)
            assert r.stdout == "", r.stdout
            lines = r.stderr.splitlines()
            assert len(lines) == 1, r.stderr
            assert lines[0].endswith('level=error msg="cannot start" error="%s: %s"'
                                     % (path, what)), r.stderr


def test_mps_examples():
    """NVIDIA's MPS examples advertise what NVIDIA advertises (10 replicas of
    each GPU) with the MPS root given by flag, as NVIDIA's chart does; without
    it, NVIDIA's message; replicas above the limit of compute capability 9.0
    (48), NVIDIA's message."""
    with TempDir() as d:
        ids = " ".join("%s::%d" % (u, n) for u in UUIDS for n in range(10))
        p = os.path.join(CONFIGS, "good", "mps.yaml")
        r = check(d, p, "--mps-root", "/run/nvidia/mps")
        assert r.returncode == 0, r.stderr
        assert r.stdout == ("nvidia.com/gpu: 80 devices (80 replicas of 8 devices): %s\n"
                            % ids), r.stdout
        r = check(d, os.path.join(CONFIGS, "good", "mps-rename-by-default.yaml"),
                  "--mps-root", "/run/nvidia/mps")
        assert r.returncode == 0, r.stderr
        assert r.stdout == ("nvidia.com/gpu.shared: 80 devices (80 replicas of 8 devices): %s\n"
                            % ids), r.stdout
        r = check(d, p)
        assert r.returncode == 1
        assert r.stdout == ""
        assert 'error="using MPS requires --mps-root to be specified"' in r.stderr, r.stderr
        r = check(d, p, "--mps-root", "/run/nvidia/mps", "--mig-strategy", "mixed")
        assert r.returncode == 1
        assert 'error="using --mig-strategy=mixed is not supported with MPS"' in r.stderr, r.stderr
        q = write(d, "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
                     "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 49}]\n")
        r = check(d, q)
        assert r.returncode == 1
        assert ("invalid MPS configuration: invalid device maximum allowed replicas "
                "exceeded: 49 > 48" in r.stderr), r.stderr


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_time_slicing_rename_and_devices,
        test_devices_without_rename_shares_all,
        test_faulted_mig_gpu,
        test_null_flags_accepted,
        test_nvidia_examples,
        test_bad_config_exits_1,
        test_odd_config_files,
        test_mps_examples,
    ])
