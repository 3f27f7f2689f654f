"""kdev-plugin mps-control-daemon on the mock libnvidia-ml.so.1 and the mock
nvidia-cuda-mps-control (mock/mps): the exact commands each resource's MPS
daemon is sent for the 8-GPU H100 topology (81559 MiB each) and a config,
the directories and started marker, the watch (a daemon that dies is started
again with a backoff of 1 s, 2 s, ...), and the clean stop at SIGTERM."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir  # noqa: E402

PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
MOCK_MPS = os.path.join(kt.BUILD_DIR, "mock", "mps", "nvidia-cuda-mps-control")


def start(d, config, *extra):
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(config)
    env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
               KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO,
               KDEV_MOCK_MPS_LOG=os.path.join(d, "commands.log"),
               KDEV_MOCK_MPS_CONTROL=os.path.join(d, "control"))
    for k in ("KDEV_CONFIG", "CONFIG_FILE", "MPS_ROOT"):
        env.pop(k, None)
    open(os.path.join(d, "control"), "w").close()
    return subprocess.Popen([PLUGIN, "mps-control-daemon", "--config", path,
                             "--mps-dir", os.path.join(d, "mps"), "--control-bin", MOCK_MPS,
                             "--check-interval-ms", "100"] + list(extra),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def commands(d):
    try:
        with open(os.path.join(d, "commands.log")) as f:
            return [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        return []


def stop(p):
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, (p.returncode, err)
    return err


MPS_CONFIG = ("version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
              "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 4}]\n")


def test_commands_and_stop():
    with TempDir() as d:
        p = start(d, MPS_CONFIG)
        pipe = os.path.join(d, "mps", "nvidia.com", "gpu", "pipe")
        started = os.path.join(d, "mps", "nvidia.com", "gpu", ".started")
        kt.wait_for(lambda: os.path.exists(started), what="started marker")
        # 81559 MiB / 4 replicas = 20389 MiB (bytes / 4 / 2^20); 100 / 4 = 25
        want = ([pipe + ": -d"] +
                [pipe + ": set_default_device_pinned_mem_limit %d 20389M" % i
                 for i in range(8)] +
                [pipe + ": set_default_active_thread_percentage 25"])
        assert commands(d)[:10] == want, commands(d)
        assert os.path.isdir(os.path.join(d, "mps", "nvidia.com", "gpu", "log"))
        # the watch: only health queries while it answers
        kt.wait_for(lambda: len(commands(d)) >= 12, what="health queries")
        assert set(commands(d)[10:]) == {pipe + ": get_default_active_thread_percentage"}
        err = stop(p)
        assert commands(d)[-1] == pipe + ": quit", commands(d)
        assert not os.path.exists(started)
        assert 'msg="Shut down MPS" resource=nvidia.com/gpu' in err, err


def test_restart_with_backoff():
    with TempDir() as d:
        p = start(d, MPS_CONFIG)
        pipe = os.path.join(d, "mps", "nvidia.com", "gpu", "pipe")
        started = os.path.join(d, "mps", "nvidia.com", "gpu", ".started")
        kt.wait_for(lambda: os.path.exists(started), what="started marker")
        # the daemon dies (the mock's state goes), and -d fails for a while
        with open(os.path.join(d, "control"), "w") as f:
            f.write("fail -d\n")
        t0 = time.monotonic()
        os.unlink(os.path.join(pipe, "mock-mps-daemon"))
        kt.wait_for(lambda: commands(d).count(pipe + ": -d") >= 3, timeout=20,
                    what="two restarts")
        t1 = time.monotonic()
        # first restart after 1 s, second 2 s later: at least 3 s in all
        assert t1 - t0 >= 3.0, t1 - t0
        open(os.path.join(d, "control"), "w").close()  # -d works again
        kt.wait_for(lambda: os.path.exists(os.path.join(pipe, "mock-mps-daemon")), timeout=20,
                    what="restarted daemon")
        n = len(commands(d))
        kt.wait_for(lambda: len(commands(d)) >= n + 2, what="health queries again")
        err = stop(p)
        assert 'msg="MPS daemon not answering" resource=nvidia.com/gpu' in err, err
        assert 'msg="Restarting MPS daemon" resource=nvidia.com/gpu restarts=1 backoff_ms=1000' \
            in err, err
        assert 'restarts=2 backoff_ms=2000' in err, err
        assert 'msg="MPS daemon answers again" resource=nvidia.com/gpu' in err, err


def test_not_mps_starts_nothing():
    with TempDir() as d:
        p = start(d, "version: v1\nsharing:\n  timeSlicing:\n"
                     "    resources: [{name: gpu, replicas: 4}]\n")
        time.sleep(0.5)
        err = stop(p)
        assert commands(d) == []
        assert 'msg="Sharing strategy is not MPS; no MPS daemon" strategy=time-slicing' in err, err


def test_start_failure_exits_1():
    with TempDir() as d:
        path = os.path.join(d, "control")
        p = start(d, MPS_CONFIG)
        p.kill()
        p.wait()
        with open(path, "w") as f:
            f.write("fail set_default_active_thread_percentage\n")
        env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                   KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO, KDEV_MOCK_MPS_CONTROL=path)
        r = subprocess.run([PLUGIN, "mps-control-daemon", "--config", os.path.join(d, "c.yaml"),
                            "--mps-dir", os.path.join(d, "mps2"), "--control-bin", MOCK_MPS],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        assert ("error starting MPS daemon for nvidia.com/gpu: error setting active thread "
                "percentage: failed to send command to MPS daemon: exit status 1") in r.stderr, \
            r.stderr


if __name__ == "__main__":
    if not os.path.exists(MOCK_MPS):
        print("the mock nvidia-cuda-mps-control is not built in", MOCK_MPS)
        sys.exit(1)
    kt.run_tests([
        test_commands_and_stop,
        test_restart_with_backoff,
        test_not_mps_starts_nothing,
        test_start_failure_exits_1,
    ])
