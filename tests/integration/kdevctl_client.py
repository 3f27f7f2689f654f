"""kdevctl's device-plugin client commands (options, allocate, preferred,
watch, plugins) against a grpcio device plugin written here: exact table
and -o json output, the exact request bytes the plugin receives (compared
with the wire vectors in tests/data/vectors), rpc error lines and exit
statuses, usage errors."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, api, grpc, wait_for  # noqa: E402

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
VEC = os.path.join(kt.SOURCE_DIR, "tests", "data", "vectors", "deviceplugin-v1beta1")


def vec_bin(name):
    with open(os.path.join(VEC, name + ".bin"), "rb") as f:
        return f.read()


def vec_json_text(name):
    with open(os.path.join(VEC, name + ".json"), encoding="utf-8") as f:
        return f.read()


class FakePlugin:
    """A device plugin on DIR/NAME served by grpcio generic handlers. It
    records the raw request bytes of every call."""

    def __init__(self, directory, name="vendor.sock"):
        self.path = os.path.join(directory, name)
        self.requests = []          # (method, bytes)
        self.lock = threading.Lock()
        self.options = api.DevicePluginOptions(get_preferred_allocation_available=True)
        self.allocate_response = api.AllocateResponse.FromString(vec_bin("09_allocate_response"))
        self.allocate_delay = 0.0
        self.lw_script = []          # messages to send, then "block" or end
        self.lw_cancelled = threading.Event()
        self.server = None

    def _record(self, method, req):
        with self.lock:
            self.requests.append((method, req.SerializeToString()))

    def _options(self, req, context):
        self._record("options", req)
        return self.options

    def _allocate(self, req, context):
        self._record("allocate", req)
        if self.allocate_delay:
            time.sleep(self.allocate_delay)
        for c in req.container_requests:
            for i in c.devices_ids:
                if i.startswith("missing"):
                    context.abort(grpc.StatusCode.NOT_FOUND, "unknown device: " + i)
        return self.allocate_response

    def _preferred(self, req, context):
        self._record("preferred", req)
        resp = api.PreferredAllocationResponse()
        for c in req.container_requests:
            ids = list(c.must_include_deviceIDs)
            for d in reversed(c.available_deviceIDs):
                if len(ids) >= c.allocation_size:
                    break
                if d not in ids:
                    ids.append(d)
            resp.container_responses.add(deviceIDs=ids)
        return resp

    def _list_and_watch(self, req, context):
        self._record("watch", req)
        context.add_callback(self.lw_cancelled.set)
        for item in self.lw_script:
            if item == "block":
                while context.is_active():
                    time.sleep(0.02)
                return
            yield item

    def start(self):
        def unary(fn, req_type, resp_type):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req_type.FromString,
                response_serializer=resp_type.SerializeToString)
        handler = grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": unary(self._options, api.Empty, api.DevicePluginOptions),
            "Allocate": unary(self._allocate, api.AllocateRequest, api.AllocateResponse),
            "GetPreferredAllocation": unary(self._preferred, api.PreferredAllocationRequest,
                                            api.PreferredAllocationResponse),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self._list_and_watch, request_deserializer=api.Empty.FromString,
                response_serializer=api.ListAndWatchResponse.SerializeToString),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix:" + self.path)
        self.server.start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.stop(0).wait()
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def last(self, method):
        with self.lock:
            got = [b for m, b in self.requests if m == method]
        assert got, "plugin received no %s call" % method
        return got[-1]


def kdevctl(*args, timeout=60):
    p = subprocess.run([KDEVCTL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def check(got, want_rc, want_out=None, want_err=None):
    rc, out, err = got
    assert rc == want_rc, "exit %d, want %d\nstdout:\n%s\nstderr:\n%s" % (rc, want_rc, out, err)
    if want_out is not None:
        assert out == want_out, "stdout:\n%r\nwant:\n%r" % (out, want_out)
    if want_err is not None:
        assert err == want_err, "stderr:\n%r\nwant:\n%r" % (err, want_err)


# ---------------------------------------------------------------------------

def test_options():
    with TempDir() as d, FakePlugin(d) as p:
        check(kdevctl("options", p.path), 0,
              "PRE_START_REQUIRED   GET_PREFERRED_ALLOCATION_AVAILABLE\n"
              "false                true\n", "")
        assert p.last("options") == b""
        check(kdevctl("options", p.path, "-o", "json"), 0,
              vec_json_text("03_device_plugin_options"), "")
        p.options = api.DevicePluginOptions(pre_start_required=True,
                                            get_preferred_allocation_available=True)
        check(kdevctl("options", "--output=json", p.path), 0,
              vec_json_text("04_device_plugin_options_all"), "")
        p.options = api.DevicePluginOptions()
        check(kdevctl("options", p.path), 0,
              "PRE_START_REQUIRED   GET_PREFERRED_ALLOCATION_AVAILABLE\n"
              "false                false\n", "")
        check(kdevctl("options", p.path, "-o", "json"), 0, "{}\n", "")


ALLOCATE_TABLE = """\
Container 0: gpu-0 gpu-1
  Envs:
    NAME                         VALUE
    VENDOR_DRIVER_CAPABILITIES   compute,utility
    VENDOR_VISIBLE_DEVICES       gpu-0,gpu-1
  Mounts:
    CONTAINER_PATH          HOST_PATH         READ_ONLY
    /usr/local/vendor/lib   /opt/vendor/lib   true
    /var/run/vendor         /run/vendor       false
  Devices:
    CONTAINER_PATH   HOST_PATH        PERMISSIONS
    /dev/vendor0     /dev/vendor0     rw
    /dev/vendor1     /dev/vendor1     rw
    /dev/vendorctl   /dev/vendorctl   rwm
  Annotations:
    KEY                   VALUE
    example.com/gpu-ids   gpu-0,gpu-1
    example.com/note      \u00b5-arch \u2713
  CDI devices:
    example.com/gpu=gpu-0
    example.com/gpu=gpu-1

Container 1: gpu-2
  Envs:
    NAME                     VALUE
    VENDOR_VISIBLE_DEVICES   gpu-2
  Mounts: none
  Devices:
    CONTAINER_PATH   HOST_PATH      PERMISSIONS
    /dev/vendor2     /dev/vendor2   rw
  Annotations: none
  CDI devices:
    example.com/gpu=gpu-2
"""


def test_allocate():
    with TempDir() as d, FakePlugin(d) as p:
        check(kdevctl("allocate", p.path, "gpu-0", "gpu-1", "--container", "gpu-2"), 0,
              ALLOCATE_TABLE, "")
        # the request on the wire is exactly the reference vector
        assert p.last("allocate") == vec_bin("08_allocate_request")
        # same request spelled with commas and a leading --container
        check(kdevctl("allocate", "-o", "json", p.path, "--container", "gpu-0,gpu-1",
                      "--container", "gpu-2"), 0, vec_json_text("09_allocate_response"), "")
        assert p.last("allocate") == vec_bin("08_allocate_request")
        # the Go stubs send map entries in random order: output is still sorted
        r = api.AllocateResponse()
        c = r.container_responses.add()
        c.envs["Z"] = "1"
        c.envs["A"] = "2"
        p.allocate_response = r
        check(kdevctl("allocate", p.path, "x"), 0,
              "Container 0: x\n  Envs:\n    NAME   VALUE\n    A      2\n    Z      1\n"
              "  Mounts: none\n  Devices: none\n  Annotations: none\n  CDI devices: none\n", "")
        check(kdevctl("allocate", p.path, "x", "-o", "json"), 0,
              '{\n  "containerResponses": [\n    {\n      "envs": {\n        "A": "2",\n'
              '        "Z": "1"\n      }\n    }\n  ]\n}\n', "")
        # fewer container responses than requests is reported
        rc, out, err = kdevctl("allocate", p.path, "x", "--container", "y")
        check((rc, out, err), 1, None,
              "kdevctl allocate: 2 container requests answered with 1 container responses\n")


def test_allocate_errors():
    with TempDir() as d, FakePlugin(d) as p:
        check(kdevctl("allocate", p.path, "gpu-0", "missing-7"), 1, "",
              "kdevctl allocate: rpc error: code = NotFound desc = unknown device: missing-7\n")
        p.allocate_delay = 6.0
        start = time.monotonic()
        rc, out, err = kdevctl("allocate", p.path, "gpu-0", "--timeout", "0.5")
        assert time.monotonic() - start < 5.0, "deadline not enforced"
        assert rc == 1 and out == "", (rc, out, err)
        assert err.startswith("kdevctl allocate: rpc error: code = DeadlineExceeded desc = "), err
    # a socket file nobody listens on: a connection failure, exit 1
    with TempDir() as d:
        dead = os.path.join(d, "dead.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(dead)
        s.close()
        check(kdevctl("options", dead), 1, "",
              "kdevctl options: rpc error: code = Unavailable desc = connect unix:%s: "
              "Connection refused\n" % dead)


def test_not_a_socket():
    """Paths that are no socket are named as such before dialling."""
    args = {"options": [], "watch": [], "allocate": ["gpu-0"],
            "preferred": ["--available", "a", "--size", "1"]}
    with TempDir() as d:
        sub = os.path.join(d, "sub")
        os.mkdir(sub)
        reg = os.path.join(d, "file")
        with open(reg, "w") as f:
            f.write("x")
        link = os.path.join(d, "link.sock")
        os.symlink(reg, link)
        missing = os.path.join(d, "gone.sock")
        for cmd, extra in args.items():
            check(kdevctl(cmd, sub, *extra), 1, "",
                  "kdevctl %s: %s is not a socket (it is a directory)\n" % (cmd, sub))
            check(kdevctl(cmd, reg, *extra), 1, "",
                  "kdevctl %s: %s is not a socket (it is a regular file)\n" % (cmd, reg))
            check(kdevctl(cmd, link, *extra), 1, "",
                  "kdevctl %s: %s is not a socket (it is a regular file)\n" % (cmd, link))
            check(kdevctl(cmd, missing, *extra), 1, "",
                  "kdevctl %s: no such socket %s\n" % (cmd, missing))
        # a bare name that does not exist here is looked up in kubelet's directory
        if not os.path.exists("/var/lib/kubelet/device-plugins/kdev-absent-x.sock"):
            check(kdevctl("options", "kdev-absent-x.sock"), 1, "",
                  "kdevctl options: no such socket "
                  "/var/lib/kubelet/device-plugins/kdev-absent-x.sock\n")


def test_version():
    check(kdevctl("--version"), 0, "kdevctl 0.1.0\n", "")
    check(kdevctl("version"), 0, "kdevctl 0.1.0\n", "")
    check(kdevctl("version", "--help"), 0,
          "Usage: kdevctl version\n\nPrints kdevctl's version (also 'kdevctl --version').\n", "")
    check(kdevctl("version", "x"), 2, "", usage_error("version", 'unexpected argument "x"'))
    # the same version string as kdev-plugin
    plugin = os.path.join(kt.BUILD_DIR, "kdev-plugin")
    if os.access(plugin, os.X_OK):
        check(kdevctl("--version"), 0, subprocess.run(
            [plugin, "--version"], stdout=subprocess.PIPE, timeout=60, check=True)
            .stdout.decode().replace("kdev-plugin", "kdevctl"), "")
    rc, out, err = kdevctl("--help")
    assert rc == 0 and "  version     print kdevctl's version (also --version)\n" in out, out


def test_preferred():
    with TempDir() as d, FakePlugin(d) as p:
        check(kdevctl("preferred", p.path, "--available", "gpu-0,gpu-1", "--available",
                      "gpu-2,gpu-3", "--must-include", "gpu-1", "--size", "2"), 0,
              "CONTAINER   COUNT   DEVICE_IDS\n"
              "0           2       gpu-1,gpu-3\n", "")
        want = api.PreferredAllocationRequest()
        want.container_requests.add(available_deviceIDs=["gpu-0", "gpu-1", "gpu-2", "gpu-3"],
                                    must_include_deviceIDs=["gpu-1"], allocation_size=2)
        assert p.last("preferred") == want.SerializeToString()
        check(kdevctl("preferred", p.path, "--available=a,b", "--size=1", "-o", "json"), 0,
              '{\n  "containerResponses": [\n    {\n      "deviceIDs": [\n        "b"\n'
              '      ]\n    }\n  ]\n}\n', "")
        want = api.PreferredAllocationRequest()
        want.container_requests.add(available_deviceIDs=["a", "b"], allocation_size=1)
        assert p.last("preferred") == want.SerializeToString()


WATCH_TABLE = """\
Update 1: 5 devices (3 healthy)
ID      HEALTH      NUMA
gpu-0   Healthy     0
gpu-1   Healthy     1
gpu-2   Unhealthy   0,1
gpu-3   Unhealthy   -
gpu-4   Healthy     none

Update 2: 0 devices (0 healthy)
"""


def test_watch():
    full = api.ListAndWatchResponse.FromString(vec_bin("06_list_and_watch_response"))
    empty = api.ListAndWatchResponse()
    with TempDir() as d, FakePlugin(d) as p:
        # stream ends by itself with OK after two updates
        p.lw_script = [full, empty]
        check(kdevctl("watch", p.path), 0, WATCH_TABLE,
              "kdevctl watch: stream ended after 2 updates\n")
        assert p.last("watch") == b""
        check(kdevctl("watch", p.path, "-o", "json"), 0,
              json.dumps(json.loads(vec_json_text("06_list_and_watch_response")),
                         separators=(",", ":"), ensure_ascii=False) + "\n{}\n",
              "kdevctl watch: stream ended after 2 updates\n")
        # --count: stops after N updates although the plugin keeps the stream open
        p.lw_script = [full, empty, "block"]
        p.lw_cancelled.clear()
        check(kdevctl("watch", p.path, "--count", "1"), 0,
              WATCH_TABLE.split("\n\n")[0] + "\n", "")
        # the plugin sees the stream cancelled
        wait_for(p.lw_cancelled.is_set, what="stream cancellation")
        # the stream ends before --count: failure
        p.lw_script = [empty]
        check(kdevctl("watch", p.path, "--count", "2"), 1,
              "Update 1: 0 devices (0 healthy)\n",
              "kdevctl watch: stream ended after 1 update\n")
        # --timeout: without --count a normal end, with --count a failure
        p.lw_script = [empty, "block"]
        check(kdevctl("watch", p.path, "--timeout", "2"), 0,
              "Update 1: 0 devices (0 healthy)\n", "")
        check(kdevctl("watch", p.path, "--timeout", "2", "--count", "3"), 1,
              "Update 1: 0 devices (0 healthy)\n",
              "kdevctl watch: timed out after 1 of 3 updates\n")


def test_watch_rpc_error():
    with TempDir() as d:
        # a server without the DevicePlugin service: UNIMPLEMENTED
        path = os.path.join(d, "other.sock")
        server = grpc.server(futures.ThreadPoolExecutor(2))
        server.add_insecure_port("unix:" + path)
        server.start()
        try:
            rc, out, err = kdevctl("watch", path, "--timeout", "20")
            assert rc == 1 and out == "", (rc, out, err)
            assert err.startswith("kdevctl watch: rpc error: code = Unimplemented desc = "), err
            rc, out, err = kdevctl("options", path)
            assert rc == 1 and out == "", (rc, out, err)
            assert err.startswith("kdevctl options: rpc error: code = Unimplemented desc = "), err
        finally:
            server.stop(0).wait()


def test_plugins():
    with TempDir() as d, FakePlugin(d, "vendor.sock") as p:
        # kubelet.sock: anything listening
        kubelet = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        kubelet.bind(os.path.join(d, "kubelet.sock"))
        kubelet.listen(8)
        # a stale socket file nobody listens on
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(os.path.join(d, "a-stale.sock"))
        stale.close()
        # a live socket that is not a device plugin
        other = grpc.server(futures.ThreadPoolExecutor(2))
        other.add_insecure_port("unix:" + os.path.join(d, "z-other.sock"))
        other.start()
        # ignored: regular files and directories
        with open(os.path.join(d, "kubelet_internal_checkpoint"), "w") as f:
            f.write("{}")
        os.mkdir(os.path.join(d, "sub.sock"))
        try:
            rc, out, err = kdevctl("plugins", d)
            check((rc, out, err), 1,
                  "NAME           ROLE      STATE   PRE_START_REQUIRED   "
                  "GET_PREFERRED_ALLOCATION_AVAILABLE\n"
                  "a-stale.sock   plugin    dead    -                    -\n"
                  "kubelet.sock   kubelet   live    -                    -\n"
                  "vendor.sock    plugin    live    false                true\n"
                  "z-other.sock   plugin    live    ?                    ?\n")
            assert err.startswith("kdevctl plugins: z-other.sock: rpc error: code = "
                                  "Unimplemented desc = "), err
            rc, out, err = kdevctl("plugins", d, "-o", "json")
            assert rc == 1, (rc, out, err)
            got = json.loads(out)
            for e in got:
                if "error" in e:
                    assert e["error"].startswith("rpc error: code = Unimplemented"), e
                    del e["error"]
            assert got == [
                {"name": "a-stale.sock", "path": os.path.join(d, "a-stale.sock"),
                 "role": "plugin", "state": "dead"},
                {"name": "kubelet.sock", "path": os.path.join(d, "kubelet.sock"),
                 "role": "kubelet", "state": "live"},
                {"name": "vendor.sock", "path": os.path.join(d, "vendor.sock"),
                 "role": "plugin", "state": "live",
                 "options": {"getPreferredAllocationAvailable": True}},
                {"name": "z-other.sock", "path": os.path.join(d, "z-other.sock"),
                 "role": "plugin", "state": "live"},
            ], got
        finally:
            other.stop(0).wait()
            kubelet.close()
    with TempDir() as d:
        check(kdevctl("plugins", d), 0, "", "kdevctl plugins: no sockets in %s\n" % d)
        check(kdevctl("plugins", d, "-o", "json"), 0, "[]\n", "")
        missing = os.path.join(d, "nope")
        check(kdevctl("plugins", missing), 1, "",
              "kdevctl plugins: cannot read %s: No such file or directory\n" % missing)


def usage_error(cmd, msg):
    return "kdevctl %s: %s\nRun 'kdevctl %s --help' for usage.\n" % (cmd, msg, cmd)


def test_usage():
    for cmd in ("plugins", "watch", "options", "allocate", "preferred"):
        rc, out, err = kdevctl(cmd, "--help")
        assert rc == 0 and err == "", (cmd, rc, err)
        assert out.startswith("Usage: kdevctl %s " % cmd), out
        rc, out2, err = kdevctl(cmd, "x", "-h", "--bogus")
        assert rc == 0 and out2 == out, (cmd, rc)
        check(kdevctl(cmd, "--bogus"), 2, "", usage_error(cmd, "unknown option --bogus"))
        check(kdevctl(cmd, "-o", "yaml", "s"), 2, "",
              usage_error(cmd, 'invalid output format "yaml" (want table or json)'))
        for bad in ("-1", "1s", "x"):
            check(kdevctl(cmd, "s", "--timeout", bad), 2, "",
                  usage_error(cmd, 'invalid --timeout "%s" (want seconds such as 2 or 0.5, '
                                   'from 0 to 31536000; 0 = none)' % bad))
    for cmd in ("watch", "options", "allocate", "preferred"):
        check(kdevctl(cmd), 2, "", usage_error(cmd, "missing SOCKET"))
    check(kdevctl("options", "a", "b"), 2, "", usage_error("options", 'unexpected argument "b"'))
    check(kdevctl("plugins", "a", "b"), 2, "", usage_error("plugins", 'unexpected argument "b"'))
    check(kdevctl("allocate", "s"), 2, "", usage_error("allocate", "missing device IDs"))
    check(kdevctl("allocate", "s", "a", "--container"), 2, "",
          usage_error("allocate", "container 2 has no device IDs"))
    check(kdevctl("allocate", "s", "--container", "--container", "a"), 2, "",
          usage_error("allocate", "container 1 has no device IDs"))
    check(kdevctl("allocate", "s", "a,,b"), 2, "",
          usage_error("allocate", 'empty device ID in device IDs "a,,b"'))
    check(kdevctl("preferred", "s", "--size", "1"), 2, "",
          usage_error("preferred", "missing --available"))
    check(kdevctl("preferred", "s", "--available", "a"), 2, "",
          usage_error("preferred", "missing --size"))
    check(kdevctl("preferred", "s", "--available", "a", "--size", "0"), 2, "",
          usage_error("preferred", 'invalid --size "0" (want an integer from 1 to 2147483647)'))
    check(kdevctl("watch", "s", "--count", "x"), 2, "",
          usage_error("watch", 'invalid --count "x" (want an integer from 1 to 1000000000)'))


if __name__ == "__main__":
    if not os.path.isdir(VEC):
        print("FAIL: wire vectors not found at", VEC)
        sys.exit(1)
    if not os.access(KDEVCTL, os.X_OK):
        print("FAIL: kdevctl not built at", KDEVCTL)
        sys.exit(1)
    kt.run_tests([test_options, test_allocate, test_allocate_errors, test_preferred,
                  test_watch, test_watch_rpc_error, test_plugins, test_usage,
                  test_not_a_socket, test_version])
