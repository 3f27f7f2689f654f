#!/bin/bash
# Downloads the reference CDI library and the Go toolchain it needs as Debian
# packages, for tests/cdi/validate/build.sh (no network after this step):
#
#   tests/cdi/validate/fetch.sh [DEST]
#
# DEST defaults to $KDEV_TEST_DEPS_DIR/cdi-go, else .test-deps/cdi-go in the
# checkout (ignored by git). bookworm has no golang-tags.cncf-container-device-
# interface-dev; trixie has 0.8.0 (the version container runtimes vendor), and
# that needs Go >= 1.20 (errors.Join) where bookworm has 1.19. So, without
# touching the system's packages or sources, a private apt state (DEST/apt)
# lists trixie and bookworm-backports and `apt-get download` fetches:
#   - from trixie: the CDI library and the Go sources it imports (the closure
#     of `go list -deps` for main.go; test-only dependencies left out);
#   - from bookworm-backports: golang-1.21 (the oldest Go >= 1.20 built for
#     bookworm).
# The .deb files land in DEST/debs; DEST/debs.list names each package=version.
# Idempotent: nothing is fetched when DEST/debs.list lists the same packages.
# Exit status: 0 fetched or up to date, 1 a download failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../../.." && pwd)
dest=${1:-${KDEV_TEST_DEPS_DIR:-$src/.test-deps}/cdi-go}

# CDI_VERSION: the library version the test is written against.
CDI_VERSION=0.8.0
TRIXIE=(
  golang-tags.cncf-container-device-interface-dev
  golang-github-fsnotify-fsnotify-dev
  golang-github-opencontainers-specs-dev
  golang-github-opencontainers-runtime-tools-dev
  golang-gocapability-dev
  golang-github-xeipuuv-gojsonschema-dev
  golang-github-xeipuuv-gojsonpointer-dev
  golang-github-xeipuuv-gojsonreference-dev
  golang-golang-x-mod-dev
  golang-golang-x-sys-dev
  golang-k8s-sigs-yaml-dev
)
BACKPORTS=(golang-1.21-go golang-1.21-src)

want=$(printf '%s\n' "${TRIXIE[@]}" "${BACKPORTS[@]}" | sort)
if [ -f "$dest/debs.list" ] && [ "$(sed 's/=.*//' "$dest/debs.list")" = "$want" ]; then
        exit 0
fi

apt_dir=$dest/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources"
for suite in trixie bookworm-backports; do
        cat >"$apt_dir/sources/$suite.sources" <<EOS
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
done
apt_opts=(-q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources"
          -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
          -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
echo "kdev: fetching the reference CDI library and golang-1.21 into $dest" >&2
apt-get "${apt_opts[@]}" update >/dev/null

rm -rf "$dest/debs.tmp"
mkdir -p "$dest/debs.tmp"
(cd "$dest/debs.tmp" &&
 apt-get "${apt_opts[@]}" download "${TRIXIE[@]/%//trixie}" \
         "${BACKPORTS[@]/%//bookworm-backports}" >/dev/null)
got=$(cd "$dest/debs.tmp" && for f in *.deb; do dpkg-deb -f "$f" Package Version |
      paste -sd= | sed 's/^Package: //; s/=Version: /=/'; done | sort)
if ! grep -qx "golang-tags.cncf-container-device-interface-dev=$CDI_VERSION-.*" <<<"$got"; then
        echo "fetch.sh: trixie no longer has golang-tags.cncf-container-device-interface-dev" \
             "$CDI_VERSION:" >&2
        grep container-device-interface <<<"$got" >&2 || true
        exit 1
fi
rm -rf "$dest/debs"
mv "$dest/debs.tmp" "$dest/debs"
echo "$got" >"$dest/debs.list"
