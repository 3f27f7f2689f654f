#!/usr/bin/env bash
# No leaks and no memory errors under valgrind: every unit test, and the demo
# with kdev-plugin and kdevctl kubelet both running under valgrind.
# Skipped (77) in sanitizer builds, where ASan already checks the same.
set -uo pipefail
if grep -q '^KDEV_SANITIZE:BOOL=ON' "$KDEV_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: sanitizer build (ASan/LSan check this build instead of valgrind)"
  exit 77
fi
command -v valgrind >/dev/null || { echo "FAIL: valgrind is not installed"; exit 1; }
vg=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
    --show-leak-kinds=definite,indirect,possible --error-exitcode=99 --track-fds=no)
passed=0 failed=0
for t in "$KDEV_BUILD_DIR"/tests/test_*; do
  [ -x "$t" ] || continue
  if out=$("${vg[@]}" "$t" 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL: $(basename "$t") under valgrind"; echo "$out" | tail -40
  fi
done
if out=$(KDEV_WRAP="${vg[*]}" KDEV_BUILD_DIR="$KDEV_BUILD_DIR" timeout 240 \
         "$KDEV_SOURCE_DIR/scripts/demo.sh" 2>&1) && \
   grep -q "kdevctl kubelet exit status: 0; kdev-plugin exit status: 0; sockets left: 0" <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: demo under valgrind"; echo "$out" | tail -60
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
