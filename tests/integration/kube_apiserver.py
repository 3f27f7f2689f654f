"""The stand-in API server (tests/kubeapi/server.py) keeps the semantics kdev's
tests rely on: resourceVersion, 404/409/422 with Status bodies, generateName,
field selectors on LIST and DELETE collection, v1beta1 conversion, PUT of the
status subresource, owner-reference cleanup, bearer tokens, faults and
down/up, HTTPS with its test CA. Python stdlib only."""
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("KDEV_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.path.join(SRC, "tests", "kubeapi", "server.py")
TOKEN = "t0ken"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def start(*args):
    p = subprocess.Popen([sys.executable, SERVER, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    info = json.loads(p.stdout.readline())
    return p, info


def stop(p):
    p.stdin.close()
    p.terminate()
    p.wait(timeout=30)


class Api:
    def __init__(self, port, token=TOKEN, ctx=None):
        self.port, self.token, self.ctx = port, token, ctx

    def req(self, method, path, body=None):
        if self.ctx:
            c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)
        else:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Content-Type": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, (json.loads(data) if data else None), r


def slice_obj(gen, node, driver):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": gen},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}]}}


def main():
    p, info = start("--token", TOKEN)
    try:
        api = Api(info["port"])
        adm = Api(info["admin_port"], token=None)

        # auth
        st, body, _ = Api(info["port"], token="nope").req("GET", SLICES)
        check(st == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized",
              "401 without the token: %s %s" % (st, body))

        # generateName, uid, resourceVersion
        st, a, _ = api.req("POST", SLICES, slice_obj("n1-d1-", "n1", "d1"))
        check(st == 201, "create: 201, got %s" % st)
        name = a["metadata"]["name"]
        check(name.startswith("n1-d1-") and len(name) == len("n1-d1-") + 5,
              "generateName adds 5 characters: %s" % name)
        rv1 = int(a["metadata"]["resourceVersion"])
        st, b, _ = api.req("POST", SLICES, slice_obj("n1-d2-", "n1", "d2"))
        check(int(b["metadata"]["resourceVersion"]) > rv1, "resourceVersion increases")
        api.req("POST", SLICES, slice_obj("n2-d1-", "n2", "d1"))
        st, body, _ = api.req("POST", SLICES, {"spec": {"driver": "d"}})
        check(st == 422 and "name or generateName is required" in body["message"],
              "no name: 422 %s" % body)
        dup = slice_obj("x", "n9", "d9")
        dup["metadata"] = {"name": name}
        st, body, _ = api.req("POST", SLICES, dup)
        check(st == 409 and body["reason"] == "AlreadyExists", "409 AlreadyExists: %s" % body)

        # field selectors
        def names(q):
            st, lst, _ = api.req("GET", SLICES + q)
            check(st == 200 and lst["kind"] == "ResourceSliceList", "list %s: %s" % (q, st))
            return sorted(i["spec"]["nodeName"] + "/" + i["spec"]["driver"]
                          for i in lst["items"])
        check(names("?fieldSelector=spec.nodeName%3Dn1") == ["n1/d1", "n1/d2"], "nodeName")
        check(names("?fieldSelector=spec.driver%3Dd1") == ["n1/d1", "n2/d1"], "driver")
        check(names("?fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dd1") == ["n1/d1"],
              "both")
        check(names("?fieldSelector=spec.driver!%3Dd1") == ["n1/d2"], "!=")
        st, body, _ = api.req("GET", SLICES + "?fieldSelector=spec.pool%3Dx")
        check(st == 400 and "not a known field selector" in body["message"], "unknown field")
        st, lst, _ = api.req("GET", SLICES + "?limit=2")
        check(len(lst["items"]) == 2 and lst["metadata"]["continue"] == "2", "limit")
        st, lst, _ = api.req("GET", SLICES + "?limit=2&continue=2")
        check(len(lst["items"]) == 1 and "continue" not in lst["metadata"], "continue")

        # update: 409 stale, 422 no rv, 422 immutable
        st, cur, _ = api.req("GET", SLICES + "/" + name)
        cur["spec"]["pool"]["generation"] = 2
        st, upd, _ = api.req("PUT", SLICES + "/" + name, cur)
        check(st == 200 and upd["spec"]["pool"]["generation"] == 2, "update")
        check(upd["metadata"]["uid"] == a["metadata"]["uid"], "uid kept")
        st, body, _ = api.req("PUT", SLICES + "/" + name, cur)
        check(st == 409 and body["reason"] == "Conflict" and
              "the object has been modified" in body["message"], "stale: 409 %s" % body)
        del upd["metadata"]["resourceVersion"]
        st, body, _ = api.req("PUT", SLICES + "/" + name, upd)
        check(st == 422, "PUT without resourceVersion: 422, got %s" % st)
        st, upd, _ = api.req("GET", SLICES + "/" + name)
        upd["spec"]["nodeName"] = "elsewhere"
        st, body, _ = api.req("PUT", SLICES + "/" + name, upd)
        check(st == 422 and "field is immutable" in body["message"], "nodeName immutable")
        st, body, _ = api.req("GET", SLICES + "/nope")
        check(st == 404 and body["reason"] == "NotFound" and
              body["message"] == 'resourceslices.resource.k8s.io "nope" not found' and
              body["details"]["name"] == "nope", "404 Status: %s" % body)

        # v1beta1: devices wrapped in basic, both ways
        st, beta, _ = api.req("GET", "/apis/resource.k8s.io/v1beta1/resourceslices/" + name)
        check(beta["apiVersion"] == "resource.k8s.io/v1beta1" and
              beta["spec"]["devices"][0] == {"name": "gpu-0", "basic": {
                  "attributes": {"index": {"int": 0}}}}, "v1beta1 shape: %s" % beta)
        st, made, _ = api.req("POST", "/apis/resource.k8s.io/v1beta1/resourceslices",
                              {"metadata": {"name": "beta"}, "spec": {
                                  "driver": "d3", "nodeName": "n3",
                                  "devices": [{"name": "g", "basic": {"attributes": {}}}]}})
        st, v1, _ = api.req("GET", SLICES + "/beta")
        check(v1["spec"]["devices"] == [{"name": "g", "attributes": {}}], "v1beta1 in -> v1")
        p2, info2 = start("--versions", "v1beta1")
        try:
            st, _, _ = Api(info2["port"], token=None).req("GET", SLICES)
            check(st == 404, "unserved version: 404, got %s" % st)
        finally:
            stop(p2)

        # delete preconditions, DELETE collection
        st, body, _ = api.req("DELETE", SLICES + "/" + name,
                              {"preconditions": {"uid": "other"}})
        check(st == 409 and "Precondition failed" in body["message"], "uid precondition")
        st, body, _ = api.req("DELETE", SLICES + "?fieldSelector=spec.driver%3Dd1")
        check(st == 200 and len(body["items"]) == 2, "DELETE collection: %s" % body)
        check(names("") == ["n1/d2", "n3/d3"], "left after DELETE collection")

        # claims: seeded allocation; status subresource
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c1", "namespace": "ns1"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     "deviceClassName": "gpu.nvidia.com"}}]}},
                 "status": {"allocation": {"devices": {"results": [{
                     "request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1",
                     "device": "gpu-0"}]}}}}
        adm.req("POST", "/_admin/objects", claim)
        cpath = "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1"
        st, c, _ = api.req("GET", cpath)
        check(st == 200 and c["status"]["allocation"]["devices"]["results"][0]["device"] ==
              "gpu-0" and c["metadata"]["uid"], "seeded claim")
        st, cb, _ = api.req("GET", cpath.replace("/v1/", "/v1beta1/"))
        check(cb["spec"]["devices"]["requests"][0] == {"name": "gpu",
                                                        "deviceClassName": "gpu.nvidia.com"},
              "claim v1beta1 request shape: %s" % cb["spec"])
        c2 = json.loads(json.dumps(c))
        c2["status"] = {}
        st, put, _ = api.req("PUT", cpath, c2)
        check("allocation" in put["status"], "PUT on the main resource keeps status")
        put["status"]["devices"] = [{"driver": "gpu.nvidia.com", "pool": "n1",
                                     "device": "gpu-0"}]
        st, put2, _ = api.req("PUT", cpath + "/status", put)
        check(st == 200 and put2["status"]["devices"][0]["device"] == "gpu-0", "status PUT")
        st, lst, _ = api.req("GET", "/apis/resource.k8s.io/v1/resourceclaims")
        check(len(lst["items"]) == 1, "claims across namespaces")

        # nodes and owner references
        adm.req("POST", "/_admin/objects", {"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": "n1"}})
        st, node, _ = api.req("GET", "/api/v1/nodes/n1")
        owned = slice_obj("own-", "n1", "d5")
        owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node",
                                                 "name": "n1", "uid": node["metadata"]["uid"],
                                                 "controller": True}]
        api.req("POST", SLICES, owned)
        api.req("DELETE", "/api/v1/nodes/n1")
        check(names("?fieldSelector=spec.driver%3Dd5") == [], "owned slices go with the Node")

        # faults, request log, down/up
        adm.req("DELETE", "/_admin/requests")
        adm.req("POST", "/_admin/faults", {"status": 429, "count": 1, "retry_after": 3})
        st, _, r = api.req("GET", SLICES)
        check(st == 429 and r.getheader("Retry-After") == "3", "429 fault with Retry-After")
        st, _, _ = api.req("GET", SLICES)
        check(st == 200, "fault count spent")
        st, log, _ = adm.req("GET", "/_admin/requests")
        check([e["status"] for e in log["items"]] == [429, 200], "request log: %s" % log)
        adm.req("POST", "/_admin/down", {})
        try:
            api.req("GET", SLICES)
            check(False, "down: request should fail")
        except OSError:
            pass
        adm.req("POST", "/_admin/up", {})
        st, _, _ = api.req("GET", SLICES)
        check(st == 200, "up again on the same port")
        adm.req("POST", "/_admin/down", {"seconds": 0.5})
        deadline = time.monotonic() + 30
        ok = False
        while time.monotonic() < deadline and not ok:
            try:
                ok = api.req("GET", SLICES)[0] == 200
            except OSError:
                time.sleep(0.05)
        check(ok, "back after a timed down")
    finally:
        stop(p)

    # HTTPS with the test CA and a client certificate
    if shutil.which("openssl"):
        d = tempfile.mkdtemp(prefix="kdev-kubeapi-")
        try:
            p, info = start("--tls", d, "--client-cert-auth")
            try:
                ctx = ssl.create_default_context(cafile=info["ca"])
                st, _, _ = Api(info["port"], token=None, ctx=ctx).req("GET", SLICES)
                check(st == 401, "TLS without a client certificate: 401, got %s" % st)
                ctx.load_cert_chain(info["client_cert"], info["client_key"])
                st, _, _ = Api(info["port"], token=None, ctx=ctx).req("GET", SLICES)
                check(st == 200, "TLS with a client certificate: 200, got %s" % st)
                try:
                    Api(info["port"], token=None,
                        ctx=ssl.create_default_context()).req("GET", SLICES)
                    check(False, "the test CA must not be trusted by default")
                except ssl.SSLError:
                    pass
            finally:
                stop(p)
        finally:
            shutil.rmtree(d, True)
    else:
        print("openssl missing: TLS part skipped")

    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
