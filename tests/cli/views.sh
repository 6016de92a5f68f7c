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

# --- nrm status ---------------------------------------------------------------
# The plugin in partitioned mode on the Zen4, one claim holding L3 group 1.
K="$TMP/k"; S="$TMP/state"; mkdir -p "$TMP/claims"
uid=00000000-0000-4000-8000-0000000000d1
cat >"$TMP/claims/default_l3.json" <<EOT
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"l3","uid":"$uid"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"a","driver":"cpu.nrm.io","pool":"n1","device":"l3-1"}]}}}}
EOT
set -- --node-name n1 --topology "$zen4" --drivers cpu --cpu-mode partitioned --reserved-cpus 0
"$NRM" plugin "$@" --kubelet-dir "$K" --cdi-dir "$TMP/cdi" --state-dir "$S" --create-state-dir \
  --claims-dir "$TMP/claims" --hook-path "" --reconcile-interval 0 2>"$TMP/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$K/plugins_registry/cpu.nrm.io-reg.sock" ] && break; sleep 0.1; done
"$NRM_DRA_CLIENT" prepare "$K/plugins/cpu.nrm.io/dra.sock" default l3 $uid >/dev/null 2>"$TMP/err" && ok \
  || fail "prepare l3-1: $(cat "$TMP/err") $(tail -5 "$TMP/plugin.log")"
kill -TERM $plugin; wait $plugin
[ -s "$S/settings.json" ] && ok || fail "the plugin wrote no settings record"
"$NRM" status "$@" --state-dir "$S" >"$TMP/st" 2>"$TMP/err" && ok || fail "status with the plugin's settings: $(cat "$TMP/err")"
grep -q '^cpu.nrm.io pool n1: 217 devices, 1 allocated, ' "$TMP/st" && ok || fail "counts: $(head -1 "$TMP/st")"
grep -qE '^  l3-1 +cpus 16, consumed 16, 1 claim; CPUs 8-15,200-207, held 8-15,200-207$' "$TMP/st" && ok \
  || fail "l3-1 line: $(grep l3-1 "$TMP/st")"
grep -qE '^  numa0 +cpus 191, consumed 0, 0 claims; CPUs 1-95,192-287, held -$' "$TMP/st" && ok \
  || fail "numa0 line: $(grep numa0 "$TMP/st")"
grep -qxF '  NUMA node 0: free CPUs 1-7,16-95,192-199,208-287 (175 of 191 allocatable)' "$TMP/st" && ok \
  || fail "free CPUs of node 0: $(tail -3 "$TMP/st")"
grep -qxF '  NUMA node 1: free CPUs 96-191,288-383 (192 of 192 allocatable)' "$TMP/st" && ok \
  || fail "free CPUs of node 1: $(tail -3 "$TMP/st")"
"$NRM" status "$@" --state-dir "$S" --json >"$TMP/sj" 2>"$TMP/err"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
dev = {x['name']: x for x in d['pools'][0]['devices']}
assert dev['l3-1']['cpus'] == '8-15,200-207' and dev['l3-1']['heldCPUs'] == '8-15,200-207'
assert d['numaNodes'][0]['freeCPUs'] == '1-7,16-95,192-199,208-287'" "$TMP/sj" && ok || fail "status --json: CPU lists"
# Other settings than the plugin's are refused, naming the setting and both values.
expect_error "status in numa mode" "the CPU mode (--cpu-mode) is \`numa\` here but \`partitioned\` in the plugin's record" \
  -- status --node-name n1 --topology "$zen4" --drivers cpu --reserved-cpus 0 --state-dir "$S"
expect_error "status with other reserved CPUs" "the reserved CPUs (--reserved-cpus) is \`0-1\` here but \`0\`" \
  -- status "$@" --reserved-cpus 0-1 --state-dir "$S"
expect_error "status on another machine" "the machine (--topology) is \`live\` here" \
  -- status --node-name n1 --drivers cpu --cpu-mode partitioned --reserved-cpus 0 --state-dir "$S"
# Without the record (a plugin before it), a held device is never free.
mv "$S/settings.json" "$TMP/settings.json"
"$NRM" status --node-name n1 --topology "$zen4" --drivers cpu --state-dir "$S" >"$TMP/st" 2>"$TMP/err"
grep -q '^cpu.nrm.io pool n1: 3 devices, 1 allocated, 2 available' "$TMP/st" && ok \
  || fail "a held device counted as free: $(head -1 "$TMP/st") $(cat "$TMP/err")"
grep -qE "^  l3-1 +not in the pool now, held by default/l3 \($uid\)$" "$TMP/st" && ok \
  || fail "the held device not listed: $(cat "$TMP/st")"
if [ "$(nproc)" -lt 200 ]; then
  expect_error "claims on CPUs the machine does not have" "hold CPUs 8-15,200-207, which this machine (live) does not have" \
    -- status --node-name n1 --drivers cpu --cpu-mode partitioned --state-dir "$S"
fi

# How each claim lies on the machine (numa mode, SMT siblings +12 on the
# 2n6c2t): two CPUs are a whole core; one CPU, and then one more, split a
# core between two claims; the line under each claim and --json's
# placement say which.
K2="$TMP/k2"; S2="$TMP/state2"; mkdir -p "$TMP/claims2"
smt="$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml"
claim_of () { # name uid count
  cat >"$TMP/claims2/default_$1.json" <<EOT
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"$1","uid":"$2"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"a","driver":"cpu.nrm.io","pool":"n1","device":"numa0","consumedCapacity":{"cpus":"$3"}}]}}}}
EOT
}
claim_of pair 00000000-0000-4000-8000-0000000000e1 2
claim_of one 00000000-0000-4000-8000-0000000000e2 1
claim_of two 00000000-0000-4000-8000-0000000000e3 1
"$NRM" plugin --node-name n1 --topology "$smt" --drivers cpu --kubelet-dir "$K2" --cdi-dir "$TMP/cdi2" --state-dir "$S2" \
  --create-state-dir --claims-dir "$TMP/claims2" --hook-path "" --reconcile-interval 0 2>"$TMP/plugin2.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$K2/plugins_registry/cpu.nrm.io-reg.sock" ] && break; sleep 0.1; done
for c in pair:e1 one:e2 two:e3; do
  "$NRM_DRA_CLIENT" prepare "$K2/plugins/cpu.nrm.io/dra.sock" default "${c%%:*}" "00000000-0000-4000-8000-0000000000${c#*:}" \
    >/dev/null 2>"$TMP/err" && ok || fail "prepare ${c%%:*}: $(cat "$TMP/err") $(tail -5 "$TMP/plugin2.log")"
done
kill -TERM $plugin; wait $plugin
"$NRM" status --node-name n1 --topology "$smt" --drivers cpu --state-dir "$S2" >"$TMP/st2" 2>"$TMP/err" && ok \
  || fail "status of the split core: $(cat "$TMP/err")"
# Each claim's line, then its placement under it.
placement_of () { sed -n "/^  default\/$1 /{n;p}" "$TMP/st2"; }
[ "$(placement_of pair)" = "    whole cores 0; partial cores -; L3 groups 0; packages 0; NUMA nodes 0" ] && ok \
  || fail "the whole core: $(cat "$TMP/st2")"
[ "$(placement_of one)" = "    whole cores -; partial cores 2; L3 groups 0; packages 0; NUMA nodes 0" ] && ok \
  || fail "one CPU of a core: $(cat "$TMP/st2")"
[ "$(placement_of two)" = "    whole cores -; partial cores 2; L3 groups 0; packages 0; NUMA nodes 0" ] && ok \
  || fail "the other CPU of that core: $(cat "$TMP/st2")"
"$NRM" status --node-name n1 --topology "$smt" --drivers cpu --state-dir "$S2" --json >"$TMP/sj2" 2>"$TMP/err"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
pl = {c['name']: c['drivers']['cpu.nrm.io'] for c in d['claims'].values()}
assert pl['pair']['cpus'] == '0,12', pl
assert pl['pair']['placement'] == {'wholeCores': '0', 'partialCores': '', 'l3Groups': '0', 'packages': '0',
                                   'numaNodes': '0'}, pl
assert sorted([pl['one']['cpus'], pl['two']['cpus']]) == ['14', '2'], pl
for n in ('one', 'two'):
    assert pl[n]['placement']['wholeCores'] == '' and pl[n]['placement']['partialCores'] == '2', pl
" "$TMP/sj2" && ok || fail "status --json: placement: $(cat "$TMP/sj2")"

# What the kernel offers for cpuset partitions, on fake cgroupfs trees: 6.1
# (partitions, no cpuset.cpus.exclusive) and 6.7+.
P=$TMP/pfs
mkdir -p "$P/sys/fs/cgroup/kubepods.slice" "$TMP/pst"
echo "cpuset cpu memory" >"$P/sys/fs/cgroup/cgroup.controllers"
echo 0-23 >"$P/sys/fs/cgroup/kubepods.slice/cpuset.cpus"
echo member >"$P/sys/fs/cgroup/kubepods.slice/cpuset.cpus.partition"
printf 'cpu:\n  partition: isolated\n' >"$TMP/part.yaml"
"$NRM" status -c "$TMP/part.yaml" --fsroot "$P" -t "$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml" --state-dir "$TMP/pst" \
  >"$TMP/ps" 2>&1
grep -qF 'CPU partitions: isolated; unavailable (this kernel has only local partitions (no cpuset.cpus.exclusive' \
  "$TMP/ps" && ok || fail "status on 6.1: $(grep -i partition "$TMP/ps")"
grep -qE '^  cpu.partition +isolated \(top level\)$' "$TMP/ps" && ok || fail "status: the setting: $(grep -i partition "$TMP/ps")"
: >"$P/sys/fs/cgroup/kubepods.slice/cpuset.cpus.exclusive"
"$NRM" status --fsroot "$P" -t "$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml" --state-dir "$TMP/pst" >"$TMP/ps" 2>&1
grep -qxF 'CPU partitions: off; the kernel has remote partitions (cpuset.cpus.exclusive)' "$TMP/ps" && ok \
  || fail "status on 6.7+: $(grep -i partition "$TMP/ps")"
# A claim prepared where the node's partition cannot be had (6.1 again):
# status's claim line and --json say why, as prepare noted it.
rm "$P/sys/fs/cgroup/kubepods.slice/cpuset.cpus.exclusive"
mkdir -p "$TMP/claims3"
cat >"$TMP/claims3/default_part.json" <<EOT
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"part","uid":"00000000-0000-4000-8000-0000000000f1"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"a","driver":"cpu.nrm.io","pool":"n1","device":"numa0","consumedCapacity":{"cpus":"2"}}]}}}}
EOT
set -- -c "$TMP/part.yaml" --fsroot "$P" --node-name n1 -t "$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml" --drivers cpu \
  --state-dir "$TMP/state3"
"$NRM" plugin "$@" --kubelet-dir "$TMP/k3" --cdi-dir "$TMP/cdi3" --create-state-dir --claims-dir "$TMP/claims3" \
  --hook-path "" --reconcile-interval 0 2>"$TMP/plugin3.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$TMP/k3/plugins_registry/cpu.nrm.io-reg.sock" ] && break; sleep 0.1; done
"$NRM_DRA_CLIENT" prepare "$TMP/k3/plugins/cpu.nrm.io/dra.sock" default part 00000000-0000-4000-8000-0000000000f1 \
  >/dev/null 2>"$TMP/err" && ok || fail "prepare beside an unavailable partition: $(cat "$TMP/err") $(tail -3 "$TMP/plugin3.log")"
kill -TERM $plugin; wait $plugin
"$NRM" status "$@" >"$TMP/ps" 2>&1
grep -qF "  default/part (00000000-0000-4000-8000-0000000000f1) CPUs 0,12 CPU nodes 0 partition unavailable (this kernel has only local partitions" \
  "$TMP/ps" && ok || fail "status: the claim's partition: $(grep -A1 '^claims' "$TMP/ps")"
"$NRM" status "$@" --json >"$TMP/psj" 2>&1
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['claims']['00000000-0000-4000-8000-0000000000f1']['drivers']['cpu.nrm.io']['partition'].startswith('unavailable (')
" "$TMP/psj" && ok || fail "status --json: the claim's partition: $(cat "$TMP/psj")"
finish
