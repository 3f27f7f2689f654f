"""Prometheus scrapes kdev-plugin's metrics endpoint (--metrics-address).

A real Prometheus server (/usr/bin/prometheus, Debian package `prometheus`)
scrapes kdev-plugin every second on loopback while a scenario runs on the
mock NVML (8 H100, time-sliced 2x -> 16 nvidia.com/gpu devices, plus 2
generic example.com/null devices), registered with a FakeKubelet:

- two Allocate calls served, one failing (unknown device), one
  GetPreferredAllocation;
- XID 79 injected on GPU 4: its 2 replicas go Unhealthy;
- a kubelet restart: every resource registers again.

Prometheus' HTTP API (/api/v1/query) must then report the exact values of
the allocation counter, the device-health gauges, the per-GPU replica gauge,
the XID counter, registrations and the restart counter.

Also: a second kdev-plugin on the same metrics port fails to start with a
clear error naming the address; KDEV_METRICS_ADDRESS turns metrics on and the
flag wins over it.

A malformed --metrics-address (or KDEV_METRICS_ADDRESS) is a usage error
(exit 2, naming the flag or the variable); an empty one keeps metrics off.

The Prometheus scenario is skipped when /usr/bin/prometheus is missing (the
whole file then exits 77 if nothing else ran).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

PROMETHEUS = "/usr/bin/prometheus"
HAVE_PROMETHEUS = os.path.exists(PROMETHEUS)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
NULL = "example.com/null"
UUIDS = kt.H100_UUIDS
SOCK = "kdev-nvidia.com_gpu.sock"

CONFIG = """version: v1
flags:
  failOnInitError: true
health:
  probeInterval: 1
  quietPeriod: 600
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
generic:
  devices:
    - name: example.com/null
      groups:
        - paths:
            - path: /dev/null
          count: 2
"""


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def nvidia_env(d):
    ctl = os.path.join(os.path.dirname(d), "control")
    open(ctl, "a").close()
    return {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
            "KDEV_MOCK_NVML_CONTROL": ctl}


def control(d, line):
    with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
        f.write(line + "\n")


def start_plugin(d, extra=(), env=None):
    full = nvidia_env(d)
    full.update(env or {})
    return Plugin(d, CONFIG, extra=("--cdi-dir", os.path.join(os.path.dirname(d), "cdi"),
                                    *extra), env=full)


def allocate(d, ids):
    """Allocate with one container request; returns None or the gRPC error."""
    try:
        kt.allocate(d, SOCK, ids)
        return None
    except kt.grpc.RpcError as e:
        return e


def preferred(d, available, size):
    ch = kt.grpc.insecure_channel("unix:" + os.path.join(d, SOCK))
    try:
        f = ch.unary_unary("/v1beta1.DevicePlugin/GetPreferredAllocation",
                           request_serializer=kt.api.PreferredAllocationRequest.SerializeToString,
                           response_deserializer=kt.api.PreferredAllocationResponse.FromString)
        req = kt.api.PreferredAllocationRequest()
        cr = req.container_requests.add()
        cr.available_deviceIDs.extend(available)
        cr.allocation_size = size
        return list(f(req, timeout=10).container_responses[0].deviceIDs)
    finally:
        ch.close()


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.headers.get("Content-Type"), r.read().decode()


class Prometheus:
    """A Prometheus server scraping 127.0.0.1:<target_port> every second."""

    def __init__(self, target_port):
        self.tmp = tempfile.mkdtemp(prefix="kdev-prom-")
        self.port = free_port()
        self.config = os.path.join(self.tmp, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: 1s\n"
                    "  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: kdev\n"
                    "    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % target_port)
        self.log_path = os.path.join(self.tmp, "prometheus.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + self.config,
             "--storage.tsdb.path=" + os.path.join(self.tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def query(self, expr):
        """Instant query; returns {frozenset(labels without __name__, job,
        instance): float value}."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        out = {}
        for s in body["data"]["result"]:
            labels = {k: v for k, v in s["metric"].items()
                      if k not in ("__name__", "job", "instance")}
            out[frozenset(labels.items())] = float(s["value"][1])
        return out

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited %d:\n%s" % (self.proc.returncode,
                                                                    self.logtext()))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                            timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, ConnectionError, OSError):
                return False
        wait_for(ready, timeout=30, interval=0.1, what="Prometheus ready")

    def wait_values(self, expr, want, timeout=30):
        """Polls until the query's result is exactly |want| ({labels dict as
        frozenset: value})."""
        last = [None]

        def check():
            try:
                last[0] = self.query(expr)
            except (urllib.error.URLError, ConnectionError, OSError) as e:
                last[0] = e
                return False
            return last[0] == want
        try:
            wait_for(check, timeout=timeout, interval=0.25, what=expr)
        except AssertionError:
            raise AssertionError("%s: got %r, want %r" % (expr, last[0], want)) from None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def L(**labels):  # noqa: N802 - a label set as Prometheus returns it
    return frozenset(labels.items())


def test_prometheus_sees_allocations_and_health():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        mport = free_port()
        p = start_plugin(d, extra=("--metrics-address", "127.0.0.1:%d" % mport))
        prom = None
        try:
            wait_for(lambda: k.updates.get(RES) and k.updates.get(NULL), what="ListAndWatch")
            assert "msg=\"serving metrics\" address=127.0.0.1:%d" % mport in p.logtext()
            # The endpoint itself: the 0.0.4 text format.
            ctype, text = scrape(mport)
            assert ctype == "text/plain; version=0.0.4; charset=utf-8", ctype
            assert "# TYPE kdev_allocate_requests_total counter\n" in text, text
            assert ('kdev_devices{resource="nvidia.com/gpu",health="Healthy"} 16\n'
                    in text), text

            prom = Prometheus(mport)
            prom.wait_ready()
            prom.wait_values('up{job="kdev"}', {L(): 1.0})

            assert allocate(d, [UUIDS[0] + "::0"]) is None
            assert allocate(d, [UUIDS[1] + "::1", UUIDS[2] + "::0"]) is None
            assert len(preferred(d, [u + "::0" for u in UUIDS], 2)) == 2
            e = allocate(d, ["GPU-nope::0"])
            assert e is not None and e.code() == kt.grpc.StatusCode.INVALID_ARGUMENT, e
            control(d, "xid %s 79" % UUIDS[4])
            wait_for(lambda: len(k.updates.get(RES, [])) >= 2, what="unhealthy update")

            prom.wait_values("kdev_allocate_requests_total", {
                L(resource=RES, result="ok"): 2.0,
                L(resource=RES, result="error"): 1.0,
                L(resource=NULL, result="ok"): 0.0,
                L(resource=NULL, result="error"): 0.0,
            })
            prom.wait_values("kdev_devices", {
                L(resource=RES, health="Healthy"): 14.0,
                L(resource=RES, health="Unhealthy"): 2.0,
                L(resource=NULL, health="Healthy"): 2.0,
                L(resource=NULL, health="Unhealthy"): 0.0,
            })
            prom.wait_values("kdev_gpu_devices", {L(gpu=u, resource=RES): 2.0 for u in UUIDS})
            prom.wait_values("kdev_gpu_health_events_total", {L(event="xid", xid="79"): 1.0})
            prom.wait_values('kdev_allocate_duration_seconds_count{resource="%s"}' % RES,
                             {L(resource=RES): 3.0})
            prom.wait_values('kdev_allocate_duration_seconds_bucket{le="+Inf"}',
                             {L(resource=RES, le="+Inf"): 3.0, L(resource=NULL, le="+Inf"): 0.0})
            prom.wait_values("kdev_preferred_allocation_duration_seconds_count", {
                L(resource=RES): 1.0, L(resource=NULL): 0.0})
            prom.wait_values('kdev_build_info', {L(version="0.1.0", compiler=cinfo(text)): 1.0})

            # A kubelet restart: seen once, every resource registered again.
            k.restart()
            wait_for(lambda: k.count(RES) == 2 and k.count(NULL) == 2, what="re-registration")
            prom.wait_values("kdev_kubelet_restarts_total", {L(): 1.0})
            prom.wait_values('kdev_kubelet_registrations_total{result="ok"}', {
                L(resource=RES, result="ok"): 2.0, L(resource=NULL, result="ok"): 2.0})
        finally:
            if prom is not None:
                prom.stop()
            rc = p.stop()
            k.stop()
        assert rc == 0, p.logtext()


def cinfo(text):
    """The compiler label of kdev_build_info in an exposition text."""
    for line in text.splitlines():
        if line.startswith("kdev_build_info{"):
            return line.split('compiler="', 1)[1].split('"', 1)[0]
    raise AssertionError("no kdev_build_info in:\n" + text)


def test_port_in_use_is_a_startup_error_and_env_default():
    with TempDir() as d:
        blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        used = blocker.getsockname()[1]
        try:
            # The environment turns metrics on; the flag wins over it.
            p = start_plugin(d, env={"KDEV_METRICS_ADDRESS": "127.0.0.1:1"},
                             extra=("--metrics-address", "127.0.0.1:%d" % used))
            rc = p.proc.wait(30 * kt.TIMEOUT_SCALE)
            p.log.close()
            assert rc == 1, rc
            want = ('level=error msg="cannot start" error="cannot listen on 127.0.0.1:%d: '
                    'Address already in use"' % used)
            assert want in p.logtext(), p.logtext()
            assert "kdev-nvidia.com_gpu.sock" not in os.listdir(d), os.listdir(d)
        finally:
            blocker.close()
        free = free_port()
        p = start_plugin(d, env={"KDEV_METRICS_ADDRESS": "127.0.0.1:%d" % free})
        try:
            def up():
                try:
                    return scrape(free)
                except (urllib.error.URLError, ConnectionError, OSError):
                    return None
            _, text = wait_for(up, what="metrics from KDEV_METRICS_ADDRESS")
            assert "kdev_build_info{" in text, text
        finally:
            assert p.stop() == 0, p.logtext()


BAD_ADDRESSES = ("127.0.0.1", "::1:9400", "127.0.0.1:99999", ":abc", "http://x:1", "[::1]",
                 "[foo]:9400", "x/y:9400")
ADDRESS_FORM = ("HOST:PORT (e.g. 127.0.0.1:9400, [::1]:9400, :9400), with PORT 0..65535")


def run_plugin(args, env):
    full = dict(os.environ)
    full.pop("KDEV_METRICS_ADDRESS", None)
    full.update(env)
    return subprocess.run([os.path.join(kt.BUILD_DIR, "kdev-plugin"), *args], env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30 * kt.TIMEOUT_SCALE)


def test_bad_metrics_address_is_a_usage_error():
    with TempDir() as d:
        cfg = os.path.join(os.path.dirname(d), "null.yaml")
        with open(cfg, "w") as f:
            f.write(kt.NULL_CONFIG)
        common = ["--config", cfg, "--device-plugin-dir", d]
        for bad in BAD_ADDRESSES:
            for via_env in (False, True):
                if via_env:
                    r = run_plugin(common, {"KDEV_METRICS_ADDRESS": bad})
                    name = "KDEV_METRICS_ADDRESS"
                else:
                    r = run_plugin(common + ["--metrics-address", bad], {})
                    name = "--metrics-address"
                assert r.returncode == 2, (bad, via_env, r.returncode, r.stderr)
                assert r.stdout == "", r.stdout
                assert r.stderr == ('kdev-plugin: invalid %s "%s": want %s\n'
                                    "Run 'kdev-plugin --help' for the options.\n"
                                    % (name, bad, ADDRESS_FORM)), r.stderr
                assert os.listdir(d) == [], os.listdir(d)
        # the flag wins over a bad variable; an explicit "" keeps metrics off
        r = run_plugin(common + ["--metrics-address", "", "--check"],
                       {"KDEV_METRICS_ADDRESS": ":abc"})
        assert r.returncode == 0, r.stderr
        assert r.stdout == ("example.com/null: 4 devices: null::0 null::1 null::2 null::3\n" +
                            "".join("  null::%d: /dev/null->/dev/null:rw\n" % i
                                    for i in range(4))), r.stdout
        assert "serving metrics" not in r.stderr, r.stderr
        # KDEV_METRICS_ADDRESS="" is off too (no error), and so is --check
        r = run_plugin(common + ["--check"], {"KDEV_METRICS_ADDRESS": ""})
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("example.com/null: 4 devices: "), r.stdout


if __name__ == "__main__":
    tests = [test_bad_metrics_address_is_a_usage_error]
    if HAVE_PROMETHEUS:
        tests += [test_prometheus_sees_allocations_and_health,
                  test_port_in_use_is_a_startup_error_and_env_default]
    else:
        print("SKIP: the Prometheus scenario: %s is missing (Debian package prometheus)"
              % PROMETHEUS, flush=True)
    kt.run_tests(tests)
