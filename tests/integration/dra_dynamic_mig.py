"""kdev-dra-plugin --dynamic-mig (KEP-4815 partitionable devices) end to end,
on the mock libnvidia-ml.so.1 (mig-h100-80gb-dynamic.yaml: GPU 0 in MIG mode
with no MIG devices, GPU 1 MIG capable and off, GPU 2 not MIG capable) with
its instances kept in a state file (KDEV_MOCK_NVML_STATE, as the driver keeps
them), against the stand-in API server:
  - the published pool exactly: on Kubernetes 1.35 the counter set in a
    slice of its own, then the devices; on 1.34 (and resource.k8s.io
    v1beta1) the counter set beside the devices that consume it;
  - prepare -> the instance exists in the mock at the allocated placement,
    the claim's CDI spec has the parent node and the MIG capability nodes
    of its GI/CI; unprepare -> gone;
  - two claims whose placements overlap: the second fails, naming both;
  - kill -9 between making the instance and recording it (the mock kills
    the plugin right after nvmlGpuInstanceCreateComputeInstance): the
    restarted plugin destroys the instance and the claim prepares again;
    the same for a kill between the GPU instance and its compute instance
    (a GPU instance alone, found by its placement); a prepared claim whose
    instance a reboot took gets it made again at the restart;
  - the MIG device a claim made is watched for health at once: a critical
    XID carrying its GPU instance streams UNHEALTHY for that placement
    only, then HEALTHY after the quiet period."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
import dra_plugin as dp  # noqa: E402

TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-h100-80gb-dynamic.yaml")
UIDS = {"c1": "dddddddd-0000-4000-8000-000000000001",
        "c2": "dddddddd-0000-4000-8000-000000000002",
        "c3": "dddddddd-0000-4000-8000-000000000003"}
DEVICE = {"c1": "gpu-0-mig-3g40gb-9-4",    # memory slices 4-7
          "c2": "gpu-0-mig-1g10gb-19-5",   # 5: inside c1's
          "c3": "gpu-0-mig-1g10gb-19-0"}   # 0


def claim(name):
    return dp.allocated_claim(name, UIDS[name], "mig", "mig.nvidia.com", device=DEVICE[name])


def prepare(e, *names):
    return dp.prepare_named(e, UIDS, *names)


def unprepare(e, *names):
    return dp.unprepare_named(e, UIDS, *names)


def killed_in(e, function, name):
    """Arms the mock to kill the plugin right after |function| succeeds,
    prepares claim |name| and waits for the SIGKILL."""
    with open(os.path.join(e.root, "control"), "a") as f:
        f.write("crash-after %s\n" % function)
    try:
        prepare(e, name)
        raise AssertionError("the plugin answered")
    except Exception as ex:  # grpc.RpcError: the peer died
        if isinstance(ex, AssertionError):
            raise
    e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
    assert e.proc.returncode == -9, e.proc.returncode


def restarted(root, state, plugin_dir, cdi):
    """kdev-dra-plugin again on the first one's plugin and CDI dirs."""
    os.makedirs(root)
    e = env_for(root, state, extra=["--plugin-dir", plugin_dir, "--cdi-dir", cdi])
    e.plugin_dir, e.cdi = plugin_dir, cdi
    return e


def reconciled(e, uid):
    line = ('msg="dynamic MIG: reconciled after a restart" action=destroyed '
            'claim_uid=%s' % uid)
    wait_for(lambda: line in e.logtext(), what="the reconcile line")


GPU0 = "GPU-3e5f7a9b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"
# GPU-instance profile index -> driver profile id (the topology's table)
PROFILE_ID = {0x0: 19, 0x7: 20, 0x9: 15, 0x1: 14, 0x2: 9, 0x3: 5, 0x4: 0}


def instances(state):
    """The MIG devices of GPU 0 as the mock keeps them for every process
    (its state file, mock/nvml/README.md KDEV_MOCK_NVML_STATE):
    [(GI id, GI profile id, placement start, size, CI id, MIG UUID)], a GPU
    instance without compute instance with CI id None."""
    if not os.path.exists(state):
        return []
    gpu, gis, out = None, {}, []
    with open(state) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "gpu":
                gpu = w[1]
            elif gpu == GPU0 and w[0] == "gi":
                kv = dict(zip(w[1::2], w[2::2]))
                gis[int(kv["id"])] = (PROFILE_ID[int(kv["profile"], 0)], int(kv["start"]),
                                      int(kv["size"]))
            elif gpu == GPU0 and w[0] == "ci":
                kv = dict(zip(w[1::2], w[2::2]))
                if kv.get("present") == "1":
                    gi = int(kv["gi"])
                    out.append((gi, *gis[gi], int(kv["id"]), kv["uuid"]))
    with_ci = {o[0] for o in out}
    out += [(gi, *v, None, "") for gi, v in gis.items() if gi not in with_ci]
    return sorted(out, key=lambda o: (o[0], -1 if o[4] is None else o[4]))


def env_for(root, state, extra=(), server_args=(), objects=None):
    proc = os.path.join(root, "proc")
    os.makedirs(proc, exist_ok=True)
    return dp.Env(root, extra=["--dynamic-mig", "--proc-root", proc, *extra], topology=TOPO,
                  env_extra={"KDEV_MOCK_NVML_STATE": state, "KDEV_MOCK_NVML_PROC": proc},
                  objects=objects if objects is not None else [claim(n) for n in UIDS],
                  server_args=server_args)


def counter_set(sl):
    return (sl["spec"].get("sharedCounters") or [None])[0]


def complete(api):
    """The pool's slices once all resourceSliceCount of them are written."""
    sl = dp.pool_slices(api)
    return sl if sl and all(s["spec"]["pool"]["resourceSliceCount"] == len(sl)
                            for s in sl) else None


def check_pool_135(e):
    wait_for(lambda: complete(e.api), what="the pool's slices")
    slices = sorted(dp.pool_slices(e.api),
                    key=lambda s: (not s["spec"].get("sharedCounters"), s["metadata"]["name"]))
    # 1.35: the counter sets in a slice of their own, first
    assert "devices" not in slices[0]["spec"] or not slices[0]["spec"]["devices"], slices[0]
    sets = slices[0]["spec"]["sharedCounters"]
    assert [s["name"] for s in sets] == ["gpu-0-counter-set"], sets
    assert sets[0]["counters"] == COUNTERS, sets[0]["counters"]
    devs = [d for s in slices[1:] for d in s["spec"]["devices"]]
    assert all(not s["spec"].get("sharedCounters") for s in slices[1:]), slices
    assert all(len(s["spec"]["devices"]) <= 64 for s in slices[1:]), slices
    count = {s["spec"]["pool"]["resourceSliceCount"] for s in slices}
    assert count == {len(slices)}, count
    return devs


def slices_of(*n):
    return {"memory-slice-%d" % i: {"value": "1"} for i in n}


# The counter set of an H100 80GB HBM3 in the mock: its memory (81559 MiB)
# and SMs (132), the largest engine counts of its profiles (7g.80gb: 8 copy
# engines; 7 decoders, 7 JPEG, 1 OFA), no encoders (0 everywhere: left
# out), and its 8 memory slices.
COUNTERS = dict({"memory": {"value": "81559Mi"}, "multiprocessors": {"value": "132"},
                 "copy-engines": {"value": "8"}, "decoders": {"value": "7"},
                 "jpeg-engines": {"value": "7"}, "ofa-engines": {"value": "1"}},
                **slices_of(*range(8)))
# 3g.40gb at memory slice 4: its profile's share and slices 4-7
C1_CONSUMES = dict({"memory": {"value": "40448Mi"}, "multiprocessors": {"value": "60"},
                    "copy-engines": {"value": "3"}, "decoders": {"value": "3"},
                    "jpeg-engines": {"value": "3"}}, **slices_of(4, 5, 6, 7))
# the mock's H100 placements: 1g.10gb 7, 1g.10gb+me 7, 1g.20gb 4, 2g.20gb 3,
# 3g.40gb 2, 4g.40gb 1, 7g.80gb 1
N_PLACEMENTS = 25


def test_dynamic_mig():
    with TempDir() as d:
        root = os.path.dirname(d)
        state = os.path.join(root, "nvml-state")
        os.makedirs(os.path.join(root, "a"))
        e = env_for(os.path.join(root, "a"), state)
        with kt.logged(e):
            e.register()
            devs = check_pool_135(e)
            names = [x["name"] for x in devs]
            # the full GPU 0, its placements, then GPU 1 and GPU 2 whole
            assert names[0] == "gpu-0" and names[-2:] == ["gpu-1", "gpu-2"], names
            assert set(DEVICE.values()) <= set(names), names
            placements = [x for x in devs if x["name"].startswith("gpu-0-mig-")]
            assert len(placements) == N_PLACEMENTS, (len(placements), names)
            p = [x for x in devs if x["name"] == DEVICE["c1"]][0]
            assert p["consumesCounters"] == [{"counterSet": "gpu-0-counter-set",
                                              "counters": C1_CONSUMES}], p
            assert p["attributes"]["profile"] == {"string": "3g.40gb"}, p
            assert "uuid" not in p["attributes"], p
            whole = devs[0]
            assert whole["consumesCounters"][0]["counters"] == COUNTERS, whole
            assert instances(state) == []

            # prepare: the instance at the allocated placement
            one = prepare(e, "c1").claims[UIDS["c1"]]
            assert one.error == "", one
            assert [x.device_name for x in one.devices] == [DEVICE["c1"]], one
            made = instances(state)
            assert len(made) == 1, made
            gi, prof, start, size, ci, uuid = made[0]
            assert (prof, start, size, ci) == (9, 4, 4, 0), made
            with open(os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % UIDS["c1"])) as f:
                spec = json.load(f)
            cdev = spec["devices"][0]
            assert cdev["name"] == "%s-%s" % (UIDS["c1"], DEVICE["c1"]), cdev
            # mig-minors of the mock: GI g of GPU 0 is 3 + 9g, its CI c 3 + 9g + 1 + c
            assert [x["path"] for x in cdev["containerEdits"]["deviceNodes"]] == [
                "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap%d" % (3 + 9 * gi),
                "/dev/nvidia-caps/nvidia-cap%d" % (3 + 9 * gi + 1 + ci)], cdev

            # an overlapping placement: refused before anything is made
            one = prepare(e, "c2").claims[UIDS["c2"]]
            assert one.error == (
                "claim default/c2 (%s): device gpu-0-mig-1g10gb-19-5 overlaps device "
                "gpu-0-mig-3g40gb-9-4 of claim default/c1 (%s): memory slices 5-5 and 4-7"
                % (UIDS["c2"], UIDS["c1"])), one
            assert instances(state) == made
            # one that does not overlap
            one = prepare(e, "c3").claims[UIDS["c3"]]
            assert one.error == "", one
            assert [(m[1], m[2]) for m in instances(state)] == [(9, 4), (19, 0)], \
                instances(state)

            # unprepare: gone
            resp = unprepare(e, "c1", "c3")
            assert all(resp.claims[UIDS[n]].error == "" for n in ("c1", "c3")), resp
            assert instances(state) == []

            # kill -9 right after the compute instance is made, before the
            # claim's ids are recorded
            killed_in(e, "nvmlGpuInstanceCreateComputeInstance", "c1")
            left = instances(state)
            assert [(m[1], m[2]) for m in left] == [(9, 4)], left
            e.close()
        plugin_dir, cdi = e.plugin_dir, e.cdi
        e = restarted(os.path.join(root, "b"), state, plugin_dir, cdi)
        with kt.logged(e):
            e.register()
            assert instances(state) == []
            reconciled(e, UIDS["c1"])
            one = prepare(e, "c1").claims[UIDS["c1"]]
            assert one.error == "", one
            assert [(m[1], m[2]) for m in instances(state)] == [(9, 4)]
            resp = unprepare(e, "c1")
            assert resp.claims[UIDS["c1"]].error == "", resp
            assert instances(state) == []

            # kill -9 between the GPU instance and its compute instance: a
            # GPU instance alone is left, and found by its placement
            killed_in(e, "nvmlDeviceCreateGpuInstanceWithPlacement", "c3")
            left = instances(state)
            assert [(m[1], m[2], m[4]) for m in left] == [(19, 0, None)], left
            e.close()
        e = restarted(os.path.join(root, "c"), state, plugin_dir, cdi)
        with kt.logged(e):
            e.register()
            assert instances(state) == []
            reconciled(e, UIDS["c3"])
            # a prepared claim, then a reboot (the driver keeps no instance)
            one = prepare(e, "c1").claims[UIDS["c1"]]
            assert one.error == "", one
            e.proc.kill()
            e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
            os.remove(state)
            e.close()
        e = restarted(os.path.join(root, "d"), state, plugin_dir, cdi)
        with kt.logged(e):
            e.register()
            made = instances(state)
            assert [(m[1], m[2], m[3], m[4]) for m in made] == [(9, 4, 4, 0)], made
            line = ('msg="dynamic MIG: reconciled after a restart" action=recreated '
                    'claim_uid=%s device=%s' % (UIDS["c1"], DEVICE["c1"]))
            assert line in e.logtext(), e.logtext()
            # read again before serving: its health is watched from the start
            assert ('msg="GPUs read again after the dynamic MIG reconcile" mig_devices=1'
                    in e.logtext()), e.logtext()
            with open(os.path.join(cdi, "k8s.gpu.nvidia.com-claim_%s.json" % UIDS["c1"])) as f:
                nodes = [x["path"] for x in json.load(f)["devices"][0]["containerEdits"]
                         ["deviceNodes"]]
            gi = made[0][0]
            assert nodes == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap%d" % (3 + 9 * gi),
                             "/dev/nvidia-caps/nvidia-cap%d" % (3 + 9 * gi + 1)], nodes
            resp = unprepare(e, "c1")
            assert resp.claims[UIDS["c1"]].error == "", resp
            assert instances(state) == []
            e.stop()


def test_kubernetes_134_v1beta1():
    """1.34: each counter set in the slice of the devices that consume it;
    the same objects through resource.k8s.io v1beta1."""
    with TempDir() as d:
        root = os.path.dirname(d)
        e = env_for(root, os.path.join(root, "nvml-state"),
                    extra=["--resource-api-version", "v1beta1"],
                    server_args=["--kube-version", "1.34"], objects=[])
        with kt.logged(e):
            wait_for(lambda: complete(e.api), what="the pool's slices")
            slices = dp.pool_slices(e.api)
            with_sets = [s for s in slices if s["spec"].get("sharedCounters")]
            assert len(with_sets) == 1, slices
            sl = with_sets[0]["spec"]
            assert [c["name"] for c in sl["sharedCounters"]] == ["gpu-0-counter-set"], sl
            assert sl["sharedCounters"][0]["counters"] == COUNTERS, sl
            consumers = [x["name"] for s in slices for x in s["spec"]["devices"]
                         if x.get("consumesCounters")]
            assert set(consumers) <= {x["name"] for x in sl["devices"]}, (consumers, sl)
            assert len(consumers) == N_PLACEMENTS + 1, consumers
            assert "kubernetes=1.34" in e.logtext(), e.logtext()
            e.stop()


def test_health_of_a_made_mig_device():
    """The MIG device a claim made is watched at once (its create asks for a
    re-read of the GPUs): a critical XID carrying its GPU instance streams
    UNHEALTHY for that placement only, then HEALTHY after the quiet period;
    once the claim is unprepared the re-read drops it again."""
    import dra_health_stream as hs
    with TempDir() as d:
        root = os.path.dirname(d)
        e = env_for(root, os.path.join(root, "nvml-state"),
                    extra=["--health-probe-interval", "1", "--health-quiet-period", "2"])
        with kt.logged(e):
            e.register()
            wait_for(lambda: complete(e.api), what="the pool's slices")
            ch, stream = hs.watch(e.dra_sock())
            first = hs.table(next(stream))
            assert len(first) == N_PLACEMENTS + 3, first
            assert set(first.values()) == {("HEALTHY", "")}, first
            one = prepare(e, "c1").claims[UIDS["c1"]]
            assert one.error == "", one
            gi = instances(os.path.join(root, "nvml-state"))[0][0]
            applied = 'msg="GPU inventory applied" gpus=3 mig_devices=1'
            wait_for(lambda: applied in e.logtext(), what="the re-read after the make")
            assert ('why="MIG devices of GPU %s changed: GPU instance %d made"' % (GPU0, gi)
                    in e.logtext()), e.logtext()
            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 48 %d 0\n" % (GPU0, gi))
            want_bad = dict(first)
            want_bad[DEVICE["c1"]] = (
                "UNHEALTHY", "critical XID 48 (GPU instance %d, compute instance 0)" % gi)
            got = hs.table(next(stream))
            while got == first:  # a resend before the event
                got = hs.table(next(stream))
            assert got == want_bad, {k: v for k, v in got.items() if v != ("HEALTHY", "")}
            want_ok = dict(first)
            want_ok[DEVICE["c1"]] = ("HEALTHY", "no critical event for 2000 ms and probe passed")
            got = hs.table(next(stream))
            while got == want_bad:
                got = hs.table(next(stream))
            assert got == want_ok, {k: v for k, v in got.items() if v != ("HEALTHY", "")}
            stream.cancel()
            ch.close()
            resp = unprepare(e, "c1")
            assert resp.claims[UIDS["c1"]].error == "", resp
            wait_for(lambda: 'msg="GPU inventory applied" gpus=3 mig_devices=0' in e.logtext(),
                     what="the re-read after the destroy")
            e.stop()


if __name__ == "__main__":
    if not os.path.exists(dp.EXE):
        print("SKIP: %s not built" % dp.EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_dynamic_mig, test_kubernetes_134_v1beta1, test_health_of_a_made_mig_device])
