"""The driver files in the CDI specs, end to end (src/nvidia/driver_files.h):
kdev-plugin (cdi-cri) and kdev-dra-plugin (one prepared claim) on the mock
libnvidia-ml.so.1 (driver 550.90.07) with --driver-root a fake driver root
holding libraries named for that version and a fake nvidia-cdi-hook. The
spec-level containerEdits written are checked exactly; without the libraries
the specs hold env and device nodes only and the daemons log
"no driver libraries found under ROOT for driver VERSION; ..."."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

VERSION = "550.90.07"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
CONFIG = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [cdi-cri]\n"
GPU_SPEC = "k8s.device-plugin.nvidia.com-gpu.json"


def put(path, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("x")
    os.chmod(path, mode)


def fake_root(base, with_driver):
    """A driver root: the mock NVML as libnvidia-ml.so.1 (kdev loads it from
    the root) and, |with_driver|, the driver's files of VERSION."""
    root = os.path.join(base, "driver-root")
    os.makedirs(root + LIBDIR)
    os.symlink(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1"),
               root + LIBDIR + "/libnvidia-ml.so.1")
    if with_driver:
        for lib in ("libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so."):
            put(root + LIBDIR + "/" + lib + VERSION)
        put(root + "/usr/bin/nvidia-smi", 0o755)
    hook = os.path.join(base, "hookbin", "nvidia-cdi-hook")
    put(hook, 0o755)
    return root, hook


def want_edits(root, hook):
    libs = [LIBDIR + "/" + n + VERSION
            for n in ("libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so.")]
    mounts = [{"hostPath": root + p, "containerPath": p, "options": OPTIONS}
              for p in libs + ["/usr/bin/nvidia-smi"]]
    env = ["NVIDIA_CTK_DEBUG=false"]
    # nvidia-container-toolkit v1.20's nvcdi hooks, in its order
    hooks = [
        {"hookName": "createContainer", "path": hook,
         "args": ["nvidia-cdi-hook", "create-symlinks", "--link",
                  "libcuda.so.1::" + LIBDIR + "/libcuda.so"], "env": env},
        {"hookName": "createContainer", "path": hook,
         "args": ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=" + VERSION],
         "env": env},
        {"hookName": "createContainer", "path": hook,
         "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", LIBDIR], "env": env},
        {"hookName": "createContainer", "path": hook,
         "args": ["nvidia-cdi-hook", "disable-device-node-modification"], "env": env},
        {"hookName": "createContainer", "path": hook,
         "args": ["nvidia-cdi-hook", "update-application-profile"], "env": env},
    ]
    return {"env": ["NVIDIA_CTK_LIBCUDA_DIR=" + LIBDIR, "NVIDIA_VISIBLE_DEVICES=void"],
            "hooks": hooks, "mounts": mounts}


def missing_line(root):
    return ("no driver libraries found under %s for driver %s; containers will need the "
            "NVIDIA container runtime to inject them" % (root, VERSION))


def run_kdev_plugin(with_driver):
    with TempDir() as d:
        base = os.path.dirname(d)
        root, hook = fake_root(base, with_driver)
        cdi = os.path.join(base, "cdi")
        control = os.path.join(base, "control")
        open(control, "a").close()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
               "KDEV_MOCK_NVML_CONTROL": control}
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, CONFIG, env=env,
                   extra=("--cdi-dir", cdi, "--driver-root", root, "--nvidia-cdi-hook-path", hook,
                          "--container-driver-root", os.path.join(base, "no-such-dir")))
        try:
            wait_for(lambda: k.updates.get("nvidia.com/gpu"), what="ListAndWatch")
            with open(os.path.join(cdi, GPU_SPEC)) as f:
                spec = json.load(f)
            log = p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()
        names = [dev["name"] for dev in spec["devices"]]
        assert names[:8] == kt.H100_UUIDS and names[-1] == "all", names
        return root, hook, spec, log


def test_kdev_plugin_spec_has_driver_files():
    root, hook, spec, log = run_kdev_plugin(True)
    got = spec["containerEdits"]
    assert got == want_edits(root, hook), json.dumps(got, indent=1)
    assert "no driver libraries found" not in log, log


def test_kdev_plugin_spec_without_driver_files():
    root, hook, spec, log = run_kdev_plugin(False)
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}, spec
    assert missing_line(root) in log, log


def run_dra_plugin(with_driver):
    import dra_plugin as dp
    with TempDir() as d:
        base = os.path.dirname(d)
        root, hook = fake_root(base, with_driver)
        e = dp.Env(base, extra=("--driver-root", root),
                   env_extra={"NVIDIA_CDI_HOOK_PATH": hook})
        try:
            # the socket file appears at bind(), before listen(): wait until
            # it accepts a connection
            wait_for(lambda: kt.sock_accepts(e.dra_sock()) or e.proc.poll() is not None,
                     what="DRA socket")
            assert e.proc.poll() is None, e.logtext()
            r = e.call(e.dra_sock(), dp.PREPARE, dp.prepare_req(),
                       dp.dra_pb.NodePrepareResourcesResponse)
            assert r.claims[dp.CLAIM_UID].error == "", r
            path = os.path.join(e.cdi, "k8s.gpu.nvidia.com-claim_%s.json" % dp.CLAIM_UID)
            with open(path) as f:
                spec = json.load(f)
            log = e.logtext()
        finally:
            e.close()
        assert [x["name"] for x in spec["devices"]] == [dp.CLAIM_UID + "-gpu-0"], spec
        return root, hook, spec, log


def test_dra_claim_spec_has_driver_files():
    root, hook, spec, log = run_dra_plugin(True)
    got = spec["containerEdits"]
    assert got == want_edits(root, hook), json.dumps(got, indent=1)
    assert "no driver libraries found" not in log, log


def test_dra_claim_spec_without_driver_files():
    root, hook, spec, log = run_dra_plugin(False)
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}, spec
    assert missing_line(root) in log, log


if __name__ == "__main__":
    if not os.path.exists(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", kt.MOCK_NVML_DIR)
        sys.exit(1)
    kt.run_tests([
        test_kdev_plugin_spec_has_driver_files,
        test_kdev_plugin_spec_without_driver_files,
        test_dra_claim_spec_has_driver_files,
        test_dra_claim_spec_without_driver_files,
    ])
