"""podman (Debian's 4.3) as a consumer of the CDI specs kdev writes: for
every CDI device of tests/pylib/cdi_consumer.py (kdev-plugin: GPU, MIG
strategy mixed with a time-sliced MIG profile, time-sliced GPUs;
kdev-dra-plugin: a GPU claim, a MIG claim) a real container runs with
`podman run --device <the CDI name kdev answered>` and reports from inside:
each device node's type and major:minor (the fake driver's mknod nodes),
the environment, the driver files mounted read-only with their content, and
that the spec's createContainer hooks ran with their arguments.

What podman needs in this sandbox (runc, vfs, cgroupfs, no network,
explicit ulimits) is set by tests/pylib/podman.py, and said there.

The container's rootfs is Debian's busybox-static binary in a folder
(podman run --rootfs; no registry, no image). Podman reads CDI specs from
/etc/cdi and /var/run/cdi only (4.3 has no cdi_spec_dirs): the test runs in
a private mount namespace (root) where /run is a tmpfs and /etc/cdi is
hidden, and copies the spec under test to /run/cdi.

Skips (77) only when podman cannot run a container at all on this machine
(not installed, or a trivial `podman run` fails: the reason is printed)."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
import cdi_consumer as cc  # noqa: E402
from podman import Podman, probe  # noqa: E402


def container_report(pm, case, hook_log, with_device=True):
    """Runs the container with case's CDI device (none: |with_device|
    false, the control run); returns the problems."""
    cdi = "/run/cdi"
    shutil.rmtree(cdi, ignore_errors=True)
    shutil.copytree(case.spec_dir, cdi)
    open(hook_log, "w").close()
    lines = ["stat -c 'node %%n %%F %%t:%%T' %s" % p for p, _, _ in case.nodes]
    lines.append("env | grep '^NVIDIA_' | sed 's/^/env /' ")
    for c, _, _ in case.mounts:
        lines.append("echo \"file %s $(cat %s)\"" % (c, c))
        lines.append("grep ' %s ' /proc/self/mountinfo | sed 's/^/mount /'" % c)
    lines = [l + " 2>/dev/null" for l in lines]
    r = pm.run_rootfs(*(("--device", case.cdi_name) if with_device else ()),
                      script="; ".join(lines).replace("sed", "busybox sed"))
    if os.environ.get("KDEV_CDI_PODMAN_VERBOSE"):
        print(r.stdout)
    if with_device and r.returncode != 0:
        return ["podman run exit %d: %s %s" % (r.returncode, r.stdout, r.stderr)]
    out = r.stdout.splitlines()
    problems = []
    nodes = [l for l in out if l.startswith("node ")]
    want = ["node %s character special file %x:%x" % (p, ma, mi) for p, ma, mi in case.nodes]
    if nodes != want:
        problems.append("device nodes\n  got  %s\n  want %s" % (nodes, want))
    env = sorted(l[4:] for l in out if l.startswith("env "))
    if env != sorted(case.env):
        problems.append("env %s, want %s" % (env, case.env))
    files = [l for l in out if l.startswith("file ")]
    want_files = ["file %s fake %s" % (c, os.path.basename(c)) for c, _, _ in case.mounts]
    if files != want_files:
        problems.append("files\n  got  %s\n  want %s" % (files, want_files))
    for c, _, _ in case.mounts:
        ms = [l.split() for l in out if l.startswith("mount ")]
        m = [x for x in ms if x[5] == c]
        # mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...
        if len(m) != 1 or "ro" not in m[0][6].split(","):
            problems.append("mount of %s: %s" % (c, m))
    with open(hook_log) as f:
        ran = f.read().splitlines()
    want_hooks = [" ".join(args[1:]) for _, _, args, _ in case.hooks]
    if ran != want_hooks:
        problems.append("hooks ran %s, want %s" % (ran, want_hooks))
    return problems


def main():
    cc.enter_private_mounts()
    if not os.path.exists(os.path.join(kt.MOCK_NVML_DIR, "libnvidia-ml.so.1")):
        print("the mock libnvidia-ml.so.1 is not built in", kt.MOCK_NVML_DIR)
        return 1
    failures = []
    for i, layout in enumerate(cc.LAYOUTS):
        base = os.path.join(cc.BASE, "layout%d" % i)
        cases = cc.timed("layout %s: kdev specs" % layout.name, cc.collect, layout, base)
        os.makedirs(os.path.join(base, "podman"))
        pm = Podman(os.path.join(base, "podman"))
        why = cc.timed("podman probe", probe, pm)
        if why:
            print("SKIP:", why)
            return kt.SKIP
        assert len(cases) == 7, cases
        # the control run: without --device the same checks find nothing
        problems = container_report(pm, cases[0], os.path.join(base, "hook.log"), False)
        want = ["device nodes", "env", "files", "mount of", "hooks ran"]
        got = [p.split(" [")[0].split(" /")[0].split("\n")[0] for p in problems]
        if sorted(set(got)) != sorted(want):
            failures.append("the control run without --device: %s" % problems)
        for c in cases:
            problems = cc.timed("podman run %s" % c.cdi_name, container_report, pm, c,
                                os.path.join(base, "hook.log"))
            print("%s: layout %s: %s" % ("FAIL" if problems else "ok", layout.name, c),
                  flush=True)
            for p in problems:
                print("   ", p)
                failures.append("%s: %s" % (c, p))
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok: podman ran a container with each kdev CDI device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
