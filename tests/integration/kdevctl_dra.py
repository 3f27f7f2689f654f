#!/usr/bin/python3
"""`kdevctl dra --registry DIR [--scenario FILE]` against fake DRA plugins (grpcio).

The fakes serve /pluginregistration.Registration on <name>-reg.sock and the DRA
services (v1 and v1beta1) on a second socket, recording every call. Checks the
plugin table, kubelet's registration error texts and NotifyRegistrationStatus,
the chosen service version, the batched Prepare/Unprepare calls and their
printed results, kubelet's response checks, -o json and usage errors.
Python messages are generated from proto/ with protoc at run time.
Exit 0 pass, 1 fail, 77 prerequisite missing.
"""
import importlib.util
import json
import os
import queue
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("KDEV_BUILD_DIR") or os.path.join(SRC, "build")
KDEVCTL = os.path.join(BUILD, "kdevctl")

try:
    import grpc
    from concurrent import futures
except ImportError:
    print("SKIP: grpcio not importable")
    sys.exit(77)

FAILS = []


def check(what, got, want):
    if got != want:
        FAILS.append(what)
        print("FAIL %s:\n--- got ---\n%s\n--- want ---\n%s" % (what, got, want))
    else:
        print("ok   %s" % what)


def load_protos(tmp):
    if not shutil.which("protoc"):
        print("SKIP: protoc missing")
        sys.exit(77)
    out = os.path.join(tmp, "py")
    os.makedirs(out)
    files = ["pluginregistration/v1/api.proto", "dra/v1/api.proto"]
    subprocess.run(["protoc", "-I", os.path.join(SRC, "proto"), "--python_out", out] + files,
                   check=True)
    mods = []
    for i, f in enumerate(files):
        path = os.path.join(out, f.replace(".proto", "_pb2.py"))
        spec = importlib.util.spec_from_file_location("kdev_dra_pb2_%d" % i, path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        mods.append(m)
    return mods


class FakePlugin:
    """Registration + DRA services. versions: supported_versions; ptype: type."""

    def __init__(self, reg_pb, dra_pb, regdir, tmp, name, versions, ptype="DRAPlugin"):
        self.reg_pb, self.dra_pb = reg_pb, dra_pb
        self.name = name
        self.reg_sock = os.path.join(regdir, name + "-reg.sock")
        self.dra_sock = os.path.join(tmp, name + "-dra.sock")
        self.versions, self.ptype = versions, ptype
        self.calls = []     # (method, [uids])
        self.statuses = []  # (registered, error)
        self.extra_uid = None
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        R = reg_pb
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "pluginregistration.Registration", {
                "GetInfo": grpc.unary_unary_rpc_method_handler(
                    self.get_info, R.InfoRequest.FromString, R.PluginInfo.SerializeToString),
                "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                    self.notify, R.RegistrationStatus.FromString,
                    R.RegistrationStatusResponse.SerializeToString),
            })])
        self.server.add_insecure_port("unix:" + self.reg_sock)
        self.dra = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        D = dra_pb
        for ver in ("v1", "v1beta1"):
            self.dra.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
                "k8s.io.kubelet.pkg.apis.dra.%s.DRAPlugin" % ver, {
                    "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                        lambda req, ctx, v=ver: self.prepare(v, req),
                        D.NodePrepareResourcesRequest.FromString,
                        D.NodePrepareResourcesResponse.SerializeToString),
                    "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                        lambda req, ctx, v=ver: self.unprepare(v, req),
                        D.NodeUnprepareResourcesRequest.FromString,
                        D.NodeUnprepareResourcesResponse.SerializeToString),
                })])
        self.dra.add_insecure_port("unix:" + self.dra_sock)
        self.server.start()
        self.dra.start()

    def stop(self):
        self.server.stop(None)
        self.dra.stop(None)

    def get_info(self, req, ctx):
        return self.reg_pb.PluginInfo(type=self.ptype, name=self.name, endpoint=self.dra_sock,
                                      supported_versions=self.versions)

    def notify(self, req, ctx):
        self.statuses.append((req.plugin_registered, req.error))
        return self.reg_pb.RegistrationStatusResponse()

    def prepare(self, ver, req):
        self.calls.append((ver + " prepare", [(c.namespace, c.name, c.uid) for c in req.claims]))
        resp = self.dra_pb.NodePrepareResourcesResponse()
        for c in req.claims:
            if c.uid.startswith("skip"):
                continue
            r = resp.claims[c.uid]
            if c.uid.startswith("bad"):
                r.error = "claim %s/%s not allocated" % (c.namespace, c.name)
                continue
            for i, req_name in enumerate(["gpu", ""]):
                d = r.devices.add()
                d.pool_name = "node-1"
                d.device_name = "gpu-%d" % i
                if req_name:
                    d.request_names.append(req_name)
                d.cdi_device_ids.append("k8s.gpu.example.com/claim=%s-gpu-%d" % (c.uid, i))
        if self.extra_uid:
            resp.claims[self.extra_uid].error = ""
        return resp

    def unprepare(self, ver, req):
        self.calls.append((ver + " unprepare", [(c.namespace, c.name, c.uid) for c in req.claims]))
        resp = self.dra_pb.NodeUnprepareResourcesResponse()
        for c in req.claims:
            if c.uid.startswith("skip"):
                continue
            resp.claims[c.uid].error = "busy" if c.uid.startswith("bad") else ""
        return resp


def run(*args):
    p = subprocess.run([KDEVCTL, "dra"] + list(args), capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def wait_socket(path):
    deadline = time.time() + 30
    while not os.path.exists(path):
        if time.time() > deadline:
            raise RuntimeError("no socket " + path)
        time.sleep(0.05)


def main():
    if not os.access(KDEVCTL, os.X_OK):
        print("SKIP: no kdevctl in", BUILD)
        return 77
    tmp = tempfile.mkdtemp(prefix="kdev-dra-")
    plugins = []
    try:
        reg_pb, dra_pb = load_protos(tmp)

        def new(regdir, *a, **kw):
            p = FakePlugin(reg_pb, dra_pb, regdir, tmp, *a, **kw)
            plugins.append(p)
            wait_socket(p.reg_sock)
            return p

        # --- registration: good, wrong type, no matching / empty versions, ignored files
        reg1 = os.path.join(tmp, "reg1")
        os.makedirs(reg1)
        good = new(reg1, "gpu.example.com", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
        csi = new(reg1, "csi.example.com", ["1.0.0"], ptype="CSIPlugin")
        old = new(reg1, "old.example.com", ["v1alpha3.NodeService"])
        empty = new(reg1, "empty.example.com", [])
        beta = new(reg1, "beta.example.com", ["v2.DRAPlugin", "v1beta1.DRAPlugin"])
        with open(os.path.join(reg1, "notes.txt"), "w") as f:
            f.write("not a socket\n")
        hidden = socket.socket(socket.AF_UNIX)
        hidden.bind(os.path.join(reg1, ".hidden-reg.sock"))  # nobody listens: must be skipped
        hidden.close()

        rc, out, err = run("--registry", reg1)
        check("registration rc", rc, 1)
        check("registration table", out,
              table([["NAME", "ENDPOINT", "VERSION", "SOCKET"],
                     ["beta.example.com", beta.dra_sock, "v1beta1.DRAPlugin", beta.reg_sock],
                     ["gpu.example.com", good.dra_sock, "v1.DRAPlugin", good.reg_sock]]))
        e_csi = ("RegisterPlugin error -- no handler registered for plugin type: CSIPlugin")
        e_old = ("RegisterPlugin error -- plugin validation failed with err: none of services "
                 "supported by the plugin ([v1alpha3.NodeService]) are supported by the "
                 "kubelet ([v1.DRAPlugin v1beta1.DRAPlugin])")
        e_empty = ("RegisterPlugin error -- plugin validation failed with err: empty list of "
                   "supported gRPC services (aka supported versions)")
        check("registration stderr", err,
              "kdevctl dra: %s: %s\nkdevctl dra: %s: %s\nkdevctl dra: %s: %s\n" % (
                  csi.reg_sock, e_csi, empty.reg_sock, e_empty, old.reg_sock, e_old))
        check("notify good", good.statuses, [(True, "")])
        check("notify beta", beta.statuses, [(True, "")])
        check("notify csi", csi.statuses, [(False, e_csi)])
        check("notify old", old.statuses, [(False, e_old)])
        check("notify empty", empty.statuses, [(False, e_empty)])

        # --- scenario needs exactly one plugin without --driver
        scen = os.path.join(tmp, "s.yaml")
        with open(scen, "w") as f:
            f.write("- prepare:\n"
                    "    - {namespace: default, name: claim-a, uid: uid-a}\n"
                    "    - {namespace: team, name: claim-b, uid: uid-b}\n"
                    "- unprepare:\n"
                    "    - {namespace: default, name: claim-a, uid: uid-a}\n")
        rc, out, err = run("--registry", reg1, "--scenario", scen)
        check("ambiguous rc", rc, 1)
        check("ambiguous stderr tail", err.splitlines()[-1],
              "kdevctl dra: 2 DRA plugins registered; the scenario needs exactly one "
              "(or --driver)")

        # --- scenario against gpu.example.com (v1) chosen with --driver
        good.calls.clear()
        rc, out, err = run("--registry", reg1, "--scenario", scen, "--driver", "gpu.example.com")
        check("scenario v1 rc", rc, 1)  # registration failures in reg1 still count
        check("scenario v1 calls", good.calls, [
            ("v1 prepare", [("default", "claim-a", "uid-a"), ("team", "claim-b", "uid-b")]),
            ("v1 unprepare", [("default", "claim-a", "uid-a")])])
        want_steps = (
            "\nNodePrepareResources (gpu.example.com, v1.DRAPlugin):\n" +
            table([["CLAIM UID", "POOL", "DEVICE", "REQUESTS", "CDI DEVICES"],
                   ["uid-a", "node-1", "gpu-0", "gpu", "k8s.gpu.example.com/claim=uid-a-gpu-0"],
                   ["uid-a", "node-1", "gpu-1", "-", "k8s.gpu.example.com/claim=uid-a-gpu-1"],
                   ["uid-b", "node-1", "gpu-0", "gpu", "k8s.gpu.example.com/claim=uid-b-gpu-0"],
                   ["uid-b", "node-1", "gpu-1", "-", "k8s.gpu.example.com/claim=uid-b-gpu-1"]],
                  "  ") +
            "\nNodeUnprepareResources (gpu.example.com, v1.DRAPlugin):\n" +
            table([["CLAIM UID", "RESULT"], ["uid-a", "unprepared"]], "  "))
        check("scenario v1 stdout steps", out.split("\n\n", 1)[1], want_steps[1:])

        # --- a registry with only the v1beta1 plugin: exit 0, v1beta1 service used
        reg2 = os.path.join(tmp, "reg2")
        os.makedirs(reg2)
        only = new(reg2, "only.example.com", ["v1beta1.DRAPlugin"])
        rc, out, err = run("--registry", reg2, "--scenario", scen)
        check("scenario v1beta1 rc", rc, 0)
        check("scenario v1beta1 stderr", err, "")
        check("scenario v1beta1 calls", [c[0] for c in only.calls],
              ["v1beta1 prepare", "v1beta1 unprepare"])
        check("scenario v1beta1 header", out.splitlines()[:2],
              table([["NAME", "ENDPOINT", "VERSION", "SOCKET"],
                     ["only.example.com", only.dra_sock, "v1beta1.DRAPlugin", only.reg_sock]]
                    ).splitlines())

        # --- kubelet's response checks: claim error, skipped claims, unknown key
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("- prepare:\n"
                    "    - {namespace: default, name: claim-x, uid: bad-x}\n"
                    "    - {namespace: default, name: claim-s, uid: skip-s}\n"
                    "    - {namespace: default, name: claim-t, uid: skip-t}\n"
                    "- unprepare:\n"
                    "    - {namespace: default, name: claim-x, uid: bad-x}\n"
                    "    - {uid: skip-s}\n")
        only.extra_uid = "stranger"
        rc, out, err = run("--registry", reg2, "--scenario", bad)
        only.extra_uid = None
        check("checks rc", rc, 1)
        check("checks stderr", err,
              "kdevctl dra: NodePrepareResources: claim bad-x: claim default/claim-x not allocated\n"
              "kdevctl dra: NodePrepareResources: result for unknown claim UID stranger\n"
              "kdevctl dra: NodePrepareResources skipped 1 ResourceClaims\n"
              "kdevctl dra: NodeUnprepareResources: claim bad-x: busy\n"
              "kdevctl dra: NodeUnprepareResources skipped 1 ResourceClaims\n")
        check("checks unprepare claims sent", only.calls[-1],
              ("v1beta1 unprepare", [("default", "claim-x", "bad-x"), ("", "", "skip-s")]))

        # --- -o json
        rc, out, err = run("--registry", reg2, "--scenario", scen, "-o", "json")
        check("json rc", rc, 0)
        dev = lambda uid, i, req: {"poolName": "node-1", "deviceName": "gpu-%d" % i,
                                   "requestNames": req,
                                   "cdiDeviceIDs": ["k8s.gpu.example.com/claim=%s-gpu-%d" % (uid, i)]}
        check("json doc", json.loads(out), {
            "plugins": [{"name": "only.example.com", "endpoint": only.dra_sock,
                         "version": "v1beta1.DRAPlugin", "socket": only.reg_sock}],
            "steps": [
                {"call": "NodePrepareResources", "driver": "only.example.com", "claims": {
                    "uid-a": {"devices": [dev("uid-a", 0, ["gpu"]), dev("uid-a", 1, [])]},
                    "uid-b": {"devices": [dev("uid-b", 0, ["gpu"]), dev("uid-b", 1, [])]}}},
                {"call": "NodeUnprepareResources", "driver": "only.example.com",
                 "claims": {"uid-a": {}}}]})

        # --- RPC error in the cli.h style: DRA socket gone
        only.dra.stop(None)
        if os.path.exists(only.dra_sock):
            os.unlink(only.dra_sock)
        rc, out, err = run("--registry", reg2, "--scenario", scen)
        check("rpc error rc", rc, 1)
        check("rpc error stderr", err.splitlines()[0],
              "kdevctl dra: NodePrepareResources: no such socket %s" % only.dra_sock)

        # --- empty registry, usage and scenario errors
        reg3 = os.path.join(tmp, "reg3")
        os.makedirs(reg3)
        rc, out, err = run("--registry", reg3)
        check("empty registry", (rc, out, err), (0, "No DRA plugins registered in %s.\n" % reg3, ""))
        rc, out, err = run()
        check("no --registry", (rc, out, err),
              (2, "", "kdevctl dra: --registry DIR is required\n"
                      "Run 'kdevctl dra --help' for usage.\n"))
        rc, out, err = run("--registry", reg3, "-o", "yaml")
        check("bad -o rc", rc, 2)
        rc, out, err = run("--registry", reg3, "extra")
        check("positional rc", (rc, err.splitlines()[0]),
              (2, "kdevctl dra: unexpected argument \"extra\""))
        rc, out, err = run("--help")
        check("help", (rc, out.splitlines()[0], err),
              (0, "Usage: kdevctl dra --registry DIR [--scenario FILE] [--driver NAME]", ""))
        rc, out, err = run("--registry", os.path.join(tmp, "missing"))
        check("missing registry", (rc, err),
              (1, "kdevctl dra: %s: No such file or directory\n" % os.path.join(tmp, "missing")))
        with open(bad, "w") as f:
            f.write("- prepare:\n    - {namespace: default, name: c}\n")
        rc, out, err = run("--registry", reg3, "--scenario", bad)
        check("scenario without uid", (rc, err),
              (1, "kdevctl dra: %s: line 2: claim without uid\n" % bad))
        with open(bad, "w") as f:
            f.write("- reserve: []\n")
        rc, out, err = run("--registry", reg3, "--scenario", bad)
        check("scenario unknown step", (rc, err),
              (1, "kdevctl dra: %s: line 1: unknown step \"reserve\" (want prepare or "
                  "unprepare)\n" % bad))
        ex = os.path.join(SRC, "examples", "dra-scenario.yaml")
        rc, out, err = run("--registry", reg3, "--scenario", ex)
        check("example scenario parses (no plugin)", (rc, err),
              (1, "kdevctl dra: 0 DRA plugins registered; the scenario needs exactly one "
                  "(or --driver)\n"))

        # --- --watch: inotify events, registration, deregistration, SIGTERM
        reg4 = os.path.join(tmp, "reg4")
        os.makedirs(reg4)
        proc = subprocess.Popen([KDEVCTL, "dra", "--registry", reg4, "--watch", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
        errs = queue.Queue()
        threading.Thread(target=lambda: [errs.put(l) for l in proc.stderr], daemon=True).start()
        try:
            check("watch initial", lines.get(timeout=60),
                  "No DRA plugins registered in %s.\n" % reg4)
            w = new(reg4, "w.example.com", ["v1beta1.DRAPlugin", "v1.DRAPlugin"])
            check("watch registered", lines.get(timeout=60),
                  "registered w.example.com %s v1beta1.DRAPlugin %s\n" % (w.dra_sock, w.reg_sock))
            check("watch notify", w.statuses, [(True, "")])
            w.stop()
            if os.path.exists(w.reg_sock):
                os.unlink(w.reg_sock)
            check("watch deregistered", lines.get(timeout=60),
                  "deregistered w.example.com %s v1beta1.DRAPlugin %s\n" % (w.dra_sock, w.reg_sock))
            c2 = new(reg4, "csi2.example.com", ["1.0.0"], ptype="CSIPlugin")
            want = ("kdevctl dra: %s: RegisterPlugin error -- no handler registered for "
                    "plugin type: CSIPlugin\n" % c2.reg_sock)
            got = errs.get(timeout=60)
            while got != want and "GetInfo:" in got:  # socket seen before it listened
                got = errs.get(timeout=60)
            check("watch failure", got, want)
            deadline = time.time() + 30
            while not c2.statuses and time.time() < deadline:
                time.sleep(0.05)
            check("watch failure notify", c2.statuses[:1],
                  [(False, "RegisterPlugin error -- no handler registered for plugin type: "
                           "CSIPlugin")])
            proc.send_signal(signal.SIGTERM)
            check("watch exit after failure", proc.wait(timeout=60), 1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rc, out, err = run("--registry", reg3, "--watch", "x")
        check("bad --watch", (rc, err.splitlines()[0]),
              (2, "kdevctl dra: invalid --watch \"x\" (want seconds such as 2 or 0.5, from 0 to "
                  "31536000; 0 = until SIGINT or SIGTERM)"))
        t0 = time.time()
        rc, out, err = run("--registry", reg3, "--watch", "0.5")
        check("--watch 0.5 ends", (rc, out, err, time.time() - t0 < 30),
              (0, "No DRA plugins registered in %s.\n" % reg3, "", True))
    finally:
        for p in plugins:
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: %d" % len(FAILS) if FAILS else "PASS")
    return 1 if FAILS else 0


def table(rows, indent=""):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        lines.append((indent + "   ".join(cells)).rstrip())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
