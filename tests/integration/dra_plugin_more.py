"""kdev-dra-plugin end to end, continued (helpers from dra_plugin.py):

- the event loop stays responsive while a slice reconcile is stuck on a slow
  API server (the stand-in server holds every ResourceSlice request):
  GetInfo, NodePrepareResources and NodeUnprepareResources answer at once
  and exactly; a health change meanwhile is coalesced into one follow-up
  reconcile that publishes once the server is fast again;
- SIGTERM while a reconcile is stuck: the reconcile is aborted, exit 0 well
  before the client's own timeouts would have run out;
- NodePrepareResources refuses a GPU withdrawn as unhealthy (mock XID 79),
  exact per-claim error, no CDI spec and no checkpoint entry; after recovery
  the same claim prepares;
- MIG with --proc-root (mig-minors written by the mock, KDEV_MOCK_NVML_PROC):
  MIG devices published with profile/parentUUID and their capacities, and a
  claim for a MIG device prepared with the GPU node, both MIG capability
  nodes and the control nodes under --driver-root in its CDI spec; MIG
  devices carry NVIDIA's DRA driver names (gpu-0-mig-3g20gb-9-4);
- (at the end) the exact log lines per claim prepared / unprepared / failed,
  and the "not published by this node" error for an unknown device; stale
  temporary files of a killed atomic write removed at start (logged, nothing
  else touched); a checkpoint of a newer kdev refuses the start (exit 1,
  exact message, file untouched)."""
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
import dra_plugin as dp  # noqa: E402

reg_pb, dra_pb = dp.reg_pb, dp.dra_pb
NODE, DRIVER = dp.NODE, dp.DRIVER
GETINFO = "/pluginregistration.Registration/GetInfo"
MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")


def claim_obj(name, uid, device):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]}}}}


def req_claims(cls, claims):
    """A request of class |cls| for the claims (name, uid) of |claims|, all
    in namespace default."""
    r = cls()
    for name, uid in claims:
        c = r.claims.add()
        c.namespace, c.uid, c.name = "default", uid, name
    return r


def req(cls, name, uid):
    return req_claims(cls, [(name, uid)])


def batch_req(prefix, digit, n=50):
    """A NodePrepareResourcesRequest for the |n| claims default/PREFIX-<i>
    with uid 5e0f3a11-0000-4000-8000-<digit><i in 11 digits>."""
    return req_claims(dra_pb.NodePrepareResourcesRequest,
                      [("%s-%d" % (prefix, i), "5e0f3a11-0000-4000-8000-%d%011d" % (digit, i))
                       for i in range(n)])


@contextlib.contextmanager
def prepare_callable(e):
    """NodePrepareResources of |e|'s DRA socket as a grpc callable, over a
    channel of its own that is closed on leaving."""
    ch = dp.grpc.insecure_channel("unix:" + e.dra_sock())
    try:
        yield ch.unary_unary(dp.PREPARE,
                             request_serializer=dra_pb.NodePrepareResourcesRequest
                             .SerializeToString,
                             response_deserializer=dra_pb.NodePrepareResourcesResponse
                             .FromString)
    finally:
        ch.close()


def prepare(e, name, uid):
    return e.call(e.dra_sock(), dp.PREPARE, req(dra_pb.NodePrepareResourcesRequest, name, uid),
                  dra_pb.NodePrepareResourcesResponse)


def unprepare(e, name, uid):
    return e.call(e.dra_sock(), dp.UNPREPARE,
                  req(dra_pb.NodeUnprepareResourcesRequest, name, uid),
                  dra_pb.NodeUnprepareResourcesResponse)


def spec_path(e, uid):
    return os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % uid)


def checkpoint_text(e):
    p = os.path.join(e.plugin_dir, "dra-claims.json")
    if not os.path.exists(p):
        return ""
    with open(p) as f:
        return f.read()


def waiting(e):
    st, body = e.api.admin("GET", "/_admin/delay")
    assert st == 200, (st, body)
    return body["waiting"]


SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


def hold(e, path, seconds=120):
    """Makes the stand-in API server of |e| hold every request whose path
    starts with |path| for |seconds| s."""
    st, _ = e.api.admin("POST", "/_admin/delay", {"seconds": seconds, "path": path})
    assert st == 200


def sigterm_while_held(e, what):
    """Once the API server holds a request of kdev-dra-plugin (|what|),
    SIGTERM: the plugin must exit 0 within 60 s (scaled); returns the seconds
    its exit took."""
    wait_for(lambda: waiting(e) >= 1, what=what)
    t0 = time.monotonic()
    e.proc.send_signal(signal.SIGTERM)
    rc = e.proc.wait(timeout=60 * kt.TIMEOUT_SCALE)
    took = time.monotonic() - t0
    assert rc == 0, (rc, e.logtext())
    return took


def devs_by_uuid(sl):
    assert len(sl) == 1, sl
    return {d["attributes"]["uuid"]["string"]: d["name"] for d in sl[0]["spec"]["devices"]}


def test_loop_responsive_while_reconcile_stuck():
    uid = "5e0f3a11-0000-4000-8000-000000000001"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-r", uid, "gpu-2")],
                   extra=("--health-probe-interval", "1", "--health-quiet-period", "600"))
        with kt.logged(e, lambda: e.api.admin("DELETE", "/_admin/delay")):
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            assert len(sl[0]["spec"]["devices"]) == 8, sl
            gen0 = sl[0]["spec"]["pool"]["generation"]
            # every ResourceSlice request is now held 120 s (more than the
            # plugin's 3 x 10 s per request): the next resync (1 s) gets stuck
            hold(e, SLICES_PATH)
            wait_for(lambda: waiting(e) >= 1, what="reconcile held by the API server")
            t0 = time.monotonic()
            info = e.call(e.reg_sock(), GETINFO, reg_pb.InfoRequest(), reg_pb.PluginInfo)
            t_info = time.monotonic() - t0
            assert info.name == DRIVER and info.type == "DRAPlugin", info
            t0 = time.monotonic()
            r = prepare(e, "claim-r", uid)
            t_prep = time.monotonic() - t0
            assert r.claims[uid].error == "", r
            assert [x.device_name for x in r.claims[uid].devices] == ["gpu-2"], r
            assert list(r.claims[uid].devices[0].cdi_device_ids) == \
                ["k8s.gpu.nvidia.com/claim=%s-gpu-2" % uid], r
            t0 = time.monotonic()
            u = unprepare(e, "claim-r", uid)
            t_unprep = time.monotonic() - t0
            assert list(u.claims.keys()) == [uid] and u.claims[uid].error == "", u
            assert not os.path.exists(spec_path(e, uid))
            # the reconcile was stuck the whole time: the calls overlapped it
            assert waiting(e) >= 1
            limit = 3.0 * kt.TIMEOUT_SCALE
            assert t_info < limit and t_prep < limit and t_unprep < limit, \
                (t_info, t_prep, t_unprep)

            # a health change while stuck: coalesced, published once the server is fast
            bad = kt.H100_UUIDS[5]
            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 79\n" % bad)
            wait_for(lambda: "device health changed" in e.logtext(), what="health change seen")
            st, _ = e.api.admin("DELETE", "/_admin/delay")
            assert st == 200
            gone = wait_for(lambda: [x for x in dp.pool_slices(e.api)
                                     if bad not in devs_by_uuid([x])],
                            timeout=60, what="unhealthy GPU withdrawn after the hold")
            assert len(gone[0]["spec"]["devices"]) == 7, gone
            assert gone[0]["spec"]["pool"]["generation"] > gen0, gone
            e.stop()


def test_sigterm_while_reconcile_stuck():
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d))
        with kt.logged(e, lambda: e.api.admin("DELETE", "/_admin/delay")):
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            hold(e, SLICES_PATH)
            took = sigterm_while_held(e, "reconcile held by the API server")
            # the client alone would need 10 s (one try's timeout) or more
            assert took < 8.0 * kt.TIMEOUT_SCALE, took
            assert "stopped" in e.logtext()
            assert not os.path.exists(e.reg_sock())


def test_sigterm_while_claim_read_stuck():
    uid = "5e0f3a11-0000-4000-8000-000000000009"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-s", uid, "gpu-0")])
        result = {}
        with kt.logged(e, lambda: e.api.admin("DELETE", "/_admin/delay")):
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            hold(e, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/claim-s")

            def call():
                try:
                    result["r"] = prepare(e, "claim-s", uid)
                except Exception as ex:  # the plugin may close the connection
                    result["r"] = ex
            t = threading.Thread(target=call, daemon=True)
            t.start()
            took = sigterm_while_held(e, "claim read held by the API server")
            # without the abort: 5 tries of up to 30 s each
            assert took < 8.0 * kt.TIMEOUT_SCALE, took
            assert not os.path.exists(e.reg_sock())
            assert not os.path.exists(spec_path(e, uid))
            t.join(timeout=30 * kt.TIMEOUT_SCALE)
            r = result.get("r")
            # never a success: either the claim's error or a closed connection
            if isinstance(r, dra_pb.NodePrepareResourcesResponse):
                assert r.claims[uid].error and not r.claims[uid].devices, r


def test_prepare_refuses_unhealthy_gpu():
    uid = "5e0f3a11-0000-4000-8000-000000000003"
    bad = kt.H100_UUIDS[3]
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-u", uid, "gpu-3")],
                   extra=("--health-probe-interval", "1", "--health-quiet-period", "3"))
        with kt.logged(e):
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            assert devs_by_uuid(sl)[bad] == "gpu-3"
            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 79\n" % bad)
            wait_for(lambda: [x for x in dp.pool_slices(e.api) if bad not in devs_by_uuid([x])],
                     timeout=30, what="unhealthy GPU withdrawn")
            r = prepare(e, "claim-u", uid)
            assert list(r.claims.keys()) == [uid], r
            want = ("claim default/claim-u (%s): device gpu-3 (%s) is unhealthy: withdrawn "
                    "from the ResourceSlice, not prepared" % (uid, bad))
            assert r.claims[uid].error == want, r.claims[uid].error
            assert len(r.claims[uid].devices) == 0, r
            assert not os.path.exists(spec_path(e, uid))
            assert uid not in checkpoint_text(e)
            # recovered (quiet period 3 s, probe 1 s): published again, prepared
            wait_for(lambda: [x for x in dp.pool_slices(e.api) if bad in devs_by_uuid([x])],
                     timeout=40, what="recovered GPU published again")
            r = prepare(e, "claim-u", uid)
            assert r.claims[uid].error == "", r
            assert list(r.claims[uid].devices[0].cdi_device_ids) == \
                ["k8s.gpu.nvidia.com/claim=%s-gpu-3" % uid], r
            assert os.path.exists(spec_path(e, uid))
            assert uid in checkpoint_text(e)
            e.stop()


MIG0 = "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"   # GPU 0, 3g.20gb, GI 2, CI 0, start 4
GPU0 = "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
GPU3 = "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"   # MIG off: a whole GPU


def test_mig_with_proc_root():
    uid = "5e0f3a11-0000-4000-8000-000000000004"
    with TempDir() as d:
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")
        # --driver-root: the NVML library and the control device nodes under it
        drv = kt.mock_driver_root(root, kt.CONTROL_NODES)
        dev_name = "gpu-0-mig-3g20gb-9-4"   # NVIDIA's name: profile, GI profile id, start
        e = dp.Env(root, topology=MIG_TOPO, env_extra={"KDEV_MOCK_NVML_PROC": proc},
                   objects=[claim_obj("claim-m", uid, dev_name)],
                   extra=("--proc-root", proc, "--driver-root", drv))
        with kt.logged(e):
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            devs = {x["name"]: x for x in sl[0]["spec"]["devices"]}
            assert sorted(devs) == sorted([
                "gpu-0-mig-3g20gb-9-4", "gpu-0-mig-2g10gb-14-0", "gpu-0-mig-1g5gb-19-2",
                "gpu-0-mig-1g5gb-19-3", "gpu-1-mig-1g5gb-me-20-0", "gpu-1-mig-1g10gb-15-2",
                "gpu-1-mig-1g10gb-15-4", "gpu-1-mig-1g5gb-19-6", "gpu-3"]), sorted(devs)
            m = devs[dev_name]
            assert m["attributes"] == {
                "type": {"string": "mig"}, "uuid": {"string": MIG0},
                "parentUUID": {"string": GPU0}, "profile": {"string": "3g.20gb"},
                "productName": {"string": "NVIDIA A100-SXM4-40GB"},
                "brand": {"string": "Nvidia"}, "architecture": {"string": "Ampere"},
                "cudaComputeCapability": {"version": "8.0.0"},
                "driverVersion": {"version": "550.90.7"},
                "cudaDriverVersion": {"version": "12.4.0"},
                "pcieBusID": {"string": "0000:07:00.0"},
                "index": {"int": 0}, "minor": {"int": 0}}, m["attributes"]
            assert m["capacity"] == {
                "memory": {"value": "19968Mi"}, "multiprocessors": {"value": "42"},
                "copyEngines": {"value": "3"}, "decoders": {"value": "2"},
                "encoders": {"value": "0"}, "jpegEngines": {"value": "0"},
                "ofaEngines": {"value": "0"},
                # NVIDIA's memory slices of the placement (start 4, size 4)
                "memorySlice4": {"value": "1"}, "memorySlice5": {"value": "1"},
                "memorySlice6": {"value": "1"}, "memorySlice7": {"value": "1"}}, m["capacity"]
            g3 = devs["gpu-3"]
            assert g3["attributes"]["uuid"] == {"string": GPU3}, g3
            assert g3["capacity"] == {"memory": {"value": "40Gi"},
                                      "multiprocessors": {"value": "108"}}, g3

            r = prepare(e, "claim-m", uid)
            cr = r.claims[uid]
            assert cr.error == "", cr.error
            assert [(x.device_name, list(x.cdi_device_ids)) for x in cr.devices] == \
                [(dev_name, ["k8s.gpu.nvidia.com/claim=%s-%s" % (uid, dev_name)])], cr
            with open(spec_path(e, uid)) as f:
                spec = json.load(f)
            assert spec["kind"] == "k8s.gpu.nvidia.com/claim", spec
            assert [x["name"] for x in spec["devices"]] == ["%s-%s" % (uid, dev_name)], spec
            # GPU 0 (minor 0), GI 2 / CI 0: caps 3+9*2 = 21 and 22 (mig-minors)
            nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
            assert nodes == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21",
                             "/dev/nvidia-caps/nvidia-cap22"], nodes
            top = spec["containerEdits"]
            assert top["env"] == ["NVIDIA_VISIBLE_DEVICES=void"], top
            assert [n["path"] for n in top["deviceNodes"]] == \
                ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"], top
            with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors")) as f:
                minors = f.read()
            assert "gpu0/gi2/access 21\n" in minors and "gpu0/gi2/ci0/access 22\n" in minors
            u = unprepare(e, "claim-m", uid)
            assert u.claims[uid].error == "", u
            assert not os.path.exists(spec_path(e, uid))
            e.stop()


def test_dead_batch_does_not_block_later_calls():
    """A NodePrepareResources call kubelet gave up on stops: with the API
    server holding claim reads, a 50-claim batch with a 3 s grpc-timeout is
    answered before its deadline with each claim's error (the reads stop at
    the deadline less a margin); with the server down, a batch kubelet
    cancels stops; no read of it reaches the server once it is back, and a
    later
    single-claim prepare answers at once and exactly.
    Without the cancellation the dead batch kept reading ~3 s per claim."""
    uid = "5e0f3a11-0000-4000-8000-00000000000b"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-late", uid, "gpu-3")])
        with kt.logged(e):
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            hold(e, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/batch-", 60)
            batch = batch_req("batch", 1)
            with prepare_callable(e) as f:
                t0 = time.monotonic()
                r = f(batch, timeout=3.0)
                took = time.monotonic() - t0
            # answered before the deadline (3 s less 10 %): the first claim's
            # read (held by the server) stopped by the deadline, the others
            # not read at all
            assert took < 3.0, took
            assert len(r.claims) == 50, r
            url = "%s/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/batch-0" \
                % e.info["url"]
            e0 = r.claims[batch.claims[0].uid].error
            assert (e0.startswith("claim default/batch-0: GET %s: Timeout was reached" % url)
                    and e0.endswith(" (stopped by the deadline)")) or \
                e0 == "claim default/batch-0: GET /apis/resource.k8s.io/v1/namespaces/default/" \
                      "resourceclaims/batch-0: deadline exceeded", e0
            for i in range(1, 50):
                c = batch.claims[i]
                assert r.claims[c.uid].error == \
                    "claim default/batch-%d: not read before the call's deadline" % i, \
                    r.claims[c.uid]
                assert not r.claims[c.uid].devices
            st, _ = e.api.admin("DELETE", "/_admin/delay")
            assert st == 200
            st, _ = e.api.admin("POST", "/_admin/down", {})
            assert st == 200
            # a batch without deadline that kubelet cancels (RST_STREAM)
            cancelled = batch_req("cbatch", 2)
            with prepare_callable(e) as f:
                fut = f.future(cancelled)
                time.sleep(1.0)
                assert fut.cancel()
            st, _ = e.api.admin("POST", "/_admin/up", {})
            assert st == 200
            st, _ = e.api.admin("DELETE", "/_admin/requests")
            assert st == 200
            t0 = time.monotonic()
            r = prepare(e, "claim-late", uid)
            took = time.monotonic() - t0
            assert list(r.claims.keys()) == [uid], r
            assert r.claims[uid].error == "", r
            assert [x.device_name for x in r.claims[uid].devices] == ["gpu-3"], r
            assert list(r.claims[uid].devices[0].cdi_device_ids) == \
                ["k8s.gpu.nvidia.com/claim=%s-gpu-3" % uid], r
            # before the fix: 14-25 s behind the dead batch's reads
            assert took < 5.0 * kt.TIMEOUT_SCALE, took
            time.sleep(1.0)  # a dead batch still running would read meanwhile
            st, reqs = e.api.admin("GET", "/_admin/requests")
            # the claim reads (the status write after the answer aside)
            claims = [x["path"] for x in reqs["items"] if "/resourceclaims/" in x["path"]
                      and not x["path"].endswith("/status")]
            assert claims == ["/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"
                              "claim-late"], claims
            assert not os.path.exists(spec_path(e, "5e0f3a11-0000-4000-8000-100000000000"))
            u = unprepare(e, "claim-late", uid)
            assert u.claims[uid].error == "", u


def log_events(e, msgs):
    """The plugin's text log lines whose msg is one of |msgs|, without the
    leading "ts=... " (the rest is compared exactly)."""
    out = []
    for line in e.logtext().splitlines():
        if not line.startswith("ts="):
            continue
        rest = line.split(" ", 1)[1]
        if any(('msg="%s"' % m) in rest for m in msgs):
            out.append(rest)
    return out


CLAIM_MSGS = ("claim prepared", "claim already prepared", "claim prepare failed",
              "claim unprepared", "claim unprepared (was not prepared)",
              "claim unprepare failed")


def test_claim_log_lines_and_unknown_device():
    """One info line per claim prepared/unprepared (namespace/name, uid,
    devices, CDI device IDs), one warn line per per-claim failure with its
    error; a device this node does not publish is said so, not "unhealthy"."""
    uid1, uid_u, uid_d = dp.CLAIM_UID, "5e0f3a11-0000-4000-8000-0000000000a1", \
        "5e0f3a11-0000-4000-8000-0000000000a2"
    with TempDir() as d:
        root = os.path.dirname(d)
        e = dp.Env(root, objects=[claim_obj("claim-u", uid_u, "gpu-99"),
                                  claim_obj("claim-d", uid_d, "gpu-1")])
        with kt.logged(e):
            wait_for(lambda: kt.sock_accepts(e.reg_sock()) or e.proc.poll() is not None,
                     what="registration socket")
            assert e.proc.poll() is None, e.logtext()
            cdi1 = "k8s.gpu.nvidia.com/claim=%s-gpu-0" % uid1
            r = e.call(e.dra_sock(), dp.PREPARE, dp.prepare_req(),
                       dra_pb.NodePrepareResourcesResponse)
            assert r.claims[uid1].error == "", r
            # one call, two claims: one line each
            rq = req_claims(dra_pb.NodePrepareResourcesRequest,
                            [("claim-1", uid1), ("claim-u", uid_u)])
            r = e.call(e.dra_sock(), dp.PREPARE, rq, dra_pb.NodePrepareResourcesResponse)
            unknown = ("claim default/claim-u (%s): device gpu-99 is not published by this "
                       "node (pool %s)" % (uid_u, NODE))
            assert r.claims[uid1].error == "", r
            assert r.claims[uid_u].error == unknown, r.claims[uid_u].error
            assert len(r.claims[uid_u].devices) == 0, r
            # an unprepare that fails: a directory where the claim's CDI spec goes
            r = prepare(e, "claim-d", uid_d)
            assert r.claims[uid_d].error == "", r
            spec_d = spec_path(e, uid_d)
            os.unlink(spec_d)
            os.mkdir(spec_d)
            u = unprepare(e, "claim-d", uid_d)
            fail_d = u.claims[uid_d].error
            assert fail_d.startswith("claim %s: CDI spec" % uid_d), fail_d
            os.rmdir(spec_d)
            u = unprepare(e, "claim-d", uid_d)
            assert u.claims[uid_d].error == "", u
            ur = req_claims(dra_pb.NodeUnprepareResourcesRequest,
                            [("claim-1", uid1), ("claim-u", uid_u)])
            u = e.call(e.dra_sock(), dp.UNPREPARE, ur, dra_pb.NodeUnprepareResourcesResponse)
            assert u.claims[uid1].error == "" and u.claims[uid_u].error == "", u
            cdi_d = "k8s.gpu.nvidia.com/claim=%s-gpu-1" % uid_d
            want = [
                'level=info msg="claim prepared" claim=default/claim-1 uid=%s devices=gpu-0 '
                'cdi_devices="%s"' % (uid1, cdi1),
                'level=info msg="claim already prepared" claim=default/claim-1 uid=%s '
                'devices=gpu-0 cdi_devices="%s"' % (uid1, cdi1),
                'level=warn msg="claim prepare failed" claim=default/claim-u uid=%s '
                'error="%s"' % (uid_u, unknown),
                'level=info msg="claim prepared" claim=default/claim-d uid=%s devices=gpu-1 '
                'cdi_devices="%s"' % (uid_d, cdi_d),
                'level=warn msg="claim unprepare failed" claim=default/claim-d uid=%s '
                'error=%s' % (uid_d, json.dumps(fail_d)),
                'level=info msg="claim unprepared" claim=default/claim-d uid=%s devices=gpu-1 '
                'cdi_devices="%s"' % (uid_d, cdi_d),
                'level=info msg="claim unprepared" claim=default/claim-1 uid=%s devices=gpu-0 '
                'cdi_devices="%s"' % (uid1, cdi1),
                'level=info msg="claim unprepared (was not prepared)" claim=default/claim-u '
                'uid=%s' % uid_u,
            ]
            got = log_events(e, CLAIM_MSGS)
            assert got == want, "\n".join(got)
            e.stop()


def test_stale_temp_files_removed_at_start():
    """Temporary files a kill -9 left mid atomic write (CDI spec, checkpoint)
    are removed at start, one log line each; nothing else is touched."""
    uid = dp.CLAIM_UID
    stale, keep = [], []

    def plant(env):
        os.makedirs(env.cdi)
        os.makedirs(env.plugin_dir)
        stale.append(os.path.join(env.cdi, ".k8s.gpu.nvidia.com-claim_%s.json.Ab12Cd" % uid))
        stale.append(os.path.join(os.path.realpath(env.plugin_dir), "dra-claims.json.tmp.x9YzQ0"))
        keep.append(os.path.join(env.cdi, ".k8s.gpu.nvidia.com-claim_%s.json.Ab12C" % uid))
        keep.append(os.path.join(env.cdi, ".k8s.device-plugin.nvidia.com-gpu.json.Ab12Cd"))
        keep.append(os.path.join(env.cdi, "k8s.gpu.nvidia.com-claim_other.json"))
        keep.append(os.path.join(env.plugin_dir, "dra-claims.json.tmp.notmp"))
        keep.append(os.path.join(env.plugin_dir, "notes.tmp.Ab12Cd"))
        for p in stale + keep:
            with open(p, "w") as f:
                f.write('{"partial":')

    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), before_start=plant)
        with kt.logged(e):
            wait_for(lambda: kt.sock_accepts(e.reg_sock()) or e.proc.poll() is not None,
                     what="registration socket")
            assert e.proc.poll() is None, e.logtext()
            for p in stale:
                assert not os.path.exists(p), p
            for p in keep:
                assert os.path.exists(p), p
            msg = "removed a stale temporary file (an earlier run was killed while writing it)"
            got = log_events(e, (msg,))
            assert got == ['level=info msg="%s" path=%s' % (msg, p) for p in stale], got
            # the plugin works as usual afterwards
            r = e.call(e.dra_sock(), dp.PREPARE, dp.prepare_req(),
                       dra_pb.NodePrepareResourcesResponse)
            assert r.claims[uid].error == "", r
            e.stop()


def test_newer_checkpoint_refuses_start():
    """A checkpoint written by a newer kdev: exit 1 with the exact message,
    the file left as it was, nothing moved aside, no sockets."""
    text = '{"checksum":"fnv1a64:0123456789abcdef","data":{},"version":3}'

    def plant(env):
        os.makedirs(env.plugin_dir)
        with open(os.path.join(env.plugin_dir, "dra-claims.json"), "w") as f:
            f.write(text)

    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), before_start=plant)
        with kt.logged(e):
            rc = e.proc.wait(timeout=60 * kt.TIMEOUT_SCALE)
            assert rc == 1, (rc, e.logtext())
            cp = os.path.join(os.path.realpath(e.plugin_dir), "dra-claims.json")
            want = ('level=error msg="cannot start" error="checkpoint %s was written by a newer '
                    'kdev (version 3, this one reads 1 to 2); refusing to start so prepared '
                    'claims are not forgotten"' % cp)
            assert log_events(e, ("cannot start",)) == [want], e.logtext()
            with open(cp) as f:
                assert f.read() == text
            assert sorted(os.listdir(e.plugin_dir)) == ["dra-claims.json"], \
                os.listdir(e.plugin_dir)
            assert not os.path.exists(e.reg_sock())


def test_odd_checkpoint_refuses_start():
    """A FIFO (no writer: a plain open would block the start before any socket
    is served), a link to /dev/zero (never ends), a directory or an oversized
    file at the checkpoint path: exit 1 at once with the exact message, the
    file left where it was, no sockets. The wait has a timeout, so a hang
    fails the test instead of holding the suite."""
    def fifo(cp):
        os.mkfifo(cp)

    def zero(cp):
        os.symlink("/dev/zero", cp)

    def directory(cp):
        os.mkdir(cp)

    def big(cp):
        with open(cp, "wb") as f:
            f.truncate(16 * 1024 * 1024 + 1)

    cases = ((fifo, "claim checkpoint %s: is not a regular file (a FIFO); refusing to start, "
                    "it is left alone"),
             (zero, "claim checkpoint %s: is not a regular file (a character device); refusing "
                    "to start, it is left alone"),
             (directory, "claim checkpoint %s: is not a regular file (a directory); refusing "
                         "to start, it is left alone"),
             (big, "%s: the claim checkpoint is larger than 16777216 bytes; refusing to start, "
                   "it is left alone"))
    for make, msg in cases:
        def plant(env, make=make):
            os.makedirs(env.plugin_dir)
            make(os.path.join(env.plugin_dir, "dra-claims.json"))

        with TempDir() as d:
            e = dp.Env(os.path.dirname(d), before_start=plant)
            with kt.logged(e):
                rc = e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
                assert rc == 1, (make.__name__, rc, e.logtext())
                cp = os.path.join(os.path.realpath(e.plugin_dir), "dra-claims.json")
                want = 'level=error msg="cannot start" error="%s"' % (msg % cp)
                assert log_events(e, ("cannot start",)) == [want], e.logtext()
                assert os.path.lexists(cp), make.__name__
                assert sorted(os.listdir(e.plugin_dir)) == ["dra-claims.json"], \
                    os.listdir(e.plugin_dir)
                assert not os.path.exists(e.reg_sock())


def test_nul_byte_checkpoint_moved_aside():
    """A NUL byte in the checkpoint is named with its offset (jansson only
    said "Invalid or incomplete multibyte or wide character"); the file is
    moved aside and the plugin serves."""
    def plant(env):
        os.makedirs(env.plugin_dir)
        with open(os.path.join(env.plugin_dir, "dra-claims.json"), "wb") as f:
            f.write(b'{"version":1\0}')

    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), before_start=plant)
        with kt.logged(e):
            kt.wait_for(lambda: os.path.exists(e.reg_sock()), 30,
                        what="registration socket")
            cp = os.path.join(os.path.realpath(e.plugin_dir), "dra-claims.json")
            lines = log_events(e, ("claim checkpoint unusable, moved aside",))
            assert len(lines) == 1, e.logtext()
            want = ('level=error msg="claim checkpoint unusable, moved aside" error="claim '
                    'checkpoint %s is corrupt (contains a NUL byte at offset 12); moved aside to '
                    '%s.corrupt-' % (cp, cp))
            assert lines[0].startswith(want), lines[0]
            assert not os.path.exists(cp)


def test_state_files_moved_aside_and_devices_held():
    """kdev-dra-plugin over its sockets: the claim checkpoint and a claim's
    CDI spec edited behind its back are moved aside (one warning each, the
    edit kept in .<name>.foreign-<unix seconds>) and rebuilt from memory,
    nothing prepared lost; a device prepared for one claim is refused to
    another, naming both, unless the allocation has adminAccess."""
    uid1, uid_d, uid_x, uid_a = dp.CLAIM_UID, "5e0f3a11-0000-4000-8000-0000000000b1", \
        "5e0f3a11-0000-4000-8000-0000000000b2", "5e0f3a11-0000-4000-8000-0000000000b3"
    admin = claim_obj("claim-a", uid_a, "gpu-0")
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    warn = "state file changed by someone else: moved aside and rebuilt from memory"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-d", uid_d, "gpu-1"),
                                                claim_obj("claim-x", uid_x, "gpu-0"), admin])
        with kt.logged(e):
            kt.wait_for(lambda: kt.sock_accepts(e.reg_sock()) or e.proc.poll() is not None,
                        what="registration socket")
            assert e.proc.poll() is None, e.logtext()
            assert prepare(e, "claim-1", uid1).claims[uid1].error == ""
            cp = os.path.join(e.plugin_dir, "dra-claims.json")
            with open(cp, "w") as f:
                f.write('{"version":1,"edited":true}\n')
            assert prepare(e, "claim-d", uid_d).claims[uid_d].error == ""
            lines = log_events(e, (warn,))
            assert len(lines) == 1, e.logtext()
            m = re.fullmatch(r'level=warn msg="%s" path=(\S+) aside=(\S+)' % warn, lines[0])
            assert m, lines[0]
            assert os.path.samefile(m.group(1), cp), lines[0]
            aside = m.group(2)
            assert os.path.dirname(aside) == os.path.dirname(m.group(1)), lines[0]
            assert re.fullmatch(r"\.dra-claims\.json\.foreign-[0-9]+",
                                os.path.basename(aside)), aside
            with open(aside) as f:
                assert f.read() == '{"version":1,"edited":true}\n'
            assert sorted(json.loads(checkpoint_text(e))["data"]["claims"]) == \
                sorted([uid1, uid_d])
            # a claim's spec edited: the retried Prepare restores it
            spec = spec_path(e, uid_d)
            with open(spec) as f:
                orig = f.read()
            with open(spec, "w") as f:
                f.write("edited\n")
            assert prepare(e, "claim-d", uid_d).claims[uid_d].error == ""
            with open(spec) as f:
                assert f.read() == orig
            lines = log_events(e, (warn,))
            assert len(lines) == 2, e.logtext()
            m = re.fullmatch(r'level=warn msg="%s" path=(\S+) aside=(\S+)' % warn, lines[1])
            assert m and os.path.samefile(m.group(1), spec), lines[1]
            assert os.path.basename(m.group(2)).startswith(
                ".k8s.gpu.nvidia.com-claim_%s.json.foreign-" % uid_d), lines[1]
            with open(m.group(2)) as f:
                assert f.read() == "edited\n"
            # gpu-0 is claim-1's
            r = prepare(e, "claim-x", uid_x)
            assert r.claims[uid_x].error == (
                "claim default/claim-x (%s): device gpu-0 is already prepared for claim "
                "default/claim-1 (%s): it is not shareable and this allocation has no "
                "adminAccess" % (uid_x, uid1)), r
            assert not os.path.exists(spec_path(e, uid_x))
            r = prepare(e, "claim-a", uid_a)
            assert r.claims[uid_a].error == "", r
            assert [d.device_name for d in r.claims[uid_a].devices] == ["gpu-0"], r
            recs = json.loads(checkpoint_text(e))["data"]["claims"]
            assert recs[uid_a]["devices"][0].get("adminAccess") is True, recs
            assert "adminAccess" not in recs[uid1]["devices"][0], recs


if __name__ == "__main__":
    if not os.path.exists(dp.EXE):
        print("SKIP: %s not built" % dp.EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_loop_responsive_while_reconcile_stuck, test_sigterm_while_reconcile_stuck,
                  test_sigterm_while_claim_read_stuck,
                  test_prepare_refuses_unhealthy_gpu, test_mig_with_proc_root,
                  test_dead_batch_does_not_block_later_calls,
                  test_claim_log_lines_and_unknown_device,
                  test_stale_temp_files_removed_at_start, test_newer_checkpoint_refuses_start,
                  test_odd_checkpoint_refuses_start, test_nul_byte_checkpoint_moved_aside,
                  test_state_files_moved_aside_and_devices_held])
