#!/bin/sh
# The text views: nrm topology (L3 groups, SMT siblings, PCI names, lines of
# at most 120 columns), nrm topology --hardware (numactl -H's layout,
# against numactl itself where it is installed), and nrm status (CPU lists
# per device, free CPUs per node, the plugin's settings).
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"

# --- nrm topology -------------------------------------------------------------
zen4="$NRM_TOPOLOGIES/AMD-19h-Zen4-2xEpyc-9654.xml"
"$NRM" topology -t "$zen4" >"$TMP/s" 2>"$TMP/err" || fail "zen4 topology: $(cat "$TMP/err")"
[ "$(grep -c '^  L3 group ' "$TMP/s")" -eq 24 ] && ok || fail "zen4: not one line per L3 group: $(grep -c 'L3' "$TMP/s")"
grep -qxF '  L3 group 0 (32.0 MiB): CPUs 0-7,192-199; 8 cores; SMT siblings: each of 0-7 with +192' "$TMP/s" && ok \
  || fail "zen4: L3 group 0 line: $(grep -m1 'L3' "$TMP/s")"
grep -qxF '  L3 group 23 (32.0 MiB): CPUs 184-191,376-383; 8 cores; SMT siblings: each of 184-191 with +192' "$TMP/s" \
  && ok || fail "zen4: L3 group 23 line"
# Siblings that differ in shape are listed set by set.
"$NRM" topology -t "$NRM_TOPOLOGIES/20em64t-hybrid-1p6c2t+2ca4co1t.xml" >"$TMP/h" 2>&1
grep -qF 'SMT siblings: 0-1 2-3 4-5 6-7 8-9 10-11 (8 cores of one thread)' "$TMP/h" && ok \
  || fail "hybrid: SMT sets: $(grep 'L3' "$TMP/h")"
"$NRM" topology -t "$NRM_TOPOLOGIES/2arm-2c.xml" >"$TMP/h" 2>&1
grep -qxF '  no L3 group: CPUs 0-1; 2 cores; no SMT' "$TMP/h" && ok || fail "2arm-2c: cores without L3: $(cat "$TMP/h")"
# PCI devices by name, on their node.
"$NRM" topology -t "$NRM_TOPOLOGIES/32em64t-2n8c2t-pci-normalio.xml" >"$TMP/h" 2>&1
grep -qF 'PCI 0000:03:00.0 [10de:1094 class 0302] (NVIDIA Corporation Tesla M2075' "$TMP/h" && ok \
  || fail "PCI names: $(grep PCI "$TMP/h" | head -3)"
# No line longer than 120 columns, on any recorded machine.
for f in "$NRM_TOPOLOGIES"/*.xml; do
  "$NRM" topology -t "$f" >"$TMP/w" 2>"$TMP/err" || { fail "$f: $(cat "$TMP/err")"; continue; }
  long=$(awk 'length($0) > 120 { print length($0) ": " substr($0, 1, 60) }' "$TMP/w" | head -1)
  [ -z "$long" ] && ok || fail "$(basename "$f"): a line of $long"
done

# --- nrm topology --hardware -------------------------------------------------
"$NRM" topology --hardware -t "$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml" >"$TMP/hw" 2>"$TMP/err"
cat >"$TMP/want" <<'EOT'
available: 2 nodes (0-1)
node 0 cpus: 0 2 4 6 8 10 12 14 16 18 20 22
node 0 size: 18421 MB
node 0 free: unknown
node 1 cpus: 1 3 5 7 9 11 13 15 17 19 21 23
node 1 size: 18431 MB
node 1 free: unknown
node distances:
node   0   1 
  0:  10  20 
  1:  20  10 
EOT
cmp -s "$TMP/hw" "$TMP/want" && ok || fail "--hardware on a recorded machine: $(diff "$TMP/want" "$TMP/hw")"
expect_error "--hardware with --json" "--hardware is a text view" -- topology --hardware --json
# The live machine, free memory through --fsroot.
if "$NRM" topology --hardware >"$TMP/live" 2>"$TMP/err"; then
  ok
  node=$(sed -n 's/^node \([0-9]*\) cpus:.*/\1/p' "$TMP/live" | head -1)
  mkdir -p "$TMP/root/sys/devices/system/node/node$node"
  printf 'Node %s MemTotal:  8388608 kB\nNode %s MemFree:   3145728 kB\n' "$node" "$node" \
    >"$TMP/root/sys/devices/system/node/node$node/meminfo"
  "$NRM" topology --hardware --fsroot "$TMP/root" >"$TMP/f" 2>"$TMP/err"
  grep -qxF "node $node free: 3072 MB" "$TMP/f" && ok || fail "free memory from --fsroot: $(grep free "$TMP/f") $(cat "$TMP/err")"
  echo garbage >"$TMP/root/sys/devices/system/node/node$node/meminfo"
  expect_error "meminfo without MemFree" "node$node/meminfo\` has no \`MemFree" -- topology --hardware --fsroot "$TMP/root"
  if command -v numactl >/dev/null 2>&1 && numactl -H >"$TMP/numactl" 2>/dev/null; then
    grep '^available:' "$TMP/numactl" >"$TMP/a1"; grep '^available:' "$TMP/live" >"$TMP/a2"
    cmp -s "$TMP/a1" "$TMP/a2" && ok || fail "node count: numactl $(cat "$TMP/a1"), nrm $(cat "$TMP/a2")"
    grep ' cpus:' "$TMP/numactl" >"$TMP/c1"; grep ' cpus:' "$TMP/live" >"$TMP/c2"
    cmp -s "$TMP/c1" "$TMP/c2" && ok || fail "cpus: $(diff "$TMP/c1" "$TMP/c2")"
    sed -n '/^node distances:/,$p' "$TMP/numactl" >"$TMP/d1"; sed -n '/^node distances:/,$p' "$TMP/live" >"$TMP/d2"
    cmp -s "$TMP/d1" "$TMP/d2" && ok || fail "distances: $(diff "$TMP/d1" "$TMP/d2")"
    # Sizes within 1% or 16 MB (hwloc and numactl read the same MemTotal).
    paste "$(grep ' size:' "$TMP/numactl" >"$TMP/s1"; echo "$TMP/s1")" \
          "$(grep ' size:' "$TMP/live" >"$TMP/s2"; echo "$TMP/s2")" | while read -r _ n _ a _ _ _ _ b _; do
      d=$((a > b ? a - b : b - a))
      [ "$d" -le 16 ] || [ "$d" -le $((a / 100)) ] || echo "node $n: numactl $a MB, nrm $b MB"
    done >"$TMP/sizes"
    [ ! -s "$TMP/sizes" ] && ok || fail "sizes differ: $(cat "$TMP/sizes")"
  else
    echo "note: numactl is not installed: --hardware not compared with it"
  fi
else
  grep -q "cannot load topology" "$TMP/err" || fail "live --hardware: $(cat "$TMP/err")"
fi
finish
