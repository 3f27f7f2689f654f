#!/usr/bin/env bash
# Builds kdev's libFuzzer targets (tests/fuzz) with clang in build-fuzz/ and
# runs each for a bounded time, starting from its seed corpus
# (tests/fuzz/corpus/<target>) and regression inputs (tests/fuzz/regress/
# <target>, every crash found so far: replayed first on every run).
#
# Usage: scripts/fuzz.sh [TARGET...]     (default: every target)
#   KDEV_FUZZ_SECONDS  fuzzing time per target (default 20)
#   KDEV_FUZZ_BUILD    build directory (default build-fuzz)
# New interesting inputs go to $KDEV_FUZZ_BUILD/corpus/<target> (kept between
# runs, never in the source tree); a crash leaves its input as
# $KDEV_FUZZ_BUILD/artifacts/<target>-crash-* and makes the script fail.
# Reproduce one: $KDEV_FUZZ_BUILD/tests/fuzz/<target> <file>
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${KDEV_FUZZ_SECONDS:-20}
bdir=${KDEV_FUZZ_BUILD:-build-fuzz}
all=(fuzz_h2_server fuzz_plugin_request fuzz_config fuzz_checkpoint fuzz_mock_topology
     fuzz_dra_prepare)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if ! command -v clang >/dev/null; then
        echo "fuzz.sh: clang not found (scripts/deps.sh --test installs it)" >&2
        exit 1
fi
echo "== libFuzzer build ($bdir) and runs, ${secs} s per target" >&2
CC=clang cmake -S . -B "$bdir" -G Ninja -DKDEV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$bdir" -j"$(nproc)" fuzz_all >"$bdir/fuzz-build.log" 2>&1 ||
        { cat "$bdir/fuzz-build.log" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
        name=${t#fuzz_}
        work="$bdir/corpus/$t"
        mkdir -p "$work" "$bdir/artifacts"
        dirs=("$work" "tests/fuzz/corpus/$name")
        [ -d "tests/fuzz/regress/$name" ] && dirs+=("tests/fuzz/regress/$name")
        log="$bdir/artifacts/$t.log"
        if "$bdir/tests/fuzz/$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
                -max_len=16384 -print_final_stats=1 \
                -artifact_prefix="$bdir/artifacts/$t-" "${dirs[@]}" >"$log" 2>&1; then
                runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
                cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
                echo "fuzz: $t ok: ${runs:-?} inputs in ${secs} s, ${cov:-cov: ?}" >&2
        else
                echo "fuzz: $t FAILED (log: $log)" >&2
                grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|Test unit written)' "$log" |
                        head -5 >&2 || true
                failed+=("$t")
        fi
done
if [ ${#failed[@]} -gt 0 ]; then
        echo "fuzz: failed: ${failed[*]}" >&2
        exit 1
fi
