"""Soak: random inventory changes against one kdev-plugin and `kdevctl kubelet`.

One kdev-plugin serves generic devices (example.com/kx: /dev/kx* of a fake
root, symlinks to /dev/null, /dev/zero, /dev/full) and the GPUs of the mock
NVML under migStrategy mixed (whole GPUs on nvidia.com/gpu, MIG devices on
nvidia.com/mig-<profile>); `kdevctl kubelet --state FILE` plays kubelet and
writes what it sees (per resource: state, device IDs, health). STEPS random
steps (default 200, seed SEED, both printed) are drawn from the table STEP_TYPES:

  node-add, node-remove, node-repoint   generic nodes appear, vanish, are re-pointed
  gpu-xid                               XID 79 on a GPU (Unhealthy, Healthy again
                                        after the quiet period)
  gpu-fault, gpu-repair                 a GPU lost / needing a reset / with a row
                                        remap pending, and repaired
  gpu-add, gpu-remove                   GPUs hot-added and removed (driver reload)
  mig-create, mig-destroy               the MIG layout changed (nvidia-mig-manager)
  kubelet-restart                       SIGHUP: kubelet's restart (sockets deleted)
  kubelet-exit                          kdevctl kubelet stopped and started again
  dir-recreate                          kubelet stopped, the device-plugins directory
                                        deleted and made again, kubelet started
                                        (DIR_RECREATE below)

After every step the test model (which IDs each resource must advertise and
with which health, including the time windows of grace periods and quiet
periods) is compared with the state file until they agree, within BOUND_S
(3 s; a repair: quiet period + probe interval + 1.5 s); the seconds each step
took are summed up per step type (p50, max). A generic node re-pointed must be
answered by Allocate with its new host path within the same bound. At the end
the inventory is put back as it was at start (restore()) and, once the state
file agrees with it, kdev-plugin's open file descriptors must be what they
were after start-up (the same resources served, the same sockets and
streams: nothing leaked) and its RSS growth is printed, and bounded (KDEV_SOAK_RSS_KIB, default 512) in a
build without sanitizers; the run time is printed.

KDEV_SOAK_SEED, KDEV_SOAK_STEPS override the seed and the number of steps;
KDEV_SOAK_DIR_RECREATE=0/1 overrides DIR_RECREATE, e.g.
  KDEV_BUILD_DIR=$PWD/build KDEV_SOAK_STEPS=2000 KDEV_SOAK_SEED=7 \\
    /usr/bin/python3 tests/integration/soak_live_inventory.py
"""
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import grpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import Plugin, TempDir, fd_count, rss_kib, sanitized, wait_for  # noqa: E402

SEED = int(os.environ.get("KDEV_SOAK_SEED") or 14)
STEPS = int(os.environ.get("KDEV_SOAK_STEPS") or 200)
RSS_BOUND_KIB = int(os.environ.get("KDEV_SOAK_RSS_KIB") or 512)
# Directory re-creation (issue 14 item 3): kdev-plugin notices its socket
# vanishing and registers again in the new directory. On by default.
DIR_RECREATE = os.environ.get("KDEV_SOAK_DIR_RECREATE", "1") == "1"
# A GPU resource whose last device left the node (the only MIG device of a
# profile destroyed) is served on, the device Unhealthy for
# KDEV_NVIDIA_WITHDRAW_GRACE (KDEV_SOAK_LAST_DEVICE_KEPT, default on; 0
# accepts the resource being stopped at once, kubelet marking its devices
# Unhealthy itself). A lost GPU (NVML GPU_IS_LOST) or one needing a reset
# keeps its devices, Unhealthy, through the rebuilds other changes trigger
# (kdev_nvidia_carry_faulted): "lost", and "reset-required" on MIG-enabled
# GPUs, are drawn (KDEV_SOAK_LOST_KEPT, default on; 0 draws neither).
LOST_KEPT = os.environ.get("KDEV_SOAK_LOST_KEPT", "1") == "1"
LAST_DEVICE_KEPT = os.environ.get("KDEV_SOAK_LAST_DEVICE_KEPT", "1") == "1"
SCALE = kt.TIMEOUT_SCALE
KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")

GEN = "example.com/kx"
GPU = "nvidia.com/gpu"
RESCAN = 1          # generic.rescanInterval, s
GEN_GRACE = 1       # generic.gracePeriod, s
REDISCOVER = 0.5    # KDEV_NVIDIA_REDISCOVER_INTERVAL, s
GPU_GRACE = 1.5     # KDEV_NVIDIA_WITHDRAW_GRACE, s
PROBE = 1           # health.probeInterval, s
QUIET = 2           # health.quietPeriod, s
BOUND_S = 3.0       # per step, s
SLACK = 1.5         # late side of every time window, s
TARGETS = ["/dev/null", "/dev/zero", "/dev/full"]
NODES = ["kx%d" % i for i in range(8)]

# GPUs: (uuid, MIG mode, present at start, [(mig uuid, profile index, gi,
# start, present at start)])
PROFILES = {0x0: "1g.5gb", 0x7: "1g.5gb.me", 0x9: "1g.10gb", 0x1: "2g.10gb", 0x2: "3g.20gb"}
GPUS = [
    ("GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69", 1, True, [
        ("MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f", 0x2, 2, 4, True),
        ("MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce", 0x1, 3, 0, True),
        ("MIG-d49257bf-597e-857d-3bb4-e6384c9909cc", 0x0, 9, 2, True),
        ("MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2", 0x0, 10, 3, True)]),
    ("GPU-4603f764-b00c-271e-0980-eda368e40931", 1, True, [
        ("MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046", 0x7, 7, 0, True),
        ("MIG-13018ca6-7bdc-00c0-5fef-20d32e6a3980", 0x9, 3, 2, True),
        ("MIG-3765aac0-d923-9d91-f7d4-9ab6bac2329a", 0x9, 5, 4, True),
        ("MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8", 0x0, 13, 6, True)]),
    ("GPU-0c8e873f-4cf7-689a-6647-0210cab49901", 1, True, [
        ("MIG-0e3f5a1c-2b7d-4c8e-9f60-a1b2c3d4e5f6", 0x0, 7, 0, False),
        ("MIG-1e3f5a1c-2b7d-4c8e-9f60-a1b2c3d4e5f7", 0x1, 3, 2, False)]),
    ("GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5", 0, True, []),
    ("GPU-5a1b2c3d-0001-4000-8000-00000000a004", 0, True, []),
    ("GPU-5a1b2c3d-0002-4000-8000-00000000a005", 0, False, []),
]

CONFIG = """version: v1
flags:
  migStrategy: mixed
health:
  probeInterval: %d
  quietPeriod: %d
generic:
  rescanInterval: %d
  gracePeriod: %d
  devices:
    - name: %s
      groups: [{paths: [{path: /dev/kx*}]}]
""" % (PROBE, QUIET, RESCAN, GEN_GRACE, GEN)


def topology_text():
    with open(os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies",
                           "mig-a100-40gb.yaml")) as f:
        head = f.read().split("\ngpus:\n")[0]
    out = [head, "gpus:"]
    for i, (uuid, mode, present, migs) in enumerate(GPUS):
        out.append("  - uuid: %s" % uuid)
        out.append('    pci_bus_id: "00000000:%02X:00.0"' % (0x07 + 8 * i))
        out.append("    minor: %d" % i)
        out.append("    numa_node: %d" % (i // 3))
        if not present:
            out.append("    present: 0")
        if mode == 0:
            out.append("    mig: {mode: 0}")
            continue
        out.append("    mig:\n      mode: 1\n      devices:" + ("" if migs else " []"))
        for m, prof, gi, start, mpresent in migs:
            out.append("        - {uuid: %s, profile: 0x%x, gi: %d, start: %d%s}"
                       % (m, prof, gi, start, "" if mpresent else ", present: 0"))
    return "\n".join(out) + "\n"


def sock_name(res):
    return "kdev-%s.sock" % res.replace("/", "_")


# ---------------------------------------------------------------- the model

class Dev:
    """One advertised device of the model: present (on the node) or gone at
    t_gone (Unhealthy until its grace period ends, then absent)."""

    def __init__(self, res, did, present, grace):
        self.res, self.id, self.present, self.grace = res, did, present, grace
        self.t_gone = None       # when it left the node
        self.seen = present      # advertised once: a gone one is Unhealthy, then dropped
        self.gpu = None          # its GPU (Gpu), for GPU and MIG devices
        self.on_gpu = True       # present when its GPU is (MIG devices of a GPU removed)


class Gpu:
    def __init__(self, uuid, mode, present):
        self.uuid, self.mode, self.present = uuid, mode, present
        self.fault = None        # "lost", "reset-required", "pending-remap"
        self.event = None        # (kind, t): the last XID or repair, Healthy after a window
        self.devs = []           # its Dev entries (the whole GPU or its MIG devices)


class Model:
    def __init__(self):
        self.devs = {}
        self.gpus = []
        self.targets = {}        # generic node -> target
        for n in NODES[:3]:
            self.targets[n] = TARGETS[len(self.targets) % 3]
            self.devs[(GEN, n)] = Dev(GEN, n, True, GEN_GRACE)
        for uuid, mode, present, migs in GPUS:
            g = Gpu(uuid, mode, present)
            self.gpus.append(g)
            if mode == 0:
                d = Dev(GPU, uuid, present, GPU_GRACE)
                d.gpu = g
                g.devs.append(d)
                self.devs[(GPU, uuid)] = d
            for m, prof, _, _, mpresent in migs:
                d = Dev("nvidia.com/mig-" + PROFILES[prof], m, present and mpresent, GPU_GRACE)
                d.gpu = g
                d.on_gpu = mpresent
                g.devs.append(d)
                self.devs[(d.res, m)] = d

    def resources(self):
        return sorted({d.res for d in self.devs.values()})

    def gpu_health(self, g, now):
        """Set of acceptable healths of GPU |g|'s devices at |now|."""
        if g.fault:
            return {"Unhealthy"}
        if not g.event:
            return {"Healthy"}
        kind, t = g.event
        lo = t + (QUIET if kind == "xid" else QUIET - PROBE) - 0.1
        hi = t + QUIET + PROBE + SLACK
        if now < lo:
            return {"Unhealthy"}
        if now > hi:
            return {"Healthy"}
        return {"Healthy", "Unhealthy"}

    def acceptable(self, d, now):
        """Set of acceptable states of |d| at |now|: Healthy, Unhealthy, absent."""
        if d.present:
            return self.gpu_health(d.gpu, now) if d.gpu else {"Healthy"}
        if not d.seen:
            return {"absent"}
        detect = REDISCOVER if d.gpu else 0
        if now < d.t_gone + d.grace - 0.1:
            return {"Unhealthy"}
        if now > d.t_gone + detect + d.grace + SLACK:
            return {"absent"}
        return {"Unhealthy", "absent"}

    def mismatches(self, state, now):
        """What disagrees between the model and kubelet's |state| (the state
        file, parsed) at |now|: a list of strings, empty when they agree."""
        seen = {r["name"]: r for r in state["resources"]}
        bad = []
        for res in self.resources():
            devs = [d for d in self.devs.values() if d.res == res]
            want = {d.id: self.acceptable(d, now) for d in devs}
            r = seen.get(res)
            got = {} if r is None else {x["id"]: x["health"] for x in r["devices"]}
            must_serve = any(d.present for d in devs) or (
                LAST_DEVICE_KEPT and any("absent" not in a for a in want.values()))
            if r is None or r["state"] != "connected":
                if must_serve:
                    bad.append("%s: %s, want served with %s" % (
                        res, "unknown to kubelet" if r is None else r["state"], want))
                elif any(h == "Healthy" for h in got.values()):
                    bad.append("%s: %s with Healthy devices %s" % (res, r["state"], got))
                continue
            if r["endpoint"] != sock_name(res):
                bad.append("%s: endpoint %s" % (res, r["endpoint"]))
            for did, acc in sorted(want.items()):
                h = got.get(did, "absent")
                if h not in acc:
                    bad.append("%s %s: %s, want %s" % (res, did, h, "/".join(sorted(acc))))
            for did in sorted(set(got) - set(want)):
                bad.append("%s %s: advertised, unknown to the model" % (res, did))
        for res in sorted(set(seen) - set(self.resources())):
            bad.append("%s: a resource the model does not have" % res)
        return bad


# ---------------------------------------------------------------- the harness

class Kubelet:
    """`kdevctl kubelet --state FILE` on DIR."""

    def __init__(self, directory, state, n):
        self.err_path = os.path.join(os.path.dirname(directory), "kubelet-%d.err" % n)
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([KDEVCTL, "kubelet", "--dir", directory, "--state", state,
                                      "--dial-timeout", "2"],
                                     stdout=subprocess.DEVNULL, stderr=self.err)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(20 * SCALE)
        self.err.close()
        return rc


def read_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"updates": 0, "resources": []}





class Soak:
    def __init__(self, d):
        self.d = d
        self.root = os.path.dirname(d)
        self.state = os.path.join(self.root, "kubelet-state.json")
        self.ctl = os.path.join(self.root, "nvml-control")
        self.fake = os.path.join(self.root, "root")
        os.makedirs(os.path.join(self.fake, "dev"))
        self.m = Model()
        for n, t in self.m.targets.items():
            self.link(n, t)
        open(self.ctl, "w").close()
        topo = os.path.join(self.root, "topology.yaml")
        with open(topo, "w") as f:
            f.write(topology_text())
        self.kubelets = 0
        self.k = self.kubelet()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": topo,
               "KDEV_MOCK_NVML_CONTROL": self.ctl, "KDEV_MOCK_NVML_PROC":
               os.path.join(self.root, "proc"),
               "KDEV_NVIDIA_REDISCOVER_INTERVAL": str(REDISCOVER),
               "KDEV_NVIDIA_WITHDRAW_GRACE": str(GPU_GRACE)}
        self.p = Plugin(d, CONFIG, env=env, extra=(
            "--root", self.fake, "--cdi-dir", os.path.join(self.root, "cdi"),
            "--proc-root", os.path.join(self.root, "proc"), "--log-level", "info"))
        self.took = {}

    def kubelet(self):
        self.kubelets += 1
        return Kubelet(self.d, self.state, self.kubelets)

    def link(self, name, target):
        p = os.path.join(self.fake, "dev", name)
        os.symlink(target, p + ".tmp")
        os.rename(p + ".tmp", p)

    def control(self, line):
        with open(self.ctl, "a") as f:
            f.write(line + "\n")

    def converge(self, what, bound=BOUND_S, must=()):
        """Waits until the state file agrees with the model and every
        (resource, id, health) of |must| holds; returns the seconds taken."""
        t0 = time.monotonic()
        last = None
        while True:
            now = time.monotonic()
            st = read_state(self.state)
            # kubelet's view: a stopped resource's devices are Unhealthy
            got = {(r["name"], x["id"]): x["health"] for r in st["resources"]
                   for x in r["devices"]}
            bad = self.m.mismatches(st, now)
            bad += ["%s %s: %s, the step wants %s" % (res, did, got.get((res, did), "absent"), h)
                    for res, did, h in must if got.get((res, did), "absent") != h]
            if not bad:
                return now - t0
            if now - t0 > bound * SCALE:
                raise AssertionError("%s: no agreement after %.1f s:\n  %s\nkubelet state: %s"
                                     % (what, now - t0, "\n  ".join(bad),
                                        json.dumps(st["resources"])))
            if bad != last:
                last = bad
            time.sleep(0.02)

    # ---- the steps: each returns (what, bound, must) or None when it does not apply

    def node_add(self, rng, now):
        cands = [n for n in NODES if not os.path.lexists(os.path.join(self.fake, "dev", n))]
        if not cands:
            return None
        n = rng.choice(cands)
        t = rng.choice(TARGETS)
        self.link(n, t)
        self.m.targets[n] = t
        d = self.m.devs.setdefault((GEN, n), Dev(GEN, n, True, GEN_GRACE))
        d.present = d.seen = True
        return "add %s -> %s" % (n, t), BOUND_S, [(GEN, n, "Healthy")]

    def node_remove(self, rng, now):
        cands = [n for n in NODES if os.path.lexists(os.path.join(self.fake, "dev", n))]
        if not cands:
            return None
        n = rng.choice(cands)
        os.unlink(os.path.join(self.fake, "dev", n))
        self.m.targets.pop(n)
        d = self.m.devs[(GEN, n)]
        d.present, d.t_gone = False, now
        return "remove %s" % n, BOUND_S, [(GEN, n, "Unhealthy")]

    def node_repoint(self, rng, now):
        cands = sorted(self.m.targets)
        if not cands:
            return None
        n = rng.choice(cands)
        t = rng.choice([x for x in TARGETS if x != self.m.targets[n]])
        self.link(n, t)
        self.m.targets[n] = t
        self.repointed = (n, t)
        return "re-point %s -> %s" % (n, t), BOUND_S, []

    def healthy_gpus(self, now):
        """Present GPUs, not faulted, out of every health window, with a
        device advertised."""
        return [g for g in self.m.gpus if g.present and not g.fault and
                self.m.gpu_health(g, now) == {"Healthy"} and any(d.present for d in g.devs)]

    def gpu_xid(self, rng, now):
        cands = self.healthy_gpus(now)
        if not cands:
            return None
        g = rng.choice(cands)
        self.control("xid %s 79" % g.uuid)
        g.event = ("xid", now)
        return "XID 79 on %s" % g.uuid, BOUND_S, [(d.res, d.id, "Unhealthy")
                                                  for d in g.devs if d.present]

    def gpu_fault(self, rng, now):
        cands = self.healthy_gpus(now)
        if not cands:
            return None
        g = rng.choice(cands)
        # As on a real GPU, the state comes with its event: NVML has no event
        # for a row remap or a needed reset by themselves (kdev probes only
        # GPUs it marked, and at start), the driver reports XID 63 (row
        # remapping) / 48 (double-bit ECC); a lost GPU fails the event wait.
        kinds = ["pending-remap"]
        if LOST_KEPT:
            kinds.append("lost")
        if LOST_KEPT or g.mode == 0:
            kinds.append("reset-required")
        g.fault = rng.choice(kinds)
        self.control("%s %s 1" % (g.fault, g.uuid))
        if g.fault == "lost":
            # The event wait fails: every GPU is Unhealthy (as NVIDIA's
            # plugin does), the others Healthy again after the quiet period.
            for o in self.m.gpus:
                if o is not g and o.present and not o.fault:
                    o.event = ("xid", now)
        if g.fault != "lost":
            self.control("xid %s %d" % (g.uuid, 63 if g.fault == "pending-remap" else 48))
        return "%s %s" % (g.fault, g.uuid), BOUND_S, [(d.res, d.id, "Unhealthy")
                                                      for d in g.devs if d.present]

    def gpu_repair(self, rng, now):
        cands = [g for g in self.m.gpus if g.fault]
        if not cands:
            return None
        g = rng.choice(cands)
        self.control("%s %s 0" % (g.fault, g.uuid))
        what = "repair (%s) %s" % (g.fault, g.uuid)
        g.fault, g.event = None, ("repair", now)
        return what, QUIET + PROBE + SLACK, [(d.res, d.id, "Healthy")
                                             for d in g.devs if d.present]

    def gpu_add(self, rng, now):
        cands = [g for g in self.m.gpus if not g.present]
        if not cands:
            return None
        g = rng.choice(cands)
        self.control("gpu-add %s" % g.uuid)
        g.present = True
        must = []
        for d in g.devs:
            if d.on_gpu:  # the MIG devices it had (a whole GPU: itself)
                d.present = d.seen = True
                d.t_gone = None
                must.append((d.res, d.id, "Healthy"))
        return "gpu-add %s" % g.uuid, BOUND_S, must

    def gpu_remove(self, rng, now):
        cands = [g for g in self.healthy_gpus(now)]
        if not cands:
            return None
        g = rng.choice(cands)
        self.control("gpu-remove %s" % g.uuid)
        g.present = False
        must = []
        for d in g.devs:
            d.on_gpu = d.present
            if d.present:
                d.present, d.t_gone = False, now
                must.append((d.res, d.id, "Unhealthy"))
        return "gpu-remove %s" % g.uuid, BOUND_S, must

    def mig_create(self, rng, now):
        # A GPU lost or needing a reset has a MIG layout nobody can change
        # or read (kdev carries its last known devices): not drawn.
        cands = [d for g in self.m.gpus if g.present and g.mode == 1 and g.fault not in
                 ("lost", "reset-required") for d in g.devs if not d.present]
        if not cands:
            return None
        d = rng.choice(cands)
        self.control("mig-create %s" % d.id)
        d.present = d.seen = True
        d.t_gone = None
        healthy = self.m.gpu_health(d.gpu, now) == {"Healthy"}
        return "mig-create %s (%s)" % (d.id, d.res), BOUND_S, [(d.res, d.id, "Healthy")] \
            if healthy else []

    def mig_destroy(self, rng, now):
        cands = [d for g in self.m.gpus if g.present and g.mode == 1 and g.fault not in
                 ("lost", "reset-required") for d in g.devs if d.present]
        if not cands:
            return None
        d = rng.choice(cands)
        self.control("mig-destroy %s" % d.id)
        d.present, d.t_gone = False, now
        return "mig-destroy %s (%s)" % (d.id, d.res), BOUND_S, [(d.res, d.id, "Unhealthy")]

    def kubelet_restart(self, rng, now):
        n = self.state_version()  # before the signal: its update may be quick
        self.k.proc.send_signal(signal.SIGHUP)
        self.wait_updates(n)
        return "kubelet restart (SIGHUP)", BOUND_S, []

    def kubelet_exit(self, rng, now):
        assert self.k.stop() == 0
        self.k = self.started_kubelet()
        return "kubelet stopped and started", BOUND_S, []

    def dir_recreate(self, rng, now):
        assert self.k.stop() == 0
        # As `rm -rf` run again until it succeeds: kdev-plugin may create a
        # socket in the directory while it is being emptied.
        for _ in range(100):
            try:
                shutil.rmtree(self.d)
                break
            except OSError:
                time.sleep(0.01)
        else:
            raise AssertionError("cannot remove %s" % self.d)
        os.mkdir(self.d)
        time.sleep(rng.choice([0, 0.05, 0.15]))  # before or after kdev-plugin notices
        self.k = self.started_kubelet()
        return "device-plugins directory re-created", BOUND_S, []

    def restore(self, now):
        """Puts the inventory back as it was at start (generic nodes and their
        targets, GPUs present and repaired, the MIG layout), the model with
        it; returns the seconds to wait for its grace and quiet windows."""
        for i, n in enumerate(NODES):
            p = os.path.join(self.fake, "dev", n)
            d = self.m.devs.get((GEN, n))
            if i < 3:
                t = TARGETS[i % 3]
                if self.m.targets.get(n) != t:
                    self.link(n, t)
                    self.m.targets[n] = t
                d.present = d.seen = True
                d.t_gone = None
            elif os.path.lexists(p):
                os.unlink(p)
                self.m.targets.pop(n)
                d.present, d.t_gone = False, now
        for g in self.m.gpus:
            if g.fault:
                self.control("%s %s 0" % (g.fault, g.uuid))
                g.fault, g.event = None, ("repair", now)
        for (uuid, _, present, migs), g in zip(GPUS, self.m.gpus):
            if present and not g.present:
                self.control("gpu-add %s" % uuid)
                g.present = True
                for d in g.devs:
                    if d.on_gpu:
                        d.present = d.seen = True
                        d.t_gone = None
            elif not present and g.present:
                self.control("gpu-remove %s" % uuid)
                g.present = False
                for d in g.devs:
                    d.on_gpu = d.present
                    if d.present:
                        d.present, d.t_gone = False, now
            if not present:
                continue
            for m, prof, _, _, mpresent in migs:
                d = self.m.devs[("nvidia.com/mig-" + PROFILES[prof], m)]
                if mpresent and not d.present:
                    self.control("mig-create %s" % m)
                    d.present = d.seen = d.on_gpu = True
                    d.t_gone = None
                elif not mpresent and d.present:
                    self.control("mig-destroy %s" % m)
                    d.present, d.t_gone, d.on_gpu = False, now, False
        return max(GEN_GRACE, REDISCOVER + GPU_GRACE, QUIET + PROBE) + SLACK

    def started_kubelet(self):
        """A new kubelet, once it wrote its state file: it handles SIGHUP
        from then on (before, a SIGHUP of a kubelet-restart step would end
        it)."""
        n = self.state_version()
        k = self.kubelet()
        wait_for(lambda: self.state_version() != n, timeout=5 * SCALE,
                 what="the new kubelet's state file")
        return k

    def state_version(self):
        """The state file's version: (inode, updates). Each write replaces the
        file (a new inode), and a kubelet started again counts its updates
        from 1, so the count alone can go back."""
        try:
            ino = os.stat(self.state).st_ino
        except FileNotFoundError:
            ino = None
        return ino, read_state(self.state)["updates"]

    def wait_updates(self, n):
        """After SIGHUP: the state file shows the restart (no resource connected
        for a moment) or a later write than version |n|, read before the
        signal; returns at once when it did."""
        wait_for(lambda: self.state_version() != n, timeout=5 * SCALE,
                 what="kubelet state after the restart")


def allocated(d, sock, n):
    """Allocate's (container path, host path) pairs for device |n|, or None
    while the socket is being served again (after a kubelet restart kdev
    re-creates it; kubelet retries as well)."""
    try:
        return [(x.container_path, x.host_path) for x in kt.allocate(d, sock, [n]).devices]
    except grpc.RpcError:
        return None


STEP_TYPES = [  # (name, weight, enabled)
    ("node-add", 10, True), ("node-remove", 8, True), ("node-repoint", 6, True),
    ("gpu-xid", 6, True), ("gpu-fault", 5, True), ("gpu-repair", 5, True),
    ("gpu-add", 6, True), ("gpu-remove", 6, True),
    ("mig-create", 8, True), ("mig-destroy", 8, True),
    ("kubelet-restart", 5, True), ("kubelet-exit", 3, True),
    ("dir-recreate", 4, DIR_RECREATE),
]


def test_live_inventory_soak():
    print("seed %d, %d steps, directory re-creation %s" % (SEED, STEPS,
                                                         "on" if DIR_RECREATE else "off"),
          flush=True)
    rng = random.Random(SEED)
    types = [(n, w) for n, w, on in STEP_TYPES if on]
    with TempDir() as d:
        s = Soak(d)
        pid = s.p.proc.pid
        try:
            s.converge("start-up", bound=20)
            time.sleep(0.5)
            base_fds, base_rss = fd_count(pid), rss_kib(pid)
            start = time.monotonic()
            rss = [(0, base_rss)]
            done = 0
            log = []
            while done < STEPS:
                name = rng.choices([n for n, _ in types], [w for _, w in types])[0]
                s.repointed = None
                now = time.monotonic()
                try:
                    r = getattr(s, name.replace("-", "_"))(rng, now)
                except AssertionError:
                    print("steps so far:\n  " + "\n  ".join(log + ["(%s)" % name]), flush=True)
                    raise
                if r is None:
                    continue
                what, bound, must = r
                done += 1
                log.append("%d %s: %s" % (done, name, what))
                try:
                    took = s.converge("step %d (%s: %s)" % (done, name, what), bound,
                                      must)
                    if s.repointed:
                        n, t = s.repointed
                        sock = sock_name(GEN)
                        wait_for(lambda: allocated(d, sock, n) == [("/dev/" + n, t)],
                                 timeout=bound * SCALE, interval=0.02,
                                 what="Allocate answering %s for %s" % (t, n))
                        took = time.monotonic() - now
                except AssertionError:
                    print("steps so far:\n  " + "\n  ".join(log), flush=True)
                    print("kdev-plugin's log (end):\n" + s.p.logtext()[-int(os.environ.get("KDEV_SOAK_LOG_CHARS") or 12000):], flush=True)
                    raise
                s.took.setdefault(name, []).append(took)
                if done % 25 == 0:
                    rss.append((done, rss_kib(pid)))
            elapsed = time.monotonic() - start
            # The inventory as it was at start, and the last windows closed
            # (drops after a grace period, recoveries): kdev-plugin then
            # serves what it served at start, with as many fds.
            time.sleep(s.restore(time.monotonic()))
            s.converge("the end (the inventory of the start)")
            wait_for(lambda: fd_count(pid) == base_fds, timeout=5 * SCALE,
                     what="kdev-plugin's fd count back to %d (now %d)"
                     % (base_fds, fd_count(pid)))
            end_fds, end_rss = fd_count(pid), rss_kib(pid)
            print("%d steps in %.1f s; kdev-plugin fds %d -> %d, RSS %d KiB -> %d KiB (%+d KiB)"
                  % (done, elapsed, base_fds, end_fds, base_rss, end_rss, end_rss - base_rss))
            print("RSS (KiB) by step: " + ", ".join("%d: %d" % x for x in rss + [(done, end_rss)]))
            print("convergence per step type (s): " + "; ".join(
                "%s n=%d p50 %.3f max %.3f" % (n, len(v), statistics.median(v), max(v))
                for n, v in sorted(s.took.items())), flush=True)
            assert s.p.proc.poll() is None
            assert end_fds == base_fds
            # Flat: what the second half of the run adds (the first half
            # warms up: heap arenas, the first rebuilds' pages).
            half = min(rss, key=lambda x: abs(x[0] - done // 2))
            if sanitized() or kt.WRAP:
                print("RSS bound not asserted (sanitizer or wrapped build)")
            else:
                assert end_rss - half[1] <= RSS_BOUND_KIB, \
                    "RSS grew by %d KiB from step %d to the end (bound %d KiB)" % (
                        end_rss - half[1], half[0], RSS_BOUND_KIB)
        finally:
            rc = s.p.stop()
            s.k.stop()
            if rc != 0:
                print(s.p.logtext()[-5000:])
            assert rc == 0, rc


if __name__ == "__main__":
    if not os.path.exists(os.path.join(kt.BUILD_DIR, "kdev-plugin")):
        print("kdev-plugin is not built in", kt.BUILD_DIR)
        sys.exit(1)
    kt.run_tests([test_live_inventory_soak])
