"""GPUs are live: the node's GPUs change while kdev-plugin and kdev-dra-plugin
run, and both follow without a restart (src/nvidia/health.h, inventory watch;
README "GPUs that come and go"). The mock NVML (mock/nvml/README.md) adds and
removes GPUs (`gpu-add`, `gpu-remove`), creates and destroys MIG devices
(`mig-create`, `mig-destroy`) at run time, and starts GPUs faulted
(`reset_required: 1`, `pending_remap: 1`, `present: 0` in the topology).

kdev-plugin (KDEV_NVIDIA_REDISCOVER_INTERVAL=0.5, KDEV_NVIDIA_WITHDRAW_GRACE):
- a hot-added GPU is advertised on nvidia.com/gpu within the interval + 1 s;
  a GPU that is gone is advertised Unhealthy (pods may hold it) and dropped
  once the grace period is over, with the exact log lines;
- migStrategy mixed: a MIG device destroyed is Unhealthy in its
  nvidia.com/mig-<profile> list, one created on another GPU is advertised, the
  destroyed one created again is Healthy again, each within the interval + 1 s;
- a GPU that needs a reset at start and one with a row remap pending at start
  are Unhealthy with "found at start: ..." and Healthy again within the quiet
  period + the probe interval (+ the interval, + 1 s) once repaired.
kdev-dra-plugin: the ResourceSlice gains a hot-added GPU and loses a removed
one, publishes a GPU faulted at start once it recovers, and follows a MIG
layout change (one MIG device destroyed, one created on another GPU), each
within the interval + 1 s (the recovery: quiet period + probe interval + 1 s).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
MOCK_DIR = kt.MOCK_NVML_DIR
UUIDS = kt.H100_UUIDS
INTERVAL = 0.5
SCALE = kt.TIMEOUT_SCALE
MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")
A100 = ["GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69", "GPU-4603f764-b00c-271e-0980-eda368e40931",
        "GPU-0c8e873f-4cf7-689a-6647-0210cab49901", "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"]
MIG_GONE = "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc"   # a 1g.5gb of GPU 0
MIG_KEPT = ["MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2",  # the other 1g.5gb of GPU 0
            "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8"]  # the 1g.5gb of GPU 1
MIG_NEW = "MIG-0e3f5a1c-2b7d-4c8e-9f60-a1b2c3d4e5f6"    # created on GPU 2 at run time

CONFIG = """version: v1
flags:
  migStrategy: %s
health:
  probeInterval: 1
  quietPeriod: 2
"""


def topology(d, text, name="topology.yaml"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def h100_with(**keys):
    """The H100 topology with extra keys per GPU index ({2: "present: 0"})."""
    with open(kt.H100_TOPO) as f:
        text = f.read()
    for i, extra in keys.items():
        text = text.replace("{uuid: %s," % UUIDS[int(i[1:])],
                            "{uuid: %s, %s," % (UUIDS[int(i[1:])], extra))
    return text


def control(root, *lines):
    with open(os.path.join(root, "control"), "a") as f:
        f.write("".join(line + "\n" for line in lines))


def start(d, topo, strategy="none", grace="2", proc=None):
    root = os.path.dirname(d)
    ctl = os.path.join(root, "control")
    open(ctl, "a").close()
    env = {"LD_LIBRARY_PATH": MOCK_DIR, "KDEV_MOCK_NVML_TOPOLOGY": topo,
           "KDEV_MOCK_NVML_CONTROL": ctl, "KDEV_NVIDIA_REDISCOVER_INTERVAL": str(INTERVAL),
           "KDEV_NVIDIA_WITHDRAW_GRACE": grace}
    extra = ["--cdi-dir", os.path.join(root, "cdi")]
    if proc:
        env["KDEV_MOCK_NVML_PROC"] = proc
        extra += ["--proc-root", proc]
    return Plugin(d, CONFIG % strategy, extra=tuple(extra), env=env)


def last(k, res=RES):
    with k.lock:
        u = k.updates.get(res)
        return list(u[-1]) if u else None


def wait_list(k, want, t0, bound, res=RES, what="list"):
    """Waits for |want| as the last list of |res|; returns the seconds from
    |t0|, asserted <= |bound| (scaled)."""
    wait_for(lambda: last(k, res) == want, timeout=30 * SCALE, what=what)
    took = time.monotonic() - t0
    assert took <= bound * SCALE, (what, took, bound)
    return took


def test_gpu_hot_added_then_removed():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        topo = topology(os.path.dirname(d), h100_with(g7="present: 0"))
        p = start(d, topo)
        try:
            wait_for(lambda: last(k), what="ListAndWatch")
            assert last(k) == [(u, "Healthy") for u in UUIDS[:7]], last(k)
            t0 = time.monotonic()
            control(os.path.dirname(d), "gpu-add %s" % UUIDS[7])
            took = wait_list(k, [(u, "Healthy") for u in UUIDS], t0, INTERVAL + 1,
                             what="hot-added GPU advertised")
            print("hot-added GPU advertised after %.3f s" % took)
            log = p.logtext()
            assert 'msg="GPU inventory changed: rebuilding the NVIDIA resources" why="GPU %s ' \
                   'appeared"' % UUIDS[7] in log, log
            assert log.count("resource changed: serving and registering it again") == 0, log
            assert ('msg="resource devices changed: sent on ListAndWatch" '
                    'resource=nvidia.com/gpu devices=8') in log, log
            assert k.count(RES) == 1  # a ListAndWatch update, no new registration

            t0 = time.monotonic()
            control(os.path.dirname(d), "gpu-remove %s" % UUIDS[3])
            rest = [u for u in UUIDS if u != UUIDS[3]]
            took = wait_list(k, [(u, "Healthy") for u in rest] + [(UUIDS[3], "Unhealthy")],
                             t0, INTERVAL + 1, what="removed GPU Unhealthy")
            print("removed GPU Unhealthy after %.3f s" % took)
            assert ('msg="device left the node: advertised Unhealthy while pods may still hold '
                    'it, dropped after the grace period" resource=nvidia.com/gpu id=%s grace_s=2'
                    % UUIDS[3]) in p.logtext(), p.logtext()
            took = wait_list(k, [(u, "Healthy") for u in rest], t0, INTERVAL + 2 + 1,
                             what="removed GPU dropped after the grace period")
            print("removed GPU dropped after %.3f s (grace 2 s)" % took)
            assert took >= 2, took
            assert ('msg="withdrawn device dropped: its grace period is over" '
                    'resource=nvidia.com/gpu id=%s grace_s=2' % UUIDS[3]) in p.logtext()
            assert k.count(RES) == 1
        finally:
            assert p.stop() == 0
            k.stop()


def mig_topology(d):
    with open(MIG_TOPO) as f:
        text = f.read()
    text = text.replace("    mig: {mode: 1, devices: []}",
                        "    mig:\n      mode: 1\n      devices:\n"
                        "        - {uuid: %s, profile: 0x0, gi: 7, start: 0, present: 0}"
                        % MIG_NEW)
    return topology(d, text, "mig.yaml")


def test_mig_layout_changed_mixed():
    res = "nvidia.com/mig-1g.5gb"
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")
        p = start(d, mig_topology(root), strategy="mixed", grace="60", proc=proc)
        try:
            wait_for(lambda: last(k, res), what="ListAndWatch of %s" % res)
            assert last(k, res) == [(MIG_GONE, "Healthy")] + [(m, "Healthy") for m in MIG_KEPT], \
                last(k, res)
            other = last(k, "nvidia.com/mig-2g.10gb")
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_GONE)
            wait_list(k, [(m, "Healthy") for m in MIG_KEPT] + [(MIG_GONE, "Unhealthy")], t0,
                      INTERVAL + 1, res, what="destroyed MIG device Unhealthy")
            t0 = time.monotonic()
            control(root, "mig-create %s" % MIG_NEW)
            wait_list(k, [(m, "Healthy") for m in MIG_KEPT] + [(MIG_NEW, "Healthy"),
                                                               (MIG_GONE, "Unhealthy")],
                      t0, INTERVAL + 1, res, what="created MIG device advertised")
            t0 = time.monotonic()
            control(root, "mig-create %s" % MIG_GONE)
            wait_list(k, [(MIG_GONE, "Healthy")] + [(m, "Healthy") for m in MIG_KEPT] +
                      [(MIG_NEW, "Healthy")], t0, INTERVAL + 1, res,
                      what="MIG device created again")
            assert last(k, "nvidia.com/mig-2g.10gb") == other
            log = p.logtext()
            assert 'why="MIG devices of GPU %s changed"' % A100[0] in log, log
            assert 'why="MIG devices of GPU %s changed"' % A100[2] in log, log
            assert k.count(res) == 1
        finally:
            assert p.stop() == 0
            k.stop()


def test_faults_present_at_start_recover():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        topo = topology(os.path.dirname(d), h100_with(g2="reset_required: 1",
                                                      g5="pending_remap: 1"))
        p = start(d, topo)
        want = [(u, "Unhealthy" if i in (2, 5) else "Healthy") for i, u in enumerate(UUIDS)]
        try:
            wait_for(lambda: last(k) == want, timeout=10 * SCALE,
                     what="both faulted GPUs Unhealthy")
            log = p.logtext()
            assert ('msg="GPU unhealthy" uuid=%s xid=none reason="found at start: GPU '
                    'requires restart"' % UUIDS[2]) in log, log
            assert ('msg="GPU unhealthy" uuid=%s xid=none reason="found at start: row '
                    'remapping pending (reset required)"' % UUIDS[5]) in log, log
            time.sleep(3)  # more than the quiet period: still faulted, still Unhealthy
            assert last(k) == want, last(k)
            t0 = time.monotonic()
            control(os.path.dirname(d), "reset-required %s 0" % UUIDS[2],
                    "pending-remap %s 0" % UUIDS[5])
            took = wait_list(k, [(u, "Healthy") for u in UUIDS], t0, 2 + 1 + INTERVAL + 1,
                             what="both GPUs Healthy again")
            print("GPUs faulted at start Healthy %.3f s after the repair" % took)
            log = p.logtext()
            assert 'msg="GPU answers again; reading it again to advertise it" uuid=%s' \
                % UUIDS[2] in log, log
            assert 'msg="GPU healthy again" uuid=%s' % UUIDS[5] in log, log
        finally:
            assert p.stop() == 0
            k.stop()


def slice_uuids(dp):
    sl = dp.pool_slices(dp_env.api)
    if len(sl) != 1:
        return None
    return sorted(x["attributes"]["uuid"]["string"] for x in sl[0]["spec"]["devices"])


dp_env = None


def test_dra_slice_follows_gpus():
    global dp_env
    import dra_plugin as dp
    with TempDir() as d:
        root = os.path.dirname(d)
        topo = topology(root, h100_with(g7="present: 0", g1="reset_required: 1"))
        dp_env = e = dp.Env(root, topology=topo,
                            env_extra={"KDEV_NVIDIA_REDISCOVER_INTERVAL": str(INTERVAL)},
                            extra=("--health-probe-interval", "1", "--health-quiet-period", "2"))
        try:
            first = sorted(u for i, u in enumerate(UUIDS) if i not in (1, 7))
            wait_for(lambda: slice_uuids(dp) == first, timeout=20 * SCALE,
                     what="slice without the absent and the faulted GPU")
            t0 = time.monotonic()
            control(root, "gpu-add %s" % UUIDS[7])
            wait_for(lambda: slice_uuids(dp) == sorted(first + [UUIDS[7]]),
                     timeout=20 * SCALE, what="hot-added GPU published")
            took = time.monotonic() - t0
            print("DRA: hot-added GPU published after %.3f s" % took)
            assert took <= (INTERVAL + 1) * SCALE, took
            t0 = time.monotonic()
            control(root, "gpu-remove %s" % UUIDS[4])
            now = sorted(u for u in first + [UUIDS[7]] if u != UUIDS[4])
            wait_for(lambda: slice_uuids(dp) == now, timeout=20 * SCALE,
                     what="removed GPU withdrawn")
            assert time.monotonic() - t0 <= (INTERVAL + 1) * SCALE
            t0 = time.monotonic()
            control(root, "reset-required %s 0" % UUIDS[1])
            wait_for(lambda: slice_uuids(dp) == sorted(now + [UUIDS[1]]), timeout=20 * SCALE,
                     what="GPU faulted at start published once repaired")
            took = time.monotonic() - t0
            print("DRA: GPU faulted at start published %.3f s after the repair" % took)
            assert took <= (2 + 1 + INTERVAL + 1) * SCALE, took
            log = e.logtext()
            assert 'why="GPU %s appeared"' % UUIDS[7] in log, log
            assert 'why="GPU %s is gone"' % UUIDS[4] in log, log
            assert 'why="GPU %s answers again"' % UUIDS[1] in log, log
            e.stop()
        finally:
            e.close()


def test_dra_slice_follows_mig_layout():
    global dp_env
    import dra_plugin as dp
    with TempDir() as d:
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")
        drv = os.path.join(root, "driver-root")
        os.makedirs(os.path.join(drv, "usr", "lib64"))
        os.symlink(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1"),
                   os.path.join(drv, "usr", "lib64", "libnvidia-ml.so.1"))
        os.makedirs(os.path.join(drv, "dev"))
        dp_env = e = dp.Env(root, topology=mig_topology(root),
                            env_extra={"KDEV_MOCK_NVML_PROC": proc,
                                       "KDEV_NVIDIA_REDISCOVER_INTERVAL": str(INTERVAL)},
                            extra=("--proc-root", proc, "--driver-root", drv))

        def names():
            sl = dp.pool_slices(e.api)
            return sorted(x["name"] for x in sl[0]["spec"]["devices"]) if len(sl) == 1 else None
        base = ["gpu-0-mig-3g20gb-9-4", "gpu-0-mig-2g10gb-14-0", "gpu-0-mig-1g5gb-19-3",
                "gpu-1-mig-1g5gb-me-20-0", "gpu-1-mig-1g10gb-15-2", "gpu-1-mig-1g10gb-15-4",
                "gpu-1-mig-1g5gb-19-6", "gpu-3"]
        try:
            wait_for(lambda: names() == sorted(base + ["gpu-0-mig-1g5gb-19-2"]),
                     timeout=20 * SCALE, what="MIG devices published")
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_GONE, "mig-create %s" % MIG_NEW)
            wait_for(lambda: names() == sorted(base + ["gpu-2-mig-1g5gb-19-0"]),
                     timeout=20 * SCALE, what="MIG layout change published")
            took = time.monotonic() - t0
            print("DRA: MIG layout change published after %.3f s" % took)
            assert took <= (INTERVAL + 1) * SCALE, took
            e.stop()
        finally:
            e.close()


ME = "nvidia.com/mig-1g.5gb.me"
MIG_ME = "MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046"   # the only 1g.5gb+me (GPU 1)


def test_last_device_of_a_resource_kept_for_the_grace():
    """The only MIG device of a profile destroyed: the resource is served on,
    the device Unhealthy, for the withdraw grace, then stopped."""
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.dirname(d)
        p = start(d, MIG_TOPO, strategy="mixed", grace="2", proc=os.path.join(root, "proc"))
        try:
            wait_for(lambda: last(k, ME), what="ListAndWatch of %s" % ME)
            assert last(k, ME) == [(MIG_ME, "Healthy")], last(k, ME)
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_ME)
            took = wait_list(k, [(MIG_ME, "Unhealthy")], t0, INTERVAL + 1, ME,
                             what="the last device of %s Unhealthy" % ME)
            print("last MIG device of its profile Unhealthy after %.3f s" % took)
            stopped = 'msg="resource removed: stopped serving it" resource=%s' % ME
            assert stopped not in p.logtext(), p.logtext()
            wait_for(lambda: stopped in p.logtext(), timeout=(INTERVAL + 2 + 2) * SCALE,
                     what="%s stopped after the grace period" % ME)
            took = time.monotonic() - t0
            assert 2 <= took <= (INTERVAL + 2 + 1) * SCALE, took
            print("its resource stopped after %.3f s (grace 2 s)" % took)
            assert ('msg="withdrawn device dropped: its grace period is over" resource=%s '
                    'id=%s grace_s=2' % (ME, MIG_ME)) in p.logtext()
            assert last(k, ME) == [(MIG_ME, "Unhealthy")], last(k, ME)
        finally:
            assert p.stop() == 0
            k.stop()


def test_lost_mig_gpu_kept_over_rebuilds():
    """A lost MIG-enabled GPU stays advertised, Unhealthy, with its MIG
    devices when a MIG change elsewhere rebuilds the resources; the
    resources only it has are served on."""
    gpu0 = {"nvidia.com/mig-3g.20gb": "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f",
            "nvidia.com/mig-2g.10gb": "MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce"}
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.dirname(d)
        p = start(d, MIG_TOPO, strategy="mixed", grace="2", proc=os.path.join(root, "proc"))
        try:
            wait_for(lambda: all(last(k, r) for r in list(gpu0) + ["nvidia.com/mig-1g.5gb"]),
                     what="ListAndWatch")
            assert last(k, "nvidia.com/mig-3g.20gb") == \
                [("MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f", "Healthy")]
            assert last(k, "nvidia.com/mig-2g.10gb") == \
                [("MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce", "Healthy")]
            one = last(k, "nvidia.com/mig-1g.5gb")
            assert one == [(MIG_GONE, "Healthy"), (MIG_KEPT[0], "Healthy"),
                           (MIG_KEPT[1], "Healthy")], one
            control(root, "lost %s 1" % A100[0])
            for r, m in gpu0.items():
                wait_list(k, [(m, "Unhealthy")], time.monotonic(), 2 + 1 + INTERVAL + 1, r,
                          what="%s of the lost GPU Unhealthy" % m)
            want1 = [(MIG_GONE, "Unhealthy"), (MIG_KEPT[0], "Unhealthy"), (MIG_KEPT[1], "Healthy")]
            wait_for(lambda: last(k, "nvidia.com/mig-1g.5gb") == want1, timeout=10 * SCALE,
                     what="the other GPUs Healthy again after the quiet period")
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_KEPT[1])
            want1 = [(MIG_GONE, "Unhealthy"), (MIG_KEPT[0], "Unhealthy"),
                     (MIG_KEPT[1], "Unhealthy")]
            wait_list(k, want1, t0, INTERVAL + 1, "nvidia.com/mig-1g.5gb",
                      what="destroyed MIG device Unhealthy")
            assert 'why="MIG devices of GPU %s changed"' % A100[1] in p.logtext()
            time.sleep(2 + INTERVAL + 1)  # past the withdraw grace
            want1 = [(MIG_GONE, "Unhealthy"), (MIG_KEPT[0], "Unhealthy")]
            wait_list(k, want1, t0, 2 + INTERVAL + 2, "nvidia.com/mig-1g.5gb",
                      what="only the destroyed device dropped")
            for r, m in gpu0.items():
                assert last(k, r) == [(m, "Unhealthy")], (r, last(k, r))
            assert "resource removed: stopped serving it" not in p.logtext(), p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_lost_gpu_kept_when_another_is_added():
    """A lost whole GPU (its UUID unreadable) stays advertised Unhealthy when
    a GPU hot-added elsewhere rebuilds nvidia.com/gpu."""
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.dirname(d)
        p = start(d, topology(root, h100_with(g7="present: 0")))
        try:
            wait_for(lambda: last(k) == [(u, "Healthy") for u in UUIDS[:7]], what="ListAndWatch")
            control(root, "lost %s 1" % UUIDS[2])
            want = [(u, "Unhealthy" if i == 2 else "Healthy") for i, u in enumerate(UUIDS[:7])]
            wait_for(lambda: last(k) == want, timeout=10 * SCALE,
                     what="the lost GPU Unhealthy, the others Healthy again")
            t0 = time.monotonic()
            control(root, "gpu-add %s" % UUIDS[7])
            # the lost GPU is carried from the previous build: after the others
            want = [(u, "Healthy") for u in UUIDS if u != UUIDS[2]] + [(UUIDS[2], "Unhealthy")]
            wait_list(k, want, t0, INTERVAL + 1, what="hot-added GPU advertised")
            time.sleep(2 + INTERVAL + 1)  # past the withdraw grace
            assert last(k) == want, last(k)
            assert "device left the node" not in p.logtext(), p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_mig_device_created_on_a_faulted_gpu_unhealthy():
    """A MIG device created on a GPU whose row remap is pending starts
    Unhealthy, as the GPU's other MIG devices are."""
    res = "nvidia.com/mig-1g.5gb"
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.dirname(d)
        p = start(d, MIG_TOPO, strategy="mixed", grace="1", proc=os.path.join(root, "proc"))
        try:
            wait_for(lambda: last(k, res), what="ListAndWatch of %s" % res)
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_GONE)
            wait_list(k, [(m, "Healthy") for m in MIG_KEPT], t0, INTERVAL + 1 + 1 + 1, res,
                      what="destroyed MIG device dropped")
            control(root, "pending-remap %s 1" % A100[0], "xid %s 63" % A100[0])
            wait_list(k, [(MIG_KEPT[0], "Unhealthy"), (MIG_KEPT[1], "Healthy")],
                      time.monotonic(), 2, res, what="the faulted GPU's MIG devices Unhealthy")
            t0 = time.monotonic()
            control(root, "mig-create %s" % MIG_GONE)
            want = [(MIG_GONE, "Unhealthy"), (MIG_KEPT[0], "Unhealthy"), (MIG_KEPT[1], "Healthy")]
            wait_for(lambda: last(k, res) and len(last(k, res)) == 3, timeout=10 * SCALE,
                     what="created MIG device advertised")
            assert last(k, res) == want, last(k, res)
            assert time.monotonic() - t0 <= (INTERVAL + 1) * SCALE
            time.sleep(2 + 1 + 1)  # past quiet period + probe: the remap is still pending
            assert last(k, res) == want, last(k, res)
            # destroyed and created again while still withdrawn: Unhealthy too
            t0 = time.monotonic()
            control(root, "mig-destroy %s" % MIG_GONE)
            wait_list(k, [(MIG_KEPT[0], "Unhealthy"), (MIG_KEPT[1], "Healthy"),
                          (MIG_GONE, "Unhealthy")], t0, INTERVAL + 1, res,
                      what="destroyed MIG device withdrawn")
            control(root, "mig-create %s" % MIG_GONE)
            wait_for(lambda: last(k, res)[0][0] == MIG_GONE, timeout=10 * SCALE,
                     what="MIG device created again")
            assert last(k, res) == want, last(k, res)
            time.sleep(2 + 1 + 1)
            assert last(k, res) == want, last(k, res)
        finally:
            assert p.stop() == 0
            k.stop()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_gpu_hot_added_then_removed,
        test_mig_layout_changed_mixed,
        test_faults_present_at_start_recover,
        test_dra_slice_follows_gpus,
        test_dra_slice_follows_mig_layout,
        test_last_device_of_a_resource_kept_for_the_grace,
        test_lost_mig_gpu_kept_over_rebuilds,
        test_lost_gpu_kept_when_another_is_added,
        test_mig_device_created_on_a_faulted_gpu_unhealthy,
    ])
