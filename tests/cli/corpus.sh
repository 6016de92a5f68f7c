#!/bin/sh
# Every recorded machine: both commands succeed, and the output is
# byte-identical across runs.
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"
for f in "$NRM_TOPOLOGIES"/*.xml; do
  name=$(basename "$f")
  for args in "" "--cpu-mode partitioned --feature-gates DRAListTypeAttributes=true,DRANodeAllocatableResources=true"; do
    # shellcheck disable=SC2086
    if "$NRM" slices --topology "$f" --node-name n1 $args >"$TMP/a" 2>"$TMP/err" \
       && "$NRM" slices --topology "$f" --node-name n1 $args >"$TMP/b" 2>>"$TMP/err"; then
      cmp -s "$TMP/a" "$TMP/b" && ok || fail "$name $args: output differs between runs"
      head -c 40 "$TMP/a" | grep -q '"apiVersion": "v1"' && ok || fail "$name: not a List"
    else
      fail "$name $args: $(cat "$TMP/err")"
    fi
  done
  "$NRM" topology --topology "$f" >"$TMP/s" 2>"$TMP/err" && grep -q "^NUMA node" "$TMP/s" && ok \
    || fail "$name: topology summary: $(cat "$TMP/err")"
  "$NRM" topology --json --topology "$f" >"$TMP/j" 2>"$TMP/err" && grep -q '"numaNodes"' "$TMP/j" && ok \
    || fail "$name: topology --json: $(cat "$TMP/err")"
done
finish
