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
# pci.ids names as recorded: in the summary after [vendor:device class], in the JSON or null.
f="$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml"
"$NRM" topology --topology "$f" >"$TMP/s" 2>"$TMP/err" \
  && grep -qF "PCI 0000:04:00.0 [8086:10c9 class 0200] (Intel Corporation 82576 Gigabit Network Connection) network eth0" "$TMP/s" \
  && grep -qF "PCI 0000:06:00.0 [10de:06d2 class 0302] (nVidia Corporation)" "$TMP/s" && ok \
  || fail "24em64t-2n6c2t-pci.xml: PCI names in the summary: $(grep PCI "$TMP/s" | head -3)"
"$NRM" topology --json --topology "$f" >"$TMP/j" 2>"$TMP/err" \
  && grep -qF '"deviceName": "82576 Gigabit Network Connection",' "$TMP/j" \
  && grep -A1 -F '"vendorName": "nVidia Corporation",' "$TMP/j" | grep -qF '"deviceName": null,' && ok \
  || fail "24em64t-2n6c2t-pci.xml: PCI names in the JSON: $(grep -m2 vendorName "$TMP/j")"
finish
