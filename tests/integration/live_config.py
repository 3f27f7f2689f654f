"""kdev-plugin's live configuration, against a grpcio fake kubelet:

- SIGHUP re-reads the config file and applies only what changed: an
  unchanged resource keeps its registration and its ListAndWatch stream, a
  changed one registers again, a new one registers, a gone one is stopped
  and its socket removed; exact log lines for each;
- SIGHUP with the config unchanged serves and registers every resource again
  (the kubelet-restart recovery SIGHUP always was);
- an invalid new config is logged with file:line:column and the old one
  keeps serving;
- an empty config file is NVIDIA's defaults (8 GPUs of the mock NVML);
- per-node configs (--config-dir): the label nvidia.com/device-plugin.config
  of the Node, on the stand-in API server (tests/kubeapi/server.py, watched
  and patched), selects the config, applied live at each patch; a label that
  names no config falls back to the default; libcurl is mapped then (the
  Node watch's client loads it) and never without --config-dir."""
import http.client
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

NULL, ZERO, RANDOM, FULL = ("example.com/null", "example.com/zero", "example.com/random",
                            "example.com/full")
SERVER = os.path.join(kt.SOURCE_DIR, "tests", "kubeapi", "server.py")
TOKEN = "live-config-token"
NODE = "node-1"
LABEL = "nvidia.com/device-plugin.config"


def generic(*resources):
    """A config of generic resources: (name, device path, count)."""
    out = "version: v1\ngeneric:\n  devices:\n"
    for name, path, count in resources:
        out += ("    - name: %s\n      groups:\n        - paths: [{path: %s}]\n"
                "          count: %d\n" % (name, path, count))
    return out


A = generic((NULL, "/dev/null", 4), (ZERO, "/dev/zero", 2), (RANDOM, "/dev/random", 1))
B = generic((NULL, "/dev/null", 4), (ZERO, "/dev/zero", 3), (FULL, "/dev/full", 1))


def sock(name):
    return "kdev-" + name.replace("/", "_") + ".sock"


def ids(name, n):
    base = name.split("/")[1]
    return [("%s::%d" % (base, i), "Healthy") for i in range(n)]


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def mapped(pid, text):
    """The files mapped into process |pid| whose path contains |text|, sorted."""
    with open("/proc/%d/maps" % pid) as f:
        fields = [ln.split(None, 5) for ln in f]
    return sorted({x[5].strip() for x in fields if len(x) == 6 and text in x[5]})


def log_line(p, text):
    """The log lines of |p| that contain |text|, without the timestamp."""
    return [ln.split(" ", 1)[1] for ln in p.logtext().splitlines() if text in ln]


def test_sighup_applies_only_what_changed():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, A)
        try:
            for name in (NULL, ZERO, RANDOM):
                wait_for(lambda: k.count(name) == 1 and k.updates.get(name),
                         what="registration of " + name)
            null_stream = k.streams[NULL]
            write(p.config, B)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: log_line(p, "configuration applied"), what="reload")
            wait_for(lambda: k.count(ZERO) == 2 and k.count(FULL) == 1, what="registrations")
            wait_for(lambda: k.updates.get(ZERO, [[]])[-1] == ids(ZERO, 3) and
                     k.updates.get(FULL) == [[("full", "Healthy")]], what="new lists")
            wait_for(lambda: not os.path.exists(os.path.join(d, sock(RANDOM))),
                     what="socket of the removed resource gone")
            assert not os.path.exists(os.path.join(d, sock(RANDOM) + ".lock"))
            # the unchanged resource: one registration, the same stream, still
            # open, and nothing sent on it (its list did not change)
            assert k.count(NULL) == 1, k.count(NULL)
            assert k.streams[NULL] is null_stream
            assert not null_stream.done()
            assert k.updates[NULL] == [ids(NULL, 4)], k.updates[NULL]
            assert k.count(RANDOM) == 1
            assert log_line(p, "resource unchanged") == [
                'level=info msg="resource unchanged: serving on" resource=example.com/null '
                'devices=4']
            assert log_line(p, "resource changed") == [
                'level=info msg="resource changed: serving and registering it again" '
                'resource=example.com/zero devices=3']
            assert log_line(p, "resource added") == [
                'level=info msg="resource added: serving and registering it" '
                'resource=example.com/full devices=1']
            assert log_line(p, "resource removed") == [
                'level=info msg="resource removed: stopped serving it" '
                'resource=example.com/random']
            assert log_line(p, "configuration applied") == [
                'level=info msg="configuration applied" config=%s unchanged=1 changed=1 '
                'added=1 removed=1' % p.config]
            assert sorted(f for f in os.listdir(d) if f.endswith(".sock")) == sorted(
                [sock(NULL), sock(ZERO), sock(FULL), "kubelet.sock"])
        finally:
            assert p.stop() == 0
            k.stop()


def test_sighup_unchanged_registers_everything_again():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, A)
        try:
            for name in (NULL, ZERO, RANDOM):
                wait_for(lambda: k.count(name) == 1, what="registration of " + name)
            p.proc.send_signal(signal.SIGHUP)
            for name in (NULL, ZERO, RANDOM):
                wait_for(lambda: k.count(name) == 2, what="registration again of " + name)
            assert log_line(p, "configuration unchanged") == [
                'level=info msg="SIGHUP: configuration unchanged, serving and registering '
                'every resource again" config=%s' % p.config]
            assert not log_line(p, "configuration applied")
        finally:
            assert p.stop() == 0
            k.stop()


def test_invalid_config_keeps_the_old_one():
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        p = Plugin(d, A)
        try:
            for name in (NULL, ZERO, RANDOM):
                wait_for(lambda: k.count(name) == 1, what="registration of " + name)
            write(p.config, "version: v1\ngeneric:\n  devices: []\nbogus: 1\n")
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: log_line(p, "cannot load the new configuration"), what="error")
            assert log_line(p, "cannot load the new configuration") == [
                'level=error msg="cannot load the new configuration, the current one stays in '
                'force" config=%s error="%s:4:1: bogus: unknown key (expected one of: version, '
                'generic, flags, resources, sharing, imex, health, usage, isolation)"' % (p.config, p.config)]
            # the old configuration serves on, untouched
            assert kt.plugin_options(d, sock(NULL)).get_preferred_allocation_available
            assert sorted(f for f in os.listdir(d) if f.endswith(".sock")) == sorted(
                [sock(NULL), sock(ZERO), sock(RANDOM), "kubelet.sock"])
            assert [k.count(n) for n in (NULL, ZERO, RANDOM)] == [1, 1, 1]
            assert not k.streams[NULL].done()
            # fixed: applied (nothing changed: every resource registers again)
            write(p.config, A)
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: k.count(NULL) == 2, what="registration after the fix")
        finally:
            assert p.stop() == 0
            k.stop()


def nvidia_env(d):
    control = os.path.join(os.path.dirname(d), "control")
    open(control, "a").close()
    return {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
            "KDEV_MOCK_NVML_CONTROL": control}


def test_empty_config_file_is_nvidia_defaults():
    for text in ("", "# nothing configured\n\n"):
        with TempDir() as d:
            k = FakeKubelet(d)
            k.start()
            p = Plugin(d, text, env=nvidia_env(d),
                       extra=("--cdi-dir", os.path.join(os.path.dirname(d), "cdi")))
            try:
                wait_for(lambda: k.updates.get("nvidia.com/gpu"), what="nvidia.com/gpu")
                assert k.updates["nvidia.com/gpu"][0] == [(u, "Healthy") for u in kt.H100_UUIDS]
                assert log_line(p, 'msg="resource"') == [
                    'level=info msg="resource" resource=nvidia.com/gpu devices=8']
                assert log_line(p, "no YAML document") == [
                    'level=info msg="the config file holds no YAML document: NVIDIA\'s '
                    'defaults" config=%s' % p.config]
            finally:
                assert p.stop() == 0
                k.stop()


def test_sighup_nvidia_allocate_option_change_registers_again():
    # the same GPUs, another deviceListStrategy: Allocate answers differ, so
    # nvidia.com/gpu is served and registered again; back to the same file
    # with no change: every resource registers again (SIGHUP's recovery)
    with TempDir() as d:
        k = FakeKubelet(d)
        k.start()
        cdi = os.path.join(os.path.dirname(d), "cdi")
        p = Plugin(d, "version: v1\nflags: {}\n", env=nvidia_env(d), extra=("--cdi-dir", cdi))
        try:
            wait_for(lambda: k.count("nvidia.com/gpu") == 1, what="registration")
            write(p.config, "version: v1\nflags:\n  plugin:\n"
                            "    deviceListStrategy: [volume-mounts]\n")
            p.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: k.count("nvidia.com/gpu") == 2, what="registration again")
            assert log_line(p, "configuration applied") == [
                'level=info msg="configuration applied" config=%s unchanged=0 changed=1 '
                'added=0 removed=0' % p.config]
            assert k.updates["nvidia.com/gpu"][-1] == [(u, "Healthy") for u in kt.H100_UUIDS]
        finally:
            assert p.stop() == 0
            k.stop()


class Api:
    def __init__(self, root, labels):
        seed = os.path.join(root, "seed.json")
        with open(seed, "w") as f:
            json.dump([{"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": NODE, "labels": labels}}], f)
        self.proc = subprocess.Popen([sys.executable, SERVER, "--token", TOKEN, "--seed", seed],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.info = json.loads(self.proc.stdout.readline())
        self.kubeconfig = os.path.join(root, "kubeconfig")
        kt.write_kubeconfig(self.kubeconfig, self.info["url"], TOKEN)

    def label(self, value):
        """kubectl label node: a merge patch of the label (None: removed)."""
        c = http.client.HTTPConnection("127.0.0.1", self.info["port"], timeout=30)
        c.request("PATCH", "/api/v1/nodes/" + NODE,
                  json.dumps({"metadata": {"labels": {LABEL: value}}}),
                  {"Content-Type": "application/merge-patch+json",
                   "Authorization": "Bearer " + TOKEN})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        assert r.status == 200, (r.status, body)
        assert body["metadata"].get("labels", {}).get(LABEL) == value, body

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(20)


def test_node_label_selects_the_config_live():
    with TempDir() as d:
        root = os.path.dirname(d)
        confdir = os.path.join(root, "configs")
        os.mkdir(confdir)
        write(os.path.join(confdir, "a"), A)
        write(os.path.join(confdir, "b"), B)
        write(os.path.join(confdir, "default"), generic((NULL, "/dev/null", 4)))
        os.mkdir(os.path.join(confdir, "..data"))  # a mounted ConfigMap's own entry
        api = Api(root, {LABEL: "a"})
        k = FakeKubelet(d)
        k.start()
        log_path = os.path.join(root, "plugin.log")
        log = open(log_path, "w")
        env = dict(os.environ, NODE_NAME=NODE, KUBECONFIG=api.kubeconfig,
                   CONFIG_FILE_SRCDIR=confdir, DEFAULT_CONFIG="default")
        proc = subprocess.Popen([*kt.WRAP, os.path.join(kt.BUILD_DIR, "kdev-plugin"),
                                 "--device-plugin-dir", d, "--log-level", "debug"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)

        def lines(text):
            with open(log_path) as f:
                return [ln.split(" ", 1)[1] for ln in f.read().splitlines() if text in ln]
        try:
            for name in (NULL, ZERO, RANDOM):
                wait_for(lambda: k.count(name) == 1 and k.updates.get(name),
                         what="registration of " + name)
            assert lines("selected config") == [
                'level=info msg="selected config" name=a label=a node=node-1']
            # the Node watch's client loaded libcurl (src/kube/libcurl.c)
            assert mapped(proc.pid, "libcurl") == [kt.ldconfig_path("libcurl.so.4")]
            null_stream = k.streams[NULL]
            # label a -> b: applied live, the unchanged resource keeps its stream
            api.label("b")
            wait_for(lambda: lines("configuration applied"), what="config b applied")
            wait_for(lambda: k.count(ZERO) == 2 and k.count(FULL) == 1, what="registrations")
            wait_for(lambda: not os.path.exists(os.path.join(d, sock(RANDOM))),
                     what="socket of the removed resource gone")
            assert k.count(NULL) == 1 and k.streams[NULL] is null_stream
            assert not null_stream.done()
            assert lines("node config label changed") == [
                'level=info msg="node config label changed" label=nvidia.com/device-plugin.config '
                'value=b']
            assert lines("configuration applied") == [
                'level=info msg="configuration applied" config=%s/b unchanged=1 changed=1 '
                'added=1 removed=1' % confdir]
            # a label naming no config: a warning, then the default config
            api.label("nosuch")
            wait_for(lambda: len(lines("configuration applied")) == 2, what="default applied")
            wait_for(lambda: not os.path.exists(os.path.join(d, sock(ZERO))) and
                     not os.path.exists(os.path.join(d, sock(FULL))), what="only null left")
            assert lines("names config") == [
                'level=warn msg="node label nvidia.com/device-plugin.config names config '
                '\\"nosuch\\", which is not in %s (configs: a, b, default); using the default"'
                % confdir]
            assert lines("configuration applied")[1] == (
                'level=info msg="configuration applied" config=%s/default unchanged=1 '
                'changed=0 added=0 removed=2' % confdir)
            assert k.count(NULL) == 1 and not null_stream.done()
            # the label removed: the default again, already in force
            api.label(None)
            wait_for(lambda: lines("config already in force"), what="no-op")
            assert lines("config already in force") == [
                'level=info msg="config already in force" name=default']
            assert len(lines("configuration applied")) == 2
            assert sorted(f for f in os.listdir(d) if f.endswith(".sock")) == sorted(
                [sock(NULL), "kubelet.sock"])
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            rc = proc.wait(20 * kt.TIMEOUT_SCALE)
            log.close()
            k.stop()
            api.stop()
            assert rc == 0, rc


def test_no_config_dir_no_libcurl():
    # without --config-dir kdev-plugin creates no API server client, so
    # libcurl (loaded by the first one) and its TLS stack are never mapped
    with kt.registered_plugin() as (d, k, p):
        assert mapped(p.proc.pid, "libuv") == [kt.ldconfig_path("libuv.so.1")]  # maps is read
        assert mapped(p.proc.pid, "libcurl") == []
        assert mapped(p.proc.pid, "libssl") == []
        assert mapped(p.proc.pid, "libgnutls") == []


def test_config_dir_usage():
    exe = os.path.join(kt.BUILD_DIR, "kdev-plugin")
    r = subprocess.run([exe, "--config", "/x.yaml", "--config-dir", "/tmp"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r
    assert r.stderr.startswith("kdev-plugin: --config and --config-dir exclude each other\n"), \
        r.stderr
    env = dict(os.environ)
    env.pop("NODE_NAME", None)
    r = subprocess.run([exe, "--config-dir", "/tmp"], capture_output=True, text=True, env=env)
    assert r.returncode == 1, r
    assert 'error="--config-dir needs the node name (NODE_NAME or --node-name)"' in r.stderr, \
        r.stderr


if __name__ == "__main__":
    kt.run_tests([
        test_sighup_applies_only_what_changed,
        test_sighup_unchanged_registers_everything_again,
        test_invalid_config_keeps_the_old_one,
        test_empty_config_file_is_nvidia_defaults,
        test_sighup_nvidia_allocate_option_change_registers_again,
        test_node_label_selects_the_config_live,
        test_no_config_dir_no_libcurl,
        test_config_dir_usage,
    ])
