#!/usr/bin/env bash
# Installs the Debian packages kdev needs to build, test and run its demo.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  libuv1-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
  libyaml-dev libjansson-dev libcmocka-dev
  libcurl4-openssl-dev libmicrohttpd-dev
)
# Test-only: interop peers (Python grpcio and grpc-go), the memory checker, and
# clang with its libFuzzer runtime (scripts/fuzz.sh), and a Prometheus server
# that scrapes kdev-plugin's metrics endpoint.
if [ "${1:-}" = "--test" ]; then
  PKGS+=(
    python3 python3-grpcio python3-protobuf protobuf-compiler
    golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go protoc-gen-go-grpc
    valgrind python3-jsonschema clang libclang-rt-14-dev openssl
    prometheus
  )
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "kdev: installing ${missing[*]}" >&2
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
