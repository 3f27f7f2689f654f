"""kdev-plugin lifecycle against a grpcio fake kubelet: kubelet restarts,
closed streams, absent kubelet, two instances, bursts, clean shutdown."""
import os
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"


def settle():
    time.sleep(0.5)


def options_ok(d):
    return kt.plugin_options(d, SOCK).get_preferred_allocation_available


def test_registers_with_exact_fields():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            _, req, opts = k.registrations[0]
            assert req.version == "v1beta1", req.version
            assert req.endpoint == SOCK, req.endpoint
            assert req.resource_name == RES
            assert opts.get_preferred_allocation_available is True
            assert opts.pre_start_required is False
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            assert k.updates[RES][0] == [("null::%d" % i, "Healthy") for i in range(4)], \
                k.updates[RES][0]
        finally:
            assert p.stop() == 0
            k.stop()


def test_kubelet_restart_reregisters():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            k.restart()
            wait_for(lambda: k.count(RES) == 2, what="registration after restart")
            assert os.path.exists(os.path.join(d, SOCK))
            assert options_ok(d)
        finally:
            assert p.stop() == 0
            k.stop()


def test_fifty_restarts_in_a_row():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            for i in range(50):
                k.restart()
                wait_for(lambda: k.count(RES) == i + 2, what="registration after restart %d" % (i + 1))
            settle()
            assert k.count(RES) == 51, k.count(RES)
            assert options_ok(d)
            assert p.proc.poll() is None
        finally:
            assert p.stop() == 0
            k.stop()


def test_burst_of_events_gives_one_registration():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            # Plugin socket removed and kubelet.sock re-created in one burst.
            k.stop()
            os.unlink(os.path.join(d, SOCK))
            os.unlink(os.path.join(d, "kubelet.sock")) if os.path.exists(
                os.path.join(d, "kubelet.sock")) else None
            k.start()
            wait_for(lambda: k.count(RES) == 2, what="registration after burst")
            settle()
            assert k.count(RES) == 2, "burst gave %d registrations" % (k.count(RES) - 1)
        finally:
            assert p.stop() == 0
            k.stop()


def test_stream_closed_by_kubelet_reregisters():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            # kubelet opens the stream before its Register reply reaches the
            # plugin; close it only once the plugin has seen that reply (a
            # close before it is test_stream_lost_during_register_...)
            wait_for(lambda: "registered with kubelet" in p.logtext(), what="Register reply")
            k.close_stream(RES)
            wait_for(lambda: k.count(RES) == 2, what="registration after stream close")
            assert "ListAndWatch stream ended, registering again" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def logged_events(text, msg):
    """Events of |msg| that a log text accounts for: a plain line is one, a
    limiter line ("MSG, repeated N times in the last T s") is N."""
    n = 0
    for line in text.splitlines():
        if 'msg="%s"' % msg in line:
            n += 1
        elif 'msg="%s, repeated ' % msg in line:
            n += int(line.split(" repeated=")[1].split()[0])
    return n


def test_kubelet_ending_streams_at_once_gives_bounded_log():
    # A kubelet that ends every ListAndWatch stream at once makes the plugin
    # re-register at that kubelet's pace: every registration still happens,
    # but identical lines within 5 s are counted, not printed.
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        t0 = time.monotonic()
        try:
            wait_for(lambda: k.count(RES) == 1, what="first registration")
            for i in range(2, 32):
                wait_for(lambda: RES in k.streams, what="ListAndWatch %d" % i)
                time.sleep(0.02)  # the Register reply reaches the plugin
                k.close_stream(RES)
                wait_for(lambda: k.count(RES) == i, what="registration %d" % i)
            wait_for(lambda: RES in k.streams, what="last ListAndWatch")
            settle()
        finally:
            assert p.stop() == 0
            k.stop()
        took = time.monotonic() - t0
        text = p.logtext()
        regs = k.count(RES)
        assert regs == 31, regs
        # each Register that succeeded is accounted for, exactly
        assert logged_events(text, "registered with kubelet") == regs, text[-3000:]
        ended = (logged_events(text, "ListAndWatch stream ended, registering again") +
                 logged_events(text, "ListAndWatch stream ended during Register, "
                                     "registering again"))
        assert ended == regs - 1, (ended, text[-3000:])
        # ... in a few lines: the first and one per 5 s window (the loop takes
        # well under 5 s here, far longer under valgrind)
        lines = text.count('msg="registered with kubelet')
        assert 2 <= lines <= 2 + int(took / 5), (lines, took, text[-3000:])


def test_stream_lost_during_register_registers_again():
    with TempDir() as d:
        k = FakeKubelet(d, drop_stream_in_register=1)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 2, what="registration after the lost stream")
            assert "ListAndWatch stream ended during Register, registering again" in p.logtext()
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch of the second registration")
            settle()
            assert k.count(RES) == 2, k.count(RES)
        finally:
            assert p.stop() == 0
            k.stop()


def test_other_clients_streams_do_not_reregister():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            for _ in range(20):  # e.g. `kdevctl watch` started and stopped
                ch = kt.grpc.insecure_channel("unix:" + os.path.join(d, SOCK))
                lw = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                     request_serializer=kt.api.Empty.SerializeToString,
                                     response_deserializer=kt.api.ListAndWatchResponse.FromString)
                call = lw(kt.api.Empty())
                next(call)
                call.cancel()
                ch.close()
            settle()
            assert k.count(RES) == 1, "%d registrations" % k.count(RES)
        finally:
            assert p.stop() == 0
            k.stop()


def test_touching_kubelet_socket_is_not_a_restart():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            os.chmod(os.path.join(d, "kubelet.sock"), 0o600)
            os.utime(os.path.join(d, "kubelet.sock"))
            settle()
            assert k.count(RES) == 1, "%d registrations" % k.count(RES)
        finally:
            assert p.stop() == 0
            k.stop()


def test_socket_path_blocked_then_freed_recovers():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        blocker = os.path.join(d, SOCK)
        os.mkdir(blocker)  # listen fails: a directory sits at the socket path
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: "cannot serve resource" in p.logtext(), what="listen failure")
            assert k.count(RES) == 0
            os.rmdir(blocker)
            wait_for(lambda: k.count(RES) == 1, what="registration once the path is free")
            assert options_ok(d)
        finally:
            assert p.stop() == 0
            k.stop()


def test_removed_lock_file_never_steals_a_live_socket():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        a = Plugin(d, NULL_CONFIG)
        b = None
        try:
            wait_for(lambda: k.count(RES) == 1, what="first instance registration")
            sock = os.path.join(d, SOCK)
            ino = os.lstat(sock).st_ino
            os.unlink(sock + ".lock")  # an admin cleaning the directory
            # the first instance takes its lock again (50 ms after the
            # removal), so the second one waits for it; had it got a lock,
            # it would refuse the live socket
            wait_for(lambda: os.path.exists(sock + ".lock"), what="lock file taken again")
            b = Plugin(d, NULL_CONFIG)
            wait_for(lambda: "another process serves the resource socket; not taking it"
                     in b.logtext() or "another instance holds the socket lock, waiting"
                     in b.logtext(), what="second instance refusing the live socket")
            settle()
            assert 'msg="serving"' not in b.logtext(), b.logtext()
            assert "socket lock file removed: locked again" in a.logtext(), a.logtext()
            assert os.lstat(sock).st_ino == ino
            assert k.count(RES) == 1, "%d registrations" % k.count(RES)
            assert a.proc.poll() is None
        finally:
            if b is not None:
                assert b.stop() == 0
            assert a.stop() == 0
            k.stop()


def test_kubelet_absent_at_start():
    with TempDir() as d:
        p = Plugin(d, NULL_CONFIG)
        k = FakeKubelet(d)
        try:
            wait_for(lambda: "Register failed, retrying" in p.logtext(), what="retry log")
            assert "kubelet socket does not exist" in p.logtext()
            time.sleep(0.3)
            k.start()
            wait_for(lambda: k.count(RES) == 1, what="registration once kubelet appears")
        finally:
            assert p.stop() == 0
            k.stop()


def test_kubelet_starting_with_the_plugin_gives_one_registration():
    # kubelet.sock appears while the plugin starts: the creation event must
    # not restart a registration already made with that same kubelet.
    for delay in (0.0, 0.002, 0.005, 0.01, 0.02, 0.05):
        with TempDir() as d:
            p = Plugin(d, NULL_CONFIG)
            k = FakeKubelet(d)
            try:
                time.sleep(delay)
                k.start()
                wait_for(lambda: k.count(RES) >= 1, what="registration")
                settle()
                assert k.count(RES) == 1, "delay %.3f: %d registrations" % (delay, k.count(RES))
            finally:
                assert p.stop() == 0
                k.stop()


def test_lock_file_removed_on_clean_exit():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            assert os.path.exists(os.path.join(d, SOCK + ".lock"))
        finally:
            assert p.stop() == 0
            k.stop()
        assert not os.path.exists(os.path.join(d, SOCK + ".lock"))


def test_sighup_registers_again_and_sigquit_stops_cleanly():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            p.proc.send_signal(__import__("signal").SIGHUP)
            wait_for(lambda: k.count(RES) == 2, what="registration after SIGHUP")
            p.proc.send_signal(__import__("signal").SIGQUIT)
            assert p.proc.wait(20) == 0
            assert not os.path.exists(os.path.join(d, SOCK))
            assert 'msg="stopping" signal=SIGQUIT' in p.logtext()
        finally:
            p.stop()
            k.stop()


def test_nvidia_config_file_variable_and_kubelet_socket_flag():
    # NVIDIA's helm chart passes CONFIG_FILE and --kubelet-socket.
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        cfg = os.path.join(os.path.dirname(d), "nvidia-style.yaml")
        with open(cfg, "w") as f:
            f.write(NULL_CONFIG)
        log = open(cfg + ".log", "w")
        env = dict(os.environ, CONFIG_FILE=cfg)
        env.pop("KDEV_CONFIG", None)
        proc = subprocess.Popen([os.path.join(kt.BUILD_DIR, "kdev-plugin"), "--kubelet-socket",
                                 os.path.join(d, "kubelet.sock")], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
        finally:
            proc.terminate()
            assert proc.wait(20) == 0
            log.close()
            k.stop()


def test_register_error_is_retried():
    with TempDir() as d:
        k = FakeKubelet(d, reject=1)
        k.start()
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration after a rejected one")
            assert "test: registration rejected" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_two_instances_take_over():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        a = Plugin(d, NULL_CONFIG)
        b = None
        try:
            wait_for(lambda: k.count(RES) == 1, what="first instance registration")
            b = Plugin(d + "/", NULL_CONFIG)  # same directory, spelled differently
            wait_for(lambda: "another instance holds the socket lock, waiting" in b.logtext(),
                     what="second instance waiting")
            settle()
            assert k.count(RES) == 1
            assert a.stop() == 0
            wait_for(lambda: k.count(RES) == 2, what="second instance registration")
            settle()
            sock = os.path.join(d, SOCK)
            assert stat.S_ISSOCK(os.lstat(sock).st_mode)
            assert options_ok(d)
            assert k.count(RES) == 2
            assert "acquired the socket lock" in b.logtext()
        finally:
            if a.proc.poll() is None:
                a.kill()
            if b is not None:
                assert b.stop() == 0
            k.stop()


def test_sigterm_removes_only_own_sockets():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        foreign = os.path.join(d, "other-vendor.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(foreign)
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: k.count(RES) == 1, what="registration")
            assert p.stop() == 0
            assert not os.path.exists(os.path.join(d, SOCK))
            assert os.path.exists(foreign)
            assert os.path.exists(os.path.join(d, "kubelet.sock"))
        finally:
            s.close()
            k.stop()


def test_socket_path_too_long_is_a_startup_error():
    with TempDir() as d:
        deep = os.path.join(d, "x" * 100)
        os.mkdir(deep)
        p = Plugin(deep, NULL_CONFIG)
        rc = p.proc.wait(20)
        p.log.close()
        assert rc == 1, rc
        assert "longer than the Unix socket limit of 107 bytes" in p.logtext(), p.logtext()


def test_bad_config_is_a_clear_error():
    with TempDir() as d:
        p = Plugin(d, "version: v1\ngeneric:\n  devices:\n    - name: gpu\n")
        rc = p.proc.wait(20)
        p.log.close()
        assert rc == 1, rc
        want = ('plugin-%d.yaml:4:13: generic.devices[0].name: resource name \\"gpu\\" is invalid: '
                'it must have the form <domain>/<name>"' % kt.Plugin.instances)
        assert want in p.logtext(), p.logtext()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(kt.BUILD_DIR, "kdev-plugin")):
        print("kdev-plugin is not built in", kt.BUILD_DIR)
        sys.exit(1)
    kt.run_tests([
        test_registers_with_exact_fields,
        test_kubelet_restart_reregisters,
        test_fifty_restarts_in_a_row,
        test_burst_of_events_gives_one_registration,
        test_stream_closed_by_kubelet_reregisters,
        test_stream_lost_during_register_registers_again,
        test_kubelet_ending_streams_at_once_gives_bounded_log,
        test_other_clients_streams_do_not_reregister,
        test_touching_kubelet_socket_is_not_a_restart,
        test_socket_path_blocked_then_freed_recovers,
        test_removed_lock_file_never_steals_a_live_socket,
        test_kubelet_absent_at_start,
        test_register_error_is_retried,
        test_sighup_registers_again_and_sigquit_stops_cleanly,
        test_nvidia_config_file_variable_and_kubelet_socket_flag,
        test_kubelet_starting_with_the_plugin_gives_one_registration,
        test_lock_file_removed_on_clean_exit,
        test_two_instances_take_over,
        test_sigterm_removes_only_own_sockets,
        test_socket_path_too_long_is_a_startup_error,
        test_bad_config_is_a_clear_error,
    ])
