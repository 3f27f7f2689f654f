#!/usr/bin/python3
"""Interop: a Python (grpcio) fake device plugin registers with `kdevctl kubelet`.

Checks that kdevctl accepts Register, calls GetDevicePluginOptions on the plugin
before answering it, opens ListAndWatch, and refuses a Register with version
v1alpha or with a resource name that is not an extended resource name ("gpu").
Driver: tests/interop/driver.py. Exit 0 pass, 1 fail, 77 prerequisite missing.
"""
import importlib.util
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KDEV_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))


def main():
    for mod, pkg in (("grpc", "python3-grpcio"), ("google.protobuf", "python3-protobuf")):
        try:
            found = importlib.util.find_spec(mod) is not None
        except ImportError:
            found = False
        if not found:
            print("SKIP interop_kdevctl_python: Python module %s missing (install %s)" % (mod, pkg))
            return 77
    if not shutil.which("protoc"):
        print("SKIP interop_kdevctl_python: protoc not found (install protobuf-compiler)")
        return 77
    sys.path.insert(0, os.path.join(SRC, "tests", "interop"))
    import driver
    return driver.main(["kubelet", "--peer", "python", "--kubelet", "kdevctl"])


if __name__ == "__main__":
    sys.exit(main())
