"""CDI specs written by kdev validate against our JSON schema
(tests/cdi/schema/cdi-spec.schema.json, written from the CDI spec), and the
schema rejects what the CDI spec forbids.

The sample specs come from the unit test binary test_cdi_file, which writes
them into $KDEV_CDI_SAMPLES_DIR instead of running its tests. Needs Debian's
python3-jsonschema; exits 77 (skipped) without it."""
import copy
import json
import os
import stat
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed: skipping")
    sys.exit(77)

SRC = os.environ.get("KDEV_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KDEV_BUILD_DIR", os.path.join(SRC, "build"))
SCHEMA = os.path.join(SRC, "tests", "cdi", "schema", "cdi-spec.schema.json")
WRITER = os.path.join(BUILD, "tests", "test_cdi_file")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def errors(validator, doc):
    return sorted(e.message for e in validator.iter_errors(doc))


def main():
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    v = jsonschema.Draft7Validator(schema)

    if not os.path.exists(WRITER):
        print("missing", WRITER)
        return 1

    with tempfile.TemporaryDirectory(prefix="kdev-cdi-schema.") as d:
        out = os.path.join(d, "cdi")
        env = dict(os.environ, KDEV_CDI_SAMPLES_DIR=out)
        r = subprocess.run([WRITER], env=env, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "sample writer exit %d: %s" % (r.returncode, r.stderr))
        names = sorted(os.listdir(out))
        check(names == ["all-fields.json", "gpu-index.json", "gpu-uuid.json"],
              "sample files: %r" % names)
        docs = {}
        for n in names:
            p = os.path.join(out, n)
            check(stat.S_IMODE(os.stat(p).st_mode) == 0o644, n + ": mode 0644")
            with open(p) as f:
                docs[n] = json.load(f)
            errs = errors(v, docs[n])
            check(errs == [], "%s: schema errors %r" % (n, errs))

    # spot checks of the samples themselves
    g = docs.get("gpu-uuid.json", {})
    check(g.get("cdiVersion") == "0.5.0", "gpu-uuid cdiVersion %r" % g.get("cdiVersion"))
    check(g.get("kind") == "k8s.device-plugin.nvidia.com/gpu", "gpu-uuid kind")
    devs = g.get("devices", [])
    check(len(devs) == 9 and devs[-1]["name"] == "all", "gpu-uuid: 8 GPUs + all")
    if devs:
        paths = [n["path"] for n in devs[-1]["containerEdits"]["deviceNodes"]]
        check(paths == ["/dev/nvidia%d" % i for i in range(8)], "all: union %r" % paths)
    check(docs.get("gpu-index.json", {}).get("devices", [{}])[0].get("name") == "0",
          "gpu-index: index names")
    check(docs.get("all-fields.json", {}).get("cdiVersion") == "1.1.0", "all-fields: 1.1.0")

    # the SPEC.md example (spec-level containerEdits as an object) is valid
    example = {
        "cdiVersion": "0.6.0", "kind": "vendor.com/device",
        "devices": [{"name": "myDevice", "containerEdits": {"deviceNodes": [
            {"hostPath": "/vendorroot/dev/card1", "path": "/dev/card1"}]}}],
        "containerEdits": {
            "env": ["FOO=CDI_SPEC"],
            "mounts": [{"hostPath": "/usr/lib/libVendor.so.0",
                        "containerPath": "/usr/lib/libVendor.so.0"}],
            "hooks": [{"hookName": "createContainer", "path": "/bin/vendor-hook"}]}}
    check(errors(v, example) == [], "SPEC.md example: %r" % errors(v, example))

    # what the CDI spec forbids, the schema rejects
    base = docs.get("all-fields.json") or example

    def mutated(fn):
        doc = copy.deepcopy(base)
        fn(doc)
        return doc

    def dev(doc):
        return doc["devices"][0]

    def edits(doc):
        return dev(doc)["containerEdits"]

    def first(doc, key):
        return edits(doc).setdefault(key, [{}])[0]

    bad = {
        "unknown top field": lambda d: d.update(extra=1),
        "missing kind": lambda d: d.pop("kind"),
        "missing devices": lambda d: d.pop("devices"),
        "no devices": lambda d: d.update(devices=[]),
        "cdiVersion 0.2.0": lambda d: d.update(cdiVersion="0.2.0"),
        "cdiVersion 2.0": lambda d: d.update(cdiVersion="2.0"),
        "kind without class": lambda d: d.update(kind="vendor.com"),
        "kind with two slashes": lambda d: d.update(kind="vendor.com/foo/bar"),
        "vendor starts with digit": lambda d: d.update(kind="9vendor.com/foo"),
        "class of 64": lambda d: d.update(kind="v.com/" + "c" * 64),
        "device name with space": lambda d: dev(d).update(name="gpu 0"),
        "device name ends with ':'": lambda d: dev(d).update(name="gpu:"),
        "device without edits": lambda d: dev(d).pop("containerEdits"),
        "device with empty edits": lambda d: dev(d).update(containerEdits={}),
        "unknown device field": lambda d: dev(d).update(extra=1),
        "unknown edits field": lambda d: edits(d).update(devices=[]),
        "env without =": lambda d: edits(d).update(env=["FOO"]),
        "env with empty name": lambda d: edits(d).update(env=["=x"]),
        "node without path": lambda d: first(d, "deviceNodes").pop("path"),
        "node type x": lambda d: first(d, "deviceNodes").update(type="x"),
        "node permissions rwx": lambda d: first(d, "deviceNodes").update(permissions="rwx"),
        "node major string": lambda d: first(d, "deviceNodes").update(major="1"),
        "node uid negative": lambda d: first(d, "deviceNodes").update(uid=-1),
        "mount without containerPath": lambda d: first(d, "mounts").pop("containerPath"),
        "mount options string": lambda d: first(d, "mounts").update(options="ro"),
        "hook name prestop": lambda d: first(d, "hooks").update(hookName="prestop"),
        "hook relative path": lambda d: first(d, "hooks").update(path="bin/true"),
        "hook timeout 0": lambda d: first(d, "hooks").update(timeout=0),
        "gid too large": lambda d: edits(d).update(additionalGids=[4294967296]),
        "netDevice without name": lambda d: first(d, "netDevices").pop("name"),
        "annotation upper-case prefix": lambda d: d.update(annotations={"Vendor.com/a": "b"}),
        "annotation value not string": lambda d: d.update(annotations={"a": 1}),
    }
    for what, fn in bad.items():
        try:
            doc = mutated(fn)
        except (KeyError, IndexError) as e:
            check(False, "%s: cannot build (%r)" % (what, e))
            continue
        check(errors(v, doc) != [], "schema accepted: " + what)

    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok: %d samples valid, %d invalid documents rejected" % (len(docs), len(bad)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
