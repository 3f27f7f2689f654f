#!/bin/bash
# Makes the Debian 12 base image of deploy/Dockerfile's two stages without a
# registry: a root file system tarball made with debootstrap from Debian's
# archive, for `podman import` as debian:12-slim and debian:12
# (tests/integration/image_podman.py).
#
#   tests/image/debian-base.sh [DEST]     prints the tarball's path
#
# DEST defaults to $KDEV_TEST_DEPS_DIR/image, else .test-deps/image in the
# checkout (ignored by git). The tarball is cached there, named by a key of
# its recipe: suite, variant, architecture, mirror and the package list
# (debootstrap's minbase set plus INCLUDE); a change to any of them, or to
# RECIPE_VERSION, makes a new one. A cache hit is free (no network).
#
# What it holds, as Docker's debian:12-slim: debootstrap --variant=minbase
# (Essential and Priority required packages and apt; no recommends), apt's
# sources in /etc/apt/sources.list.d/debian.sources for bookworm,
# bookworm-updates and bookworm-security, no package lists, no downloaded
# .deb files, an empty /etc/machine-id. It is not byte-identical to Docker's
# image (no dpkg path excludes for documentation), which only makes it
# larger. The build stage's `FROM debian:12` uses the same tarball: the stage
# installs everything it needs itself (scripts/deps.sh).
# Needs root and debootstrap (scripts/deps.sh --test). Exit status: 0 made or
# cached, 1 debootstrap failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
dest=${1:-${KDEV_TEST_DEPS_DIR:-$src/.test-deps}/image}

SUITE=bookworm
VARIANT=minbase
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
# Packages beyond minbase (none: the Dockerfile's stages install theirs).
INCLUDE=()
RECIPE_VERSION=1
ARCH=$(dpkg --print-architecture)

recipe="version=$RECIPE_VERSION suite=$SUITE variant=$VARIANT arch=$ARCH mirror=$MIRROR"
recipe+=" security=$SECURITY_MIRROR include=${INCLUDE[*]:-}"
key=$(printf '%s\n' "$recipe" | sha256sum | cut -c1-16)
tarball="$dest/debian-$SUITE-$VARIANT-$ARCH-$key.tar"

mkdir -p "$dest"
exec 9>"$dest/.lock"
flock 9
if [ -s "$tarball" ]; then
  echo "$tarball"
  exit 0
fi
command -v debootstrap >/dev/null || {
  echo "debian-base: debootstrap is not installed (scripts/deps.sh --test)" >&2; exit 1; }

work=$(mktemp -d "$dest/.work-XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"
args=(--variant="$VARIANT" --arch="$ARCH")
[ ${#INCLUDE[@]} -eq 0 ] || args+=(--include="$(IFS=,; echo "${INCLUDE[*]}")")
if ! debootstrap "${args[@]}" "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" >&2
  echo "debian-base: debootstrap failed (log above)" >&2
  exit 1
fi
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
       "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
: >"$root/etc/machine-id"
# The package list the key stands for, beside the tarball.
chroot "$root" dpkg-query -W -f '${Package}=${Version}\n' | sort >"$work/packages"
tar -C "$root" --numeric-owner --xattrs -cf "$work/base.tar" .
mv "$work/packages" "${tarball%.tar}.packages"
mv "$work/base.tar" "$tarball"
echo "$tarball"
