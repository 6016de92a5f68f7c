#!/bin/bash
# Runs the whole test suite (unit, corpus, command-line) on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure --enable-werror
rc=0
make -j"$(nproc)" check 2>&1 | tee test-run.log || rc=$?
# One closing line with the counts of the automake harness.
count () { sed -n "s/^# $1: *//p" test-run.log | tail -n 1; }
# A failing test's own log, so that a run seen only through its output
# (CI) says why.
for t in $(sed -n 's/^FAIL: //p' test-run.log); do
  echo "=== $t.log (last 80 lines) ==="
  tail -n 80 "$t.log" 2>/dev/null || true
done
echo "$(count PASS) passed, $(count FAIL) failed, $(count SKIP) skipped"
rm -f test-run.log
exit "$rc"
