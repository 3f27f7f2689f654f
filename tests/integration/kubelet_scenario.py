"""kdevctl kubelet (kubelet's device manager) and kdevctl checkpoint against
grpcio device plugins written here: Register validation with kubelet's exact
error texts, dial-back, ListAndWatch capacity, scenario admissions
(GetPreferredAllocation, Allocate, PreStartContainer, option merging, init
container reuse, rejections), stream end, simulated kubelet restart,
re-registration, socket cleanup, SIGTERM, the checkpoint file, waits for an
exact allocatable count (a device turning Unhealthy and back) and exec steps."""
import json
import os
import signal
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
RES = "example.com/fake"


def uid(name):
    """kdevctl's default pod UID (FNV-1a 64 of the name, UUID-shaped)."""
    h = 14695981039346656037
    for b in name.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    h2 = (h * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return "%08x-%04x-4%03x-8%03x-%012x" % (h >> 32, (h >> 16) & 0xFFFF, h & 0xFFF,
                                           (h2 >> 52) & 0xFFF, h2 & 0xFFFFFFFFFFFF)


class Plugin:
    """A device plugin on DIR/NAME (grpcio generic handlers)."""

    def __init__(self, directory, name="fake.sock", resource=RES, devices=3, preferred=True,
                 prestart=True):
        self.dir = directory
        self.name = name
        self.resource = resource
        self.path = os.path.join(directory, name)
        self.devices = [("d%d" % i, "Healthy") for i in range(devices)]
        self.options = api.DevicePluginOptions(get_preferred_allocation_available=preferred,
                                               pre_start_required=prestart)
        self.options_error = None
        self.allocate_modes = []     # per Allocate call: "error", "empty"; then normal
        self.calls = []
        self.lock = threading.Lock()
        self.end_stream = threading.Event()
        self.pending = []            # device lists to send on the open stream
        self.sent = 0                # of them, sent (the send completed)
        self.first_list = threading.Event()   # cleared: ListAndWatch holds its first list
        self.first_list.set()
        self.streams_cancelled = 0
        self.server = None

    def push(self, *lists):
        """Sends each device list [(id, health)] on the open stream, in order."""
        with self.lock:
            self.pending.extend(lists)
            self.devices = lists[-1]

    def _rec(self, method, req):
        with self.lock:
            self.calls.append((method, req))

    def _options(self, req, ctx):
        self._rec("options", req)
        if self.options_error:
            ctx.abort(grpc.StatusCode.UNIMPLEMENTED, self.options_error)
        return self.options

    def _lw(self, req, ctx):
        self._rec("watch", req)
        while ctx.is_active() and not self.first_list.wait(0.02):
            pass
        yield api.ListAndWatchResponse(devices=[api.Device(ID=i, health=h)
                                                for i, h in self.devices])
        while ctx.is_active() and not self.end_stream.is_set():
            with self.lock:
                pending, self.pending = self.pending, []
            for devs in pending:   # back to back, in one burst
                yield api.ListAndWatchResponse(devices=[api.Device(ID=i, health=h)
                                                        for i, h in devs])
            with self.lock:
                self.sent += len(pending)
            time.sleep(0.02)
        if not ctx.is_active():
            with self.lock:
                self.streams_cancelled += 1

    def _allocate(self, req, ctx):
        self._rec("allocate", req)
        with self.lock:
            mode = self.allocate_modes.pop(0) if self.allocate_modes else None
        if mode == "error":
            ctx.abort(grpc.StatusCode.NOT_FOUND,
                      "device %s is gone" % req.container_requests[0].devices_ids[0])
        r = api.AllocateResponse()
        if mode == "empty":
            return r
        for c in req.container_requests:
            cr = r.container_responses.add()
            cr.envs["FAKE_DEVICES"] = ",".join(c.devices_ids)
            cr.envs["FAKE_VENDOR"] = self.resource
            for i in c.devices_ids:
                cr.devices.add(container_path="/dev/fake-" + i, host_path="/dev/null",
                               permissions="rw")
                cr.cdi_devices.add(name="%s=%s" % (self.resource, i))
            cr.mounts.add(container_path="/opt/fake", host_path="/tmp", read_only=True)
            cr.annotations["fake.example.com/devices"] = ",".join(c.devices_ids)
        return r

    def _preferred(self, req, ctx):
        self._rec("preferred", req)
        r = api.PreferredAllocationResponse()
        for c in req.container_requests:
            ids = list(c.must_include_deviceIDs)
            for d in sorted(c.available_deviceIDs, reverse=True):
                if len(ids) < c.allocation_size and d not in ids:
                    ids.append(d)
            r.container_responses.add(deviceIDs=ids)
        return r

    def _prestart(self, req, ctx):
        self._rec("prestart", req)
        return api.PreStartContainerResponse()

    def start(self):
        h = grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                self._options, request_deserializer=api.Empty.FromString,
                response_serializer=api.DevicePluginOptions.SerializeToString),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self._lw, request_deserializer=api.Empty.FromString,
                response_serializer=api.ListAndWatchResponse.SerializeToString),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                self._allocate, request_deserializer=api.AllocateRequest.FromString,
                response_serializer=api.AllocateResponse.SerializeToString),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                self._preferred, request_deserializer=api.PreferredAllocationRequest.FromString,
                response_serializer=api.PreferredAllocationResponse.SerializeToString),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                self._prestart, request_deserializer=api.PreStartContainerRequest.FromString,
                response_serializer=api.PreStartContainerResponse.SerializeToString),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        self.server.add_generic_rpc_handlers((h,))
        self.server.add_insecure_port("unix:" + self.path)
        self.server.start()
        return self

    def stop(self):
        if self.server is not None:
            self.end_stream.set()
            self.server.stop(0).wait()
            self.server = None

    def register(self, version="v1beta1", resource=None, endpoint=None):
        """Calls Register on kubelet.sock; returns None or (code, details)."""
        ch = grpc.insecure_channel("unix:" + os.path.join(self.dir, "kubelet.sock"))
        try:
            f = ch.unary_unary("/v1beta1.Registration/Register",
                               request_serializer=api.RegisterRequest.SerializeToString,
                               response_deserializer=api.Empty.FromString)
            f(api.RegisterRequest(version=version, endpoint=endpoint or self.name,
                                  resource_name=resource or self.resource, options=self.options),
              timeout=20)
            return None
        except grpc.RpcError as e:
            return (e.code(), e.details())
        finally:
            ch.close()

    def methods(self):
        with self.lock:
            return [m for m, _ in self.calls]

    def requests(self, method):
        with self.lock:
            return [r for m, r in self.calls if m == method]


class Kubelet:
    """A kdevctl kubelet child process."""

    def __init__(self, directory, scenario=None, *extra, env=None):
        self.dir = directory
        args = [KDEVCTL, "kubelet", "--dir", directory, "--log-level", "debug", *extra]
        if scenario is not None:
            self.scenario = os.path.join(os.path.dirname(directory), "scenario.yaml")
            with open(self.scenario, "w") as f:
                f.write(scenario)
            args += ["--scenario", self.scenario]
        self.err_path = os.path.join(os.path.dirname(directory), "kubelet.err")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     env=env)
        self.sock = os.path.join(directory, "kubelet.sock")

    def wait_serving(self):
        wait_for(lambda: os.path.exists(self.sock) or self.proc.poll() is not None,
                 what="kubelet.sock")
        assert self.proc.poll() is None, self.log()

    def log(self):
        with open(self.err_path) as f:
            return f.read()

    def finish(self, timeout=60):
        out, _ = self.proc.communicate(timeout=timeout)
        self.err.close()
        return self.proc.returncode, out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.finish()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        self.err.close()


def kdevctl(*args):
    p = subprocess.run([KDEVCTL, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def expect_eq(got, want, what):
    assert got == want, "%s:\n--- got ---\n%s\n--- want ---\n%s" % (what, got, want)


SCENARIO = """
wait: {timeout: 30, resources: {example.com/fake: 3}}
pods:
  - name: train
    initContainers:
      - name: setup
        limits: {example.com/fake: 1}
    containers:
      - name: main
        limits: {example.com/fake: 2}
      - name: log
  - name: big
    containers: [{name: main, limits: {example.com/fake: 2}}]
  - name: other
    containers: [{name: main, limits: {vendor.com/none: 1}}]
"""


def test_scenario_admission_and_checkpoint():
    with TempDir() as d:
        k = Kubelet(d, SCENARIO)
        p = Plugin(d)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            rc, out = k.finish()
        finally:
            p.stop()
            k.kill()
        train, big, other = uid("train"), uid("big"), uid("other")
        want = (
            "wait: satisfied: example.com/fake allocatable 3 (wanted 3)\n"
            "pod train (uid %s): admitted\n"
            "  init container setup\n"
            "    example.com/fake: d2\n"
            "    env FAKE_DEVICES=d2\n"
            "    env FAKE_VENDOR=example.com/fake\n"
            "    mount /opt/fake from /tmp (ro)\n"
            "    device /dev/fake-d2 from /dev/null (rw)\n"
            "    annotation fake.example.com/devices=d2\n"
            "    cdi example.com/fake=d2\n"
            "    prestart example.com/fake: ok\n"
            "  container main\n"
            "    example.com/fake: d2,d1\n"
            "    env FAKE_DEVICES=d2,d1\n"
            "    env FAKE_VENDOR=example.com/fake\n"
            "    mount /opt/fake from /tmp (ro)\n"
            "    device /dev/fake-d2 from /dev/null (rw)\n"
            "    device /dev/fake-d1 from /dev/null (rw)\n"
            "    annotation fake.example.com/devices=d2,d1\n"
            "    cdi example.com/fake=d2\n"
            "    cdi example.com/fake=d1\n"
            "    prestart example.com/fake: ok\n"
            "  container log\n"
            "pod big (uid %s): rejected: UnexpectedAdmissionError: Allocate failed due to "
            "requested number of devices unavailable for example.com/fake. Requested: 2, "
            "Available: 1, which is unexpected\n"
            "pod other (uid %s): rejected: OutOfvendor.com/none: Node didn't have enough "
            "resource: vendor.com/none, requested: 1, used: 0, capacity: 0\n"
            "\n"
            "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT    STATE\n"
            "example.com/fake   3          3             2           fake.sock   connected\n"
        ) % (train, big, other)
        expect_eq(out, want, "stdout")
        assert rc == 0, rc

        # The plugin saw kubelet's calls: options, watch, then per container
        # preferred (available ∪ must-include, must-include, total size),
        # allocate, and prestart before each container start.
        assert p.methods() == ["options", "watch", "preferred", "allocate", "preferred",
                               "allocate", "prestart", "prestart"], p.methods()
        pr = p.requests("preferred")
        c0 = pr[0].container_requests[0]
        assert list(c0.available_deviceIDs) == ["d0", "d1", "d2"], c0
        assert list(c0.must_include_deviceIDs) == [] and c0.allocation_size == 1, c0
        c1 = pr[1].container_requests[0]
        assert list(c1.available_deviceIDs) == ["d0", "d1", "d2"], c1
        assert list(c1.must_include_deviceIDs) == ["d2"] and c1.allocation_size == 2, c1
        al = p.requests("allocate")
        assert [list(a.container_requests[0].devices_ids) for a in al] == [["d2"], ["d2", "d1"]]
        assert [list(r.devices_ids) for r in p.requests("prestart")] == [["d2"], ["d2", "d1"]]

        # The checkpoint: exact bytes (verified against the Go algorithm in the
        # unit tests), and kdevctl checkpoint's view of it.
        ck = os.path.join(d, "kubelet_internal_checkpoint")
        with open(ck) as f:
            text = f.read()
        assert text.startswith('{"Data":{"PodDeviceEntries":[{"PodUID":"%s","ContainerName":'
                               '"setup","ResourceName":"example.com/fake","DeviceIDs":{"-1":'
                               '["d2"]},"AllocResp":"' % train), text
        assert text.count('"PodUID"') == 2, text
        assert '"RegisteredDevices":{"example.com/fake":["d0","d1","d2"]}},"Checksum":' in text
        rc, out, err = kdevctl("checkpoint", d)
        assert rc == 0 and err == "", (rc, err)
        lines = out.splitlines()
        assert lines[0] == "File: " + ck, lines
        assert lines[1] == "Layout: current (DeviceIDs per NUMA node)", lines
        assert "  example.com/fake   3         d0,d1,d2" in lines, out
        assert "Pod device entries: 2" in lines, out
        assert "  pod %s container main resource example.com/fake" % train in lines, out
        assert "    numa -1: d2,d1" in lines, out
        assert "    cdi example.com/fake=d1" in lines, out
        assert lines[-1].startswith("checksum OK ("), lines[-1]
        checksum = json.loads(text)["Checksum"]
        assert lines[-1] == "checksum OK (%d)" % checksum, lines[-1]

        rc, out, err = kdevctl("checkpoint", ck, "-o", "json")
        assert rc == 0, err
        j = json.loads(out)
        assert j["layout"] == "current" and j["checksum"] == {"stored": checksum,
                                                                "computed": checksum, "ok": True}
        e = j["podDeviceEntries"][1]
        assert e["deviceIDs"] == {"-1": ["d2", "d1"]}, e
        assert e["allocResp"]["envs"] == {"FAKE_DEVICES": "d2,d1",
                                          "FAKE_VENDOR": "example.com/fake"}, e
        assert e["allocResp"]["cdiDevices"] == [{"name": "example.com/fake=d2"},
                                                {"name": "example.com/fake=d1"}], e

        # A corrupted checksum is reported, exit 1, data still shown.
        bad = text.replace('"Checksum":%d' % checksum, '"Checksum":%d' % (checksum + 1))
        with open(ck, "w") as f:
            f.write(bad)
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1, rc
        assert out.endswith("checksum MISMATCH (stored %d, computed %d)\n"
                            % (checksum + 1, checksum)), out
        expect_eq(err, "kdevctl checkpoint: %s: checksum mismatch: stored %d, computed %d "
                  "(kubelet would ignore this checkpoint)\n" % (ck, checksum + 1, checksum),
                  "stderr")
        with open(ck, "w") as f:
            f.write(text[:40])
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        assert err.startswith("kdevctl checkpoint: %s: not JSON: line 1 column " % ck), err
        os.unlink(ck)
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: cannot read: No such file or directory\n" % ck,
                  "stderr")
        # Odd files are refused at once, never read (a FIFO would block, a
        # link to /dev/zero never ends, a huge file is not loaded).
        os.mkfifo(ck)
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: is not a regular file (a FIFO)\n" % ck, "stderr")
        os.unlink(ck)
        os.symlink("/dev/zero", ck)
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: is not a regular file (a character device)\n"
                  % ck, "stderr")
        os.unlink(ck)
        with open(ck, "wb") as f:
            f.truncate(16 * 1024 * 1024 + 1)
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: the kubelet checkpoint is larger than 16777216 "
                  "bytes\n" % ck, "stderr")
        with open(ck, "wb") as f:
            f.write(b'{"Data":\0}')
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: contains a NUL byte at offset 8\n" % ck, "stderr")
        os.unlink(ck)


def test_scenario_json():
    with TempDir() as d:
        k = Kubelet(d, "wait: {resources: {example.com/fake: 1}}\n"
                       "pods: [{name: a, uid: u-a, containers: [{name: c, limits: "
                       "{example.com/fake: 1}}]}]\n", "-o", "json")
        p = Plugin(d, devices=1, preferred=False, prestart=False)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            rc, out = k.finish()
        finally:
            p.stop()
            k.kill()
        assert rc == 0
        j = json.loads(out)
        want_steps = [
            {"kind": "wait", "ok": True,
             "result": "satisfied: example.com/fake allocatable 1 (wanted 1)"},
            {"kind": "pod", "name": "a", "uid": "u-a", "admitted": True, "containers": [{
                "name": "c", "init": False,
                "allocations": [{"resource": RES, "deviceIDs": ["d0"], "fromCheckpoint": False}],
                "envs": {"FAKE_DEVICES": "d0", "FAKE_VENDOR": RES},
                "mounts": [{"containerPath": "/opt/fake", "hostPath": "/tmp", "readOnly": True}],
                "devices": [{"containerPath": "/dev/fake-d0", "hostPath": "/dev/null",
                             "permissions": "rw"}],
                "annotations": {"fake.example.com/devices": "d0"},
                "cdiDevices": [{"name": "example.com/fake=d0"}]}]},
        ]
        assert j["steps"] == want_steps, json.dumps(j["steps"], indent=1)
        assert j["resources"] == [{"name": RES, "capacity": 1, "allocatable": 1, "allocated": 1,
                                   "endpoint": "fake.sock", "state": "connected",
                                   "devices": [{"id": "d0", "health": "Healthy"}]}], j
        # No preferred call, no prestart when the options do not ask for them.
        assert p.methods() == ["options", "watch", "allocate"], p.methods()


def test_register_errors():
    with TempDir() as d:
        k = Kubelet(d, None, "--dial-timeout", "0.3")
        p = Plugin(d)
        try:
            k.wait_serving()
            p.start()
            assert p.register(version="v1alpha") == (
                grpc.StatusCode.UNKNOWN, 'requested API version "v1alpha" is not supported by '
                'kubelet. Supported version is ["v1beta1"]')
            assert p.register(resource="fake") == (
                grpc.StatusCode.UNKNOWN, 'the ResourceName "fake" is invalid')
            assert p.register(resource="kubernetes.io/x") == (
                grpc.StatusCode.UNKNOWN, 'the ResourceName "kubernetes.io/x" is invalid')
            assert p.register(endpoint="missing.sock") == (
                grpc.StatusCode.UNKNOWN, "failed to dial device plugin: context deadline exceeded")
            p.options_error = "no options today"
            assert p.register() == (
                grpc.StatusCode.UNKNOWN, "failed to get device plugin options: rpc error: "
                "code = Unimplemented desc = no options today")
            assert p.methods() == ["options"], p.methods()
            p.options_error = None
            assert p.register() is None
            wait_for(lambda: "watch" in p.methods(), what="ListAndWatch")
            wait_for(lambda: "ListAndWatch update" in k.log(), what="update log")
            rc, out = k.stop()
        finally:
            p.stop()
            k.kill()
        assert rc == 0, rc
        expect_eq(out, "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT    STATE\n"
                       "example.com/fake   3          3             0           fake.sock   "
                       "connected\n", "stdout")
        assert not os.path.exists(os.path.join(d, "kubelet.sock"))


def test_stream_end_and_reregistration():
    scenario = """
wait: {resources: {example.com/fake: 2}}
steps:
  - wait: {timeout: 30, resources: {example.com/other: 1}}
  - pod: {name: late, containers: [{name: c, limits: {example.com/fake: 1}}]}
"""
    with TempDir() as d:
        k = Kubelet(d, scenario)
        p = Plugin(d, devices=2)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            wait_for(lambda: "wait satisfied" in k.log(), what="first wait")
            # Re-registration: the old stream is cancelled, the new one stays.
            assert p.register() is None
            wait_for(lambda: p.streams_cancelled == 1, what="old stream cancelled")
            assert p.methods() == ["options", "watch", "options", "watch"], p.methods()
            # The plugin ends its stream: devices unhealthy, endpoint stopped.
            p.end_stream.set()
            wait_for(lambda: "ListAndWatch ended unexpectedly for device plugin" in k.log(),
                     what="stream end log")
            # Let the scenario go on: a second resource registers.
            q = Plugin(d, name="other.sock", resource="example.com/other", devices=1).start()
            try:
                assert q.register() is None
                rc, out = k.finish()
            finally:
                q.stop()
        finally:
            p.stop()
            k.kill()
        log = k.log()
        # kubelet's text, at warn: a plugin ending its stream is not kdevctl's error.
        assert 'level=warn msg="ListAndWatch ended unexpectedly for device plugin" ' \
            'resource=example.com/fake code=OK' in log, log
        assert "level=error" not in log, log
        want = (
            "wait: satisfied: example.com/fake allocatable 2 (wanted 2)\n"
            "wait: satisfied: example.com/other allocatable 1 (wanted 1)\n"
            "pod late (uid %s): rejected: UnexpectedAdmissionError: Allocate failed due to no "
            "healthy devices present; cannot allocate unhealthy devices example.com/fake, which "
            "is unexpected\n"
            "\n"
            "RESOURCE            CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT     STATE\n"
            "example.com/fake    2          0             0           fake.sock    stopped\n"
            "example.com/other   1          1             0           other.sock   connected\n"
        ) % uid("late")
        expect_eq(out, want, "stdout")
        assert rc == 0


def test_restart_signal_and_cleanup():
    with TempDir() as d:
        # Stale sockets are removed at start; other files and dirs are kept.
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(os.path.join(d, "stale.sock"))
        stale.close()
        os.mkdir(os.path.join(d, "subdir"))
        with open(os.path.join(d, "notes.txt"), "w") as f:
            f.write("x")
        k = Kubelet(d, None)
        p = Plugin(d)
        try:
            k.wait_serving()
            assert not os.path.exists(os.path.join(d, "stale.sock"))
            p.start()
            assert p.register() is None
            wait_for(lambda: os.path.exists(os.path.join(d, "kubelet_internal_checkpoint")),
                     what="checkpoint")
            k.proc.send_signal(signal.SIGHUP)
            # Every socket goes (the plugin's too), kubelet.sock comes back.
            wait_for(lambda: not os.path.exists(p.path), what="plugin socket removed")
            wait_for(lambda: k.log().count('msg="serving Registration"') == 2,
                     what="new kubelet.sock")
            assert os.path.exists(k.sock)
            wait_for(lambda: p.streams_cancelled == 1, what="stream dropped")
            assert os.path.isdir(os.path.join(d, "subdir"))
            assert os.path.exists(os.path.join(d, "notes.txt"))
            assert os.path.exists(os.path.join(d, "kubelet_internal_checkpoint"))
            rc, out = k.stop()
        finally:
            p.stop()
            k.kill()
        assert rc == 0
        # Restored from the checkpoint: known, no devices, stopped endpoint.
        expect_eq(out, "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT   STATE\n"
                       "example.com/fake   0          0             0           -          "
                       "stopped\n", "stdout")
        assert not os.path.exists(k.sock)
        assert "simulating kubelet restart" in k.log()


def test_scenario_restart_and_held_devices():
    scenario = """
wait: {resources: {example.com/fake: 2}}
pods:
  - name: a
    containers: [{name: c, limits: {example.com/fake: 1}}]
steps:
  - restart: true
  - wait: {timeout: 30, resources: {example.com/fake: 2}}
  - pod: {name: a, containers: [{name: c, limits: {example.com/fake: 1}}]}
  - pod: {name: b, containers: [{name: c, limits: {example.com/fake: 2}}]}
  - delete: a
  - pod: {name: b, containers: [{name: c, limits: {example.com/fake: 2}}]}
"""
    with TempDir() as d:
        k = Kubelet(d, scenario)
        p = Plugin(d, devices=2, preferred=False, prestart=False)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            # After the restart step the plugin registers again (its socket
            # was deleted: serve a new one, like a plugin watching the dir).
            wait_for(lambda: "simulating kubelet restart" in k.log(), what="restart")
            p.stop()
            p2 = Plugin(d, devices=2, preferred=False, prestart=False).start()
            try:
                wait_for(lambda: k.log().count('msg="serving Registration"') == 2,
                         what="new kubelet.sock")
                assert p2.register() is None
                rc, out = k.finish()
            finally:
                p2.stop()
            # The held devices were not allocated again: one Allocate, for b.
            assert p2.methods() == ["options", "watch", "allocate"], p2.methods()
        finally:
            p.stop()
            k.kill()
        a, b = uid("a"), uid("b")
        want = (
            "wait: satisfied: example.com/fake allocatable 2 (wanted 2)\n"
            "pod a (uid {a}): admitted\n"
            "  container c\n"
            "    example.com/fake: d0\n"
            "    env FAKE_DEVICES=d0\n"
            "    env FAKE_VENDOR=example.com/fake\n"
            "    mount /opt/fake from /tmp (ro)\n"
            "    device /dev/fake-d0 from /dev/null (rw)\n"
            "    annotation fake.example.com/devices=d0\n"
            "    cdi example.com/fake=d0\n"
            "restart: restarted; checkpoint restored: 1 resources, 1 pod device entries\n"
            "wait: satisfied: example.com/fake allocatable 2 (wanted 2)\n"
            "pod a (uid {a}): admitted\n"
            "  container c\n"
            "    example.com/fake: d0 (held from before, no Allocate)\n"
            "    env FAKE_DEVICES=d0\n"
            "    env FAKE_VENDOR=example.com/fake\n"
            "    mount /opt/fake from /tmp (ro)\n"
            "    device /dev/fake-d0 from /dev/null (rw)\n"
            "    annotation fake.example.com/devices=d0\n"
            "    cdi example.com/fake=d0\n"
            "pod b (uid {b}): rejected: UnexpectedAdmissionError: Allocate failed due to requested "
            "number of devices unavailable for example.com/fake. Requested: 2, Available: 1, "
            "which is unexpected\n"
            "delete a: removed, 1 pod device entries freed\n"
            "pod b (uid {b}): admitted\n"
            "  container c\n"
            "    example.com/fake: d0,d1\n"
            "    env FAKE_DEVICES=d0,d1\n"
            "    env FAKE_VENDOR=example.com/fake\n"
            "    mount /opt/fake from /tmp (ro)\n"
            "    device /dev/fake-d0 from /dev/null (rw)\n"
            "    device /dev/fake-d1 from /dev/null (rw)\n"
            "    annotation fake.example.com/devices=d0,d1\n"
            "    cdi example.com/fake=d0\n"
            "    cdi example.com/fake=d1\n"
            "\n"
            "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT    STATE\n"
            "example.com/fake   2          2             2           fake.sock   connected\n"
        ).format(a=a, b=b)
        expect_eq(out, want, "stdout")
        assert rc == 0


def test_allocate_errors():
    scenario = """
wait: {resources: {example.com/fake: 1}}
pods:
  - name: a
    containers: [{name: c, limits: {example.com/fake: 1}}]
  - name: b
    containers: [{name: c, limits: {example.com/fake: 1}}]
"""
    with TempDir() as d:
        k = Kubelet(d, scenario)
        p = Plugin(d, devices=2, preferred=False, prestart=False)
        p.allocate_modes = ["error", "empty"]
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            rc, out = k.finish()
        finally:
            p.stop()
            k.kill()
        want = (
            "wait: satisfied: example.com/fake allocatable 2 (wanted 1)\n"
            "pod a (uid %s): rejected: UnexpectedAdmissionError: Allocate failed due to rpc "
            "error: code = NotFound desc = device d0 is gone, which is unexpected\n"
            "pod b (uid %s): rejected: UnexpectedAdmissionError: Allocate failed due to no "
            "containers return in allocation response, which is unexpected\n"
            "\n"
            "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT    STATE\n"
            "example.com/fake   2          2             0           fake.sock   connected\n"
        ) % (uid("a"), uid("b"))
        expect_eq(out, want, "stdout")
        assert rc == 0


def health(n, unhealthy=()):
    return [("d%d" % i, "Unhealthy" if i in unhealthy else "Healthy") for i in range(n)]


def test_wait_allocatable_exact():
    with TempDir() as d:
        t = os.path.dirname(d)
        scenario = """
wait: {{timeout: 30, allocatable: {{example.com/fake: 3}}}}
steps:
  - exec: "touch {t}/unhealthy"
  - wait: {{timeout: 30, allocatable: {{example.com/fake: 2}}}}
  - exec: {{command: "touch {t}/recover; while [ ! -e {t}/go ]; do sleep 0.02; done", timeout: 60}}
  - wait: {{timeout: 30, allocatable: {{example.com/fake: 3}}, resources: {{example.com/other: 1}}}}
  - wait: {{timeout: 30, allocatable: {{example.com/fake: 2}}}}
  - wait: {{timeout: 0.3, allocatable: {{example.com/fake: 5, vendor.com/none: 0}}}}
""".format(t=t)
        k = Kubelet(d, scenario)
        p = Plugin(d, devices=3, preferred=False, prestart=False)
        q = Plugin(d, name="other.sock", resource="example.com/other", devices=1)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            # A device turns Unhealthy: allocatable 2 of 3.
            wait_for(lambda: os.path.exists(os.path.join(t, "unhealthy")), what="exec 1")
            p.push(health(3, unhealthy=[1]))
            # While the exec command runs, the loop keeps serving: Register
            # (with its dial-back and GetDevicePluginOptions) and
            # ListAndWatch; the command ends only after that.
            wait_for(lambda: os.path.exists(os.path.join(t, "recover")), what="exec 2")
            p.push(health(3))
            q.start()
            assert q.register() is None
            wait_for(lambda: "resource=example.com/other devices=1 healthy=1" in k.log(),
                     what="other's ListAndWatch during exec")
            assert "exec finished" not in k.log().split("touch %s/recover" % t)[-1], k.log()
            open(os.path.join(t, "go"), "w").close()
            # A blip that lasts one update: Unhealthy then Healthy again, back
            # to back, while kdevctl is stopped, so that it reads both in one
            # go. The wait sees the state of every update, not just the last.
            wait_for(lambda: 'msg="scenario step" kind=wait line=8' in k.log(), what="step 5")
            k.proc.send_signal(signal.SIGSTOP)
            try:
                p.push(health(3, unhealthy=[2]), health(3))
                wait_for(lambda: p.sent == 2, what="blip sent")
                # grpcio's send completes before the bytes reach the socket;
                # give its transport a moment (were they read apart, the
                # test would still pass, only test less).
                time.sleep(0.3)
            finally:
                k.proc.send_signal(signal.SIGCONT)
            rc, out = k.finish()
        finally:
            p.stop()
            q.stop()
            k.kill()
        want = (
            "wait: satisfied: example.com/fake allocatable 3 (wanted exactly 3)\n"
            "exec: touch {t}/unhealthy: exit 0\n"
            "wait: satisfied: example.com/fake allocatable 2 (wanted exactly 2)\n"
            "exec: touch {t}/recover; while [ ! -e {t}/go ]; do sleep 0.02; done: exit 0\n"
            "wait: satisfied: example.com/other allocatable 1 (wanted 1) example.com/fake "
            "allocatable 3 (wanted exactly 3)\n"
            "wait: satisfied: example.com/fake allocatable 2 (wanted exactly 2)\n"
            "wait: timed out: example.com/fake allocatable 3 (wanted exactly 5) vendor.com/none "
            "unregistered (wanted allocatable exactly 0)\n"
            "\n"
            "RESOURCE            CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT     STATE\n"
            "example.com/fake    3          3             0           fake.sock    connected\n"
            "example.com/other   1          1             0           other.sock   connected\n"
        ).format(t=t)
        expect_eq(out, want, "stdout")
        assert rc == 0


def test_wait_allocatable_after_restart():
    """After a restart the checkpoint brings the resource back with no
    devices: `allocatable: {r: 0}` waits for the plugin's own list."""
    scenario = """
wait: {allocatable: {example.com/fake: 2}}
steps:
  - restart: true
  - wait: {timeout: 30, resources: {example.com/fake: 0}}
  - wait: {timeout: 0.5, allocatable: {example.com/fake: 0}}
  - wait: {timeout: 30, allocatable: {example.com/fake: 2}}
"""
    with TempDir() as d:
        k = Kubelet(d, scenario)
        p = Plugin(d, devices=2, preferred=False, prestart=False)
        p2 = Plugin(d, devices=2, preferred=False, prestart=False)
        p2.first_list.clear()
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            wait_for(lambda: "simulating kubelet restart" in k.log(), what="restart")
            wait_for(lambda: k.log().count('msg="serving Registration"') == 2,
                     what="new kubelet.sock")
            p.stop()
            p2.start()
            assert p2.register() is None
            wait_for(lambda: 'msg="wait timed out"' in k.log(), what="exact 0 timed out")
            p2.first_list.set()
            rc, out = k.finish()
        finally:
            p.stop()
            p2.stop()
            k.kill()
        want = (
            "wait: satisfied: example.com/fake allocatable 2 (wanted exactly 2)\n"
            "restart: restarted; checkpoint restored: 1 resources, 0 pod device entries\n"
            "wait: satisfied: example.com/fake connected\n"
            "wait: timed out: example.com/fake no device list yet (wanted allocatable exactly "
            "0)\n"
            "wait: satisfied: example.com/fake allocatable 2 (wanted exactly 2)\n"
            "\n"
            "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT    STATE\n"
            "example.com/fake   2          2             0           fake.sock   connected\n"
        )
        expect_eq(out, want, "stdout")
        assert rc == 0


def proc_gone(pid):
    """True when |pid| has ended (gone, or a zombie nobody reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_exec_steps():
    with TempDir() as d:
        t = os.path.dirname(d)
        scenario = """
steps:
  - exec: "echo to-stdout; echo to-stderr >&2"
  - exec: 'test "$KDEV_EXEC_T" = yes && test "$(readlink /proc/$$/fd/0)" = /dev/null'
  - exec: "kill -PIPE $$"
  - exec: {{command: "sleep 60 & echo $! > {t}/pid; wait", timeout: 2}}
  - exec: |
      echo multi
      exit 7
""".format(t=t)
        k = Kubelet(d, scenario, env=dict(os.environ, KDEV_EXEC_T="yes"))
        try:
            rc, out = k.finish()
        finally:
            k.kill()
        # Exit statuses, signals (SIGPIPE is back to default in the child) and
        # the timeout are results; the scenario goes on and exits 0.
        want = (
            "exec: echo to-stdout; echo to-stderr >&2: exit 0\n"
            "exec: test \"$KDEV_EXEC_T\" = yes && test \"$(readlink /proc/$$/fd/0)\" = /dev/null: "
            "exit 0\n"
            "exec: kill -PIPE $$: killed by signal 13\n"
            "exec: sleep 60 & echo $! > {t}/pid; wait: timed out after 2 s\n"
            "exec: echo multi\\nexit 7\\n: exit 7\n"
            "\n"
            "no resources\n"
        ).format(t=t)
        expect_eq(out, want, "stdout")
        assert rc == 0
        log = k.log()
        assert "\nto-stdout\n" in log and "\nto-stderr\n" in log and "\nmulti\n" in log, log
        # The timeout killed the process group: the background sleep too.
        with open(os.path.join(t, "pid")) as f:
            pid = int(f.read())
        wait_for(lambda: proc_gone(pid), what="background sleep killed")

    with TempDir() as d:
        k = Kubelet(d, "steps:\n  - exec: \"true\"\n  - exec: \"exit 2\"\n"
                       "  - exec: {command: \"kill -TERM $$\"}\n"
                       "  - exec: {command: \"sleep 30\", timeout: 0.2}\n", "-o", "json")
        try:
            rc, out = k.finish()
        finally:
            k.kill()
        assert rc == 0
        j = json.loads(out)
        assert j["steps"] == [
            {"kind": "exec", "ok": True, "result": "true: exit 0", "command": "true",
             "exitCode": 0},
            {"kind": "exec", "ok": False, "result": "exit 2: exit 2", "command": "exit 2",
             "exitCode": 2},
            {"kind": "exec", "ok": False, "result": "kill -TERM $$: killed by signal 15",
             "command": "kill -TERM $$", "signal": 15},
            {"kind": "exec", "ok": False, "result": "sleep 30: timed out after 0.2 s",
             "command": "sleep 30", "signal": 9, "timedOut": True},
        ], json.dumps(j["steps"], indent=1)
        assert j["resources"] == [], j


def test_exec_sigterm():
    """kdevctl stopping while a command runs kills the command's group."""
    with TempDir() as d:
        t = os.path.dirname(d)
        k = Kubelet(d, "steps:\n  - exec: {command: \"echo $$ > %s/sh; sleep 60 & echo $! > "
                       "%s/pid; wait\", timeout: 120}\n" % (t, t))
        try:
            wait_for(lambda: os.path.exists(os.path.join(t, "pid")) and
                     os.path.getsize(os.path.join(t, "pid")) > 0, what="command started")
            rc, out = k.stop()
        finally:
            k.kill()
        assert rc == 0
        expect_eq(out, "exec: not finished\n\nno resources\n", "stdout")
        for name in ("sh", "pid"):
            with open(os.path.join(t, name)) as f:
                pid = int(f.read())
            wait_for(lambda: proc_gone(pid), what="%s killed" % name)
        assert "stopping: killing the running exec command" in k.log(), k.log()


def test_usage():
    rc, out, err = kdevctl("kubelet")
    assert rc == 2 and out == ""
    expect_eq(err, "kdevctl kubelet: missing --dir DIR\nRun 'kdevctl kubelet --help' for usage.\n",
              "stderr")
    rc, out, err = kdevctl("kubelet", "--help")
    assert rc == 0 and "SIGHUP" in out and "--restart-after" in out, out
    with TempDir() as d:
        bad = os.path.join(os.path.dirname(d), "bad.yaml")
        with open(bad, "w") as f:
            f.write("pods: {}\n")
        rc, out, err = kdevctl("kubelet", "--dir", d, "--scenario", bad)
        assert rc == 1 and out == ""
        expect_eq(err, "kdevctl kubelet: %s:1:7: pods: expected a list, got a mapping\n" % bad,
                  "stderr")
    rc, out, err = kdevctl("checkpoint", "a", "b")
    assert rc == 2
    expect_eq(err, "kdevctl checkpoint: unexpected argument \"b\"\n"
                   "Run 'kdevctl checkpoint --help' for usage.\n", "stderr")


def test_checkpoint_pre_120_layout():
    """A kubelet 1.19 file: flat DeviceIDs, checksum over the 1.19 type names
    (value computed with Go + go-spew over kubelet's checkpointv1.go types)."""
    with TempDir() as d:
        ck = os.path.join(d, "kubelet_internal_checkpoint")
        with open(ck, "w") as f:
            f.write('{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":'
                    '"PodDevicesEntryV1","ResourceName":"example.com/r","DeviceIDs":null,'
                    '"AllocResp":""},{"PodUID":"p","ContainerName":"c","ResourceName":'
                    '"example.com/r","DeviceIDs":["a","b"],"AllocResp":"ChQKC0VYQU1QTEVfR1BVEgVk'
                    'ZXYtMCoXChVleGFtcGxlLmNvbS9ncHU9ZGV2LTA="}],"RegisteredDevices":'
                    '{"example.com/r":["a","b"]}},"Checksum":2094728300}')
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 0 and err == "", (rc, err)
        want = (
            "File: %s\n"
            "Layout: pre-1.20 (flat DeviceIDs list, read as NUMA node 0)\n"
            "\n"
            "Registered resources:\n"
            "  RESOURCE        HEALTHY   DEVICES\n"
            "  example.com/r   2         a,b\n"
            "\n"
            "Pod device entries: 2\n"
            "  pod p container PodDevicesEntryV1 resource example.com/r\n"
            "    numa 0: none\n"
            "    AllocResp empty (0 bytes)\n"
            "  pod p container c resource example.com/r\n"
            "    numa 0: a,b\n"
            "    env EXAMPLE_GPU=dev-0\n"
            "    cdi example.com/gpu=dev-0\n"
            "\n"
            "checksum OK (2094728300)\n"
        ) % ck
        expect_eq(out, want, "stdout")
        rc, out, err = kdevctl("checkpoint", ck, "-o", "json")
        j = json.loads(out)
        assert j["layout"] == "pre-1.20" and j["checksum"]["ok"] is True, j
        assert j["podDeviceEntries"][0]["deviceIDs"] == {"0": None}, j


def test_restart_after_option():
    with TempDir() as d:
        k = Kubelet(d, None, "--restart-after", "3", "--hold", "5")
        p = Plugin(d, devices=1)
        try:
            k.wait_serving()
            p.start()
            assert p.register() is None
            wait_for(lambda: "ListAndWatch update" in k.log(), what="first update")
            assert "simulating kubelet restart" not in k.log(), "restart came too early"
            wait_for(lambda: "simulating kubelet restart" in k.log(), what="restart")
            rc, out = k.finish()
        finally:
            p.stop()
            k.kill()
        assert rc == 0
        expect_eq(out, "RESOURCE           CAPACITY   ALLOCATABLE   ALLOCATED   ENDPOINT   STATE\n"
                       "example.com/fake   0          0             0           -          "
                       "stopped\n", "stdout")


def test_checkpoint_none_and_paths():
    """Tables say none for empty and nil lists alike (-o json keeps null); the
    default path and a socket given as the file are named in the error."""
    with TempDir() as d:
        ck = os.path.join(d, "kubelet_internal_checkpoint")
        with open(ck, "w") as f:
            f.write('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},'
                    '"Checksum":1944006890}')
        rc, out, err = kdevctl("checkpoint", d)
        assert rc == 0 and err == "", (rc, err)
        expect_eq(out, "File: %s\n"
                       "Layout: current (DeviceIDs per NUMA node)\n"
                       "\n"
                       "Registered resources: none\n"
                       "\n"
                       "Pod device entries: none\n"
                       "\n"
                       "checksum OK (1944006890)\n" % ck, "stdout")
        rc, out, err = kdevctl("checkpoint", d, "-o", "json")
        j = json.loads(out)
        assert rc == 0 and j["registeredDevices"] is None and j["podDeviceEntries"] is None, j
        # nil and empty inner lists, nil DeviceIDs and AllocResp (checksums from Go).
        with open(ck, "w") as f:
            f.write('{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c",'
                    '"ResourceName":"example.com/r","DeviceIDs":null,"AllocResp":null}],'
                    '"RegisteredDevices":{}},"Checksum":769222883}')
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 0 and err == "", (rc, err)
        expect_eq(out, "File: %s\n"
                       "Layout: current (DeviceIDs per NUMA node)\n"
                       "\n"
                       "Registered resources: none\n"
                       "\n"
                       "Pod device entries: 1\n"
                       "  pod p container c resource example.com/r\n"
                       "    DeviceIDs none\n"
                       "    AllocResp none\n"
                       "\n"
                       "checksum OK (769222883)\n" % ck, "stdout")
        rc, out, err = kdevctl("checkpoint", ck, "-o", "json")
        j = json.loads(out)
        assert j["podDeviceEntries"][0]["deviceIDs"] is None, j
        assert j["podDeviceEntries"][0]["allocResp"] is None, j
        with open(ck, "w") as f:
            f.write('{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c",'
                    '"ResourceName":"example.com/r","DeviceIDs":{"-1":["a"],"10":["c"],'
                    '"2":["b"]},"AllocResp":null}],"RegisteredDevices":{"a.com/x":null,'
                    '"b.com/r":[]}},"Checksum":180004985}')
        rc, out, err = kdevctl("checkpoint", ck)
        assert rc == 0 and err == "", (rc, err)
        expect_eq(out, "File: %s\n"
                       "Layout: current (DeviceIDs per NUMA node)\n"
                       "\n"
                       "Registered resources:\n"
                       "  RESOURCE   HEALTHY   DEVICES\n"
                       "  a.com/x    0         none\n"
                       "  b.com/r    0         none\n"
                       "\n"
                       "Pod device entries: 1\n"
                       "  pod p container c resource example.com/r\n"
                       "    numa -1: a\n"
                       "    numa 2: b\n"
                       "    numa 10: c\n"
                       "    AllocResp none\n"
                       "\n"
                       "checksum OK (180004985)\n" % ck, "stdout")
        rc, out, err = kdevctl("checkpoint", ck, "-o", "json")
        j = json.loads(out)
        assert j["registeredDevices"] == {"a.com/x": None, "b.com/r": []}, j

        # A socket where the checkpoint was wanted (DIR/kubelet.sock for DIR).
        sp = os.path.join(d, "kubelet.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(sp)
            rc, out, err = kdevctl("checkpoint", sp)
            assert rc == 1 and out == "", (rc, out)
            expect_eq(err, "kdevctl checkpoint: %s: is not a regular file (a socket)\n" % sp,
                      "stderr")
            rc, out, err = kdevctl("checkpoint", sp, "-o", "json")
            assert rc == 1, rc
            assert json.loads(out) == {"file": sp, "error": "%s: is not a regular file (a "
                                                            "socket)" % sp}, out
        finally:
            s.close()
    # Without an argument: kubelet's file, named in full.
    dflt = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    if not os.path.exists(dflt):
        rc, out, err = kdevctl("checkpoint")
        assert rc == 1 and out == "", (rc, out)
        expect_eq(err, "kdevctl checkpoint: %s: cannot read: No such file or directory\n" % dflt,
                  "stderr")


def test_fractional_seconds():
    """--hold, --restart-after and --dial-timeout take fractions like the
    scenario's sleep; bad values name the option."""
    with TempDir() as d:
        t0 = time.monotonic()
        rc, out, err = kdevctl("kubelet", "--dir", d, "--hold", "0.5", "--restart-after", "0.25",
                               "--dial-timeout", "0.5")
        took = time.monotonic() - t0
        assert rc == 0, (rc, err)
        expect_eq(out, "no resources\n", "stdout")
        assert "simulating kubelet restart" in err, err
        assert 0.5 <= took < 30, took
    for opt, zero in (("--hold", "until SIGINT/SIGTERM"), ("--restart-after", "at once"),
                      ("--dial-timeout", "one try, no retry")):
        for bad in ("-1", "1s", "x", "31536001"):
            rc, out, err = kdevctl("kubelet", "--dir", "/nonexistent/d", opt, bad)
            assert rc == 2 and out == "", (rc, out)
            expect_eq(err, "kdevctl kubelet: invalid %s \"%s\" (want seconds such as 2 or 0.5, "
                           "from 0 to 31536000; 0 = %s)\nRun 'kdevctl kubelet --help' for "
                           "usage.\n" % (opt, bad, zero), "stderr")


def test_scenario_unknown_key():
    """Worded like the plugin config's unknown keys."""
    with TempDir() as d:
        bad = os.path.join(os.path.dirname(d), "bad.yaml")
        with open(bad, "w") as f:
            f.write("pods:\n  - name: a\n    containers: [{name: c, limit: {}}]\n")
        rc, out, err = kdevctl("kubelet", "--dir", d, "--scenario", bad)
        assert rc == 1 and out == ""
        expect_eq(err, "kdevctl kubelet: %s:3:28: pods[0].containers[0].limit: unknown key "
                       "(expected one of: name, limits)\n" % bad, "stderr")


def test_plugin_flood_log_bounded():
    """Plugins repeating themselves: one re-registering 30 times, another
    streaming 200 identical ListAndWatch updates. kdevctl kubelet writes each
    repeated line once, then one line with the count (common/log.h); all
    within one 5 s window, so with the counts printed at exit exactly two
    lines each."""
    regs, pushes = 30, 200
    other = "example.com/other"
    with TempDir() as d:
        k = Kubelet(d)
        p = Plugin(d)
        p.first_list.clear()   # its streams send nothing: only Register repeats
        q = Plugin(d, name="other.sock", resource=other)
        try:
            k.wait_serving()
            p.start()
            q.start()
            t0 = time.monotonic()
            for _ in range(regs):
                assert p.register() is None
            assert q.register() is None
            wait_for(lambda: "resource=%s devices=3 healthy=3" % other in k.log(),
                     what="the first update")
            same = [("d%d" % i, "Healthy") for i in range(3)]
            q.push(*([same] * pushes), [("d0", "Unhealthy"), ("d1", "Healthy"),
                                        ("d2", "Healthy")])
            # the distinct last update comes after the identical ones
            wait_for(lambda: "devices=3 healthy=2" in k.log(), what="the last update")
            elapsed = time.monotonic() - t0
            # one window: else the number of repeat lines would be a race
            assert elapsed < 4.5, elapsed
            rc, _ = k.stop()
        finally:
            p.first_list.set()
            p.stop()
            q.stop()
            k.kill()
        assert rc == 0, rc
        log = k.log()

        def lines(msg, pairs):
            return [line.split(" level=", 1)[1] for line in log.splitlines()
                    if (' msg="%s"' % msg in line or ' msg="%s, repeated ' % msg in line)
                    and pairs in line]

        def expect_repeated(msg, pairs, count):
            got = lines(msg, pairs)
            assert len(got) == 2, got
            assert got[0].endswith('msg="%s" %s' % (msg, pairs)), got
            head = 'msg="%s, repeated %d times in the last ' % (msg, count - 1)
            assert head in got[1] and got[1].endswith(" %s repeated=%d" % (pairs, count - 1)), got

        expect_repeated("Register", "resource=%s endpoint=fake.sock version=v1beta1" % RES, regs)
        expect_repeated("registered device plugin", "resource=%s endpoint=fake.sock "
                        "pre_start_required=true get_preferred_allocation_available=true" % RES,
                        regs)
        assert lines("ListAndWatch update", "resource=%s " % RES) == []
        # its first list, then the 200 identical ones
        expect_repeated("ListAndWatch update", "resource=%s devices=3 healthy=3" % other,
                        1 + pushes)
        assert lines("ListAndWatch update", "devices=3 healthy=2") == [
            'info msg="ListAndWatch update" resource=%s devices=3 healthy=2' % other]
        assert lines("Register", "resource=%s " % other) == [
            'info msg="Register" resource=%s endpoint=other.sock version=v1beta1' % other]


def test_state_file():
    """--state FILE: rewritten after every change of the resources, with
    exactly what -o json prints as "resources" (devices with their health)."""
    with TempDir() as d:
        state = os.path.join(os.path.dirname(d), "state.json")
        k = Kubelet(d, None, "--state", state)
        p = Plugin(d, devices=2)

        def read():
            with open(state) as f:
                return json.load(f)

        def res(devices, st="connected", endpoint="fake.sock"):
            healthy = sum(1 for _, h in devices if h == "Healthy")
            return {"name": RES, "capacity": len(devices), "allocatable": healthy,
                    "allocated": 0, "endpoint": endpoint, "state": st,
                    "devices": [{"id": i, "health": h} for i, h in devices]}
        try:
            k.wait_serving()
            wait_for(lambda: os.path.exists(state), what="state file written once serving")
            expect_eq(read(), {"updates": 1, "resources": []}, "state before any plugin")
            p.start()
            assert p.register() is None
            want = res([("d0", "Healthy"), ("d1", "Healthy")])
            wait_for(lambda: read()["resources"] == [want], what="state: first list")
            n = read()["updates"]
            assert n == 3, n  # registered, then the first list
            p.push([("d0", "Healthy"), ("d1", "Unhealthy"), ("d2", "Healthy")])
            want = res([("d0", "Healthy"), ("d1", "Unhealthy"), ("d2", "Healthy")])
            wait_for(lambda: read()["resources"] == [want], what="state: second list")
            expect_eq(read(), {"updates": n + 1, "resources": [want]}, "state after an update")
            p.end_stream.set()
            want = res([("d0", "Unhealthy"), ("d1", "Unhealthy"), ("d2", "Unhealthy")],
                       "stopped")
            wait_for(lambda: read()["resources"] == [want], what="state: stream ended")
            k.proc.send_signal(signal.SIGHUP)
            want = {"name": RES, "capacity": 0, "allocatable": 0, "allocated": 0,
                    "endpoint": None, "state": "stopped", "devices": []}
            wait_for(lambda: read()["resources"] == [want], what="state: restarted")
            # no temporary file left (one may exist for a moment while the
            # state file is being replaced)
            wait_for(lambda: sorted(os.listdir(os.path.dirname(state))) == [
                "device-plugins", "kubelet.err", "state.json"],
                what="only the state file beside the directory (now %s)"
                % os.listdir(os.path.dirname(state)))
            rc, out = k.stop()
        finally:
            p.stop()
            k.kill()
        assert rc == 0

if __name__ == "__main__":
    if not os.access(KDEVCTL, os.X_OK):
        print("FAIL: kdevctl not built at", KDEVCTL)
        sys.exit(1)
    kt.run_tests([test_scenario_admission_and_checkpoint, test_scenario_json,
                  test_register_errors, test_stream_end_and_reregistration,
                  test_restart_signal_and_cleanup, test_scenario_restart_and_held_devices,
                  test_allocate_errors, test_checkpoint_pre_120_layout,
                  test_restart_after_option, test_wait_allocatable_exact,
                  test_wait_allocatable_after_restart, test_exec_steps,
                  test_exec_sigterm, test_usage, test_checkpoint_none_and_paths,
                  test_fractional_seconds, test_scenario_unknown_key,
                  test_plugin_flood_log_bounded, test_state_file])
