"""kdev-dra-plugin --shareable-gpus (KEP-5075 consumable capacity) end to end,
on the mock libnvidia-ml.so.1 (h100 topology: 81559Mi per GPU) against the
stand-in API server: the published slice of a shareable GPU exactly; two
share claims of gpu-0 prepared together (their CDI specs and limits files
exact, the v1 answer's share_id); a third exceeding the memory left refused
with the exact error; a whole-GPU claim refused while shares are held and
prepared once they are unprepared; the regions removed by unprepare; the
v1beta1 refusal at start."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
import dra_plugin as dp  # noqa: E402

UIDS = {"c1": "aaaaaaaa-0000-4000-8000-000000000001",
        "c2": "aaaaaaaa-0000-4000-8000-000000000002",
        "c3": "aaaaaaaa-0000-4000-8000-000000000003",
        "whole": "aaaaaaaa-0000-4000-8000-000000000004"}
SHARE_IDS = {"c1": "5a1e0001-0000-4000-8000-000000000001",
             "c2": "5a1e0002-0000-4000-8000-000000000002",
             "c3": "5a1e0003-0000-4000-8000-000000000003"}
CONSUMED = {"c1": {"memory": "20Gi", "compute": "25"},
            "c2": {"memory": "40Gi", "compute": "50"},
            "c3": {"memory": "30Gi", "compute": "10"}}


def claim(name):
    extra = None
    if name in SHARE_IDS:
        extra = {"shareID": SHARE_IDS[name], "consumedCapacity": CONSUMED[name]}
    return dp.allocated_claim(name, UIDS[name], "gpu", "gpu.nvidia.com", extra)


def prepare(e, *names):
    return dp.prepare_named(e, UIDS, *names)


def unprepare(e, *names):
    return dp.unprepare_named(e, UIDS, *names)


def expected_share_edits(share_root, region):
    lib = share_root + "/lib/libkdev-share.so"
    pre = region + "/ld.so.preload"
    return {
        "env": ["KDEV_SHARE_DIR=/var/run/kdev/share"],
        "mounts": [
            {"hostPath": lib, "containerPath": "/usr/lib/kdev/libkdev-share.so",
             "options": ["ro", "nosuid", "nodev", "bind"]},
            {"hostPath": pre, "containerPath": "/etc/ld.so.preload",
             "options": ["ro", "nosuid", "nodev", "bind"]},
            {"hostPath": region, "containerPath": "/var/run/kdev/share",
             "options": ["rw", "nosuid", "nodev", "bind"]},
            {"hostPath": region + "/limits", "containerPath": "/var/run/kdev/share/limits",
             "options": ["ro", "nosuid", "nodev", "bind"]},
            {"hostPath": pre, "containerPath": "/var/run/kdev/share/ld.so.preload",
             "options": ["ro", "nosuid", "nodev", "bind"]},
        ],
    }


def test_shareable_gpus():
    with TempDir() as d:
        root = os.path.dirname(d)
        share_root = os.path.join(root, "share")
        lib = os.path.join(kt.BUILD_DIR, "libkdev-share.so")
        e = dp.Env(root, extra=["--shareable-gpus", "--share-root", share_root,
                                "--share-library", lib],
                   objects=[claim(n) for n in UIDS])
        with kt.logged(e):
            e.register()
            # the published device: exactly these capacities and the flag
            wait_for(lambda: dp.pool_slices(e.api), what="slices")
            devs = [x for s in dp.pool_slices(e.api) for x in s["spec"]["devices"]]
            gpu0 = [x for x in devs if x["name"] == "gpu-0"][0]
            assert gpu0["allowMultipleAllocations"] is True, gpu0
            assert gpu0["capacity"] == {
                "memory": {"value": "81559Mi", "requestPolicy": {
                    "default": "81559Mi", "validRange": {"min": "1Gi", "step": "1Mi"}}},
                "compute": {"value": "100", "requestPolicy": {
                    "default": "100", "validRange": {"min": "1", "step": "1"}}},
            }, gpu0["capacity"]
            assert all(x.get("allowMultipleAllocations") is True for x in devs), devs
            assert os.path.isfile(os.path.join(share_root, "lib", "libkdev-share.so"))

            # two shares of gpu-0 in one call
            resp = prepare(e, "c1", "c2")
            regions = {}
            for n, pct, mem in (("c1", 25, 20 << 30), ("c2", 50, 40 << 30)):
                one = resp.claims[UIDS[n]]
                assert one.error == "", one
                assert len(one.devices) == 1, one
                dev = one.devices[0]
                assert dev.device_name == "gpu-0" and dev.pool_name == dp.NODE, dev
                assert dev.share_id == SHARE_IDS[n], dev
                assert list(dev.cdi_device_ids) == [
                    "k8s.gpu.nvidia.com/claim=%s-gpu-0" % UIDS[n]], dev
                region = os.path.join(share_root, "claims", UIDS[n] + "-gpu-0")
                regions[n] = region
                with open(os.path.join(region, "limits")) as f:
                    limits = f.read()
                uuid = gpu0["attributes"]["uuid"]["string"]
                assert limits == ("# kdev-dra-plugin: claim default/%s (%s)\n"
                                  "# device gpu-0\n"
                                  "# share %s\n"
                                  "%s %d %d\n" % (n, UIDS[n], SHARE_IDS[n], uuid, mem, pct)), limits
                with open(os.path.join(region, "ld.so.preload")) as f:
                    assert f.read() == "/usr/lib/kdev/libkdev-share.so\n"
                with open(os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % UIDS[n])) as f:
                    spec = json.load(f)
                cdev = spec["devices"][0]
                assert cdev["name"] == UIDS[n] + "-gpu-0", cdev
                edits = cdev["containerEdits"]
                want = expected_share_edits(share_root, region)
                assert edits["env"] == want["env"], edits
                assert edits["mounts"] == want["mounts"], edits
                hook = edits["hooks"][-1]
                assert hook["hookName"] == "createRuntime" and hook["path"] == "/bin/sh", hook
                assert hook["args"][3:] == ["kdev-share-preload", region + "/ld.so.preload",
                                            "/usr/lib/kdev/libkdev-share.so"], hook
                assert [x["path"] for x in edits["deviceNodes"]][:1] == ["/dev/nvidia0"], edits

            # each share's status.devices entry carries its shareID
            for n in ("c1", "c2"):
                path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + n
                wait_for(lambda: e.api.req("GET", path)[1].get("status", {}).get("devices"),
                         timeout=30, what="status.devices of " + n)
                sd = e.api.req("GET", path)[1]["status"]["devices"]
                assert [(x["device"], x["shareID"], x["data"]) for x in sd] == [
                    ("gpu-0", SHARE_IDS[n], {"uuid": gpu0["attributes"]["uuid"]["string"]})], sd

            # a third share: 30Gi of the 20119Mi left
            one = prepare(e, "c3").claims[UIDS["c3"]]
            assert one.error == (
                "claim default/c3 (%s): device gpu-0: consumed capacity memory 30Gi (shareID %s) "
                "exceeds the 20119Mi left of its 81559Mi: 60Gi held by claims default/c1 (%s), "
                "default/c2 (%s)" % (UIDS["c3"], SHARE_IDS["c3"], UIDS["c1"], UIDS["c2"])), one
            assert not os.path.exists(os.path.join(share_root, "claims", UIDS["c3"] + "-gpu-0"))

            # the whole GPU (no shareID) while shares are held
            one = prepare(e, "whole").claims[UIDS["whole"]]
            assert one.error == (
                "claim default/whole (%s): device gpu-0 is already prepared for claim default/c1 "
                "(%s) as a share (shareID %s): this allocation has no shareID and needs the "
                "whole device" % (UIDS["whole"], UIDS["c1"], SHARE_IDS["c1"])), one

            # restart: the shares are kept (checkpoint) and answered again
            e.stop()
        plugin_dir, cdi = e.plugin_dir, e.cdi
        os.makedirs(os.path.join(root, "second"))
        e = dp.Env(os.path.join(root, "second"), extra=[
            "--shareable-gpus", "--share-root", share_root, "--share-library", lib,
            "--plugin-dir", plugin_dir, "--cdi-dir", cdi],
            objects=[claim(n) for n in UIDS])
        e.plugin_dir, e.cdi = plugin_dir, cdi  # the flags above win over the Env's
        with kt.logged(e):
            e.register()
            resp = prepare(e, "c1")
            assert resp.claims[UIDS["c1"]].error == "", resp
            assert resp.claims[UIDS["c1"]].devices[0].share_id == SHARE_IDS["c1"], resp

            # unprepare: regions gone; then the whole GPU is prepared
            resp = unprepare(e, "c1", "c2")
            assert all(resp.claims[UIDS[n]].error == "" for n in ("c1", "c2")), resp
            for region in regions.values():
                assert not os.path.exists(region), region
            one = prepare(e, "whole").claims[UIDS["whole"]]
            assert one.error == "", one
            assert not one.devices[0].HasField("share_id"), one
            unprepare(e, "whole")
            e.stop()


def test_v1beta1_refused():
    r = subprocess.run([dp.EXE, "--node-name", "n", "--shareable-gpus",
                        "--resource-api-version", "v1beta1"], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert r.stderr.startswith(
        "kdev-dra-plugin: --shareable-gpus needs --resource-api-version v1 (allowMultipleAllocations "
        "and capacity request policies are published in resource.k8s.io/v1 ResourceSlices only), "
        "got v1beta1\n"), r.stderr


if __name__ == "__main__":
    if not os.path.exists(dp.EXE):
        print("SKIP: %s not built" % dp.EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_shareable_gpus, test_v1beta1_refused])
