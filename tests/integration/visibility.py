"""Each module library exports exactly the functions its public headers mark
KDEV_API (src/common/export.h; docs/architecture.md, "Exported symbols").

Every kdev_<module> library is compiled with -fvisibility=hidden. The
libraries are static, so visibility shows in what a module's objects export
once linked together: each libkdev_<module>.a is partially linked
(`ld -r --whole-archive`) into one object, and the defined global symbols of
default visibility in it must be exactly the functions declared with
KDEV_API in the module's public headers (src/<module>/*.h but *_internal.h):

- exported but not marked: the module was built without hidden visibility,
  or a function escapes its marker;
- marked but not exported: a marked declaration that no file of the module
  defines (or a marker that lost its meaning);
- internal: a name with a double underscore (kdev_rpc__*) or a declaration
  in *_internal.h is marked;
- unmarked: a module leaves a public function declaration (`type name(`
  at the start of a line, outside comments, not static, typedef or extern)
  or a public `extern` object unmarked;
- not marked at all: a module marks nothing (it would silently export
  nothing). Every module must mark its public headers but those of
  PENDING, which adopt the marker once their headers settle; a PENDING
  module that marks anything must leave PENDING, so the list stays true.

The mock libnvidia-ml.so.1 builds common/file.c and common/err.c in with
KDEV_NO_EXPORT (common/export.h): each mock library found under the build
tree must export NVML entry points and no kdev_* function.

Before the real libraries, the check runs on a small object compiled here
with one marked and one unmarked function, and must tell them apart, so a
check that has stopped seeing visibility fails too.

Env: KDEV_BUILD_DIR (the build tree), KDEV_SOURCE_DIR (default: two levels
up from this file). Skips (77) when ld, readelf or cc is missing.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KDEV_BUILD_DIR", os.path.join(SRC, "build-asan"))

# Modules whose headers do not carry KDEV_API yet (they export nothing):
# nvidia and dra are being reworked (the health split) and adopt the marker
# once their headers settle. Every other module (common, rpc, model, cdi,
# config, generic, plugin, kube, kubelet, metrics, nvml, daemon, and any new
# one) must mark all of its public declarations.
PENDING = set()

# KDEV_API <return type> name(  -- the declaration may span lines
MARKED = re.compile(r"^KDEV_API\b[^;(]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.M)
# KDEV_API extern <type> name[...];  -- public data
MARKED_DATA = re.compile(r"^KDEV_API extern\b[^;(]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^\]]*\])?\s*;",
                         re.M)
# a function declaration at the start of a line, marked or not
DECL = re.compile(r"^(?:KDEV_API )?(?!(?:static|typedef|extern|return)\b)"
                  r"(?:[A-Za-z_][A-Za-z0-9_]*[ *]+)+\**([A-Za-z_][A-Za-z0-9_]*)\(", re.M)
# an extern object at the start of a line, marked or not
DECL_DATA = re.compile(r"^(?:KDEV_API )?extern (?!\"C\")[^;(]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*"
                       r"(?:\[[^\]]*\])?\s*;", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def uncomment(text):
    """|text| with its comments blanked (newlines kept)."""
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def exported(obj, dyn=False):
    """Defined global (or weak) symbols of default visibility in |obj| (its
    dynamic symbol table when |dyn|)."""
    out = subprocess.run(["readelf", "-W", "--dyn-syms" if dyn else "-s", obj], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        typ, bind, vis, ndx, name = f[3], f[4], f[5], f[6], f[7]
        if bind in ("GLOBAL", "WEAK") and vis == "DEFAULT" and ndx != "UND" \
                and typ in ("FUNC", "OBJECT") and not name.startswith("__odr_asan."):
            # __odr_asan.<global>: AddressSanitizer's one-definition-rule
            # indicator, emitted beside each exported global in an ASan build
            names.add(name)
    return names


def partial_link(archive, out):
    subprocess.run(["ld", "-r", "--whole-archive", archive, "-o", out], check=True,
                   capture_output=True)


def parse(text):
    """(marked names, declared names) of a header's text."""
    text = uncomment(text)
    return (set(MARKED.findall(text)) | set(MARKED_DATA.findall(text)),
            set(DECL.findall(text)) | set(DECL_DATA.findall(text)))


def marked(module):
    """(public marked names, errors: internal marked names and, when the
    module marks anything, unmarked public declarations)."""
    pub, bad, decls = set(), [], []
    d = os.path.join(SRC, "src", module)
    for h in sorted(os.listdir(d)):
        if not h.endswith(".h"):
            continue
        mk, dc = parse(open(os.path.join(d, h), encoding="utf-8").read())
        for name in sorted(mk):
            if h.endswith("_internal.h") or "__" in name:
                bad.append(f"src/{module}/{h}: {name}: internal function marked KDEV_API")
            else:
                pub.add(name)
        if not h.endswith("_internal.h"):
            decls += [(h, n) for n in sorted(dc) if "__" not in n]
    if pub:
        bad += [f"src/{module}/{h}: {n}: public function not marked KDEV_API"
                for h, n in decls if n not in pub]
    return pub, bad


def self_test(tmp):
    """The check sees visibility: of a marked and an unmarked function
    compiled with -fvisibility=hidden, only the marked one is exported."""
    c = os.path.join(tmp, "t.c")
    with open(c, "w") as f:
        f.write('#include "common/export.h"\n'
                "KDEV_API int kdev_t_marked(void);\n"
                "int kdev_t_unmarked(void);\n"
                "int kdev_t_marked(void) { return 1; }\n"
                "int kdev_t_unmarked(void) { return 2; }\n")
    o = os.path.join(tmp, "t.o")
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-c", "-fvisibility=hidden", "-I", os.path.join(SRC, "src"), c, "-o", o],
                   check=True)
    a = os.path.join(tmp, "libt.a")
    subprocess.run(["ar", "rcs", a, o], check=True)
    r = os.path.join(tmp, "t-r.o")
    partial_link(a, r)
    got = exported(r)
    if got != {"kdev_t_marked"}:
        print(f"self-test: expected only kdev_t_marked exported, got {sorted(got)}")
        return False
    text = ("KDEV_API struct x *kdev_a(int a,\n  int b);\nint kdev_b(void);\n"
            "KDEV_API const char *kdev_c(void);\ntypedef void (*kdev_fn)(void);\n"
            "const ProtobufCMessageDescriptor *kdev_d(const char *name);\n"
            "KDEV_API int kdevctl_e(int argc, char **argv);\n"
            "static inline int kdev_f(void) { return 0; }\n"
            "/* not a declaration:\nint kdev_g(void);\n */\n"
            "typedef int kdev_h_fn(void);\nextern \"C\" {\n"
            "KDEV_API extern const char *const kdev_i[4];\nextern int kdev_j;\n")
    pub, decls = parse(text)
    want_pub, want_decls = {"kdev_a", "kdev_c", "kdevctl_e", "kdev_i"}, \
        {"kdev_a", "kdev_b", "kdev_c", "kdev_d", "kdevctl_e", "kdev_i", "kdev_j"}
    if pub != want_pub or decls != want_decls:
        print(f"self-test: parser found marked {sorted(pub)}, declared {sorted(decls)}; "
              f"expected {sorted(want_pub)} and {sorted(want_decls)}")
        return False
    return True


def check_mocks():
    """Errors: a mock libnvidia-ml.so.1 under the build tree that exports a
    kdev_* function, or no NVML entry point; and a build without any."""
    bad, seen = [], 0
    for root, _, files in os.walk(BUILD):
        for f in files:
            path = os.path.join(root, f)
            if not re.fullmatch(r"libnvidia-ml\.so\.1", f) or os.path.islink(path):
                continue
            seen += 1
            got = exported(path, dyn=True)
            rel = os.path.relpath(path, BUILD)
            leaked = sorted(n for n in got if n.startswith("kdev_"))
            bad += [f"{rel}: exports {n} (kdev's own functions stay hidden in the mock)"
                    for n in leaked]
            if not any(n.startswith("nvml") for n in got):
                bad.append(f"{rel}: exports no nvml* entry point")
            print(f"{rel}: {len(got)} exported, {len(leaked)} kdev_*")
    if not seen:
        bad.append(f"no mock libnvidia-ml.so.1 under {BUILD}")
    return bad


def main():
    for tool in ("ld", "readelf", "ar"):
        if not shutil.which(tool):
            print(f"skip: {tool} not found")
            sys.exit(77)
    libs = {}
    for root, _, files in os.walk(BUILD):
        for f in files:
            m = re.fullmatch(r"libkdev_([a-z0-9_]+)\.a", f)
            if m and m.group(1) != "proto" and os.path.isdir(os.path.join(SRC, "src",
                                                                           m.group(1))):
                libs.setdefault(m.group(1), os.path.join(root, f))
    if not libs:
        print(f"no libkdev_*.a under {BUILD}")
        sys.exit(1)
    failed = False
    for module in sorted(set(os.listdir(os.path.join(SRC, "src"))) - PENDING):
        d = os.path.join(SRC, "src", module)
        if module not in ("cmd", "proto") and os.path.isdir(d) and module not in libs \
                and any(f.endswith(".c") for f in os.listdir(d)):
            print(f"src/{module}: no libkdev_{module}.a under {BUILD}")
            failed = True
    with tempfile.TemporaryDirectory() as tmp:
        if not self_test(tmp):
            sys.exit(1)
        for module in sorted(libs):
            obj = os.path.join(tmp, f"{module}-r.o")
            partial_link(libs[module], obj)
            got = exported(obj)
            want, bad = marked(module)
            if module in PENDING and want:
                bad.append(f"src/{module}: marks KDEV_API but is listed in PENDING "
                           "(take it off, so its marking is required from now on)")
            elif module not in PENDING and not want:
                bad.append(f"src/{module}: marks nothing with KDEV_API (only the PENDING "
                           f"modules {', '.join(sorted(PENDING))} may)")
            for b in bad:
                print(b)
                failed = True
            for name in sorted(got - want):
                print(f"kdev_{module}: {name} is exported but not marked KDEV_API in "
                      f"src/{module}/*.h")
                failed = True
            for name in sorted(want - got):
                print(f"kdev_{module}: {name} is marked KDEV_API but not exported")
                failed = True
            print(f"kdev_{module}: {len(got)} exported, {len(want)} marked")
    for b in check_mocks():
        print(b)
        failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
