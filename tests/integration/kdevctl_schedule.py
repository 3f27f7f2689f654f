#!/usr/bin/python3
"""`kdevctl schedule` and `kdevctl quota` on the example files of
examples/control-plane/: the exact tables, -o json, exit statuses, the
never-charged quota warning, bad input, and a node read from the state file
that a real `kdevctl kubelet --state` run wrote.
Exit 0 pass, 1 fail.
"""
import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KDEVCTL = os.path.join(os.environ.get("KDEV_BUILD_DIR") or os.path.join(SRC, "build"), "kdevctl")
EX = os.path.join(SRC, "examples", "control-plane")
NODE, PODS, QUOTA, CLAIMS = (os.path.join(EX, f) for f in
                             ("node.yaml", "pods.yaml", "quota.yaml", "claims.yaml"))
RESULTS = []  # (what, passed)


def check(what, got, want):
    """Records one exact comparison and prints it (got/want as repr)."""
    RESULTS.append((what, got == want))
    if got == want:
        print("ok   " + what)
    else:
        print("FAIL %s\n  got:  %r\n  want: %r" % (what, got, want))


def run(*args):
    p = subprocess.run([KDEVCTL] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


HALF = ('Pod "half-gpu" is invalid: spec.containers[0].resources.requests[nvidia.com/gpu]: '
        'Invalid value: "500m": must be an integer')

rc, out, err = run("schedule", "--node", NODE, PODS)
check("schedule: table", out,
      "POD           FITS   STATUS          REASON\n"
      "ml/train      yes    Success         -\n"
      "ml/eval       no     Unschedulable   Insufficient nvidia.com/gpu\n"
      "ml/half-gpu   no     Invalid         " + HALF + "\n"
      "ml/infer      yes    Success         1 claim(s) not decided here\n")
check("schedule: exit status 1 when a pod does not fit", (rc, err), (1, ""))

rc, out, err = run("schedule", "--node", NODE, "-o", "json", PODS)
j = json.loads(out)
check("schedule -o json: eval's request (2 + the sidecar's 1)",
      (j["pods"][1]["requests"], j["pods"][1]["reasons"], j["pods"][1]["status"]),
      ({"nvidia.com/gpu": 3}, ["Insufficient nvidia.com/gpu"], "Unschedulable"))
check("schedule -o json: infer's claim is reported, not decided",
      (j["pods"][3]["fits"], j["pods"][3]["claims"]), (True, ["nic"]))
check("schedule -o json: the node after train and infer",
      j["node"], {"example.com/fpga": {"allocatable": 0, "requested": 0},
                  "nvidia.com/gpu": {"allocatable": 4, "requested": 3}})

# one pod that fits alone: exit 0
with tempfile.TemporaryDirectory() as tmp:
    one = os.path.join(tmp, "one.json")
    with open(one, "w") as f:
        json.dump({"kind": "Pod", "metadata": {"name": "one"},
                   "spec": {"containers": [{"name": "c", "resources":
                                            {"limits": {"nvidia.com/gpu": "4"}}}]}}, f)
    rc, out, err = run("schedule", "--node", NODE, "-o", "json", one)
    check("schedule: exit 0 when every pod fits",
          (rc, json.loads(out)["pods"][0]["status"]), (0, "Success"))

    # the node as a real kdevctl kubelet saw it: no plugin registered, no GPUs
    dp, state = os.path.join(tmp, "dp"), os.path.join(tmp, "state.json")
    os.mkdir(dp)
    p = subprocess.run([KDEVCTL, "kubelet", "--dir", dp, "--state", state, "--hold", "1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    check("kubelet --state wrote its file", (p.returncode, os.path.exists(state)), (0, True))
    rc, out, err = run("schedule", "--node", state, one)
    check("schedule over kdevctl kubelet's state",
          (rc, out), (1, "POD           FITS   STATUS                         REASON\n"
                         "default/one   no     UnschedulableAndUnresolvable   "
                         "Insufficient nvidia.com/gpu\n"))

    # a DeviceClass that maps nvidia.com/gpu on that node: DRA's to decide
    cls = os.path.join(tmp, "class.yaml")
    with open(cls, "w") as f:
        f.write("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\n"
                "spec: {extendedResourceName: nvidia.com/gpu}\n")
    rc, out, err = run("schedule", "--node", state, "--classes", cls, "-o", "json", one)
    p0 = json.loads(out)["pods"][0]
    check("schedule: a DRA-backed extended resource is left to DRA",
          (rc, p0["fits"], p0["delegated"]), (0, True, ["nvidia.com/gpu"]))

    bad = os.path.join(tmp, "bad.yaml")
    with open(bad, "w") as f:
        f.write("kind: Pod\n  spec: [\n")
    rc, out, err = run("schedule", "--node", NODE, bad)
    check("schedule: a YAML error names file:line:column",
          (rc, out, err), (1, "", "kdevctl schedule: %s:2:7: mapping values are not allowed in "
                                  "this context\n" % bad))

rc, out, err = run("schedule", PODS)
check("schedule: --node is required", (rc, out, err),
      (2, "", "kdevctl schedule: --node FILE is required\n"
              "Run 'kdevctl schedule --help' for usage.\n"))
rc, out, err = run("schedule", "--node", PODS, PODS)
check("schedule: a node file with four objects",
      (rc, err), (1, "kdevctl schedule: %s: holds 4 objects; one node is expected\n" % PODS))

WARN = ('kdevctl quota: warning: ResourceQuota "gpu-quota": spec.hard[limits.nvidia.com/gpu] is '
        'never charged: quota counts extended resources only as requests.nvidia.com/gpu\n')
rc, out, err = run("quota", "--quota", QUOTA, PODS, CLAIMS)
check("quota: table", out,
      "KIND            OBJECT        ADMITTED   MESSAGE\n"
      "Pod             ml/train      yes        -\n"
      "Pod             ml/eval       no         pods \"eval\" is forbidden: exceeded quota: "
      "gpu-quota, requested: requests.nvidia.com/gpu=3, used: requests.nvidia.com/gpu=3, "
      "limited: requests.nvidia.com/gpu=4\n"
      "Pod             ml/half-gpu   no         " + HALF + "\n"
      "Pod             ml/infer      yes        -\n"
      "ResourceClaim   ml/one-gpu    yes        -\n"
      "ResourceClaim   ml/two-gpus   no         resourceclaims.resource.k8s.io \"two-gpus\" is "
      "forbidden: exceeded quota: gpu-quota, requested: "
      "gpu.nvidia.com.deviceclass.resource.k8s.io/devices=2, used: "
      "gpu.nvidia.com.deviceclass.resource.k8s.io/devices=2, limited: "
      "gpu.nvidia.com.deviceclass.resource.k8s.io/devices=2\n")
check("quota: exit 1 and the never-charged warning", (rc, err), (1, WARN))

rc, out, err = run("quota", "--quota", QUOTA, "-o", "json", CLAIMS)
j = json.loads(out)
check("quota -o json: both claims fit alone (1 + 1, then 2 + 2 > 2)",
      [(o["object"], o["allowed"]) for o in j["objects"]],
      [("ml/one-gpu", True), ("ml/two-gpus", False)])
check("quota -o json: used after the admitted claim", j["quotas"][0]["used"],
      {"requests.nvidia.com/gpu": "1", "limits.nvidia.com/gpu": "0",
       "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "2",
       "count/resourceclaims.resource.k8s.io": "2"})
check("quota -o json: the usage of the refused claim", j["objects"][1]["usage"],
      {"count/resourceclaims.resource.k8s.io": "1",
       "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "2",
       "requests.deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"})

rc, out, err = run("quota", "--quota", NODE, PODS)
check("quota: a Node is no quota",
      (rc, out, err), (1, "", 'kdevctl quota: Node "gpu-node-1" is not a ResourceQuota\n'))

for cmd in ("schedule", "quota"):
    rc, out, err = run(cmd, "--help")
    check("%s --help" % cmd, (rc, out.startswith("Usage: kdevctl %s " % cmd), err), (0, True, ""))

failed = [what for what, passed in RESULTS if not passed]
print("%d checks, %d failed%s" % (len(RESULTS), len(failed), ": " + ", ".join(failed) if failed else ""))
sys.exit(1 if failed else 0)
