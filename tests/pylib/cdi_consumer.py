"""The CDI specs kdev writes, produced for real CDI consumers (the reference
CDI library in tests/integration/cdi_reference.py, podman in
tests/integration/cdi_podman.py).

Each consumer test runs in a private mount namespace (enter_private_mounts:
`unshare --mount`, root only), where a fake NVIDIA driver stands in for the
real one: `mknod` device nodes with NVIDIA's majors, driver libraries named
for the mock's driver version (550.90.07), nvidia-smi, and a recording
nvidia-cdi-hook. A Layout row says where that driver lives:

- "/": driver root "/" (kdev's default). The fake files are overlays in the
  namespace on /dev, /usr/lib/x86_64-linux-gnu and /usr/bin, so nothing
  outside the test's namespace sees them; /run (where podman reads
  /run/cdi) is a private tmpfs, /etc/cdi (if any) is hidden.

- "driver-container": the GPU operator's driver container, NVIDIA's chart
  layout: the host driver root /run/nvidia/driver (a private tmpfs /run
  holds it) bind-mounted at a container driver root (BASE/driver-root,
  standing for the pod's /driver-root), kdev-plugin run with
  `--driver-root /run/nvidia/driver --driver-root-ctr-path BASE/driver-root`:
  it opens the mock NVML and finds the driver files and device nodes under
  the container root, and writes host paths under /run/nvidia/driver, which
  the consumers use. kdev-plugin runs in a mount namespace of its own where
  /run/nvidia/driver is an empty tmpfs (its pod does not see the host's
  path), so it registers only if it opens NVML under the container root.
  kdev-dra-plugin gets `--driver-root /run/nvidia/driver` (it sees the
  host's paths).

The cases and their expected values are computed from the row.

collect(layout, base) runs kdev-plugin (GPU, MIG strategy mixed with a
time-sliced MIG profile, time-sliced GPUs; cdi-cri, registered with
`kdevctl kubelet`, the CDI device names taken from `kdevctl allocate -o
json`) and kdev-dra-plugin (a GPU claim and a MIG claim prepared) and
returns one Case per CDI device, each with the spec directory and the
device nodes, env, mounts and hooks a consumer must inject."""
import json
import os

import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import kdevtest as kt  # noqa: E402

VERSION = "550.90.07"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
LIBS = [LIBDIR + "/" + n + VERSION
        for n in ("libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so.")]
SMI = "/usr/bin/nvidia-smi"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
# NVIDIA's device majors: 195 is the driver's (nvidia<minor>, nvidiactl
# 195:255, nvidia-modeset 195:254); nvidia-uvm and nvidia-caps get dynamic
# majors on a real node, here two fixed ones from the dynamic range.
NV_MAJOR, UVM_MAJOR, CAPS_MAJOR = 195, 509, 508
CONTROL = [("/dev/nvidiactl", NV_MAJOR, 255), ("/dev/nvidia-uvm", UVM_MAJOR, 0),
           ("/dev/nvidia-uvm-tools", UVM_MAJOR, 1), ("/dev/nvidia-modeset", NV_MAJOR, 254)]
H100_GPUS = 8
MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")
MIG_GPUS = 4
# mig-a100-40gb: GPU 0's 3g.20gb MIG device (GI 2, CI 0; NVIDIA's caps minors
# 3 + 9 * 2 = 21 and 22 in mig-minors) and GPU 1's 1g.5gb (GI 13, CI 0)
MIG_3G = "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"
MIG_1G = "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8"
A100_GPU3 = "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"   # MIG disabled: whole
CLAIM_GPU = "3c1f6a2e-0d6b-4c55-9a8e-5b0e9d7f1a01"
CLAIM_MIG = "3c1f6a2e-0d6b-4c55-9a8e-5b0e9d7f1a02"
BASE = None   # the scratch folder, set by enter_private_mounts


def enter_private_mounts():
    """Re-executes this test in a private mount namespace (unshare --mount
    --propagation private) unless it runs in one already (KDEV_CDI_NS=1).
    Exits 77 (skip) when the namespace cannot be made: not root or no
    unshare(2); the caller's exit status otherwise. In the namespace, BASE
    is the test's scratch folder, made and removed outside it (the
    namespace's mounts are gone by then)."""
    global BASE
    if os.environ.get("KDEV_CDI_NS") == "1":
        BASE = os.environ["KDEV_CDI_BASE"]
        return
    if os.geteuid() != 0:
        print("SKIP: the CDI consumer tests need root (mount namespace, mknod)")
        sys.exit(kt.SKIP)
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: cannot make a private mount namespace: %s" % probe.stderr.strip())
        sys.exit(kt.SKIP)
    base = tempfile.mkdtemp(prefix="kdev-cdi-")
    env = dict(os.environ, KDEV_CDI_NS="1", KDEV_CDI_BASE=base)
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--",
                            sys.executable, *sys.argv], env=env)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(r.returncode)


def sh(*cmd):
    subprocess.run(list(cmd), check=True)


def overlay(target, upper, work):
    """Mounts an overlay on |target| (lower: what is there) with |upper|."""
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    sh("mount", "-t", "overlay", "overlay", "-o",
       "lowerdir=%s,upperdir=%s,workdir=%s" % (target, upper, work), target)


def mknod(path, major, minor):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))


def put(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


class Layout:
    """A driver-root layout: |driver_root| as kdev is told (--driver-root)
    and as the host sees it; |ctr_root| (under BASE), when set, the
    container driver root where it is bind-mounted for kdev-plugin
    (--driver-root-ctr-path). The fake driver's files go to host paths
    host(p) for each driver path p."""

    def __init__(self, name, driver_root, ctr_root=None):
        self.name = name
        self.driver_root = driver_root
        self.ctr_root = ctr_root
        self.ctr_path = None   # the container root's path, once set up

    def plugin_wrap(self):
        """kdev-plugin's command prefix: in the driver-container layout it
        runs where the host driver root is an empty tmpfs (a mount namespace
        of its own), as in its pod, so that it finds NVML and the driver only
        through the container driver root."""
        if not self.ctr_path:
            return ()
        return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs tmpfs "$0" && exec "$@"', self.driver_root)

    def plugin_args(self):
        args = ["--driver-root", self.driver_root]
        if self.ctr_path:
            args += ["--driver-root-ctr-path", self.ctr_path]
        return args

    def host(self, path):
        return path if self.driver_root == "/" else self.driver_root + path

    def setup(self, base):
        """Makes the fake driver's tree visible at host(...)."""
        if self.driver_root == "/":
            for target in ("/dev", LIBDIR, "/usr/bin"):
                tag = target.strip("/").replace("/", "_")
                overlay(target, os.path.join(base, "ovl", tag, "upper"),
                        os.path.join(base, "ovl", tag, "work"))
            # the overlay hides /dev's submounts: private new ones
            sh("mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm")
            sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts", "/dev/pts")
            # /run/cdi and podman's state: a private /run; no spec of the host's
            sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
            if os.path.isdir("/etc/cdi"):
                sh("mount", "-t", "tmpfs", "tmpfs", "/etc/cdi")
        elif self.driver_root.startswith("/run/"):
            # a private /run for the host driver root, /run/cdi and podman
            sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
            if os.path.isdir("/etc/cdi"):
                sh("mount", "-t", "tmpfs", "tmpfs", "/etc/cdi")
        os.makedirs(self.host("/dev"), exist_ok=True)
        for path, major, minor in CONTROL:
            mknod(self.host(path), major, minor)
        for i in range(H100_GPUS):
            mknod(self.host("/dev/nvidia%d" % i), NV_MAJOR, i)
        lib = self.host(LIBDIR)
        os.makedirs(lib, exist_ok=True)
        if os.path.lexists(lib + "/libnvidia-ml.so.1"):
            os.unlink(lib + "/libnvidia-ml.so.1")
        os.symlink(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1"),
                   lib + "/libnvidia-ml.so.1")
        for p in LIBS + [SMI]:
            put(self.host(p), "fake %s\n" % os.path.basename(p),
                0o755 if p == SMI else 0o644)
        if self.ctr_root:
            # the pod's view: the host driver root bind-mounted (NVIDIA's
            # chart mounts it read-only at /driver-root)
            self.ctr_path = os.path.join(base, self.ctr_root)
            os.makedirs(self.ctr_path)
            sh("mount", "--bind", self.driver_root, self.ctr_path)

    def add_caps(self, proc):
        """mknod for every MIG capability minor the mock wrote into
        PROC/driver/nvidia-caps/mig-minors."""
        with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors")) as f:
            for line in f:
                name, minor = line.split()
                if name.startswith("gpu0/") or name.startswith("gpu1/"):
                    mknod(self.host("/dev/nvidia-caps/nvidia-cap" + minor), CAPS_MAJOR,
                          int(minor))


LAYOUTS = [Layout("/", "/"),
           Layout("driver-container", "/run/nvidia/driver", "driver-root")]


class Case:
    """One CDI device kdev named, with what a consumer must inject.
    nodes: [(path, major, minor)], the spec-level control nodes first, then
    the device's (the order the CDI library applies them), env, mounts:
    [(containerPath, hostPath, options)] in the spec's order, hooks:
    [(hookName, path, args, env)]."""

    def __init__(self, label, spec_dir, cdi_name, nodes, env, mounts, hooks):
        self.label, self.spec_dir, self.cdi_name = label, spec_dir, cdi_name
        self.nodes, self.env, self.mounts, self.hooks = nodes, env, mounts, hooks

    def __repr__(self):
        return "%s (%s)" % (self.label, self.cdi_name)


def hook_script(base):
    """A stand-in nvidia-cdi-hook: appends its arguments, one line per run,
    to BASE/hook.log."""
    path = os.path.join(base, "hookbin", "nvidia-cdi-hook")
    put(path, "#!/bin/sh\necho \"$@\" >>%s\n" % os.path.join(base, "hook.log"), 0o755)
    return path


def common_edits(layout, hook):
    """The spec-level edits every kdev spec carries on this fake driver."""
    nodes = [(p, ma, mi) for p, ma, mi in CONTROL]
    mounts = [(p, layout.host(p), MOUNT_OPTIONS) for p in LIBS + [SMI]]
    debug = ["NVIDIA_CTK_DEBUG=false"]
    # nvidia-container-toolkit v1.20's nvcdi hooks, in its order
    hooks = [("createContainer", hook,
              ["nvidia-cdi-hook", "create-symlinks", "--link",
               "libcuda.so.1::" + LIBDIR + "/libcuda.so"], debug),
             ("createContainer", hook,
              ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=" + VERSION],
              debug),
             ("createContainer", hook,
              ["nvidia-cdi-hook", "update-ldcache", "--folder", LIBDIR], debug),
             ("createContainer", hook, ["nvidia-cdi-hook", "disable-device-node-modification"],
              debug),
             ("createContainer", hook, ["nvidia-cdi-hook", "update-application-profile"],
              debug)]
    return (nodes, ["NVIDIA_CTK_LIBCUDA_DIR=" + LIBDIR, "NVIDIA_VISIBLE_DEVICES=void"], mounts,
            hooks)


def nvidia_env(base, topology, proc=None):
    control = os.path.join(base, "control")
    open(control, "a").close()
    env = {"KDEV_MOCK_NVML_TOPOLOGY": topology, "KDEV_MOCK_NVML_CONTROL": control}
    if proc:
        env["KDEV_MOCK_NVML_PROC"] = proc
    return env


class Kubelet:
    """`kdevctl kubelet --dir DIR --hold 0`: serves kubelet.sock until SIGTERM."""

    def __init__(self, directory, log):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([os.path.join(kt.BUILD_DIR, "kdevctl"), "kubelet",
                                      "--dir", directory, "--hold", "0"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        kt.wait_for(lambda: kt.sock_accepts(os.path.join(directory, "kubelet.sock")),
                    what="kdevctl kubelet's kubelet.sock")

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(20)
        self.log.close()
        return rc


def allocate_cdi(directory, resource, device_id):
    """`kdevctl allocate SOCK ID -o json`: the CDI device names kdev answers."""
    sock = os.path.join(directory, "kdev-%s.sock" % resource.replace("/", "_"))
    r = subprocess.run([os.path.join(kt.BUILD_DIR, "kdevctl"), "allocate", sock, device_id,
                        "-o", "json"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (resource, device_id, r.stdout, r.stderr)
    resp = json.loads(r.stdout)
    return [d["name"] for d in resp["containerResponses"][0].get("cdiDevices", [])]


GPU_SPEC = "k8s.device-plugin.nvidia.com-gpu.json"


def kubelet_log_size(kubelet):
    """Bytes in kdevctl kubelet's log so far: kubelet_has(since=) reads only
    what a later registration adds."""
    return os.path.getsize(kubelet.log.name)


def kubelet_has(kubelet, resource, since=0):
    """Whether kdevctl kubelet logged a Register call for |resource| after
    byte |since| of its log."""
    with open(kubelet.log.name) as f:
        f.seek(since)
        return any("Register" in line and resource in line for line in f.read().splitlines())


PLUGIN_RUNS = [
    # (label, topology, config, [(resource, device ID, device nodes)])
    ("gpu", kt.H100_TOPO,
     "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [cdi-cri]\n",
     [("nvidia.com/gpu", kt.H100_UUIDS[3], [("/dev/nvidia3", NV_MAJOR, 3)])]),
    ("mig-mixed", MIG_TOPO,
     "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: [cdi-cri]\n"
     "sharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/mig-1g.5gb\n"
     "        replicas: 2\n",
     [("nvidia.com/mig-3g.20gb", MIG_3G,
       [("/dev/nvidia0", NV_MAJOR, 0), ("/dev/nvidia-caps/nvidia-cap21", CAPS_MAJOR, 21),
        ("/dev/nvidia-caps/nvidia-cap22", CAPS_MAJOR, 22)]),
      ("nvidia.com/mig-1g.5gb", MIG_1G + "::1", None),
      ("nvidia.com/gpu", A100_GPU3, [("/dev/nvidia3", NV_MAJOR, 3)])]),
    ("time-slicing", kt.H100_TOPO,
     "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [cdi-cri]\n"
     "sharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n"
     "        replicas: 2\n",
     [("nvidia.com/gpu", kt.H100_UUIDS[5] + "::1", [("/dev/nvidia5", NV_MAJOR, 5)])]),
]


def run_kdev_plugin(layout, base, hook, label, topology, config, wants):
    """kdev-plugin on |topology| with |config|, registered with kdevctl
    kubelet; returns [Case] for |wants| (the specs stay in BASE/LABEL/specs
    after kdev-plugin exits: a copy taken while it serves)."""
    run = os.path.join(base, label)
    d = os.path.join(run, "device-plugins")
    os.makedirs(d)
    proc = os.path.join(run, "proc")
    cdi = os.path.join(run, "cdi-live")
    kubelet = Kubelet(d, os.path.join(run, "kubelet.log"))
    plugin = kt.Plugin(d, config, env=nvidia_env(run, topology, proc), wrap=layout.plugin_wrap(),
                       extra=("--cdi-dir", cdi, *layout.plugin_args(),
                              "--proc-root", proc, "--nvidia-cdi-hook-path", hook))
    cases = []
    try:
        # one spec for every resource, MIG devices included (NVIDIA's kind
        # k8s.device-plugin.nvidia.com/gpu)
        kt.wait_for(lambda: os.path.exists(os.path.join(cdi, GPU_SPEC)), what="CDI spec")
        for res in sorted({w[0] for w in wants}):
            kt.wait_for(lambda res=res: kubelet_has(kubelet, res), what="registration of " + res)
        if topology == MIG_TOPO:
            layout.add_caps(proc)
        nodes0, env, mounts, hooks = common_edits(layout, hook)
        for res, dev_id, dev_nodes in wants:
            names = allocate_cdi(d, res, dev_id)
            assert len(names) == 1, (res, dev_id, names)
            if dev_nodes is None:   # a replica of GPU 1's 1g.5gb MIG device (GI 13, CI 0)
                dev_nodes = [("/dev/nvidia1", NV_MAJOR, 1)] + caps_of(proc, 1, 13, 0)
            cases.append(Case("kdev-plugin %s %s %s" % (label, res, dev_id), None, names[0],
                              nodes0 + dev_nodes, env, mounts, hooks))
        spec_dir = os.path.join(run, "specs")
        shutil.copytree(cdi, spec_dir)
        for c in cases:
            c.spec_dir = spec_dir
    except Exception:
        print(plugin.logtext()[-20000:])
        raise
    finally:
        assert plugin.stop() == 0, plugin.logtext()[-20000:]
        assert kubelet.stop() == 0
    return cases


def caps_of(proc, gpu, gi, ci):
    """The GI and CI access capability nodes of a MIG device, by mig-minors."""
    minors = {}
    with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors")) as f:
        for line in f:
            k, v = line.split()
            minors[k] = int(v)
    gi_m = minors["gpu%d/gi%d/access" % (gpu, gi)]
    ci_m = minors["gpu%d/gi%d/ci%d/access" % (gpu, gi, ci)]
    return [("/dev/nvidia-caps/nvidia-cap%d" % gi_m, CAPS_MAJOR, gi_m),
            ("/dev/nvidia-caps/nvidia-cap%d" % ci_m, CAPS_MAJOR, ci_m)]


def run_dra_plugin(layout, base, hook, label, topology, uid, device, dev_nodes):
    """kdev-dra-plugin on |topology| with one claim (|uid|) allocated
    |device|, prepared as kubelet does; returns its Case (the claim's spec
    copied to BASE/LABEL/specs before unprepare)."""
    sys.path.insert(0, os.path.join(kt.SOURCE_DIR, "tests", "integration"))
    import dra_plugin as dp
    import dra_plugin_more as dpm
    run = os.path.join(base, label)
    os.makedirs(run)
    proc = os.path.join(run, "proc")
    claim = dpm.claim_obj("claim-" + label, uid, device)
    e = dp.Env(run, topology=topology, objects=[claim],
               env_extra={**nvidia_env(run, topology, proc), "NVIDIA_CDI_HOOK_PATH": hook},
               extra=("--driver-root", layout.driver_root, "--proc-root", proc))
    with kt.logged(e):
        kt.wait_for(lambda: kt.sock_accepts(e.dra_sock()) or e.proc.poll() is not None,
                    what="DRA socket")
        assert e.proc.poll() is None, e.logtext()
        if topology == MIG_TOPO:
            layout.add_caps(proc)
        cr = dpm.prepare(e, "claim-" + label, uid).claims[uid]
        assert cr.error == "", cr.error
        ids = [i for x in cr.devices for i in x.cdi_device_ids]
        assert len(ids) == 1, ids
        spec_dir = os.path.join(run, "specs")
        os.makedirs(spec_dir)
        name = "k8s.gpu.nvidia.com-claim_%s.json" % uid
        shutil.copy(os.path.join(e.cdi, name), os.path.join(spec_dir, name))
        nodes0, env, mounts, hooks = common_edits(layout, hook)
        e.stop()
    return Case("kdev-dra-plugin %s claim %s" % (label, device), spec_dir, ids[0],
                nodes0 + dev_nodes, env, mounts, hooks)


def collect(layout, base):
    """Sets up |layout|'s fake driver under |base| and returns every Case."""
    os.makedirs(base)
    layout.setup(base)
    hook = hook_script(base)
    cases = []
    for label, topology, config, wants in PLUGIN_RUNS:
        cases += run_kdev_plugin(layout, base, hook, label, topology, config, wants)
    cases.append(run_dra_plugin(layout, base, hook, "dra-gpu", kt.H100_TOPO, CLAIM_GPU,
                                "gpu-2", [("/dev/nvidia2", NV_MAJOR, 2)]))
    cases.append(run_dra_plugin(layout, base, hook, "dra-mig", MIG_TOPO, CLAIM_MIG,
                                "gpu-0-mig-3g20gb-9-4",
                                [("/dev/nvidia0", NV_MAJOR, 0),
                                 ("/dev/nvidia-caps/nvidia-cap21", CAPS_MAJOR, 21),
                                 ("/dev/nvidia-caps/nvidia-cap22", CAPS_MAJOR, 22)]))
    return cases


def timed(what, fn, *args):
    start = time.monotonic()
    v = fn(*args)
    print("%s: %.2f s" % (what, time.monotonic() - start), flush=True)
    return v


