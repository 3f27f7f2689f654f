#!/bin/bash
# Interop: kdev-plugin against an independent Go gRPC peer (grpc-go 1.33 from
# Debian, built here in GOPATH mode by tests/interop/go/build.sh and cached in
# $KDEV_BUILD_DIR/interop). The peer acts as kubelet (Registration server: exact
# Register fields, dial-back GetDevicePluginOptions before answering, first
# Register answered with an error, ListAndWatch) and as a client of every
# DevicePlugin RPC, including a raw HTTP/2 ListAndWatch with grpc-timeout and no
# local timer (the server itself must end it with DEADLINE_EXCEEDED).
# Exit 0 pass, 1 fail, 77 prerequisite missing.
set -u
src=${KDEV_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${KDEV_BUILD_DIR:-$src/build}
if [ ! -x "$build/kdev-plugin" ]; then
        echo "SKIP interop_go: $build/kdev-plugin not built"
        exit 77
fi
peer=$("$src/tests/interop/go/build.sh" "$build/interop")
rc=$?
case $rc in
0) ;;
77) echo "SKIP interop_go: cannot build the Go peer (see above)"; exit 77 ;;
*) echo "FAIL interop_go: Go peer build failed (exit $rc)"; exit 1 ;;
esac
KDEV_INTEROP_GO=$peer exec /usr/bin/python3 "$src/tests/interop/driver.py" plugin --peer go \
        --target kdev
