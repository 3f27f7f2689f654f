"""kdev-dra-plugin end to end: the daemon on the mock libnvidia-ml.so.1 (h100
topology, 8 GPUs) against the stand-in API server (tests/kubeapi/server.py),
with this test acting as kubelet over gRPC: GetInfo and
NotifyRegistrationStatus on the registration socket, NodePrepareResources
(CDI IDs, CDI spec with the GPU's device node), idempotent repeat,
NodeUnprepareResources (spec removed), the published ResourceSlices, a slice
deleted by someone else coming back, SIGTERM (exit 0, sockets removed), and
health: a critical XID withdraws the GPU, recovery brings it back."""
import http.client
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402

grpc = kt.grpc
EXE = os.path.join(kt.BUILD_DIR, "kdev-dra-plugin")
SERVER = os.path.join(kt.SOURCE_DIR, "tests", "kubeapi", "server.py")
TOKEN = "dra-test-token"
NODE = "node-a"
DRIVER = "gpu.nvidia.com"
CLAIM_UID = "1b6b4c1e-7e3a-4b0e-9d55-2f1a0c3e9a01"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def compile_protos(*protos):
    """Python classes of |protos| (paths under proto/), importable as
    <dir>.<version>.api_pb2 from then on."""
    out = tempfile.mkdtemp(prefix="kdev-dra-pb-")
    __import__("atexit").register(__import__("shutil").rmtree, out, True)
    subprocess.run(["protoc", "-I", os.path.join(kt.SOURCE_DIR, "proto"), "--python_out=" + out,
                    *protos], check=True)
    sys.path.insert(0, out)


def load_protos():
    compile_protos("pluginregistration/v1/api.proto", "dra/v1/api.proto")
    return (importlib.import_module("pluginregistration.v1.api_pb2"),
            importlib.import_module("dra.v1.api_pb2"))


reg_pb, dra_pb = load_protos()


def seed_objects():
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "uid": "0d2c5a6e-node-uid"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "claim-1", "namespace": "default", "uid": CLAIM_UID},
             "spec": {"devices": {"requests": [
                 {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]}}}}
    return [node, claim]


class Api:
    def __init__(self, info):
        self.port = info["port"]
        self.admin_port = int(info["admin_url"].rsplit(":", 1)[1])

    def req(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
        c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, (json.loads(data) if data else None)

    def admin(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=30)
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, (json.loads(data) if data else None)

    def slices(self):
        st, body = self.req("GET", SLICES)
        assert st == 200, (st, body)
        return body["items"]


class Env:
    """Stand-in API server + kdev-dra-plugin in a temp dir."""

    def __init__(self, root, extra=(), before_start=None, topology=None, env_extra=None,
                 objects=None, server_args=()):
        self.root = root
        self.registry = os.path.join(root, "plugins_registry")
        self.plugin_dir = os.path.join(root, "plugins", DRIVER)
        self.cdi = os.path.join(root, "cdi")
        seed = os.path.join(root, "seed.json")
        with open(seed, "w") as f:
            json.dump(seed_objects() + list(objects or ()), f)
        self.server = subprocess.Popen([sys.executable, SERVER, "--token", TOKEN, "--seed", seed,
                                        *server_args],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.info = json.loads(self.server.stdout.readline())
        self.api = Api(self.info)
        self.kubeconfig = os.path.join(root, "kubeconfig")
        kt.write_kubeconfig(self.kubeconfig, self.info["url"], TOKEN)
        if before_start:
            before_start(self)
        control = os.path.join(root, "control")
        open(control, "a").close()
        env = dict(os.environ)
        env.update({"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR,
                    "KDEV_MOCK_NVML_TOPOLOGY": topology or kt.H100_TOPO,
                    "KDEV_MOCK_NVML_CONTROL": control,
                    "KDEV_DRA_RESYNC_SECONDS": "1"})
        env.update(env_extra or {})
        self.log_path = os.path.join(root, "plugin.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*kt.WRAP, EXE, "--node-name", NODE, "--plugins-registry", self.registry,
             "--plugin-dir", self.plugin_dir, "--cdi-dir", self.cdi, "--kubeconfig",
             self.kubeconfig, "--log-level", "debug", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def reg_sock(self):
        return os.path.join(self.registry, DRIVER + "-reg.sock")

    def dra_sock(self):
        return os.path.join(self.plugin_dir, "dra.sock")

    def register(self):
        """Plays kubelet's plugin watcher: waits for the registration socket
        (the plugin must still run), GetInfo, NotifyRegistrationStatus
        (registered). Returns the PluginInfo."""
        wait_for(lambda: kt.sock_accepts(self.reg_sock()) or self.proc.poll() is not None,
                 what="registration socket")
        assert self.proc.poll() is None, self.logtext()
        info = self.call(self.reg_sock(), "/pluginregistration.Registration/GetInfo",
                         reg_pb.InfoRequest(), reg_pb.PluginInfo)
        self.call(self.reg_sock(), "/pluginregistration.Registration/NotifyRegistrationStatus",
                  reg_pb.RegistrationStatus(plugin_registered=True),
                  reg_pb.RegistrationStatusResponse)
        return info

    def stop(self, timeout=30):
        """SIGTERM; kdev-dra-plugin must exit 0 within timeout * TIMEOUT_SCALE s."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout * kt.TIMEOUT_SCALE)
        assert rc == 0, (rc, self.logtext())

    def call(self, sock, method, req, resp_cls):
        ch = grpc.insecure_channel("unix:" + sock)
        try:
            f = ch.unary_unary(method, request_serializer=type(req).SerializeToString,
                               response_deserializer=resp_cls.FromString)
            return f(req, timeout=30 * kt.TIMEOUT_SCALE)
        finally:
            ch.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if self.server.poll() is None:
            self.server.stdin.close()
            self.server.terminate()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # a fixture that hangs must not hang the suite (an orphan
                # holding ctest's pipes): dump its threads, then kill it
                sys.stderr.write("stand-in API server did not exit on EOF+SIGTERM; "
                                 "its threads:\n")
                self.server.send_signal(signal.SIGUSR1)
                time.sleep(1)
                self.server.kill()
                self.server.wait()
        self.server.stdout.close()


def prepare_req():
    req = dra_pb.NodePrepareResourcesRequest()
    c = req.claims.add()
    c.namespace, c.uid, c.name = "default", CLAIM_UID, "claim-1"
    return req


def unprepare_req():
    req = dra_pb.NodeUnprepareResourcesRequest()
    c = req.claims.add()
    c.namespace, c.uid, c.name = "default", CLAIM_UID, "claim-1"
    return req


PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
UNPREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"


def allocated_claim(name, uid, request, device_class, result_extra=None, device="gpu-0"):
    """A ResourceClaim default/|name| allocated |device| of this node's pool
    for request |request| of class |device_class| (resource.k8s.io/v1);
    |result_extra| is merged into the allocation result."""
    result = {"request": request, "driver": DRIVER, "pool": NODE, "device": device}
    result.update(result_extra or {})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"devices": {"requests": [
                {"name": request, "exactly": {"deviceClassName": device_class}}]}},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def named_req(cls, uids, *names):
    """A NodePrepare/NodeUnprepare request for claims default/<name> with
    their UIDs from |uids|."""
    r = cls()
    for n in names:
        c = r.claims.add()
        c.namespace, c.uid, c.name = "default", uids[n], n
    return r


def prepare_named(e, uids, *names):
    return e.call(e.dra_sock(), PREPARE,
                  named_req(dra_pb.NodePrepareResourcesRequest, uids, *names),
                  dra_pb.NodePrepareResourcesResponse)


def unprepare_named(e, uids, *names):
    return e.call(e.dra_sock(), UNPREPARE,
                  named_req(dra_pb.NodeUnprepareResourcesRequest, uids, *names),
                  dra_pb.NodeUnprepareResourcesResponse)


def pool_slices(api, down_ok=False):
    if down_ok:
        try:
            return pool_slices(api)
        except ConnectionError:
            return []
    return [s for s in api.slices()
            if s["spec"].get("nodeName") == NODE and s["spec"]["driver"] == DRIVER]


def test_dra_plugin_end_to_end():
    with TempDir() as d:
        e = Env(os.path.dirname(d))
        with kt.logged(e):
            wait_for(lambda: kt.sock_accepts(e.reg_sock()) or e.proc.poll() is not None,
                     what="registration socket")
            assert e.proc.poll() is None, e.logtext()

            # kubelet: GetInfo, exact fields
            info = e.call(e.reg_sock(), "/pluginregistration.Registration/GetInfo",
                          reg_pb.InfoRequest(), reg_pb.PluginInfo)
            assert info.type == "DRAPlugin", info
            assert info.name == DRIVER, info
            assert info.endpoint == os.path.realpath(e.plugin_dir) + "/dra.sock", info
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin",
                                                     "v1alpha1.DRAResourceHealth"], info
            assert os.path.exists(info.endpoint)

            e.call(e.reg_sock(), "/pluginregistration.Registration/NotifyRegistrationStatus",
                   reg_pb.RegistrationStatus(plugin_registered=True),
                   reg_pb.RegistrationStatusResponse)
            wait_for(lambda: "registered with kubelet" in e.logtext(), what="status logged")

            # slices: 8 GPUs in one pool named after the node
            sl = wait_for(lambda: pool_slices(e.api), what="ResourceSlices")
            assert len(sl) == 1, sl
            s = sl[0]
            assert s["spec"]["pool"]["name"] == NODE, s
            assert s["spec"]["pool"]["resourceSliceCount"] == 1, s
            names = sorted(dev["name"] for dev in s["spec"]["devices"])
            assert names == ["gpu-%d" % i for i in range(8)], names
            for dev in s["spec"]["devices"]:
                assert dev["attributes"]["brand"] == {"string": "Nvidia"}, dev
                assert dev["attributes"]["productName"] == \
                    {"string": "NVIDIA H100 80GB HBM3"}, dev
                assert dev["capacity"] == {"memory": {"value": "81559Mi"},
                                           "multiprocessors": {"value": "132"}}, dev
            owners = s["metadata"].get("ownerReferences")
            assert owners and owners[0]["kind"] == "Node" and owners[0]["name"] == NODE, owners

            # NodePrepareResources
            want_id = "k8s.gpu.nvidia.com/claim=%s-gpu-0" % CLAIM_UID
            r = e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            assert list(r.claims.keys()) == [CLAIM_UID], r
            cr = r.claims[CLAIM_UID]
            assert cr.error == "", cr.error
            assert len(cr.devices) == 1, cr
            dev = cr.devices[0]
            assert list(dev.request_names) == ["gpu"], dev
            assert dev.pool_name == NODE and dev.device_name == "gpu-0", dev
            assert list(dev.cdi_device_ids) == [want_id], dev
            spec_path = os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % CLAIM_UID)
            with open(spec_path) as f:
                spec = json.load(f)
            assert spec["kind"] == "k8s.gpu.nvidia.com/claim", spec
            cdev = [x for x in spec["devices"] if x["name"] == CLAIM_UID + "-gpu-0"]
            assert len(cdev) == 1, spec
            paths = [n["path"] for n in cdev[0]["containerEdits"]["deviceNodes"]]
            assert paths == ["/dev/nvidia0"], paths

            # idempotent repeat: same answer, same file
            r2 = e.call(info.endpoint, PREPARE, prepare_req(),
                        dra_pb.NodePrepareResourcesResponse)
            assert r2 == r, (r2, r)
            assert os.path.exists(spec_path)

            # NodeUnprepareResources: spec gone; repeat succeeds
            for _ in range(2):
                u = e.call(info.endpoint, UNPREPARE, unprepare_req(),
                           dra_pb.NodeUnprepareResourcesResponse)
                assert list(u.claims.keys()) == [CLAIM_UID], u
                assert u.claims[CLAIM_UID].error == "", u
                assert not os.path.exists(spec_path)

            # a slice deleted by someone else comes back (resync 1 s)
            old = pool_slices(e.api)[0]["metadata"]["name"]
            st, body = e.api.req("DELETE", SLICES + "/" + old)
            assert st == 200, (st, body)
            back = wait_for(lambda: [x for x in pool_slices(e.api)
                                     if x["metadata"]["name"] != old],
                            what="slice re-created")
            assert len(back) == 1, back
            assert len(back[0]["spec"]["devices"]) == 8, back

            # SIGTERM: exit 0, sockets removed, slices left
            e.stop()
            assert not os.path.exists(e.reg_sock())
            assert not os.path.exists(e.dra_sock())
            assert len(pool_slices(e.api)) == 1


def test_api_server_down_at_start_v1beta1():
    """The API server is down when the daemon starts: the error is logged, the
    reconcile is retried with backoff and the pool appears once the server is
    back; --resource-api-version v1beta1 makes it speak v1beta1 only."""
    def down(env):
        # down until the error is logged, not for a time: a slow start
        # (valgrind) must not outlast the outage
        st, _ = env.api.admin("POST", "/_admin/down", {})
        assert st == 200, st

    with TempDir() as d:
        e = Env(os.path.dirname(d), extra=("--resource-api-version", "v1beta1"),
                before_start=down)
        with kt.logged(e):
            wait_for(lambda: "cannot publish the ResourceSlices" in e.logtext(),
                     what="reconcile error logged")
            assert e.proc.poll() is None, e.logtext()
            # still serving kubelet meanwhile
            info = e.call(e.reg_sock(), "/pluginregistration.Registration/GetInfo",
                          reg_pb.InfoRequest(), reg_pb.PluginInfo)
            assert info.name == DRIVER, info
            assert pool_slices(e.api, down_ok=True) == [], "the API server is down"
            st, _ = e.api.admin("POST", "/_admin/up", {})
            assert st == 200, st
            sl = wait_for(lambda: pool_slices(e.api, down_ok=True), timeout=40,
                          what="slices after the outage")
            assert len(sl) == 1 and len(sl[0]["spec"]["devices"]) == 8, sl
            st, reqs = e.api.admin("GET", "/_admin/requests")
            paths = {r["path"].split("?")[0] for r in reqs["items"]
                     if r["path"].startswith("/apis/resource.k8s.io/")}
            paths.discard(SLICES)  # this test's own LISTs
            assert all(p.startswith("/apis/resource.k8s.io/v1beta1/") for p in paths), paths
            assert "/apis/resource.k8s.io/v1beta1/resourceslices" in paths, paths
            e.stop()


def test_health_withdraws_and_restores():
    """A critical XID (79) on one GPU withdraws its device from the slice (new
    generation); after the quiet period a passing probe brings it back. XID
    13 (ignored by default) changes nothing."""
    uuid = kt.H100_UUIDS[3]

    def devs(sl):
        assert len(sl) == 1, sl
        return {d["attributes"]["uuid"]["string"]: d["name"] for d in sl[0]["spec"]["devices"]}

    with TempDir() as d:
        e = Env(os.path.dirname(d),
                extra=("--health-probe-interval", "1", "--health-quiet-period", "2"))
        with kt.logged(e):
            sl = wait_for(lambda: pool_slices(e.api), what="ResourceSlices")
            before = devs(sl)
            assert len(before) == 8, before
            name = before[uuid]
            gen0 = sl[0]["spec"]["pool"]["generation"]
            with open(os.path.join(e.root, "control"), "a") as f:
                f.write("xid %s 13\n" % kt.H100_UUIDS[5])
                f.write("xid %s 79\n" % uuid)
            gone = wait_for(lambda: [x for x in pool_slices(e.api)
                                     if uuid not in devs([x])],
                            timeout=30, what="unhealthy GPU withdrawn")
            after = devs(gone)
            assert sorted(after.values()) == sorted(v for v in before.values() if v != name), after
            assert gone[0]["spec"]["pool"]["generation"] > gen0, gone
            assert "device health changed" in e.logtext()
            back = wait_for(lambda: [x for x in pool_slices(e.api) if uuid in devs([x])],
                            timeout=40, what="recovered GPU published again")
            assert devs(back) == before, devs(back)
            e.stop()


def test_flags():
    """--version, --help, and usage errors (exit 2, nothing started)."""
    env = dict(os.environ)
    env.pop("NODE_NAME", None)
    r = subprocess.run([EXE, "--version"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith("kdev-dra-plugin "), r
    r = subprocess.run([EXE, "--help"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "--resource-api-version" in r.stdout, r
    r = subprocess.run([EXE], capture_output=True, text=True, env=env)
    assert r.returncode == 2, r
    want = ("kdev-dra-plugin: no node name: set --node-name or NODE_NAME\n"
            "Run 'kdev-dra-plugin --help' for the options.\n")
    assert r.stderr == want, r.stderr
    r = subprocess.run([EXE, "--node-name", "n", "--resource-api-version", "v2"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2, r
    assert "want v1 or v1beta1" in r.stderr, r.stderr
    test_flag_values(env)


def test_flag_values(env):
    """Bad values are usage errors (exit 2, one line and the --help hint),
    found before anything starts: no NVML (the mock library is not even on
    the library path), no directory created."""
    hint = "Run 'kdev-dra-plugin --help' for the options.\n"
    sub = "want whole seconds between 1 and 86400"
    dns = "want a DNS subdomain of at most %d characters (lower-case letters, digits, '-' and '.')"
    cases = [
        (["--health-probe-interval", "-1"], {},
         'invalid --health-probe-interval "-1": ' + sub),
        (["--health-probe-interval", "abc"], {},
         'invalid --health-probe-interval "abc": ' + sub),
        (["--health-quiet-period", "0"], {}, 'invalid --health-quiet-period "0": ' + sub),
        (["--health-quiet-period", "86401"], {},
         'invalid --health-quiet-period "86401": ' + sub),
        (["--health-probe-interval", " 5"], {},
         'invalid --health-probe-interval " 5": ' + sub),
        ([], {"NODE_NAME": "bad node!"},
         'invalid node name "bad node!" (--node-name or NODE_NAME): ' + dns % 253),
        (["--node-name", "Node-1"], {},
         'invalid node name "Node-1" (--node-name or NODE_NAME): ' + dns % 253),
        (["--node-name", "a" * 254], {},
         'invalid node name "%s" (--node-name or NODE_NAME): ' % ("a" * 254) + dns % 253),
        (["--node-name", "n-", ], {},
         'invalid node name "n-" (--node-name or NODE_NAME): ' + dns % 253),
        (["--driver-name", "gpu/x"], {}, 'invalid --driver-name "gpu/x": ' + dns % 63),
        (["--driver-name", "g" * 64], {},
         'invalid --driver-name "%s": ' % ("g" * 64) + dns % 63),
        (["--cdi-dir", ""], {}, "--cdi-dir must not be empty"),
        (["--kubeconfig", ""], {}, "--kubeconfig must not be empty"),
        (["--plugin-dir", ""], {}, "--plugin-dir must not be empty"),
        ([], {"KDEV_DRA_RESYNC_SECONDS": "0"},
         'invalid KDEV_DRA_RESYNC_SECONDS "0": want seconds greater than 0 and at most 86400'),
        ([], {"KDEV_DRA_RESYNC_SECONDS": "x"},
         'invalid KDEV_DRA_RESYNC_SECONDS "x": want seconds greater than 0 and at most 86400'),
        (["--metrics-address", "127.0.0.1"], {},
         'invalid --metrics-address "127.0.0.1": want HOST:PORT (e.g. 127.0.0.1:9400, '
         '[::1]:9400, :9400), with PORT 0..65535'),
        ([], {"KDEV_METRICS_ADDRESS": "x:99999"},
         'invalid KDEV_METRICS_ADDRESS "x:99999": want HOST:PORT (e.g. 127.0.0.1:9400, '
         '[::1]:9400, :9400), with PORT 0..65535'),
    ]
    with TempDir() as d:
        for args, extra, msg in cases:
            e = dict(env)
            e.update(extra)
            node = [] if "NODE_NAME" in extra or "--node-name" in args else ["--node-name", "n"]
            reg = os.path.join(d, "reg")
            r = subprocess.run([EXE, *node, "--plugins-registry", reg, *args],
                               capture_output=True, text=True, env=e)
            assert r.returncode == 2, (args, extra, r)
            assert r.stderr == "kdev-dra-plugin: " + msg + "\n" + hint, (args, r.stderr)
            assert r.stdout == "", r.stdout
            assert not os.path.exists(reg), args
        # accepted values get past the flags (NVML then fails: not a usage error)
        r = subprocess.run([EXE, "--node-name", "node-1.example", "--health-probe-interval",
                            "86400", "--health-quiet-period", "1", "--plugins-registry",
                            os.path.join(d, "r"), "--plugin-dir", os.path.join(d, "p"),
                            "--cdi-dir", os.path.join(d, "c"), "--driver-root", "/nonexistent"],
                           capture_output=True, text=True,
                           env=dict(env, KDEV_DRA_RESYNC_SECONDS="0.5"))
        assert r.returncode == 1, r


def metric_lines(port):
    """{series line without value: value} of GET /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    r = c.getresponse()
    assert r.status == 200, r.status
    text = r.read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return text, out


def test_metrics():
    """--metrics-address: prepared claims, claim operations by result with
    their latency, slice publishes; exact values after a known sequence, and
    the families in a real Prometheus where one is installed. A port in use
    is a start failure."""
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    with TempDir() as d:
        e = Env(os.path.dirname(d), extra=("--metrics-address", "127.0.0.1:%d" % port))
        with kt.logged(e):
            info = e.register()
            wait_for(lambda: pool_slices(e.api), what="ResourceSlices")
            r = e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            assert r.claims[CLAIM_UID].error == "", r
            e.call(info.endpoint, PREPARE, prepare_req(), dra_pb.NodePrepareResourcesResponse)
            bad = dra_pb.NodePrepareResourcesRequest()
            c = bad.claims.add()
            c.namespace, c.uid, c.name = "default", "00000000-0000-4000-8000-00000000dead", "nope"
            r = e.call(info.endpoint, PREPARE, bad, dra_pb.NodePrepareResourcesResponse)
            assert r.claims[c.uid].error != "", r
            text, m = metric_lines(port)
            assert m["kdev_dra_prepared_claims"] == 1, text
            assert m['kdev_dra_claim_operations_total{operation="prepare",result="ok"}'] == 2, text
            assert m['kdev_dra_claim_operations_total{operation="prepare",result="error"}'] == 1
            assert m['kdev_dra_claim_operations_total{operation="unprepare",result="ok"}'] == 0
            assert m['kdev_dra_claim_operation_duration_seconds_count{operation="prepare"}'] == 3
            assert m['kdev_dra_claim_operation_duration_seconds_bucket{operation="prepare",'
                     'le="+Inf"}'] == 3
            assert m['kdev_dra_slice_publishes_total{result="ok"}'] >= 1, text
            assert m['kdev_dra_slice_publishes_total{result="error"}'] == 0, text
            assert m["kdev_dra_slice_generation"] >= 1, text
            assert any(k.startswith("kdev_build_info{") for k in m), text
            e.call(info.endpoint, UNPREPARE, unprepare_req(), dra_pb.NodeUnprepareResourcesResponse)
            text, m = metric_lines(port)
            assert m["kdev_dra_prepared_claims"] == 0, text
            assert m['kdev_dra_claim_operations_total{operation="unprepare",result="ok"}'] == 1
            assert 'msg="serving metrics" address=127.0.0.1:%d port=%d path=/metrics' % (
                port, port) in e.logtext(), e.logtext()
            sys.path.insert(0, os.path.dirname(__file__))
            from prometheus_scrape import HAVE_PROMETHEUS, Prometheus, L
            if HAVE_PROMETHEUS:
                prom = Prometheus(port)
                try:
                    prom.wait_ready()
                    prom.wait_values("kdev_dra_prepared_claims", {L(): 0.0})
                    prom.wait_values('kdev_dra_claim_operations_total{operation="prepare"}', {
                        L(operation="prepare", result="ok"): 2.0,
                        L(operation="prepare", result="error"): 1.0})
                    prom.wait_values('kdev_dra_claim_operation_duration_seconds_count', {
                        L(operation="prepare"): 3.0, L(operation="unprepare"): 1.0})
                    prom.wait_values('kdev_dra_slice_publishes_total{result="ok"} > bool 0',
                                     {L(result="ok"): 1.0})
                    prom.wait_values("kdev_dra_slice_generation > bool 0", {L(): 1.0})
                finally:
                    prom.stop()
            else:
                print("Prometheus part skipped: no %s" % "prometheus")
            # a second plugin on the same port: start failure, exit 1
            r = subprocess.run([EXE, "--node-name", NODE, "--plugins-registry",
                                os.path.join(d, "reg2"), "--plugin-dir", os.path.join(d, "p2"),
                                "--cdi-dir", os.path.join(d, "c2"), "--kubeconfig",
                                e.kubeconfig, "--metrics-address", "127.0.0.1:%d" % port],
                               capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                                        KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO))
            assert r.returncode == 1, r
            assert "cannot listen on 127.0.0.1:%d: Address already in use" % port in r.stderr, \
                r.stderr
            e.stop()


if __name__ == "__main__":
    if not os.path.exists(EXE):
        print("SKIP: %s not built" % EXE)
        sys.exit(kt.SKIP)
    kt.run_tests([test_dra_plugin_end_to_end, test_api_server_down_at_start_v1beta1,
                  test_health_withdraws_and_restores, test_flags, test_metrics])
