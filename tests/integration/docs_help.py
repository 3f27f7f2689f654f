#!/usr/bin/env python3
"""Keeps --help and docs/ from drifting apart, for kdev-plugin,
kdev-dra-plugin, kdevctl and every kdevctl subcommand:

1. --help and -h exit 0 with the same non-empty text on stdout and nothing on
   stderr;
2. every --option named in the help appears in the docs page (for a kdevctl
   subcommand: in its "### kdevctl NAME" section of docs/kdevctl.md);
3. every --option named in the page's OPTIONS section (for a subcommand, its
   section) appears in the help;
4. every long option the parser knows (the option tables in the sources)
   appears in the help, and every --option in the help is recognised by the
   parser: "BIN --opt=x --zz-sentinel" must not fail with "unrecognized /
   unknown option --opt" (a bogus option must, as a control);
5. every environment variable the program reads (getenv/env_seconds literals
   in its source, NVIDIA's env table) is named in the help and the page;
6. each page has the man-page sections.

Env: KDEV_BUILD_DIR (the binaries), KDEV_SOURCE_DIR (docs/ and src/).
KDEV_DOCS_DIR overrides the docs directory (to try the test on an edited copy).
"""
import os
import re
import subprocess
import sys
import tempfile

BUILD = os.environ.get("KDEV_BUILD_DIR", "build")
SRC = os.environ.get("KDEV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = os.environ.get("KDEV_DOCS_DIR", os.path.join(SRC, "docs"))

SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "FILES",
            "EXIT STATUS", "EXAMPLES", "SEE ALSO"]
OPT_RE = re.compile(r"(?<![\w/-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
SENTINEL = "--zz-docs-help-sentinel"

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def run(argv, cwd):
    env = dict(os.environ)
    # Never touch a real node: no in-cluster config, no mock-less NVML surprises.
    for k in ("KUBERNETES_SERVICE_HOST", "KDEV_CONFIG", "CONFIG_FILE", "NODE_NAME",
              "KDEV_METRICS_ADDRESS"):
        env.pop(k, None)
    p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def options_in(text):
    return set(OPT_RE.findall(text))


def md_sections(text, level):
    """{heading: body} for the headings of |level| ('## ', '### ')."""
    out = {}
    cur = None
    prefix = "#" * level + " "
    for line in text.splitlines():
        if line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            if hashes <= level:
                cur = line[len(prefix):].strip() if hashes == level else None
                if cur is not None:
                    out[cur] = ""
                continue
        if cur is not None:
            out[cur] += line + "\n"
    return out


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def parser_options(source, kind):
    """Long options in the option table(s) of a source file."""
    text = read(source)
    if kind == "getopt":
        return set(re.findall(r'\{"([a-z0-9-]+)",\s*(?:no|required|optional)_argument', text))
    # kdev_cli_opt tables: {"name", 'o' or 0, true/false, ID}
    return set(re.findall(r'\{"([a-z0-9-]+)",\s*(?:\'.\'|0),\s*(?:true|false),', text))


def nvidia_flags_and_env():
    text = read(os.path.join(SRC, "src/nvidia/config_env.c"))
    table = text[text.index("kdev_nvidia_flags[] = {"):]
    table = table[:table.index("};")]
    flags = set(re.findall(r'\{"([a-z0-9-]+)",\s*(?:true|false),', table))
    env_table = text[text.index("env_table[] = {"):]
    env_table = env_table[:env_table.index("};")]
    env = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', env_table))
    return flags, env


def source_env(source):
    text = read(source)
    return set(re.findall(r'(?:getenv|env_seconds)\("([A-Z][A-Z0-9_]+)"', text))


def check_help(argv, cwd):
    rc, out, err = run(argv + ["--help"], cwd)
    name = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    if rc != 0:
        fail(f"{name} --help: exit status {rc}, want 0 (stderr: {err.strip()[:200]})")
    if not out.strip():
        fail(f"{name} --help: empty stdout")
    if err:
        fail(f"{name} --help: wrote to stderr: {err.strip()[:200]}")
    if not out.startswith("Usage: "):
        fail(f"{name} --help: does not start with 'Usage: '")
    rc2, out2, _ = run(argv + ["-h"], cwd)
    if rc2 != 0 or out2 != out:
        fail(f"{name} -h: exit status {rc2} or text differs from --help")
    return out


def check_usage_error(argv, cwd):
    """A bogus option: exit 2, nothing on stdout, a short error with a hint."""
    name = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    rc, out, err = run(argv + ["--zz-bogus-option=1"], cwd)
    if rc != 2:
        fail(f"{name} --zz-bogus-option: exit status {rc}, want 2")
    if out:
        fail(f"{name} --zz-bogus-option: wrote to stdout")
    lines = err.strip().splitlines()
    if not (1 <= len(lines) <= 3) or "--help" not in lines[-1]:
        fail(f"{name} --zz-bogus-option: want an error line and a '--help' hint, got {err!r}")
    if not re.search(r"(unrecognized|unknown) option '?--zz-bogus-option", err):
        fail(f"{name}: the control case is not reported as an unknown option: {err!r}")


def check_parser_accepts(argv, opts, cwd):
    name = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    for opt in sorted(opts):
        if opt in ("help", "version"):
            continue
        rc, out, err = run(argv + [f"--{opt}=x", SENTINEL], cwd)
        if re.search(r"(unrecognized|unknown) option '?--%s\b" % re.escape(opt), err):
            fail(f"{name}: --{opt} is in --help but the parser does not know it: {err.strip()}")
        if rc != 2:
            fail(f"{name} --{opt}=x {SENTINEL}: exit status {rc}, want 2 (usage error)")


def check_page(page, page_text, help_text, opts_section, scope_text, what, common=frozenset()):
    """|common|: options documented once for every subcommand (--help)."""
    help_opts = options_in(help_text)
    scope_opts = options_in(scope_text) | common
    for o in sorted(help_opts - scope_opts):
        fail(f"{what}: --{o} is in --help but not in {page}")
    doc_opts = options_in(opts_section)
    for o in sorted(doc_opts - help_opts):
        fail(f"{what}: --{o} is in the OPTIONS of {page} but not in --help")
    return help_opts


def check_sections(page, text):
    secs = md_sections(text, 2)
    for s in SECTIONS:
        if s not in secs or not secs[s].strip():
            fail(f"{page}: missing or empty section '## {s}'")
    return secs


def main():
    for b in ("kdev-plugin", "kdev-dra-plugin", "kdevctl"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            print(f"{b} not built in {BUILD}")
            return 77
    cwd = tempfile.mkdtemp(prefix="kdev-docs-help.")
    try:
        return check_all(cwd)
    finally:
        subprocess.run(["rm", "-rf", cwd])


def check_all(cwd):
    nv_flags, nv_env = nvidia_flags_and_env()

    # ---- the daemons -------------------------------------------------------
    for b in ("kdev-plugin", "kdev-dra-plugin"):
        exe = os.path.abspath(os.path.join(BUILD, b))
        page = f"docs/{b}.md"
        text = read(os.path.join(DOCS, f"{b}.md"))
        secs = check_sections(page, text)
        help_text = check_help([exe], cwd)
        check_usage_error([exe], cwd)
        opts = check_page(page, text, help_text, secs.get("OPTIONS", ""), text, b)
        src = os.path.join(SRC, "src/cmd", b + ".c")
        known = parser_options(src, "getopt")
        if b == "kdev-plugin":
            known |= nv_flags
        for o in sorted(known - opts):
            fail(f"{b}: the parser accepts --{o} but --help does not name it")
        check_parser_accepts([exe], opts, cwd)
        env = source_env(src) | (nv_env if b == "kdev-plugin" else set())
        for e in sorted(env):
            if not re.search(r"\b%s\b" % e, help_text):
                fail(f"{b}: reads ${e} but --help does not name it")
            if not re.search(r"\b%s\b" % e, secs.get("ENVIRONMENT", "")):
                fail(f"{b}: reads ${e} but the ENVIRONMENT of {page} does not name it")
        print(f"ok {b}: {len(opts)} options, {len(env)} environment variables")

    # ---- kdevctl and its subcommands ---------------------------------------
    exe = os.path.abspath(os.path.join(BUILD, "kdevctl"))
    page = "docs/kdevctl.md"
    text = read(os.path.join(DOCS, "kdevctl.md"))
    secs = check_sections(page, text)
    top = check_help([exe], cwd)
    rc, out, err = run([exe], cwd)
    if rc != 2 or out or len(err.strip().splitlines()) != 2 or "--help" not in err:
        fail(f"kdevctl without a command: want exit 2 and an error line + hint on stderr, "
             f"got {rc} {err!r}")
    rc, out, err = run([exe, "zz-no-such-command"], cwd)
    if rc != 2 or out or len(err.strip().splitlines()) != 2 or "--help" not in err:
        fail(f"kdevctl zz-no-such-command: want exit 2 and an error line + hint, got {rc} {err!r}")
    check_page(page, text, top, secs.get("OPTIONS", ""), text, "kdevctl")
    common = options_in(secs.get("OPTIONS", ""))
    m = re.search(r"^Commands:\n((?:  \S.*\n)+)", top, re.M)
    if not m:
        fail("kdevctl --help: no Commands: list")
        return 1
    commands = [line.split()[0] for line in m.group(1).splitlines()]
    subsecs = md_sections(text, 3)
    # the commands, and the sub-commands of one ("kdevctl dra allocate":
    # src/kubelet/cmd_dra_allocate.c)
    for words in [[cmd] for cmd in commands] + [["dra", "allocate"]]:
        name = " ".join(words)
        what = f"kdevctl {name}"
        help_text = check_help([exe, *words], cwd)
        if name not in secs.get("SYNOPSIS", ""):
            fail(f"{page}: SYNOPSIS does not name '{name}'")
        sec = subsecs.get(what)
        if sec is None:
            fail(f"{page}: no '### {what}' section")
            continue
        opts = check_page(page, text, help_text, sec, sec, what, common)
        if name == "version":
            continue
        check_usage_error([exe, *words], cwd)
        src = os.path.join(SRC, "src/kubelet", "cmd_%s.c" % "_".join(words))
        known = parser_options(src, "cli") if os.path.exists(src) else set()
        for o in sorted(known - opts):
            fail(f"{what}: the parser accepts --{o} but --help does not name it")
        check_parser_accepts([exe, *words], opts, cwd)
        print(f"ok {what}: {len(opts)} options")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("docs and --help agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
