#!/bin/bash
# Build the Go side-by-side peer of bench/run.sh (grpc-go from Debian, GOPATH
# mode, no network; stubs generated from kdev's own proto/ with protoc-gen-go
# and protoc-gen-go-grpc; codec.go adapts Debian's grpc-go 1.33 to APIv2
# messages, as tests/interop/go does).
#
#   bench/peers/go/build.sh OUT_DIR
#
# Writes OUT_DIR/kdev-bench-go-plugin and prints its path on stdout; reused while
# the sources, the proto, this script and the Go toolchain are unchanged. Exit
# status: 0 built or up to date, 77 Go toolchain / protoc plugins / grpc-go
# sources missing, 1 build failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
proto_dir=$src/proto/deviceplugin/v1beta1
gocode=/usr/share/gocode

for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
        if ! command -v "$tool" >/dev/null 2>&1; then
                echo "build.sh: $tool not found (scripts/deps.sh --test)" >&2
                exit 77
        fi
done
for pkg in google.golang.org/grpc google.golang.org/protobuf; do
        if [ ! -d "$gocode/src/$pkg" ]; then
                echo "build.sh: $gocode/src/$pkg missing (scripts/deps.sh --test)" >&2
                exit 77
        fi
done

mkdir -p "$out"
bin=$out/kdev-bench-go-plugin
key=$( (cat "$here"/*.go "$proto_dir/api.proto" "$here/build.sh"; go version) | sha256sum |
       cut -d' ' -f1)
if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$key" ]; then
        echo "$bin"
        exit 0
fi

gopath=$(mktemp -d "${TMPDIR:-/tmp}/kdev-bench-gopath.XXXXXX")
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src"
# go_package "kdev.local/interop/v1beta1" puts the stubs at kdev.local/interop/v1beta1.
protoc -I "$proto_dir" --go_out="$gopath/src" --go-grpc_out="$gopath/src" "$proto_dir/api.proto"
mkdir -p "$gopath/src/kdev.local/benchpeer"
cp "$here"/*.go "$gopath/src/kdev.local/benchpeer/"
env GO111MODULE=off GOFLAGS= GOPATH="$gopath:$gocode" GOCACHE="$out/gocache" \
        go build -trimpath -o "$bin.tmp" kdev.local/benchpeer
mv "$bin.tmp" "$bin"
echo "$key" >"$bin.key"
echo "$bin"
