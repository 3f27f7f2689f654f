"""Hostile local gRPC peers against both daemons: the request-budget attack
(16 connections x 4 streams, each one 5-byte prefix declaring 4 MiB and then
nothing) leaves Allocate on the device-plugin socket and NodePrepareResources
on the DRA socket served at once, and the stalled streams are reset after the
stall timeout, logged once per connection; a :path with a NUL byte is refused
(HTTP 400, no method runs); a fake kubelet whose Register answers OK without a
message is an error, retried, never `registered`.

The attacker is a raw socket with a minimal HTTP/2 writer: client preface,
SETTINGS, HEADERS with HPACK literals without indexing (RFC 7541 section
6.2.2), DATA."""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402

grpc = kt.grpc
api = kt.api

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"
ALLOCATE = "/v1beta1.DevicePlugin/Allocate"
FOUR_MIB = 4 * 1024 * 1024
STALL_LOG = "gRPC request stalled, stream reset (logged once per connection)"

# ---- a minimal HTTP/2 writer ---------------------------------------------


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman."""
    return (b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value)


def frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


HEADERS, DATA, RST_STREAM, SETTINGS, GOAWAY = 1, 0, 3, 4, 7
END_STREAM, END_HEADERS = 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0, b"")


def request_headers(path):
    return b"".join(hpack_literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers")))


def attack(sock_path, path, conns=16, streams=4):
    """Opens |conns| connections with |streams| streams each: HEADERS, then
    one DATA frame holding only a prefix declaring 4 MiB, then nothing.
    Returns the sockets (kept open)."""
    socks = []
    for _ in range(conns):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        out = PREFACE
        for i in range(streams):
            sid = 1 + 2 * i
            out += frame(HEADERS, END_HEADERS, sid, request_headers(path))
            out += frame(DATA, 0, sid, b"\x00" + struct.pack(">I", FOUR_MIB))
        s.sendall(out)
        socks.append(s)
    return socks


def read_frames(s, until, timeout=10.0):
    """Reads frames from |s| until |until(frames)| or EOF; returns the list of
    (type, flags, stream, payload)."""
    buf = b""
    frames = []
    deadline = time.monotonic() + timeout * kt.TIMEOUT_SCALE
    s.settimeout(0.05)
    while time.monotonic() < deadline and not until(frames):
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            frames.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF,
                           buf[9:9 + n]))
            buf = buf[9 + n:]
    return frames


def rst_streams(frames):
    return sorted(sid for t, _, sid, p in frames
                  if t == RST_STREAM and int.from_bytes(p, "big") == 0)


def check_stalls_reset(socks, logtext):
    """Every attacker stream is reset (RST_STREAM NO_ERROR after the CANCELLED
    answer) once the 5 s stall timeout passes; one log line per connection."""
    for s in socks:
        frames = read_frames(s, lambda f: len(rst_streams(f)) == 4, timeout=15)
        assert rst_streams(frames) == [1, 3, 5, 7], frames
    wait_for(lambda: logtext().count(STALL_LOG) == 16, what="16 stall log lines")
    time.sleep(1.5)
    text = logtext()
    assert text.count(STALL_LOG) == 16, text
    ids = sorted(int(line.split("connection=")[1].split()[0])
                 for line in text.splitlines() if STALL_LOG in line)
    assert len(set(ids)) == 16, ids


def timed(fn):
    t0 = time.monotonic()
    v = fn()
    return v, time.monotonic() - t0


# ---- device plugin ---------------------------------------------------------


def allocate_once(d, timeout):
    ch = grpc.insecure_channel("unix:" + os.path.join(d, SOCK))
    try:
        f = ch.unary_unary(ALLOCATE, request_serializer=api.AllocateRequest.SerializeToString,
                           response_deserializer=api.AllocateResponse.FromString)
        req = api.AllocateRequest()
        req.container_requests.add().devices_ids.append("null::0")
        return f(req, timeout=timeout)
    finally:
        ch.close()


def test_budget_attack_device_plugin():
    with kt.registered_plugin(NULL_CONFIG, RES) as (d, _, p):
        socks = []
        try:
            allocate_once(d, 10)  # warm: the Python gRPC runtime is loaded
            socks = attack(os.path.join(d, SOCK), ALLOCATE.encode())
            time.sleep(0.3)  # the plugin has read every prefix
            r, secs = timed(lambda: allocate_once(d, 1.0))
            assert len(r.container_responses) == 1, r
            assert r.container_responses[0].devices[0].host_path == "/dev/null", r
            assert secs < 1.0, secs
            check_stalls_reset(socks, p.logtext)
        finally:
            for s in socks:
                s.close()


def test_nul_in_path_refused():
    with kt.registered_plugin(NULL_CONFIG, RES) as (d, _, _):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(d, SOCK))
        path = b"/v1beta1.DevicePlugin/GetDevicePluginOptions\x00/evil"
        s.sendall(PREFACE + frame(HEADERS, END_HEADERS, 1, request_headers(path)) +
                  frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"))
        frames = read_frames(s, lambda f: any(t == HEADERS and fl & END_STREAM
                                              for t, fl, _, _ in f))
        s.close()
        on1 = [(t, fl, pl) for t, fl, sid, pl in frames if sid == 1]
        # one trailers-only HEADERS; nghttp2 encodes ":status: 400" as
        # static table entry 12 (0x8c); no DATA: no method ran
        assert on1 and on1[0][0] == HEADERS and on1[0][1] & END_STREAM, frames
        assert on1[0][2][:1] == b"\x8c", on1
        assert not any(t == DATA for t, _, _ in on1), on1
        # the same bytes with a clean :path are served (0x88: :status 200)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(d, SOCK))
        s.sendall(PREFACE + frame(HEADERS, END_HEADERS, 1, request_headers(
            path.split(b"\x00")[0])) + frame(DATA, END_STREAM, 1, b"\x00" * 5))
        frames = read_frames(s, lambda f: any(t == DATA and sid == 1
                                              for t, _, sid, _ in f))
        s.close()
        on1 = [(t, fl, pl) for t, fl, sid, pl in frames if sid == 1]
        assert on1[0][0] == HEADERS and on1[0][2][:1] == b"\x88", on1
        assert any(t == DATA for t, _, _ in on1), on1


class EmptyOkKubelet:
    """A kubelet whose Register answers status OK with no message."""

    def __init__(self, directory):
        self.calls = 0

        def register(req, context):
            self.calls += 1
            return iter(())

        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_stream_rpc_method_handler(
                register, request_deserializer=api.RegisterRequest.FromString,
                response_serializer=api.Empty.SerializeToString),
        })
        self.server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix:" + os.path.join(directory, "kubelet.sock"))
        self.server.start()

    def stop(self):
        self.server.stop(0).wait()


def test_register_without_message_is_an_error():
    with TempDir() as d:
        k = EmptyOkKubelet(d)
        p = Plugin(d, NULL_CONFIG)
        try:
            want = ('msg="Register failed, retrying" resource=example.com/null')
            err = 'error="INTERNAL: unary call returned no message"'
            wait_for(lambda: sum(1 for line in p.logtext().splitlines()
                                 if want in line and err in line) >= 2,
                     what="two failed Register attempts")
            assert k.calls >= 2, k.calls
            assert "registered with kubelet" not in p.logtext(), p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


# ---- DRA plugin ------------------------------------------------------------


def test_budget_attack_dra_plugin():
    import dra_plugin as dp  # its stand-in API server and claim fixture
    with TempDir() as d:
        e = dp.Env(os.path.dirname(d))
        socks = []
        try:
            info = e.register()
            wait_for(lambda: dp.pool_slices(e.api), what="ResourceSlices")

            def prepare(timeout):
                ch = grpc.insecure_channel("unix:" + info.endpoint)
                try:
                    f = ch.unary_unary(
                        dp.PREPARE, request_serializer=dp.dra_pb.NodePrepareResourcesRequest
                        .SerializeToString,
                        response_deserializer=dp.dra_pb.NodePrepareResourcesResponse.FromString)
                    return f(dp.prepare_req(), timeout=timeout)
                finally:
                    ch.close()
            prepare(30 * kt.TIMEOUT_SCALE)  # prepared once: the repeat is answered locally
            socks = attack(info.endpoint, dp.PREPARE.encode())
            time.sleep(0.3)
            r, secs = timed(lambda: prepare(1.0))
            cr = r.claims[dp.CLAIM_UID]
            assert cr.error == "", cr
            assert [dv.device_name for dv in cr.devices] == ["gpu-0"], cr
            assert secs < 1.0, secs
            check_stalls_reset(socks, e.logtext)
        finally:
            for s in socks:
                s.close()
            e.close()


if __name__ == "__main__":
    kt.run_tests([test_budget_attack_device_plugin, test_nul_in_path_refused,
                  test_register_without_message_is_an_error, test_budget_attack_dra_plugin])
