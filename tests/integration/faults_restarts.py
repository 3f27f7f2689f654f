"""Faults: processes killed with SIGKILL and restarted.

- kdev-plugin killed with SIGKILL (its socket and lock file stay behind) and
  started again, several times: each new instance registers at once, takes
  over the stale socket (new inode) and lock without "address in use" and
  without waiting for the lock.
- `kdevctl kubelet` killed with SIGKILL while it holds a ListAndWatch stream
  (kubelet.sock stays behind) and started again: it removes the stale sockets,
  and the same kdev-plugin process registers with it and streams its devices.
"""
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"
HEALTHY4 = [("null::%d" % i, "Healthy") for i in range(4)]


def options_ok(d):
    return kt.plugin_options(d, SOCK).get_preferred_allocation_available


def refused(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        return False
    except ConnectionRefusedError:
        return True
    finally:
        s.close()


def test_plugin_sigkill_and_restart_registers_again():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        sock = os.path.join(d, SOCK)
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            wait_for(lambda: k.updates.get(RES), what="first ListAndWatch")
            for round_ in range(1, 4):
                p.proc.send_signal(signal.SIGKILL)
                assert p.proc.wait(10 * kt.TIMEOUT_SCALE) == -signal.SIGKILL
                p.log.close()
                # What a SIGKILL leaves behind: the socket and the lock file.
                assert os.path.exists(sock) and os.path.exists(sock + ".lock")
                assert refused(sock), "the dead plugin's socket still accepts"
                with k.lock:
                    seen = len(k.updates.get(RES, []))
                started = time.monotonic()
                p = Plugin(d, NULL_CONFIG)
                wait_for(lambda: k.count(RES) == round_ + 1, timeout=10,
                         what="registration of instance %d" % (round_ + 1))
                took = time.monotonic() - started
                wait_for(lambda: len(k.updates.get(RES, [])) > seen,
                         what="ListAndWatch of instance %d" % (round_ + 1))
                assert k.updates[RES][-1] == HEALTHY4, k.updates[RES][-1]
                assert not refused(sock) and options_ok(d), "stale socket not replaced"
                log = p.logtext()
                for bad in ("in use", "another instance holds the socket lock",
                            "cannot serve", "Register failed"):
                    assert bad not in log, "%r in the log:\n%s" % (bad, log)
                print("instance %d registered %.0f ms after its start" % (round_ + 1, took * 1000))
            time.sleep(0.5)
            assert k.count(RES) == 4, k.count(RES)
        finally:
            assert p.stop() == 0
            k.stop()
        assert not os.path.exists(sock + ".lock")


class Kdevctl:
    """`kdevctl kubelet --dir DIR --hold 0` (serves until SIGTERM)."""

    def __init__(self, directory, n):
        base = os.path.join(os.path.dirname(directory), "kdevctl-%d" % n)
        self.log_path, self.out_path = base + ".log", base + ".out"
        self.log, self.out = open(self.log_path, "w"), open(self.out_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(kt.BUILD_DIR, "kdevctl"), "kubelet", "--dir", directory,
             "--hold", "0", "--log-level", "debug"], stdout=self.out, stderr=self.log)

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def outtext(self):
        with open(self.out_path) as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.out.close()


def test_kdevctl_kubelet_sigkill_mid_stream_and_restart():
    with TempDir() as d:
        lw = 'msg="ListAndWatch update" resource=%s devices=4 healthy=4' % RES
        reg = 'msg="registered device plugin" resource=%s endpoint=%s' % (RES, SOCK)
        a = Kdevctl(d, 1)
        b = None
        p = None
        try:
            wait_for(lambda: 'msg="serving Registration"' in a.logtext(), what="kdevctl serving")
            p = Plugin(d, NULL_CONFIG)
            wait_for(lambda: lw in a.logtext(), what="ListAndWatch stream to kdevctl")
            a.proc.send_signal(signal.SIGKILL)
            assert a.proc.wait(10) == -signal.SIGKILL
            assert os.path.exists(os.path.join(d, "kubelet.sock"))  # stale now
            wait_for(lambda: "ListAndWatch stream ended, registering again" in p.logtext(),
                     what="plugin seeing the stream end")
            wait_for(lambda: "Register failed, retrying" in p.logtext(),
                     what="Register failing on the stale kubelet.sock")
            b = Kdevctl(d, 2)
            wait_for(lambda: reg in b.logtext(), timeout=10, what="registration with kdevctl #2")
            wait_for(lambda: lw in b.logtext(), what="ListAndWatch stream to kdevctl #2")
            blog = b.logtext()
            for name in ("kubelet.sock", SOCK):
                assert 'msg="removed stale socket" path=%s' % os.path.join(d, name) in blog, blog
            time.sleep(0.5)
            assert b.logtext().count('msg="Register" ') == 1, b.logtext()
            assert p.proc.poll() is None
            b.proc.send_signal(signal.SIGTERM)
            assert b.proc.wait(20) == 0
            row = [line.split() for line in b.outtext().splitlines() if line.startswith(RES)]
            assert row == [[RES, "4", "4", "0", SOCK, "connected"]], b.outtext()
        finally:
            if p is not None:
                assert p.stop() == 0
            a.close()
            if b is not None:
                b.close()


if __name__ == "__main__":
    for exe in ("kdev-plugin", "kdevctl"):
        if not os.path.exists(os.path.join(kt.BUILD_DIR, exe)):
            print(exe, "is not built in", kt.BUILD_DIR)
            sys.exit(1)
    kt.run_tests([
        test_plugin_sigkill_and_restart_registers_again,
        test_kdevctl_kubelet_sigkill_mid_stream_and_restart,
    ])
