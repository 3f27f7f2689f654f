#!/bin/bash
# Build the Go interop peer (grpc-go from Debian, GOPATH mode, no network).
#
#   tests/interop/go/build.sh [OUT_DIR]
#
# OUT_DIR defaults to $KDEV_BUILD_DIR/interop. Writes OUT_DIR/kdev-interop-go and
# prints its path on stdout. The binary is reused while the Go sources, the proto,
# this script and the Go toolchain are unchanged (key in OUT_DIR/kdev-interop-go.key);
# the Go build cache lives in OUT_DIR/gocache. Exit status: 0 built or up to date,
# 77 Go toolchain / protoc plugins / grpc-go sources missing, 1 build failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${KDEV_SOURCE_DIR:-$(cd "$here/../../.." && pwd)}
out=${1:-${KDEV_BUILD_DIR:-$src/build}/interop}
proto_dir=$src/proto/deviceplugin/v1beta1
gocode=/usr/share/gocode

for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
        if ! command -v "$tool" >/dev/null 2>&1; then
                echo "build.sh: $tool not found (Debian: golang-go protobuf-compiler" \
                     "protoc-gen-go protoc-gen-go-grpc)" >&2
                exit 77
        fi
done
for pkg in google.golang.org/grpc google.golang.org/protobuf golang.org/x/net/http2; do
        if [ ! -d "$gocode/src/$pkg" ]; then
                echo "build.sh: $gocode/src/$pkg missing (Debian: golang-google-grpc-dev" \
                     "golang-google-protobuf-dev golang-golang-x-net-dev)" >&2
                exit 77
        fi
done

mkdir -p "$out"
bin=$out/kdev-interop-go
exec 9>"$out/.build.lock"
flock 9     # concurrent ctest jobs build once

key=$( (cat "$here"/*.go "$proto_dir/api.proto" "$here/build.sh"; go version) | sha256sum |
       cut -d' ' -f1)
if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$key" ]; then
        echo "$bin"
        exit 0
fi

gopath=$(mktemp -d "${TMPDIR:-/tmp}/kdev-interop-gopath.XXXXXX")
trap 'rm -rf "$gopath"' EXIT
pkg=$gopath/src/kdev.local/interop
mkdir -p "$pkg/peer"
# go_package "kdev.local/interop/v1beta1" puts the stubs at $pkg/v1beta1.
protoc -I "$proto_dir" --go_out="$gopath/src" --go-grpc_out="$gopath/src" "$proto_dir/api.proto"
cp "$here"/*.go "$pkg/peer/"

start=$(date +%s%N)
env GO111MODULE=off GOFLAGS= GOPATH="$gopath:$gocode" GOCACHE="$out/gocache" \
        go build -o "$bin.tmp" kdev.local/interop/peer
mv "$bin.tmp" "$bin"
echo "$key" >"$bin.key"
echo "build.sh: built $bin in $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
echo "$bin"
