"""The module graph that CMakeLists.txt states is the one the includes follow
(docs/architecture.md, "Module graph").

CMakeLists.txt is the single source of truth: each `kdev_module(NAME ...)`
line names the modules NAME links (kdev_<module>; kdev_proto: the generated
protobuf-c messages), and each binary's `target_link_libraries()` names what
its main (src/cmd/*.c) links. Every `#include` in src/ and mock/nvml/ is read
and checked against these rules; each error is one line,
`FILE:LINE: RULE: message` (or `CMakeLists.txt: RULE: message`):

- graph: a file may include a header of module X ("X/....h") only when its
  module names kdev_X itself (not through another module), a protobuf-c
  message header ("....pb-c.h") only when it names kdev_proto; and a module
  names no kdev_X that none of its files includes (the stated graph is
  exactly the include graph). Modules state their edges in their
  kdev_module() line only, not in a separate target_link_libraries().
- internal: a header named *_internal.h is included only by its own module.
- nghttp2: <nghttp2/...> is included, and PkgConfig::NGHTTP2 linked, only
  by src/rpc.
- nvml: NVML's headers (src/nvml's, or a system <nvml.h>) are included only
  by the NVIDIA backend: src/nvml and src/nvidia. mock/nvml, the stand-in
  driver, includes only the ABI table nvml/nvml_api.h of them.
- kdevctl: src/kubelet and src/cmd/kdevctl.c include only rpc, the messages,
  common, share's region reader, the API client (kube), the structured
  allocator and the fit and quota checks (sched), the PodResources client
  (podres), and kubelet's own headers.
- front-end: the backends (src/generic, src/nvidia, src/nvml) never include
  the front ends' headers (src/plugin, src/dra).
- backend: a backend never includes another backend's headers (the /dev
  backend is generic; the NVIDIA backend is nvidia + nvml).
- wire: the device model and the backends (src/model, src/generic,
  src/nvidia, src/nvml) never include protobuf-c messages; the front ends
  own the wire.

Known crossings, if any, are listed in ALLOWED below (empty today),
each with its reason; an allowed crossing that no longer occurs is itself an
error, so the list only shrinks. Before the real tree, the checker runs on
small in-memory trees with deliberately bad includes and must give exactly
the expected lines, so a rule that has stopped matching fails here too.

Env: KDEV_SOURCE_DIR (default: two levels up from this file).
"""
import os
import re
import sys

SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

BACKENDS = {"generic": "generic", "nvidia": "nvidia", "nvml": "nvidia"}  # module -> backend
FRONT_ENDS = ("plugin", "dra")
WIRE_NEUTRAL = ("model", "generic", "nvidia", "nvml")
NVML_OWNERS = ("nvml", "nvidia")
KDEVCTL_UNITS = ("kubelet", "exe:kdevctl")
# kube and sched: `kdevctl dra allocate` reads a node's ResourceSlices,
# DeviceClasses and pending ResourceClaims from an API server (kube) and
# allocates them with the structured allocator (sched), the control plane's
# side of DRA that kdevctl plays offline beside kubelet's; `kdevctl schedule`
# and `kdevctl quota` print sched's fit and quota decisions. Neither module
# pulls in a backend or a front end (kube: common only; sched: common, cel,
# jansson and libyaml). podres: the PodResources client (rpc and the
# messages) that `kdevctl podresources` and kdev-plugin's metering share.
KDEVCTL_MAY_INCLUDE = {"rpc", "proto", "common", "kubelet", "share", "kube", "sched", "podres"}
MOCK_NVML = "mock/nvml"
MOCK_NVML_HEADERS = {"nvml/nvml_api.h"}  # the ABI table the mock implements

# Known crossings, (rule, file, included header) -> reason: none today. A
# crossing may only be listed with the work that removes it, and an entry
# whose include has gone is itself an error.
ALLOWED = {}

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)[ \t]*\(([^()]*)\)", re.S)


def strip_cmake_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def parse_cmake(text, mock_text):
    """The stated graph. Returns (units, errors): units maps a unit name
    (module name, "exe:NAME" for a binary, MOCK_NVML) to {"dir" or "file",
    "deps": set of module names ("proto" for kdev_proto), "libs": other
    items}."""
    units, errors, exes = {}, [], {}
    for m in CALL.finditer(strip_cmake_comments(text)):
        fn, args = m.group(1), m.group(2).split()
        if fn == "kdev_module" and args:
            deps = {a[5:] for a in args[1:] if a.startswith("kdev_")}
            units[args[0]] = {"dir": "src/" + args[0], "deps": deps,
                              "libs": {a for a in args[1:] if not a.startswith("kdev_")}}
        elif fn == "add_executable" and len(args) >= 2:
            exes[args[0]] = args[1:]
        elif fn == "target_link_libraries" and args:
            target = args[0]
            if re.fullmatch(r"kdev_\w+", target) and target != "kdev_proto":
                errors.append("CMakeLists.txt: graph: target_link_libraries(%s ...) states "
                              "edges outside kdev_module(%s ...); name them there"
                              % (target, target[5:]))
            elif target in exes:
                for srcfile in exes[target]:
                    units["exe:" + target] = {
                        "file": srcfile,
                        "deps": {a[5:] for a in args[1:] if a.startswith("kdev_")},
                        "libs": {a for a in args[1:] if not a.startswith("kdev_")}}
    # the mock builds some of kdev's sources in (its KDEV_MOCK_NVML_SRCS)
    built_in = set(re.findall(r"\$\{CMAKE_SOURCE_DIR\}/src/(\w+)/\w+\.c", mock_text))
    units[MOCK_NVML] = {"dir": MOCK_NVML, "deps": built_in, "libs": set()}
    return units, errors


def unit_of(path, units):
    """The unit a file of the tree belongs to, or None."""
    for name, u in units.items():
        if u.get("file") == path:
            return name
    for name, u in units.items():
        if "dir" in u and path.startswith(u["dir"] + "/"):
            return name
    return None


def module_of_include(header, modules):
    """The module whose header |header| ("x/y.h") is: a module name,
    "proto", or None (a header of the file's own folder or not ours)."""
    if header.endswith(".pb-c.h"):
        return "proto"
    if "/" not in header:
        return None
    first = header.split("/", 1)[0]
    return first if first in modules else "?"


def module_name(unit):
    return unit[4:] if unit.startswith("exe:") else unit


def check(cmake_text, mock_text, files, allowed):
    """Errors (sorted lines) for the tree |files| (path -> text) against the
    graph of |cmake_text| and the allow-list |allowed|."""
    units, errors = parse_cmake(cmake_text, mock_text)
    modules = {n for n in units if not n.startswith("exe:") and n != MOCK_NVML}
    used = {n: set() for n in units}
    seen_allowed = set()
    crossings = []  # (rule, path, line, header, message)

    for lib in ("PkgConfig::NGHTTP2",):
        for n, u in sorted(units.items()):
            if lib in u["libs"] and n != "rpc":
                errors.append("CMakeLists.txt: nghttp2: %s links %s; only rpc may"
                              % (n, lib))

    for path in sorted(files):
        unit = unit_of(path, units)
        if unit is None:
            errors.append("%s:1: graph: no kdev_module() or add_executable() in "
                          "CMakeLists.txt builds this file" % path)
            continue
        me = module_name(unit)
        for m in INCLUDE.finditer(files[path]):
            line = files[path].count("\n", 0, m.start()) + 1
            angle, header = m.group(1) == "<", m.group(2)
            where = "%s:%d" % (path, line)
            if angle:
                if header.startswith("nghttp2/") and unit != "rpc":
                    crossings.append(("nghttp2", path, line, header,
                                      "includes <%s>; only src/rpc includes nghttp2" % header))
                if header == "nvml.h" and unit not in NVML_OWNERS:
                    crossings.append(("nvml", path, line, header,
                                      "includes <nvml.h>; only src/nvml and src/nvidia "
                                      "include NVML headers"))
                continue
            mod = module_of_include(header, modules)
            if mod is None:
                continue
            if mod == "?":
                errors.append('%s: graph: includes "%s", which is no module\'s header'
                              % (where, header))
                continue
            if mod != me:
                used[unit].add(mod)
                if unit == MOCK_NVML:
                    if mod not in units[unit]["deps"] and header not in MOCK_NVML_HEADERS:
                        errors.append('%s: nvml: includes "%s"; mock/nvml includes only %s '
                                      "and the sources it builds in (mock/nvml/CMakeLists.txt)"
                                      % (where, header, ", ".join(sorted(MOCK_NVML_HEADERS))))
                    continue
                if mod not in units[unit]["deps"]:
                    stated = ("kdev_module(%s ...)" % unit if not unit.startswith("exe:")
                              else "target_link_libraries(%s ...)" % me)
                    errors.append('%s: graph: includes "%s", but %s in CMakeLists.txt '
                                  "does not name kdev_%s" % (where, header, stated, mod))
                if header.endswith("_internal.h") and mod != "proto":
                    crossings.append(("internal", path, line, header,
                                      'includes "%s", internal to src/%s' % (header, mod)))
            if mod == "nvml" and unit not in NVML_OWNERS and unit != MOCK_NVML:
                crossings.append(("nvml", path, line, header,
                                  'includes "%s"; only src/nvml and src/nvidia include '
                                  "NVML headers" % header))
            if unit in KDEVCTL_UNITS and mod not in KDEVCTL_MAY_INCLUDE:
                crossings.append(("kdevctl", path, line, header,
                                  'includes "%s"; kdevctl includes only rpc, the messages, '
                                  "common, share, kube, sched and podres" % header))
            if unit in BACKENDS and mod in FRONT_ENDS:
                crossings.append(("front-end", path, line, header,
                                  'backend %s includes "%s"; backends never include '
                                  "plugin/ or dra/ headers" % (unit, header)))
            if (unit in BACKENDS and mod in BACKENDS
                    and BACKENDS[mod] != BACKENDS[unit]):
                crossings.append(("backend", path, line, header,
                                  'backend %s includes "%s" of backend %s'
                                  % (BACKENDS[unit], header, BACKENDS[mod])))
            if unit in WIRE_NEUTRAL and mod == "proto":
                crossings.append(("wire", path, line, header,
                                  'includes "%s"; the model and the backends include no '
                                  "protobuf-c messages" % header))

    for rule, path, line, header, msg in crossings:
        key = (rule, path, header)
        if key in allowed:
            seen_allowed.add(key)
        else:
            errors.append("%s:%d: %s: %s" % (path, line, rule, msg))
    for key in sorted(set(allowed) - seen_allowed):
        errors.append('%s: allowed: the allowed %s crossing of "%s" no longer occurs; '
                      "remove it from ALLOWED in tests/integration/module_graph.py"
                      % (key[1], key[0], key[2]))

    for n, u in sorted(units.items()):
        if n == MOCK_NVML:
            continue
        for dep in sorted(u["deps"] - used[n] - {n}):
            stated = ("kdev_module(%s ...)" % n if not n.startswith("exe:")
                      else "target_link_libraries(%s ...)" % module_name(n))
            errors.append("CMakeLists.txt: graph: %s names kdev_%s, but no file of %s "
                          "includes its headers" % (stated, dep, u.get("dir") or u["file"]))
    def order(e):  # by file, then by line number
        path, line, rest = (e.split(":", 2) + ["", ""])[:3]
        return (path, int(line) if line.isdigit() else 0, e)
    return sorted(set(errors), key=order)


# --- the self-check: small trees the rules must flag or pass -------------------

SAMPLE_CMAKE = """
kdev_module(common PkgConfig::JANSSON)
kdev_module(rpc kdev_common PkgConfig::UV PkgConfig::NGHTTP2)  # the wire
kdev_module(model kdev_common)
kdev_module(generic kdev_common kdev_model)
kdev_module(plugin kdev_common kdev_rpc kdev_model kdev_proto)
kdev_module(nvml kdev_common ${CMAKE_DL_LIBS})
kdev_module(nvidia kdev_common kdev_model kdev_nvml)
kdev_module(dra kdev_common kdev_rpc kdev_nvidia)
kdev_module(kubelet kdev_common kdev_rpc kdev_proto)
add_executable(kdevctl src/cmd/kdevctl.c)
target_link_libraries(kdevctl kdev_common
                      kdev_kubelet)
"""
SAMPLE_MOCK = "set(S ${CMAKE_SOURCE_DIR}/src/common/file.c)\n"
SAMPLE_TREE = {
    "src/common/err.h": "#include <stdio.h>\n",
    "src/rpc/rpc_internal.h": '#include <nghttp2/nghttp2.h>\n#include "common/err.h"\n',
    "src/rpc/rpc.h": '#include "common/err.h"\n',
    "src/model/model.h": '#include "common/err.h"\n',
    "src/model/model.c": '#include "model/model.h"\n',
    "src/generic/generic.h": '#include "common/err.h"\n#include "model/model.h"\n',
    "src/plugin/service.c": ('#include "rpc/rpc.h"\n#include "model/model.h"\n'
                             '#include "common/err.h"\n  #  include "deviceplugin/v1beta1/api.pb-c.h"\n'),
    "src/nvml/discover.h": '#include "common/err.h"\n',
    "src/nvidia/backend.c": '#include "nvml/discover.h"\n#include "model/model.h"\n'
                            '#include "common/err.h"\n',
    "src/dra/plugin.c": '#include "rpc/rpc.h"\n#include "common/err.h"\n#include "nvidia/backend.h"\n',
    "src/kubelet/cli.c": ('#include "rpc/rpc.h"\n#include "common/err.h"\n#include "cli.h"\n'
                          '#include "dra/v1/api.pb-c.h"\n'),
    "src/cmd/kdevctl.c": '#include "kubelet/cli.h"\n#include "common/err.h"\n',
    "mock/nvml/mock.h": '#include "nvml/nvml_api.h"\n#include "common/file.h"\n',
}


def sample(**changes):
    tree = dict(SAMPLE_TREE)
    for path, text in changes.items():
        tree[path.replace("__", "/").replace("_dot_", ".")] = text
    return tree


def expect(name, got, want):
    if got != want:
        raise AssertionError("%s:\n  got:  %r\n  want: %r" % (name, got, want))


def test_checker_can_fail():
    expect("a clean tree", check(SAMPLE_CMAKE, SAMPLE_MOCK, SAMPLE_TREE, {}), [])

    # the deliberately bad include: the /dev backend reaches into the device
    # plugin front end, an edge CMakeLists.txt does not state
    bad = sample(**{"src/generic/discover.c":
                    '#include "generic/generic.h"\n#include "plugin/service.h"\n'})
    expect("a backend including the front end", check(SAMPLE_CMAKE, SAMPLE_MOCK, bad, {}), [
        'src/generic/discover.c:2: front-end: backend generic includes "plugin/service.h"; '
        'backends never include plugin/ or dra/ headers',
        'src/generic/discover.c:2: graph: includes "plugin/service.h", but '
        'kdev_module(generic ...) in CMakeLists.txt does not name kdev_plugin',
    ])

    # an edge reached only through another module is not stated
    bad = sample(**{"src/generic/generic.h": '#include "model/model.h"\n#include "common/err.h"\n',
                    "src/dra/slices.c": '#include "model/model.h"\n'})
    expect("a transitive edge", check(SAMPLE_CMAKE, SAMPLE_MOCK, bad, {}), [
        'src/dra/slices.c:1: graph: includes "model/model.h", but kdev_module(dra ...) in '
        'CMakeLists.txt does not name kdev_model',
    ])

    # a stated edge that no include uses
    cm = SAMPLE_CMAKE.replace("kdev_module(nvml kdev_common", "kdev_module(nvml kdev_common kdev_model")
    expect("an unused edge", check(cm, SAMPLE_MOCK, SAMPLE_TREE, {}), [
        "CMakeLists.txt: graph: kdev_module(nvml ...) names kdev_model, but no file of "
        "src/nvml includes its headers",
    ])
    cm = SAMPLE_CMAKE + "target_link_libraries(kdev_generic kdev_rpc)\n"
    expect("an edge outside kdev_module()", check(cm, SAMPLE_MOCK, SAMPLE_TREE, {}), [
        "CMakeLists.txt: graph: target_link_libraries(kdev_generic ...) states edges outside "
        "kdev_module(generic ...); name them there",
    ])

    # nghttp2 outside rpc, in the include and in the link line
    bad = sample(**{"src/plugin/h2.c": "#include <nghttp2/nghttp2.h>\n"})
    cm = SAMPLE_CMAKE.replace("kdev_module(kubelet kdev_common", "kdev_module(kubelet PkgConfig::NGHTTP2 kdev_common")
    expect("nghttp2 outside rpc", check(cm, SAMPLE_MOCK, bad, {}), [
        "CMakeLists.txt: nghttp2: kubelet links PkgConfig::NGHTTP2; only rpc may",
        "src/plugin/h2.c:1: nghttp2: includes <nghttp2/nghttp2.h>; only src/rpc includes nghttp2",
    ])
    bad = sample(**{"src/plugin/h2.c": '#include "rpc/rpc_internal.h"\n'})
    expect("rpc's internal header", check(SAMPLE_CMAKE, SAMPLE_MOCK, bad, {}), [
        'src/plugin/h2.c:1: internal: includes "rpc/rpc_internal.h", internal to src/rpc',
    ])

    # NVML headers outside the NVIDIA backend; the mock shares only the ABI table
    bad = sample(**{"src/dra/plugin.c": '#include "rpc/rpc.h"\n#include "common/err.h"\n'
                                        '#include "nvidia/backend.h"\n#include <nvml.h>\n',
                    "src/dra/gpus.c": '#include "nvml/discover.h"\n',
                    "mock/nvml/mock.c": '#include "nvml/loader.h"\n'})
    cm = SAMPLE_CMAKE.replace("kdev_module(dra kdev_common", "kdev_module(dra kdev_nvml kdev_common")
    expect("NVML outside the NVIDIA backend", check(cm, SAMPLE_MOCK, bad, {}), [
        'mock/nvml/mock.c:1: nvml: includes "nvml/loader.h"; mock/nvml includes only '
        'nvml/nvml_api.h and the sources it builds in (mock/nvml/CMakeLists.txt)',
        'src/dra/gpus.c:1: nvml: includes "nvml/discover.h"; only src/nvml and src/nvidia '
        'include NVML headers',
        "src/dra/plugin.c:4: nvml: includes <nvml.h>; only src/nvml and src/nvidia include "
        "NVML headers",
    ])

    # kdevctl beyond rpc + messages + common
    bad = sample(**{"src/cmd/kdevctl.c": '#include "kubelet/cli.h"\n#include "common/err.h"\n'
                                         '#include "model/model.h"\n'})
    cm = SAMPLE_CMAKE.replace("target_link_libraries(kdevctl kdev_common",
                              "target_link_libraries(kdevctl kdev_model kdev_common")
    expect("kdevctl including the model", check(cm, SAMPLE_MOCK, bad, {}), [
        'src/cmd/kdevctl.c:3: kdevctl: includes "model/model.h"; kdevctl includes only rpc, '
        'the messages, common, share, kube, sched and podres',
    ])
    expect("the binary's link line", check(SAMPLE_CMAKE, SAMPLE_MOCK, bad, {}), [
        'src/cmd/kdevctl.c:3: graph: includes "model/model.h", but '
        'target_link_libraries(kdevctl ...) in CMakeLists.txt does not name kdev_model',
        'src/cmd/kdevctl.c:3: kdevctl: includes "model/model.h"; kdevctl includes only rpc, '
        'the messages, common, share, kube, sched and podres',
    ])

    # one backend including another; the model or a backend including the wire
    bad = sample(**{"src/nvidia/config.c": '#include "generic/generic.h"\n',
                    "src/model/model.h": '#include "common/err.h"\n'
                                         '#include "deviceplugin/v1beta1/api.pb-c.h"\n'})
    cm = SAMPLE_CMAKE.replace("kdev_module(nvidia kdev_common", "kdev_module(nvidia kdev_generic kdev_common")
    cm = cm.replace("kdev_module(model kdev_common", "kdev_module(model kdev_common kdev_proto")
    want = [
        'src/model/model.h:2: wire: includes "deviceplugin/v1beta1/api.pb-c.h"; the model and '
        'the backends include no protobuf-c messages',
        'src/nvidia/config.c:1: backend: backend nvidia includes "generic/generic.h" of backend '
        'generic',
    ]
    expect("backend and wire crossings", check(cm, SAMPLE_MOCK, bad, {}), want)

    # the allow-list: an allowed crossing passes; one that is gone is an error
    allow = {("backend", "src/nvidia/config.c", "generic/generic.h"): "item 4"}
    expect("an allowed crossing", check(cm, SAMPLE_MOCK, bad, allow), want[:1])
    allow[("nvml", "src/dra/plugin.h", "nvml/discover.h")] = "items 1-3"
    expect("a stale allow-list entry", check(cm, SAMPLE_MOCK, bad, allow), [
        'src/dra/plugin.h: allowed: the allowed nvml crossing of "nvml/discover.h" no longer '
        'occurs; remove it from ALLOWED in tests/integration/module_graph.py',
    ] + want[:1])

    # files no CMake line builds, and includes of no module
    bad = sample(**{"src/config/config.c": '#include "common/err.h"\n',
                    "src/plugin/x.c": '#include "../common/err.h"\n#include "plugn/runtime.h"\n'})
    expect("unknown module and file", check(SAMPLE_CMAKE, SAMPLE_MOCK, bad, {}), [
        "src/config/config.c:1: graph: no kdev_module() or add_executable() in CMakeLists.txt "
        "builds this file",
        'src/plugin/x.c:1: graph: includes "../common/err.h", which is no module\'s header',
        'src/plugin/x.c:2: graph: includes "plugn/runtime.h", which is no module\'s header',
    ])


# --- the real tree ---------------------------------------------------------------

def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def real_tree():
    files = {}
    for top in ("src", MOCK_NVML):
        for root, dirs, names in os.walk(os.path.join(SRC, top)):
            dirs.sort()
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(root, n), SRC).replace(os.sep, "/")
                    files[rel] = read(rel)
    return files


def test_real_tree_follows_the_graph():
    files = real_tree()
    if len(files) < 50 or "src/rpc/rpc_internal.h" not in files:
        raise AssertionError("the source tree was not found under %s" % SRC)
    errors = check(read("CMakeLists.txt"), read("mock/nvml/CMakeLists.txt"), files, ALLOWED)
    if errors:
        raise AssertionError("\n".join(errors))


def main():
    passed = failed = 0
    for t in (test_checker_can_fail, test_real_tree_follows_the_graph):
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
