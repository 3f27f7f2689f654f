#!/bin/bash
# Self-test of the interop harness (not part of ctest: it tests the test peers).
#  1. every pairing of the Python and Go peers passes: client+kubelet roles
#     against each fake plugin, fake plugin against each fake kubelet;
#  2. each fault injected into the Go fake plugin (KDEV_INTEROP_FAULT) makes the
#     named check of each peer fail, so no check passes whatever the plugin does.
# Usage: tests/interop/selftest.sh [FAULT...]   (env KDEV_BUILD_DIR as for ctest)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export KDEV_BUILD_DIR=${KDEV_BUILD_DIR:-$(cd "$here/../.." && pwd)/build}
export KDEV_INTEROP_GO
KDEV_INTEROP_GO=$("$here/go/build.sh") || { echo "selftest: Go peer build failed"; exit 1; }
driver=("/usr/bin/python3" "$here/driver.py")
fails=0
total=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run() { # expect-rc description -- driver args...
        local want=$1 what=$2
        shift 3
        total=$((total + 1))
        "${driver[@]}" "$@" >"$log" 2>&1
        local rc=$?
        if [ "$rc" != "$want" ]; then
                echo "FAIL $what: driver exit $rc, want $want"
                sed 's/^/   | /' "$log" | grep -E 'FAIL|SKIP|PASS|Traceback|Error' | head -20
                fails=$((fails + 1))
                return 1
        fi
        return 0
}

# check name per fault, for the python and go peers ("-": that peer cannot see it).
declare -A want_py=(
        [options]=options [law-ids]=listandwatch-first [law-health]=listandwatch-first
        [preferred]=preferred [allocate-perms]=allocate [allocate-unknown]=allocate-unknown
        [allocate-one]=allocate-two-containers [prestart]=prestart [unimplemented]=unimplemented
        [ignore-deadline]=- [big-ok]=size-limit-over [leak-fds]=cancel-fds
        [serve-late]=register-1-dial-back [endpoint-path]=register-1-fields [no-retry]=ready
        [version]=register-1-fields [reregister]=register-once)
declare -A want_go=()
for f in "${!want_py[@]}"; do want_go[$f]=${want_py[$f]}; done
want_go[ignore-deadline]=deadline-server

faults=("$@")
if [ ${#faults[@]} -eq 0 ]; then
        for peer in python go; do
                for t in python go; do
                        run 0 "$peer peer <-> $t plugin" -- plugin --peer $peer --target $t &&
                                echo "ok   $peer peer <-> $t plugin"
                        run 0 "$peer plugin <-> $t kubelet" -- kubelet --peer $peer --kubelet $t &&
                                echo "ok   $peer plugin <-> $t kubelet"
                done
        done
        mapfile -t faults < <(printf '%s\n' "${!want_py[@]}" | sort)
fi

export KDEV_INTEROP_KUBELET_TIMEOUT=12
for f in "${faults[@]}"; do
        for peer in python go; do
                if [ "$peer" = python ]; then check=${want_py[$f]}; else check=${want_go[$f]}; fi
                [ "$check" = - ] && continue
                KDEV_INTEROP_FAULT=$f run 1 "fault $f, $peer peer" -- plugin --peer $peer \
                        --target go || continue
                total=$((total + 1))
                if grep -qE "\] FAIL $check:" "$log"; then
                        echo "ok   fault $f: $peer peer fails '$check'"
                else
                        echo "FAIL fault $f: $peer peer did not fail '$check'; its failures:"
                        grep -E '\] FAIL' "$log" | head -5 | sed 's/^/   | /'
                        fails=$((fails + 1))
                fi
        done
done
echo "interop selftest: $((total - fails))/$total passed"
[ "$fails" -eq 0 ]
