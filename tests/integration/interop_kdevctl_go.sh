#!/bin/bash
# Interop: a Go (grpc-go) fake device plugin registers with `kdevctl kubelet`:
# kdevctl must accept Register, call GetDevicePluginOptions on the plugin before
# answering, open ListAndWatch, and refuse Register with version v1alpha or with
# the resource name "gpu". Exit 0 pass, 1 fail, 77 prerequisite missing.
set -u
src=${KDEV_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${KDEV_BUILD_DIR:-$src/build}
if [ ! -x "$build/kdevctl" ]; then
        echo "SKIP interop_kdevctl_go: $build/kdevctl not built"
        exit 77
fi
peer=$("$src/tests/interop/go/build.sh" "$build/interop")
rc=$?
case $rc in
0) ;;
77) echo "SKIP interop_kdevctl_go: cannot build the Go peer (see above)"; exit 77 ;;
*) echo "FAIL interop_kdevctl_go: Go peer build failed (exit $rc)"; exit 1 ;;
esac
KDEV_INTEROP_GO=$peer exec /usr/bin/python3 "$src/tests/interop/driver.py" kubelet --peer go \
        --kubelet kdevctl
