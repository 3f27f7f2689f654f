"""kdev-dra-plugin writes the driver's part of a prepared ResourceClaim's
status (status.devices, AllocatedDeviceStatus): after NodePrepareResources
one entry per prepared device of its pool, Ready True with the CDI device,
the GPU's UUID as data, another driver's entry left alone; a repeated
prepare changes nothing; after NodeUnprepareResources its entries are gone
and the other driver's stays. Checked exactly on the stand-in API server,
resource.k8s.io v1 and v1beta1."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
from dra_plugin import (CLAIM_UID, DRIVER, NODE, PREPARE, UNPREPARE, Env, dra_pb,  # noqa: E402
                        pool_slices, prepare_req, unprepare_req)

OTHER = {"driver": "nic.example.com", "pool": NODE, "device": "eth0",
         "conditions": [{"type": "Ready", "status": "True", "reason": "Up", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def claim_status(e, version):
    st, body = e.api.req("GET", "/apis/resource.k8s.io/%s/namespaces/default/resourceclaims/"
                         "claim-1" % version)
    assert st == 200, (st, body)
    return body.get("status", {})


def run(version):
    with TempDir() as d:
        e = Env(os.path.dirname(d), extra=("--resource-api-version", version))
        try:
            info = e.register()
            wait_for(lambda: pool_slices(e.api), what="ResourceSlices")
            # another driver's entry, written before
            path = "/apis/resource.k8s.io/%s/namespaces/default/resourceclaims/claim-1" % version
            st, c = e.api.req("GET", path)
            assert st == 200, (st, c)
            c["status"]["devices"] = [OTHER]
            st, body = e.api.req("PUT", path + "/status", c)
            assert st == 200, (st, body)
            r = e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            assert r.claims[CLAIM_UID].error == "", r
            got = {}

            def written():
                got["s"] = claim_status(e, version)
                return len(got["s"].get("devices", [])) == 2
            wait_for(written, timeout=30, what="status.devices")
            devs = got["s"]["devices"]
            assert devs[0] == OTHER, devs
            t = devs[1]["conditions"][0]["lastTransitionTime"]
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t), t
            assert devs[1] == {
                "driver": DRIVER, "pool": NODE, "device": "gpu-0",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                                "message": "prepared as CDI device k8s.gpu.nvidia.com/claim="
                                           "%s-gpu-0" % CLAIM_UID,
                                "lastTransitionTime": t}],
                "data": {"uuid": kt.H100_UUIDS[0]}}, devs
            rv = e.api.req("GET", path)[1]["metadata"].get("resourceVersion")
            # a repeat answered from the checkpoint writes nothing
            r = e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            assert r.claims[CLAIM_UID].error == "", r
            time.sleep(1.5)
            assert e.api.req("GET", path)[1]["metadata"].get("resourceVersion") == rv
            e.call(info.endpoint, UNPREPARE, unprepare_req(),
                   dra_pb.NodeUnprepareResourcesResponse)
            wait_for(lambda: claim_status(e, version).get("devices") == [OTHER], timeout=30,
                     what="the driver's entries removed")
            assert "cannot write the claim's device status" not in e.logtext(), e.logtext()
            e.stop()
        finally:
            e.close()


def test_status_devices_v1():
    run("v1")


def test_status_devices_v1beta1():
    run("v1beta1")


def test_status_write_failure_is_logged():
    """A claim whose status cannot be written (the stand-in server refuses
    the PUT) is still prepared; the failure is a warning."""
    with TempDir() as d:
        e = Env(os.path.dirname(d))
        try:
            info = e.register()
            wait_for(lambda: pool_slices(e.api), what="ResourceSlices")
            st, _ = e.api.admin("POST", "/_admin/faults", {
                "method": "PUT", "path": "/apis/resource.k8s.io/v1/namespaces/default/"
                "resourceclaims/claim-1/status", "status": 403, "count": 100})
            assert st in (200, 201, 204), st
            r = e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            assert r.claims[CLAIM_UID].error == "", r
            wait_for(lambda: "cannot write the claim's device status" in e.logtext(),
                     timeout=30, what="the warning")
            line = [ln for ln in e.logtext().splitlines() if "device status" in ln][0]
            assert "claim=default/claim-1" in line, line
            e.stop()
        finally:
            e.close()


if __name__ == "__main__":
    kt.run_tests([test_status_devices_v1, test_status_devices_v1beta1,
                  test_status_write_failure_is_logged])
