"""kdev-plugin follows its generic devices while serving (src/generic/live.h),
against a grpcio fake kubelet, on a fake /dev (--root) whose entries are
symlinks to this machine's /dev/null, /dev/zero and /dev/full (real character
devices, no root needed):

- a node that appears is advertised within 2 s (rescans an hour apart: the
  inotify watch saw it), the list exact, without a new registration;
- a node that vanishes is Unhealthy in the next list within 2 s, Allocate
  refuses it, and it is dropped after the grace period (gracePeriod: 1),
  not before;
- a symlink that is re-pointed: Allocate answers the new host path within
  2 s, the ID and the list unchanged;
- with inotify unavailable (a preload shim makes inotify_add_watch fail with
  ENOSPC under the fake /dev, as at the watch limit) kdev-plugin keeps
  serving, warns once, and rescans (rescanInterval: 1) advertise a new node
  within 2 s;
- after a reload (SIGHUP) the new configuration's devices are followed."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "example.com/kx"
SOCK = "kdev-example.com_kx.sock"
SHIM = os.path.join(kt.BUILD_DIR, "tests", "libkdev_test_inotify_fail.so")


def config(rescan=3600, grace=300):
    return ("version: v1\ngeneric:\n  rescanInterval: %d\n  gracePeriod: %d\n  devices:\n"
            "    - name: %s\n      groups: [{paths: [{path: /dev/kx*}]}]\n"
            % (rescan, grace, RES))


def fake_dev(d, nodes):
    """A fake root beside directory |d| with dev/<name> -> target for each
    (name, target) of |nodes|; returns the root."""
    root = os.path.join(os.path.dirname(d), "root")
    os.makedirs(os.path.join(root, "dev"))
    for name, target in nodes:
        link(root, name, target)
    return root


def link(root, name, target):
    """dev/<name> -> |target|, made beside it and renamed over it (ln -sfn)."""
    p = os.path.join(root, "dev", name)
    os.symlink(target, p + ".tmp")
    os.rename(p + ".tmp", p)


def allocate(d, ids):
    return kt.allocate(d, SOCK, ids)


def host_paths(d, device_id):
    return [(s.container_path, s.host_path) for s in allocate(d, [device_id]).devices]


def last_list(k):
    with k.lock:
        return list(k.updates.get(RES, [[]])[-1])


def n_updates(k):
    with k.lock:
        return len(k.updates.get(RES, []))


def log_lines(p, text):
    return [ln.split(" ", 1)[1] for ln in p.logtext().splitlines() if text in ln]


def started(d, k, nodes, text, env=None):
    root = fake_dev(d, nodes)
    p = Plugin(d, text, extra=("--root", root), env=env)
    wait_for(lambda: k.count(RES) == 1 and n_updates(k) >= 1, what="registration")
    return root, p


def test_new_node_advertised():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root, p = started(d, k, [("kx0", "/dev/null"), ("kx1", "/dev/zero")], config())
        try:
            assert last_list(k) == [("kx0", "Healthy"), ("kx1", "Healthy")]
            t0 = time.monotonic()
            link(root, "kx2", "/dev/full")
            link(root, "kx10", "/dev/null")
            wait_for(lambda: last_list(k) == [("kx0", "Healthy"), ("kx1", "Healthy"),
                                              ("kx2", "Healthy"), ("kx10", "Healthy")],
                     timeout=2, what="the new nodes advertised")
            took = time.monotonic() - t0
            print("new nodes advertised after %.0f ms" % (took * 1000))
            assert k.count(RES) == 1  # the same registration and stream
            assert host_paths(d, "kx2") == [("/dev/kx2", "/dev/full")]
            assert log_lines(p, "generic device appeared") == [
                'level=info msg="generic device appeared: advertising it" resource=%s '
                'device=kx2 host_path=/dev/full' % RES,
                'level=info msg="generic device appeared: advertising it" resource=%s '
                'device=kx10 host_path=/dev/null' % RES]
        finally:
            assert p.stop() == 0
            k.stop()


def test_removed_node_unhealthy_then_dropped():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root, p = started(d, k, [("kx0", "/dev/null"), ("kx1", "/dev/zero"),
                                 ("kx2", "/dev/full")], config(grace=1))
        try:
            t0 = time.monotonic()
            os.unlink(os.path.join(root, "dev", "kx1"))
            wait_for(lambda: last_list(k) == [("kx0", "Healthy"), ("kx2", "Healthy"),
                                              ("kx1", "Unhealthy")],
                     timeout=2, what="the vanished node Unhealthy")
            unhealthy_at = time.monotonic() - t0
            try:
                allocate(d, ["kx1"])
                raise AssertionError("Allocate of a vanished device succeeded")
            except kt.grpc.RpcError as e:
                assert 'device "kx1" of resource example.com/kx is unhealthy' in e.details(), \
                    e.details()
            wait_for(lambda: last_list(k) == [("kx0", "Healthy"), ("kx2", "Healthy")],
                     timeout=3, what="the vanished node dropped")
            dropped_at = time.monotonic() - t0
            print("Unhealthy after %.0f ms, dropped after %.0f ms"
                  % (unhealthy_at * 1000, dropped_at * 1000))
            assert dropped_at >= 1.0, dropped_at  # not before the grace period
            assert k.count(RES) == 1
            assert log_lines(p, "generic device gone") == [
                'level=warn msg="generic device gone: Unhealthy until it is back or its grace '
                'period ends" resource=%s device=kx1 grace_period_s=1' % RES]
            assert log_lines(p, "generic device dropped") == [
                'level=info msg="generic device dropped: its grace period ended" '
                'resource=%s device=kx1' % RES]
        finally:
            assert p.stop() == 0
            k.stop()


def test_repointed_symlink_changes_the_host_path():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root, p = started(d, k, [("kx0", "/dev/null")], config())
        try:
            assert host_paths(d, "kx0") == [("/dev/kx0", "/dev/null")]
            n = n_updates(k)
            link(root, "kx0", "/dev/zero")
            wait_for(lambda: host_paths(d, "kx0") == [("/dev/kx0", "/dev/zero")],
                     timeout=2, interval=0.02, what="Allocate answering the new host path")
            # same ID, same health: kubelet is sent nothing new
            time.sleep(0.2)
            assert n_updates(k) == n
            assert last_list(k) == [("kx0", "Healthy")]
            assert k.count(RES) == 1
        finally:
            assert p.stop() == 0
            k.stop()


def test_followed_after_a_reload():
    """SIGHUP builds a new configuration; its devices are followed too."""
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root, p = started(d, k, [("kx0", "/dev/null")], config())
        try:
            p.proc.send_signal(__import__("signal").SIGHUP)
            wait_for(lambda: log_lines(p, "SIGHUP: configuration unchanged"), what="reload")
            wait_for(lambda: k.count(RES) == 2, what="registration again")
            link(root, "kx1", "/dev/zero")
            wait_for(lambda: last_list(k) == [("kx0", "Healthy"), ("kx1", "Healthy")],
                     timeout=2, what="the new node advertised after the reload")
            assert len(log_lines(p, "following the generic devices")) == 2
        finally:
            assert p.stop() == 0
            k.stop()


def preload_env(root):
    """LD_PRELOAD with the shim (and, in a sanitizer build, ASan's runtime
    first, as ASan requires)."""
    libs = []
    out = subprocess.run(["ldd", os.path.join(kt.BUILD_DIR, "kdev-plugin")],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libasan" in line and "=>" in line:
            libs.append(line.split("=>")[1].split()[0])
    libs.append(SHIM)
    return {"LD_PRELOAD": " ".join(libs), "KDEV_TEST_INOTIFY_FAIL_UNDER": root}


def test_rescans_alone_when_inotify_fails():
    assert os.path.exists(SHIM), SHIM + " not built"
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        root = os.path.join(os.path.dirname(d), "root")
        root, p = started(d, k, [("kx0", "/dev/null")], config(rescan=1),
                          env=preload_env(root))
        try:
            warn = log_lines(p, 'level=warn msg="cannot watch a directory')
            assert warn == [
                'level=warn msg="cannot watch a directory of the generic globs, following them '
                'by rescans" path=%s/dev error="no space left on device" rescan_interval_s=1'
                % root], warn
            t0 = time.monotonic()
            link(root, "kx1", "/dev/zero")
            wait_for(lambda: last_list(k) == [("kx0", "Healthy"), ("kx1", "Healthy")],
                     timeout=2, what="the new node advertised by a rescan")
            print("new node advertised by a rescan after %.0f ms"
                  % ((time.monotonic() - t0) * 1000))
            os.unlink(os.path.join(root, "dev", "kx0"))
            wait_for(lambda: last_list(k) == [("kx1", "Healthy"), ("kx0", "Unhealthy")],
                     timeout=2, what="the vanished node Unhealthy")
            assert p.proc.poll() is None
            # one warning, however many rescans tried the watch again
            assert len(log_lines(p, 'level=warn msg="cannot watch a directory')) == 1
            assert len(log_lines(p, 'level=debug msg="cannot watch a directory')) >= 1
            assert k.count(RES) == 1
        finally:
            assert p.stop() == 0
            k.stop()


if __name__ == "__main__":
    kt.run_tests([
        test_new_node_advertised,
        test_removed_node_unhealthy_then_dropped,
        test_repointed_symlink_changes_the_host_path,
        test_followed_after_a_reload,
        test_rescans_alone_when_inotify_fails,
    ])
