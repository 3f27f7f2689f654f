"""Faults: the mock libnvidia-ml.so.1 failing while kdev-plugin serves, and
at start (src/nvidia/health.h documents the expected behaviour).

- GPU lost behind an XID 79: its NVML calls fail with GPU_IS_LOST; the GPU
  goes Unhealthy in one update, the other seven stay Healthy in every update,
  probes keep it Unhealthy while it is lost; once its calls succeed again it
  recovers after the quiet period.
- nvmlEventSetWait error (the mock's `lost`: every set registered on the GPU
  returns GPU_IS_LOST from its next wait): every device Unhealthy in one
  update, then the other GPUs recover after the quiet period while the lost
  one stays Unhealthy (its registration fails, the probes fail); when it is
  back, it recovers too.
- NVML init failing at start: failOnInitError true -> exit 1 with
  `nvml init failed: <nvmlErrorString>`; false -> the generic resources are
  served and nvidia.com/gpu is served with 0 devices.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
NULL = "example.com/null"
MOCK_DIR = kt.MOCK_NVML_DIR
TOPO = kt.H100_TOPO
UUIDS = kt.H100_UUIDS
ALL_HEALTHY = [(u, "Healthy") for u in UUIDS]
ALL_UNHEALTHY = [(u, "Unhealthy") for u in UUIDS]

CONFIG = """version: v1
flags:
  failOnInitError: %s
health:
  probeInterval: 1
  quietPeriod: 2
generic:
  devices:
    - name: example.com/null
      groups:
        - paths:
            - path: /dev/null
          count: 2
"""


def only_unhealthy(i):
    want = list(ALL_HEALTHY)
    want[i] = (UUIDS[i], "Unhealthy")
    return want


def start(d, fail_on_init="true", **env):
    ctl = os.path.join(os.path.dirname(d), "control")
    open(ctl, "a").close()
    full = {"LD_LIBRARY_PATH": MOCK_DIR, "KDEV_MOCK_NVML_TOPOLOGY": TOPO,
            "KDEV_MOCK_NVML_CONTROL": ctl}
    full.update(env)
    return Plugin(d, CONFIG % fail_on_init,
                  extra=("--cdi-dir", os.path.join(os.path.dirname(d), "cdi")), env=full)


def control(d, *lines):
    with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
        f.write("".join(line + "\n" for line in lines))


def updates(k):
    with k.lock:
        return list(k.updates.get(RES, []))


def test_gpu_lost_after_xid79_only_that_gpu_unhealthy():
    with TempDir() as d:
        control(d, "")
        with kt.kubelet_and_plugin(d, start) as (k, p):
            wait_for(lambda: updates(k), what="ListAndWatch")
            assert updates(k) == [ALL_HEALTHY], updates(k)
            # The GPU falls off the bus: XID 79, then every probe call fails.
            control(d, "error %s nvmlDeviceGetMemoryInfo GPU_IS_LOST" % UUIDS[4],
                    "error %s nvmlDeviceGetRemappedRows GPU_IS_LOST" % UUIDS[4],
                    "xid %s 79" % UUIDS[4])
            wait_for(lambda: len(updates(k)) >= 2, what="unhealthy update")
            time.sleep(4.5)  # two quiet periods and four probes: still lost
            assert updates(k) == [ALL_HEALTHY, only_unhealthy(4)], updates(k)
            log = p.logtext()
            assert 'msg="GPU unhealthy" uuid=%s xid=79' % UUIDS[4] in log, log
            # Back (e.g. after a reset): recovery after the quiet period, one update.
            control(d, "error %s nvmlDeviceGetMemoryInfo SUCCESS" % UUIDS[4],
                    "error %s nvmlDeviceGetRemappedRows SUCCESS" % UUIDS[4])
            wait_for(lambda: len(updates(k)) >= 3, timeout=30, what="recovery update")
            time.sleep(1.5)
            assert updates(k) == [ALL_HEALTHY, only_unhealthy(4), ALL_HEALTHY], updates(k)


def test_event_wait_error_all_unhealthy_then_others_recover():
    with TempDir() as d:
        control(d, "")
        with kt.kubelet_and_plugin(d, start) as (k, p):
            wait_for(lambda: updates(k), what="ListAndWatch")
            control(d, "lost %s" % UUIDS[6])
            wait_for(lambda: len(updates(k)) >= 2, what="update after the wait error")
            assert updates(k)[1] == ALL_UNHEALTHY, updates(k)[1]
            wait_for(lambda: updates(k)[-1] == only_unhealthy(6), timeout=30,
                     what="the other GPUs recovering")
            n = len(updates(k))
            time.sleep(3)  # more than a quiet period: the lost GPU stays Unhealthy
            u = updates(k)
            assert len(u) == n and u[-1] == only_unhealthy(6), u[n - 1:]
            # Recovery may come GPU by GPU (one update per probe batch), but the
            # lost GPU is Unhealthy in every update after the error, and no
            # other GPU goes Unhealthy again.
            for i, upd in enumerate(u[2:], 2):
                assert dict(upd)[UUIDS[6]] == "Unhealthy", (i, upd)
            for j, uuid in enumerate(UUIDS):
                states = [dict(upd)[uuid] for upd in u[1:]]
                if j != 6:
                    first_ok = states.index("Healthy")
                    assert all(s == "Healthy" for s in states[first_ok:]), (uuid, states)
            assert 2 <= n <= 2 + 7, n
            print("wait error: %d updates until the 7 others recovered" % (n - 1))
            log = p.logtext()
            assert "GPU_IS_LOST" in log or "GPU is lost" in log, log
            control(d, "lost %s 0" % UUIDS[6])
            wait_for(lambda: updates(k)[-1] == ALL_HEALTHY, timeout=30,
                     what="the lost GPU recovering once back")
            assert 'msg="GPU healthy again" uuid=%s' % UUIDS[6] in p.logtext()


def test_init_failure_with_fail_on_init_error_exits_1():
    with TempDir() as d:
        control(d, "init-error UNKNOWN")
        p = start(d)
        rc = p.proc.wait(20 * kt.TIMEOUT_SCALE)
        p.log.close()
        assert rc == 1, rc
        assert 'error="nvml init failed: Unknown Error"' in p.logtext(), p.logtext()
        assert not os.path.exists(os.path.join(d, "kdev-nvidia.com_gpu.sock"))


def test_init_failure_without_fail_on_init_error_serves_generic_and_no_gpus():
    with TempDir() as d:
        control(d, "init-error UNKNOWN")
        with kt.kubelet_and_plugin(d, start, fail_on_init="false",
                                   KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2") as (k, p):
            wait_for(lambda: k.updates.get(NULL) and k.updates.get(RES) is not None,
                     what="both ListAndWatch streams")
            assert k.updates[NULL][0] == [("null::0", "Healthy"), ("null::1", "Healthy")], \
                k.updates[NULL]
            assert updates(k) == [[]], updates(k)
            time.sleep(1)  # several failed rediscoveries: still 0 GPUs, no new update
            assert updates(k) == [[]], updates(k)
            assert k.count(RES) == 1 and k.count(NULL) == 1
            assert "no NVIDIA GPUs for now, will retry discovery" in p.logtext()
            assert p.proc.poll() is None


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_gpu_lost_after_xid79_only_that_gpu_unhealthy,
        test_event_wait_error_all_unhealthy_then_others_recover,
        test_init_failure_with_fail_on_init_error_exits_1,
        test_init_failure_without_fail_on_init_error_serves_generic_and_no_gpus,
    ])
