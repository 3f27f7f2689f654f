"""The manifests in deploy/kubernetes/ run the binaries that are built:

- every container's command is one of the built binaries, and the binary
  accepts the container's args exactly as written (flag names and values:
  `BINARY ARGS... --help` exits 0, getopt stops at the first bad one), and
  lists every flag in its --help;
- every file the ConfigMap ships is a valid config for kdev-plugin
  (`--check-config` on the mock libnvidia-ml.so.1, expected resources: the
  default one plain nvidia.com/gpu), --config-dir is the mount of that
  ConfigMap and DEFAULT_CONFIG one of its keys (per-node configs: the key is
  the config name);
- the node affinity runs exactly one of kdev-plugin and kdev-dra-plugin on a
  node with any of the NVIDIA GPU labels (NFD's pci-0302_10de, pci-0300_10de,
  pci-10de; nvidia.com/gpu.present), chosen by kdev/allocation=dra, and
  neither on other nodes;
- every hostPath the args name is mounted into the container;
- the DeviceClasses select the driver name kdev-dra-plugin publishes;
- kdev-plugin's pod mounts the driver root as NVIDIA's chart does
  (deployments/helm/nvidia-device-plugin, daemonset-device-plugin.yml: the
  host's NVIDIA_DRIVER_ROOT read-only at /driver-root, the CDI directory as
  cdi-root, NVIDIA_VISIBLE_DEVICES=all with compute,utility, no /dev
  mount), the default
  config's device list strategy is envvar (NVIDIA's default), and the
  container has what the chart adds when a config can use MIG or
  volume-mounts (SYS_ADMIN; NVIDIA_MIG_MONITOR_DEVICES=all for MIG), by the
  chart's own rule over the ConfigMap's configs.
The manifests are read by deploy/validate/validate.mjs --dump (node; exit 77
when node is absent)."""
import json
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import TempDir  # noqa: E402

VALIDATE = os.path.join(kt.SOURCE_DIR, "deploy", "validate")
TOPOLOGIES = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies")


def load():
    r = subprocess.run([os.path.join(VALIDATE, "ensure-deps.sh")], capture_output=True,
                       text=True, timeout=600)
    if r.returncode == kt.SKIP:
        print("SKIP: node/npm not available")
        sys.exit(kt.SKIP)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["node", os.path.join(VALIDATE, "validate.mjs"), "--dump"],
                       capture_output=True, text=True, timeout=120, cwd=kt.SOURCE_DIR)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


DUMP = load()
BINARIES = {"kdev-plugin", "kdev-dra-plugin", "kdevctl"}


def containers():
    return [c for c in DUMP["containers"] if c["image"].startswith("kdev:")]


def binary(c):
    assert len(c["command"]) == 1, c["document"]
    cmd = c["command"][0]
    name = os.path.basename(cmd)
    assert cmd == "/usr/bin/" + name and name in BINARIES, \
        "%s: command %s is not a kdev binary in /usr/bin" % (c["document"], cmd)
    path = os.path.join(kt.BUILD_DIR, name)
    assert os.access(path, os.X_OK), path + " not built"
    return path


def flag_names(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def test_both_daemonsets_present():
    got = sorted((c["workload"], c["name"], os.path.basename(c["command"][0]))
                 for c in containers())
    assert got == [("kdev-dra-plugin", "kdev-dra-plugin", "kdev-dra-plugin"),
                   ("kdev-mps-control-daemon", "mps-control-daemon-ctr", "kdev-plugin"),
                   ("kdev-mps-control-daemon", "mps-control-daemon-mounts", "kdev-plugin"),
                   ("kdev-plugin", "kdev-plugin", "kdev-plugin")], got


def test_args_accepted_by_binary():
    for c in containers():
        path = binary(c)
        r = subprocess.run([path] + c["args"] + ["--help"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, "%s: %s rejects its args %s: %s" % (
            c["document"], os.path.basename(path), c["args"], r.stderr.strip())
        # Control: the same command line with a flag that does not exist fails,
        # so a zero exit above means the args were parsed, not ignored.
        r = subprocess.run([path] + c["args"] + ["--no-such-flag-kdev", "--help"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "no-such-flag-kdev" in r.stderr, (r.returncode, r.stderr)


def test_flags_documented_in_help():
    for c in containers():
        path = binary(c)
        sub = [a for a in c["args"][:1] if not a.startswith("-")]  # a subcommand
        r = subprocess.run([path] + sub + ["--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        documented = set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout))
        missing = [f for f in flag_names(c["args"]) if f not in documented]
        assert not missing, "%s: %s --help does not list %s" % (c["document"], path, missing)


def arg(c, flag):
    vals = [a.split("=", 1)[1] for a in c["args"] if a.startswith(flag + "=")]
    assert len(vals) == 1, "%s: %s given %d times" % (c["document"], flag, len(vals))
    return vals[0]


def mounted(c, path):
    """True when |path| lies under one of the container's volumeMounts."""
    return any(path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
               for m in c["volumeMounts"])


def test_paths_in_args_are_mounted():
    checked = 0
    for c in containers():
        for a in c["args"]:
            if "=" not in a:
                continue
            flag, val = a.split("=", 1)
            if val.startswith("/") and flag != "--metrics-address":
                assert mounted(c, val), "%s: %s=%s is not under a volumeMount" % (
                    c["document"], flag, val)
                checked += 1
    # 5 of kdev-plugin, 3 of kdev-dra-plugin, 2 of kdev-mps-control-daemon,
    # 1 of its mount-shm init container
    assert checked == 11, checked


def env_value(c, name):
    vals = [e.get("value") for e in c["env"] if e["name"] == name]
    assert len(vals) == 1, "%s: %s given %d times" % (c["document"], name, len(vals))
    return vals[0]


def config_map_files():
    """The named configs of kdev-plugin's --config-dir (per-node configs):
    the ConfigMap mounted there, whose keys are the config names;
    DEFAULT_CONFIG must be one of them. Returns the data as
    {"config.yaml": the default, "<name>.yaml": each other config}, the keys
    the checks below read."""
    c = [c for c in containers() if c["workload"] == "kdev-plugin"][0]
    cfg_dir = arg(c, "--config-dir")
    mount = [m for m in c["volumeMounts"] if m["mountPath"].rstrip("/") == cfg_dir.rstrip("/")]
    assert len(mount) == 1, cfg_dir
    vol = [v for v in c["volumes"] if v["name"] == mount[0]["name"]][0]
    cm = [m for m in DUMP["configMaps"] if m["name"] == vol["configMap"]["name"]]
    assert len(cm) == 1, vol
    key = env_value(c, "DEFAULT_CONFIG")
    assert key in cm[0]["data"], "DEFAULT_CONFIG %s: no key %s in ConfigMap %s" % (
        key, key, cm[0]["name"])
    return {("config" if k == key else k) + ".yaml": v for k, v in cm[0]["data"].items()}


def check_config(d, text, topology):
    path = os.path.join(d, "config.yaml")
    with open(path, "w") as f:
        f.write(text)
    control = os.path.join(d, "control")
    open(control, "w").close()
    env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
               KDEV_MOCK_NVML_TOPOLOGY=os.path.join(TOPOLOGIES, topology),
               KDEV_MOCK_NVML_CONTROL=control, KDEV_MOCK_NVML_PROC=d)
    for k in ("KDEV_CONFIG", "CONFIG_FILE", "MIG_STRATEGY", "DEVICE_LIST_STRATEGY"):
        env.pop(k, None)
    r = subprocess.run([os.path.join(kt.BUILD_DIR, "kdev-plugin"), "--check-config", path,
                        "-d", d, "--proc-root", d, "--log-level", "error"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "%s on %s: %s" % (text, topology, r.stderr)
    return r.stdout


def resource_counts(out):
    """{'nvidia.com/gpu.shared': 32, ...} from --check output lines
    'NAME: N devices...'."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+): (\d+) devices?\b", line)
        if m:
            got[m.group(1)] = int(m.group(2))
    return got


def test_configmap_default_is_plain():
    data = config_map_files()
    with TempDir() as d:
        out = check_config(d, data["config.yaml"], "h100-80gb-8x-nvswitch.yaml")
    # The default (--config-file) config: the 8 GPUs as nvidia.com/gpu, nothing
    # renamed or replicated (a drop-in replacement for NVIDIA's plugin).
    assert resource_counts(out) == {"nvidia.com/gpu": 8}, out
    with TempDir() as d:
        out = check_config(d, data["config.yaml"], "mig-a100-40gb.yaml")
    # MIG strategy none: the 4 A100s (MIG enabled or not) as whole GPUs.
    assert resource_counts(out) == {"nvidia.com/gpu": 4}, out


def test_configmap_time_slicing():
    data = config_map_files()
    with TempDir() as d:
        out = check_config(d, data["time-slicing.yaml"], "h100-80gb-8x-nvswitch.yaml")
    # 8 GPUs x 4 replicas, renamed; no plain nvidia.com/gpu left.
    assert resource_counts(out) == {"nvidia.com/gpu.shared": 32}, out


def test_configmap_mps():
    """The `mps` config: 8 GPUs x 4 MPS replicas of nvidia.com/gpu; the
    control daemon's DaemonSet reads that config, makes the MPS directories
    in the host's MPS root that kdev-plugin's MPS_ROOT names and mounts at
    /mps, and runs only on nodes labelled nvidia.com/mps.capable=true, as
    NVIDIA's chart."""
    data = config_map_files()
    with TempDir() as d:
        out = check_config(d, data["mps.yaml"], "h100-80gb-8x-nvswitch.yaml")
    assert resource_counts(out) == {"nvidia.com/gpu": 32}, out
    m = [c for c in containers() if c["name"] == "mps-control-daemon-ctr"][0]
    # NVIDIA's init container: the tmpfs at <mps root>/shm, seen by the host
    # through the Bidirectional propagation of the MPS root
    i = [c for c in containers() if c["name"] == "mps-control-daemon-mounts"][0]
    assert i["args"] == ["mps-control-daemon", "mount-shm", "--mps-dir=/mps"], i["args"]
    assert i["securityContext"] == {"privileged": True}, i["securityContext"]
    assert i["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps",
                                  "mountPropagation": "Bidirectional"}], i["volumeMounts"]
    p = [c for c in containers() if c["workload"] == "kdev-plugin"][0]
    assert m["args"][0] == "mps-control-daemon", m["args"]
    assert arg(m, "--config") == "/etc/kdev/configs/mps", m["args"]
    assert arg(m, "--mps-dir") == "/mps", m["args"]
    root = env_value(p, "MPS_ROOT")
    assert root == "/run/nvidia/mps" and "mpsRoot: " + root in data["mps.yaml"], root

    def host(c, mount_path):
        mount = [v for v in c["volumeMounts"] if v["mountPath"] == mount_path]
        assert len(mount) == 1, (c["document"], mount_path)
        return [v for v in c["volumes"] if v["name"] == mount[0]["name"]][0]["hostPath"]["path"]
    assert host(m, "/mps") == root and host(p, "/mps") == root
    assert host(m, "/dev/shm") == root + "/shm"
    cfg = [v for v in m["volumes"] if v.get("configMap")]
    assert [v["configMap"]["name"] for v in cfg] == ["kdev-plugin-config"], cfg


def test_configmap_examples_named_in_comment():
    # Each example config is named (as its path under --config-dir) in the
    # manifest's comments, and the default config is the one named default.
    data = config_map_files()
    with open(os.path.join(kt.SOURCE_DIR, "deploy", "kubernetes", "10-device-plugin.yaml")) as f:
        comments = "\n".join(l for l in f.read().splitlines() if l.lstrip().startswith("#"))
    for key in sorted(data):
        if key != "config.yaml":
            assert "/etc/kdev/configs/" + key[:-len(".yaml")] in comments, key
    c = [c for c in containers() if c["workload"] == "kdev-plugin"][0]
    assert arg(c, "--config-dir") == "/etc/kdev/configs", c["args"]
    assert env_value(c, "DEFAULT_CONFIG") == "default", c["env"]
    assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]
            if e["name"] == "NODE_NAME"] == ["spec.nodeName"], c["env"]


def test_configmap_mig_mixed():
    data = config_map_files()
    assert sorted(data) == ["config.yaml", "mig-mixed.yaml", "mps.yaml", "time-slicing.yaml"], \
        sorted(data)
    with TempDir() as d:
        out = check_config(d, data["mig-mixed.yaml"], "mig-h100-80gb-8x-mixed.yaml")
    # mig-h100-80gb-8x-mixed: 4 GPUs without MIG, 4 with MIG mixed; the 9
    # 1g.10gb devices are time-sliced in 2.
    assert resource_counts(out) == {
        "nvidia.com/gpu": 4, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-1g.20gb": 1, "nvidia.com/mig-4g.40gb": 1,
        "nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/mig-1g.10gb": 18,
        "nvidia.com/mig-7g.80gb": 1}, out
    assert "nvidia.com/mig-1g.10gb: 18 devices (18 replicas of 9 devices): " in out, out


def label_matches(labels, expr):
    """One NodeSelectorRequirement against a node's labels (Kubernetes
    semantics: NotIn and DoesNotExist match a node without the label)."""
    key, op, vals = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in vals
    if op == "NotIn":
        return key not in labels or labels[key] not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError("operator %s not handled by this test" % op)


def schedules(c, labels):
    """True when the container's pod may run on a node with |labels|:
    requiredDuringScheduling terms ORed, a term's expressions ANDed."""
    req = c["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms = req["nodeSelectorTerms"]
    assert terms and all("matchFields" not in t for t in terms), terms
    return any(all(label_matches(labels, e) for e in t["matchExpressions"]) for t in terms)


GPU_LABELS = [
    "feature.node.kubernetes.io/pci-0302_10de.present",  # NFD default, 3D controller
    "feature.node.kubernetes.io/pci-0300_10de.present",  # NFD default, VGA
    "feature.node.kubernetes.io/pci-10de.present",       # NFD deviceLabelFields [vendor]
    "nvidia.com/gpu.present",                            # GPU operator / by hand
]


def test_node_affinity():
    plugin = [c for c in containers() if c["workload"] == "kdev-plugin"][0]
    dra = [c for c in containers() if c["workload"] == "kdev-dra-plugin"][0]
    for gpu in GPU_LABELS:
        node = {"kubernetes.io/os": "linux", gpu: "true"}
        assert (schedules(plugin, node), schedules(dra, node)) == (True, False), gpu
        node["kdev/allocation"] = "dra"
        assert (schedules(plugin, node), schedules(dra, node)) == (False, True), gpu
        node["kdev/allocation"] = "device-plugin"
        assert (schedules(plugin, node), schedules(dra, node)) == (True, False), gpu
        node = {gpu: "false"}
        assert (schedules(plugin, node), schedules(dra, node)) == (False, False), gpu
    # Two labels at once: still exactly one of the two plugins.
    node = {GPU_LABELS[0]: "true", GPU_LABELS[3]: "true"}
    assert (schedules(plugin, node), schedules(dra, node)) == (True, False)
    # No NVIDIA GPU: another vendor's display controller, or nothing.
    for node in ({"feature.node.kubernetes.io/pci-0300_1002.present": "true"},
                 {"feature.node.kubernetes.io/pci-0302_8086.present": "true",
                  "kdev/allocation": "dra"},
                 {}):
        assert (schedules(plugin, node), schedules(dra, node)) == (False, False), node


def test_deviceclasses_select_the_dra_driver():
    c = [c for c in containers() if c["workload"] == "kdev-dra-plugin"][0]
    driver = arg(c, "--driver-name")
    names = sorted(dc["name"] for dc in DUMP["deviceClasses"])
    assert names == ["gpu.nvidia.com", "mig.nvidia.com"], names
    for dc in DUMP["deviceClasses"]:
        exprs = [s["cel"]["expression"] for s in dc["selectors"]]
        assert len(exprs) == 1, exprs
        assert 'device.driver == "%s"' % driver in exprs[0], exprs[0]
        want = "gpu" if dc["name"] == "gpu.nvidia.com" else "mig"
        assert 'device.attributes["%s"].type == "%s"' % (driver, want) in exprs[0], exprs[0]


def test_node_name_from_downward_api():
    c = [c for c in containers() if c["workload"] == "kdev-dra-plugin"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", env


def plugin_container():
    return [c for c in containers() if c["workload"] == "kdev-plugin"][0]


def volume_of(c, mount_path):
    m = [m for m in c["volumeMounts"] if m["mountPath"] == mount_path]
    assert len(m) == 1, (mount_path, c["volumeMounts"])
    v = [v for v in c["volumes"] if v["name"] == m[0]["name"]]
    assert len(v) == 1, m
    return m[0], v[0]


def test_share_root_and_cdi_dir_at_host_paths():
    """Allocate of isolated replicas answers with host paths (the library
    copy, the preload file and the region directory under --share-root; the
    CDI spec in --cdi-dir names them too): both are mounted at the host's
    own path, read-write."""
    c = plugin_container()
    for flag, path, name in (("--share-root", "/var/lib/kdev/share", "share-root"),
                             ("--cdi-dir", "/var/run/cdi", "cdi-root")):
        assert arg(c, flag) == path, (flag, c["args"])
        m, v = volume_of(c, path)
        assert m["name"] == name and not m.get("readOnly"), m
        assert v["hostPath"] == {"path": path, "type": "DirectoryOrCreate"}, v


def test_driver_root_as_nvidia_chart():
    c = plugin_container()
    root, ctr = env_value(c, "NVIDIA_DRIVER_ROOT"), env_value(c, "DRIVER_ROOT_CTR_PATH")
    assert (root, ctr) == ("/", "/driver-root"), (root, ctr)
    m, v = volume_of(c, ctr)
    assert (m["name"], m.get("readOnly")) == ("driver-root", True), m
    assert v["hostPath"] == {"path": root, "type": "Directory"}, v
    m, v = volume_of(c, arg(c, "--cdi-dir"))
    assert m["name"] == "cdi-root", m
    assert v["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}, v
    # no /dev mount (NVIDIA's chart has none): the device nodes come from
    # the driver root's dev/ and the runtime
    mounts = sorted(m["mountPath"] for m in c["volumeMounts"])
    assert not [p for p in mounts if p == "/dev" or p.startswith("/dev/")], mounts
    assert "dev" not in [v["name"] for v in c["volumes"]], c["volumes"]
    assert (env_value(c, "NVIDIA_VISIBLE_DEVICES"),
            env_value(c, "NVIDIA_DRIVER_CAPABILITIES")) == ("all", "compute,utility"), c["env"]
    # kdev-plugin reads both variables (its "Running with config" line);
    # the control run shows the value comes from the variable
    assert effective_roots(root, ctr) == (root, ctr)
    assert effective_roots(root, ctr + "-control") == (root, ctr + "-control")


def effective_roots(root, ctr):
    """(nvidiaDriverRoot, containerDriverRoot) of kdev-plugin's start-up
    config line with NVIDIA_DRIVER_ROOT=root and DRIVER_ROOT_CTR_PATH=ctr."""
    with TempDir() as d:
        path = os.path.join(d, "config.yaml")
        with open(path, "w") as f:
            f.write(config_map_files()["config.yaml"])
        control = os.path.join(d, "control")
        open(control, "w").close()
        env = dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                   KDEV_MOCK_NVML_TOPOLOGY=os.path.join(TOPOLOGIES, "h100-80gb-8x-nvswitch.yaml"),
                   KDEV_MOCK_NVML_CONTROL=control, NVIDIA_DRIVER_ROOT=root,
                   DRIVER_ROOT_CTR_PATH=ctr)
        r = subprocess.run([os.path.join(kt.BUILD_DIR, "kdev-plugin"), "--check-config", path,
                            "-d", d, "--proc-root", d, "--log-format", "json"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(l) for l in (r.stdout + r.stderr).splitlines()
             if '"Running with config"' in l]
    assert len(lines) == 1, r.stdout + r.stderr
    flags = lines[0]["config"]["flags"]
    return flags["nvidiaDriverRoot"], flags["plugin"]["containerDriverRoot"]


def configs():
    """{config name: the parsed config} of the ConfigMap's named configs."""
    return {k[:-len(".yaml")]: yaml.safe_load(v) for k, v in config_map_files().items()}


def strategies(cfg):
    s = cfg.get("flags", {}).get("plugin", {}).get("deviceListStrategy", "envvar")
    return [s] if isinstance(s, str) else s


def test_default_config_envvar_only():
    assert strategies(configs()["config"]) == ["envvar"], configs()["config"]


def test_mig_additions_as_nvidia_chart():
    # the chart's rule (templates/_helpers.tpl): requiresCapSysAdmin when a
    # possible config has a MIG strategy other than none or the
    # volume-mounts list strategy; addMigMonitorDevices for MIG
    cfgs = configs()
    mig = sorted(n for n, cfg in cfgs.items()
                 if cfg.get("flags", {}).get("migStrategy", "none") != "none")
    vm = sorted(n for n, cfg in cfgs.items() if "volume-mounts" in strategies(cfg))
    assert (mig, vm) == (["mig-mixed"], []), (mig, vm)
    c = plugin_container()
    assert c["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}, c["securityContext"]
    assert env_value(c, "NVIDIA_MIG_MONITOR_DEVICES") == "all", c["env"]


if __name__ == "__main__":
    kt.run_tests([test_both_daemonsets_present, test_args_accepted_by_binary,
                  test_flags_documented_in_help, test_paths_in_args_are_mounted,
                  test_configmap_default_is_plain, test_configmap_time_slicing, test_configmap_mps,
                  test_configmap_examples_named_in_comment, test_configmap_mig_mixed,
                  test_node_affinity,
                  test_deviceclasses_select_the_dra_driver, test_node_name_from_downward_api,
                  test_share_root_and_cdi_dir_at_host_paths,
                  test_driver_root_as_nvidia_chart, test_default_config_envvar_only,
                  test_mig_additions_as_nvidia_chart])
