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
  nodes and the control nodes under --driver-root in its CDI spec."""
import json
import os
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


def req(cls, name, uid):
    r = cls()
    c = r.claims.add()
    c.namespace, c.uid, c.name = "default", uid, name
    return r


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


def devs_by_uuid(sl):
    assert len(sl) == 1, sl
    return {d["attributes"]["uuid"]["string"]: d["name"] for d in sl[0]["spec"]["devices"]}


def test_loop_responsive_while_reconcile_stuck():
    uid = "5e0f3a11-0000-4000-8000-000000000001"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-r", uid, "gpu-2")],
                   extra=("--health-probe-interval", "1", "--health-quiet-period", "600"))
        try:
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            assert len(sl[0]["spec"]["devices"]) == 8, sl
            gen0 = sl[0]["spec"]["pool"]["generation"]
            # every ResourceSlice request is now held 120 s (more than the
            # plugin's 3 x 10 s per request): the next resync (1 s) gets stuck
            st, _ = e.api.admin("POST", "/_admin/delay",
                                {"seconds": 120, "path": "/apis/resource.k8s.io/v1/resourceslices"})
            assert st == 200
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
            e.proc.send_signal(signal.SIGTERM)
            rc = e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
            assert rc == 0, (rc, e.logtext())
        except Exception:
            print(e.logtext()[-20000:])
            raise
        finally:
            e.api.admin("DELETE", "/_admin/delay")
            e.close()


def test_sigterm_while_reconcile_stuck():
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d))
        try:
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            st, _ = e.api.admin("POST", "/_admin/delay",
                                {"seconds": 120, "path": "/apis/resource.k8s.io/v1/resourceslices"})
            assert st == 200
            wait_for(lambda: waiting(e) >= 1, what="reconcile held by the API server")
            t0 = time.monotonic()
            e.proc.send_signal(signal.SIGTERM)
            rc = e.proc.wait(timeout=60 * kt.TIMEOUT_SCALE)
            took = time.monotonic() - t0
            assert rc == 0, (rc, e.logtext())
            # the client alone would need 10 s (one try's timeout) or more
            assert took < 8.0 * kt.TIMEOUT_SCALE, took
            assert "stopped" in e.logtext()
            assert not os.path.exists(e.reg_sock())
        except Exception:
            print(e.logtext()[-20000:])
            raise
        finally:
            e.api.admin("DELETE", "/_admin/delay")
            e.close()


def test_sigterm_while_claim_read_stuck():
    uid = "5e0f3a11-0000-4000-8000-000000000009"
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-s", uid, "gpu-0")])
        result = {}
        try:
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            st, _ = e.api.admin("POST", "/_admin/delay",
                                {"seconds": 120,
                                 "path": "/apis/resource.k8s.io/v1/namespaces/default/"
                                         "resourceclaims/claim-s"})
            assert st == 200

            def call():
                try:
                    result["r"] = prepare(e, "claim-s", uid)
                except Exception as ex:  # the plugin may close the connection
                    result["r"] = ex
            t = threading.Thread(target=call, daemon=True)
            t.start()
            wait_for(lambda: waiting(e) >= 1, what="claim read held by the API server")
            t0 = time.monotonic()
            e.proc.send_signal(signal.SIGTERM)
            rc = e.proc.wait(timeout=60 * kt.TIMEOUT_SCALE)
            took = time.monotonic() - t0
            assert rc == 0, (rc, e.logtext())
            # without the abort: 5 tries of up to 30 s each
            assert took < 8.0 * kt.TIMEOUT_SCALE, took
            assert not os.path.exists(e.reg_sock())
            assert not os.path.exists(spec_path(e, uid))
            t.join(timeout=30 * kt.TIMEOUT_SCALE)
            r = result.get("r")
            # never a success: either the claim's error or a closed connection
            if isinstance(r, dra_pb.NodePrepareResourcesResponse):
                assert r.claims[uid].error and not r.claims[uid].devices, r
        except Exception:
            print(e.logtext()[-20000:])
            raise
        finally:
            e.api.admin("DELETE", "/_admin/delay")
            e.close()


def test_prepare_refuses_unhealthy_gpu():
    uid = "5e0f3a11-0000-4000-8000-000000000003"
    bad = kt.H100_UUIDS[3]
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d), objects=[claim_obj("claim-u", uid, "gpu-3")],
                   extra=("--health-probe-interval", "1", "--health-quiet-period", "3"))
        try:
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
            e.proc.send_signal(signal.SIGTERM)
            rc = e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
            assert rc == 0, (rc, e.logtext())
        except Exception:
            print(e.logtext()[-20000:])
            raise
        finally:
            e.close()


MIG0 = "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"   # GPU 0, 3g.20gb, GI 2, CI 0, start 4
GPU0 = "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
GPU3 = "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"   # MIG off: a whole GPU


def test_mig_with_proc_root():
    uid = "5e0f3a11-0000-4000-8000-000000000004"
    with TempDir() as d:
        root = os.path.dirname(d)
        proc = os.path.join(root, "proc")
        drv = os.path.join(root, "driver-root")
        # --driver-root: the NVML library and the control device nodes under it
        os.makedirs(os.path.join(drv, "usr", "lib64"))
        os.symlink(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1"),
                   os.path.join(drv, "usr", "lib64", "libnvidia-ml.so.1"))
        os.makedirs(os.path.join(drv, "dev"))
        for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            open(os.path.join(drv, "dev", n), "w").close()
        dev_name = "gpu-0-mig-9-2-4"
        e = dp.Env(root, topology=MIG_TOPO, env_extra={"KDEV_MOCK_NVML_PROC": proc},
                   objects=[claim_obj("claim-m", uid, dev_name)],
                   extra=("--proc-root", proc, "--driver-root", drv))
        try:
            sl = wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")
            devs = {x["name"]: x for x in sl[0]["spec"]["devices"]}
            assert sorted(devs) == sorted([
                "gpu-0-mig-9-2-4", "gpu-0-mig-14-1-0", "gpu-0-mig-19-0-2", "gpu-0-mig-19-0-3",
                "gpu-1-mig-20-0-0", "gpu-1-mig-15-0-2", "gpu-1-mig-15-0-4", "gpu-1-mig-19-0-6",
                "gpu-3"]), sorted(devs)
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
                "ofaEngines": {"value": "0"}}, m["capacity"]
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
            e.proc.send_signal(signal.SIGTERM)
            rc = e.proc.wait(timeout=30 * kt.TIMEOUT_SCALE)
            assert rc == 0, (rc, e.logtext())
        except Exception:
            print(e.logtext()[-20000:])
            raise
        finally:
            e.close()


if __name__ == "__main__":
    if not os.path.exists(dp.EXE):
        print("SKIP: %s not built" % dp.EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_loop_responsive_while_reconcile_stuck, test_sigterm_while_reconcile_stuck,
                  test_sigterm_while_claim_read_stuck,
                  test_prepare_refuses_unhealthy_gpu, test_mig_with_proc_root])
