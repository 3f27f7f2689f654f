"""Isolated replicas end to end, both halves together: kdev-plugin (on the
mock libnvidia-ml.so.1, 8 H100 of 81559 MiB, 4 replicas each) installs the
real libkdev-share.so under --share-root and answers Allocate of isolated
replicas; a driver-API program (tests/share/share_client.c, which reaches
libcuda.so.1 as the CUDA runtime does) then runs as the container sees it:
the env of the answer, KDEV_SHARE_DIR = the region directory the answer
mounts, the library copy kdev-plugin installed (LD_PRELOAD on the host; in
the container, the CDI device's /etc/ld.so.preload) and the mock
libcuda.so.1. It gets exactly the replica's share: the largest allocation
within the share succeeds and one granule more fails with
CUDA_ERROR_OUT_OF_MEMORY (2), cuMemGetInfo, cuDeviceTotalMem and NVML report
the share, 2 replicas of one GPU give twice the share, replicas of two GPUs
give one share on each, and `kdevctl share <region dir>` shows what the
container holds. With root and a working podman (Debian's 4.3, runc) the
same runs inside a real container started with the answer's CDI device
(deviceListStrategy cdi-cri), the library loaded through the preload file;
without them that part says why it skips and the host part still runs."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir  # noqa: E402

import nvidia_isolation as ni  # noqa: E402  (the node and config of its tests)
import share_memory as sm  # noqa: E402  (the sanitizer runtimes to preload first)

U = kt.H100_UUIDS
MIB = 1 << 20
GRAN = 2 * MIB                  # the mock driver's allocation granularity
QUARTER = ni.QUARTER            # one replica: 81559 MiB / 4 = 21380202496 bytes
LIB = os.path.join(kt.BUILD_DIR, "libkdev-share.so")
CLIENT = os.path.join(kt.BUILD_DIR, "tests", "kdev-share-client")
KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
MOCK_CUDA = os.path.join(kt.BUILD_DIR, "mock", "cuda")
CTR_DIR = "/var/run/kdev/share"


def kv(text):
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def answer_env(r):
    return dict(r.envs)


def host_view(n, r):
    """The env a host process needs to see what the container of answer |r|
    sees: the answer's env with KDEV_SHARE_DIR at the host path of the
    region mount, the installed library preloaded, the mock drivers."""
    mounts = {m.container_path: m.host_path for m in r.mounts}
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    env.update(answer_env(r))
    assert env["KDEV_SHARE_DIR"] == CTR_DIR, env
    env["KDEV_SHARE_DIR"] = mounts[CTR_DIR]
    lib = mounts[ni.LIB_CTR]
    assert lib == n.root + "/lib/libkdev-share.so", lib
    env["LD_PRELOAD"] = " ".join(sm.SAN_PRELOAD + [lib])
    if sm.SAN_PRELOAD:
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    env["LD_LIBRARY_PATH"] = MOCK_CUDA + ":" + kt.MOCK_NVML_DIR
    env["KDEV_MOCK_NVML_TOPOLOGY"] = kt.H100_TOPO
    return env, mounts[CTR_DIR]


def client(env, dev, *args, stdin=""):
    p = subprocess.run([CLIENT, "-d", str(dev), *[str(a) for a in args]], env=env, input=stdin,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout


def usage(region):
    p = subprocess.run([KDEVCTL, "share", region, "-o", "json"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def boundary_want(limit):
    """What `boundary alloc LIMIT 2MiB` prints for a share of |limit| bytes:
    floor(limit / 2 MiB) pieces fit, the next is refused with
    CUDA_ERROR_OUT_OF_MEMORY (2), cuMemGetInfo's total is the share."""
    fit = limit // GRAN
    rest = limit - fit * GRAN
    return {"allocated": str(fit), "refused": "2", "free": str(rest), "total": str(limit),
            "release": "0", "again": "0", "one-more-byte": "2" if rest < GRAN else "0",
            "free-after": str(limit)}


def hold(env, dev, nbytes, region, limit):
    """One allocation of |nbytes| held while kdevctl share reads the region;
    returns (CUresult, the usage JSON while held)."""
    p = subprocess.Popen([CLIENT, "-d", str(dev), "hold", str(nbytes)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline().split()
        assert line[:1] == ["held"], (line, p.stderr.read() if p.poll() is not None else "")
        u = usage(region)
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    return int(line[1]), u


def test_one_replica_on_the_host():
    """The exact boundary of one replica, through the library kdev-plugin
    installed, with the region directory of the answer."""
    with TempDir() as d:
        n = ni.Node(d, library=LIB)
        try:
            with open(LIB, "rb") as a, open(n.root + "/lib/libkdev-share.so", "rb") as b:
                assert a.read() == b.read()
            r = n.allocate([U[2] + "::1"])
            env, region = host_view(n, r)
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": U[2], "KDEV_SHARE_DIR": CTR_DIR}
            out = kv(client(env, 2, "boundary", "alloc", QUARTER, GRAN))
            assert out == boundary_want(QUARTER), out
            # one piece: the largest whole-granule allocation within the share
            # succeeds, one granule more is CUDA_ERROR_OUT_OF_MEMORY
            fit = QUARTER // GRAN * GRAN
            rc, u = hold(env, 2, fit, region, QUARTER)
            assert rc == 0, rc
            assert u["gpus"] == [{"index": 0, "uuid": U[2], "memoryLimit": QUARTER,
                                  "memoryUsed": fit, "computePercent": 25}], u
            assert [p["gpus"][0]["memoryUsed"] for p in u["processes"]] == [fit], u
            assert u["policy"] == "work-conserving" and u["limitsError"] is False, u
            rc, u = hold(env, 2, fit + GRAN, region, QUARTER)
            assert rc == 2, rc
            assert u["gpus"][0]["memoryUsed"] == 0, u
            # what the container is told: the share, before and after 1 GiB
            info = client(env, 2, "info", 1 << 30).splitlines()
            assert info == [
                "cuMemGetInfo 0 free %d total %d" % (QUARTER - (1 << 30), QUARTER),
                "cuDeviceTotalMem 0 %d" % QUARTER,
                "nvmlDeviceGetMemoryInfo 0 total %d used %d free %d"
                % (QUARTER, 1 << 30, QUARTER - (1 << 30))], info
            # another GPU of the node is not this container's: not limited
            info = client(env, 3, "info", 0).splitlines()
            assert info[1] == "cuDeviceTotalMem 0 %d" % ni.GPU_BYTES, info
            # the table of kdevctl share names the GPU and its share
            t = subprocess.run([KDEVCTL, "share", region], capture_output=True, text=True,
                               timeout=30)
            assert t.returncode == 0 and U[2] in t.stdout and str(QUARTER) in t.stdout, t
            print("ok: one replica: %d pieces of 2 MiB fit in %d bytes, the next is "
                  "CUDA_ERROR_OUT_OF_MEMORY" % (QUARTER // GRAN, QUARTER))
        finally:
            n.close()


def test_two_replicas_of_one_gpu_and_of_two_gpus():
    with TempDir() as d:
        n = ni.Node(d, library=LIB)
        try:
            r = n.allocate([U[4] + "::0", U[4] + "::3"])
            env, region = host_view(n, r)
            out = kv(client(env, 4, "boundary", "alloc", 2 * QUARTER, GRAN))
            assert out == boundary_want(2 * QUARTER), out
            fit = 2 * QUARTER // GRAN * GRAN
            assert hold(env, 4, fit, region, 2 * QUARTER)[0] == 0
            assert hold(env, 4, fit + GRAN, region, 2 * QUARTER)[0] == 2
            assert usage(region)["gpus"][0]["computePercent"] == 50
            # replicas of two GPUs: one share on each, 25 % each
            r = n.allocate([U[5] + "::0", U[6] + "::2"])
            env, region = host_view(n, r)
            for dev in (5, 6):
                out = kv(client(env, dev, "boundary", "alloc", QUARTER, GRAN))
                assert out == boundary_want(QUARTER), (dev, out)
            u = usage(region)
            assert [(g["uuid"], g["memoryLimit"], g["computePercent"]) for g in u["gpus"]] == \
                [(U[5], QUARTER, 25), (U[6], QUARTER, 25)], u
            print("ok: 2 replicas of one GPU: %d bytes; replicas of two GPUs: %d on each"
                  % (2 * QUARTER, QUARTER))
        finally:
            n.close()


def test_policy_reaches_the_library():
    """The configured policy is the region's (the library read the limits
    file kdev-plugin wrote and did not fail closed)."""
    with TempDir() as d:
        n = ni.Node(d, library=LIB, extra_iso="    memory: 1Gi\n    policy: strict\n")
        try:
            r = n.allocate([U[1] + "::2"])
            env, region = host_view(n, r)
            out = kv(client(env, 1, "boundary", "alloc", 1 << 30, GRAN))
            assert out == boundary_want(1 << 30), out
            u = usage(region)
            assert u["policy"] == "strict" and u["limitsError"] is False, u
        finally:
            n.close()


MIG_TOPO = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-a100-40gb.yaml")
MIG_3G = "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"   # GPU 0's 3g.20gb: 19968 MiB
MIG_3G_BYTES = 19968 * MIB
MIG_CONFIG = """version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/mig-3g.20gb
      replicas: 2
isolation:
  resources:
  - name: nvidia.com/mig-3g.20gb.shared
"""


def test_replica_of_a_mig_device():
    """A replica of a MIG device: the limits file names the MIG device's
    UUID, which the library matches with cuDeviceGetUuid_v2 on the MIG
    device (the mock libcuda.so.1, like CUDA, has a GPU in MIG mode's MIG
    devices as its CUDA devices: here MIG-59bc... is device 0)."""
    from kdevtest import FakeKubelet, Plugin, wait_for
    res = "nvidia.com/mig-3g.20gb.shared"
    with TempDir() as d:
        dp = os.path.join(d, "dp")
        os.mkdir(dp)
        root = os.path.join(d, "share")
        proc = os.path.join(d, "proc")
        control = os.path.join(d, "control")
        open(control, "w").close()
        k = FakeKubelet(dp)
        k.start()
        p = Plugin(dp, MIG_CONFIG,
                   extra=("--cdi-dir", os.path.join(d, "cdi"), "--share-root", root,
                          "--share-library", LIB, "--proc-root", proc),
                   env={"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": MIG_TOPO,
                        "KDEV_MOCK_NVML_CONTROL": control, "KDEV_MOCK_NVML_PROC": proc})
        try:
            wait_for(lambda: k.updates.get(res), what="ListAndWatch of " + res)
            r = kt.allocate(dp, "kdev-nvidia.com_mig-3g.20gb.shared.sock", [MIG_3G + "::1"])
            mounts = {m.container_path: m.host_path for m in r.mounts}
            half = MIG_3G_BYTES // 2
            with open(mounts[CTR_DIR] + "/limits") as f:
                assert [x for x in f.read().splitlines() if not x.startswith("#")] == \
                    ["%s %d 50" % (MIG_3G, half)]
            env = {k_: v for k_, v in os.environ.items() if k_ != "LD_PRELOAD"}
            env.update(dict(r.envs), KDEV_SHARE_DIR=mounts[CTR_DIR],
                       LD_PRELOAD=" ".join(sm.SAN_PRELOAD + [mounts[ni.LIB_CTR]]),
                       LD_LIBRARY_PATH=MOCK_CUDA + ":" + kt.MOCK_NVML_DIR,
                       KDEV_MOCK_NVML_TOPOLOGY=MIG_TOPO)
            if sm.SAN_PRELOAD:
                env["ASAN_OPTIONS"] = "detect_leaks=0"
            out = kv(client(env, 0, "boundary", "alloc", half, GRAN))
            assert out == boundary_want(half), out
            u = usage(mounts[CTR_DIR])
            assert u["gpus"][0]["uuid"] == MIG_3G and u["limitsError"] is False, u
            # the next MIG device (GPU 0's 2g.10gb) is not the container's
            info = client(env, 1, "info", 0).splitlines()
            assert info[1] == "cuDeviceTotalMem 0 %d" % (9856 * MIB), info
            print("ok: a replica of MIG device %s: %d bytes" % (MIG_3G, half))
        finally:
            rc = p.stop()
            k.stop()
            assert rc == 0, p.logtext()[-3000:]


# --- in a real container ---------------------------------------------------------

def ldd(path):
    """The libraries |path| loads (absolute paths), by ldd."""
    p = subprocess.run(["ldd", path], capture_output=True, text=True, check=True)
    out = []
    for line in p.stdout.splitlines():
        parts = line.split()
        for w in parts:
            if w.startswith("/"):
                out.append(w)
                break
    return out


def build_image(root):
    """The rootfs |root| gets the client, the mock drivers, the topology and
    what they load (from the host)."""
    os.makedirs(root + "/kdev", exist_ok=True)
    files = [CLIENT, os.path.join(MOCK_CUDA, "libcuda.so.1"),
             os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1")]
    for f in files:
        shutil.copy(f, root + "/kdev/" + os.path.basename(f))
    shutil.copy(kt.H100_TOPO, root + "/kdev/topology.yaml")
    for f in files + [LIB]:
        for lib in ldd(f):
            real = os.path.realpath(lib)
            os.makedirs(os.path.dirname(root + lib), exist_ok=True)
            if not os.path.exists(root + lib):
                shutil.copy(real, root + lib)


def container_part():
    import cdi_consumer as cc
    import share_podman as sp
    cc.enter_private_mounts()
    pm, why = sp.podman_in_namespace(cc.BASE)
    if why:
        print("SKIP: in a container:", why)
        return kt.SKIP
    if kt.sanitized():
        print("SKIP: in a container: the mock drivers of a sanitizer build need its runtimes")
        return kt.SKIP
    build_image(pm.rootfs)
    k, p, dp, root = sp.start_node(os.path.join(cc.BASE, "node"), "", LIB)
    failures = 0
    try:
        r = kt.allocate(dp, ni.SOCK, [U[2] + "::1", U[2] + "::2"])
        name = r.cdi_devices[-1].name
        region = os.path.join(root, "containers", name.split("=", 1)[1])
        limit = 2 * QUARTER
        fit = limit // GRAN * GRAN
        env = ["-e", "LD_LIBRARY_PATH=/kdev", "-e", "KDEV_MOCK_NVML_TOPOLOGY=/kdev/topology.yaml"]
        script = ("echo \"preload $(cat /etc/ld.so.preload)\"; echo \"ldpreload ${LD_PRELOAD:--}\"; "
                  "/kdev/kdev-share-client -d 2 boundary alloc %d %d; "
                  "/kdev/kdev-share-client -d 2 info 0; "
                  "echo | /kdev/kdev-share-client -d 2 hold %d; "
                  "echo | /kdev/kdev-share-client -d 2 hold %d" % (limit, GRAN, fit, fit + GRAN))
        out = pm.run_rootfs("--device", name, *env, script=script, timeout=120)
        got = out.stdout.splitlines()
        want = ["preload " + ni.LIB_CTR, "ldpreload -"]
        want += ["%s %s" % kv_ for kv_ in boundary_want(limit).items()]
        want += ["cuMemGetInfo 0 free %d total %d" % (limit, limit),
                 "cuDeviceTotalMem 0 %d" % limit,
                 "nvmlDeviceGetMemoryInfo 0 total %d used 0 free %d" % (limit, limit),
                 "held 0", "held 2"]
        ok = out.returncode == 0 and got == want
        failures += not ok
        print("%s: in a container (CDI device %s, the library through /etc/ld.so.preload): "
              "%d bytes of 2 replicas%s" % ("ok" if ok else "FAIL", name, limit,
                                            "" if ok else "\n  got  %s\n  want %s\n  %s"
                                            % (got, want, out.stderr)), flush=True)
        u = usage(region)
        ok = u["gpus"][0]["memoryLimit"] == limit and u["gpus"][0]["memoryUsed"] == 0 and \
            u["processes"] == [] and u["limitsError"] is False
        failures += not ok
        print("%s: kdevctl share of the container's region after it ended: %s"
              % ("ok" if ok else "FAIL", u["gpus"]), flush=True)
    finally:
        rc = p.stop()
        k.stop()
        if rc != 0:
            print("FAIL: kdev-plugin exit %d\n%s" % (rc, p.logtext()[-3000:]))
            failures += 1
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["container"]:
        return container_part()
    for f in (LIB, CLIENT, KDEVCTL):
        if not os.path.exists(f):
            print("FAIL: %s is not built" % f)
            return 1
    for t in (test_one_replica_on_the_host, test_two_replicas_of_one_gpu_and_of_two_gpus,
              test_policy_reaches_the_library, test_replica_of_a_mig_device):
        t()
    env = dict(os.environ)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "container"], env=env)
    if r.returncode == kt.SKIP:
        print("ok: on the host (the container part skipped, above)")
        return 0
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
