"""kdev-plugin with NVIDIA GPUs end to end, on the mock libnvidia-ml.so.1
loaded through the real dlopen path: advertised devices, Allocate payload,
one ListAndWatch update per health transition, recovery, health-check
switches, failOnInitError both ways with rediscovery, and the CDI spec's
life (written, valid against the schema, removed on exit)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
SOCK = "kdev-nvidia.com_gpu.sock"
MOCK_DIR = kt.MOCK_NVML_DIR
TOPO = kt.H100_TOPO
UUIDS = kt.H100_UUIDS
ALL_HEALTHY = [(u, "Healthy") for u in UUIDS]

CONFIG = """version: v1
flags:
  failOnInitError: %s
  plugin:
    deviceListStrategy: [envvar, cdi-cri]
health:
  probeInterval: 1
  quietPeriod: 2
"""


def nvidia_env(d, topology=TOPO, **extra):
    env = {
        "LD_LIBRARY_PATH": MOCK_DIR,
        "KDEV_MOCK_NVML_TOPOLOGY": topology,
        "KDEV_MOCK_NVML_CONTROL": os.path.join(os.path.dirname(d), "control"),
    }
    env.update(extra)
    open(env["KDEV_MOCK_NVML_CONTROL"], "a").close()
    return env


def control(d, line):
    with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
        f.write(line + "\n")


def cdi_dir(d):
    return os.path.join(os.path.dirname(d), "cdi")


def start(d, fail_on_init="true", env=None):
    return Plugin(d, CONFIG % fail_on_init, extra=("--cdi-dir", cdi_dir(d)),
                  env=env if env is not None else nvidia_env(d))


def allocate(d, ids):
    return kt.allocate(d, SOCK, ids)


def test_gpus_advertised_and_allocated():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = start(d)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            assert k.updates[RES][0] == ALL_HEALTHY, k.updates[RES][0]
            r = allocate(d, [UUIDS[2], UUIDS[0]])
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[2] + "," + UUIDS[0]}, r.envs
            assert [c.name for c in r.cdi_devices] == [
                "k8s.device-plugin.nvidia.com/gpu=" + UUIDS[2],
                "k8s.device-plugin.nvidia.com/gpu=" + UUIDS[0]]
            assert list(r.mounts) == [] and list(r.devices) == []
        finally:
            assert p.stop() == 0
            k.stop()


def test_one_update_per_health_transition_and_recovery():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = start(d)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            control(d, "xid %s 79" % UUIDS[3])
            wait_for(lambda: len(k.updates[RES]) >= 2, what="unhealthy update")
            want = list(ALL_HEALTHY)
            want[3] = (UUIDS[3], "Unhealthy")
            assert k.updates[RES][1] == want, k.updates[RES][1]
            # an ignored XID (13) changes nothing; recovery after the quiet period
            control(d, "xid %s 13" % UUIDS[5])
            wait_for(lambda: len(k.updates[RES]) >= 3, timeout=30, what="recovery update")
            assert k.updates[RES][2] == ALL_HEALTHY, k.updates[RES][2]
            time.sleep(1.5)
            assert len(k.updates[RES]) == 3, k.updates[RES]
            log = p.logtext()
            assert 'msg="GPU unhealthy" uuid=%s xid=79' % UUIDS[3] in log, log
            assert 'msg="GPU healthy again" uuid=%s' % UUIDS[3] in log, log
        finally:
            assert p.stop() == 0
            k.stop()


def test_lost_gpu_never_recovers():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = start(d)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            control(d, "lost %s" % UUIDS[1])
            control(d, "xid %s 79" % UUIDS[1])
            wait_for(lambda: any(dict(u).get(UUIDS[1]) == "Unhealthy" for u in k.updates[RES]),
                     what="unhealthy")
            time.sleep(4)  # two quiet periods
            assert dict(k.updates[RES][-1])[UUIDS[1]] == "Unhealthy", k.updates[RES][-1]
        finally:
            assert p.stop() == 0
            k.stop()


def test_gpu_faulted_at_discovery_read_again_once_it_passes():
    # Discovery stops at the fault (minor, PCI bus ID, NUMA unknown): the GPU
    # must not come back in place with a guessed /dev/nvidia<minor>. It is
    # probed like a GPU that faulted later; once it passes (quiet period,
    # probe) it is read again, whole, and only then advertised Healthy, with
    # its CDI device (README "GPUs faulted at start").
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        control(d, "error %s nvmlDeviceGetPciInfo GPU_IS_LOST" % UUIDS[3])
        p = start(d)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            want = list(ALL_HEALTHY)
            want[3] = (UUIDS[3], "Unhealthy")
            assert k.updates[RES][0] == want, k.updates[RES][0]
            with open(os.path.join(cdi_dir(d), "k8s.device-plugin.nvidia.com-gpu.json")) as f:
                names = [dev["name"] for dev in json.load(f)["devices"]]
            assert UUIDS[3] not in names and len(names) == 8, names
            time.sleep(3)  # past the quiet period, still faulted: still Unhealthy
            assert k.updates[RES][-1] == want, k.updates[RES][-1]
            assert ('msg="GPU unhealthy" uuid=%s xid=none reason="found at start: GPU is lost"'
                    % UUIDS[3]) in p.logtext(), p.logtext()
            t0 = time.monotonic()
            control(d, "error %s nvmlDeviceGetPciInfo SUCCESS" % UUIDS[3])
            wait_for(lambda: k.updates[RES][-1] == ALL_HEALTHY, timeout=20,
                     what="the GPU read again and Healthy")
            took = time.monotonic() - t0
            assert took <= (2 + 1 + 1) * kt.TIMEOUT_SCALE, took  # quiet period + probe + 1 s
            # never Healthy with what discovery could not read
            for upd in k.updates[RES][:-1]:
                assert dict(upd)[UUIDS[3]] == "Unhealthy", k.updates[RES]
            log = p.logtext()
            assert ('msg="GPU answers again; reading it again to advertise it" uuid=%s'
                    % UUIDS[3]) in log, log
            assert 'why="GPU %s answers again"' % UUIDS[3] in log, log
            with open(os.path.join(cdi_dir(d), "k8s.device-plugin.nvidia.com-gpu.json")) as f:
                devs = {dev["name"]: dev for dev in json.load(f)["devices"]}
            assert UUIDS[3] in devs and len(devs) == 9, sorted(devs)
            nodes = [n["path"] for n in devs[UUIDS[3]]["containerEdits"]["deviceNodes"]]
            assert "/dev/nvidia3" in nodes, nodes
        finally:
            assert p.stop() == 0
            k.stop()


def test_health_checks_disabled():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = start(d, env=nvidia_env(d, DP_DISABLE_HEALTHCHECKS="all"))
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            control(d, "xid %s 79" % UUIDS[0])
            time.sleep(1.5)
            assert k.updates[RES] == [ALL_HEALTHY], k.updates[RES]
            assert "health checks disabled" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_fail_on_init_error_true_exits():
    with TempDir() as d:
        env = nvidia_env(d, KDEV_MOCK_NVML_TOPOLOGY="")  # the mock: Driver Not Loaded
        p = start(d, env=env)
        rc = p.proc.wait(20)
        p.log.close()
        assert rc == 1, rc
        assert 'error="nvml init failed: Driver Not Loaded"' in p.logtext(), p.logtext()


def test_fail_on_init_error_false_rediscovers():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        control(d, "init-error DRIVER_NOT_LOADED")
        p = start(d, fail_on_init="false",
                  env=nvidia_env(d, KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2"))
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            assert k.updates[RES][0] == [], k.updates[RES][0]
            assert "no NVIDIA GPUs for now, will retry discovery" in p.logtext()
            control(d, "init-error SUCCESS")
            wait_for(lambda: len(k.updates[RES]) >= 2, what="GPUs after the driver appears")
            assert k.updates[RES][-1] == ALL_HEALTHY, k.updates[RES][-1]
            assert os.path.exists(os.path.join(cdi_dir(d), "k8s.device-plugin.nvidia.com-gpu.json"))
        finally:
            assert p.stop() == 0
            k.stop()


def test_cdi_spec_written_valid_and_removed():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = start(d)
        spec_path = os.path.join(cdi_dir(d), "k8s.device-plugin.nvidia.com-gpu.json")
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            assert oct(os.stat(spec_path).st_mode & 0o777) == "0o644"
            with open(spec_path) as f:
                spec = json.load(f)
            assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu", spec["kind"]
            names = [dev["name"] for dev in spec["devices"]]
            assert names[:8] == UUIDS and names[-1] == "all", names
            try:
                import jsonschema
            except ImportError:
                jsonschema = None
            if jsonschema is not None:
                with open(os.path.join(kt.SOURCE_DIR, "tests", "cdi", "schema",
                                       "cdi-spec.schema.json")) as f:
                    schema = json.load(f)
                jsonschema.validate(spec, schema)
        finally:
            assert p.stop() == 0
            k.stop()
        assert not os.path.exists(spec_path)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_gpus_advertised_and_allocated,
        test_one_update_per_health_transition_and_recovery,
        test_lost_gpu_never_recovers,
        test_gpu_faulted_at_discovery_read_again_once_it_passes,
        test_health_checks_disabled,
        test_fail_on_init_error_true_exits,
        test_fail_on_init_error_false_rediscovers,
        test_cdi_spec_written_valid_and_removed,
    ])
