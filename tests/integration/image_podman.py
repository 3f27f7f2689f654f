"""The container image, built and run for real: deploy/Dockerfile built with
podman from a Debian 12 base made by debootstrap (no registry), and the
kdev-plugin DaemonSet's container run from it with podman exactly as
deploy/kubernetes/10-device-plugin.yaml writes it (command, args, env, the
securityContext, the memory limit, every volumeMount with its hostPath or
ConfigMap; all read from the manifest here, none restated), against the
mock NVML as the node's driver:

1. base: tests/image/debian-base.sh makes (once, cached in .test-deps/image
   by its recipe) a debootstrap minbase bookworm root file system, which
   `podman import` makes debian:12-slim and debian:12;
2. build: `podman build -f deploy/Dockerfile` from the checkout (both stages:
   the build stage RUNs scripts/deps.sh and scripts/build.sh, with apt
   reaching Debian's archive; the context filtered by
   deploy/Dockerfile.dockerignore), tagged with the DaemonSet's image name;
   KDEV_IMAGE_BUILD=runtime builds the runtime stage only, verbatim from the
   Dockerfile, on this build tree's binaries and runtime-deps.sh's list (the
   same /out the build stage makes): for quick local runs; CI builds both
   stages;
3. the node, in a private mount and network namespace: a fake driver at
   each layout's driver root (the mock libnvidia-ml.so.1 as
   libnvidia-ml.so.<version> with its .so.1 link, fake libcuda and
   nvidia-smi, `mknod` device nodes under <root>/dev), the hostPaths as
   kubelet makes them
   (Directory must exist, DirectoryOrCreate is created), `kdevctl kubelet` on
   the device-plugin directory's hostPath, the stand-in API server (TLS,
   token) holding the Node, and the ServiceAccount token and CA mounted
   where kubelet mounts them;
4. run 1, the DaemonSet as shipped (the host-driver layout: driver root
   `/`, the host's / mounted at /driver-root): kdev-plugin in the container
   opens NVML as /driver-root/<lib dir>/libnvidia-ml.so.1 (nothing injects
   it into the pod: no container toolkit here), reads its
   Node, selects the config `default` of the mounted ConfigMap, registers
   nvidia.com/gpu with kdevctl kubelet on the host (metrics from the image's
   libmicrohttpd: 8 healthy GPUs), answers Allocate with envvar only
   (NVIDIA_VISIBLE_DEVICES=<UUID>, no CDI device, no CDI spec: NVIDIA's
   default), and stops with exit status 0 on SIGTERM (podman stop);
5. CDI runs, with DEVICE_LIST_STRATEGY=envvar,cdi-cri added (the knob
   NVIDIA's chart sets for deviceListStrategy), once per driver-root layout
   on the one image built: the host-driver layout (`/`) and the GPU
   operator's driver container (NVIDIA_DRIVER_ROOT=/run/nvidia/driver and
   the driver-root hostPath /run/nvidia/driver, as NVIDIA's chart sets them
   with the operator; the fake driver only there). Each registers with
   kdevctl kubelet on the host, Allocate names a CDI device, the spec kdev
   wrote from inside the container lies in the host's /var/run/cdi (the
   cdi-root hostPath) and lists libcuda (hostPath under the host driver
   root) and nvcdi's five hooks with the configured (host) hook path, and
   podman runs a second container with `--device <that name>`: inside it
   the device nodes (major:minor), the env and the driver files (read-only,
   content by sha256) are exactly the fake driver's, and every hook the
   spec lists ran; after podman stop the spec is gone.

The DaemonSet mounts no /dev (as NVIDIA's chart): kdev-plugin finds the
device nodes under /driver-root/dev.

Beyond the manifest, only what a real node adds: kubelet's pod plumbing
(the ServiceAccount mount, KUBERNETES_SERVICE_HOST/PORT, NODE_NAME's
downward-API value; the pod network is the test's network namespace:
`--network host` there, podman has no netavark here) and the mock GPU's
own inputs (its topology and control file, KDEV_MOCK_NVML_*).

podman's settings for this sandbox: tests/pylib/podman.py. Needs root,
unshare, podman, runc, debootstrap, busybox-static (scripts/deps.sh
--test); skips (77) without them, and in a sanitizer build tree (the image
ships release binaries: the test runs once, in the release tree).
Timings of each phase are printed."""
import copy
import ctypes
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
import cdi_consumer as cc  # noqa: E402
from podman import Podman, probe  # noqa: E402

try:
    import yaml  # noqa: E402
except ImportError:  # pragma: no cover
    print("SKIP: python3-yaml is not importable (scripts/deps.sh --test installs it)")
    sys.exit(kt.SKIP)

SRC = kt.SOURCE_DIR
MANIFEST = os.path.join(SRC, "deploy", "kubernetes", "10-device-plugin.yaml")
DOCKERFILE = os.path.join(SRC, "deploy", "Dockerfile")
SERVER = os.path.join(SRC, "tests", "kubeapi", "server.py")
NODE = "gpu-node-1"
TOKEN = "kdev-image-test-token"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MOCK_DIR = "/kdev-mock"   # the mock GPU's inputs inside the container
DEFAULT_HOOK = "/usr/bin/nvidia-ctk"   # kdev-plugin's (and NVIDIA's) default hook path
OPERATOR_ROOT = "/run/nvidia/driver"   # the GPU operator's driver container
GPU = kt.H100_UUIDS[3]
# Trees this test may write to on the node: private to its mount namespace.
PRIVATE = ("/dev", cc.LIBDIR, "/usr/bin", "/var/lib", "/etc", "/run")
CLONE_NEWNET = 0x40000000
TIMES = []


def timed(what, fn, *args):
    start = time.monotonic()
    v = fn(*args)
    TIMES.append((what, time.monotonic() - start))
    print("%s: %.1f s" % (what, TIMES[-1][1]), flush=True)
    return v


def manifest():
    """(pod spec, the kdev-plugin container, {ConfigMap name: data})."""
    with open(MANIFEST) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "kdev-plugin"]
    assert len(ds) == 1, [d["metadata"]["name"] for d in docs]
    pod = ds[0]["spec"]["template"]["spec"]
    cs = [c for c in pod["containers"] if c["name"] == "kdev-plugin"]
    assert len(cs) == 1, pod["containers"]
    cms = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    return pod, cs[0], cms


def env_of(c, name, default=None):
    vals = [e.get("value") for e in c.get("env", []) if e["name"] == name]
    assert len(vals) <= 1, (name, vals)
    return vals[0] if vals else default


def sh(*cmd, **kw):
    r = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    assert r.returncode == 0, (cmd, r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return r.stdout


# --- 1 and 2: the base and the image ----------------------------------------------------

def import_base(pm):
    tarball = sh(os.path.join(SRC, "tests", "image", "debian-base.sh"), timeout=1200).strip()
    r = pm("import", tarball, "docker.io/library/debian:12-slim", timeout=600)
    assert r.returncode == 0, r.stderr
    r = pm("tag", "docker.io/library/debian:12-slim", "docker.io/library/debian:12")
    assert r.returncode == 0, r.stderr
    return tarball


def build_args(image):
    return ["build", "--pull=never", "--network", "host", "-t", image]


def build_dockerfile(pm, image):
    r = pm(*build_args(image), "--ignorefile", os.path.join(SRC, "deploy", "Dockerfile.dockerignore"),
           "-f", DOCKERFILE, SRC, timeout=1800)
    assert r.returncode == 0, (r.stdout[-8000:], r.stderr[-8000:])


def build_runtime_stage(pm, image, base):
    """The runtime stage of deploy/Dockerfile, its instructions verbatim, on
    the /out the build stage would make: this build tree's binaries
    installed by scripts/build.sh --install-only and runtime-deps.sh's list."""
    ctx = os.path.join(base, "context")
    out = os.path.join(ctx, "out")
    sh(os.path.join(SRC, "scripts", "build.sh"), "--install-only", "--build-dir", kt.BUILD_DIR,
       "--prefix", "/usr", "--destdir", out)
    bins = [os.path.join(out, "usr", "bin", b) for b in ("kdev-plugin", "kdev-dra-plugin",
                                                        "kdevctl")]
    pkgs = sh(os.path.join(SRC, "scripts", "runtime-deps.sh"), *bins, timeout=300)
    with open(os.path.join(out, "runtime-packages.txt"), "w") as f:
        f.write(pkgs)
    with open(DOCKERFILE) as f:
        text = f.read()
    stages = text.split("\nFROM ")
    assert len(stages) == 3 and stages[2].startswith("debian:12-slim\n"), "two stages expected"
    with open(os.path.join(ctx, "Dockerfile"), "w") as f:
        f.write("FROM scratch AS build\nCOPY out/ /out/\nFROM " + stages[2])
    r = pm(*build_args(image), "-f", os.path.join(ctx, "Dockerfile"), ctx, timeout=1800)
    assert r.returncode == 0, (r.stdout[-8000:], r.stderr[-8000:])


def check_image(pm, image):
    """The image runs its binaries and holds no mock NVML."""
    r = pm("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image, "-c",
           "kdev-plugin --version; kdevctl --version >/dev/null && echo kdevctl ok; "
           "ls /usr/lib/x86_64-linux-gnu | grep -c nvidia; "
           "cat /usr/share/kdev/runtime-packages.txt | grep -c .")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[:3] == ["kdev-plugin", "0.1.0", "kdevctl"], r.stdout
    assert lines[4] == "0", "NVIDIA libraries in the image: %s" % r.stdout
    return int(lines[5])


# --- 3: the node ----------------------------------------------------------------------

def private_tree(path, base):
    """An overlay on |path| (writes land in |base|), its submounts bound
    again on top (an overlay hides them)."""
    subs = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp != path and mp.startswith(path.rstrip("/") + "/"):
                subs.append(mp)
    tag = path.strip("/").replace("/", "_")
    stash = os.path.join(base, "stash", tag)
    os.makedirs(stash)
    sh("mount", "--rbind", path, stash)
    cc.overlay(path, os.path.join(base, "ovl", tag, "upper"), os.path.join(base, "ovl", tag, "work"))
    # outermost first; nested ones come along with --rbind
    for mp in sorted(subs, key=len):
        if any(mp.startswith(o.rstrip("/") + "/") for o in subs if o != mp):
            continue
        sh("mount", "--rbind", stash + mp[len(path):], mp)


def make_node(base, hook):
    for p in PRIVATE:
        if p == "/run":
            sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
        else:
            private_tree(p, base)
    if os.path.isdir("/etc/cdi"):
        sh("mount", "-t", "tmpfs", "tmpfs", "/etc/cdi")
    cc.put(hook, "#!/bin/sh\necho \"$@\" >>%s\n" % os.path.join(base, "hook.log"), 0o755)


def make_driver(driver_root):
    """The fake driver under |driver_root| (host paths); returns host(),
    the host path of a driver path."""
    host = (lambda p: p) if driver_root == "/" else (lambda p: driver_root.rstrip("/") + p)
    for path, major, minor in cc.CONTROL:
        cc.mknod(host(path), major, minor)
    for i in range(cc.H100_GPUS):
        cc.mknod(host("/dev/nvidia%d" % i), cc.NV_MAJOR, i)
    nvml = host(cc.LIBDIR + "/libnvidia-ml.so." + cc.VERSION)
    for p in cc.LIBS + [cc.SMI]:
        cc.put(host(p), "fake %s\n" % os.path.basename(p), 0o755 if p == cc.SMI else 0o644)
    shutil.copy(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1"), nvml)
    link = host(cc.LIBDIR + "/libnvidia-ml.so.1")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.basename(nvml), link)
    return host


def with_driver_root(pod, c, root):
    """|pod| and |c| with NVIDIA_DRIVER_ROOT and the driver-root volume's
    hostPath set to |root| (what NVIDIA's chart's nvidiaDriverRoot sets)."""
    pod, c = copy.deepcopy(pod), copy.deepcopy(c)
    env = [e for e in c["env"] if e["name"] == "NVIDIA_DRIVER_ROOT"]
    assert len(env) == 1, c["env"]
    env[0]["value"] = root
    vols = [v for v in pod["volumes"] if v["name"] == "driver-root"]
    assert len(vols) == 1, pod["volumes"]
    vols[0]["hostPath"]["path"] = root
    return pod, c


def enter_private_network():
    """This process (and what it starts) in a network namespace of its own
    with loopback up: the pod network of the run; 0.0.0.0:9410 binds there."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    sh("ip", "link", "set", "lo", "up")


class Api:
    """The stand-in API server over TLS with a token, holding the Node."""

    def __init__(self, base):
        self.dir = os.path.join(base, "api")
        os.makedirs(self.dir)
        seed = os.path.join(self.dir, "seed.json")
        with open(seed, "w") as f:
            json.dump([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}], f)
        self.proc = subprocess.Popen([sys.executable, SERVER, "--token", TOKEN, "--seed", seed,
                                      "--tls", self.dir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.info = json.loads(self.proc.stdout.readline())
        self.sa = os.path.join(base, "serviceaccount")
        os.makedirs(self.sa)
        shutil.copy(self.info["ca"], os.path.join(self.sa, "ca.crt"))
        for name, text in (("token", TOKEN), ("namespace", "kdev-system")):
            with open(os.path.join(self.sa, name), "w") as f:
                f.write(text)

    def requests(self):
        c = http.client.HTTPConnection("127.0.0.1", self.info["admin_port"], timeout=30)
        c.request("GET", "/_admin/requests")
        body = json.loads(c.getresponse().read())
        c.close()
        return body["items"]

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(20)


def memory_limit(q):
    """A Kubernetes memory quantity (Mi, Gi, Ki or bytes) in bytes."""
    for suffix, mult in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)):
        if q.endswith(suffix):
            return int(q[:-len(suffix)]) * mult
    return int(q)


def pod_run_args(pod, c, cms, base, api, extra_env):
    """`podman run` arguments for the container |c| of |pod| as kubelet would
    run it: every field the manifest sets is turned into its podman option,
    and a field this function does not know fails the test."""
    known = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
             "resources", "securityContext", "volumeMounts"}
    assert set(c) <= known, "container fields this test does not run: %s" % (set(c) - known)
    args = ["run", "-d", "--name", c["name"], "--network", "host"]
    sc = c.get("securityContext", {})
    assert set(sc) <= {"capabilities", "allowPrivilegeEscalation", "privileged"}, sc
    for cap in sc.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap]
    for cap in sc.get("capabilities", {}).get("add", []):
        args += ["--cap-add", cap]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.get("privileged"):
        args.append("--privileged")
    limits = c.get("resources", {}).get("limits", {})
    if "memory" in limits:
        args += ["--memory", str(memory_limit(limits["memory"]))]
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, e
            env[e["name"]] = NODE
    # kubelet's own: the API server's service and the ServiceAccount token
    env.update(KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(api.info["port"]))
    mounts = [(api.sa, SA_DIR, "ro")]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        opt = "ro" if m.get("readOnly") else "rw"
        if "hostPath" in v:
            path, kind = v["hostPath"]["path"], v["hostPath"].get("type", "")
            if kind == "Directory":
                assert os.path.isdir(path), "hostPath %s (Directory) does not exist" % path
            elif kind == "DirectoryOrCreate":
                if not os.path.isdir(path):
                    real = os.path.realpath(path)
                    assert any(real.startswith(p + "/") for p in PRIVATE), \
                        "hostPath %s would be created outside the test's private trees" % path
                    os.makedirs(path)
            else:
                raise AssertionError("hostPath type %r not handled here" % kind)
            mounts.append((path, m["mountPath"], opt))
        elif "configMap" in v:
            d = os.path.join(base, "configmap-" + m["name"])
            if not os.path.isdir(d):
                os.makedirs(d)
                for key, text in cms[v["configMap"]["name"]].items():
                    with open(os.path.join(d, key), "w") as f:
                        f.write(text)
            mounts.append((d, m["mountPath"], "ro"))
        else:
            raise AssertionError("volume kind not handled here: %s" % v)
    # the mock GPU's inputs
    control = os.path.join(base, "mock-control")
    open(control, "a").close()
    mounts += [(kt.H100_TOPO, MOCK_DIR + "/topology.yaml", "ro"), (control, MOCK_DIR + "/control", "rw")]
    env.update(KDEV_MOCK_NVML_TOPOLOGY=MOCK_DIR + "/topology.yaml",
               KDEV_MOCK_NVML_CONTROL=MOCK_DIR + "/control")
    env.update(extra_env)
    for k in sorted(env):
        args += ["-e", "%s=%s" % (k, env[k])]
    return args, mounts


def start_pod(pm, pod, c, cms, base, api, image, extra_env):
    args, mounts = pod_run_args(pod, c, cms, base, api, extra_env)
    for host, ctr, opt in mounts:
        args += ["-v", "%s:%s:%s" % (host, ctr, opt)]
    cmd = c["command"]
    args += ["--entrypoint", json.dumps(cmd[:1]), image, *cmd[1:], *c.get("args", [])]
    r = pm(*args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.strip()


def stop_pod(pm, name):
    """podman stop (SIGTERM); returns (exit status, log)."""
    r = pm("stop", "-t", "20", name, timeout=60)
    assert r.returncode == 0, r.stderr
    rc = pm("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
    log = pm("logs", name).stdout + pm("logs", name).stderr
    pm("rm", "-f", name)
    return int(rc), log


def metrics():
    c = http.client.HTTPConnection("127.0.0.1", 9410, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return text


def allocate(directory, resource, device_id):
    sock = os.path.join(directory, "kdev-%s.sock" % resource.replace("/", "_"))
    out = sh(os.path.join(kt.BUILD_DIR, "kdevctl"), "allocate", sock, device_id, "-o", "json",
             timeout=30)
    return json.loads(out)["containerResponses"][0]


def wait_registered(pm, name, kubelet, resource, since):
    """Waits until container |name| registered |resource| with kubelet: a
    registration logged after byte |since| of kubelet's log (the runs before
    registered the same resource)."""
    def up():
        if pm("inspect", "-f", "{{.State.Running}}", name).stdout.strip() != "true":
            raise AssertionError("the kdev-plugin container stopped:\n" +
                                 pm("logs", name).stderr[-8000:])
        return cc.kubelet_has(kubelet, resource, since)
    kt.wait_for(up, timeout=60, interval=0.2, what="registration of " + resource)


def consumer_report(pm, cdi_name, nodes, mounts):
    """Runs the busybox container with --device |cdi_name|; returns its
    report lines (node, env, file, mount)."""
    lines = ["stat -c 'node %%n %%F %%t:%%T' %s" % p for p, _, _ in nodes]
    lines.append("env | grep '^NVIDIA_' | sed 's/^/env /'")
    for p in mounts:
        lines.append("echo \"file %s $(sha256sum %s | cut -c1-64)\"" % (p, p))
        lines.append("grep ' %s ' /proc/self/mountinfo | sed 's/^/mount /'" % p)
    r = pm.run_rootfs("--device", cdi_name,
                      script="; ".join(l + " 2>/dev/null" for l in lines).replace(
                          "cut -c1-64", "busybox cut -c1-64"))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout.splitlines()


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def startup_flags(log):
    """The flags of each "Running with config" line of a JSON log."""
    out = []
    for line in log.splitlines():
        if '"Running with config"' in line:
            out.append(json.loads(line)["config"]["flags"])
    return out


def cdi_run(pm, pod, c, cms, base, api, image, kubelet, host_dp, host_cdi, hook, host,
            label, failures):
    """One CDI run of the DaemonSet |pod|/|c| (a driver-root layout, |host|
    its host paths): registration, Allocate naming the CDI device, the spec
    (libcuda, the hooks), podman --device with it, the spec gone at exit."""
    start = time.monotonic()
    since = cc.kubelet_log_size(kubelet)
    name = start_pod(pm, pod, c, cms, base, api, image, {"DEVICE_LIST_STRATEGY": "envvar,cdi-cri"})
    wait_registered(pm, name, kubelet, "nvidia.com/gpu", since)
    TIMES.append(("%s: podman run to registration" % label, time.monotonic() - start))
    resp = allocate(host_dp, "nvidia.com/gpu", GPU)
    names = [d["name"] for d in resp.get("cdiDevices", [])]
    want_name = "k8s.device-plugin.nvidia.com/gpu=" + GPU
    if names != [want_name] or resp.get("envs") != {"NVIDIA_VISIBLE_DEVICES": GPU}:
        failures.append("%s Allocate %s: %s" % (label, GPU, resp))
    with open(os.path.join(host_cdi, cc.GPU_SPEC)) as f:
        spec = json.load(f)
    edits = spec.get("containerEdits", {})
    # libcuda: mounted from the host driver root
    lib = cc.LIBDIR + "/libcuda.so." + cc.VERSION
    got = [(m["hostPath"], m["containerPath"]) for m in edits.get("mounts", [])
           if m["containerPath"] == lib]
    if got != [(host(lib), lib)]:
        failures.append("%s: the spec's libcuda mount %s, want %s" % (label, got,
                                                                     [(host(lib), lib)]))
    # nvcdi's hooks, with the configured host path (nvidia-ctk: "hook" first)
    _, _, _, want_hooks = cc.common_edits(cc.LAYOUTS[0], hook)
    want = [(hook, ["nvidia-ctk", "hook"] + a[1:]) for _, _, a, _ in want_hooks]
    got = [(h["path"], h["args"]) for h in edits.get("hooks", [])]
    if got != want:
        failures.append("%s: the spec's hooks\n  got  %s\n  want %s" % (label, got, want))
    hooks = [h["args"][1:] for h in edits.get("hooks", [])]
    # the control nodes found under /driver-root/dev, host paths under the root
    got = [(n["path"], n.get("hostPath", n["path"])) for n in edits.get("deviceNodes", [])]
    want = [(p, host(p)) for p, _, _ in cc.CONTROL]
    if got != want:
        failures.append("%s: the spec's control nodes\n  got  %s\n  want %s" % (label, got, want))
    open(os.path.join(base, "hook.log"), "w").close()
    gpu_node = "/dev/nvidia3"
    nodes = cc.CONTROL + [(gpu_node, cc.NV_MAJOR, 3)]
    files = cc.LIBS + [cc.SMI]
    start = time.monotonic()
    out = consumer_report(pm, want_name, nodes, files)
    TIMES.append(("%s: podman run --device (consumer)" % label, time.monotonic() - start))
    got = [l for l in out if l.startswith("node ")]
    want = ["node %s character special file %x:%x" % (p, ma, mi) for p, ma, mi in nodes]
    if got != want:
        failures.append("%s: device nodes\n  got  %s\n  want %s" % (label, got, want))
    got = sorted(l[4:] for l in out if l.startswith("env "))
    if got != ["NVIDIA_CTK_LIBCUDA_DIR=" + cc.LIBDIR, "NVIDIA_VISIBLE_DEVICES=void"]:
        failures.append("%s: env %s" % (label, got))
    got = [l for l in out if l.startswith("file ")]
    want = ["file %s %s" % (p, sha256(host(p))) for p in files]
    if got != want:
        failures.append("%s: files\n  got  %s\n  want %s" % (label, got, want))
    for p in files:
        ms = [l.split() for l in out if l.startswith("mount ")]
        mm = [x for x in ms if x[5] == p]
        if len(mm) != 1 or "ro" not in mm[0][6].split(","):
            failures.append("%s: mount of %s: %s" % (label, p, mm))
    with open(os.path.join(base, "hook.log")) as f:
        ran = [l.split() for l in f.read().splitlines()]
    if ran != hooks or len(ran) != 5:
        failures.append("%s: hooks ran %s, the spec lists %s" % (label, ran, hooks))
    rc, log = stop_pod(pm, name)
    if rc != 0:
        failures.append("%s exit status %d:\n%s" % (label, rc, log[-8000:]))
    if os.path.exists(os.path.join(host_cdi, cc.GPU_SPEC)):
        failures.append("%s: the CDI spec is left after exit" % label)
    return log


def main():
    pod, c, cms = manifest()
    image = c["image"]
    driver_root = env_of(c, "NVIDIA_DRIVER_ROOT", "/")
    ctr_root = env_of(c, "DRIVER_ROOT_CTR_PATH", "/driver-root")
    hook = env_of(c, "NVIDIA_CDI_HOOK_PATH", DEFAULT_HOOK)
    dp_dir = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--device-plugin-dir=")][0]
    cdi_dir = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--cdi-dir=")][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    by_mount = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    # the host's directories behind the container's paths
    host_dp = by_mount[dp_dir]["hostPath"]["path"]
    host_cdi = by_mount[cdi_dir]["hostPath"]["path"]
    assert by_mount[ctr_root]["hostPath"]["path"] == driver_root, (ctr_root, driver_root)
    assert driver_root == "/", "the shipped DaemonSet's layout is the host driver's"
    assert "/dev" not in by_mount, "the DaemonSet mounts /dev (NVIDIA's chart does not)"

    with open(os.path.join(kt.BUILD_DIR, "CMakeCache.txt")) as f:
        if "KDEV_SANITIZE:BOOL=ON" in f.read():
            print("SKIP: sanitizer build tree (the image ships release binaries; "
                  "this test runs in the release tree)")
            return kt.SKIP
    for tool in ("debootstrap", "unshare", "ip"):
        if shutil.which(tool) is None:
            print("SKIP: %s is not installed (scripts/deps.sh --test)" % tool)
            return kt.SKIP
    cc.enter_private_mounts()
    base = cc.BASE
    os.makedirs(os.path.join(base, "podman"))
    # the node's private trees first: podman's state, and the build, too,
    # see them
    make_node(base, hook)
    host = make_driver(driver_root)
    pm = Podman(os.path.join(base, "podman"))
    why = probe(pm)
    if why:
        print("SKIP:", why)
        return kt.SKIP
    failures = []
    timed("base (debootstrap or cache) + podman import", import_base, pm)
    route = os.environ.get("KDEV_IMAGE_BUILD", "dockerfile")
    if route == "runtime":
        timed("podman build (runtime stage)", build_runtime_stage, pm, image, base)
    else:
        assert route == "dockerfile", route
        timed("podman build -f deploy/Dockerfile", build_dockerfile, pm, image)
    npkgs = check_image(pm, image)
    print("image %s: %d runtime packages" % (image, npkgs))

    enter_private_network()
    os.makedirs(host_dp, exist_ok=True)   # kubelet's directory
    api = Api(base)
    kubelet = cc.Kubelet(host_dp, os.path.join(base, "kubelet.log"))
    try:
        # run 1: the DaemonSet as shipped
        start = time.monotonic()
        since = cc.kubelet_log_size(kubelet)
        name = start_pod(pm, pod, c, cms, base, api, image, {})
        wait_registered(pm, name, kubelet, "nvidia.com/gpu", since)
        TIMES.append(("run 1: podman run to registration", time.monotonic() - start))
        m = metrics()
        want = 'kdev_devices{resource="nvidia.com/gpu",health="Healthy"} 8'
        if want not in m.splitlines():
            failures.append("metrics: no line %r in\n%s" % (want, m))
        resp = allocate(host_dp, "nvidia.com/gpu", GPU)
        if resp.get("envs") != {"NVIDIA_VISIBLE_DEVICES": GPU} or resp.get("cdiDevices"):
            failures.append("run 1 Allocate %s: %s" % (GPU, resp))
        if os.listdir(host_cdi):
            failures.append("run 1 (envvar): CDI specs written: %s" % os.listdir(host_cdi))
        node_reads = [r["path"] for r in api.requests() if r["path"].startswith("/api/v1/nodes")]
        if not node_reads or any(r != "/api/v1/nodes/" + NODE and r != "/api/v1/nodes"
                                 for r in node_reads):
            failures.append("run 1: the Node reads: %s" % node_reads)
        rc, log = stop_pod(pm, name)
        if rc != 0:
            failures.append("run 1 exit status %d:\n%s" % (rc, log[-8000:]))
        if '"selected config"' not in log or '"name":"default"' not in log:
            failures.append("run 1: no selection of the config default in the log:\n" +
                            log[-8000:])
        # (the image holds no libnvidia-ml, check_image, and nothing is
        # injected: the 8 GPUs came from NVML under /driver-root)

        # run 2: CDI (the chart's deviceListStrategy), the host-driver layout
        cdi_run(pm, pod, c, cms, base, api, image, kubelet, host_dp, host_cdi, hook, host,
                "run 2 (driver root /)", failures)

        # run 3: the GPU operator's driver container, the same image
        op_host = make_driver(OPERATOR_ROOT)
        op_pod, op_c = with_driver_root(pod, c, OPERATOR_ROOT)
        log = cdi_run(pm, op_pod, op_c, cms, base, api, image, kubelet, host_dp, host_cdi,
                      hook, op_host, "run 3 (driver root %s)" % OPERATOR_ROOT, failures)
        roots = [(f["nvidiaDriverRoot"], f["plugin"]["containerDriverRoot"])
                 for f in startup_flags(log)]
        if roots != [(OPERATOR_ROOT, ctr_root)]:
            failures.append("run 3: the start-up config's roots %s:\n%s" % (roots, log[-8000:]))
    finally:
        kubelet.stop()
        api.stop()
    for what, secs in TIMES:
        print("time %-48s %6.1f s" % (what, secs))
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    print("ok: the image built from deploy/Dockerfile runs the kdev-plugin DaemonSet in the "
          "host-driver and driver-container layouts: registered, Allocate answered, its CDI "
          "device used by podman")
    return 0

if __name__ == "__main__":
    sys.exit(main())
