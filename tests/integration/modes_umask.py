"""Socket, directory and file modes do not follow the umask. The daemons run
under umask 0 (a socket mode taken from the umask shows as 0777) and under
umask 077 (a directory mode taken from it shows as 0700):
kdevctl kubelet with kdev-plugin on the mock libnvidia-ml.so.1, kdev-plugin
alone, and kdev-dra-plugin with the stand-in API server. Every socket kdev
creates is 0600 (device plugin, DRA plugin, registration, kubelet.sock), every
directory it creates 0750 (device-plugin, DRA plugin and registration
directories, with their missing parents), 0755 (CDI spec directories) or 0700
(the DRA claim checkpoint's, when kdev makes it); files: the lock file 0600,
the DRA claim checkpoint 0600, CDI specs 0644, node labels 0644, kubelet's
device-manager checkpoint (kdevctl) 0644."""
import glob
import os
import signal
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, HERE)
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir, wait_for  # noqa: E402
import dra_plugin as dra  # noqa: E402  (its Env: stand-in API server + kdev-dra-plugin)

KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
KDEV_PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
CKPT = "kubelet_internal_checkpoint"
NV_CONFIG = """version: v1
flags:
  plugin:
    deviceListStrategy: [envvar, cdi-cri]
"""


class Umask:
    """Runs the block (and the children it starts) under |mask|."""

    def __init__(self, mask):
        self.mask = mask

    def __enter__(self):
        self.old = os.umask(self.mask)

    def __exit__(self, *exc):
        os.umask(self.old)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def assert_mode(path, want, kind):
    st = os.lstat(path)
    ok = {"socket": stat.S_ISSOCK, "dir": stat.S_ISDIR, "file": stat.S_ISREG}[kind]
    assert ok(st.st_mode), "%s is not a %s (mode %o)" % (path, kind, st.st_mode)
    got = stat.S_IMODE(st.st_mode)
    assert got == want, "%s: mode %04o, want %04o" % (path, got, want)


def nv_env(base):
    control = os.path.join(base, "control")
    open(control, "a").close()
    env = dict(os.environ)
    env.update({"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
                "KDEV_MOCK_NVML_CONTROL": control})
    return env


def start_kdev_plugin(base, dp, cdi, labels):
    config = os.path.join(base, "config.yaml")
    with open(config, "w") as f:
        f.write(NV_CONFIG)
    log = open(os.path.join(base, "kdev-plugin.log"), "w")
    proc = subprocess.Popen([*kt.WRAP, KDEV_PLUGIN, "--config", config, "--device-plugin-dir", dp,
                             "--cdi-dir", cdi, "--nfd-features-file", labels,
                             "--log-level", "debug"],
                            stdout=log, stderr=subprocess.STDOUT, env=nv_env(base))
    log.close()
    return proc


def logtext(path):
    with open(path) as f:
        return f.read()


def stop(proc, what, log=None):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    rc = proc.wait(30 * kt.TIMEOUT_SCALE)
    assert rc == 0, "%s exited %d%s" % (what, rc, "\n" + logtext(log) if log else "")


def kdevctl_kubelet_and_kdev_plugin(mask):
    with TempDir() as d:
        base = os.path.dirname(d)
        root = os.path.join(base, "kubelet")            # made by kdevctl kubelet (mkdir -p)
        dp = os.path.join(root, "device-plugins")
        cdi = os.path.join(base, "run", "cdi")           # made by kdev-plugin (mkdir -p)
        features = os.path.join(base, "features.d")
        labels = os.path.join(features, "gpu")
        klog = os.path.join(base, "kdevctl.log")
        with Umask(mask):
            os.mkdir(features)  # the test's own: shows the umask in force
            assert_mode(features, 0o777 & ~mask, "dir")
            with open(klog, "w") as log:
                kubelet = subprocess.Popen([KDEVCTL, "kubelet", "--dir", dp, "--hold", "0"],
                                           stdout=subprocess.DEVNULL, stderr=log)
            plugin = None
            try:
                ksock = os.path.join(dp, "kubelet.sock")
                wait_for(lambda: kt.sock_accepts(ksock) or kubelet.poll() is not None,
                         what="kubelet.sock")
                assert kubelet.poll() is None, logtext(klog)
                plugin = start_kdev_plugin(base, dp, cdi, labels)
                plog = os.path.join(base, "kdev-plugin.log")
                wait_for(lambda: "registered with kubelet" in logtext(plog)
                         or plugin.poll() is not None, what="registration")
                assert plugin.poll() is None, logtext(plog)
                wait_for(lambda: os.path.exists(os.path.join(dp, CKPT)), what="checkpoint")
                wait_for(lambda: os.path.exists(labels), what="labels")

                assert_mode(root, 0o750, "dir")
                assert_mode(dp, 0o750, "dir")
                assert_mode(ksock, 0o600, "socket")
                socks = sorted(p for p in glob.glob(os.path.join(dp, "*.sock"))
                               if p != ksock)
                assert [os.path.basename(p) for p in socks] == ["kdev-nvidia.com_gpu.sock"], socks
                for s in socks:
                    assert_mode(s, 0o600, "socket")
                    assert_mode(s + ".lock", 0o600, "file")
                assert_mode(os.path.join(dp, CKPT), 0o644, "file")
                assert_mode(os.path.join(base, "run"), 0o755, "dir")
                assert_mode(cdi, 0o755, "dir")
                specs = glob.glob(os.path.join(cdi, "*"))
                assert [os.path.basename(p) for p in specs] == \
                    ["k8s.device-plugin.nvidia.com-gpu.json"], specs
                assert_mode(specs[0], 0o644, "file")
                assert_mode(labels, 0o644, "file")
                stop(plugin, "kdev-plugin", plog)
                stop(kubelet, "kdevctl kubelet", klog)
            finally:
                for p in (plugin, kubelet):
                    if p is not None and p.poll() is None:
                        p.kill()
                        p.wait()


def kdev_plugin_alone(mask):
    """Without kubelet: kdev-plugin makes the missing device-plugin directory
    itself and serves its socket there."""
    with TempDir() as d:
        base = os.path.dirname(d)
        dp = os.path.join(base, "dp")
        cdi = os.path.join(base, "cdi")
        labels = os.path.join(base, "labels")
        plog = os.path.join(base, "kdev-plugin.log")
        with Umask(mask):
            plugin = start_kdev_plugin(base, dp, cdi, labels)
            try:
                sock = os.path.join(dp, "kdev-nvidia.com_gpu.sock")
                wait_for(lambda: kt.sock_accepts(sock) or plugin.poll() is not None,
                         what="plugin socket")
                assert plugin.poll() is None, logtext(plog)
                assert_mode(dp, 0o750, "dir")
                assert_mode(sock, 0o600, "socket")
                assert_mode(sock + ".lock", 0o600, "file")
                assert_mode(cdi, 0o755, "dir")
                stop(plugin, "kdev-plugin", plog)
            finally:
                if plugin.poll() is None:
                    plugin.kill()
                    plugin.wait()


def kdev_dra_plugin(mask):
    with TempDir() as d:
        root = os.path.dirname(d)
        with Umask(mask):
            e = dra.Env(root)
            with kt.logged(e):
                info = e.register()
                r = e.call(info.endpoint, dra.PREPARE, dra.prepare_req(),
                           dra.dra_pb.NodePrepareResourcesResponse)
                assert r.claims[dra.CLAIM_UID].error == "", r

                assert_mode(e.registry, 0o750, "dir")
                assert_mode(os.path.dirname(e.plugin_dir), 0o750, "dir")
                assert_mode(e.plugin_dir, 0o750, "dir")
                assert_mode(e.cdi, 0o755, "dir")
                assert_mode(e.reg_sock(), 0o600, "socket")
                assert_mode(e.dra_sock(), 0o600, "socket")
                spec = os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % dra.CLAIM_UID)
                assert_mode(spec, 0o644, "file")
                files = sorted(os.listdir(e.plugin_dir))
                assert files == ["dra-claims.json", "dra.sock"], files
                assert_mode(os.path.join(e.plugin_dir, "dra-claims.json"), 0o600, "file")
                e.stop()


def test_kdevctl_kubelet_and_kdev_plugin_umask_0():
    kdevctl_kubelet_and_kdev_plugin(0)


def test_kdevctl_kubelet_and_kdev_plugin_umask_077():
    kdevctl_kubelet_and_kdev_plugin(0o077)


def test_kdev_plugin_alone_umask_0():
    kdev_plugin_alone(0)


def test_kdev_plugin_alone_umask_077():
    kdev_plugin_alone(0o077)


def test_kdev_dra_plugin_umask_0():
    kdev_dra_plugin(0)


def test_kdev_dra_plugin_umask_077():
    kdev_dra_plugin(0o077)


if __name__ == "__main__":
    kt.run_tests([
        test_kdevctl_kubelet_and_kdev_plugin_umask_0,
        test_kdevctl_kubelet_and_kdev_plugin_umask_077,
        test_kdev_plugin_alone_umask_0,
        test_kdev_plugin_alone_umask_077,
        test_kdev_dra_plugin_umask_0,
        test_kdev_dra_plugin_umask_077,
    ])
