#!/usr/bin/env python3
"""The examples of docs/migrating-from-nvidia.md are what the commands print,
and the options and environment variables it names are kdev's.

1. Every ```console block preceded by a line "<!-- checked -->" (or
   "<!-- checked: TOOL ... -->": skipped when a TOOL is not on PATH) is a
   shell transcript: lines starting with "$ " are commands (a command ending
   in <<'EOF' takes the lines up to EOF with it), the others are the output
   the commands before them print on stdout. The checked blocks run in
   order, in one bash in one scratch directory, with KDEV (the source tree)
   and KDEV_BUILD (the build tree) set; each block's stdout must equal its
   output lines exactly. A block that exits the shell, or a mismatch, fails
   with the block's line number and a diff.
2. Every --option the page names in a kdev command line or in backticks
   (outside the "not run here" kubectl/helm/jq lines) is in the --help of
   kdev-plugin, kdev-dra-plugin or kdevctl, or one of KUBECTL_OPTIONS.
3. Every environment variable the page names in backticks is in
   kdev-plugin --help, or one of OTHER_NAMES.
4. The page has at least one checked block (a page without any would pass
   trivially), and the start-up warning that points to it names it.

Env: KDEV_BUILD_DIR, KDEV_SOURCE_DIR.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(os.environ.get("KDEV_BUILD_DIR", "build"))
SRC = os.path.abspath(os.environ.get("KDEV_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
PAGE = "docs/migrating-from-nvidia.md"

# Options the page names that are not kdev's: kubectl's, in prose.
KUBECTL_OPTIONS = {"type", "local"}
# Upper-case names in backticks that are not kdev-plugin's variables: the
# page's own (KDEV, KDEV_BUILD), the shell's, the mock NVML's, what the
# Allocate answer or the pod carries, a gRPC code, a capability.
OTHER_NAMES = {"KDEV", "KDEV_BUILD", "PATH", "LD_LIBRARY_PATH", "KDEV_MOCK_NVML_TOPOLOGY",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", "INVALID_ARGUMENT",
             "NVIDIA_CTK_LIBCUDA_DIR", "SYS_ADMIN"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def checked_blocks(text):
    """[(line number, tools, [(command, [output lines])...])]."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^<!-- checked(?::\s*([^>]*?))?\s*-->$", lines[i])
        if not m:
            i += 1
            continue
        tools = (m.group(1) or "").split()
        if i + 1 >= len(lines) or lines[i + 1] != "```console":
            fail(f"{PAGE}:{i + 1}: '<!-- checked -->' not followed by a ```console block")
            i += 1
            continue
        start = i + 2
        j = start
        steps = []
        while j < len(lines) and lines[j] != "```":
            line = lines[j]
            if line.startswith("$ "):
                cmd = [line[2:]]
                if re.search(r"<<'(\w+)'$", line):
                    end = re.search(r"<<'(\w+)'$", line).group(1)
                    j += 1
                    while j < len(lines) and lines[j] != end:
                        cmd.append(lines[j])
                        j += 1
                    cmd.append(end)
                steps.append(("\n".join(cmd), []))
            elif not steps:
                fail(f"{PAGE}:{j + 1}: output before any command")
            else:
                steps[-1][1].append(line)
            j += 1
        out.append((start, tools, steps))
        i = j + 1
    return out


def run_blocks(blocks, cwd):
    script = ["exec 2>/dev/null </dev/null"]  # stderr is not part of the transcript
    ran = []
    for n, (line, tools, steps) in enumerate(blocks):
        missing = [t for t in tools if not shutil.which(t)]
        if missing:
            print(f"skip {PAGE}:{line}: {' '.join(missing)} not installed")
            continue
        script.append(f"printf '\\n@@block {n}@@\\n' >&3")
        for cmd, _ in steps:
            script.append(cmd)
        ran.append(n)
    script.append(f"printf '\\n@@end@@\\n' >&3")
    env = dict(os.environ, KDEV=SRC, KDEV_BUILD=BUILD)
    for k in ("KDEV_CONFIG", "CONFIG_FILE", "NODE_NAME", "KUBERNETES_SERVICE_HOST",
              "DEVICE_LIST_STRATEGY", "NVIDIA_DRIVER_ROOT", "KUBELET_SOCKET"):
        env.pop(k, None)
    # fd 3 carries the block markers in order with the commands' stdout
    p = subprocess.run(["bash", "-c", "exec 3>&1\n" + "\n".join(script)], cwd=cwd, env=env,
                       stdout=subprocess.PIPE, timeout=240)
    got = p.stdout.decode()
    if "\n@@end@@\n" not in got:
        fail(f"the checked blocks did not run to the end (bash exit {p.returncode}):\n{got}")
    parts = re.split(r"\n@@block (\d+)@@\n", got.split("\n@@end@@\n")[0])
    by_block = {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)}
    for n in ran:
        line, _, steps = blocks[n]
        want = [o for _, outs in steps for o in outs]
        have = by_block.get(n, "").splitlines()
        if have != want:
            diff = "\n".join(difflib.unified_diff(want, have, "page", "run", lineterm=""))
            fail(f"{PAGE}:{line}: the block's output differs from a fresh run:\n{diff}")
        else:
            print(f"ok {PAGE}:{line}: {len(steps)} commands, {len(want)} output lines")
    return len(ran)


def help_text(argv):
    p = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.stdout.decode()


def check_names(text):
    helps = help_text([os.path.join(BUILD, "kdev-plugin")])
    plugin_help = helps
    # kdev-plugin's subcommands (mps-control-daemon and its mount-shm)
    helps += help_text([os.path.join(BUILD, "kdev-plugin"), "mps-control-daemon"])
    helps += help_text([os.path.join(BUILD, "kdev-plugin"), "mps-control-daemon", "mount-shm"])
    helps += help_text([os.path.join(BUILD, "kdev-dra-plugin")])
    top = help_text([os.path.join(BUILD, "kdevctl")])
    helps += top
    m = re.search(r"^Commands:\n((?:  \S.*\n)+)", top, re.M)
    for line in (m.group(1).splitlines() if m else []):
        helps += help_text([os.path.join(BUILD, "kdevctl"), line.split()[0]])
    known = set(re.findall(r"(?<![\w/-])--([a-z][a-z0-9-]*)", helps))

    # Lines of commands that are not kdev's: kubectl, helm, jq and the shell.
    def kdev_part(line):
        return not re.match(r"^\s*(\$ )?(kubectl|helm|n=|ops\(\)|T=)\b", line)

    named = set()
    for line in text.splitlines():
        if kdev_part(line):
            for span in re.findall(r"`([^`]*)`", line) if not line.startswith(("$ ", "kdev")) \
                    else [line]:
                named |= set(re.findall(r"(?<![\w/-])--([a-z][a-z0-9-]*)", span))
    for o in sorted(named - known - KUBECTL_OPTIONS):
        fail(f"{PAGE}: names --{o}, which no kdev --help has")
    if len(named & known) < 10:
        fail(f"{PAGE}: only {len(named & known)} kdev options recognised; the scan is broken")

    env = set()
    for span in re.findall(r"`([^`\n]*)`", text):
        env |= set(re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", span))
    for e in sorted(env - OTHER_NAMES):
        if not re.search(r"\b%s\b" % e, plugin_help):
            fail(f"{PAGE}: names ${e}, which kdev-plugin --help does not")
    print(f"ok names: {len(named)} options, {len(env)} environment variables")


def main():
    for b in ("kdev-plugin", "kdev-dra-plugin", "kdevctl"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            print(f"{b} not built in {BUILD}")
            return 77
    if not os.path.exists(os.path.join(BUILD, "mock/nvml/libnvidia-ml.so.1")):
        print("the mock NVML is not built")
        return 77
    with open(os.path.join(SRC, PAGE), encoding="utf-8") as f:
        text = f.read()
    blocks = checked_blocks(text)
    if len(blocks) < 5:
        fail(f"{PAGE}: {len(blocks)} checked blocks, want at least 5")
    cwd = tempfile.mkdtemp(prefix="kdev-docs-examples.")
    try:
        if run_blocks(blocks, cwd) == 0:
            fail("no checked block ran")
    finally:
        subprocess.run(["rm", "-rf", cwd])
    check_names(text)
    with open(os.path.join(SRC, "src/daemon/dp_daemon.c"), encoding="utf-8") as f:
        if "(" + PAGE + ")" not in f.read():
            fail(f"src/daemon/dp_daemon.c: the NVIDIA plugin warning does not name {PAGE}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("the page's examples and names agree with the binaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
