#!/usr/bin/python3
"""Interop: kdev-plugin against an independent Python gRPC peer (grpcio).

The peer (tests/interop/python/kdev_interop.py) acts as kubelet - Registration
server on DIR/kubelet.sock that checks Register's exact fields, dials back and
calls GetDevicePluginOptions before answering, answers the first Register with
an error to see a retry, then opens ListAndWatch - and as a client of every
DevicePlugin RPC (exact values, deadline, cancel, unknown method, 4 MiB limit).
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
        "interop_python", ["plugin", "--peer", "python", "--target", "kdev"])


if __name__ == "__main__":
    sys.exit(main())
