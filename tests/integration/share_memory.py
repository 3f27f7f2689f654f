"""libkdev-share.so on the mock libcuda.so.1 (docs/share.md): the memory
share at its exact boundary for every allocating entry point, what
cuMemGetInfo / cuDeviceTotalMem / NVML report, the cuGetProcAddress and
dlsym doors and the exact pass-through of other entry points, 16 processes
allocating at once, a process killed with SIGKILL mid-allocation, fork and
exec, a malformed limits file (fail closed), no limits file (untouched), a
second OS user, and kdevctl share's view of it all.

The client (tests/share/share_client.c) reaches the driver as the CUDA
runtime does: dlopen("libcuda.so.1") and cuGetProcAddress_v2. Neither the
client nor the library carries a sanitizer (a preloaded library comes
before the ASan runtime); kdevctl does in a sanitizer build."""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402

LIB = os.path.join(kt.BUILD_DIR, "libkdev-share.so")
CLIENT = os.path.join(kt.BUILD_DIR, "tests", "kdev-share-client")
KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")
MOCK_CUDA = os.path.join(kt.BUILD_DIR, "mock", "cuda")
TOPO = kt.H100_TOPO
GIB = 1 << 30
MIB = 1 << 20
GRAN = 2 * MIB
H100_TOTAL = 81559 * MIB  # memory_mib of the topology


def sanitizer_runtimes():
    """In a sanitizer build the mock NVML carries ASan and UBSan, and the
    test programs (and the library) carry none: their runtimes are preloaded
    first, as ASan wants, ahead of the library."""
    if not kt.sanitized():
        return []
    out = []
    for lib in ("libasan.so", "libubsan.so"):
        p = subprocess.run(["cc", "-print-file-name=" + lib], capture_output=True, text=True)
        if p.returncode == 0 and os.path.isabs(p.stdout.strip()):
            out.append(p.stdout.strip())
    return out


SAN_PRELOAD = sanitizer_runtimes()


def uuids():
    with open(TOPO, encoding="utf-8") as f:
        return re.findall(r"uuid: (GPU-[0-9a-f-]{36})", f.read())


GPU0, GPU1 = uuids()[:2]


class Region:
    def __init__(self, limits=None, mode=0o755):
        self.dir = tempfile.mkdtemp(prefix="kdev-share-")
        os.chmod(self.dir, mode)
        if limits is not None:
            with open(os.path.join(self.dir, "limits"), "w", encoding="utf-8") as f:
                f.write(limits)

    def env(self, preload=True):
        e = dict(os.environ)
        e.update(KDEV_SHARE_DIR=self.dir, KDEV_MOCK_NVML_TOPOLOGY=TOPO,
                 LD_LIBRARY_PATH=MOCK_CUDA + ":" + kt.MOCK_NVML_DIR)
        e.pop("LD_PRELOAD", None)
        pre = SAN_PRELOAD + ([LIB] if preload else [])
        if pre:
            e["LD_PRELOAD"] = " ".join(pre)
        if SAN_PRELOAD:
            # no leak check for programs without instrumentation (the mock
            # libcuda.so.1 keeps its tables until exit, by design)
            e["ASAN_OPTIONS"] = "detect_leaks=0"
        return e

    def run(self, *args, preload=True, check=True):
        p = subprocess.run([CLIENT] + [str(a) for a in args], env=self.env(preload),
                           capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError("client %s: %d\n%s%s" % (args, p.returncode, p.stdout, p.stderr))
        return p

    def usage(self):
        p = subprocess.run([KDEVCTL, "share", self.dir, "-o", "json"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def kv(text):
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def test_boundary_every_entry_point():
    r = Region("# one GPU at 1 GiB, half its compute\n%s %d 50\n" % (GPU0, GIB))
    try:
        for kind in ("alloc", "pitch", "managed", "async", "pool", "vmm", "array", "array3d",
                     "mipmap"):
            out = kv(r.run("boundary", kind, GIB, GRAN).stdout)
            # 512 pieces of 2 MiB fill 1 GiB exactly; the 513th is refused with
            # CUDA_ERROR_OUT_OF_MEMORY (2); a freed piece can be taken again
            want = {"allocated": "512", "refused": "2", "free": "0", "total": str(GIB),
                    "release": "0", "again": "0", "free-after": str(GIB)}
            # one byte more: a whole granule over the share (OOM); an array
            # of 0 elements is the driver's INVALID_VALUE (1)
            want["one-more-byte"] = "1" if kind in ("array", "array3d", "mipmap") else "2"
            assert out == want, (kind, out)
        assert r.usage()["gpus"][0]["memoryUsed"] == 0
    finally:
        r.close()


def test_granularity_rounding():
    # 3 MiB counts as 4 MiB (the driver's 2 MiB granularity): 256 of them fill 1 GiB
    r = Region("%s %d 100\n" % (GPU0, GIB))
    try:
        out = kv(r.run("boundary", "alloc", GIB, 3 * MIB).stdout)
        assert out["allocated"] == "256" and out["refused"] == "2", out
        # with a 64 KiB granularity from the driver, 3 MiB is 3 MiB: 341 fit
        e = r.env()
        e["KDEV_MOCK_CUDA_GRANULARITY"] = str(64 * 1024)
        p = subprocess.run([CLIENT, "boundary", "alloc", str(GIB), str(3 * MIB)], env=e,
                           capture_output=True, text=True, timeout=60)
        out = kv(p.stdout)
        assert out["allocated"] == "341" and out["refused"] == "2", out
    finally:
        r.close()


def test_info_reports_the_share():
    r = Region("%s %d 50\n" % (GPU0, 4 * GIB))
    try:
        out = r.run("info", 64 * MIB).stdout.splitlines()
        assert out == [
            "cuMemGetInfo 0 free %d total %d" % (4 * GIB - 64 * MIB, 4 * GIB),
            "cuDeviceTotalMem 0 %d" % (4 * GIB),
            "nvmlDeviceGetMemoryInfo 0 total %d used %d free %d" % (4 * GIB, 64 * MIB,
                                                                    4 * GIB - 64 * MIB),
        ], out
        # GPU 1 is not in the limits file: the driver's own figures
        out = r.run("-d", 1, "info", 64 * MIB).stdout.splitlines()
        assert out == [
            "cuMemGetInfo 0 free %d total %d" % (H100_TOTAL - 64 * MIB, H100_TOTAL),
            "cuDeviceTotalMem 0 %d" % H100_TOTAL,
            "nvmlDeviceGetMemoryInfo 0 total %d used 0 free %d" % (H100_TOTAL, H100_TOTAL),
        ], out
    finally:
        r.close()


def test_no_limits_file_is_untouched():
    r = Region(None)
    try:
        out = kv(r.run("boundary", "alloc", 8 * GIB, GIB).stdout)
        assert out["allocated"] == "9" and out["total"] == str(H100_TOTAL), out
        assert not os.path.exists(os.path.join(r.dir, "region"))
    finally:
        r.close()


def test_malformed_limits_fail_closed():
    r = Region("%s %d 0\n" % (GPU0, GIB))
    try:
        p = r.run("boundary", "alloc", GIB, GRAN)
        assert kv(p.stdout)["allocated"] == "0" and kv(p.stdout)["refused"] == "2", p.stdout
        assert p.stderr.splitlines()[0] == (
            "kdev-share: %s/limits:1: compute share 0 is not in 1..100 (every allocation "
            "fails with CUDA_ERROR_OUT_OF_MEMORY)" % r.dir), p.stderr
        assert r.usage()["limitsError"] is True
    finally:
        r.close()


def test_procaddr_and_dlsym_doors():
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        out = r.run("procaddr").stdout.splitlines()
        assert out == [
            "cuMemAlloc 13000 0 -> 0 status 0 libkdev-share.so cuMemAlloc_v2",
            "cuMemAlloc 3000 0 -> 0 status 2 - -",
            "cuMemAllocAsync 13000 1 -> 0 status 0 libkdev-share.so cuMemAllocAsync",
            "cuMemAllocAsync 13000 2 -> 0 status 0 libkdev-share.so cuMemAllocAsync_ptsz",
            "cuMemAllocAsync 11000 0 -> 0 status 2 - -",
            "cuDeviceGetAttribute 13000 0 -> 0 status 0 libcuda.so.1 cuDeviceGetAttribute",
            "cuDeviceGetUuid 11000 0 -> 0 status 0 libcuda.so.1 cuDeviceGetUuid",
            "cuDeviceGetUuid 13000 0 -> 0 status 0 libcuda.so.1 cuDeviceGetUuid_v2",
            "cuGetProcAddress 13000 0 -> 0 status 0 libkdev-share.so cuGetProcAddress_v2",
            "cuGetProcAddress 11030 0 -> 0 status 0 libkdev-share.so cuGetProcAddress",
            "cuBogus 13000 0 -> 0 status 1 - -",
            "cuMemAlloc 13010 0 -> 1 status -1 - -",
            "dlsym cuMemAlloc_v2 -> libkdev-share.so",
            "dlsym cuMemCreate -> libkdev-share.so",
            "dlsym cuDeviceGetAttribute -> libcuda.so.1",
            "dlsym-default cuMemAlloc_v2 -> libkdev-share.so",
            "passthrough-identical 1",
        ], out
        # without the library: every answer is the mock's own
        out = r.run("procaddr", preload=False).stdout.splitlines()
        assert out[0] == "cuMemAlloc 13000 0 -> 0 status 0 libcuda.so.1 cuMemAlloc_v2", out
        assert out[12] == "dlsym cuMemAlloc_v2 -> libcuda.so.1", out
    finally:
        r.close()


def test_sixteen_processes_never_exceed_the_share():
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        procs = [subprocess.Popen([CLIENT, "race", str(GRAN)], env=r.env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(16)]
        time.sleep(0.3)
        for p in procs:  # start them together
            p.stdin.write("g")
            p.stdin.flush()
        got = [int(p.stdout.readline().split()[1]) for p in procs]
        u = r.usage()
        assert sum(got) <= 512, got
        assert u["gpus"][0]["memoryUsed"] == sum(got) * GRAN, (u, got)
        assert len(u["processes"]) == 16
        assert sorted(p["gpus"][0]["memoryUsed"] for p in u["processes"]) == \
            sorted(g * GRAN for g in got)
        for p in procs:
            p.stdin.close()
            assert p.wait(30) == 0
        # all gone, each released its slot at exit
        u = r.usage()
        assert u["gpus"][0]["memoryUsed"] == 0 and u["processes"] == [], u
        print("16 processes took %d of 512 granules" % sum(got))
    finally:
        r.close()


def test_sigkill_gives_memory_back():
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        p = subprocess.Popen([CLIENT, "hold", str(768 * MIB)], env=r.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "held 0\n"
        assert r.usage()["gpus"][0]["memoryUsed"] == 768 * MIB
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        # the dead process's slot is still there until someone needs the memory
        assert r.usage()["gpus"][0]["memoryUsed"] == 768 * MIB
        out = kv(r.run("boundary", "alloc", GIB, GRAN).stdout)
        assert out["allocated"] == "512" and out["refused"] == "2", out
        assert r.usage()["processes"] == []
    finally:
        r.close()


def test_sigkill_at_any_instruction():
    # 4 processes allocate and free 2 MiB pieces as fast as they can; each is
    # killed at a random moment (40 kills); afterwards the whole share is
    # there again
    import random
    rnd = random.Random(15)
    r = Region("%s %d 50\n" % (GPU0, 64 * MIB))
    try:
        for _ in range(10):
            procs = [subprocess.Popen([CLIENT, "churn", str(GRAN)], env=r.env(),
                                      stdout=subprocess.PIPE, text=True) for _ in range(4)]
            for p in procs:
                assert p.stdout.readline() == "churning\n"
            for p in procs:
                time.sleep(rnd.uniform(0, 0.01))
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait(10)
                p.stdout.close()
        out = kv(r.run("boundary", "alloc", 64 * MIB, GRAN).stdout)
        assert out["allocated"] == "32" and out["refused"] == "2", out
        assert r.usage()["processes"] == []
    finally:
        r.close()


def test_fork_and_exec():
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        out = r.run("fork", 256 * MIB).stdout.splitlines()
        # parent 256 MiB, the child its own 256 MiB in a slot of its own;
        # after exec the child's previous image holds nothing: the exec'ed
        # image sees the parent's 256 MiB and its own 0
        assert out == [
            "parent 0",
            "child 0",
            "cuMemGetInfo 0 free %d total %d" % (GIB - 256 * MIB, GIB),
            "cuDeviceTotalMem 0 %d" % GIB,
            "nvmlDeviceGetMemoryInfo 0 total %d used %d free %d" % (GIB, 256 * MIB,
                                                                    GIB - 256 * MIB),
            "child-exit 0",
        ], out
    finally:
        r.close()


def test_second_os_user():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP test_second_os_user: needs root and setpriv")
        return
    r = Region("%s %d 50\n" % (GPU0, GIB), mode=0o1777)
    try:
        os.chmod(os.path.join(r.dir, "limits"), 0o644)
        holder = subprocess.Popen([CLIENT, "hold", str(512 * MIB)], env=r.env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "held 0\n"
        st = os.stat(os.path.join(r.dir, "region"))
        assert stat.S_IMODE(st.st_mode) == 0o666, oct(st.st_mode)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            CLIENT, "boundary", "alloc", str(GIB), str(GRAN)],
                           env=r.env(), capture_output=True, text=True, timeout=60)
        out = kv(p.stdout)
        # nobody shares root's accounting: 256 granules left
        assert out.get("allocated") == "256" and out.get("refused") == "2", (p.stdout, p.stderr)
        holder.stdin.close()
        assert holder.wait(10) == 0
    finally:
        r.close()


def test_cuda_runtime_against_the_mock():
    """The real CUDA runtime (a program built with nvcc) on the mock, with
    the library preloaded: the runtime asks for ~440 entry points through
    cuGetProcAddress (the library's hook, reached through its dlsym), asks
    the driver for a private export table, calls cuInit, asks for a second
    export table, and stops there: the mock has no private tables, so every
    runtime call fails with cudaErrorNotSupported. Beyond that point (the
    allocations through the runtime) only a real GPU goes
    (scripts/gpu-share-check.sh)."""
    probe = os.path.join(kt.BUILD_DIR, "tests", "kdev-share-runtime-probe")
    if not os.path.exists(probe):
        print("SKIP test_cuda_runtime_against_the_mock: no nvcc at configure time "
              "(-DKDEV_CUDA_ROOT=...), %s not built" % probe)
        return
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        e = r.env()
        e["KDEV_MOCK_CUDA_TRACE"] = "1"
        p = subprocess.run([probe], env=e, capture_output=True, text=True, timeout=60)
        assert p.stdout.splitlines() == [
            "cudaGetDeviceCount cudaErrorNotSupported -1",
            "cudaMalloc cudaErrorNotSupported",
            "cudaMemGetInfo cudaErrorNotSupported 0 0",
        ], p.stdout
        trace = [l for l in p.stderr.splitlines() if not l.startswith("mock libcuda: cuGetProcAddress")]
        assert [l.split()[2] for l in trace] == ["cuGetExportTable", "cuInit", "cuGetExportTable"], trace
        asked = [l for l in p.stderr.splitlines() if l.startswith("mock libcuda: cuGetProcAddress")]
        assert len(asked) > 300, len(asked)
        assert "mock libcuda: cuGetProcAddress cuMemAlloc 3020 0 -> found" in asked
        # the library initialised through the runtime's resolution: the
        # region exists and the process released its slot at exit
        assert r.usage()["processes"] == []
        # without the library the runtime stops at the same place
        p2 = subprocess.run([probe], env=r.env(preload=False), capture_output=True, text=True,
                            timeout=60)
        assert p2.stdout == p.stdout
    finally:
        r.close()


def test_library_links_libc_only():
    # a separate object loaded into containers: libc only, and exactly the
    # intercepted entry points and dlsym exported
    d = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", d) == ["libc.so.6"], d
    syms = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True,
                          check=True).stdout.split()[2::3]
    assert all(re.fullmatch(r"(cu|nvml)[A-Za-z0-9_]+|dlsym", s) for s in syms), syms
    assert len(syms) == 32, (len(syms), syms)  # 31 hooks and dlsym


def test_region_created_beforehand_in_a_0755_directory():
    # the node side creates the region when it writes the limits (as
    # kdev_share_region_map does): a non-root process cannot create files in
    # the 0755 directory, but maps the 0666 region and shares the accounting
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP test_region_created_beforehand_in_a_0755_directory: needs root and setpriv")
        return
    r = Region("%s %d 50\n" % (GPU0, GIB), mode=0o755)
    try:
        os.chmod(os.path.join(r.dir, "limits"), 0o644)
        r.run("info", 0)  # root's first process creates the region, as the node side would
        holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                   CLIENT, "hold", str(256 * MIB)], env=r.env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "held 0\n"
        out = kv(r.run("boundary", "alloc", GIB, GRAN).stdout)
        assert out["allocated"] == "384", out
        assert [p["uid"] for p in r.usage()["processes"]] == [65534]
        holder.stdin.close()
        assert holder.wait(10) == 0
        assert holder.stderr.read() == ""
    finally:
        r.close()


def test_kdevctl_share_errors():
    d = tempfile.mkdtemp(prefix="kdev-share-")
    try:
        p = subprocess.run([KDEVCTL, "share", d], capture_output=True, text=True, timeout=30)
        assert p.returncode == 1
        assert p.stderr == "kdevctl share: %s/region: cannot open: No such file or directory\n" % d
        with open(os.path.join(d, "region"), "wb") as f:
            f.write(b"x" * 100)
        p = subprocess.run([KDEVCTL, "share", d], capture_output=True, text=True, timeout=30)
        assert p.returncode == 1
        assert p.stderr.startswith("kdevctl share: %s/region: is not a share region (100 bytes"
                                   % d), p.stderr
        p = subprocess.run([KDEVCTL, "share"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_kdevctl_share_table():
    r = Region("%s %d 50\npolicy strict\n" % (GPU0, GIB))
    try:
        p = subprocess.Popen([CLIENT, "hold", str(6 * MIB)], env=r.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "held 0\n"
        t = subprocess.run([KDEVCTL, "share", r.dir + "/region"], capture_output=True,
                           text=True, timeout=30)
        lines = t.stdout.splitlines()
        assert lines[0] == "Region: %s" % r.dir and lines[1] == "Policy: strict", lines
        assert re.fullmatch(r"  0 +%s +%d +%d +50%%" % (GPU0, GIB, 6 * MIB), lines[5]), lines
        assert re.fullmatch(r"  %d +%d +0 +%d +0 +0" % (p.pid, os.getuid(), 6 * MIB),
                            lines[9]), lines
        p.stdin.close()
        p.wait(10)
    finally:
        r.close()


def test_slot_claimed_at_the_first_allocation():
    """A process that only queries stores nothing in the region (no slot:
    its first call makes no write fault on the shared file); its first
    allocation claims the slot, with its pid and start time."""
    r = Region("%s %d 50\n" % (GPU0, GIB))
    try:
        q = subprocess.Popen([CLIENT, "query-hold"], env=r.env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert q.stdout.readline() == "queried 0 %d %d\n" % (GIB, GIB)
        assert r.usage()["processes"] == []
        h = subprocess.Popen([CLIENT, "hold", str(6 * MIB)], env=r.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert h.stdout.readline() == "held 0\n"
        assert r.usage()["processes"] == [
            {"pid": h.pid, "uid": os.getuid(),
             "gpus": [{"index": 0, "memoryUsed": 6 * MIB, "launches": 0, "pacedNs": 0}]}
        ], r.usage()
        for p in (q, h):
            p.stdin.close()
            p.wait(10)
        assert r.usage()["processes"] == []
    finally:
        r.close()


if __name__ == "__main__":
    for f in (LIB, CLIENT, KDEVCTL, os.path.join(MOCK_CUDA, "libcuda.so.1")):
        if not os.path.exists(f):
            print("SKIP: %s is not built" % f)
            sys.exit(kt.SKIP)
    kt.run_tests([test_boundary_every_entry_point, test_granularity_rounding,
                  test_info_reports_the_share, test_no_limits_file_is_untouched,
                  test_malformed_limits_fail_closed, test_procaddr_and_dlsym_doors,
                  test_sixteen_processes_never_exceed_the_share, test_sigkill_gives_memory_back,
                  test_sigkill_at_any_instruction,
                  test_fork_and_exec, test_second_os_user, test_cuda_runtime_against_the_mock,
                  test_region_created_beforehand_in_a_0755_directory,
                  test_library_links_libc_only, test_kdevctl_share_errors,
                  test_kdevctl_share_table, test_slot_claimed_at_the_first_allocation])
