#!/usr/bin/env bash
# Builds kdev's release tree: installs the Debian build dependencies
# (scripts/deps.sh), configures with CMake + Ninja and builds every target.
# The one build recipe: scripts/test.sh (CI) and deploy/Dockerfile (the
# container image) both run it, so the image is built exactly as CI builds.
#
# Usage: scripts/build.sh [--build-dir DIR] [--jobs N] [--prefix PREFIX]
#                         [--destdir DIR] [--install-only]
#   --build-dir DIR   build tree (default: build, relative to the checkout)
#   --jobs N          ninja -j (default: nproc)
#   --prefix PREFIX   also install kdev-plugin, kdev-dra-plugin and kdevctl,
#                     stripped, into DESTDIR/PREFIX/bin (nothing else: no mock
#                     libnvidia-ml.so.1, no tests)
#   --destdir DIR     staging root for the install (default: $DESTDIR, or /)
#   --install-only    install from an existing build tree; no deps, no build
set -euo pipefail
cd "$(dirname "$0")/.."

# The binaries the image ships; deploy/Dockerfile copies exactly these.
BINARIES=(kdev-plugin kdev-dra-plugin kdevctl)

build_dir=build
jobs=$(nproc)
prefix=""
destdir=""
install_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    --jobs|-j) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --prefix) prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --destdir) destdir="$2"; shift 2 ;;
    --destdir=*) destdir="${1#*=}"; shift ;;
    --install-only) install_only=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$destdir" ] && [ -z "$prefix" ]; then
  echo "build.sh: --destdir needs --prefix" >&2
  exit 2
fi
[ -n "$destdir" ] || destdir="${DESTDIR:-}"
if [ "$install_only" -eq 1 ] && [ -z "$prefix" ]; then
  echo "build.sh: --install-only needs --prefix" >&2
  exit 2
fi

if [ "$install_only" -eq 0 ]; then
  scripts/deps.sh
  # Default build type (CMakeLists.txt: RelWithDebInfo); the install strips.
  cmake -S . -B "$build_dir" -G Ninja >/dev/null
  ninja -C "$build_dir" -j"$jobs"
fi

if [ -n "$prefix" ]; then
  bindir="${destdir%/}${prefix%/}/bin"
  mkdir -p "$bindir"
  for b in "${BINARIES[@]}"; do
    [ -x "$build_dir/$b" ] || { echo "build.sh: $build_dir/$b not built" >&2; exit 1; }
    install -m 0755 -s "$build_dir/$b" "$bindir/$b"
  done
  echo "build.sh: installed ${BINARIES[*]} into $bindir" >&2
  # the share library beside them, where kdev-plugin's default --share-library
  # (<dir of the binary>/../lib/kdev/libkdev-share.so) finds it
  libdir="${destdir%/}${prefix%/}/lib/kdev"
  [ -f "$build_dir/libkdev-share.so" ] || { echo "build.sh: $build_dir/libkdev-share.so not built" >&2; exit 1; }
  mkdir -p "$libdir"
  install -m 0644 -s "$build_dir/libkdev-share.so" "$libdir/libkdev-share.so"
  echo "build.sh: installed libkdev-share.so into $libdir" >&2
fi
