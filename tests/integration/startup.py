"""Start-up line, typed JSON logs and --kubelet-socket (issue 13 item 6).

- kdev-plugin logs one "Running with config" line first: version, commit,
  build and the merged config (file < environment < flags) as JSON with
  NVIDIA's field names (as NVIDIA's plugin logs "Running with config:"); in
  --log-format json the config is an object and counts are JSON numbers;
  in text it is one quoted JSON string.
- kdev-dra-plugin logs its start-up line before it touches NVML.
- --kubelet-socket takes any socket path, as NVIDIA's flag: kdev-plugin
  registers there, registers again when it is re-created, and serves its
  sockets in its directory; a relative path is in the working directory;
  kdevctl kubelet --socket-name serves such a socket.
- NVIDIA's plugin sockets in the device-plugins directory: one warning each.
Runs the built binaries against the mock NVML and a grpcio fake kubelet.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

SOCK = "kdev-nvidia.com_gpu.sock"
PLUGIN = os.path.join(kt.BUILD_DIR, "kdev-plugin")
DRA = os.path.join(kt.BUILD_DIR, "kdev-dra-plugin")
KDEVCTL = os.path.join(kt.BUILD_DIR, "kdevctl")

CONFIG = """version: v1
flags:
  migStrategy: single
  plugin:
    deviceListStrategy: [envvar, cdi-cri]
health:
  probeInterval: 2
"""


def build_expected():
    """(version, commit, build) the binaries were built with: the version
    from --version, the commit from the generated header, the build from
    the CMake cache."""
    out = subprocess.run([PLUGIN, "--version"], capture_output=True, text=True,
                         check=True).stdout
    version = out.split()[1]
    with open(os.path.join(kt.BUILD_DIR, "gen", "build_info.h")) as f:
        commit = re.search(r'KDEV_BUILD_COMMIT "([^"]*)"', f.read()).group(1)
    assert re.fullmatch(r"[0-9a-f]{12}|unknown", commit), commit
    cache = open(os.path.join(kt.BUILD_DIR, "CMakeCache.txt")).read()
    # an empty CMAKE_BUILD_TYPE builds CMakeLists.txt's default (scripts/build.sh)
    build = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache, re.M).group(1) or "RelWithDebInfo"
    if re.search(r"^KDEV_SANITIZE:BOOL=(ON|TRUE|1)$", cache, re.M):
        build += "+sanitize"
    return version, commit, build


def nvidia_env(d, **extra):
    env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO}
    env.update(extra)
    return env


def json_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def expected_config(d, config_file, cdi):
    return {
        "version": "v1",
        "flags": {
            "migStrategy": "single", "failOnInitError": True, "mpsRoot": "",
            "nvidiaDriverRoot": "/", "nvidiaDevRoot": "/", "gdrcopyEnabled": False,
            "gdsEnabled": False, "mofedEnabled": False, "deviceDiscoveryStrategy": "auto",
            "plugin": {
                "passDeviceSpecs": True,                 # the flag
                "deviceListStrategy": ["envvar", "cdi-cri"],  # the file
                "deviceIDStrategy": "index",             # the environment
                "cdiAnnotationPrefix": "cdi.k8s.io/",
                "nvidiaCTKPath": "/usr/bin/nvidia-ctk",
                "containerDriverRoot": "/driver-root",
                "sharedDevicesAllocationPolicy": "distributed",
            },
        },
        "resources": {"gpus": [{"pattern": "*", "name": "nvidia.com/gpu"}],
                      "mig": [{"pattern": "*", "name": "nvidia.com/gpu"}]},
        "sharing": {"timeSlicing": {}},
        "imex": {},
        "health": {"probeInterval": 2, "quietPeriod": 60},
        "kdev": {
            "configFile": config_file, "devicePluginDir": d,
            "kubeletSocket": os.path.join(d, "custom-kubelet.sock"), "socketPrefix": "kdev-",
            "cdiDir": cdi, "procRoot": "/proc", "root": None, "metricsAddress": None,
            "nfdFeaturesFile": None,
        },
    }


def test_json_start_line_and_custom_kubelet_socket():
    version, commit, build = build_expected()
    with TempDir() as d:
        k = FakeKubelet(d, socket_name="custom-kubelet.sock")
        k.start()
        cdi = os.path.join(os.path.dirname(d), "cdi")
        # -d names another directory: --kubelet-socket wins, as before
        p = Plugin(os.path.join(os.path.dirname(d), "elsewhere"), CONFIG,
                   extra=("--kubelet-socket", os.path.join(d, "custom-kubelet.sock"),
                          "--log-format", "json", "--cdi-dir", cdi, "--pass-device-specs"),
                   env=nvidia_env(d, DEVICE_ID_STRATEGY="index"))
        try:
            wait_for(lambda: k.count("nvidia.com/gpu") == 1, what="registration")
            _, req, _ = k.registrations[0]
            assert req.endpoint == SOCK and req.resource_name == "nvidia.com/gpu", req
            assert os.path.exists(os.path.join(d, SOCK))
            assert not os.path.exists(os.path.join(os.path.dirname(d), "elsewhere"))
            # kubelet restarts: custom-kubelet.sock is created again
            k.restart()
            wait_for(lambda: k.count("nvidia.com/gpu") == 2, what="registration after restart")
            lines = json_lines(p.logtext())
            first = lines[0]
            assert set(first) == {"ts", "level", "msg", "version", "commit", "build", "config"}, \
                first
            assert first["level"] == "info" and first["msg"] == "Running with config", first
            assert (first["version"], first["commit"], first["build"]) == \
                (version, commit, build), first
            want = expected_config(d, p.config, cdi)
            assert first["config"] == want, json.dumps(first["config"], indent=1)
            # typed values: numbers are JSON numbers
            found = [x for x in lines if x["msg"] == "NVIDIA GPUs found"]
            assert found and found[0]["gpus"] == 8 and found[0]["cuda"] == "12.4", found
            gpu0 = [x for x in lines if x["msg"] == "GPU"][0]
            assert (gpu0["index"], gpu0["memory_mib"], gpu0["uuid"]) == \
                (0, 81559, kt.H100_UUIDS[0]), gpu0
            res = [x for x in lines if x["msg"] == "resource"]
            assert res == [{"ts": res[0]["ts"], "level": "info", "msg": "resource",
                            "resource": "nvidia.com/gpu", "devices": 8}], res
        finally:
            assert p.stop() == 0
            k.stop()


def test_text_start_line():
    version, commit, build = build_expected()
    with TempDir() as d:
        cdi = os.path.join(os.path.dirname(d), "cdi")
        p = Plugin(d, CONFIG, extra=("--kubelet-socket", os.path.join(d, "custom-kubelet.sock"),
                                     "--cdi-dir", cdi, "--pass-device-specs"),
                   env=nvidia_env(d, DEVICE_ID_STRATEGY="index"))
        try:
            wait_for(lambda: "Register failed" in p.logtext(), what="first Register attempt")
            first = p.logtext().splitlines()[0]
            head = ('level=info msg="Running with config" version=%s commit=%s build=%s config='
                    % (version, commit, build))
            m = re.fullmatch(r"ts=\S+ (.*? config=)(\".*\")", first)
            assert m and m.group(1) == head, first
            assert json.loads(json.loads(m.group(2))) == expected_config(d, p.config, cdi), first
            # text lines keep their form: typed values print as before
            assert re.search(r'msg="NVIDIA GPUs found" gpus=8 driver=\S+ cuda=12.4$',
                             p.logtext(), re.M), p.logtext()
        finally:
            assert p.stop() == 0


def test_relative_kubelet_socket_and_kdevctl_socket_name():
    with TempDir() as d:
        scenario = os.path.join(os.path.dirname(d), "scn.yaml")
        with open(scenario, "w") as f:
            f.write("wait:\n  timeout: 30\n  resources:\n    nvidia.com/gpu: 8\n"
                    "pods:\n  - name: one\n    containers:\n      - name: main\n"
                    "        limits:\n          nvidia.com/gpu: 1\n")
        kl = subprocess.Popen([KDEVCTL, "kubelet", "--dir", d, "--socket-name", "k.sock",
                               "--scenario", scenario, "-o", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: os.path.exists(os.path.join(d, "k.sock")), what="kdevctl's k.sock")
        log = open(os.path.join(os.path.dirname(d), "rel.log"), "w")
        env = dict(os.environ, **nvidia_env(d))
        for v in ("KDEV_CONFIG", "CONFIG_FILE", "KUBELET_SOCKET"):
            env.pop(v, None)
        p = subprocess.Popen([PLUGIN, "--kubelet-socket", "k.sock", "--cdi-dir",
                              os.path.join(os.path.dirname(d), "cdi"), "--log-format", "json"],
                             cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            out, err = kl.communicate(timeout=60 * kt.TIMEOUT_SCALE)
            assert kl.returncode == 0, err
            res = json.loads(out)
            gpu = [r for r in res["resources"] if r["name"] == "nvidia.com/gpu"][0]
            assert (gpu["capacity"], gpu["allocated"], gpu["endpoint"]) == (8, 1, SOCK), gpu
            pod = [s for s in res["steps"] if s["kind"] == "pod"][0]
            assert (pod["name"], pod["admitted"]) == ("one", True), pod
            alloc = pod["containers"][0]["allocations"][0]
            assert (alloc["resource"], alloc["deviceIDs"]) == \
                ("nvidia.com/gpu", [kt.H100_UUIDS[0]]), alloc
            first = json_lines(open(log.name).read())[0]
            assert first["config"]["kdev"]["devicePluginDir"] == ".", first
            assert first["config"]["kdev"]["kubeletSocket"] == "./k.sock", first
        finally:
            p.terminate()
            assert p.wait(20) == 0
            log.close()
            if kl.poll() is None:
                kl.kill()
                kl.wait()


def test_kubelet_socket_usage_errors():
    for bad, want in (("/tmp/dp/", "/tmp/dp/"), ("/tmp/dp/..", "/tmp/dp/..")):
        r = subprocess.run([PLUGIN, "--kubelet-socket", bad], capture_output=True, text=True)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)
        assert r.stderr == ('kdev-plugin: --kubelet-socket "%s": want the path of a socket '
                            "file, e.g. /var/lib/kubelet/device-plugins/kubelet.sock\n"
                            "Run 'kdev-plugin --help' for the options.\n" % want), r.stderr
    r = subprocess.run([KDEVCTL, "kubelet", "--dir", "/tmp/x", "--socket-name", "a/b"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and \
        "invalid --socket-name \"a/b\" (want a file name, without '/')" in r.stderr, r.stderr


def test_list_gpus():
    """--list-gpus: nvidia-smi's CSV form, minor before MIG mode, exact."""
    topo = os.path.join(kt.SOURCE_DIR, "mock", "nvml", "topologies", "mig-h100-80gb.yaml")
    r = subprocess.run([PLUGIN, "--list-gpus"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                                KDEV_MOCK_NVML_TOPOLOGY=topo))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "GPU-0d4a9c1e-5b7f-4e2a-9c3d-1f2e3a4b5c6d, NVIDIA H100 80GB HBM3, 81559 MiB, "
        "00000000:1B:00.0, 0, Enabled\n"
        "GPU-7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d, NVIDIA H100 80GB HBM3, 81559 MiB, "
        "00000000:43:00.0, 1, Enabled\n"
        "GPU-b5c6d7e8-f9a0-4b1c-9d2e-3f4a5b6c7d8e, NVIDIA H100 80GB HBM3, 81559 MiB, "
        "00000000:52:00.0, 2, Enabled\n"), r.stdout
    # the mock without a topology: the driver is not loaded, exit 1
    r = subprocess.run([PLUGIN, "--list-gpus"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, LD_LIBRARY_PATH=kt.MOCK_NVML_DIR,
                                KDEV_MOCK_NVML_TOPOLOGY=""))
    assert (r.returncode, r.stdout) == (1, ""), (r.returncode, r.stdout, r.stderr)


def test_warns_of_nvidia_plugin_sockets():
    """NVIDIA's plugin sockets in the device-plugins directory give one
    warning each at start (both plugins can register nvidia.com/gpu); a
    file of that name that is not a socket, and kdev's own sockets, give
    none."""
    import socket
    with TempDir() as d:
        held = []
        for name in ("nvidia-gpu.sock", "nvidia-mig-1g.10gb.sock"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(d, name))
            held.append(s)
        open(os.path.join(d, "nvidia-gpu.shared.sock"), "w").close()  # not a socket
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, CONFIG, extra=("--socket-prefix", "nvidia-", "--cdi-dir",
                                     os.path.join(os.path.dirname(d), "cdi")),
                   env=nvidia_env(d))
        try:
            wait_for(lambda: k.count("nvidia.com/gpu") == 1, what="registration")
            warned = re.findall(r'^.*NVIDIA\'s device plugin seems to run on this node.*$',
                                p.logtext(), re.M)
            msg = ('level=warn msg="NVIDIA\'s device plugin seems to run on this node: both '
                   'plugins can register nvidia.com/gpu; remove NVIDIA\'s plugin first '
                   '(docs/migrating-from-nvidia.md)" socket=%s')
            got = sorted(re.sub(r"^ts=\S+ ", "", w) for w in warned)
            assert got == sorted(msg % os.path.join(d, n) for n in
                                 ("nvidia-gpu.sock", "nvidia-mig-1g.10gb.sock")), warned
            # kdev's own socket under the prefix "nvidia-" is not NVIDIA's
            assert os.path.exists(os.path.join(d, "nvidia-nvidia.com_gpu.sock"))
        finally:
            assert p.stop() == 0
            k.stop()
            for s in held:
                s.close()


def test_dra_plugin_start_line():
    version, commit, build = build_expected()
    with TempDir() as d:
        base = os.path.dirname(d)
        env = dict(os.environ, LD_LIBRARY_PATH="/nonexistent", KDEV_DRA_RESYNC_SECONDS="2.5")
        for v in ("KUBERNETES_SERVICE_HOST", "NODE_NAME", "NVIDIA_CDI_HOOK_PATH"):
            env.pop(v, None)
        r = subprocess.run([DRA, "--node-name", "node-1", "--plugins-registry",
                            os.path.join(base, "reg"), "--cdi-dir", os.path.join(base, "cdi"),
                            "--driver-root", os.path.join(base, "nodriver"),
                            "--health-quiet-period", "30", "--log-format", "json"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 1, (r.returncode, r.stderr)
        first = json.loads(r.stderr.splitlines()[0])
        assert first["msg"] == "Running with config", first
        assert (first["version"], first["commit"], first["build"]) == (version, commit, build)
        assert first["config"] == {
            "driverName": "gpu.nvidia.com", "nodeName": "node-1",
            "pluginsRegistry": os.path.join(base, "reg"),
            "pluginDir": "/var/lib/kubelet/plugins/gpu.nvidia.com",
            "cdiDir": os.path.join(base, "cdi"), "kubeconfig": None,
            "resourceAPIVersion": "v1", "driverRoot": os.path.join(base, "nodriver"),
            "nvidiaCDIHookPath": "/usr/bin/nvidia-cdi-hook", "procRoot": "/proc",
            "health": {"probeInterval": 10, "quietPeriod": 30}, "resyncSeconds": 2.5,
            "metricsAddress": None, "usageInterval": 0, "shareableGPUs": False,
            "dynamicMIG": False,
        }, first["config"]


if __name__ == "__main__":
    kt.run_tests([
        test_json_start_line_and_custom_kubelet_socket,
        test_text_start_line,
        test_relative_kubelet_socket_and_kdevctl_socket_name,
        test_kubelet_socket_usage_errors,
        test_list_gpus,
        test_dra_plugin_start_line,
        test_warns_of_nvidia_plugin_sockets,
    ])
