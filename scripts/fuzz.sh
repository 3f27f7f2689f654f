#!/usr/bin/env bash
# Builds kdev's libFuzzer targets (tests/fuzz) with clang in build-fuzz/ and
# runs each for a bounded time, starting from its seed corpus
# (tests/fuzz/corpus/<target>) and regression inputs (tests/fuzz/regress/
# <target>, every crash found so far: replayed first on every run).
#
# Usage: scripts/fuzz.sh [TARGET...]     (default: every target)
#   KDEV_FUZZ_SECONDS  fuzzing time of every target, overriding the table
#                      below (default: the table: 60 s for fuzz_h2_server and
#                      fuzz_plugin_request, the network-facing request paths,
#                      20 s for the others)
#   KDEV_FUZZ_JOBS     targets run at the same time (default: nproc); the
#                      longest run first
#   KDEV_FUZZ_BUILD    build directory (default build-fuzz)
# Each target's libFuzzer output goes to $KDEV_FUZZ_BUILD/artifacts/<target>.log;
# the script prints one line per target as it ends (inputs executed, coverage),
# the sanitizer summary of each failure at the end, and the wall time.
# New interesting inputs go to $KDEV_FUZZ_BUILD/corpus/<target> (kept between
# runs, never in the source tree); a crash leaves its input as
# $KDEV_FUZZ_BUILD/artifacts/<target>-crash-* and makes the script fail.
# Reproduce one: $KDEV_FUZZ_BUILD/tests/fuzz/<target> <file>
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=${KDEV_FUZZ_BUILD:-build-fuzz}
jobs=${KDEV_FUZZ_JOBS:-$(nproc)}
all=(fuzz_h2_server fuzz_plugin_request fuzz_config fuzz_checkpoint fuzz_mock_topology
     fuzz_dra_prepare fuzz_cel fuzz_sched)
# seconds per target unless KDEV_FUZZ_SECONDS is set
declare -A table=([fuzz_h2_server]=60 [fuzz_plugin_request]=60)
default_secs=20
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
case $jobs in '' | *[!0-9]* | 0) echo "fuzz.sh: KDEV_FUZZ_JOBS must be a positive number" >&2; exit 1 ;; esac

secs_of() {
        if [ -n "${KDEV_FUZZ_SECONDS:-}" ]; then
                echo "$KDEV_FUZZ_SECONDS"
        else
                echo "${table[$1]:-$default_secs}"
        fi
}

if ! command -v clang >/dev/null; then
        echo "fuzz.sh: clang not found (scripts/deps.sh --test installs it)" >&2
        exit 1
fi
if [ -n "${KDEV_FUZZ_SECONDS:-}" ]; then
        what="${KDEV_FUZZ_SECONDS} s per target"
else
        what="60 s for fuzz_h2_server and fuzz_plugin_request, ${default_secs} s for the others"
fi
echo "== libFuzzer build ($bdir) and runs, $what, $jobs at a time" >&2
start=$SECONDS
CC=clang cmake -S . -B "$bdir" -G Ninja -DKDEV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$bdir" -j"$(nproc)" fuzz_all >"$bdir/fuzz-build.log" 2>&1 ||
        { cat "$bdir/fuzz-build.log" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$bdir/artifacts"

# One target: its libFuzzer output to its log, its outcome to <log>.rc, one
# summary line to stderr (a single short write: lines of parallel runs do not
# mix).
run_one() {
        local t=$1 secs=$2 name=${1#fuzz_} rc=0
        local work="$bdir/corpus/$t" log="$bdir/artifacts/$t.log"
        local dirs=("$work" "tests/fuzz/corpus/$name")
        mkdir -p "$work"
        [ -d "tests/fuzz/regress/$name" ] && dirs+=("tests/fuzz/regress/$name")
        "$bdir/tests/fuzz/$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
                -max_len=16384 -print_final_stats=1 \
                -artifact_prefix="$bdir/artifacts/$t-" "${dirs[@]}" >"$log" 2>&1 || rc=$?
        echo "$rc" >"$log.rc"
        if [ "$rc" -eq 0 ]; then
                local runs cov
                runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
                cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
                echo "fuzz: $t ok: ${runs:-?} inputs in ${secs} s, ${cov:-cov: ?}" >&2
        else
                echo "fuzz: $t FAILED after at most ${secs} s (log: $log)" >&2
        fi
}

# longest first, so that the short runs fill in beside the long ones
mapfile -t order < <(for t in "${targets[@]}"; do echo "$(secs_of "$t") $t"; done |
        sort -s -k1,1nr | cut -d' ' -f2)
for t in "${order[@]}"; do
        rm -f "$bdir/artifacts/$t.log.rc"
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
                wait -n || true
        done
        run_one "$t" "$(secs_of "$t")" &
done
wait || true

failed=()
for t in "${targets[@]}"; do
        log="$bdir/artifacts/$t.log"
        if [ "$(cat "$log.rc" 2>/dev/null || echo 1)" != 0 ]; then
                echo "fuzz: $t failed:" >&2
                why=$(grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz_[a-z_]+: |Test unit written)' \
                        "$log" | head -5 || true)
                [ -n "$why" ] || why=$(tail -3 "$log" 2>/dev/null || true)
                echo "$why" >&2
                failed+=("$t")
        fi
done
echo "fuzz: ${#targets[@]} targets, $jobs at a time, $((SECONDS - start)) s in all (build included)" >&2
if [ ${#failed[@]} -gt 0 ]; then
        echo "fuzz: failed: ${failed[*]}" >&2
        exit 1
fi
