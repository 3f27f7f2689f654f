"""Writes tests/data/sched/{classes,cases,slices-partitionable,slices-shared,
slices-tainted}.json, the table of tests/unit/test_sched_allocator.c (README.md
beside this file). The expected values are written here by hand; edit this
file, run it, and commit both. The slices of the mock topologies are captured
by capture_slices.py instead."""
import json
import os

D = os.path.dirname(os.path.abspath(__file__)) + "/"
NV = "gpu.nvidia.com"
GPU_SEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_SEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
TS_CFG = {"opaque": {"driver": NV, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}
def cls(name, sels, config=None):
    c = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
         "spec": {"selectors": [{"cel": {"expression": s}} for s in sels]}}
    if config: c["spec"]["config"] = config
    return c
classes = [cls("gpu.nvidia.com", [GPU_SEL]), cls("mig.nvidia.com", [MIG_SEL]),
           cls("gpu-ts.nvidia.com", [GPU_SEL], [TS_CFG]),
           cls("gpu.example.com", ["device.driver == 'gpu.example.com'"])]

def dump_slices(d, dst):
    lines = ['[']
    for i, s in enumerate(d):
        spec = dict(s['spec']); devs = spec.pop('devices', None)
        end = ',' if i < len(d) - 1 else ''
        if devs is None:
            lines.append(' ' + json.dumps(s) + end); continue
        head = json.dumps({"metadata": s['metadata'], "spec": spec})[:-2]
        lines.append(' ' + head + ', "devices": [')
        for j, dv in enumerate(devs):
            lines.append('   ' + json.dumps(dv) + (',' if j < len(devs) - 1 else ''))
        lines.append(' ]}}' + end)
    lines.append(']')
    open(D + dst, 'w').write('\n'.join(lines) + '\n')

# partitionable: one H100 with NVIDIA's DynamicMIG model (a counter set per GPU,
# multiprocessors and one counter per memory slice), 1.35 layout (counters in
# their own slice)
PARENT = "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e"
def pdev(name, typ, profile, sms, start, size):
    a = {"type": {"string": typ}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
         "parentUUID" if typ == "mig" else "uuid": {"string": PARENT}}
    if profile: a["profile"] = {"string": profile}
    ctr = {"multiprocessors": {"value": str(sms)}}
    for k in range(start, start + size): ctr["memory-slice-%d" % k] = {"value": "1"}
    return {"name": name, "attributes": a, "capacity": {"multiprocessors": {"value": str(sms)}},
            "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": ctr}]}
sets = {"multiprocessors": {"value": "132"}}
for k in range(8): sets["memory-slice-%d" % k] = {"value": "1"}
part = [
    {"metadata": {"name": "node-a-gpu.nvidia.com-counters"},
     "spec": {"driver": NV, "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
              "sharedCounters": [{"name": "gpu-0-counter-set", "counters": sets}]}},
    {"metadata": {"name": "node-a-gpu.nvidia.com-devices"},
     "spec": {"driver": NV, "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
              "devices": [pdev("gpu-0", "gpu", None, 132, 0, 8),
                          pdev("gpu-0-mig-3g40gb-9-0", "mig", "3g.40gb", 60, 0, 4),
                          pdev("gpu-0-mig-3g40gb-9-4", "mig", "3g.40gb", 60, 4, 4)] +
                         [pdev("gpu-0-mig-1g10gb-19-%d" % k, "mig", "1g.10gb", 16, k, 1) for k in range(4)]}}]
dump_slices(part, "slices-partitionable.json")

# shareable: two devices with allowMultipleAllocations and a memory request
# policy (the dra-example-driver's gpu profile: validRange min 1Gi, step 1Gi,
# default the whole memory)
def sdev(i):
    return {"name": "gpu-%d" % i, "allowMultipleAllocations": True,
            "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "index": {"int": i}},
            "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "80Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}}
shared = [{"metadata": {"name": "node-a-gpu.example.com"},
           "spec": {"driver": "gpu.example.com", "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                    "devices": [sdev(0), sdev(1)]}}]
dump_slices(shared, "slices-shared.json")
# tainted: device taints (the DeviceTaints feature): gpu-0 NoSchedule, gpu-1
# an effect that does not block (None)
def tdev(i, effect):
    return {"name": "gpu-%d" % i, "attributes": {"index": {"int": i}},
            "taints": [{"key": "example.com/unhealthy", "value": "xid-79", "effect": effect}]}
tainted = [{"metadata": {"name": "node-a-gpu.example.com-tainted"},
            "spec": {"driver": "gpu.example.com", "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                     "devices": [tdev(0, "NoSchedule"), tdev(1, "None")]}}]
dump_slices(tainted, "slices-tainted.json")
json.dump(classes, open(D + "classes.json", "w"), indent=1)
open(D + "classes.json", "a").write("\n")

NODESEL = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
def claim(name, reqs, constraints=None, config=None):
    c = {"metadata": {"name": name, "namespace": "default", "uid": "uid-" + name},
         "spec": {"devices": {"requests": reqs}}}
    if constraints: c["spec"]["devices"]["constraints"] = constraints
    if config: c["spec"]["devices"]["config"] = config
    return c
def ex(name, klass=NV, count=None, sels=(), mode=None, admin=False, cap=None):
    e = {"deviceClassName": klass}
    if count is not None: e["count"] = count
    if mode: e["allocationMode"] = mode
    if sels: e["selectors"] = [{"cel": {"expression": s}} for s in sels]
    if admin: e["adminAccess"] = True
    if cap: e["capacity"] = {"requests": cap}
    return {"name": name, "exactly": e}
def fa(name, subs):
    out = []
    for (n, k, count, sels) in subs:
        e = {"name": n, "deviceClassName": k}
        if count: e["count"] = count
        if sels: e["selectors"] = [{"cel": {"expression": s}} for s in sels]
        out.append(e)
    return {"name": name, "firstAvailable": out}
def r(req, dev, driver=NV, **kw):
    x = {"request": req, "driver": driver, "pool": "node-a", "device": dev}
    x.update(kw)
    return x
def alloc(results, config=None, nodesel=True):
    a = {"devices": {"results": results}}
    if config: a["devices"]["config"] = config
    if nodesel: a["nodeSelector"] = NODESEL
    return {"allocation": a}
def allocated(name, devs):
    return {"metadata": {"name": name, "namespace": "default"},
            "status": {"allocation": {"devices": {"results": [r("gpu", d) for d in devs]}}}}

PROD = 'device.attributes["gpu.nvidia.com"].productName == "H200"'
MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
H = ["slices-h100-8x.json"]; M = ["slices-mig-h100-8x-mixed.json"]
P = ["slices-partitionable.json"]; S = ["slices-shared.json"]
def prof(p): return 'device.attributes["gpu.nvidia.com"].profile == "%s"' % p
cases = []
def case(name, slices, claims, allocated_=None):
    c = {"name": name, "slices": slices}
    if allocated_: c["allocated"] = allocated_
    c["claims"] = [dict(claim=cl, **want) for cl, want in claims]
    cases.append(c)

# --- whole GPUs (h100-80gb-8x-nvswitch) ---
case("whole GPU: the first one", H, [(claim("w1", [ex("gpu")]), alloc([r("gpu", "gpu-0")]))])
case("whole GPUs: count 2 beside an allocated claim", H,
     [(claim("w2", [ex("gpu", count=2)]), alloc([r("gpu", "gpu-1"), r("gpu", "gpu-2")]))],
     [allocated("other", ["gpu-0"])])
case("whole GPUs: allocationMode All", H,
     [(claim("w3", [ex("gpu", mode="All")]), alloc([r("gpu", "gpu-%d" % i) for i in range(8)]))])
case("whole GPUs: allocationMode All with one in use", H,
     [(claim("w3b", [ex("gpu", mode="All")]),
       {"reasons": ["request gpu: 8 devices needed, 8 of class gpu.nvidia.com match, 7 free: 1 allocated to other claims"]})],
     [allocated("other", ["gpu-5"])])
case("whole GPUs: the issue's product selector", H,
     [(claim("w4", [ex("gpu", sels=[PROD])]),
       {"reasons": ['request gpu: no device of class gpu.nvidia.com matches `' + PROD + '`: 8 devices checked, 8 rejected \u2014 productName is "NVIDIA H100 80GB HBM3"']})])
case("whole GPUs: memory with the quantity library", H,
     [(claim("w5", [ex("gpu", sels=[MEM])]),
       {"reasons": ['request gpu: no device of class gpu.nvidia.com matches `' + MEM + '`: 8 devices checked, 8 rejected \u2014 memory is 81559Mi']})])
case("whole GPUs: more than the node has", H,
     [(claim("w6", [ex("gpu", count=9)]),
       {"reasons": ["request gpu: 9 devices needed, 8 of class gpu.nvidia.com match: 8 devices checked, 0 rejected"]})])
case("whole GPUs: seven in use, two wanted, then admin access", H,
     [(claim("w7", [ex("gpu", count=2)]),
       {"reasons": ["request gpu: 2 devices needed, 8 of class gpu.nvidia.com match, 1 free: 7 allocated to other claims"]}),
      (claim("w7-admin", [ex("gpu", count=2, admin=True)]),
       alloc([r("gpu", "gpu-0", adminAccess=True), r("gpu", "gpu-1", adminAccess=True)])),
      (claim("w7-one", [ex("gpu")]), alloc([r("gpu", "gpu-7")])),
      (claim("w7-none", [ex("gpu")]),
       {"reasons": ["request gpu: 1 device needed, 8 of class gpu.nvidia.com match, 0 free: 8 allocated to other claims"]})],
     [allocated("other", ["gpu-%d" % i for i in range(7)])])
case("whole GPUs: matchAttribute across requests", H,
     [(claim("w8", [ex("a"), ex("b", sels=['device.attributes["gpu.nvidia.com"].index >= 4'])],
             [{"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/productName"}]),
       alloc([r("a", "gpu-0"), r("b", "gpu-4")])),
      (claim("w9", [ex("a"), ex("b")], [{"matchAttribute": "gpu.nvidia.com/pcieBusID"}]),
       {"reasons": ["claim default/w9: no combination of free devices satisfies the claim's constraints (matchAttribute gpu.nvidia.com/pcieBusID)"]}),
      (claim("w10", [ex("a", count=2)], [{"requests": ["a"], "matchAttribute": "gpu.nvidia.com/driverVersion"}]),
       alloc([r("a", "gpu-1"), r("a", "gpu-2")]))])
case("whole GPUs: each claim takes the next devices", H,
     [(claim("w11-%d" % i, [ex("gpu", count=3)]),
       alloc([r("gpu", "gpu-%d" % (3 * i + k)) for k in range(3)])) for i in range(2)] +
     [(claim("w11-2", [ex("gpu", count=3)]),
       {"reasons": ["request gpu: 3 devices needed, 8 of class gpu.nvidia.com match, 2 free: 6 allocated to other claims"]})])

# --- prioritized lists ---
H200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"'
case("firstAvailable: the second sub-request", H,
     [(claim("f1", [fa("gpu", [("h200", NV, None, [H200]), ("h100", NV, 2, [])])]),
       alloc([r("gpu/h100", "gpu-0"), r("gpu/h100", "gpu-1")]))])
case("firstAvailable: a later request makes the first choice fail", H,
     [(claim("f2", [fa("big", [("eight", NV, 8, []), ("four", NV, 4, [])]), ex("one")]),
       alloc([r("big/four", "gpu-%d" % i) for i in range(4)] + [r("one", "gpu-4")]))])
case("firstAvailable: nothing fits, each sub-request explained", H,
     [(claim("f3", [fa("gpu", [("h200", NV, None, [H200]), ("mig", "mig.nvidia.com", None, [])])]),
       {"reasons": ['request gpu/h200: no device of class gpu.nvidia.com matches `' + H200 + '`: 8 devices checked, 8 rejected \u2014 productName is "NVIDIA H100 80GB HBM3"',
                    'request gpu/mig: no device matches class mig.nvidia.com: 8 devices checked, 8 rejected \u2014 driver is "gpu.nvidia.com"; type is "gpu"']})])

case("a class that matches nothing on the node: the line names the class", H,
     [(claim("f4", [ex("mig", klass="mig.nvidia.com", sels=[prof("1g.10gb")])]),
       {"reasons": ['request mig: no device matches class mig.nvidia.com: 8 devices checked, 8 rejected \u2014 driver is "gpu.nvidia.com"; type is "gpu"']})])

# --- configs ---
GC = {"opaque": {"driver": NV, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}}}
case("configs: the class's and the claim's", H,
     [(claim("c1", [ex("ts", klass="gpu-ts.nvidia.com"), ex("plain")],
             config=[dict(requests=["plain"], **GC), GC]),
       alloc([r("ts", "gpu-0"), r("plain", "gpu-1")],
             config=[dict(source="FromClass", requests=["ts"], **TS_CFG),
                     dict(source="FromClaim", requests=["plain"], **GC),
                     dict(source="FromClaim", **GC)])),
      (claim("c2", [ex("ts", klass="gpu-ts.nvidia.com")], config=[dict(requests=["ts"], **GC)]),
       alloc([r("ts", "gpu-2")], config=[dict(source="FromClass", **TS_CFG), dict(source="FromClaim", **GC)]))])

# --- MIG (mig-h100-80gb-8x-mixed) ---
MIG = "mig.nvidia.com"
case("MIG: two 1g.10gb", M,
     [(claim("m1", [ex("mig", klass=MIG, count=2, sels=[prof("1g.10gb")])]),
       alloc([r("mig", "gpu-1-mig-1g10gb-19-5"), r("mig", "gpu-1-mig-1g10gb-19-6")]))])
case("MIG: matchAttribute parentUUID needs backtracking", M,
     [(claim("m2", [ex("a", klass=MIG, sels=[prof("1g.10gb")]), ex("b", klass=MIG, count=6, sels=[prof("1g.10gb")])],
             [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]),
       alloc([r("a", "gpu-3-mig-1g10gb-19-0")] + [r("b", "gpu-3-mig-1g10gb-19-%d" % k) for k in range(1, 7)]))])
case("MIG: matchAttribute parentUUID cannot hold", M,
     [(claim("m3", [ex("a", klass=MIG, sels=[prof("1g.10gb")]), ex("b", klass=MIG, sels=[prof("7g.80gb")])],
             [{"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/parentUUID"}]),
       {"reasons": ["claim default/m3: no combination of free devices satisfies the claim's constraints (matchAttribute gpu.nvidia.com/parentUUID)"]})])
case("MIG: a whole GPU and a MIG device in one claim", M,
     [(claim("m4", [ex("gpu"), ex("mig", klass=MIG, sels=[prof("7g.80gb")])]),
       alloc([r("gpu", "gpu-4"), r("mig", "gpu-2-mig-7g80gb-0-0")]))])
case("MIG: a profile the node lacks", M,
     [(claim("m5", [ex("mig", klass=MIG, sels=[prof("2g.10gb")])]),
       {"reasons": ['request mig: no device of class mig.nvidia.com matches `' + prof("2g.10gb") + '`: 19 devices checked, 19 rejected (4 by the class\'s selectors) \u2014 profile is "3g.40gb" (1), "2g.20gb" (1), "1g.20gb" (1), "4g.40gb" (1), ...']})])

# --- partitionable devices (shared counters) ---
case("partitionable: placements exclude each other and the whole GPU", P,
     [(claim("p1", [ex("mig", klass=MIG, sels=[prof("1g.10gb")])]), alloc([r("mig", "gpu-0-mig-1g10gb-19-0")])),
      (claim("p2", [ex("mig", klass=MIG, sels=[prof("3g.40gb")])]), alloc([r("mig", "gpu-0-mig-3g40gb-9-4")])),
      (claim("p3", [ex("gpu")]),
       {"reasons": ["request gpu: 1 device needed, 1 of class gpu.nvidia.com matches, 0 free: 1 without shared counters left"]}),
      (claim("p4", [ex("mig", klass=MIG, sels=[prof("3g.40gb")])]),
       {"reasons": ["request mig: 1 device needed, 2 of class mig.nvidia.com match `" + prof("3g.40gb") + "`, 0 free: 1 allocated to other claims, 1 without shared counters left"]}),
      (claim("p5", [ex("mig", klass=MIG, count=3, sels=[prof("1g.10gb")])]),
       alloc([r("mig", "gpu-0-mig-1g10gb-19-%d" % k) for k in (1, 2, 3)]))])
case("partitionable: backtracking over overlapping placements in one claim", P,
     [(claim("p6", [ex("big", klass=MIG, sels=[prof("3g.40gb")]), ex("small", klass=MIG, sels=[prof("1g.10gb")])]),
       alloc([r("big", "gpu-0-mig-3g40gb-9-4"), r("small", "gpu-0-mig-1g10gb-19-0")])),
      (claim("p7", [ex("two", klass=MIG, count=2, sels=[prof("3g.40gb")])]),
       {"reasons": ["request two: 2 devices needed, 2 of class mig.nvidia.com match `" + prof("3g.40gb") + "`, 0 free: 1 allocated to other claims, 1 without shared counters left"]})])
case("partitionable: the whole GPU allocated", P,
     [(claim("p8", [ex("mig", klass=MIG, sels=[prof("1g.10gb")])]),
       {"reasons": ["request mig: 1 device needed, 4 of class mig.nvidia.com match `" + prof("1g.10gb") + "`, 0 free: 4 without shared counters left"]})],
     [allocated("whole", ["gpu-0"])])

# --- shareable devices (consumable capacity) ---
EX = "gpu.example.com"
def sr(req, dev, mem, share):
    return {"request": req, "driver": EX, "pool": "node-a", "device": dev, "shareID": share, "consumedCapacity": {"memory": mem}}
# kdev's shareIDs: a hash of the claim UID, the result index and the device
# (README "Structured allocator"), the values the allocator gives
SHARES = {
 "s1": "a9609c5a-9f3d-4fe1-b67d-91ac89e6f500",
 "s2": "a8dd0d72-a266-4180-8b9e-d23ee5e2d7d3",
 "s3": "2ce0f78d-bc2c-4b60-8901-510578b46573",
 "s5": "c866b023-16fb-4f4d-b213-203d2c6212ec",
 "s6a": "bac68e60-4ffb-465c-8dc3-007edb5405ff",
 "s6b": "aaf01fe6-c033-4ccc-bd25-005506eaee3f",
 "s7a": "daaf3cb0-d290-4b8f-82db-175918799cc2",
 "s7b": "16b01d16-29b5-48ac-ada5-0880cb6e428f"
}
def sid(k): return SHARES.get(k, "?")
case("shared capacity: requests rounded up the policy, devices shared", S,
     [(claim("s1", [ex("gpu", klass=EX, cap={"memory": "3.5Gi"})]), alloc([sr("gpu", "gpu-0", "4Gi", sid("s1"))])),
      (claim("s2", [ex("gpu", klass=EX, cap={"memory": "70Gi"})]), alloc([sr("gpu", "gpu-0", "70Gi", sid("s2"))])),
      (claim("s3", [ex("gpu", klass=EX, cap={"memory": "10Gi"})]), alloc([sr("gpu", "gpu-1", "10Gi", sid("s3"))])),
      (claim("s4", [ex("gpu", klass=EX)]),
       {"reasons": ["request gpu: 1 device needed, 2 of class gpu.example.com match, 0 free: 2 without the requested capacity left"]}),
      (claim("s5", [ex("gpu", klass=EX, cap={"memory": "0"})]), alloc([sr("gpu", "gpu-0", "1Gi", sid("s5"))])),
      (claim("s6", [ex("a", klass=EX, cap={"memory": "1Gi"}), ex("b", klass=EX, cap={"memory": "1Gi"})],
             [{"distinctAttribute": "gpu.example.com/index"}]),
       alloc([sr("a", "gpu-0", "1Gi", sid("s6a")), sr("b", "gpu-1", "1Gi", sid("s6b"))])),
      (claim("s7", [ex("a", klass=EX, cap={"memory": "1Gi"}), ex("b", klass=EX, cap={"memory": "1Gi"})]),
       alloc([sr("a", "gpu-0", "1Gi", sid("s7a")), sr("b", "gpu-0", "1Gi", sid("s7b"))]))])

# --- errors and missing classes ---
ROOT = 'device.attributes["gpu.nvidia.com"].pcieRoot == "pci0000:00"'
case("errors", H,
     [(claim("e1", [ex("gpu", sels=[ROOT])]),
       {"error": "claim default/e1: selector #0 on device gpu.nvidia.com/node-a/gpu-0: CEL runtime error: no such key: pcieRoot. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"}),
      (claim("e2", [ex("gpu", count=33)]), {"error": "claim default/e2: number of requested devices 33 exceeds the claim limit of 32"}),
      (claim("e3", [{"name": "gpu", "exactly": {}}]), {"error": "claim default/e3, request gpu: missing device class name (unsupported request type?)"}),
      (claim("e4", [ex("gpu", klass="nope")]), {"reasons": ["request gpu: device class nope does not exist"]}),
      (claim("e5", [ex("gpu", mode="Some")]), {"error": "claim default/e5, request gpu: unsupported count mode Some"}),
      (claim("e6", [ex("gpu")], [{}]), {"error": "claim default/e6, constraint #0: empty constraint (unsupported constraint type?)"}),
      (claim("e7", [{"name": "gpu", "exactly": {"deviceClassName": NV, "selectors": [{}]}}]),
       {"error": "claim default/e7, request gpu, selector #0: CEL expression empty (unsupported selector type?)"}),
      (claim("e8", [ex("gpu", sels=['device.attributes["gpu.nvidia.com"].productName'])]),
       {"error": "claim default/e8: selector #0 on device gpu.nvidia.com/node-a/gpu-0: CEL runtime error: CEL result of type string could not be converted to bool"}),
      (claim("e9", [ex("gpu", sels=['device.attributes["gpu.nvidia.com"].?pcieRoot.orValue("") == "pci0000:00"'])]),
       {"reasons": ['request gpu: no device of class gpu.nvidia.com matches `device.attributes["gpu.nvidia.com"].?pcieRoot.orValue("") == "pci0000:00"`: 8 devices checked, 8 rejected \u2014 pcieRoot is missing']})])

# --- device taints ---
TOL = [{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
def tex(name, tol=None):
    e = ex(name, klass="gpu.example.com")
    if tol: e["exactly"]["tolerations"] = tol
    return e
case("taints: NoSchedule blocks unless tolerated", ["slices-tainted.json"],
     [(claim("t1", [tex("gpu")]), alloc([r("gpu", "gpu-1", driver="gpu.example.com")])),
      (claim("t2", [tex("gpu")]),
       {"reasons": ["request gpu: 1 device needed, 2 of class gpu.example.com match, 0 free: 1 allocated to other claims, 1 with a taint the request does not tolerate"]}),
      (claim("t3", [tex("gpu", TOL)]), alloc([r("gpu", "gpu-0", driver="gpu.example.com", tolerations=TOL)]))])
case("errors: malformed requests", H,
     [(claim("e10", [{"name": "gpu", "firstAvailable": []}]),
       {"error": "claim default/e10, request gpu: firstAvailable has no subrequests"}),
      (claim("e11", [ex("a", count=2**62), ex("b", count=2**62), ex("c", count=2**62)]),
       {"error": "claim default/e11: number of requested devices 9223372036854775807 exceeds the claim limit of 32"}),
      (claim("e12", [ex("gpu", count=0)]), {"error": "claim default/e12, request gpu: exact count 0 is too small"}),
      (claim("e13", [{"name": "gpu"}]), {"error": "claim default/e13, request gpu: missing device class name (unsupported request type?)"}),
      (claim("e14", [ex("gpu")]), alloc([r("gpu", "gpu-0")]))])

with open(D + "cases.json", "w") as f:
    f.write("[\n")
    for i, c in enumerate(cases):
        f.write(json.dumps(c) + (",\n" if i < len(cases) - 1 else "\n"))
    f.write("]\n")
