#!/usr/bin/env bash
# Makes node and deploy/validate/node_modules ready for validate.mjs: installs
# Debian's nodejs and npm when npm is missing (as root, or with sudo), and runs
# `npm ci` (package-lock.json, exact versions) when node_modules is missing or
# older than the lock file. Safe to run from several tests at once (flock).
# Exit status: 0 ready; 77 node is absent and cannot be installed (ctest: skip);
# 1 npm ci failed.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  fi
  if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    echo "ensure-deps: installing nodejs npm (apt-get)" >&2
    $SUDO apt-get update -q >&2 || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
      nodejs npm >&2 || true
  fi
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "ensure-deps: node/npm not available" >&2
  exit 77
fi

exec 9>.npm-install.lock
flock 9
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "ensure-deps: npm ci in $(pwd)" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
