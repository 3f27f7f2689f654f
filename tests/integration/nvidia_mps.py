"""kdev-plugin mps-control-daemon on the mock libnvidia-ml.so.1 and the mock
nvidia-cuda-mps-control (mock/mps): the exact commands each resource's MPS
daemon is sent for the 8-GPU H100 topology (81559 MiB each) and a config,
the directories and started marker, the watch (a daemon that dies is started
again with a backoff of 1 s, 2 s, ...), and the clean stop at SIGTERM."""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir  # noqa: E402

PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
MOCK_MPS = os.path.join(kt.BUILD_DIR, "mock", "mps", "nvidia-cuda-mps-control")


def start(d, config, *extra, path_prefix=None):
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(config)
    env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
               KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO,
               KDEV_MOCK_MPS_LOG=os.path.join(d, "commands.log"),
               KDEV_MOCK_MPS_CONTROL=os.path.join(d, "control"))
    for k in ("KDEV_CONFIG", "CONFIG_FILE", "MPS_ROOT"):
        env.pop(k, None)
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env.get("PATH", "")
    open(os.path.join(d, "control"), "w").close()
    with open(os.path.join(d, "daemon.log"), "w") as log:
        p = subprocess.Popen([PLUGIN, "mps-control-daemon", "--config", path,
                              "--mps-dir", os.path.join(d, "mps"), "--control-bin", MOCK_MPS,
                              "--check-interval-ms", "200"] + list(extra),
                             env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
    p.log = os.path.join(d, "daemon.log")
    return p


def logtext(p):
    with open(p.log) as f:
        return f.read()


def commands(d):
    try:
        with open(os.path.join(d, "commands.log")) as f:
            return [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        return []


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=20)
    err = logtext(p)
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
        kt.wait_for(lambda: not os.path.exists(started), what="started marker removed")
        kt.wait_for(lambda: os.path.exists(started), timeout=20, what="restarted daemon")
        n = len(commands(d))
        kt.wait_for(lambda: len(commands(d)) >= n + 1, what="health queries again")
        assert commands(d)[n:][0] == pipe + ": get_default_active_thread_percentage", commands(d)
        err = stop(p)
        assert 'msg="MPS daemon not answering" resource=nvidia.com/gpu' in err, err
        assert 'msg="Restarting MPS daemon" resource=nvidia.com/gpu restarts=1 backoff_ms=1000' \
            in err, err
        assert 'restarts=2 backoff_ms=2000' in err, err
        assert 'msg="MPS daemon answers again" resource=nvidia.com/gpu' in err, err


def write(d, config):
    tmp = os.path.join(d, "c.yaml.tmp")
    with open(tmp, "w") as f:
        f.write(config)
    os.rename(tmp, os.path.join(d, "c.yaml"))


def sighup(p, what):
    """SIGHUP |p| and wait for log line |what| once more than before."""
    n = logtext(p).count(what)
    p.send_signal(signal.SIGHUP)
    kt.wait_for(lambda: logtext(p).count(what) > n, what=what)


def test_reload():
    """SIGHUP: the same plan runs on; a bad file changes nothing; a new plan
    stops the daemon and starts it with the new commands; a strategy other
    than MPS stops it; MPS again starts it."""
    with TempDir() as d:
        p = start(d, MPS_CONFIG)
        pipe = os.path.join(d, "mps", "nvidia.com", "gpu", "pipe")
        started = os.path.join(d, "mps", "nvidia.com", "gpu", ".started")
        kt.wait_for(lambda: os.path.exists(started), what="started marker")

        def starts_and_quits():
            return [c for c in commands(d) if not c.endswith("get_default_active_thread_percentage")]

        first = starts_and_quits()
        assert len(first) == 10, first
        sighup(p, 'msg="configuration unchanged: the MPS daemons run on" resources=1')
        write(d, MPS_CONFIG.replace("replicas: 4", "replicas: four"))
        sighup(p, 'msg="cannot load the new configuration, the MPS daemons run on as they are"')
        assert starts_and_quits() == first, starts_and_quits()
        assert os.path.exists(started)
        log = logtext(p)
        assert re.search(r'config=\S*c\.yaml error="\S*c\.yaml:6:39: sharing\.mps\.resources'
                         r'\[0\]\.replicas: must be an integer between 2 and 4096, got '
                         r'\\"four\\""', log), log
        # 81559 MiB / 2 = 40779 MiB, 100 / 2 = 50
        write(d, MPS_CONFIG.replace("replicas: 4", "replicas: 2"))
        sighup(p, 'msg="configuration changed: restarting the MPS daemons" resources=1')
        want = ([pipe + ": quit", pipe + ": -d"] +
                [pipe + ": set_default_device_pinned_mem_limit %d 40779M" % i for i in range(8)] +
                [pipe + ": set_default_active_thread_percentage 50"])
        kt.wait_for(lambda: starts_and_quits()[10:] == want, what="the new plan's commands")
        kt.wait_for(lambda: os.path.exists(started), what="started marker again")
        write(d, "version: v1\nsharing:\n  timeSlicing:\n"
                 "    resources: [{name: gpu, replicas: 4}]\n")
        sighup(p, 'msg="Sharing strategy is not MPS; no MPS daemon" strategy=time-slicing')
        assert starts_and_quits()[21:] == [pipe + ": quit"], starts_and_quits()
        assert not os.path.exists(started)
        write(d, MPS_CONFIG)
        sighup(p, 'msg="configuration changed: restarting the MPS daemons" resources=1')
        kt.wait_for(lambda: os.path.exists(started), what="started marker after MPS again")
        assert starts_and_quits()[22:] == first, starts_and_quits()
        stop(p)
        assert starts_and_quits()[-1] == pipe + ": quit"
        assert not os.path.exists(started)


def test_set_compute_mode():
    """--set-compute-mode: "nvidia-smi -i <uuid> -c EXCLUSIVE_PROCESS" for
    each GPU before the daemon starts, DEFAULT after it quits; without the
    flag nvidia-smi is never run."""
    uuids = re.findall(r"uuid: (GPU-[0-9a-f-]+)", open(kt.H100_TOPO).read())
    assert len(uuids) == 8, uuids
    with TempDir() as d:
        bin_dir = os.path.join(d, "bin")
        os.mkdir(bin_dir)
        smi_log = os.path.join(d, "smi.log")
        with open(os.path.join(bin_dir, "nvidia-smi"), "w") as f:
            f.write('#!/bin/sh\necho "$*" >> %s\n' % smi_log)
        os.chmod(os.path.join(bin_dir, "nvidia-smi"), 0o755)
        p = start(d, MPS_CONFIG, path_prefix=bin_dir)
        started = os.path.join(d, "mps", "nvidia.com", "gpu", ".started")
        kt.wait_for(lambda: os.path.exists(started), what="started marker")
        stop(p)
        assert not os.path.exists(smi_log)
        p = start(d, MPS_CONFIG, "--set-compute-mode", path_prefix=bin_dir)
        kt.wait_for(lambda: os.path.exists(started), what="started marker")
        with open(smi_log) as f:
            assert f.read().splitlines() == ["-i %s -c EXCLUSIVE_PROCESS" % u for u in uuids]
        stop(p)
        with open(smi_log) as f:
            assert f.read().splitlines() == (["-i %s -c EXCLUSIVE_PROCESS" % u for u in uuids] +
                                             ["-i %s -c DEFAULT" % u for u in uuids])
        # nvidia-smi fails: the daemon is not started, exit 1 with NVIDIA's text
        with open(os.path.join(bin_dir, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\nexit 6\n")
        p = start(d, MPS_CONFIG, "--set-compute-mode", path_prefix=bin_dir)
        assert p.wait(timeout=30) == 1
        assert ("error starting MPS daemon for nvidia.com/gpu: error setting compute mode "
                "EXCLUSIVE_PROCESS: error running nvidia-smi") in logtext(p), logtext(p)


def test_mount_shm():
    """mount-shm: tmpfs "shm" at DIR/shm with NVIDIA's options, once however
    often it runs (the old mount goes first); a bad directory is named. Runs
    in a mount namespace of its own (unshare), so the host is untouched."""
    import shutil
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or not unshare or subprocess.run(
            [unshare, "-m", "--propagation", "private", "true"]).returncode != 0:
        print("SKIP test_mount_shm: needs root and unshare -m")
        return
    with TempDir() as d:
        root = os.path.join(d, "mps")
        shm = os.path.join(root, "shm")
        script = ('set -e; "$1" mps-control-daemon mount-shm --mps-dir "$2"; '
                  'echo x > "$2/shm/seg"; '
                  'KDEV_MPS_DIR="$2" "$1" mps-control-daemon mount-shm; '
                  'ls -A "$2/shm"; grep " $2/shm " /proc/self/mounts')
        r = subprocess.run([unshare, "-m", "--propagation", "private", "sh", "-c", script, "sh",
                            PLUGIN, root], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        # one mount, a fresh one (the segment written to the first is gone)
        assert r.stdout == "shm %s tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n" % shm, \
            r.stdout
        assert os.path.isdir(shm) and os.listdir(shm) == []  # the host saw no mount
        with open(os.path.join(d, "file"), "w"):
            pass
        r = subprocess.run([unshare, "-m", "--propagation", "private", PLUGIN,
                            "mps-control-daemon", "mount-shm", "--mps-dir",
                            os.path.join(d, "file")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        assert r.stderr == ("kdev-plugin mps-control-daemon mount-shm: error creating directory "
                            "%s/file/shm: Not a directory\n" % d), r.stderr


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mock_env(d):
    return dict(LD_LIBRARY_PATH=kt.MOCK_NVML_DIR, KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO,
                KDEV_MOCK_MPS_LOG=os.path.join(d, "commands.log"),
                KDEV_MOCK_MPS_CONTROL=os.path.join(d, "control"),
                KDEV_MPS_DIR=os.path.join(d, "mps"), KDEV_MPS_CONTROL_BIN=MOCK_MPS)


def mock_daemon_start(d):
    """What the control daemon does first: the directories and -d."""
    pipe = os.path.join(d, "mps", "nvidia.com", "gpu", "pipe")
    os.makedirs(pipe, exist_ok=True)
    os.makedirs(os.path.join(d, "mps", "nvidia.com", "gpu", "log"), exist_ok=True)
    subprocess.run([MOCK_MPS, "-d"], check=True,
                   env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe,
                            CUDA_MPS_LOG_DIRECTORY=pipe[:-4] + "log"))
    return os.path.join(pipe, "mock-mps-daemon")


def test_plugin_follows_daemon():
    """kdev-plugin: the MPS replicas are Unhealthy until the daemon answers
    (NVIDIA's error text logged), Healthy then; when the daemon dies or hangs
    all 32 go Unhealthy in the first ListAndWatch update after it, within 1 s,
    and Healthy again when it answers; Allocate gives NVIDIA's env and
    mounts; the changes are counted in kdev_gpu_health_events_total."""
    with TempDir() as d:
        dp = os.path.join(d, "dp")
        os.makedirs(dp)
        open(os.path.join(d, "control"), "w").close()
        kubelet = kt.FakeKubelet(dp)
        kubelet.start()
        port = free_port()
        extra = ("--metrics-address", "127.0.0.1:%d" % port)
        plugin = kt.Plugin(dp, MPS_CONFIG, extra=extra, env=mock_env(d))
        res = "nvidia.com/gpu"

        def last():
            with kubelet.lock:
                ups = kubelet.updates.get(res, [])
                return (len(ups), ups[-1] if ups else None)

        def all_are(health):
            n, u = last()
            return u is not None and len(u) == 32 and all(h == health for _, h in u)

        try:
            kt.wait_for(lambda: all_are("Unhealthy"), what="replicas Unhealthy while waiting")
            kt.wait_for(lambda: "error waiting for MPS daemon: error checking MPS daemon health: "
                                "failed to send command to MPS daemon: exit status 1"
                                in plugin.logtext(), what="NVIDIA's waiting error")
            state = mock_daemon_start(d)
            kt.wait_for(lambda: all_are("Healthy"), what="replicas Healthy")
            for how in ("dies", "hangs"):
                n0, _ = last()
                t0 = time.monotonic()
                if how == "dies":
                    os.unlink(state)
                else:
                    with open(os.path.join(d, "control"), "w") as f:
                        f.write("hang\n")
                kt.wait_for(lambda: last()[0] > n0, what="an update")
                t1 = time.monotonic()
                with kubelet.lock:
                    first = kubelet.updates[res][n0]
                assert len(first) == 32 and all(h == "Unhealthy" for _, h in first), first
                assert t1 - t0 < 1.0, (how, t1 - t0)
                print("daemon %s: Unhealthy update after %.3f s" % (how, t1 - t0), flush=True)
                if how == "dies":
                    mock_daemon_start(d)
                else:
                    open(os.path.join(d, "control"), "w").close()
                kt.wait_for(lambda: all_are("Healthy"), what="replicas Healthy again")
            r = kt.allocate(dp, "kdev-nvidia.com_gpu.sock", [kt.H100_UUIDS[3] + "::1"])
            assert r.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe", r.envs
            assert r.envs["NVIDIA_VISIBLE_DEVICES"] == kt.H100_UUIDS[3], r.envs
            assert [(m.host_path, m.container_path, m.read_only) for m in r.mounts] == [
                ("/run/nvidia/mps/nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe", False),
                ("/run/nvidia/mps/shm", "/dev/shm", False)], r.mounts
            log = plugin.logtext()
            assert log.count('msg="MPS daemon not answering; its replicas are Unhealthy" '
                             'resource=nvidia.com/gpu') == 2, log
            assert log.count('msg="MPS daemon answers again" resource=nvidia.com/gpu') == 2, log
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                          timeout=5).read().decode()
            assert 'kdev_gpu_health_events_total{event="mps_daemon_down",xid=""} 2' in text, text
            assert 'kdev_gpu_health_events_total{event="mps_daemon_up",xid=""} 3' in text, text
        finally:
            with open(os.path.join(d, "control"), "w"):
                pass
            assert plugin.stop() == 0
            kubelet.stop()


def test_plugin_daemon_up_at_start():
    """A daemon that answers when kdev-plugin starts (a restart, a reload):
    the replicas are Healthy from the first ListAndWatch answer on."""
    with TempDir() as d:
        dp = os.path.join(d, "dp")
        os.makedirs(dp)
        open(os.path.join(d, "control"), "w").close()
        mock_daemon_start(d)
        kubelet = kt.FakeKubelet(dp)
        kubelet.start()
        plugin = kt.Plugin(dp, MPS_CONFIG, env=mock_env(d))
        try:
            kt.wait_for(lambda: kubelet.updates.get("nvidia.com/gpu"), what="an update")
            time.sleep(0.6)
            with kubelet.lock:
                ups = list(kubelet.updates["nvidia.com/gpu"])
            assert len(ups[0]) == 32 and all(h == "Healthy" for _, h in ups[0]), ups[0]
            assert all(all(h == "Healthy" for _, h in u) for u in ups), ups
            assert 'msg="MPS daemon is ready" resource=nvidia.com/gpu' in plugin.logtext()
        finally:
            assert plugin.stop() == 0
            kubelet.stop()


def test_plugin_mps_after_rediscovery():
    """Driver absent at start (failOnInitError false): when the rediscovery
    finds the GPUs, the MPS replicas are announced Unhealthy (no daemon
    yet); Healthy once it answers (the GPU health monitor, started before
    the MPS watch, does not take them for faulted GPUs)."""
    with TempDir() as d:
        dp = os.path.join(d, "dp")
        os.makedirs(dp)
        open(os.path.join(d, "control"), "w").close()
        nvml_ctl = os.path.join(d, "nvml-control")
        with open(nvml_ctl, "w") as f:
            f.write("init-error UNKNOWN\n")
        kubelet = kt.FakeKubelet(dp)
        kubelet.start()
        env = dict(mock_env(d), KDEV_MOCK_NVML_CONTROL=nvml_ctl,
                   KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2")
        plugin = kt.Plugin(dp, MPS_CONFIG.replace("flags:\n", "flags:\n  failOnInitError: false\n"),
                           env=env)
        res = "nvidia.com/gpu"
        try:
            kt.wait_for(lambda: kubelet.updates.get(res) == [[]], what="the empty update")
            open(nvml_ctl, "w").close()  # the driver is back
            def all_are(health):
                with kubelet.lock:
                    u = kubelet.updates[res][-1]
                return len(u) == 32 and all(h == health for _, h in u)
            kt.wait_for(lambda: all_are("Unhealthy"), what="the GPUs, Unhealthy")
            mock_daemon_start(d)

            def healthy():
                with kubelet.lock:
                    u = kubelet.updates[res][-1]
                return len(u) == 32 and all(h == "Healthy" for _, h in u)
            kt.wait_for(healthy, what="replicas Healthy")
        finally:
            assert plugin.stop() == 0
            kubelet.stop()


if __name__ == "__main__":
    if not os.path.exists(MOCK_MPS):
        print("the mock nvidia-cuda-mps-control is not built in", MOCK_MPS)
        sys.exit(1)
    kt.run_tests([
        test_commands_and_stop,
        test_restart_with_backoff,
        test_not_mps_starts_nothing,
        test_start_failure_exits_1,
        test_reload,
        test_set_compute_mode,
        test_mount_shm,
        test_plugin_follows_daemon,
        test_plugin_daemon_up_at_start,
        test_plugin_mps_after_rediscovery,
    ])
