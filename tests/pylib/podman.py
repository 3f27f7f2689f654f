"""podman (Debian's 4.3) for kdev's tests, configured in a folder of its own
(tests/integration/cdi_podman.py, tests/integration/image_podman.py).

What podman needs in this sandbox, set here and not in any system file:
- runc: crun 1.8 refuses the hybrid cgroup v1/v2 layout ("--runtime runc");
- vfs storage (no overlay-on-overlay), in the test's own root and runroot;
- "--cgroup-manager cgroupfs" (no systemd), events to a file; containers
  run with "--network none" or the caller's network namespace ("--network
  host"): there is no netavark or slirp;
- explicit default_ulimits (containers.conf: nofile and nproc 1024):
  with podman's defaults for root (1048576), and even with the sandbox's
  own hard limits, runc fails with "error setting rlimits for ready
  process: error setting rlimit type 6: operation not permitted".
podman reads CDI specs from /etc/cdi and /var/run/cdi only (4.3 has no
cdi_spec_dirs): the tests run in a private mount namespace
(cdi_consumer.enter_private_mounts) where /run is a tmpfs."""
import os
import shutil
import subprocess

BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "cat", "env", "stat", "grep", "sed", "sha256sum")


class Podman:
    """podman with its configuration, storage and state under |base|, and a
    busybox root file system (BASE/rootfs) for run_rootfs."""

    def __init__(self, base):
        self.base = base
        conf = os.path.join(base, "containers.conf")
        # podman's defaults for root (nofile and nproc 1048576, and even the
        # sandbox's own hard limits) make runc fail in this sandbox; 1024 is
        # below any hard limit
        ulimits = '"nofile=1024:1024", "nproc=1024:1024"'
        with open(conf, "w") as f:
            f.write('[containers]\ndefault_ulimits = [%s]\nlog_driver = "k8s-file"\n'
                    '[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n'
                    'events_logger = "file"\nevents_logfile_path = "%s"\ntmp_dir = "%s"\n'
                    % (ulimits, os.path.join(base, "events.log"), os.path.join(base, "tmp")))
        storage = os.path.join(base, "storage.conf")
        with open(storage, "w") as f:
            f.write('[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n'
                    % (os.path.join(base, "graph"), os.path.join(base, "run")))
        self.env = dict(os.environ, CONTAINERS_CONF=conf, CONTAINERS_STORAGE_CONF=storage)
        self.rootfs = os.path.join(base, "rootfs")
        for d in ("bin", "dev", "proc", "sys", "etc", "tmp"):
            os.makedirs(os.path.join(self.rootfs, d))
        if os.path.exists(BUSYBOX):
            shutil.copy(BUSYBOX, os.path.join(self.rootfs, "bin", "busybox"))
        for applet in APPLETS:
            os.symlink("busybox", os.path.join(self.rootfs, "bin", applet))

    def cmd(self, *args):
        """The podman command line for |args| with the sandbox's settings."""
        return ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs",
                "--storage-driver", "vfs", *args]

    def __call__(self, *args, timeout=120, **kw):
        """Runs podman |args|; returns the CompletedProcess (text, captured)."""
        return subprocess.run(self.cmd(*args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def run_rootfs(self, *args, script, timeout=60):
        """podman run --rm --network none |args| on the busybox rootfs, running
        /bin/sh -c |script|."""
        return self(*("run", "--rm", "--network", "none", *args, "--rootfs", self.rootfs,
                      "/bin/sh", "-c", script), timeout=timeout)


def probe(pm):
    """None when |pm| can run a container here, else why not."""
    if shutil.which("podman") is None or shutil.which("runc") is None:
        return "podman or runc is not installed (scripts/deps.sh --test installs them)"
    if not os.path.exists(BUSYBOX):
        return "%s is missing (Debian: busybox-static)" % BUSYBOX
    r = pm.run_rootfs(script="echo ok")
    if r.returncode != 0 or r.stdout.strip() != "ok":
        return "podman cannot run a container here (exit %d): %s" % (r.returncode,
                                                                    r.stderr.strip())
    return None
