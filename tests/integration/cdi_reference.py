"""The reference CDI library (tags.cncf.io/container-device-interface 0.8.0,
Debian's golang-tags.cncf-container-device-interface-dev; the library
containerd, CRI-O and podman use) as a consumer of every CDI spec kdev
writes: kdev-plugin's (GPU, MIG strategy mixed with a time-sliced MIG
profile, time-sliced GPUs) and kdev-dra-plugin's claim specs (a GPU, a MIG
device), on the mock NVML with a fake driver of mknod device nodes
(tests/pylib/cdi_consumer.py; one row per driver-root layout).

tests/cdi/validate/kdev-cdi-validate loads each spec directory into the
library's Cache with its JSON schema as validator (no error for any spec),
then injects the CDI device kdev named (kdevctl allocate / the claim's CDI
device ID) into an OCI spec; the injected device nodes (type, major, minor
from the nodes), cgroup device rules, env, mounts and hooks are checked
exactly. Runs in a private mount namespace (root). The library is built
offline by tests/cdi/validate/build.sh from the packages
scripts/deps.sh --test fetches; the test fails when they are missing."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
import cdi_consumer as cc  # noqa: E402

BUILD = os.path.join(kt.SOURCE_DIR, "tests", "cdi", "validate", "build.sh")


def build_validator():
    r = subprocess.run([BUILD], capture_output=True, text=True, timeout=600)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print("FAIL: cannot build kdev-cdi-validate (exit %d): %s" % (r.returncode, r.stderr))
        sys.exit(1)
    return r.stdout.strip()


def validate(exe, spec_dir, *devices):
    r = subprocess.run([exe, "-spec-dir", spec_dir, *devices], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr)
    return json.loads(r.stdout)


def want_oci(case):
    nodes = [{"path": p, "type": "c", "major": ma, "minor": mi} for p, ma, mi in case.nodes]
    rules = [{"allow": True, "type": "c", "major": ma, "minor": mi, "access": "rwm"}
             for _, ma, mi in case.nodes]
    # the library orders mounts by the depth of their container path (stable)
    mounts = sorted(({"destination": c, "source": h, "options": o} for c, h, o in case.mounts),
                    key=lambda m: m["destination"].count("/"))
    hooks = {}
    for name, path, args, env in case.hooks:
        hooks.setdefault(name, []).append({"path": path, "args": args, "env": env})
    return {"env": ["PATH=/usr/bin:/bin"] + case.env, "devices": nodes, "rules": rules,
            "mounts": mounts, "hooks": hooks}


def got_oci(oci):
    return {"env": oci["process"]["env"], "devices": oci["linux"].get("devices"),
            "rules": oci["linux"].get("resources", {}).get("devices"),
            "mounts": oci.get("mounts"), "hooks": oci.get("hooks")}


def check_layout(exe, layout, base):
    cases = cc.timed("layout %s: kdev specs" % layout.name, cc.collect, layout, base)
    # what the cases must cover: 5 kdev-plugin devices, 2 claims
    assert [c.cdi_name.split("=")[0] for c in cases] == \
        ["k8s.device-plugin.nvidia.com/gpu"] * 5 + ["k8s.gpu.nvidia.com/claim"] * 2, cases
    failures = []
    for c in cases:
        res = validate(exe, c.spec_dir, c.cdi_name)
        problems = []
        if res["errors"] or res["dirErrors"]:
            problems.append("rejected: %s %s" % (json.dumps(res["errors"]), res["dirErrors"]))
        if c.cdi_name not in res["devices"]:
            problems.append("%s not among the library's devices %s" % (c.cdi_name, res["devices"]))
        if res["unresolved"] or res["injectError"]:
            problems.append("inject: unresolved %s, error %r" % (res["unresolved"],
                                                                 res["injectError"]))
        got, want = got_oci(res["oci"]), want_oci(c)
        if got != want:
            problems.append("injected\n  got  %s\n  want %s" % (json.dumps(got), json.dumps(want)))
        status = "ok" if not problems else "FAIL"
        print("%s: layout %s: %s" % (status, layout.name, c), flush=True)
        for p in problems:
            print("   ", p)
            failures.append("%s: %s" % (c, p))
    # a spec the library rejects is reported (the check itself can fail)
    bad = os.path.join(base, "bad")
    os.makedirs(bad)
    with open(os.path.join(cases[0].spec_dir, os.listdir(cases[0].spec_dir)[0])) as f:
        spec = json.load(f)
    spec["devices"][0]["name"] = "GPU 0"
    with open(os.path.join(bad, "bad.json"), "w") as f:
        json.dump(spec, f)
    res = validate(exe, bad)
    want = {os.path.join(bad, "bad.json"): [
        "failed to load CDI Spec invalid CDI Spec: failed add device \"GPU 0\": invalid "
        "character ' ' in device name \"GPU 0\""]}
    if res["errors"] != want or res["devices"]:
        failures.append("a device name with a blank was not rejected as expected: %s" % res)
    return failures


def main():
    cc.enter_private_mounts()
    if not os.path.exists(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", kt.MOCK_NVML_DIR)
        return 1
    exe = cc.timed("kdev-cdi-validate build", build_validator)
    failures = []
    for i, layout in enumerate(cc.LAYOUTS):
        failures += check_layout(exe, layout, os.path.join(cc.BASE, "layout%d" % i))
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok: every kdev CDI spec accepted and injected by the reference CDI library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
