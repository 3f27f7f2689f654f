"""kdevctl dra allocate against the stand-in API server (tests/kubeapi/server.py):
the node's published ResourceSlices (kdev-dra-plugin's slices of the mock h100
topology, tests/data/sched), NVIDIA's DeviceClasses, a claim already allocated
(its device in use), pending claims that fit, one that cannot (the issue's
product selector, explained), one with a selector error; the allocation written
to status as the scheduler writes it (v1 and v1beta1), --dry-run writing
nothing, --claim, -o json, usage errors."""
import http.client
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
SERVER = os.path.join(kt.SOURCE_DIR, "tests", "kubeapi", "server.py")
DATA = os.path.join(kt.SOURCE_DIR, "tests", "data", "sched")
TOKEN = "alloc-token"
NODE = "node-a"
NV = "gpu.nvidia.com"
PROD = 'device.attributes["gpu.nvidia.com"].productName == "H200"'
NODESEL = {"nodeSelectorTerms": [{"matchFields": [
    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}


def claim(name, requests, status=None, ns="default"):
    c = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": name, "namespace": ns, "uid": "uid-" + name},
         "spec": {"devices": {"requests": requests}}}
    if status:
        c["status"] = status
    return c


def req(name, count=None, sels=()):
    e = {"deviceClassName": NV}
    if count:
        e["count"] = count
    if sels:
        e["selectors"] = [{"cel": {"expression": s}} for s in sels]
    return {"name": name, "exactly": e}


def result(request, device):
    return {"request": request, "driver": NV, "pool": NODE, "device": device}


def objects():
    with open(os.path.join(DATA, "slices-h100-8x.json")) as f:
        slices = json.load(f)
    with open(os.path.join(DATA, "classes.json")) as f:
        classes = json.load(f)
    for s in slices:
        s.update({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"})
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"}}
    done = claim("done", [req("gpu")],
                 {"allocation": {"devices": {"results": [result("gpu", "gpu-0")]}}})
    return [node, *slices, *classes, done,
            claim("a-two", [req("gpu", count=2)]),
            claim("b-h200", [req("gpu", sels=[PROD])]),
            claim("c-one", [req("gpu")]),
            claim("d-bad", [req("gpu", sels=['device.attributes["gpu.nvidia.com"].pcieRoot == "x"'])],
                  ns="team")]


class Api:
    def __init__(self, root, versions="v1,v1beta1"):
        seed = os.path.join(root, "seed.json")
        with open(seed, "w") as f:
            json.dump(objects(), f)
        self.proc = subprocess.Popen([sys.executable, SERVER, "--token", TOKEN, "--seed", seed,
                                      "--versions", versions],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.info = json.loads(self.proc.stdout.readline())
        self.kubeconfig = os.path.join(root, "kubeconfig")
        kt.write_kubeconfig(self.kubeconfig, self.info["url"], TOKEN)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.info["port"], timeout=30)
        c.request("GET", path, None, {"Authorization": "Bearer " + TOKEN})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        assert r.status == 200, (r.status, body)
        return body

    def claim(self, ns, name, version="v1"):
        return self.get("/apis/resource.k8s.io/%s/namespaces/%s/resourceclaims/%s"
                        % (version, ns, name))

    def close(self):
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def kdevctl(*args):
    p = subprocess.run([*kt.WRAP, KDEVCTL, "dra", "allocate", *args], capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


EXPECTED_TABLE = (
    "default/a-two: allocated on node node-a%s\n"
    "  gpu: gpu.nvidia.com/node-a/gpu-1\n"
    "  gpu: gpu.nvidia.com/node-a/gpu-2\n"
    "default/b-h200: cannot allocate all claims on node node-a\n"
    "  request gpu: no device of class gpu.nvidia.com matches `" + PROD + "`: 8 devices "
    "checked, 8 rejected \u2014 productName is \"NVIDIA H100 80GB HBM3\"\n"
    "default/c-one: allocated on node node-a%s\n"
    "  gpu: gpu.nvidia.com/node-a/gpu-3\n"
    # gpu-0 to gpu-3 are in use: the scheduler checks that before the selectors,
    # so the first device the selector sees is gpu-4
    "team/d-bad: error: claim team/d-bad: selector #0 on device gpu.nvidia.com/node-a/gpu-4: "
    "CEL runtime error: no such key: pcieRoot. consider using CEL optional chaining (.? followed "
    "by orValue()) or guarding the check with has() for optional fields\n")


def test_allocate_writes_status():
    with tempfile.TemporaryDirectory() as d:
        api = Api(d)
        try:
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE)
            assert rc == 1, (rc, out, err)
            assert out == EXPECTED_TABLE % ("", ""), out
            a = api.claim("default", "a-two")
            assert a["status"] == {"allocation": {
                "devices": {"results": [result("gpu", "gpu-1"), result("gpu", "gpu-2")]},
                "nodeSelector": NODESEL}}, a
            assert api.claim("default", "c-one")["status"]["allocation"]["devices"]["results"] \
                == [result("gpu", "gpu-3")]
            assert "status" not in api.claim("default", "b-h200")
            assert "status" not in api.claim("team", "d-bad")
            done = api.claim("default", "done")["status"]["allocation"]["devices"]["results"]
            assert done == [result("gpu", "gpu-0")], done
            # a second pass: the written claims count as allocated, nothing new fits
            # the failing ones, and the allocated ones are left alone
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE,
                                   "--namespace", "default", "--claim", "a-two")
            assert (rc, out) == (0, "default/a-two: already allocated\n"), (rc, out, err)
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE,
                                   "--namespace", "default", "--claim", "nope")
            assert rc == 1 and err == ('kdevctl dra allocate: resourceclaims "nope" not found '
                                       'in namespace default\n'), (rc, out, err)
        finally:
            api.close()


def test_dry_run_json():
    with tempfile.TemporaryDirectory() as d:
        api = Api(d)
        try:
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE, "--dry-run")
            assert rc == 1 and out == EXPECTED_TABLE % ((" (dry run, not written)",) * 2), out
            assert "status" not in api.claim("default", "a-two")
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE, "--dry-run",
                                   "--namespace", "default", "--claim", "b-h200", "-o", "json")
            assert rc == 1, (rc, out, err)
            assert json.loads(out) == {"node": NODE, "dryRun": True, "claims": [{
                "namespace": "default", "name": "b-h200", "state": "unschedulable",
                "reasons": ["request gpu: no device of class gpu.nvidia.com matches `" + PROD +
                            "`: 8 devices checked, 8 rejected \u2014 productName is "
                            "\"NVIDIA H100 80GB HBM3\""]}]}, out
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE, "--dry-run",
                                   "--namespace", "default", "--claim", "c-one", "-o", "json")
            assert rc == 0 and json.loads(out)["claims"] == [{
                "namespace": "default", "name": "c-one", "state": "allocated",
                "allocation": {"devices": {"results": [result("gpu", "gpu-1")]},
                               "nodeSelector": NODESEL}}], out
        finally:
            api.close()


def test_v1beta1():
    with tempfile.TemporaryDirectory() as d:
        api = Api(d, versions="v1beta1")
        try:
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE,
                                   "--resource-api-version", "v1beta1", "--namespace", "default")
            assert rc == 1, (rc, out, err)
            assert out == EXPECTED_TABLE.split("team/")[0] % ("", ""), out
            a = api.claim("default", "a-two", "v1beta1")
            assert a["apiVersion"] == "resource.k8s.io/v1beta1"
            assert a["status"]["allocation"]["devices"]["results"] == [
                result("gpu", "gpu-1"), result("gpu", "gpu-2")], a
            # the v1beta1 request shape (no `exactly`) was read as the scheduler reads it
            assert a["spec"]["devices"]["requests"] == [
                {"name": "gpu", "deviceClassName": NV, "count": 2}], a
            rc, out, err = kdevctl("--kubeconfig", api.kubeconfig, "--node", NODE)
            assert rc == 1 and "v1beta1" in err, (rc, out, err)
        finally:
            api.close()


HINT = "Run 'kdevctl dra allocate --help' for usage.\n"


def test_usage():
    rc, out, err = kdevctl()
    assert (rc, err) == (2, "kdevctl dra allocate: --node NAME is required\n" + HINT), (rc, err)
    rc, out, err = kdevctl("--node", "n", "--claim", "x")
    assert (rc, err) == (2, "kdevctl dra allocate: --claim needs --namespace\n" + HINT), (rc, err)
    rc, out, err = kdevctl("--node", "n", "--resource-api-version", "v2")
    assert rc == 2 and "must be v1 or v1beta1" in err, (rc, err)
    rc, out, err = kdevctl("--help")
    assert rc == 0 and out.startswith("Usage: kdevctl dra allocate --node NAME"), out


if __name__ == "__main__":
    kt.run_tests([test_allocate_writes_status, test_dry_run_json, test_v1beta1, test_usage])
