"""kdev-plugin --nfd-features-file on the mock libnvidia-ml.so.1: the node
labels file (GPU Feature Discovery's names, Node Feature Discovery's
features.d format) is written at start with the exact expected labels
(tests/data/labels), follows the config (time-slicing), is filled in when the
driver appears (rediscovery), is rewritten only when its text changes, is
restored by SIGHUP, and is kept at exit. An invalid MIG layout under
migStrategy single replaces an older file with GFD's <model>-MIG-INVALID set
(at start, exit 1 as before; and after a rediscovery). A path that cannot be
written stops the start (exit 1, an error naming the path and its
directory); a later failure is logged and retried."""
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu"
MOCK_DIR = kt.MOCK_NVML_DIR
DATA = os.path.join(kt.SOURCE_DIR, "tests", "data", "labels")
HEADER = ("# Written by kdev-plugin (NVIDIA GPU labels for Node Feature Discovery); "
          "do not edit.\n")
MACHINE_TEXT = "  NVIDIA DGX H100 (rev. 2)\n"  # as in tests/unit/test_nvidia_labels.c

CONFIG = """version: v1
flags:
  failOnInitError: %s
"""

TS_CONFIG = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
      - name: nvidia.com/mig-1g.10gb
        replicas: 2
      - name: nvidia.com/mig-1g.5gb
        replicas: 3
"""


def env_for(d, **extra):
    base = os.path.dirname(d)
    machine = os.path.join(base, "product_name")
    with open(machine, "w") as f:
        f.write(MACHINE_TEXT)
    env = {
        "LD_LIBRARY_PATH": MOCK_DIR,
        "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
        "KDEV_MOCK_NVML_CONTROL": os.path.join(base, "control"),
        "KDEV_NFD_MACHINE_TYPE_FILE": machine,
    }
    env.update(extra)
    open(env["KDEV_MOCK_NVML_CONTROL"], "a").close()
    return env


def control(d, line):
    with open(os.path.join(os.path.dirname(d), "control"), "a") as f:
        f.write(line + "\n")


def features_dir(d):
    p = os.path.join(os.path.dirname(d), "features.d")
    os.makedirs(p, exist_ok=True)
    return p


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def expected(name):
    with open(os.path.join(DATA, name)) as f:
        return HEADER + f.read()


def normalised(text):
    """gpu.mode comes from the host's /sys (PCI class of the mock's bus ids):
    check its value, then blank it out for the exact comparison."""
    out = []
    for line in text.splitlines(True):
        if line.startswith("nvidia.com/gpu.mode="):
            assert line.strip().split("=", 1)[1] in ("unknown", "compute", "graphics"), line
            line = "nvidia.com/gpu.mode=<host>\n"
        out.append(line)
    return "".join(out)


def start(d, config_text, env, path):
    return Plugin(d, config_text, extra=("--nfd-features-file", path), env=env)


def test_written_at_start_exact_and_kept_at_exit():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "true", env_for(d), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            assert normalised(read(path)) == normalised(
                expected("h100-80gb-8x-nvswitch-none.txt")), read(path)
            assert oct(os.stat(path).st_mode & 0o777) == "0o644"
            assert "wrote node labels" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()
        # kept at exit (no label flapping across restarts), no temporary file left
        assert normalised(read(path)) == normalised(expected("h100-80gb-8x-nvswitch-none.txt"))
        assert os.listdir(os.path.dirname(path)) == ["kdev"], os.listdir(os.path.dirname(path))


def test_follows_time_slicing_config_and_env_var():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        # the environment variable instead of the flag
        p = Plugin(d, TS_CONFIG, env=env_for(d, KDEV_NFD_FEATURES_FILE=path))
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            text = read(path)
            assert normalised(text) == normalised(
                expected("h100-80gb-8x-nvswitch-none-ts.txt")), text
            assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED\n" in text
            assert "nvidia.com/gpu.replicas=4\n" in text
        finally:
            assert p.stop() == 0
            k.stop()


def test_rediscovery_fills_the_file():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        control(d, "init-error DRIVER_NOT_LOADED")
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "false", env_for(d, KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2"), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            # no GPUs yet: the header only (NFD then sets no GPU label)
            wait_for(lambda: read(path) is not None, what="labels file")
            assert read(path) == HEADER, read(path)
            control(d, "init-error SUCCESS")
            want = normalised(expected("h100-80gb-8x-nvswitch-none.txt"))
            wait_for(lambda: read(path) and normalised(read(path)) == want,
                     what="labels after the driver appears")
            wait_for(lambda: len(k.updates[RES]) >= 2, what="GPUs after the driver appears")
        finally:
            assert p.stop() == 0
            k.stop()


def test_written_only_on_change_and_restored_by_sighup():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        path = os.path.join(features_dir(d), "kdev")
        p = start(d, CONFIG % "true", env_for(d), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            good = read(path)
            ino = os.stat(path).st_ino
            # SIGHUP with nothing changed: not rewritten (same inode)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: p.logtext().count("node labels unchanged") >= 1,
                     what="SIGHUP handled")
            assert os.stat(path).st_ino == ino
            # edited by hand: SIGHUP restores it (atomically: a new inode);
            # the edited file is kept aside as .kdev.foreign-<unix seconds>
            with open(path, "w") as f:
                f.write("nvidia.com/gpu.product=bogus\n")
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: read(path) == good, what="labels restored")
            assert os.stat(path).st_ino != ino
            asides = [n for n in os.listdir(os.path.dirname(path))
                      if n.startswith(".kdev.foreign-")]
            assert len(asides) == 1, asides
            assert re.fullmatch(r"\.kdev\.foreign-[0-9]+", asides[0]), asides
            aside = os.path.join(os.path.dirname(path), asides[0])
            assert read(aside) == "nvidia.com/gpu.product=bogus\n"
            # the warning is logged beside the rewrite: read once it is there
            wait_for(lambda: "moved aside" in p.logtext(), what="the moved-aside warning")
            warn = [ln for ln in p.logtext().splitlines() if "moved aside" in ln]
            assert warn == [
                'ts=%s level=warn msg="state file changed by someone else: moved aside and '
                'rebuilt from memory" path=%s aside=%s' % (warn[0].split()[0][3:], path, aside)
            ], warn
            os.unlink(aside)
            # removed: SIGHUP writes it again
            os.unlink(path)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: read(path) == good, what="labels written again")
            time.sleep(0.2)
            assert sorted(os.listdir(os.path.dirname(path))) == ["kdev"]
        finally:
            assert p.stop() == 0
            k.stop()


TOPOS = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies")
SINGLE = """version: v1
flags:
  migStrategy: single
  failOnInitError: %s
"""
INVALID_ERRORS = {
    "mig-a100-40gb.yaml": "invalid MIG configuration: at least one device with migEnabled=true "
                          "was not configured correctly: device 2 has no MIG devices configured",
    "mig-h100-80gb.yaml": "invalid MIG configuration: more than one MIG device type present on "
                          "node",
}


def mig_env(d, topo, **extra):
    proc = os.path.join(os.path.dirname(d), "proc")
    os.makedirs(proc, exist_ok=True)
    return env_for(d, KDEV_MOCK_NVML_TOPOLOGY=os.path.join(TOPOS, topo),
                   KDEV_MOCK_NVML_PROC=proc, **extra), proc


def test_invalid_mig_layout_replaces_old_labels():
    """A valid single layout writes its labels; a restart on an invalid one
    (either failOnInitError) still exits 1 with NVIDIA's error, but leaves
    GFD's INVALID set, never the old model/count."""
    for topo, fail in (("mig-a100-40gb.yaml", "true"), ("mig-h100-80gb.yaml", "false")):
        with TempDir() as d:
            path = os.path.join(features_dir(d), "kdev")
            k = FakeKubelet(d)
            k.start()
            env, proc = mig_env(d, "mig-a100-80gb-single.yaml")
            p = Plugin(d, SINGLE % fail, extra=("--nfd-features-file", path, "--proc-root", proc),
                       env=env)
            try:
                wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
                wait_for(lambda: read(path), what="labels file")
                assert normalised(read(path)) == normalised(
                    expected("mig-a100-80gb-single-single.txt")), read(path)
            finally:
                assert p.stop() == 0
            env, proc = mig_env(d, topo)
            p = Plugin(d, SINGLE % fail, extra=("--nfd-features-file", path, "--proc-root", proc),
                       env=env)
            try:
                rc = p.proc.wait(30 * kt.TIMEOUT_SCALE)
            finally:
                p.kill()
                k.stop()
            assert rc == 1, (rc, p.logtext())
            assert ('level=error msg="cannot start" error="%s"' % INVALID_ERRORS[topo]
                    in p.logtext()), p.logtext()
            text = read(path)
            want = expected(topo.replace(".yaml", "-single.txt"))
            assert normalised(text) == normalised(want), text
            assert "-MIG-INVALID\n" in text and "nvidia.com/gpu.count=0\n" in text, text
            assert os.listdir(os.path.dirname(path)) == ["kdev"], os.listdir(os.path.dirname(path))


def test_invalid_mig_layout_after_rediscovery():
    """failOnInitError false, no driver at start (header only); the driver
    appears with an invalid single layout: the resources cannot be built,
    the labels become the INVALID set (the labels timer sees the new GPUs)."""
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        control(d, "init-error DRIVER_NOT_LOADED")
        path = os.path.join(features_dir(d), "kdev")
        env, proc = mig_env(d, "mig-a100-40gb.yaml", KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2")
        p = Plugin(d, SINGLE % "false",
                   extra=("--nfd-features-file", path, "--proc-root", proc), env=env)
        try:
            wait_for(lambda: read(path) is not None, what="labels file")
            assert read(path) == HEADER, read(path)
            control(d, "init-error SUCCESS")
            want = normalised(expected("mig-a100-40gb-single.txt"))
            wait_for(lambda: read(path) and normalised(read(path)) == want,
                     what="INVALID labels after the driver appears")
            assert "cannot build the NVIDIA resources after rediscovery" in p.logtext()
        finally:
            assert p.stop() == 0
            k.stop()


def test_unwritable_path_is_fatal_at_start():
    with TempDir() as d:
        base = os.path.dirname(d)
        afile = os.path.join(base, "a-file")
        open(afile, "w").close()
        cases = (
            (os.path.join(base, "no-such-dir", "kdev"), os.path.join(base, "no-such-dir"),
             "No such file or directory"),
            (os.path.join(afile, "kdev"), afile, "Not a directory"),
        )
        k = FakeKubelet(d)
        k.start()
        try:
            for path, directory, why in cases:
                p = start(d, CONFIG % "true", env_for(d), path)
                try:
                    rc = p.proc.wait(30 * kt.TIMEOUT_SCALE)
                finally:
                    p.kill()
                assert rc == 1, (rc, p.logtext())
                want = ('level=error msg="cannot start" error="--nfd-features-file: %s: cannot '
                        'create a file in directory %s: %s"\n' % (path, directory, why))
                assert want in p.logtext(), p.logtext()
                assert ".kdev." not in p.logtext(), p.logtext()  # never the temporary file
                assert k.count() == 0  # nothing registered
        finally:
            k.stop()


def test_later_write_failure_is_logged_and_retried():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        fdir = features_dir(d)
        path = os.path.join(fdir, "kdev")
        p = start(d, CONFIG % "true", env_for(d, KDEV_NVIDIA_REDISCOVER_INTERVAL="0.2"), path)
        try:
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            wait_for(lambda: read(path), what="labels file")
            good = read(path)
            os.rename(fdir, fdir + ".away")
            p.proc.send_signal(signal.SIGHUP)  # a forced write into the missing directory
            want = ('level=error msg="cannot write the node labels, will retry" path=%s '
                    'error="%s: cannot create a file in directory %s: No such file or '
                    'directory"\n' % (path, path, fdir))
            wait_for(lambda: want in p.logtext(), what="error logged")
            assert p.logtext().count("cannot write the node labels, will retry") == 1
            assert p.proc.poll() is None
            os.mkdir(fdir)  # an empty directory again: the labels timer writes the file
            wait_for(lambda: read(path) == good, what="labels written on retry")
            wait_for(lambda: "node labels written again" in p.logtext(), what="recovery logged")
            assert p.logtext().count("cannot write the node labels, will retry") == 1
        finally:
            assert p.stop() == 0
            k.stop()
        shutil.rmtree(fdir + ".away", ignore_errors=True)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(MOCK_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", MOCK_DIR)
        sys.exit(1)
    kt.run_tests([
        test_written_at_start_exact_and_kept_at_exit,
        test_follows_time_slicing_config_and_env_var,
        test_rediscovery_fills_the_file,
        test_written_only_on_change_and_restored_by_sighup,
        test_invalid_mig_layout_replaces_old_labels,
        test_invalid_mig_layout_after_rediscovery,
        test_unwritable_path_is_fatal_at_start,
        test_later_write_failure_is_logged_and_retried,
    ])
