#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given
# binaries load (ldd, so transitive dependencies included), one per line,
# sorted: the runtime packages of the container image (deploy/Dockerfile
# installs exactly these). Fails when a library belongs to no package (a
# locally built library, such as the mock libnvidia-ml.so.1, must never reach
# the image) or cannot be found.
# Libraries the binaries dlopen() are not in ldd's output: DLOPENED lists them
# (libnvidia-ml.so.1 is not one: it comes from the host's driver), and their
# own dependencies are added too. tests/integration/deploy_image.py checks
# that every library name the sources dlopen is listed here.
# Usage: scripts/runtime-deps.sh BINARY...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }

# kdev-plugin --metrics-address loads libmicrohttpd (src/metrics/http.c); the
# first API server client (kdev-dra-plugin; kdev-plugin --config-dir) loads
# libcurl (src/kube/libcurl.c).
DLOPENED=(libcurl.so.4 libmicrohttpd.so.12)

# dpkg records the path a package shipped; with merged /usr (Debian 12) ldd may
# report /lib/... for a file dpkg knows as /usr/lib/... or the reverse.
owner() {
  local lib=$1 real cand out
  real=$(readlink -f "$lib")
  for cand in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
    [ -n "$cand" ] || continue
    if out=$(dpkg-query -S "$cand" 2>/dev/null); then
      # "libuv1:amd64: /usr/lib/x86_64-linux-gnu/libuv.so.1" -> libuv1
      out=${out%%: *}
      out=${out%%,*}
      echo "${out%%:*}"
      return 0
    fi
  done
  return 1
}

declare -A libs=() pkgs=()
status=0
objects=("$@")
for name in "${DLOPENED[@]}"; do
  # awk reads to the end (no early exit: ldconfig would die of SIGPIPE, and
  # pipefail would fail the script): the native-arch entry, else the first
  path=$(ldconfig -p | awk -v n="$name" '
    $1 == n && /x86-64|AArch64|64bit/ && !native { native = $NF }
    $1 == n && !any { any = $NF }
    END { print (native != "" ? native : any) }')
  [ -n "$path" ] || { echo "runtime-deps: $name (dlopened) is not installed" >&2; exit 1; }
  libs[$path]=1
  objects+=("$path")
done
for bin in "${objects[@]}"; do
  [ -f "$bin" ] || { echo "runtime-deps: $bin: no such file" >&2; exit 1; }
  ldd_out=$(LD_LIBRARY_PATH= ldd "$bin") || { echo "runtime-deps: ldd $bin failed" >&2; exit 1; }
  while read -r line; do
    case "$line" in
      *"not found"*) echo "runtime-deps: $bin: $line" >&2; status=1; continue ;;
      linux-vdso*|*"statically linked"*) continue ;;
    esac
    # "libuv.so.1 => /lib/x86_64-linux-gnu/libuv.so.1 (0x...)" or
    # "/lib64/ld-linux-x86-64.so.2 (0x...)"
    if [[ "$line" == *" => "* ]]; then
      lib=${line#* => }
    else
      lib=$line
    fi
    lib=${lib%% (*}
    [ -n "$lib" ] && libs[$lib]=1
  done <<<"$ldd_out"
done
for lib in "${!libs[@]}"; do
  if p=$(owner "$lib"); then
    pkgs[$p]=1
  else
    echo "runtime-deps: $lib belongs to no Debian package" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] || exit "$status"
[ ${#pkgs[@]} -gt 0 ] || { echo "runtime-deps: no shared libraries found" >&2; exit 1; }
printf '%s\n' "${!pkgs[@]}" | sort
