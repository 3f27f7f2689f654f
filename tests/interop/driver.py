#!/usr/bin/python3
"""Interop test driver: runs a gRPC peer (Python or Go, tests/interop/*) against
kdev-plugin, kdevctl kubelet, or the other peer's fake, and prints one summary.

  driver.py plugin  --peer python|go --target kdev|python|go
      The target is a device plugin (kdev-plugin, or a peer's fake plugin with the
      same command line). The peer acts as kubelet (Registration server: exact
      Register fields, dial-back GetDevicePluginOptions before answering, first
      Register answered with an error to see a retry, ListAndWatch after) and as
      a client of every DevicePlugin RPC.
  driver.py kubelet --peer python|go --kubelet kdevctl|python|go
      The peer's fake plugin registers with the kubelet side (kdevctl kubelet, or
      a peer's fake kubelet).

Exit status: 0 pass, 1 fail, 77 skipped (a prerequisite is missing; says why).
Environment: KDEV_BUILD_DIR (kdev-plugin, kdevctl, interop/kdev-interop-go),
KDEV_SOURCE_DIR, KDEV_INTEROP_GO (Go peer binary, overrides the default),
KDEV_INTEROP_KUBELET_TIMEOUT (seconds the fake kubelet waits for a successful
registration, default 40), KDEV_INTEROP_KEEP (keep the temp dir and logs),
KDEV_INTEROP_WRAP (command prefix for kdev-plugin / kdevctl, e.g.
"valgrind --leak-check=full --error-exitcode=1").
"""
import argparse
import importlib.util
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("KDEV_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
PY_PEER = os.path.join(HERE, "python", "kdev_interop.py")
PYTHON = "/usr/bin/python3"  # the interpreter with python3-grpcio

RESOURCE = "example.com/null"
SOCKET = "kdev-example.com_null.sock"
IDS = "null::0,null::1,null::2,null::3"
CONFIG = """version: v1
generic:
  devices:
    - name: example.com/null
      groups:
        - paths: [{path: /dev/null}]
          count: 4
"""
SKIP = 77


class Skip(Exception):
    pass


class Proc:
    """A child process whose output lines are collected (and echoed or logged)."""

    def __init__(self, name, cmd, log_path=None):
        self.name = name
        self.cmd = cmd
        self.lines = []
        self.cond = threading.Condition()
        self.log = open(log_path, "w") if log_path else None
        self.log_path = log_path
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  start_new_session=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    @property
    def pid(self):
        return self.p.pid

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            if self.log:
                self.log.write(line + "\n")
                self.log.flush()
            else:
                print("  [%s] %s" % (self.name, line), flush=True)
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def alive(self):
        return self.p.poll() is None

    def wait_line(self, pred, timeout):
        """Index of the first line matching pred, or None after timeout / exit."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for i, line in enumerate(self.lines):
                    if pred(line):
                        return i
                left = end - time.monotonic()
                if left <= 0 or (not self.t.is_alive()):
                    return None
                self.cond.wait(min(left, 0.2))

    def find(self, pred):
        with self.cond:
            return [i for i, line in enumerate(self.lines) if pred(line)]

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=5.0):
        """SIGTERM, then SIGKILL after timeout; returns (exit code, killed)."""
        killed = False
        if self.alive():
            try:
                os.kill(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait(timeout) is None:
                killed = True
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.t.join(5)
        if self.log:
            self.log.close()
            self.log = None
        return self.p.returncode, killed

    def tail(self, n=40):
        with self.cond:
            return self.lines[-n:]


class Run:
    def __init__(self, title):
        self.title = title
        self.passed = []
        self.failed = []
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="kdev-interop-")
        self.dir = os.path.join(self.tmp, "dp")
        os.mkdir(self.dir)

    def ok(self, name, detail=""):
        self.passed.append(name)
        print("ok   %s%s" % (name, ": " + detail if detail else ""), flush=True)

    def fail(self, name, detail=""):
        self.failed.append(name)
        print("FAIL %s%s" % (name, ": " + detail if detail else ""), flush=True)

    def expect(self, cond, name, detail=""):
        (self.ok if cond else self.fail)(name, detail)
        return cond

    def start(self, name, cmd, log=False):
        print("start %s: %s" % (name, " ".join(cmd)), flush=True)
        p = Proc(name, cmd, os.path.join(self.tmp, name + ".log") if log else None)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in reversed(self.procs):
            p.stop(3)
        if os.environ.get("KDEV_INTEROP_KEEP"):
            print("note: KDEV_INTEROP_KEEP set, logs kept in %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def finish(self):
        verdict = "PASS" if not self.failed and self.passed else "FAIL"
        extra = (": failed " + ", ".join(self.failed)) if self.failed else ""
        print("%s: %s (%d checks passed, %d failed)%s" % (self.title, verdict, len(self.passed),
                                                         len(self.failed), extra), flush=True)
        return 0 if verdict == "PASS" else 1


def go_peer():
    return os.environ.get("KDEV_INTEROP_GO") or os.path.join(BUILD_DIR, "interop", "kdev-interop-go")


def peer_cmd(lang):
    if lang == "python":
        return [PYTHON, PY_PEER]
    path = go_peer()
    if not os.access(path, os.X_OK):
        raise Skip("Go peer %s not built (run tests/interop/go/build.sh)" % path)
    return [path]


def need_binary(path, what):
    """[wrapper..., path] for one of our binaries; Skip when it is not built."""
    if not os.access(path, os.X_OK):
        raise Skip("%s not found at %s (build it first)" % (what, path))
    return shlex.split(os.environ.get("KDEV_INTEROP_WRAP", "")) + [path]


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def wait_for(pred, timeout, proc=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        if proc is not None and not proc.alive():
            return pred()
        time.sleep(0.02)
    return pred()


def early_exit(r, proc, what):
    """The target exited before serving: skip if it is still a stub, else fail."""
    rc = proc.wait(2)
    proc.stop()
    text = "\n".join(proc.tail(20))
    if "not implemented" in text:
        raise Skip("%s is still a stub (exit %s: %s)" % (what, rc, text.strip()))
    r.fail("start", "%s exited with %s before serving; output:\n%s" % (what, rc, text))


def scenario_plugin(peer, target):
    r = Run("interop %s peer <-> %s plugin" % (peer, target))
    try:
        pcmd = peer_cmd(peer)
        cfg = os.path.join(r.tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        if target == "kdev":
            what = "kdev-plugin"
            tcmd = need_binary(os.path.join(BUILD_DIR, "kdev-plugin"), what)
        else:
            what = "%s fake plugin" % target
            tcmd = peer_cmd(target) + ["plugin"]
        tcmd += ["--config", cfg, "--device-plugin-dir", r.dir, "--log-level", "debug"]
        sock = os.path.join(r.dir, SOCKET)

        plugin = r.start("plugin", tcmd, log=True)
        if not wait_for(lambda: is_socket(sock), 15, plugin):
            if not plugin.alive():
                early_exit(r, plugin, what)
            else:
                r.fail("serve", "%s did not create %s within 15 s" % (what, sock))
            return r
        r.expect(not os.path.exists(os.path.join(r.dir, "kubelet.sock")), "serve-without-kubelet",
                 "%s serves %s while kubelet.sock is absent" % (what, SOCKET))
        time.sleep(0.3)  # kubelet absent for a while: the plugin must keep retrying

        ktimeout = float(os.environ.get("KDEV_INTEROP_KUBELET_TIMEOUT", "40"))
        kubelet = r.start("%s-kubelet" % peer, pcmd + [
            "kubelet", "--dir", r.dir, "--resource", RESOURCE, "--endpoint", SOCKET,
            "--ids", IDS, "--fail-first", "1", "--timeout", str(ktimeout)])
        ready = kubelet.wait_line(lambda l: l == "KUBELET-READY", ktimeout + 5)
        ready_at = time.monotonic()
        r.expect(ready is not None, "register",
                 "Register retried after kubelet absent and after an error, then "
                 "ListAndWatch (see %s-kubelet lines)" % peer)

        client = r.start("%s-client" % peer, pcmd + [
            "client", "--socket", sock, "--ids", IDS, "--device-path", "/dev/null",
            "--pid", str(plugin.pid)])
        rc = client.wait(180)
        if rc is None:
            r.fail("client", "client did not finish within 180 s")
        else:
            r.expect(rc == 0, "client", "exit %s" % rc)
        r.expect(plugin.alive(), "plugin-alive", "%s still running after all checks" % what)
        # Leave time for stray re-registrations to show (the kubelet role
        # checks there is exactly one successful Register).
        time.sleep(max(0.0, ready_at + 2.0 - time.monotonic()))
        krc, killed = kubelet.stop()
        r.expect(krc == 0 and not killed, "kubelet", "exit %s%s" % (krc, " (killed)" if killed else ""))
        prc, killed = plugin.stop(10)
        r.expect(prc == 0 and not killed, "plugin-exit", "%s exit status after SIGTERM: %s%s"
                 % (what, prc, " (killed after 10 s)" if killed else ""))
        if r.failed:
            print("--- last lines of %s output (%s) ---" % (what, plugin.log_path or ""))
            for line in plugin.tail(60):
                print("  | " + line)
        return r
    except BaseException:
        r.cleanup()
        raise


def scenario_kubelet(peer, kubelet_kind):
    r = Run("interop %s plugin <-> %s kubelet" % (peer, kubelet_kind))
    try:
        pcmd = peer_cmd(peer)
        if kubelet_kind == "kdevctl":
            what = "kdevctl kubelet"
            kcmd = need_binary(os.path.join(BUILD_DIR, "kdevctl"), "kdevctl") + [
                "kubelet", "--dir", r.dir]
        else:
            what = "%s fake kubelet" % kubelet_kind
            kcmd = peer_cmd(kubelet_kind) + ["kubelet", "--dir", r.dir, "--fail-first", "0",
                                             "--timeout", "60"]
        kubelet = r.start("kubelet", kcmd, log=True)
        ksock = os.path.join(r.dir, "kubelet.sock")
        if not wait_for(lambda: is_socket(ksock), 15, kubelet):
            if not kubelet.alive():
                early_exit(r, kubelet, what)
            else:
                r.fail("serve", "%s did not create %s within 15 s" % (what, ksock))
            return r

        plugin = r.start("%s-plugin" % peer, pcmd + ["plugin", "--device-plugin-dir", r.dir])
        ok = plugin.wait_line(lambda l: l.startswith("EVENT register-ok"), 20)
        if r.expect(ok is not None, "register", "%s accepted Register from the %s plugin"
                    % (what, peer)):
            opts = plugin.find(lambda l: l == "EVENT options")
            r.expect(bool(opts) and opts[0] < ok, "dial-back-during-register",
                     "%s called GetDevicePluginOptions before answering Register" % what)
            law = plugin.wait_line(lambda l: l.startswith("EVENT listandwatch-open"), 15)
            r.expect(law is not None, "listandwatch", "%s opened ListAndWatch" % what)
            if kubelet_kind != "kdevctl":
                r.expect(kubelet.wait_line(lambda l: l == "KUBELET-READY", 15) is not None,
                         "kubelet-ready", "%s checked the first ListAndWatch message" % what)
        if kubelet_kind == "kdevctl":
            # kubelet refuses a version other than v1beta1 and a resource name
            # that is not an extended resource name.
            for name, args in (("reject-version", ["--resource", "example.com/badver",
                                                   "--register-version", "v1alpha"]),
                               ("reject-resource-name", ["--resource", "gpu"])):
                bad = r.start("%s-%s" % (peer, name), pcmd + [
                    "plugin", "--device-plugin-dir", r.dir, "--register-attempts", "1"] + args)
                done = bad.wait_line(lambda l: l.startswith("EVENT register-"), 20)
                line = bad.lines[done] if done is not None else "(nothing within 20 s)"
                r.expect(line.startswith("EVENT register-error"), name,
                         "%s %s -> %s" % (what, " ".join(args), line))
                bad.stop()
        prc, killed = plugin.stop()
        r.expect(prc == 0 and not killed, "plugin-exit", "%s plugin exit %s" % (peer, prc))
        r.expect(kubelet.alive(), "kubelet-alive", "%s still running" % what)
        krc, killed = kubelet.stop(10)
        r.expect(krc == 0 and not killed, "kubelet-exit", "%s exit status after SIGTERM: %s%s"
                 % (what, krc, " (killed after 10 s)" if killed else ""))
        if r.failed:
            print("--- last lines of %s output ---" % what)
            for line in kubelet.tail(60):
                print("  | " + line)
        return r
    except BaseException:
        r.cleanup()
        raise


def main(argv):
    ap = argparse.ArgumentParser(prog="driver.py")
    sub = ap.add_subparsers(dest="scenario", required=True)
    p = sub.add_parser("plugin")
    p.add_argument("--peer", choices=["python", "go"], required=True)
    p.add_argument("--target", choices=["kdev", "python", "go"], default="kdev")
    k = sub.add_parser("kubelet")
    k.add_argument("--peer", choices=["python", "go"], required=True)
    k.add_argument("--kubelet", choices=["kdevctl", "python", "go"], default="kdevctl")
    a = ap.parse_args(argv)
    # Killed by ctest or a user: unwind, so that children and temp dirs go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    start = time.monotonic()
    try:
        if a.scenario == "plugin":
            r = scenario_plugin(a.peer, a.target)
        else:
            r = scenario_kubelet(a.peer, a.kubelet)
    except Skip as e:
        print("SKIP %s: %s" % (a.scenario, e), flush=True)
        return SKIP
    try:
        rc = r.finish()
    finally:
        r.cleanup()
    print("(%.1f s)" % (time.monotonic() - start), flush=True)
    return rc



def python_peer_main(name, argv):
    """main(argv) for a test that runs the Python peer (grpcio): first checks
    its prerequisites (python3-grpcio, python3-protobuf, protoc) and, when one
    is missing, prints "SKIP <name>: ..." and returns SKIP instead."""
    for mod, pkg in (("grpc", "python3-grpcio"), ("google.protobuf", "python3-protobuf")):
        try:
            found = importlib.util.find_spec(mod) is not None
        except ImportError:
            found = False
        if not found:
            print("SKIP %s: Python module %s missing (install %s)" % (name, mod, pkg))
            return SKIP
    if not shutil.which("protoc"):
        print("SKIP %s: protoc not found (install protobuf-compiler)" % name)
        return SKIP
    return main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
