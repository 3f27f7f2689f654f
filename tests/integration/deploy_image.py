"""The container image recipe (deploy/Dockerfile) cannot drift from CI's build
and ships only what the binaries need (the recipe is checked here, and its
steps are run outside a container; tests/integration/image_podman.py builds
it with podman and runs it):

- the build stage RUNs scripts/deps.sh and scripts/build.sh, the scripts CI
  runs (.ci/run -> scripts/deps.sh --test -> scripts/test.sh ->
  scripts/build.sh), and no compiler or build tool of its own;
- the runtime stage is debian:12-slim plus the packages scripts/runtime-deps.sh
  prints, and copies exactly the three binaries;
- scripts/build.sh --install-only installs exactly kdev-plugin,
  kdev-dra-plugin and kdevctl, stripped, and they run;
- scripts/runtime-deps.sh on them prints packages that hold every library ldd
  reports, and no package more; it refuses a library no package holds (the
  mock libnvidia-ml.so.1)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
import nvidia_isolation as ni  # noqa: E402  (its isolation config)

SRC = kt.SOURCE_DIR
BINARIES = ["kdev-plugin", "kdev-dra-plugin", "kdevctl"]


def read(rel):
    with open(os.path.join(SRC, rel)) as f:
        return f.read()


def dockerfile_instructions():
    """[(stage index, INSTRUCTION, arguments)] with continuations joined and
    comments dropped."""
    out, stage, cur = [], -1, ""
    for line in read("deploy/Dockerfile").splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        ins, _, rest = cur.strip().partition(" ")
        if ins.upper() == "FROM":
            stage += 1
        out.append((stage, ins.upper(), " ".join(rest.split())))
        cur = ""
    return out


def shell(args):
    return [c.strip() for c in re.split(r"&&|;", args)]


def test_stages():
    froms = [(s, a) for s, i, a in dockerfile_instructions() if i == "FROM"]
    assert froms == [(0, "debian:12 AS build"), (1, "debian:12-slim")], froms


def test_build_stage_runs_ci_scripts():
    runs = [a for s, i, a in dockerfile_instructions() if i == "RUN" and s == 0]
    cmds = [c for a in runs for c in shell(a)]
    assert "scripts/deps.sh" in cmds, cmds
    build = [c for c in cmds if c.startswith("scripts/build.sh")]
    assert build == ["scripts/build.sh --build-dir build-image --prefix /usr --destdir /out"], cmds
    for c in cmds:
        word = c.split()[0]
        assert word in ("scripts/deps.sh", "scripts/build.sh", "scripts/runtime-deps.sh",
                        "rm", "cat"), "build stage runs %r: only the CI scripts may build" % c
        assert not re.search(r"\b(cmake|ninja|gcc|cc|clang|make|apt-get|npm)\b", c), c


def test_ci_runs_the_same_scripts():
    ci = read(".ci/run")
    assert re.search(r"^scripts/deps\.sh --test$", ci, re.M), ci
    assert re.search(r"^scripts/test\.sh$", ci, re.M), ci
    test = read("scripts/test.sh")
    assert re.search(r'^scripts/build\.sh --build-dir build --jobs "\$jobs"$', test, re.M), test
    # the release tree is configured and built by build.sh only
    assert not re.search(r"-B build\b(?!-)", test), "test.sh configures build itself"
    assert not re.search(r"ninja -C build\b(?!-)", test), "test.sh builds build itself"
    b = read("scripts/build.sh")
    assert re.search(r"^  scripts/deps\.sh$", b, re.M), b
    assert 'cmake -S . -B "$build_dir" -G Ninja' in b and 'ninja -C "$build_dir"' in b, b


def test_runtime_stage_contents():
    ins = [(i, a) for s, i, a in dockerfile_instructions() if s == 1]
    copies = [a for i, a in ins if i == "COPY"]
    assert copies == [
        "--from=build /out/runtime-packages.txt /usr/share/kdev/runtime-packages.txt",
        "--from=build /out/usr/bin/kdev-plugin /out/usr/bin/kdev-dra-plugin "
        "/out/usr/bin/kdevctl /usr/bin/",
        "--from=build /out/usr/lib/kdev/libkdev-share.so /usr/lib/kdev/libkdev-share.so"], copies
    runs = [c for i, a in ins if i == "RUN" for c in shell(a)]
    assert "xargs -a /usr/share/kdev/runtime-packages.txt apt-get install -y -q "\
           "--no-install-recommends" in runs, runs
    # runtime-packages.txt is what runtime-deps.sh prints for the installed binaries
    b0 = [a for s, i, a in dockerfile_instructions() if s == 0 and i == "RUN"]
    assert any(a.startswith("scripts/runtime-deps.sh /out/usr/bin/kdev-plugin "
                            "/out/usr/bin/kdev-dra-plugin /out/usr/bin/kdevctl > "
                            "/out/runtime-packages.txt") for a in b0), b0
    text = read("deploy/Dockerfile")
    for bad in ("mock", "libnvidia-ml.so"):
        assert not any(bad in a for i, a in ins if i in ("COPY", "ADD", "RUN")), bad
    assert "ADD" not in [i for i, _ in ins], text


def installed(tmp):
    r = subprocess.run([os.path.join(SRC, "scripts", "build.sh"), "--install-only",
                        "--build-dir", kt.BUILD_DIR, "--prefix", "/usr", "--destdir", tmp],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [os.path.join(tmp, "usr", "bin", b) for b in BINARIES]


def test_install_ships_three_binaries_and_the_share_library():
    tmp = tempfile.mkdtemp(prefix="kdev-it-")
    try:
        bins = installed(tmp)
        files = sorted(os.path.relpath(os.path.join(d, f), tmp)
                       for d, _, fs in os.walk(tmp) for f in fs)
        assert files == ["usr/bin/kdev-dra-plugin", "usr/bin/kdev-plugin", "usr/bin/kdevctl",
                         "usr/lib/kdev/libkdev-share.so"], files
        # the share library: libc only, its hooks exported, where kdev-plugin's
        # default --share-library looks (<bin>/../lib/kdev)
        lib = os.path.join(tmp, "usr", "lib", "kdev", "libkdev-share.so")
        dyn = subprocess.run(["readelf", "-d", "-W", lib], capture_output=True, text=True,
                             timeout=60).stdout
        assert re.findall(r"\(NEEDED\).*\[(.*)\]", dyn) == ["libc.so.6"], dyn
        syms = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True,
                              text=True, timeout=60).stdout
        assert " cuMemAlloc_v2\n" in syms and " cuGetProcAddress_v2\n" in syms, syms
        assert oct(os.stat(lib).st_mode & 0o777) == "0o644"
        for b in bins:
            sections = subprocess.run(["readelf", "-S", "-W", b], capture_output=True,
                                      text=True, timeout=60).stdout
            assert ".debug_info" not in sections and ".symtab" not in sections, b
            r = subprocess.run([b, "--version"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and r.stdout.strip(), (b, r.returncode, r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_installed_plugin_finds_the_share_library():
    """The installed kdev-plugin's default --share-library is the installed
    library (<bin>/../lib/kdev/libkdev-share.so), which it copies to the
    share root at start."""
    tmp = tempfile.mkdtemp(prefix="kdev-it-")
    try:
        installed(tmp)
        lib = os.path.join(tmp, "usr", "lib", "kdev", "libkdev-share.so")
        for d in ("dp", "cdi"):
            os.mkdir(os.path.join(tmp, d))
        with open(os.path.join(tmp, "config.yaml"), "w") as f:
            f.write(ni.CONFIG % ("envvar", ""))
        open(os.path.join(tmp, "control"), "w").close()
        env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                   KDEV_MOCK_NVML_TOPOLOGY=kt.H100_TOPO,
                   KDEV_MOCK_NVML_CONTROL=os.path.join(tmp, "control"))
        copy = os.path.join(tmp, "share", "lib", "libkdev-share.so")
        with open(os.path.join(tmp, "log"), "w") as log:
            p = subprocess.Popen([os.path.join(tmp, "usr", "bin", "kdev-plugin"), "--config",
                                  os.path.join(tmp, "config.yaml"), "--device-plugin-dir",
                                  os.path.join(tmp, "dp"), "--cdi-dir", os.path.join(tmp, "cdi"),
                                  "--share-root", os.path.join(tmp, "share")],
                                 env=env, stdout=log, stderr=log)
            try:
                kt.wait_for(lambda: "installed the share library" in open(log.name).read(),
                            what="the share library installed")
            finally:
                p.terminate()
                rc = p.wait(timeout=30)
        text = open(log.name).read()
        assert rc == 0, text[-2000:]
        assert "path=%s/usr/bin/../lib/kdev/libkdev-share.so" % tmp in text, text[-2000:]
        with open(lib, "rb") as a, open(copy, "rb") as b:
            assert a.read() == b.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ldd_libs(binaries):
    libs = set()
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    for b in binaries:
        out = subprocess.run(["ldd", b], capture_output=True, text=True, timeout=60,
                             env=env).stdout
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("linux-vdso"):
                continue
            path = line.split(" => ", 1)[1] if " => " in line else line
            path = path.split(" (", 1)[0]
            assert path and "not found" not in line, line
            libs.add(os.path.realpath(path))
    return libs


def dlopened():
    """The DLOPENED=(...) list of scripts/runtime-deps.sh."""
    text = open(os.path.join(SRC, "scripts", "runtime-deps.sh")).read()
    m = re.search(r"^DLOPENED=\(([^)]*)\)", text, re.M)
    assert m, "scripts/runtime-deps.sh has no DLOPENED=(...) line"
    return m.group(1).split()


def test_dlopened_libraries_listed():
    # every shared-library name in a source file that calls dlopen, except the host
    # driver's NVML, must be in the image's package list
    # (src/share/preload is libkdev-share.so, which runs in the workloads'
    # containers and opens their driver's libcuda.so.1 and NVML: nothing the
    # image installs)
    names = set()
    for root, _, files in os.walk(os.path.join(SRC, "src")):
        if os.path.relpath(root, SRC).startswith(os.path.join("src", "share", "preload")):
            continue
        for f in files:
            if f.endswith((".c", ".h")):
                text = open(os.path.join(root, f), errors="replace").read()
                if "dlopen(" not in text:  # library names listed, not loaded
                    continue
                names.update(re.findall(r'"(lib[A-Za-z0-9_+-]+\.so\.[0-9]+)"', text))
    names.discard("libnvidia-ml.so.1")
    assert names == {"libcurl.so.4", "libmicrohttpd.so.12"}, names
    assert set(dlopened()) == names, (dlopened(), names)


def package_files(pkg):
    out = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True,
                         timeout=60).stdout
    return {os.path.realpath(p) for p in out.splitlines() if ".so" in p}


def test_runtime_packages_match_ldd():
    tmp = tempfile.mkdtemp(prefix="kdev-it-")
    try:
        bins = installed(tmp)
        r = subprocess.run([os.path.join(SRC, "scripts", "runtime-deps.sh")] + bins,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        pkgs = r.stdout.split()
        assert pkgs == sorted(set(pkgs)), pkgs
        extra_objs = [kt.ldconfig_path(n) for n in dlopened()]
        libs = ldd_libs(bins + extra_objs) | set(extra_objs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # the libraries kdev links directly (CMakeLists.txt) come from these
    for p in ("libc6", "libuv1", "libnghttp2-14", "libprotobuf-c1", "libyaml-0-2",
              "libjansson4", "libcurl4"):
        assert p in pkgs, (p, pkgs)
    assert not [p for p in pkgs if p.endswith("-dev") or "nvidia" in p], pkgs
    owned = {p: package_files(p) & libs for p in pkgs}
    covered = set().union(*owned.values())
    assert covered == libs, "libraries no listed package holds: %s" % sorted(libs - covered)
    extra = [p for p, ls in owned.items() if not ls]
    assert not extra, "packages that hold none of the libraries: %s" % extra


def test_runtime_deps_refuses_unpackaged_library():
    mock = os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1")
    assert os.path.exists(mock), mock
    tmp = tempfile.mkdtemp(prefix="kdev-it-")
    try:
        exe = os.path.join(tmp, "uses-mock")
        r = subprocess.run(["gcc", "-x", "c", "-", "-o", exe, "-x", "none", "-Wl,--no-as-needed", mock,
                            "-Wl,-rpath," + kt.MOCK_NVML_DIR],
                           input="int main(void) { return 0; }\n", capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([os.path.join(SRC, "scripts", "runtime-deps.sh"), exe],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert r.stdout == "", r.stdout
        want = "runtime-deps: %s belongs to no Debian package" % os.path.realpath(mock)
        assert want in r.stderr or \
            "runtime-deps: %s belongs to no Debian package" % mock in r.stderr, r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    for tool in ("readelf", "ldd", "dpkg-query", "gcc"):
        if not shutil.which(tool):
            print("SKIP: %s not available" % tool)
            sys.exit(kt.SKIP)
    kt.run_tests([test_stages, test_build_stage_runs_ci_scripts, test_ci_runs_the_same_scripts,
                  test_runtime_stage_contents, test_install_ships_three_binaries_and_the_share_library,
                  test_installed_plugin_finds_the_share_library,
                  test_runtime_packages_match_ldd, test_runtime_deps_refuses_unpackaged_library,
                  test_dlopened_libraries_listed])
