"""Isolated replicas end to end on the mock libnvidia-ml.so.1 (8 H100, 81559
MiB each): kdev-plugin installs the share library and the preload file under
--share-root, and Allocate of isolated replicas answers (every device list
strategy) with the exact mounts, env, CDI names and per-container CDI spec,
and writes the exact `limits` file in a region directory with the exact
modes; regions of containers that are gone are removed; odd files are
refused; --check-config reports the section's errors as file:line:column."""
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

RES = "nvidia.com/gpu.shared"
SOCK = "kdev-nvidia.com_gpu.shared.sock"
U = kt.H100_UUIDS
MIB = 1 << 20
GPU_BYTES = 81559 * MIB                 # the topology's memory_mib
QUARTER = GPU_BYTES // 4                # 21380202496
PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
LIB_CTR = "/usr/lib/kdev/libkdev-share.so"
LIB_TEXT = b"\x7fELF stand-in for libkdev-share.so\n"

CONFIG = """version: v1
flags:
  plugin:
    deviceListStrategy: %s
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
isolation:
  resources:
  - name: nvidia.com/gpu.shared
%s"""


def env_for(d):
    control = os.path.join(d, "control")
    open(control, "a").close()
    return {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
            "KDEV_MOCK_NVML_CONTROL": control}


class Node:
    """kdev-plugin with isolated replicas in temporary directories."""

    def __init__(self, d, strategy="envvar", extra_iso="", library=None, flags=()):
        self.d = d
        self.dp = os.path.join(d, "dp")
        os.mkdir(self.dp)
        self.root = os.path.join(d, "share")
        self.cdi = os.path.join(d, "cdi")
        self.lib = library or os.path.join(d, "libkdev-share.so")
        if library is None:
            with open(self.lib, "wb") as f:
                f.write(LIB_TEXT)
        self.kubelet = FakeKubelet(self.dp)
        self.kubelet.start()
        self.plugin = Plugin(self.dp, CONFIG % (strategy, extra_iso),
                             extra=("--cdi-dir", self.cdi, "--share-root", self.root,
                                    "--share-library", self.lib, *flags),
                             env=env_for(d))
        wait_for(lambda: self.kubelet.updates.get(RES), what="ListAndWatch of " + RES)

    def allocate(self, ids):
        return kt.allocate(self.dp, SOCK, ids)

    def regions(self):
        return sorted(os.listdir(os.path.join(self.root, "containers")))

    def close(self):
        rc = self.plugin.stop()
        self.kubelet.stop()
        assert rc == 0, self.plugin.logtext()[-4000:]


def region_of(r):
    """The region directory named by answer |r|'s mounts."""
    for m in r.mounts:
        if m.container_path == "/var/run/kdev/share":
            return m.host_path
    raise AssertionError("no region mount in %s" % r)


def read(path):
    with open(path) as f:
        return f.read()


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def mounts(r):
    return [(m.container_path, m.host_path, m.read_only) for m in r.mounts]


def limits_text(ids, lines, policy=None):
    text = "# kdev-plugin: isolated replicas of nvidia.com/gpu.shared\n"
    text += "".join("# device %s\n" % i for i in ids)
    text += "".join("%s %d %d\n" % line for line in lines)
    if policy:
        text += "policy %s\n" % policy
    return text


def expected_mounts(n, region):
    return [(LIB_CTR, n.root + "/lib/libkdev-share.so", True),
            ("/etc/ld.so.preload", n.root + "/ld.so.preload", True),
            ("/var/run/kdev/share", region, False),
            ("/var/run/kdev/share/limits", region + "/limits", True)]


def test_installed_files_and_one_replica_envvar():
    with TempDir() as d:
        n = Node(d)
        try:
            assert read(n.root + "/ld.so.preload") == LIB_CTR + "\n"
            with open(n.root + "/lib/libkdev-share.so", "rb") as f:
                assert f.read() == LIB_TEXT
            assert mode(n.root) == 0o755 and mode(n.root + "/lib") == 0o755
            assert mode(n.root + "/containers") == 0o700
            assert mode(n.root + "/lib/libkdev-share.so") == 0o644
            assert n.regions() == []
            ids = [U[0] + "::0"]
            r = n.allocate(ids)
            region = region_of(r)
            rid = os.path.basename(region)
            assert os.path.dirname(region) == n.root + "/containers"
            # the allocation's time in ns (16 hex digits), '-', 8 random hex digits
            assert re.fullmatch(r"[0-9a-f]{16}-[0-9a-f]{8}", rid), rid
            assert abs(int(rid[:16], 16) / 1e9 - time.time()) < 60, rid
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": U[0],
                                    "KDEV_SHARE_DIR": "/var/run/kdev/share"}, r.envs
            assert mounts(r) == expected_mounts(n, region), mounts(r)
            assert list(r.cdi_devices) == [] and dict(r.annotations) == {}
            assert read(region + "/limits") == limits_text(ids, [(U[0], QUARTER, 25)])
            assert mode(region) == 0o1777 and mode(region + "/limits") == 0o444
            assert n.regions() == [rid]
        finally:
            n.close()


def test_kdevctl_allocate_json():
    """kdevctl allocate (kubelet's side of the wire) prints the exact answer
    of k replicas of one GPU, read-only mounts included."""
    with TempDir() as d:
        n = Node(d)
        try:
            ids = [U[4] + "::0", U[4] + "::3"]
            out = subprocess.run([os.path.join(kt.BUILD_DIR, "kdevctl"), "allocate",
                                  os.path.join(n.dp, SOCK), *ids, "-o", "json"],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            r = json.loads(out.stdout)["containerResponses"][0]
            region = [m["hostPath"] for m in r["mounts"]
                      if m["containerPath"] == "/var/run/kdev/share"][0]
            assert r == {
                "envs": {"NVIDIA_VISIBLE_DEVICES": U[4], "KDEV_SHARE_DIR": "/var/run/kdev/share"},
                "mounts": [{"containerPath": c, "hostPath": h, **({"readOnly": True} if ro else {})}
                           for c, h, ro in expected_mounts(n, region)]}, r
            assert read(region + "/limits") == limits_text(ids, [(U[4], 2 * QUARTER, 50)])
        finally:
            n.close()


def test_k_replicas_of_one_gpu_and_replicas_on_two_gpus():
    with TempDir() as d:
        n = Node(d)
        try:
            ids = [U[3] + "::1", U[3] + "::2", U[3] + "::0"]
            r = n.allocate(ids)
            assert dict(r.envs)["NVIDIA_VISIBLE_DEVICES"] == U[3]
            assert read(region_of(r) + "/limits") == limits_text(ids, [(U[3], 3 * QUARTER, 75)])
            ids = [U[5] + "::3", U[1] + "::0", U[5] + "::2"]
            r = n.allocate(ids)
            assert dict(r.envs)["NVIDIA_VISIBLE_DEVICES"] == U[5] + "," + U[1]
            assert read(region_of(r) + "/limits") == limits_text(
                ids, [(U[5], 2 * QUARTER, 50), (U[1], QUARTER, 25)])
            # all 4 replicas: the whole GPU
            ids = [U[7] + "::%d" % i for i in range(4)]
            r = n.allocate(ids)
            assert read(region_of(r) + "/limits") == limits_text(ids, [(U[7], 4 * QUARTER, 100)])
            assert len(n.regions()) == 3
        finally:
            n.close()


def test_explicit_shares_policy_and_preload_env():
    with TempDir() as d:
        n = Node(d, extra_iso="    memory: 10Gi\n    compute: 30%\n    policy: strict\n"
                              "    preload: env\n")
        try:
            ids = [U[2] + "::0", U[2] + "::3"]
            r = n.allocate(ids)
            region = region_of(r)
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": U[2],
                                    "KDEV_SHARE_DIR": "/var/run/kdev/share",
                                    "LD_PRELOAD": LIB_CTR}, r.envs
            want = expected_mounts(n, region)
            del want[1]  # no /etc/ld.so.preload: the image's stays
            assert mounts(r) == want, mounts(r)
            assert read(region + "/limits") == limits_text(ids, [(U[2], 20 << 30, 60)], "strict")
        finally:
            n.close()


def labels(path):
    return [l for l in read(path).splitlines() if "gpu.shared" in l]


def test_labels():
    """GFD-style labels say what a replica is: 81559 MiB / 4 = 20389 MiB, 25 %;
    an explicit 10Gi and 30 %."""
    for extra, memory, compute in (("", 20389, 25), ("    memory: 10Gi\n    compute: 30\n",
                                                     10240, 30)):
        with TempDir() as d:
            nfd = os.path.join(d, "gpu.features")
            n = Node(d, extra_iso=extra, flags=("--nfd-features-file", nfd))
            try:
                wait_for(lambda: os.path.exists(nfd), what="labels file")
                assert labels(nfd) == ["nvidia.com/gpu.shared.replica.compute=%d" % compute,
                                       "nvidia.com/gpu.shared.replica.memory=%d" % memory,
                                       "nvidia.com/gpu.shared.replicas=4"], labels(nfd)
            finally:
                n.close()


def test_sighup_applies_new_shares():
    """A config reload (SIGHUP) with other shares re-serves the resource; the
    next Allocate writes the new limits, the library is installed again."""
    with TempDir() as d:
        n = Node(d)
        try:
            r = n.allocate([U[0] + "::0"])
            assert read(region_of(r) + "/limits").endswith("%s %d 25\n" % (U[0], QUARTER))
            with open(n.plugin.config, "w") as f:
                f.write(CONFIG % ("envvar", "    compute: 40\n    memory: 1Gi\n"))
            regs = len(n.kubelet.registrations)
            os.kill(n.plugin.proc.pid, signal.SIGHUP)
            wait_for(lambda: "configuration applied" in n.plugin.logtext(), what="reload")
            # the changed resource's new server registered (kubelet dials it
            # back): the socket is the new server's, not the old one closing
            wait_for(lambda: len(n.kubelet.registrations) > regs, what="registration again")
            r = n.allocate([U[0] + "::1"])
            assert read(region_of(r) + "/limits").endswith("%s %d 40\n" % (U[0], 1 << 30))
        finally:
            n.close()


def test_volume_mounts():
    with TempDir() as d:
        n = Node(d, strategy="volume-mounts")
        try:
            r = n.allocate([U[4] + "::2"])
            region = region_of(r)
            assert mounts(r) == [("/var/run/nvidia-container-devices/" + U[4], "/dev/null",
                                  False)] + expected_mounts(n, region), mounts(r)
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices",
                                    "KDEV_SHARE_DIR": "/var/run/kdev/share"}
        finally:
            n.close()


def cdi_spec_of(n, rid):
    path = os.path.join(n.cdi, "kdev.io-share_%s.json" % rid)
    assert mode(path) == 0o644
    with open(path) as f:
        return json.load(f)


def expected_spec(n, rid, script, env_mode=False):
    """The container's CDI spec; |script|: the hook's shell text (its
    behaviour: test_preload_hook)."""
    region = n.root + "/containers/" + rid

    def mnt(host, ctr, ro):
        return {"hostPath": host, "containerPath": ctr,
                "options": ["ro" if ro else "rw", "nosuid", "nodev", "bind"]}
    ms = [mnt(n.root + "/lib/libkdev-share.so", LIB_CTR, True)]
    if not env_mode:
        ms.append(mnt(region + "/ld.so.preload", "/etc/ld.so.preload", True))
    ms += [mnt(region, "/var/run/kdev/share", False),
           mnt(region + "/limits", "/var/run/kdev/share/limits", True)]
    edits = {"env": ["KDEV_SHARE_DIR=/var/run/kdev/share"]
             + (["LD_PRELOAD=" + LIB_CTR] if env_mode else [])}
    if not env_mode:
        ms.append(mnt(region + "/ld.so.preload", "/var/run/kdev/share/ld.so.preload", True))
        edits["hooks"] = [{"hookName": "createRuntime", "path": "/bin/sh",
                           "args": ["sh", "-c", script, "kdev-share-preload",
                                    region + "/ld.so.preload", LIB_CTR]}]
    edits["mounts"] = ms
    return {"cdiVersion": "0.5.0", "kind": "kdev.io/share",
            "devices": [{"name": rid, "containerEdits": edits}]}


def hook_script(spec):
    return spec["devices"][0]["containerEdits"]["hooks"][0]["args"][2]


def test_cdi_cri_and_cdi_annotations():
    with TempDir() as d:
        n = Node(d, strategy="[cdi-cri, cdi-annotations]")
        try:
            ids = [U[6] + "::1", U[0] + "::1"]
            r = n.allocate(ids)
            assert list(r.mounts) == [] and dict(r.envs) == {}, r
            names = [c.name for c in r.cdi_devices]
            assert names[:2] == ["k8s.device-plugin.nvidia.com/gpu=" + U[6],
                                 "k8s.device-plugin.nvidia.com/gpu=" + U[0]], names
            assert len(names) == 3 and names[2].startswith("kdev.io/share="), names
            rid = names[2].split("=", 1)[1]
            ann = dict(r.annotations)
            assert ann.pop("cdi.k8s.io/kdev-share_" + rid) == names[2], r.annotations
            assert list(ann.values()) == [",".join(names[:2])], ann
            spec = cdi_spec_of(n, rid)
            assert spec == expected_spec(n, rid, hook_script(spec)), spec
            region = n.root + "/containers/" + rid
            assert read(region + "/limits") == limits_text(ids, [(U[6], QUARTER, 25),
                                                                 (U[0], QUARTER, 25)])
            # Allocate made the region from those limits (the container's
            # processes map it, none reads the limits file or creates it)
            assert mode(region + "/region") == 0o666
            got = subprocess.run([os.path.join(kt.BUILD_DIR, "kdevctl"), "share", region, "-o",
                                  "json"], capture_output=True, text=True, timeout=30)
            assert got.returncode == 0, got.stderr
            assert json.loads(got.stdout) == {
                "region": region, "policy": "work-conserving", "limitsError": False,
                "gpus": [{"index": i, "uuid": u, "memoryLimit": QUARTER, "memoryUsed": 0,
                          "computePercent": 25} for i, u in enumerate((U[6], U[0]))],
                "processes": []}, got.stdout
            assert read(region + "/ld.so.preload") == LIB_CTR + "\n"
            assert mode(region + "/ld.so.preload") == 0o444
        finally:
            n.close()


def test_cdi_preload_env():
    with TempDir() as d:
        n = Node(d, strategy="cdi-cri", extra_iso="    preload: env\n")
        try:
            r = n.allocate([U[1] + "::3"])
            rid = r.cdi_devices[1].name.split("=", 1)[1]
            assert cdi_spec_of(n, rid) == expected_spec(n, rid, None, env_mode=True)
            assert sorted(os.listdir(n.root + "/containers/" + rid)) == ["limits", "region"]
        finally:
            n.close()


def run_hook(script, bundle, target):
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1,
                        "bundle": bundle})
    with open(target, "w") as f:
        f.write(LIB_CTR + "\n")
    r = subprocess.run(["/bin/sh", "-c", script, "kdev-share-preload", target, LIB_CTR],
                       input=state, capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", r
    return read(target)


def test_preload_hook():
    """The hook of the CDI spec: the image's /etc/ld.so.preload after the
    library, read from the root the bundle's config.json names (relative or
    absolute, config.json on one line or indented); links and odd files are
    not read; a rerun gives the same file."""
    with TempDir() as d:
        n = Node(d, strategy="cdi-cri")
        try:
            rid = n.allocate([U[0] + "::0"]).cdi_devices[1].name.split("=", 1)[1]
            script = hook_script(cdi_spec_of(n, rid))
        finally:
            n.close()
        bundle = os.path.join(d, "bundle")
        rootfs = os.path.join(bundle, "rootfs")
        os.makedirs(rootfs + "/etc")
        target = os.path.join(d, "preload")
        ours = LIB_CTR + "\n"
        with open(bundle + "/config.json", "w") as f:
            json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": False},
                       "annotations": {"x": "y"}}, f)
        assert run_hook(script, bundle, target) == ours  # the image has none
        with open(rootfs + "/etc/ld.so.preload", "w") as f:
            f.write("/usr/lib/libimage.so\n")
        want = ours + "/usr/lib/libimage.so\n"
        assert run_hook(script, bundle, target) == want
        with open(target, "w") as f:
            f.write(want)
        with open(bundle + "/config.json", "w") as f:  # absolute root, indented
            json.dump({"root": {"readonly": True, "path": rootfs}}, f, indent=2)
        r = subprocess.run(["/bin/sh", "-c", script, "kdev-share-preload", target, LIB_CTR],
                           input=json.dumps({"bundle": bundle}), text=True, timeout=10)
        assert r.returncode == 0 and read(target) == want  # rewritten, not appended
        # a link (it could name a host file) and a FIFO are not read
        os.unlink(rootfs + "/etc/ld.so.preload")
        os.symlink("/etc/hostname", rootfs + "/etc/ld.so.preload")
        assert run_hook(script, bundle, target) == ours
        os.unlink(rootfs + "/etc/ld.so.preload")
        os.mkfifo(rootfs + "/etc/ld.so.preload")
        assert run_hook(script, bundle, target) == ours
        os.unlink(rootfs + "/etc/ld.so.preload")
        os.rename(rootfs + "/etc", rootfs + "/etc2")
        with open(rootfs + "/etc2/ld.so.preload", "w") as f:
            f.write("/usr/lib/libimage.so\n")
        os.symlink("etc2", rootfs + "/etc")  # /etc a link: not followed
        assert run_hook(script, bundle, target) == ours
        assert run_hook(script, os.path.join(d, "nobundle"), target) == ours


def test_regions_of_gone_containers_are_removed():
    with TempDir() as d:
        n = Node(d, strategy="cdi-cri")
        try:
            a = n.allocate([U[0] + "::0", U[0] + "::1"])
            b = n.allocate([U[1] + "::0"])
            ra = a.cdi_devices[1].name.split("=")[1]
            rb = b.cdi_devices[1].name.split("=")[1]
            assert n.regions() == sorted([ra, rb])
            # kubelet gave U0::1 to a new container: the first one is gone
            c = n.allocate([U[0] + "::1"])
            rc_ = c.cdi_devices[1].name.split("=")[1]
            assert n.regions() == sorted([rb, rc_]), n.regions()
            assert sorted(os.listdir(n.cdi)) == sorted(
                ["k8s.device-plugin.nvidia.com-gpu.json", "kdev.io-share_%s.json" % rb,
                 "kdev.io-share_%s.json" % rc_]), os.listdir(n.cdi)
            # what a container wrote in its region goes with it, links not followed
            outside = os.path.join(d, "outside")
            open(outside, "w").close()
            rdir = n.root + "/containers/" + rb
            os.mkdir(rdir + "/sub")
            os.symlink(outside, rdir + "/sub/link")
            open(rdir + "/region", "w").close()
            n.allocate([U[1] + "::0"])
            assert rb not in n.regions() and len(n.regions()) == 2
            assert os.path.exists(outside)
        finally:
            n.close()
        # at start: a half-made directory older than 60 s is removed, the
        # regions kept stay
        kept = n.regions()
        stale = n.root + "/containers/stale"
        os.mkdir(stale)
        os.utime(stale, (1, 1))
        n2 = Node.__new__(Node)
        n2.d, n2.dp, n2.root, n2.cdi, n2.lib = d, n.dp, n.root, n.cdi, n.lib
        n2.kubelet = FakeKubelet(n2.dp)
        n2.kubelet.start()
        n2.plugin = Plugin(n2.dp, CONFIG % ("cdi-cri", ""),
                           extra=("--cdi-dir", n2.cdi, "--share-root", n2.root,
                                  "--share-library", n2.lib), env=env_for(d))
        try:
            wait_for(lambda: n2.kubelet.updates.get(RES), what="ListAndWatch")
            assert n2.regions() == kept, n2.regions()
        finally:
            n2.close()


def start_fails(d, root, library):
    dp = os.path.join(d, "dp")
    os.makedirs(dp, exist_ok=True)
    cfg = os.path.join(d, "c.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG % ("envvar", ""))
    env = dict(os.environ, **env_for(d))
    return subprocess.run([PLUGIN, "--config", cfg, "-d", dp, "--cdi-dir",
                           os.path.join(d, "cdi"), "--share-root", root, "--share-library",
                           library], env=env, capture_output=True, text=True, timeout=60)


def test_odd_files_refused():
    with TempDir() as d:
        lib = os.path.join(d, "lib.so")
        with open(lib, "wb") as f:
            f.write(LIB_TEXT)
        root = os.path.join(d, "share")
        os.makedirs(root + "/lib")
        os.symlink("/etc/passwd", root + "/ld.so.preload")
        r = start_fails(d, root, lib)
        assert r.returncode == 1, (r.returncode, r.stderr)
        want = ("isolation: %s/ld.so.preload: is not a regular file (a symbolic link); "
                "not replaced" % root)
        assert want in r.stderr, r.stderr
        os.unlink(root + "/ld.so.preload")
        os.unlink(root + "/lib/libkdev-share.so")  # installed before the refusal
        os.mkfifo(root + "/lib/libkdev-share.so")
        r = start_fails(d, root, lib)
        assert ("isolation: %s/lib/libkdev-share.so: is not a regular file (a FIFO); "
                "not replaced" % root) in r.stderr, r.stderr
        os.unlink(root + "/lib/libkdev-share.so")
        fifo = os.path.join(d, "fifo.so")
        os.mkfifo(fifo)
        r = start_fails(d, root, fifo)
        assert ("isolation: installing the share library: %s: is not a regular file "
                "(a FIFO)" % fifo) in r.stderr, r.stderr
        r = start_fails(d, root, os.path.join(d, "missing.so"))
        assert ("isolation: installing the share library: %s/missing.so: cannot read: "
                "No such file or directory" % d) in r.stderr, r.stderr


def check(d, text):
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(text)
    env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR, KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO)
    r = subprocess.run([PLUGIN, "--check-config", path, "-d", os.path.join(d, "dp"),
                        "--log-level", "error", "--share-root", os.path.join(d, "share"),
                        "--share-library", os.path.join(d, "missing.so")], env=env, capture_output=True, text=True,
                       timeout=60)
    return path, r


TS = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: gpu-iso
      replicas: 2
isolation:
  resources:
"""


def test_check_config_errors():
    cases = [
        ("  - name: gpu-other\n",
         "10:11: isolation.resources[0].name: nvidia.com/gpu-other is not time-sliced (no "
         "sharing.timeSlicing.resources entry advertises it)"),
        ("  - name: gpu-iso\n    memory: 10GB\n",
         "11:13: isolation.resources[0].memory: must be a size in bytes (e.g. 10Gi, 512Mi, 20G "
         "or 1073741824), got \"10GB\""),
        ("  - name: gpu-iso\n    memory: 0\n",
         "11:13: isolation.resources[0].memory: must be a size in bytes (e.g. 10Gi, 512Mi, 20G "
         "or 1073741824), got \"0\""),
        ("  - name: gpu-iso\n    compute: 101%\n",
         "11:14: isolation.resources[0].compute: a percentage of the GPU must be an integer "
         "between 1 and 100, got \"101\""),
        ("  - name: gpu-iso\n    policy: Fair\n",
         "11:13: isolation.resources[0].policy: must be a policy of libkdev-share.so "
         "(work-conserving, strict or none), got \"Fair\""),
        ("  - name: gpu-iso\n    preload: both\n",
         "11:14: isolation.resources[0].preload: must be file or env, got \"both\""),
        ("  - name: gpu-iso\n  - name: nvidia.com/gpu-iso\n",
         "11:11: isolation.resources[1].name: nvidia.com/gpu-iso is already isolated by "
         "resources[0]"),
        ("  - name: gpu-iso\n    memroy: 1Gi\n",
         "11:5: isolation.resources[0].memroy: unknown key (expected one of: name, memory, "
         "compute, policy, preload)"),
    ]
    with TempDir() as d:
        for tail, want in cases:
            path, r = check(d, TS + tail)
            assert r.returncode == 1, (tail, r.returncode, r.stdout, r.stderr)
            # the log line quotes the message (logfmt): '"' as '\"'
            assert ("%s:%s" % (path, want)).replace('"', '\\"') in r.stderr, (tail, r.stderr)
        path, r = check(d, TS + "  - name: gpu-iso\n    memory: 40Gi\n    compute: 50\n")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("nvidia.com/gpu-iso: 16 devices (16 replicas of 8 devices)")
        assert lines[1] == ("  isolated: one replica = 42949672960 bytes (40960 MiB) and 50% of "
                            "its GPU, on every GPU"), r.stdout
        # --check-config writes nothing: no share root, no library needed
        assert not os.path.exists(os.path.join(d, "share"))


def test_readme_example():
    """README's "Governed sharing" example is accepted by --check-config and
    prints what the README shows."""
    text = read(os.path.join(kt.SOURCE_DIR, "README.md"))
    after = text.split("<!-- isolation-example -->\n```yaml\n", 1)[1]
    example, rest = after.split("```\n", 1)
    shown = rest.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    with TempDir() as d:
        path, r = check(d, example)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith(shown[1].split("...")[0]), (lines[0], shown[1])
        assert lines[1] == shown[2], (lines[1], shown[2])
        assert len(lines) == 2, lines


if __name__ == "__main__":
    kt.run_tests([v for k, v in sorted(globals().items()) if k.startswith("test_")])
