"""The repository is self-contained: a clone holds everything its build and
tests read.

- No tracked file outside .ci/ names the reference folder that sits beside
  some checkouts (`..` + `/shared`, also spelled as separate path parts); a
  user's clone has no such folder. (.ci/run runs the same check with git grep
  before the build.)
- No tracked file outside .ci/ cites a document that the repository does not
  hold: a `reference/<name>.md`, a design note (DESIGN plus .md) or a path
  starting at a folder named shared, unless that path is a tracked file or
  folder (from the root or from the citing file's folder); nor a bare
  section of an unnamed reference (the word reference, then a section sign).
  Comments cite the upstream source instead (repository and path, KEP, doc).
- No path in tests/, scripts/, bench/ or a CMake file climbs out of the
  source tree: nothing is built from the source root followed by `..`
  (CMAKE_SOURCE_DIR, KDEV_SOURCE_DIR, SOURCE_DIR, SRC, $src), and a path
  built from a file's own directory (__file__, HERE, $0, BASH_SOURCE, $here,
  CMAKE_CURRENT_SOURCE_DIR) climbs at most as many `..` as that directory is
  deep in the tree.
- tests/CMakeLists.txt hands the tests only the source and build trees
  (KDEV_*_DIR values start at CMAKE_SOURCE_DIR or CMAKE_BINARY_DIR).
- The wire vectors the tests read (tests/data/vectors/*/manifest.json and
  every file each manifest names) are tracked, so a clone has them.

Each check first runs on a few hand-written lines it must flag and lines it
must pass, so a check that has stopped matching fails here too. The whole
proof is a fresh clone passing its tests; these checks keep the known ways of
reaching outside from coming back.

Skips (exit 77) when the source directory is not a git checkout.
Env: KDEV_SOURCE_DIR (default: two levels up from this file).
"""
import json
import os
import re
import subprocess
import sys

SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SKIP = 77
TRACKED = set()  # the tracked paths, filled in by main()

# Built at run time so that this file does not name it itself.
SHARED = "../" + "shared"
SHARED_PARTS = re.compile(r"""["']\.\.["']\s*,\s*["']shared["']""")

# a path from the source root followed by ".." leaves the tree
ROOT_UP = re.compile(
    r"""(?:\bCMAKE_SOURCE_DIR|\bPROJECT_SOURCE_DIR|\bKDEV_SOURCE_DIR|\bSOURCE_DIR|\bSRC\b|\$\{?src\b)"""
    r"""[}"')\s]*(?:/\.\.(?![\w.])|,\s*["']\.\.["'])""")
# paths from a file's own directory: the ".." that follow are counted
OWN_DIR_SHELL = re.compile(
    r"""(?:\$\(dirname\s+"?\$(?:0|\{BASH_SOURCE\[0\]\})"?\)|\$\{?here\b\}?|\$\{CMAKE_CURRENT_SOURCE_DIR\})"""
    r"""((?:/\.\.(?![\w.]))+)""")
OWN_DIR_PY = re.compile(
    r"""(?:os\.path\.dirname\((?:os\.path\.(?:abspath|realpath)\()?__file__\)?\)|\bHERE\b)"""
    r"""((?:\s*,\s*["']\.\.["'])+)""")
# citations of documents: reference/<name>.md, the design note, a path that
# starts at a folder named shared (not one inside a longer path such as
# go-nvml's pkg/nvml/mock/.../gpus), <name>.md followed by a section sign, and
# "reference" followed by a section sign.
CITED_DOC = re.compile(
    r"""(?<![\w.-])((?:[\w.-]+/)*(?:reference/[\w.-]+\.md|DESIG[N]\.md|[\w.-]+\.md(?=\s*\u00a7)))"""
    r"""|(?<![\w./-])(s[h]ared/[\w./-]*)""")
BARE_SECTION = re.compile(r"""\breference\s+\u00a7|\breference\s+\(\u00a7""", re.IGNORECASE)
DIR_DEF = re.compile(r"""\b(KDEV_\w+_DIR)=["']?([^"';\s)]*)""")


def git(*args):
    return subprocess.run(["git", "-C", SRC] + list(args), check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


def tracked():
    return [p for p in git("ls-files", "-z").decode("utf-8", "surrogateescape").split("\0") if p]


def read_text(rel):
    path = os.path.join(SRC, rel)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def names_shared(rel, text):
    """file:line for each line of |text| that names the reference folder."""
    return ["%s:%d: %s" % (rel, n, line.strip())
            for n, line in enumerate(text.splitlines(), 1)
            if SHARED in line or SHARED_PARTS.search(line)]


def in_repo(rel, path, files):
    """Is |path|, as written in file |rel|, a tracked file or folder?"""
    path = path.rstrip("/.")
    for cand in (path, os.path.normpath(os.path.join(os.path.dirname(rel), path))):
        if cand in files or any(f.startswith(cand + "/") for f in files):
            return True
    return False


def cites_outside(rel, text, files=None):
    """file:line for each citation in |text| (file |rel|) of a document that
    is not in the repository (|files|: the tracked paths)."""
    if files is None:
        files = TRACKED
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        paths = [m.group(1) or m.group(2) for m in CITED_DOC.finditer(line)]
        missing = [p for p in paths if not in_repo(rel, p, files)]
        if BARE_SECTION.search(line):
            missing.append("an unnamed reference's section")
        if missing:
            bad.append("%s:%d: cites %s, not in the repository (cite the upstream source): %s"
                       % (rel, n, ", ".join(missing), line.strip()))
    return bad


def climbs_out(rel, text):
    """file:line for each path in |text| (file |rel|) that leaves the tree."""
    depth = len(os.path.dirname(rel).split("/")) if os.path.dirname(rel) else 0
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        if ROOT_UP.search(line):
            bad.append("%s:%d: climbs above the source root: %s" % (rel, n, line.strip()))
            continue
        for m in list(OWN_DIR_SHELL.finditer(line)) + list(OWN_DIR_PY.finditer(line)):
            ups = m.group(1).count("..")
            if ups > depth:
                bad.append("%s:%d: %d '..' from a directory %d deep: %s"
                           % (rel, n, ups, depth, line.strip()))
    return bad


def dir_defs_outside(rel, text):
    """KDEV_*_DIR values in |text| that are not in the source or build tree."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in DIR_DEF.finditer(line):
            v = m.group(2)
            if not (v.startswith("${CMAKE_SOURCE_DIR}") or v.startswith("${CMAKE_BINARY_DIR}")) \
                    or ".." in v:
                bad.append("%s:%d: %s=%s is not in the source or build tree" % (rel, n, m.group(1), v))
    return bad


def up(text):
    """The samples below write ".." as @UP@, "reference/" as @REF@, the
    design note as @DESIGN@, a section sign as @S@ and the shared folder with its slash as @SH@, so
    that this file does not hold the very lines it scans the tree for."""
    return (text.replace("@UP@", "..").replace("@REF@", "reference/")
            .replace("@DESIGN@", "DESIGN" + ".md").replace("@S@", "\u00a7")
            .replace("@SH@", "shared" + "/"))


def expect(fn, rel, text, flagged):
    text = up(text)
    got = fn(rel, text)
    if bool(got) != flagged:
        raise AssertionError("%s(%r, %r) gave %r, expected %s"
                             % (fn.__name__, rel, text, got, "a finding" if flagged else "none"))


def test_checks_can_fail():
    """Each check flags the lines it exists for and passes the usual ones."""
    old_py = up('VEC = os.path.join(kt.SOURCE_DIR, "@UP@", "shared", "vectors", "deviceplugin-v1beta1")')
    old_cmake = up('KDEV_SOURCE_DIR="${CMAKE_SOURCE_DIR}" KDEV_SHARED_DIR="${CMAKE_SOURCE_DIR}/@UP@/shared")')
    expect(names_shared, "README.md", "see `" + SHARED + "/@DESIGN@`", True)
    expect(names_shared, "tests/integration/x.py", old_py, True)
    expect(names_shared, "tests/CMakeLists.txt", old_cmake, True)
    expect(names_shared, "README.md", "see `docs/architecture.md` and tests/data/vectors", False)
    expect(names_shared, "src/x.c", "/* shared by both servers */", False)

    expect(cites_outside, "src/dra/x.h", " * Sockets (@REF@kubelet-device-apis.md @S@3, @S@4):", True)
    expect(cites_outside, "src/x.h", " * of PR #1930; @SH@@REF@nvidia-plugin-behaviour.md @S@1.11), on the", True)
    expect(cites_outside, "mock/x.yaml", "# capability and MIG profile numbers are the real ones (@SH@", True)
    expect(cites_outside, "src/x.c", "/* targets: @DESIGN@ section 6 */", True)
    expect(cites_outside, "src/x.c", " * (reference nvidia-plugin-behaviour.md @S@1.12), with two", True)
    expect(cites_outside, "src/x.c", "/* Extra shutdowns are not an error (nvml.h, reference @S@2.1). */", True)
    expect(cites_outside, "src/x.c", " * never set (kubernetes/kubelet pkg/apis/dra/v1/api.proto). */", False)
    expect(cites_outside, "mock/nvml/README.md", "go-nvml `pkg/nvml/mock/@SH@gpus`", False)
    expect(cites_outside, "README.md", "see `docs/architecture.md` and mock/nvml/README.md", False)
    expect(cites_outside, "src/x.c", "/* shared by both servers; RFC 4648 @S@4 */", False)
    expect(cites_outside, "docs/x.md", "([Files](architecture.md) @S@2)", False)

    expect(climbs_out, "tests/integration/x.py", old_py, True)
    expect(climbs_out, "tests/CMakeLists.txt", old_cmake, True)
    expect(climbs_out, "tests/unit/test_x.c", '#define D KDEV_SOURCE_DIR "/@UP@/vectors"', True)
    expect(climbs_out, "tests/integration/x.sh", 'cat "$src/@UP@/data"', True)
    expect(climbs_out, "tests/integration/x.sh", 'src=$(cd "$(dirname "$0")/@UP@/@UP@/@UP@" && pwd)', True)
    expect(climbs_out, "tests/integration/x.py",
           'SRC = os.path.join(os.path.dirname(__file__), "@UP@", "@UP@", "@UP@")', True)
    expect(climbs_out, "tests/interop/go/build.sh", 'src=$(cd "$here/@UP@/@UP@/@UP@/@UP@" && pwd)', True)
    expect(climbs_out, "tests/fuzz/CMakeLists.txt", "${CMAKE_CURRENT_SOURCE_DIR}/@UP@/@UP@/@UP@/x", True)
    expect(climbs_out, "tests/integration/x.py",
           'sys.path.insert(0, os.path.join(os.path.dirname(__file__), "@UP@", "pylib"))', False)
    expect(climbs_out, "tests/integration/x.sh",
           'src=${KDEV_SOURCE_DIR:-$(cd "$(dirname "$0")/@UP@/@UP@" && pwd)}', False)
    expect(climbs_out, "tests/interop/python/kdev_interop.py",
           'src = os.path.normpath(os.path.join(HERE, "@UP@", "@UP@", "@UP@"))', False)
    expect(climbs_out, "tests/unit/test_x.c", '#define D KDEV_SOURCE_DIR "/tests/data/vectors"', False)
    expect(climbs_out, "tests/unit/test_x.c", 'snprintf(p, n, "%s/@UP@/bin/nvidia-ctk", f->root);', False)

    expect(dir_defs_outside, "tests/CMakeLists.txt", old_cmake, True)
    expect(dir_defs_outside, "tests/CMakeLists.txt", 'X KDEV_DATA_DIR=/srv/data', True)
    expect(dir_defs_outside, "tests/CMakeLists.txt",
           'ENVIRONMENT "KDEV_BUILD_DIR=${CMAKE_BINARY_DIR};KDEV_SOURCE_DIR=${CMAKE_SOURCE_DIR}"', False)


def scan(fn, files):
    bad = []
    for rel in files:
        text = read_text(rel)
        if text is not None:
            bad += fn(rel, text)
    if bad:
        raise AssertionError("\n".join(bad))


def test_no_file_names_shared():
    """No tracked file outside .ci/ names the reference folder."""
    scan(names_shared, [p for p in tracked() if not p.startswith(".ci/")])


def test_no_citation_outside_the_repository():
    """No tracked file outside .ci/ cites a document the repository lacks."""
    scan(cites_outside, [p for p in TRACKED if not p.startswith(".ci/")])


def test_no_path_leaves_the_tree():
    """tests/, scripts/, bench/ and CMake files stay inside the source tree."""
    files = [p for p in tracked()
             if p.split("/")[0] in ("tests", "scripts", "bench", "cmake")
             or os.path.basename(p) == "CMakeLists.txt"]
    if "tests/CMakeLists.txt" not in files:
        raise AssertionError("tests/CMakeLists.txt is not tracked")
    scan(climbs_out, files)


def test_tests_get_only_source_and_build_dirs():
    """tests/CMakeLists.txt passes KDEV_SOURCE_DIR and KDEV_BUILD_DIR only."""
    text = read_text("tests/CMakeLists.txt")
    bad = dir_defs_outside("tests/CMakeLists.txt", text)
    if bad:
        raise AssertionError("\n".join(bad))
    defs = sorted(set(m.group(1) for m in DIR_DEF.finditer(text)))
    if defs != ["KDEV_BUILD_DIR", "KDEV_SOURCE_DIR"]:
        raise AssertionError("tests/CMakeLists.txt defines %s" % defs)


def test_vectors_are_tracked():
    """Every wire vector file the tests read is in the repository."""
    files = set(tracked())
    folders = sorted(p.split("/")[3] for p in files
                     if re.fullmatch(r"tests/data/vectors/[^/]+/manifest\.json", p))
    want = ["deviceplugin-v1beta1", "dra-health-v1alpha1", "dra-v1", "dra-v1beta1",
            "pluginregistration-v1", "podresources-v1"]
    if folders != want:
        raise AssertionError("vector folders with a tracked manifest: %s, want %s" % (folders, want))
    missing = []
    for d in folders:
        with open(os.path.join(SRC, "tests/data/vectors", d, "manifest.json"), encoding="utf-8") as f:
            m = json.load(f)
        for v in m["vectors"]:
            for key in ("file", "binary", "json"):
                if key in v:
                    rel = "tests/data/vectors/%s/%s" % (d, v[key])
                    if rel not in files:
                        missing.append(rel)
    if missing:
        raise AssertionError("not tracked: %s" % " ".join(missing))


def main():
    if not os.path.exists(os.path.join(SRC, ".git")):
        print("SKIP: %s is not a git checkout" % SRC)
        sys.exit(SKIP)
    global TRACKED
    TRACKED = set(tracked())
    passed = failed = 0
    for t in (test_checks_can_fail, test_no_file_names_shared,
              test_no_citation_outside_the_repository, test_no_path_leaves_the_tree,
              test_tests_get_only_source_and_build_dirs, test_vectors_are_tracked):
        try:
            t()
            passed += 1
            print("PASS %s" % t.__name__, flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print("FAIL %s:\n%s" % (t.__name__, e), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
