#!/bin/bash
# Builds kdev-cdi-validate (main.go) against the reference CDI library that
# fetch.sh downloaded, offline: GOPATH mode over the Debian packages' Go
# sources, GOPROXY=off, golang-1.21 from those packages.
#
#   tests/cdi/validate/build.sh [OUT_DIR]
#
# The package folder is $KDEV_TEST_DEPS_DIR/cdi-go, else .test-deps/cdi-go in
# the checkout; OUT_DIR defaults to its out/, so that the ASan and the release
# build trees share one build (about 25 s cold). The packages are unpacked
# (dpkg -x) into OUT_DIR/root while building, and removed after; the binary is
# OUT_DIR/kdev-cdi-validate, printed on stdout, and reused while main.go, this
# script and the package list are unchanged (key in
# OUT_DIR/kdev-cdi-validate.key); the Go build cache lives in OUT_DIR/gocache.
# Exit status: 0 built or up to date, 77 the packages were not fetched
# (scripts/deps.sh --test fetches them), 1 the build failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${KDEV_SOURCE_DIR:-$(cd "$here/../../.." && pwd)}
deps=${KDEV_TEST_DEPS_DIR:-$src/.test-deps}/cdi-go
out=${1:-$deps/out}

if [ ! -f "$deps/debs.list" ]; then
        echo "build.sh: the reference CDI library is not fetched ($deps/debs.list missing);" \
             "run scripts/deps.sh --test (or tests/cdi/validate/fetch.sh)" >&2
        exit 77
fi

mkdir -p "$out"
bin=$out/kdev-cdi-validate
exec 9>"$out/.build.lock"
flock 9     # concurrent ctest jobs build once

key=$(cat "$here/main.go" "$here/build.sh" "$deps/debs.list" | sha256sum | cut -d' ' -f1)
if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$key" ]; then
        echo "$bin"
        exit 0
fi

start=$(date +%s%N)
rm -rf "$out/root"
mkdir -p "$out/root"
for deb in "$deps"/debs/*.deb; do
        dpkg-deb -x "$deb" "$out/root"
done
goroot=$out/root/usr/lib/go-1.21
gopath=$out/gopath
rm -rf "$gopath"
mkdir -p "$gopath/src/kdev.local/cdi-validate"
cp "$here/main.go" "$gopath/src/kdev.local/cdi-validate/"
env -u GOFLAGS GOROOT="$goroot" GOPATH="$gopath:$out/root/usr/share/gocode" GO111MODULE=off \
        GOPROXY=off GOTOOLCHAIN=local GOCACHE="$out/gocache" CGO_ENABLED=0 \
        "$goroot/bin/go" build -o "$bin.tmp" kdev.local/cdi-validate
mv "$bin.tmp" "$bin"
rm -rf "$out/root" "$gopath"
echo "$key" >"$bin.key"
echo "build.sh: built $bin in $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
echo "$bin"
