#!/usr/bin/python3
"""kdev_interop: an independent gRPC peer (grpcio) for kdev's device plugin API
interoperability tests. Three roles, with the same command line as the Go peer
(tests/interop/go):

  client  - call every DevicePlugin RPC on a plugin socket and check the answers
  kubelet - serve v1beta1.Registration on DIR/kubelet.sock like kubelet does
  plugin  - a fake device plugin that serves DevicePlugin and registers

Messages are generated at start-up from the project's proto with
`protoc --python_out` (no grpc_tools: calls go through channel.unary_unary /
unary_stream and servers through generic handlers). Every check prints
"ok   NAME: detail" or "FAIL NAME: detail"; every role ends with a SUMMARY line.
Exit status: 0 all checks passed, 1 a check failed, 2 usage error.

Run with /usr/bin/python3 (the interpreter with python3-grpcio).
"""
import argparse
import importlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

LANG = "python"
GRPC_MAX_MSG = 4 * 1024 * 1024  # gRPC default receive limit; a longer message is refused
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_IDS = "null::0,null::1,null::2,null::3"


def load_messages():
    """Generate api_pb2 from the project's proto into a temp dir and import it."""
    src = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", "..", ".."))
    proto_dir = os.path.join(src, "proto", "deviceplugin", "v1beta1")
    out = tempfile.mkdtemp(prefix="kdev-interop-pb2-")
    try:
        subprocess.run(["protoc", "-I", proto_dir, "--python_out=" + out,
                        os.path.join(proto_dir, "api.proto")], check=True)
        sys.path.insert(0, out)
        try:
            return importlib.import_module("api_pb2")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


pb = load_messages()

DP = "/v1beta1.DevicePlugin/"
METHODS = {  # name: (request type, response type, streaming)
    "GetDevicePluginOptions": (pb.Empty, pb.DevicePluginOptions, False),
    "ListAndWatch": (pb.Empty, pb.ListAndWatchResponse, True),
    "GetPreferredAllocation": (pb.PreferredAllocationRequest, pb.PreferredAllocationResponse, False),
    "Allocate": (pb.AllocateRequest, pb.AllocateResponse, False),
    "PreStartContainer": (pb.PreStartContainerRequest, pb.PreStartContainerResponse, False),
}


OUT_LOCK = threading.Lock()


def out(line):
    """Print one whole line (threads must not interleave: the driver parses them)."""
    with OUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Checker:
    def __init__(self, role):
        self.role = role
        self.passed = 0
        self.failed = 0
        self.lock = threading.Lock()

    def ok(self, name, detail):
        with self.lock:
            self.passed += 1
            out("ok   %s: %s" % (name, detail))

    def fail(self, name, detail):
        with self.lock:
            self.failed += 1
            out("FAIL %s: %s" % (name, detail))

    def expect(self, cond, name, detail):
        (self.ok if cond else self.fail)(name, detail)
        return cond

    def summary(self):
        with self.lock:
            verdict = "PASS" if self.failed == 0 and self.passed > 0 else "FAIL"
            out("SUMMARY %s %s: %s (%d passed, %d failed)" % (self.role, LANG, verdict,
                                                               self.passed, self.failed))
            return 0 if verdict == "PASS" else 1


def event(text):
    out("EVENT " + text)


def socket_name(resource):
    return "kdev-" + resource.replace("/", "_") + ".sock"


def split_ids(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def channel(path):
    return grpc.insecure_channel("unix:" + path, options=[
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", GRPC_MAX_MSG),
        ("grpc.enable_retries", 0),
        ("grpc.use_local_subchannel_pool", 1),  # a new channel is a new connection
    ])


class DevicePluginStub:
    """Callables for each DevicePlugin method, plus raw() for any method path."""

    def __init__(self, ch):
        self.ch = ch
        for name, (req, resp, streaming) in METHODS.items():
            mk = ch.unary_stream if streaming else ch.unary_unary
            setattr(self, name, mk(DP + name, request_serializer=req.SerializeToString,
                                   response_deserializer=resp.FromString))

    def raw(self, path):
        return self.ch.unary_unary(path, request_serializer=pb.Empty.SerializeToString,
                                   response_deserializer=pb.Empty.FromString)


def register_stub(ch):
    return ch.unary_unary("/v1beta1.Registration/Register",
                          request_serializer=pb.RegisterRequest.SerializeToString,
                          response_deserializer=pb.Empty.FromString)


def rpc_code(e):
    return e.code() if isinstance(e, grpc.RpcError) else None


def rpc_details(e):
    return (e.details() or "") if isinstance(e, grpc.RpcError) else str(e)


def check_device_list(devices, want):
    """None when devices are exactly the IDs in want, each once, all Healthy; else why not."""
    for d in devices:
        if d.health != "Healthy":
            return "device %r health %r, want 'Healthy'" % (d.ID, d.health)
    got = [d.ID for d in devices]
    if sorted(got) != sorted(want):
        return "IDs %s, want %s" % (got, want)
    return None


# ---------------------------------------------------------------- client role

def fd_count(pid):
    if not pid:
        return -1
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def check_options(c, stub, name):
    """Check GetDevicePluginOptions' values; False only when the call itself failed."""
    try:
        o = stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
    except grpc.RpcError as e:
        c.fail(name, "GetDevicePluginOptions: %s %r" % (e.code(), e.details()))
        return False
    c.expect(not o.pre_start_required and o.get_preferred_allocation_available, name,
             "pre_start_required=%s get_preferred_allocation_available=%s (want False, True)"
             % (o.pre_start_required, o.get_preferred_allocation_available))
    return True


def check_law_first(c, stub, ids):
    try:
        it = stub.ListAndWatch(pb.Empty(), timeout=10)
        m = next(it)
        it.cancel()
    except grpc.RpcError as e:
        c.fail("listandwatch-first", "%s %r" % (e.code(), e.details()))
        return
    err = check_device_list(m.devices, ids)
    if err:
        c.fail("listandwatch-first", err)
    else:
        c.ok("listandwatch-first", "%d devices, all Healthy: %s" % (len(m.devices), ids))


def preferred_error(q, got):
    if len(got) != q.allocation_size:
        return "got %s: size %d, want %d" % (got, len(got), q.allocation_size)
    if len(set(got)) != len(got):
        return "got %s: duplicates" % got
    extra = set(got) - set(q.available_deviceIDs)
    if extra:
        return "got %s: %s not in available %s" % (got, sorted(extra), list(q.available_deviceIDs))
    missing = set(q.must_include_deviceIDs) - set(got)
    if missing:
        return "got %s: must_include %s missing" % (got, sorted(missing))
    return None


def check_preferred(c, stub, ids):
    req = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids,
                                               must_include_deviceIDs=[ids[2]], allocation_size=2),
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=[ids[1], ids[-1]],
                                               allocation_size=1),
    ])
    try:
        r = stub.GetPreferredAllocation(req, timeout=10)
    except grpc.RpcError as e:
        c.fail("preferred", "%s %r" % (e.code(), e.details()))
        return
    if len(r.container_responses) != 2:
        c.fail("preferred", "%d container responses, want 2" % len(r.container_responses))
        return
    for i, q in enumerate(req.container_requests):
        err = preferred_error(q, list(r.container_responses[i].deviceIDs))
        if err:
            c.fail("preferred", "request %d: %s" % (i, err))
            return
    c.ok("preferred", "2 requests: %s, %s (subset of available, must_include kept, exact size)"
         % (list(r.container_responses[0].deviceIDs), list(r.container_responses[1].deviceIDs)))


def specs(ds):
    return [(d.container_path, d.host_path, d.permissions) for d in ds]


def alloc_req(*groups):
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=g)
                                                  for g in groups])


def check_allocate(c, stub, ids, path):
    want = [(path, path, "rw")]
    try:
        r = stub.Allocate(alloc_req([ids[0]]), timeout=10)
        cr = r.container_responses
        if c.expect(len(cr) == 1 and specs(cr[0].devices) == want, "allocate",
                    "[%s] -> %d responses, devices %s (want 1, %s)"
                    % (ids[0], len(cr), [specs(x.devices) for x in cr], want)):
            out("note allocate: envs %s mounts %d annotations %s cdi_devices %d" % (
                dict(cr[0].envs), len(cr[0].mounts), dict(cr[0].annotations),
                len(cr[0].cdi_devices)))
    except grpc.RpcError as e:
        c.fail("allocate", "%s %r" % (e.code(), e.details()))
    try:
        r = stub.Allocate(alloc_req([ids[0]], [ids[1]]), timeout=10)
        got = [specs(x.devices) for x in r.container_responses]
        c.expect(got == [want, want], "allocate-two-containers",
                 "devices per container %s (want %s)" % (got, [want, want]))
    except grpc.RpcError as e:
        c.fail("allocate-two-containers", "%s %r" % (e.code(), e.details()))
    unknown = "kdev-interop-unknown-7"
    try:
        stub.Allocate(alloc_req([ids[0], unknown]), timeout=10)
        c.fail("allocate-unknown", "Allocate of unknown ID %r succeeded" % unknown)
    except grpc.RpcError as e:
        c.expect(e.code() != grpc.StatusCode.OK and unknown in (e.details() or ""),
                 "allocate-unknown", "code %s message %r (want an error naming %r)"
                 % (e.code(), e.details(), unknown))


def check_prestart(c, stub, ids):
    try:
        r = stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[ids[0]]), timeout=10)
        c.expect(r.ByteSize() == 0, "prestart", "PreStartContainer([%s]) OK, response %d bytes"
                 % (ids[0], r.ByteSize()))
    except grpc.RpcError as e:
        c.fail("prestart", "%s %r" % (e.code(), e.details()))


def check_unimplemented(c, stub):
    for path in ("/v1beta1.DevicePlugin/Nope", "/v1beta1.Nope/Allocate"):
        try:
            stub.raw(path)(pb.Empty(), timeout=10)
            c.fail("unimplemented", "%s succeeded" % path)
        except grpc.RpcError as e:
            c.expect(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unimplemented",
                     "%s -> %s (want UNIMPLEMENTED)" % (path, e.code()))


def check_deadline(c, stub, ids):
    start = time.monotonic()
    try:
        it = stub.ListAndWatch(pb.Empty(), timeout=0.5)
        err = check_device_list(next(it).devices, ids)
        if err:
            c.fail("deadline-client", "first message: " + err)
            return
        for _ in it:
            pass
        c.fail("deadline-client", "stream ended with OK after %.3fs" % (time.monotonic() - start))
    except grpc.RpcError as e:
        el = time.monotonic() - start
        c.expect(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and 0.45 <= el < 10,
                 "deadline-client", "stream ended after %.3fs with %s %r"
                 % (el, e.code(), e.details()))


def cancel_cycle(stub, ids):
    it = stub.ListAndWatch(pb.Empty(), timeout=10)
    try:
        err = check_device_list(next(it).devices, ids)
    except grpc.RpcError as e:
        return "first message: %s %r" % (e.code(), e.details())
    if err:
        return err
    it.cancel()
    try:
        for _ in it:
            pass
        return "stream ended OK after cancel"
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:
            return "after cancel: %s %r, want CANCELLED" % (e.code(), e.details())
    return None


def new_channel_cycles(socket, ids, n):
    for i in range(n):
        ch = channel(socket)
        try:
            err = cancel_cycle(DevicePluginStub(ch), ids)
        finally:
            ch.close()
        if err:
            return "cycle %d: %s" % (i, err)
    return None


def check_cancel(c, stub, socket, ids, cycles, pid):
    n = cycles * 2
    for i in range(n):
        err = cancel_cycle(stub, ids)
        if err:
            c.fail("cancel-same-channel", "cycle %d: %s" % (i, err))
            return
    check_options(c, stub, "cancel-same-channel")
    # A few cycles first, so that whatever the server allocates once per
    # process (not per connection) is in the baseline.
    err = new_channel_cycles(socket, ids, 5)
    baseline = fd_count(pid)
    err = err or new_channel_cycles(socket, ids, cycles)
    if err:
        c.fail("cancel-new-channel", err)
        return
    check_options(c, stub, "cancel-new-channel")
    if baseline < 0:
        out("note cancel-fds: no --pid, fd count not checked")
        return
    # Slack of 2 for connections the server has not finished closing; a leak
    # per cycle would show as +%d.
    deadline = time.monotonic() + 10
    now = fd_count(pid)
    while now > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
        now = fd_count(pid)
    c.expect(0 <= now <= baseline + 2, "cancel-fds",
             "plugin fds after warm-up %d, after %d more new-channel cancel cycles %d "
             "(want <= %d)" % (baseline, cycles, now, baseline + 2))


def big_allocate(size):
    """An AllocateRequest of exactly `size` serialized bytes of unknown IDs."""
    r = pb.AllocateRequest()
    car = r.container_requests.add()
    ids = ["kdev-big-%08d-" % i + "x" * 82 for i in range(size // 102)]
    car.devices_ids.extend(ids)
    for _ in range(1000):
        d = size - r.ByteSize()
        last = len(car.devices_ids) - 1
        n = len(car.devices_ids[last]) + d
        if d == 0:
            return r
        if 18 <= n <= 127:  # the length stays a one-byte varint
            car.devices_ids[last] = ("kdev-big-%08d-" % last).ljust(n, "x")
        elif d > 0:
            car.devices_ids.append("kdev-big-%08d-" % (last + 1))
        else:
            del car.devices_ids[last]
    raise RuntimeError("big_allocate did not converge")


def check_size_limit(c, stub):
    for size, over in ((GRPC_MAX_MSG + 1, True), (GRPC_MAX_MSG, False), (GRPC_MAX_MSG - 1000, False)):
        req = big_allocate(size)
        try:
            stub.Allocate(req, timeout=30)
            code, msg = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, msg = e.code(), e.details() or ""
        short = msg if len(msg) <= 200 else msg[:200] + "..."
        if over:
            c.expect(code == grpc.StatusCode.RESOURCE_EXHAUSTED, "size-limit-over",
                     "Allocate message of %d bytes -> %s %r (want RESOURCE_EXHAUSTED)"
                     % (size, code, short))
        else:
            c.expect(code not in (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED)
                     and "kdev-big-" in msg, "size-limit-under",
                     "Allocate message of %d bytes -> %s %r (want an error naming an unknown ID)"
                     % (size, code, short))


def run_client(a):
    ids = split_ids(a.ids)
    if len(ids) < 3:
        out("FAIL usage: --ids needs at least 3 IDs")
        return 2
    c = Checker("client")
    ch = channel(a.socket)
    stub = DevicePluginStub(ch)
    try:
        if not check_options(c, stub, "options"):
            out("note: first call failed, skipping the other checks")
            return c.summary()
        check_law_first(c, stub, ids)
        check_preferred(c, stub, ids)
        check_allocate(c, stub, ids, a.device_path)
        check_prestart(c, stub, ids)
        check_unimplemented(c, stub)
        check_deadline(c, stub, ids)
        check_cancel(c, stub, a.socket, ids, a.cancel_cycles, a.pid)
        check_size_limit(c, stub)
        check_options(c, stub, "options-after-all")
    finally:
        ch.close()
    return c.summary()


# ---------------------------------------------------------------- server helpers

def unary(fn, req, resp):
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req.FromString,
                                               response_serializer=resp.SerializeToString)


def new_server(service, handlers):
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=32),
                      options=[("grpc.max_receive_message_length", GRPC_MAX_MSG)])
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    return srv


def wait_for_signal(stop, timeout=None):
    """Wait until SIGTERM/SIGINT (sets stop) or timeout; True if signalled."""
    end = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        if end is not None and time.monotonic() >= end:
            return False
        stop.wait(0.1)
    return True


def install_signals():
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    return stop


# ---------------------------------------------------------------- kubelet role

class Kubelet:
    def __init__(self, c, a):
        self.c = c
        self.dir = a.dir
        self.resource = a.resource
        self.endpoint = a.endpoint or socket_name(a.resource)
        self.ids = split_ids(a.ids)
        self.fail_first = a.fail_first
        self.lock = threading.Lock()
        self.n = 0
        self.n_ok = 0
        self.ready = threading.Event()
        self.channels = []

    def register(self, r, ctx):
        with self.lock:
            self.n += 1
            n = self.n
        name = "register-%d" % n
        event("register #%d version=%r endpoint=%r resource_name=%r options={%s}"
              % (n, r.version, r.endpoint, r.resource_name, str(r.options).strip()))
        c = self.c
        fields = c.expect((r.version, r.endpoint, r.resource_name)
                          == ("v1beta1", self.endpoint, self.resource), name + "-fields",
                          "version %r endpoint %r resource_name %r (want %r %r %r)"
                          % (r.version, r.endpoint, r.resource_name, "v1beta1", self.endpoint,
                             self.resource))
        opts = c.expect(r.HasField("options") and r.options.get_preferred_allocation_available
                        and not r.options.pre_start_required, name + "-options",
                        "options {%s} (want get_preferred_allocation_available: true)"
                        % str(r.options).strip())
        if not (fields and opts) or "/" in r.endpoint:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "kdev-interop: bad Register fields")
        path = os.path.join(self.dir, r.endpoint)
        try:
            is_sock = stat.S_ISSOCK(os.stat(path).st_mode)
        except OSError as e:
            is_sock = False
            path += " (%s)" % e
        if not c.expect(is_sock, name + "-endpoint-exists",
                        "%s is a socket when Register arrives" % path):
            ctx.abort(grpc.StatusCode.UNKNOWN, "failed to dial device plugin")
        ch = channel(os.path.join(self.dir, r.endpoint))
        try:
            o = DevicePluginStub(ch).GetDevicePluginOptions(pb.Empty(), timeout=10)
        except grpc.RpcError as e:
            ch.close()
            c.fail(name + "-dial-back", "GetDevicePluginOptions during Register: %s %r"
                   % (e.code(), e.details()))
            ctx.abort(grpc.StatusCode.UNKNOWN, "failed to get device plugin options: %s"
                      % e.details())
        c.expect(o.get_preferred_allocation_available and not o.pre_start_required,
                 name + "-dial-back", "GetDevicePluginOptions during Register: "
                 "pre_start_required=%s get_preferred_allocation_available=%s"
                 % (o.pre_start_required, o.get_preferred_allocation_available))
        if n <= self.fail_first:
            ch.close()
            event("register #%d answered with an injected error" % n)
            ctx.abort(grpc.StatusCode.UNKNOWN, "kdev-interop: injected failure for Register #%d" % n)
        # Like kubelet, a new registration replaces the endpoint: the previous
        # connection (and its ListAndWatch) is closed.
        with self.lock:
            for old in self.channels:
                old.close()
            self.channels = [ch]
            self.n_ok += 1
        threading.Thread(target=self.watch, args=(ch, n), daemon=True).start()
        event("register #%d answered OK" % n)
        return pb.Empty()

    def watch(self, ch, n):
        name = "register-%d-listandwatch" % n
        try:
            it = DevicePluginStub(ch).ListAndWatch(pb.Empty())
            m = next(it)
        except grpc.RpcError as e:
            self.c.fail(name, "%s %r" % (e.code(), e.details()))
            return
        err = check_device_list(m.devices, self.ids)
        if err:
            self.c.fail(name, err)
            return
        self.c.ok(name, "first message: %d devices, all Healthy" % len(m.devices))
        self.ready.set()
        try:
            for m in it:
                event("listandwatch #%d update: %d devices" % (n, len(m.devices)))
            event("listandwatch #%d ended: OK" % n)
        except grpc.RpcError as e:
            event("listandwatch #%d ended: %s" % (n, e.code()))
        except ValueError:  # channel closed under us at exit
            pass


def run_kubelet(a):
    c = Checker("kubelet")
    k = Kubelet(c, a)
    stop = install_signals()
    sock = os.path.join(a.dir, "kubelet.sock")
    try:
        os.unlink(sock)
    except FileNotFoundError:
        pass
    srv = new_server("v1beta1.Registration",
                     {"Register": unary(k.register, pb.RegisterRequest, pb.Empty)})
    if srv.add_insecure_port("unix:" + sock) == 0:
        c.fail("listen", sock)
        return c.summary()
    srv.start()
    event("serving " + sock)
    end = time.monotonic() + a.timeout
    while not k.ready.is_set() and not stop.is_set() and time.monotonic() < end:
        k.ready.wait(0.1)
    with k.lock:
        n = k.n
    if k.ready.is_set():
        c.ok("register-retry", "%d Registers answered with an error, then success; "
             "%d Registers so far" % (k.fail_first, n))
        out("KUBELET-READY")
        wait_for_signal(stop)
        # kubelet.sock never changed: one successful registration is enough,
        # and every extra one makes kubelet replace the plugin's endpoint.
        with k.lock:
            n_ok = k.n_ok
        c.expect(n_ok == 1, "register-once", "%d Registers answered OK (want exactly 1: "
                 "no re-registration while kubelet.sock is unchanged)" % n_ok)
    elif stop.is_set():
        c.fail("ready", "signalled before a successful Register + ListAndWatch")
    else:
        c.fail("ready", "no successful Register + ListAndWatch within %ss (%d Registers seen)"
               % (a.timeout, n))
    srv.stop(0)
    with k.lock:
        for ch in k.channels:
            ch.close()
    try:
        os.unlink(sock)
    except FileNotFoundError:
        pass
    return c.summary()


# ---------------------------------------------------------------- plugin role

class FakePlugin:
    def __init__(self, ids, device_path):
        self.ids = ids
        self.known = set(ids)
        self.device_path = device_path
        self.lock = threading.Lock()
        self.streams = 0

    def options(self, req, ctx):
        event("options")
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def list_and_watch(self, req, ctx):
        with self.lock:
            self.streams += 1
            event("listandwatch-open streams=%d" % self.streams)
        done = threading.Event()
        ctx.add_callback(done.set)
        try:
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health="Healthy")
                                                   for i in self.ids])
            done.wait()
            event("listandwatch-end")
        finally:
            with self.lock:
                self.streams -= 1

    def preferred(self, req, ctx):
        resp = pb.PreferredAllocationResponse()
        for q in req.container_requests:
            chosen = list(q.must_include_deviceIDs)
            for i in q.available_deviceIDs:
                if len(chosen) >= q.allocation_size:
                    break
                if i not in chosen:
                    chosen.append(i)
            resp.container_responses.add(deviceIDs=chosen)
        return resp

    def allocate(self, req, ctx):
        resp = pb.AllocateResponse()
        for q in req.container_requests:
            for i in q.devices_ids:
                if i not in self.known:
                    ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown device %r" % i)
            cr = resp.container_responses.add()
            cr.devices.add(container_path=self.device_path, host_path=self.device_path,
                           permissions="rw")
        event("allocate containers=%d" % len(req.container_requests))
        return resp

    def prestart(self, req, ctx):
        return pb.PreStartContainerResponse()


def register_once(d, version, resource, endpoint):
    ch = channel(os.path.join(d, "kubelet.sock"))
    try:
        register_stub(ch)(pb.RegisterRequest(
            version=version, endpoint=endpoint, resource_name=resource,
            options=pb.DevicePluginOptions(get_preferred_allocation_available=True)), timeout=30)
    finally:
        ch.close()


def run_plugin(a):
    d = a.device_plugin_dir
    p = FakePlugin(split_ids(a.ids), a.device_path)
    stop = install_signals()
    endpoint = socket_name(a.resource)
    sock = os.path.join(d, endpoint)
    try:
        os.unlink(sock)
    except FileNotFoundError:
        pass
    srv = new_server("v1beta1.DevicePlugin", {
        "GetDevicePluginOptions": unary(p.options, pb.Empty, pb.DevicePluginOptions),
        "ListAndWatch": grpc.unary_stream_rpc_method_handler(
            p.list_and_watch, request_deserializer=pb.Empty.FromString,
            response_serializer=pb.ListAndWatchResponse.SerializeToString),
        "GetPreferredAllocation": unary(p.preferred, pb.PreferredAllocationRequest,
                                        pb.PreferredAllocationResponse),
        "Allocate": unary(p.allocate, pb.AllocateRequest, pb.AllocateResponse),
        "PreStartContainer": unary(p.prestart, pb.PreStartContainerRequest,
                                   pb.PreStartContainerResponse),
    })
    if srv.add_insecure_port("unix:" + sock) == 0:
        print("cannot listen on " + sock, file=sys.stderr)
        return 1
    srv.start()
    event("serving " + sock)

    def registrar():
        backoff = 0.1
        i = 1
        while a.register_attempts == 0 or i <= a.register_attempts:
            try:
                register_once(d, a.register_version, a.resource, endpoint)
                event("register-ok attempt=%d" % i)
                return
            except grpc.RpcError as e:
                event("register-error attempt=%d code=%s message=%r" % (i, e.code(), e.details()))
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, 1.0)
            i += 1
        event("register-gave-up")

    threading.Thread(target=registrar, daemon=True).start()
    wait_for_signal(stop)
    srv.stop(0)
    try:
        os.unlink(sock)
    except FileNotFoundError:
        pass
    event("exit")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="kdev_interop.py")
    sub = ap.add_subparsers(dest="role", required=True)
    cl = sub.add_parser("client", help="check every DevicePlugin RPC of a plugin")
    cl.add_argument("--socket", required=True)
    cl.add_argument("--ids", default=DEFAULT_IDS)
    cl.add_argument("--device-path", default="/dev/null")
    cl.add_argument("--pid", type=int, default=0)
    cl.add_argument("--cancel-cycles", type=int, default=50)
    kl = sub.add_parser("kubelet", help="serve Registration like kubelet")
    kl.add_argument("--dir", required=True)
    kl.add_argument("--resource", default="example.com/null")
    kl.add_argument("--endpoint", default="")
    kl.add_argument("--ids", default=DEFAULT_IDS)
    kl.add_argument("--fail-first", type=int, default=1)
    kl.add_argument("--timeout", type=float, default=30.0)
    pl = sub.add_parser("plugin", help="a fake device plugin")
    pl.add_argument("--device-plugin-dir", "--dir", dest="device_plugin_dir", required=True)
    pl.add_argument("--config", default="", help="ignored (kdev-plugin compatibility)")
    pl.add_argument("--log-level", default="", help="ignored (kdev-plugin compatibility)")
    pl.add_argument("--resource", default="example.com/null")
    pl.add_argument("--ids", default=DEFAULT_IDS)
    pl.add_argument("--device-path", default="/dev/null")
    pl.add_argument("--register-version", default="v1beta1")
    pl.add_argument("--register-attempts", type=int, default=0)
    a = ap.parse_args(argv)
    start = time.monotonic()
    rc = {"client": run_client, "kubelet": run_kubelet, "plugin": run_plugin}[a.role](a)
    print("kdev_interop.py %s: %.2fs" % (a.role, time.monotonic() - start), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
