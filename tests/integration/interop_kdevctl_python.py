#!/usr/bin/python3
"""Interop: a Python (grpcio) fake device plugin registers with `kdevctl kubelet`.

Checks that kdevctl accepts Register, calls GetDevicePluginOptions on the plugin
before answering it, opens ListAndWatch, and refuses a Register with version
v1alpha or with a resource name that is not an extended resource name ("gpu").
Driver: tests/interop/driver.py. Exit 0 pass, 1 fail, 77 prerequisite missing.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))


def main():
    sys.path.insert(0, os.path.join(SRC, "tests", "interop"))
    import driver
    return driver.python_peer_main(
        "interop_kdevctl_python", ["kubelet", "--peer", "python", "--kubelet", "kdevctl"])


if __name__ == "__main__":
    sys.exit(main())
