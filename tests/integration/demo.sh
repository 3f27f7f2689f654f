#!/usr/bin/env bash
# The README's demo runs end to end on the built binaries, exits 0 and prints
# the allocations.
set -uo pipefail
out=$(KDEV_BUILD_DIR="$KDEV_BUILD_DIR" timeout 120 "$KDEV_SOURCE_DIR/scripts/demo.sh" 2>&1)
rc=$?
fail() { echo "FAIL: $*"; echo "$out"; echo "0 passed, 1 failed"; exit 1; }
[ "$rc" -eq 0 ] || fail "demo exited $rc"
expect() { grep -qxF -- "$1" <<<"$out" || fail "missing line: $1"; }
expect "wait: satisfied: example.com/null allocatable 2 (wanted 2)"
expect "pod train (uid dee795a6-c508-4209-8e25-dca2ae87b6bd): admitted"
expect "    example.com/null: null::0"
expect "    device /dev/null from /dev/null (rw)"
expect "pod too-big (uid 80b8b1cc-53e7-4f82-8ee0-d67a0515bdaa): rejected: UnexpectedAdmissionError: Allocate failed due to requested number of devices unavailable for example.com/null. Requested: 5, Available: 1, which is unexpected"
expect "    example.com/null: null::1 (held from before, no Allocate)"
grep -qE '^example.com/null +2 +2 +1 +kdev-example.com_null.sock +connected$' <<<"$out" || fail "capacity row"
expect "kdevctl kubelet exit status: 0; kdev-plugin exit status: 0; sockets left: 0"
echo "1 passed, 0 failed"
