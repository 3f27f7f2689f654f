"""Every kdevctl command that dials a socket survives a peer that hangs up:
options, allocate, watch, preferred, plugins and dra against a Unix socket
that accepts and closes at once, and one that reads the client's HTTP/2
preface and then closes. Each prints exactly one line on stderr naming the
socket and exits 1 (plugins prints its list on stdout as well), instead of dying of SIGPIPE without a word (exit 141). kdevctl
kubelet, which dials a plugin back on Register, answers Register with the same
error, keeps serving and exits 0 on SIGTERM."""
import os
import signal
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, api, grpc, wait_for  # noqa: E402

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class HangUp:
    """Listens on |path|; closes every connection it accepts, at once
    (mode "now") or after reading the 24-byte HTTP/2 client preface
    (mode "preface")."""

    def __init__(self, path, mode):
        self.path = path
        self.mode = mode
        self.accepted = 0
        self.prefaces = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "preface":
                buf = b""
                c.settimeout(5)
                try:
                    while len(buf) < len(PREFACE):
                        d = c.recv(len(PREFACE) - len(buf))
                        if not d:
                            break
                        buf += d
                except OSError:
                    pass
                if buf == PREFACE:
                    self.prefaces += 1
            c.close()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        os.unlink(self.path)


def closed_by_peer(path):
    return ("rpc error: code = Unavailable desc = connection to unix:%s closed by the peer"
            % path)


def run(*args):
    return subprocess.run([KDEVCTL, *args], capture_output=True, text=True, timeout=30)


def check(args, want_stderr, want_rc=1, want_stdout=None):
    r = run(*args)
    assert r.returncode == want_rc, "kdevctl %s: exit %d (want %d; -13 = SIGPIPE), stderr %r" % (
        " ".join(args), r.returncode, want_rc, r.stderr)
    assert r.stderr == want_stderr + "\n", "kdevctl %s: stderr %r, want %r" % (
        " ".join(args), r.stderr, want_stderr + "\n")
    if want_stdout is not None:
        assert r.stdout == want_stdout, "kdevctl %s: stdout %r" % (" ".join(args), r.stdout)


def device_plugin_commands(mode):
    with TempDir() as d:
        sock = os.path.join(d, "vendor.sock")
        h = HangUp(sock, mode)
        try:
            e = closed_by_peer(sock)
            check(["options", sock], "kdevctl options: " + e, want_stdout="")
            check(["options", sock, "-o", "json"], "kdevctl options: " + e, want_stdout="")
            check(["allocate", sock, "dev-0", "dev-1"], "kdevctl allocate: " + e, want_stdout="")
            check(["watch", sock], "kdevctl watch: " + e, want_stdout="")
            check(["watch", sock, "--count", "1", "--timeout", "5"], "kdevctl watch: " + e,
                  want_stdout="")
            check(["preferred", sock, "--available", "dev-0,dev-1", "--size", "1"],
                  "kdevctl preferred: " + e, want_stdout="")
            # plugins: the socket accepts (live), the options call fails ("?"),
            # the error goes to stderr, the list to stdout; exit 1
            check(["plugins", d], "kdevctl plugins: vendor.sock: " + e, want_rc=1,
                  want_stdout="NAME          ROLE     STATE   PRE_START_REQUIRED   "
                              "GET_PREFERRED_ALLOCATION_AVAILABLE\n"
                              "vendor.sock   plugin   live    ?                    ?\n")
            if mode == "preface":
                assert h.prefaces >= 7, "the peer read %d prefaces" % h.prefaces
        finally:
            h.close()


def test_device_plugin_commands_peer_closes_at_once():
    device_plugin_commands("now")


def test_device_plugin_commands_peer_closes_after_preface():
    device_plugin_commands("preface")


def dra_command(mode):
    with TempDir() as d:
        sock = os.path.join(d, "kdev.example.com-reg.sock")
        h = HangUp(sock, mode)
        try:
            check(["dra", "--registry", d],
                  "kdevctl dra: %s: GetInfo: %s" % (sock, closed_by_peer(sock)),
                  want_stdout="No DRA plugins registered in %s.\n" % d)
        finally:
            h.close()


def test_dra_peer_closes_at_once():
    dra_command("now")


def test_dra_peer_closes_after_preface():
    dra_command("preface")


def kubelet_register(mode):
    with TempDir() as d:
        proc = subprocess.Popen([KDEVCTL, "kubelet", "--dir", d, "--dial-timeout", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        h = None
        try:
            kubelet_sock = os.path.join(d, "kubelet.sock")
            wait_for(lambda: kt.sock_accepts(kubelet_sock), what="kubelet.sock")
            sock = os.path.join(d, "vendor.sock")
            h = HangUp(sock, mode)
            ch = grpc.insecure_channel("unix:" + kubelet_sock)
            try:
                register = ch.unary_unary("/v1beta1.Registration/Register",
                                          request_serializer=api.RegisterRequest.SerializeToString,
                                          response_deserializer=api.Empty.FromString)
                try:
                    register(api.RegisterRequest(version="v1beta1", endpoint="vendor.sock",
                                                 resource_name="example.com/hangup"), timeout=10)
                    raise AssertionError("Register succeeded against a peer that hangs up")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.UNKNOWN, e
                    want = "failed to get device plugin options: " + closed_by_peer(sock)
                    assert e.details() == want, "Register error %r, want %r" % (e.details(), want)
            finally:
                ch.close()
            assert proc.poll() is None, "kdevctl kubelet exited %d" % proc.returncode
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
            assert proc.returncode == 0, "kdevctl kubelet exit %d: %s" % (proc.returncode, err)
            assert closed_by_peer(sock) in err, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            if h:
                h.close()


def test_kubelet_register_peer_closes_at_once():
    kubelet_register("now")


def test_kubelet_register_peer_closes_after_preface():
    kubelet_register("preface")


if __name__ == "__main__":
    kt.run_tests([
        test_device_plugin_commands_peer_closes_at_once,
        test_device_plugin_commands_peer_closes_after_preface,
        test_dra_peer_closes_at_once,
        test_dra_peer_closes_after_preface,
        test_kubelet_register_peer_closes_at_once,
        test_kubelet_register_peer_closes_after_preface,
    ])
