#!/usr/bin/env bash
# Runs every kdev test: installs dependencies, then builds and runs the suite
# twice, plainly and under AddressSanitizer + UndefinedBehaviorSanitizer, and
# runs the libFuzzer targets for a bounded time (scripts/fuzz.sh).
# Usage: scripts/test.sh        (from anywhere inside the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)

echo "== ASan+UBSan build and tests" >&2
cmake -S . -B build-asan -G Ninja -DKDEV_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
ninja -C build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== release build and tests" >&2
# The same build as the container image's (deploy/Dockerfile runs it too).
scripts/build.sh --build-dir build --jobs "$jobs"
# libFuzzer targets: 60 s for fuzz_h2_server and fuzz_plugin_request, 20 s
# for the others, nproc at a time (fuzz.sh; KDEV_FUZZ_SECONDS sets one time
# for all); a failure is reported at the end, so that the release ctest
# summary stays the closing output.
fuzz_rc=0
scripts/fuzz.sh || fuzz_rc=$?
ctest --test-dir build --output-on-failure -j"$jobs"
exit "$fuzz_rc"
