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
- unmarked: a module that marks its public headers (marks any function)
  leaves a public function declaration (`type kdev_name(` at the start of
  a line) unmarked. Modules adopt the marker one at a time; until a module
  does, it exports nothing.

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

# KDEV_API <return type> name(  -- the declaration may span lines
MARKED = re.compile(r"^KDEV_API\b[^;(]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.M)
# a function declaration at the start of a line, marked or not
DECL = re.compile(r"^(?:KDEV_API )?(?:const |struct |enum |unsigned )*[a-z_0-9]+[ *]+\**"
                  r"(kdev_[a-z0-9_]+)\(", re.M)


def exported(obj):
    """Defined global (or weak) symbols of default visibility in |obj|."""
    out = subprocess.run(["readelf", "-sW", obj], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        typ, bind, vis, ndx, name = f[3], f[4], f[5], f[6], f[7]
        if bind in ("GLOBAL", "WEAK") and vis == "DEFAULT" and ndx != "UND" \
                and typ in ("FUNC", "OBJECT"):
            names.add(name)
    return names


def partial_link(archive, out):
    subprocess.run(["ld", "-r", "--whole-archive", archive, "-o", out], check=True,
                   capture_output=True)


def marked(module):
    """(public marked names, errors: internal marked names and, when the
    module marks anything, unmarked public declarations)."""
    pub, bad, decls = set(), [], []
    d = os.path.join(SRC, "src", module)
    for h in sorted(os.listdir(d)):
        if not h.endswith(".h"):
            continue
        text = open(os.path.join(d, h), encoding="utf-8").read()
        for name in MARKED.findall(text):
            if h.endswith("_internal.h") or "__" in name:
                bad.append(f"src/{module}/{h}: {name}: internal function marked KDEV_API")
            else:
                pub.add(name)
        if not h.endswith("_internal.h"):
            decls += [(h, n) for n in DECL.findall(text) if "__" not in n]
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
            "KDEV_API const char *kdev_c(void);\ntypedef void (*kdev_fn)(void);\n")
    pub, decls = set(MARKED.findall(text)), set(DECL.findall(text))
    if pub != {"kdev_a", "kdev_c"} or decls != {"kdev_a", "kdev_b", "kdev_c"}:
        print(f"self-test: parser found marked {sorted(pub)}, declared {sorted(decls)}; "
              "expected kdev_a, kdev_c and kdev_a, kdev_b, kdev_c")
        return False
    return True


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
    with tempfile.TemporaryDirectory() as tmp:
        if not self_test(tmp):
            sys.exit(1)
        for module in sorted(libs):
            obj = os.path.join(tmp, f"{module}-r.o")
            partial_link(libs[module], obj)
            got = exported(obj)
            want, bad = marked(module)
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
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
