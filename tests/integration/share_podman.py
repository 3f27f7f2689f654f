"""podman (Debian's 4.3, runc) runs a container with the CDI device of an
isolated replica (kdev.io/share=<id>, deviceListStrategy cdi-cri) that
kdev-plugin answered on the mock libnvidia-ml.so.1, and the container sees
its share as libkdev-share.so will: /etc/ld.so.preload naming the library
first and then the image's own entry (written by the spec's createRuntime
hook), the library at /usr/lib/kdev/libkdev-share.so, KDEV_SHARE_DIR, the
limits file read-only, the region directory writable. A dynamic program in
the image then really loads both preloaded libraries (each prints a line
from its constructor), the share library's stand-in first in the loader's
search order (the one whose symbols interpose); with `preload:
env` (LD_PRELOAD) the image's /etc/ld.so.preload is the image's and both
load too.

The image is a folder (podman run --rootfs): Debian's busybox-static, the
host's dynamic loader and libc, a test program and the two stand-in
libraries built here with cc. The test runs in a private mount namespace
(tests/pylib/cdi_consumer.py) where /run is a tmpfs: podman 4.3 reads CDI
specs from /etc/cdi and /var/run/cdi only, and kdev-plugin writes to
/run/cdi there. Skips (77) when podman cannot run a container here, when
not root, or without a C compiler."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
import cdi_consumer as cc  # noqa: E402
from kdevtest import FakeKubelet, Plugin, wait_for  # noqa: E402
from podman import Podman, probe  # noqa: E402

import nvidia_isolation as ni  # noqa: E402  (the config and values of its tests)

U = kt.H100_UUIDS
LIB_CTR = ni.LIB_CTR
IMAGE_LIB = "/usr/lib/libimage.so"

CTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void)
{
        const char *dir = getenv("KDEV_SHARE_DIR");
        fprintf(stdout, "loaded %s dir=%s\n", NAME, dir ? dir : "-");
        fflush(stdout);
}
const char *kdev_test_probe(void) { return NAME; }
"""
# The first library of the loader's search order defines the symbol the
# program finds: the one that interposes (libkdev-share.so must come first).
MAIN = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int main(void)
{
        const char *(*probe)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "kdev_test_probe");
        printf("first %s\n", probe ? probe() : "none");
        return 0;
}
"""


def cc_build(out, src, *flags):
    path = out + ".c"
    with open(path, "w") as f:
        f.write(src)
    subprocess.run(["cc", "-O1", *flags, "-o", out, path], check=True)


def build_image(base, pm):
    """The rootfs of |pm| with a dynamic program, libc, the image's own
    preload library and /etc/ld.so.preload; returns the share library
    stand-in (a host path, for --share-library)."""
    root = pm.rootfs
    for lib in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"):
        os.makedirs(os.path.dirname(root + lib), exist_ok=True)
        shutil.copy(lib, root + lib)
    os.makedirs(root + "/usr/lib", exist_ok=True)
    cc_build(root + "/bin/hello", MAIN)
    cc_build(root + IMAGE_LIB, CTOR, "-shared", "-fPIC", '-DNAME="image"')
    with open(root + "/etc/ld.so.preload", "w") as f:
        f.write(IMAGE_LIB + "\n")
    share = os.path.join(base, "libkdev-share.so")
    cc_build(share, CTOR, "-shared", "-fPIC", '-DNAME="kdev-share"')
    return share


SCRIPT = ("echo \"preload $(cat /etc/ld.so.preload | tr '\\n' ' ')\"; "
          "echo \"dir $KDEV_SHARE_DIR\"; echo \"ldpreload ${LD_PRELOAD:--}\"; "
          "echo \"limits $(grep -v '^#' /var/run/kdev/share/limits)\"; "
          "(echo x >> /var/run/kdev/share/limits) 2>/dev/null && echo limits-writable "
          "|| echo limits-read-only; "
          "touch /var/run/kdev/share/region && echo region-writable; "
          "[ -f " + LIB_CTR + " ] && echo library-present; "
          "/bin/hello")


def podman_in_namespace(base):
    """In the private mount namespace: /run a tmpfs (podman 4.3 reads CDI
    specs from /etc/cdi and /var/run/cdi only; kdev-plugin writes /run/cdi),
    /etc/cdi emptied, podman under |base|/podman. Returns (Podman, None), or
    (None, why it cannot run a container here)."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run"], check=True)
    if os.path.isdir("/etc/cdi"):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/etc/cdi"], check=True)
    os.makedirs(os.path.join(base, "podman"))
    pm = Podman(os.path.join(base, "podman"))
    why = probe(pm)
    return (None, why) if why else (pm, None)


def start_node(d, extra_iso, share_lib):
    """kdev-plugin (deviceListStrategy cdi-cri, CDI specs in /run/cdi) with
    isolated replicas under |d| on the mock NVML, its fake kubelet, until
    the isolated resource is listed. Returns (kubelet, plugin, device
    plugin directory, share root)."""
    dp = os.path.join(d, "dp")
    os.makedirs(dp)
    root = os.path.join(d, "share")
    control = os.path.join(d, "control")
    open(control, "w").close()
    k = FakeKubelet(dp)
    k.start()
    p = Plugin(dp, ni.CONFIG % ("cdi-cri", extra_iso),
               extra=("--cdi-dir", "/run/cdi", "--share-root", root, "--share-library",
                      share_lib),
               env={"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
                    "KDEV_MOCK_NVML_CONTROL": control})
    try:
        wait_for(lambda: k.updates.get(ni.RES), what="ListAndWatch of " + ni.RES)
    except AssertionError:
        p.stop()
        k.stop()
        raise
    return k, p, dp, root


def run_case(base, pm, share_lib, extra_iso, name):
    k, p, dp, root = start_node(os.path.join(base, name), extra_iso, share_lib)
    try:
        r = kt.allocate(dp, ni.SOCK, [U[2] + "::1"])
        name = r.cdi_devices[-1].name
        assert name.startswith("kdev.io/share="), r.cdi_devices
        out = pm.run_rootfs("--device", name, script=SCRIPT)
        assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
        region = os.path.join(root, "containers", name.split("=", 1)[1])
        assert os.path.exists(region + "/region"), os.listdir(region)
        return out.stdout.splitlines()
    finally:
        rc = p.stop()
        k.stop()
        assert rc == 0, p.logtext()[-3000:]


def main():
    cc.enter_private_mounts()
    if shutil.which("cc") is None:
        print("SKIP: no C compiler (cc) to build the test program")
        return kt.SKIP
    base = cc.BASE
    pm, why = podman_in_namespace(base)
    if why:
        print("SKIP:", why)
        return kt.SKIP
    share = build_image(base, pm)
    limits = "limits %s %d 25" % (U[2], ni.QUARTER)
    want_file = ["preload %s %s " % (LIB_CTR, IMAGE_LIB), "dir /var/run/kdev/share",
                 "ldpreload -", limits, "limits-read-only", "region-writable",
                 "library-present", "loaded image dir=/var/run/kdev/share",
                 "loaded kdev-share dir=/var/run/kdev/share", "first kdev-share"]
    want_env = list(want_file)
    want_env[0] = "preload %s " % IMAGE_LIB
    want_env[2] = "ldpreload " + LIB_CTR
    failures = 0
    for name, extra, want in (("file", "", want_file), ("env", "    preload: env\n", want_env)):
        got = run_case(base, pm, share, extra, name)
        # constructors run in reverse order of loading: the order that
        # matters, the search order, is "first"
        ok = got == want
        failures += not ok
        print("%s: preload %s: %s" % ("ok" if ok else "FAIL", name,
                                      "" if ok else "\n  got  %s\n  want %s" % (got, want)),
              flush=True)
    # the control run: the image alone loads only its own library
    out = pm.run_rootfs(script="/bin/hello")
    if out.stdout.splitlines() != ["loaded image dir=-", "first image"]:
        print("FAIL: control run: %r" % out.stdout)
        failures += 1
    if failures:
        print("%d failure(s)" % failures)
        return 1
    print("ok: a container with an isolated replica's CDI device sees its share and keeps "
          "the image's /etc/ld.so.preload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
