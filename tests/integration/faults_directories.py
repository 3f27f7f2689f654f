"""Faults: the device-plugins directory removed and created again, and no inotify.

- The reported case: kdev-plugin registered with `kdevctl kubelet --dir DP`;
  kubelet stops; `rm -rf DP; mkdir DP`; kdev-plugin serves again in the new
  directory (its socket and its lock file, locked); `kdevctl kubelet --dir
  DP` starts (removing the sockets it finds, as kubelet does): exactly one
  Register, and the device list streamed.
- The same with kubelet back before kdev-plugin saw the new directory, and
  with the directory replaced by a rename.
- Two kdev-plugin instances for the same resource: the second waits for the
  lock; across the re-creation the first takes the lock in the new
  directory and serves, the second keeps waiting (never serves), and takes
  over only when the first stops.
- inotify unusable (tests/shim/inotify_fail.c preloaded: inotify_init1 and
  inotify_add_watch fail with ENOSPC, or EMFILE): one warning line, exactly
  "cannot watch the device plugin directory with inotify, checking it every
  1000ms instead", and kubelet restarts and the directory's re-creation are
  still followed (within the 1 s check).
"""
import fcntl
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"
SHIM = os.path.join(kt.BUILD_DIR, "tests", "libkdev_test_inotify_fail.so")
LW = 'msg="ListAndWatch update" resource=%s devices=4 healthy=4' % RES
REG = 'msg="registered device plugin" resource=%s endpoint=%s' % (RES, SOCK)
# rm -rf; mkdir within a few ms is seen as a replaced directory, else as a
# removed one that comes back
REMOVED = 'msg="device plugin directory removed, waiting for it to be created again" dir=%s'
REPLACED = 'msg="device plugin directory replaced, serving in the new one" dir=%s'
BACK = 'msg="device plugin directory is back, serving again" dir=%s'


class Kdevctl:
    """`kdevctl kubelet --dir DIR --hold 0` (serves until SIGTERM)."""

    n = 0

    def __init__(self, directory):
        Kdevctl.n += 1
        base = os.path.join(os.path.dirname(directory), "kdevctl-%d" % Kdevctl.n)
        self.log_path = base + ".log"
        self.log, self.out = open(self.log_path, "w"), open(base + ".out", "w")
        self.proc = subprocess.Popen(
            [os.path.join(kt.BUILD_DIR, "kdevctl"), "kubelet", "--dir", directory,
             "--hold", "0", "--log-level", "debug"], stdout=self.out, stderr=self.log)
        wait_for(lambda: 'msg="serving Registration"' in self.logtext(), what="kdevctl serving")

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def registers(self):
        return self.logtext().count('msg="Register" ')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(20) == 0
        self.log.close()
        self.out.close()


def locked(path):
    """True when someone holds the flock on |path|."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove(d):
    # kdev-plugin follows its files as they go and may take its lock again in
    # the directory while rm empties it: rm then says "Directory not empty"
    # and is run again, as a user would (a few times at most).
    for _ in range(20):
        r = subprocess.run(["rm", "-rf", d], capture_output=True, text=True)
        if r.returncode == 0:
            break
        time.sleep(0.01)
    assert r.returncode == 0, "rm -rf %s: %s; left: %s" % (d, r.stderr, os.listdir(d))


def recreate(d):
    remove(d)
    os.mkdir(d, 0o750)


def one_register(k, what):
    """kdevctl |k| got the registration and the list, and exactly one Register
    (a late duplicate would show within 0.5 s)."""
    wait_for(lambda: REG in k.logtext(), timeout=10, what="registration: " + what)
    wait_for(lambda: LW in k.logtext(), what="ListAndWatch: " + what)
    time.sleep(0.5)
    assert k.registers() == 1, "%s: %d Register calls\n%s" % (what, k.registers(), k.logtext())


def test_reported_case_rm_rf_mkdir_then_kubelet():
    with TempDir() as d:
        sock, lock = os.path.join(d, SOCK), os.path.join(d, SOCK + ".lock")
        k = Kdevctl(d)
        p = Plugin(d, NULL_CONFIG)
        try:
            one_register(k, "first kubelet")
            k.stop()
            recreate(d)
            started = time.monotonic()
            wait_for(lambda: os.path.exists(sock) and locked(lock), timeout=5,
                     what="socket and lock file in the new directory")
            print("served again %.0f ms after mkdir" % ((time.monotonic() - started) * 1000))
            assert kt.sock_accepts(sock)
            log = p.logtext()
            assert log.count(REMOVED % d) + log.count(REPLACED % d) == 1, log
            assert log.count(BACK % d) == 1, log
            k = Kdevctl(d)
            one_register(k, "kubelet in the new directory")
            assert locked(lock)
            # and once more, quickly: rm -rf; mkdir; kubelet at once
            k.stop()
            recreate(d)
            k = Kdevctl(d)
            one_register(k, "kubelet started right after mkdir")
            assert locked(lock)
            assert p.proc.poll() is None
        finally:
            assert p.stop() == 0
            k.stop()
        assert not os.path.exists(lock)


def test_directory_replaced_by_rename():
    with TempDir() as d:
        k = Kdevctl(d)
        p = Plugin(d, NULL_CONFIG)
        try:
            one_register(k, "first kubelet")
            k.stop()
            new = d + ".new"
            os.mkdir(new, 0o750)
            remove(d)
            os.rename(new, d)
            k = Kdevctl(d)
            one_register(k, "kubelet in the renamed directory")
            assert locked(os.path.join(d, SOCK + ".lock"))
        finally:
            assert p.stop() == 0
            k.stop()


def test_two_instances_one_serves_across_recreation():
    with TempDir() as d:
        lock = os.path.join(d, SOCK + ".lock")
        k = Kdevctl(d)
        p1 = Plugin(d, NULL_CONFIG)
        p2 = None
        try:
            one_register(k, "first instance")
            p2 = Plugin(d, NULL_CONFIG)
            wait_for(lambda: "another instance holds the socket lock, waiting" in p2.logtext(),
                     what="second instance waiting")
            k.stop()
            recreate(d)
            wait_for(lambda: BACK % d in p1.logtext() and BACK % d in p2.logtext(),
                     what="both instances seeing the new directory")
            wait_for(lambda: locked(lock), what="lock in the new directory")
            k = Kdevctl(d)
            one_register(k, "after re-creation")
            time.sleep(0.3)
            assert 'msg="serving"' not in p2.logtext(), p2.logtext()
            assert p1.logtext().count('msg="serving"') >= 2
            assert locked(lock)
            # the first stops: the second takes over
            assert p1.stop() == 0
            p1 = None
            wait_for(lambda: 'msg="serving"' in p2.logtext(), what="second instance serving")
            wait_for(lambda: "registered with kubelet" in p2.logtext(),
                     what="second instance registered")
            wait_for(lambda: LW in k.logtext().split('msg="Register"')[-1],
                     what="second instance's ListAndWatch")
        finally:
            if p1 is not None:
                assert p1.stop() == 0
            if p2 is not None:
                assert p2.stop() == 0
            k.stop()


def no_inotify(err, text):
    with TempDir() as d:
        sock = os.path.join(d, SOCK)
        env = {"LD_PRELOAD": SHIM, "KDEV_TEST_INOTIFY_ERRNO": err,
               "ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") +
                                ":verify_asan_link_order=0").lstrip(":")}
        k = Kdevctl(d)
        p = Plugin(d, NULL_CONFIG, env=env)
        try:
            one_register(k, "first kubelet, no inotify")
            warn = ('level=warn msg="cannot watch the device plugin directory with inotify, '
                    'checking it every 1000ms instead" path=%s error="%s"' % (d, text))
            log = p.logtext()
            # one warning for the directory watch (the generic devices'
            # own watch warns once for itself: generic_live.py)
            assert log.count("cannot watch the device plugin directory") == 1, log
            assert warn in log, log
            for i in range(2):
                k.stop()
                k = Kdevctl(d)  # removes the plugin's socket, serves a new kubelet.sock
                one_register(k, "kubelet restart %d, no inotify" % (i + 1))
            k.stop()
            recreate(d)
            wait_for(lambda: os.path.exists(sock), timeout=5, what="socket in the new directory")
            k = Kdevctl(d)
            one_register(k, "new directory, no inotify")
            assert p.proc.poll() is None
            assert p.logtext().count("cannot watch the device plugin directory") == 1, p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_no_inotify_enospc():
    no_inotify("ENOSPC", "no space left on device")


def test_no_inotify_emfile():
    no_inotify("EMFILE", "too many open files")


if __name__ == "__main__":
    for exe in ("kdev-plugin", "kdevctl", os.path.join("tests", "libkdev_test_inotify_fail.so")):
        if not os.path.exists(os.path.join(kt.BUILD_DIR, exe)):
            print(exe, "is not built in", kt.BUILD_DIR)
            sys.exit(1)
    kt.run_tests([
        test_reported_case_rm_rf_mkdir_then_kubelet,
        test_directory_replaced_by_rename,
        test_two_instances_one_serves_across_recreation,
        test_no_inotify_enospc,
        test_no_inotify_emfile,
    ])
