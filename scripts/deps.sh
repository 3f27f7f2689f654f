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
# clang with its libFuzzer runtime (scripts/fuzz.sh), a Prometheus server
# that scrapes kdev-plugin's metrics endpoint, and podman with runc and a
# static busybox (the container's rootfs) for the CDI consumer test
# (tests/integration/cdi_podman.py), and debootstrap (the image's Debian base,
# tests/image/debian-base.sh) with python3-yaml (the manifests read by
# tests/integration/image_podman.py).
test_deps=false
if [ "${1:-}" = "--test" ]; then
  test_deps=true
  PKGS+=(
    python3 python3-grpcio python3-protobuf protobuf-compiler
    golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go protoc-gen-go-grpc
    valgrind python3-jsonschema clang libclang-rt-14-dev openssl
    prometheus
    podman runc busybox-static debootstrap python3-yaml
  )
fi

# The reference CDI library (0.8.0, trixie) and golang-1.21 (bookworm-backports)
# are not bookworm packages: downloaded into the checkout's .test-deps/, never
# installed (tests/cdi/validate/fetch.sh).
fetch_test_deps() {
  if $test_deps; then
    "$(dirname "$0")/../tests/cdi/validate/fetch.sh"
  fi
}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  fetch_test_deps
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "kdev: installing ${missing[*]}" >&2
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fetch_test_deps
