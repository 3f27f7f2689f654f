"""Helpers shared by kdev's Python integration tests.

Run with /usr/bin/python3 (Debian's python3-grpcio). Messages are generated at
test time from proto/ with protoc --python_out; services use grpcio's generic
handlers, so no grpc_tools are needed.
"""
import contextlib
import glob
import importlib
import os
import socket
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SOURCE_DIR = os.environ.get("KDEV_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("KDEV_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
SKIP = 77

# KDEV_WRAP: a command line Plugin runs kdev-plugin under, e.g.
# "valgrind -q --leak-check=full --error-exitcode=99" (tests/integration/valgrind.sh).
# Its words are split on blanks; the wrapped process keeps kdev-plugin's pid
# (valgrind runs the program in its own process).
WRAP = os.environ.get("KDEV_WRAP", "").split()
# KDEV_TIMEOUT_SCALE: multiplies wait_for's and Plugin.stop's timeouts (default
# 1; 4 under KDEV_WRAP, where valgrind slows kdev-plugin's start to ~0.6 s).
TIMEOUT_SCALE = float(os.environ.get("KDEV_TIMEOUT_SCALE") or (4 if WRAP else 1))

try:
    import grpc  # noqa: E402
except ImportError:  # pragma: no cover
    print("SKIP: python3-grpcio is not importable by", sys.executable)
    sys.exit(SKIP)


def load_api():
    """Generates and imports the v1beta1 messages; returns the module."""
    out = tempfile.mkdtemp(prefix="kdev-pb-")
    __import__("atexit").register(shutil.rmtree, out, True)
    proto_dir = os.path.join(SOURCE_DIR, "proto")
    subprocess.run(["protoc", "--proto_path=" + proto_dir, "--python_out=" + out,
                    "deviceplugin/v1beta1/api.proto"], check=True)
    sys.path.insert(0, out)
    mod = importlib.import_module("deviceplugin.v1beta1.api_pb2")
    return mod


api = load_api()

# The mock libnvidia-ml.so.1 (mock/nvml): the folder to put on LD_LIBRARY_PATH,
# and its h100-80gb-8x-nvswitch topology with the GPUs' UUIDs in index order.
MOCK_NVML_DIR = os.path.join(BUILD_DIR, "mock", "nvml")
H100_TOPO = os.path.join(SOURCE_DIR, "mock", "nvml", "topologies", "h100-80gb-8x-nvswitch.yaml")
H100_UUIDS = [
    "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e",
    "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255",
    "GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9",
    "GPU-e468c3ab-0f10-9911-df74-2436cb131826",
    "GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8",
    "GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759",
    "GPU-35ca105b-9262-0c50-b916-71c8b2d581d5",
    "GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906",
]

# NVIDIA's control device nodes, as kdev looks for them under a driver root's dev/.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def mock_driver_root(base, control_nodes=()):
    """A driver root for --driver-root at |base|/driver-root: the mock NVML
    library at usr/lib64/libnvidia-ml.so.1 (a link to MOCK_NVML_DIR's) and a
    dev/ folder holding an empty file for each name in |control_nodes| (for
    instance CONTROL_NODES). Returns its path."""
    root = os.path.join(base, "driver-root")
    os.makedirs(os.path.join(root, "usr", "lib64"))
    os.symlink(os.path.join(MOCK_NVML_DIR, "libnvidia-ml.so.1"),
               os.path.join(root, "usr", "lib64", "libnvidia-ml.so.1"))
    os.makedirs(os.path.join(root, "dev"))
    for n in control_nodes:
        open(os.path.join(root, "dev", n), "w").close()
    return root


def plugin_options(directory, sock, timeout=5):
    """GetDevicePluginOptions of the plugin serving directory/sock; returns the
    DevicePluginOptions (raises grpc.RpcError when the call fails)."""
    ch = grpc.insecure_channel("unix:" + os.path.join(directory, sock))
    try:
        f = ch.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginOptions",
                           request_serializer=api.Empty.SerializeToString,
                           response_deserializer=api.DevicePluginOptions.FromString)
        return f(api.Empty(), timeout=timeout)
    finally:
        ch.close()




def allocate(directory, sock, ids, timeout=10):
    """Allocate of device IDs |ids| in one container request on the plugin
    serving directory/sock; returns its ContainerAllocateResponse (raises
    grpc.RpcError when the call fails)."""
    ch = grpc.insecure_channel("unix:" + os.path.join(directory, sock))
    try:
        f = ch.unary_unary("/v1beta1.DevicePlugin/Allocate",
                           request_serializer=api.AllocateRequest.SerializeToString,
                           response_deserializer=api.AllocateResponse.FromString)
        req = api.AllocateRequest()
        req.container_requests.add().devices_ids.extend(ids)
        return f(req, timeout=timeout).container_responses[0]
    finally:
        ch.close()


def sock_accepts(path):
    """True when the Unix socket at |path| accepts a connection (its file
    appears at bind(), a moment before listen())."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()

def wait_for(pred, timeout=20.0, interval=0.01, what="condition"):
    """Polls pred() until it is truthy; raises AssertionError after
    timeout * TIMEOUT_SCALE s."""
    timeout *= TIMEOUT_SCALE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


class FakeKubelet:
    """Serves v1beta1.Registration on DIR/kubelet.sock (DIR/|socket_name|)
    like kubelet does: validates, dials back, calls GetDevicePluginOptions
    before answering, then consumes ListAndWatch in a thread."""

    def __init__(self, directory, reject=0, drop_stream_in_register=0,
                 socket_name="kubelet.sock"):
        self.dir = directory
        self.socket_name = socket_name
        # end the ListAndWatch stream of the first N registrations before
        # answering Register (a stream lost while Register is in flight)
        self.drop_stream_in_register = drop_stream_in_register
        self.lock = threading.Lock()
        self.registrations = []   # (time, RegisterRequest, options)
        self.updates = {}          # resource -> list of device lists
        self.streams = {}          # resource -> call (to cancel)
        self.reject = reject       # answer the first N Register calls with an error
        self.server = None

    def _register(self, req, context, alive=None):
        """|alive|: when given, called before dialing the plugin back and
        before opening ListAndWatch; a false answer ends the call UNAVAILABLE
        there (the instance that received it was stopped meanwhile, and a
        stopped kubelet dials no plugin)."""
        with self.lock:
            if self.reject > 0:
                self.reject -= 1
                context.abort(grpc.StatusCode.UNKNOWN, "test: registration rejected")
        if alive is not None and not alive():
            context.abort(grpc.StatusCode.UNAVAILABLE, "test: kubelet instance stopped")
        ch = grpc.insecure_channel("unix:" + os.path.join(self.dir, req.endpoint))
        stub_opts = ch.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                   request_serializer=api.Empty.SerializeToString,
                                   response_deserializer=api.DevicePluginOptions.FromString)
        opts = stub_opts(api.Empty(), timeout=10)
        if alive is not None and not alive():
            ch.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, "test: kubelet instance stopped")
        lw = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                             request_serializer=api.Empty.SerializeToString,
                             response_deserializer=api.ListAndWatchResponse.FromString)
        call = lw(api.Empty())
        with self.lock:
            drop = self.drop_stream_in_register > 0
            if drop:
                self.drop_stream_in_register -= 1
        if drop:
            next(call)  # the plugin has seen the stream; now it ends
            call.cancel()
            time.sleep(0.2)  # let the plugin see the end before Register returns
            with self.lock:
                self.registrations.append((time.monotonic(), req, opts))
            ch.close()
            return api.Empty()
        with self.lock:
            old = self.streams.get(req.resource_name)
            self.streams[req.resource_name] = call
            self.registrations.append((time.monotonic(), req, opts))
        if old is not None:
            old.cancel()

        def consume():
            try:
                for msg in call:
                    with self.lock:
                        self.updates.setdefault(req.resource_name, []).append(
                            [(d.ID, d.health) for d in msg.devices])
            except grpc.RpcError:
                pass
            finally:
                ch.close()
        threading.Thread(target=consume, daemon=True).start()
        return api.Empty()

    def start(self, register=None):
        """Serves kubelet.sock; |register| (default self._register) handles
        this server's Register calls."""
        path = os.path.join(self.dir, self.socket_name)
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                register or self._register,
                request_deserializer=api.RegisterRequest.FromString,
                response_serializer=api.Empty.SerializeToString),
        })
        self.server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(8))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix:" + path)
        self.server.start()

    def stop(self):
        if self.server is not None:
            self.server.stop(0).wait()
            self.server = None
        with self.lock:
            streams = list(self.streams.values())
            self.streams.clear()
        for c in streams:
            c.cancel()

    def restart(self):
        """Like a kubelet restart: stop, remove every socket, serve again."""
        self.stop()
        for p in glob.glob(os.path.join(self.dir, "*")):
            try:
                if os.path.exists(p) and __import__("stat").S_ISSOCK(os.lstat(p).st_mode):
                    os.unlink(p)
            except FileNotFoundError:
                pass
        self.start()

    def count(self, resource=None):
        with self.lock:
            return sum(1 for _, r, _ in self.registrations
                       if resource is None or r.resource_name == resource)

    def close_stream(self, resource):
        with self.lock:
            call = self.streams.pop(resource, None)
        if call is not None:
            call.cancel()


class Plugin:
    """A kdev-plugin child process."""

    instances = 0

    def __init__(self, directory, config_text, extra=(), env=None, wrap=()):
        """|wrap|: a command prefix kdev-plugin runs under (after KDEV_WRAP's)."""
        self.dir = directory
        Plugin.instances += 1
        self.config = os.path.join(os.path.dirname(directory.rstrip("/")),
                                   "plugin-%d.yaml" % Plugin.instances)
        with open(self.config, "w") as f:
            f.write(config_text)
        self.log_path = self.config + ".log"
        self.log = open(self.log_path, "w")
        exe = os.path.join(BUILD_DIR, "kdev-plugin")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.wrapped = bool(WRAP)
        self.proc = subprocess.Popen([*WRAP, *wrap, exe, "--config", self.config,
                                      "--device-plugin-dir",
                                      directory, "--log-level", "debug", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=full_env)

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=20):
        """SIGTERM, then waits timeout * TIMEOUT_SCALE s; returns the exit status
        (under KDEV_WRAP the wrapper's: valgrind's --error-exitcode on errors or
        leaks, whose report is then printed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout * TIMEOUT_SCALE)
        self.log.close()
        if self.wrapped and rc != 0:
            print("kdev-plugin under %s exited %d; its log:\n%s"
                  % (" ".join(WRAP), rc, self.logtext()[-20000:]), flush=True)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


NULL_CONFIG = """version: v1
generic:
  devices:
    - name: example.com/null
      groups:
        - paths:
            - path: /dev/null
          count: 4
"""


def ldconfig_path(name):
    """The file ldconfig's cache names for shared library |name| (the x86-64
    entry), symlinks resolved; AssertionError when it is not installed."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == name and "x86-64" in line:
            return os.path.realpath(parts[-1])
    raise AssertionError("%s is not installed" % name)


def write_kubeconfig(path, server, token):
    """A kubeconfig at |path| for |server| (URL) with bearer |token|, context t."""
    with open(path, "w") as f:
        f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                "clusters:\n- name: c\n  cluster:\n    server: %s\n"
                "users:\n- name: u\n  user:\n    token: %s\n"
                "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                % (server, token))


def fd_count(pid):
    """Open file descriptors of process |pid| (/proc/PID/fd)."""
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_kib(pid):
    """Resident set size of process |pid| in KiB (VmRSS of /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def sanitized():
    """Whether BUILD_DIR is a sanitizer build (KDEV_SANITIZE=ON)."""
    try:
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
            return any(line.startswith("KDEV_SANITIZE:BOOL=ON") for line in f)
    except FileNotFoundError:
        return False


class TempDir:
    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="kdev-it-")
        self.dir = os.path.join(self.path, "device-plugins")
        os.mkdir(self.dir)
        return self.dir

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def logged(proc, before_close=None):
    """Yields |proc| (a daemon under test with logtext() and close()); when
    the block raises an Exception, prints the last 20000 characters of its
    log before the exception goes on; in every case then calls
    |before_close| (when given, no arguments) and closes |proc|."""
    try:
        yield proc
    except Exception:
        print(proc.logtext()[-20000:])
        raise
    finally:
        if before_close:
            before_close()
        proc.close()


@contextlib.contextmanager
def kubelet_and_plugin(d, start, *args, **kw):
    """A FakeKubelet on device-plugin directory |d|, then the kdev-plugin
    (a Plugin) that start(d, *args, **kw) starts. Yields (kubelet, plugin);
    on leaving, the plugin must exit 0 on SIGTERM and the kubelet is stopped."""
    k = FakeKubelet(d)
    k.start()
    p = start(d, *args, **kw)
    try:
        yield k, p
    finally:
        assert p.stop() == 0
        k.stop()


@contextlib.contextmanager
def registered_plugin(config_text=NULL_CONFIG, resource="example.com/null"):
    """A device-plugin directory with a FakeKubelet and a kdev-plugin serving
    |config_text|, once the plugin registered |resource|. Yields
    (directory, kubelet, plugin); on leaving, the plugin must exit 0 on
    SIGTERM and the kubelet is stopped."""
    with TempDir() as d:
        with kubelet_and_plugin(d, Plugin, config_text) as (k, p):
            wait_for(lambda: k.count(resource) == 1, what="registration")
            yield d, k, p


def run_tests(tests):
    """Runs test functions; prints 'N passed, N failed' and exits.
    KDEV_TEST_SKIP: comma-separated test function names not to run (printed
    as SKIP; tests/integration/valgrind.sh uses it)."""
    passed = failed = 0
    skip = set(filter(None, os.environ.get("KDEV_TEST_SKIP", "").split(",")))
    for t in tests:
        if t.__name__ in skip:
            print("SKIP %s (KDEV_TEST_SKIP)" % t.__name__, flush=True)
            continue
        start = time.monotonic()
        try:
            t()
            passed += 1
            print("PASS %s (%.2fs)" % (t.__name__, time.monotonic() - start), flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            import traceback
            traceback.print_exc()
            print("FAIL %s: %s" % (t.__name__, e), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
