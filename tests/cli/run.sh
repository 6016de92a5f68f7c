#!/bin/sh
# nrm run on this machine (the sched_setaffinity/set_mempolicy path where the
# host has no cgroup v2 cpuset; the cgroup path is in tests/vm/commit.vm).
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"
# pkill, pgrep and ps: procps, which scripts/deps.sh installs (a minimal
# Debian 12 has none of them).
for t in pkill pgrep ps; do
  command -v "$t" >/dev/null || { echo "SKIP: needs $t (procps: scripts/deps.sh installs it)"; exit 77; }
  if command -v dpkg-query >/dev/null && pkg=$(dpkg -S "$(command -v "$t")" 2>/dev/null | cut -d: -f1); then
    grep -qw "$pkg" "${NRM_SRCDIR:-.}/scripts/deps.sh" && ok || fail "scripts/deps.sh does not install $pkg (for $t)"
  fi
done
S="$TMP/state"
RUN="$NRM run --state-dir $S --create-state-dir --min-shared-cpus 0"
ncpu=$(getconf _NPROCESSORS_ONLN)

# One CPU: the command sees exactly that one, named in NRM_CPUS.
$RUN --cpus 1 -- sh -c 'grep Cpus_allowed_list /proc/self/status; echo "env $NRM_CPUS $NRM_MEMS"' >"$TMP/out" 2>"$TMP/err" \
  || fail "run --cpus 1: $(cat "$TMP/err")"
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$TMP/out")
envcpus=$(sed -n 's/^env \([^ ]*\) .*/\1/p' "$TMP/out")
case $allowed in *,* | *-*) fail "more than one CPU allowed: $allowed" ;; "") fail "no Cpus_allowed_list: $(cat "$TMP/out")" ;; *) ok ;; esac
[ "$allowed" = "$envcpus" ] && ok || fail "NRM_CPUS $envcpus is not the allowed CPU $allowed"
grep -q "CPUs $allowed" "$TMP/err" && ok || fail "run does not say where it ran: $(cat "$TMP/err")"

# nrm status sees the run while it lasts, and not after.
$RUN --cpus 1 -- sh -c "$NRM status --state-dir $S; $NRM status --json --state-dir $S" >"$TMP/out" 2>"$TMP/log" \
  || fail "status during a run"
grep -q "^  nrm-run/run-" "$TMP/out" && ok || fail "status does not list the run: $(cat "$TMP/out")"
# The run's log and status tell the same cores, L3 groups and nodes.
said=$(sed -n 's/.*(whole cores \([^,]*\), partial cores \([^;]*\); L3 groups \([^;]*\); NUMA nodes \([^)]*\)).*/\1 \2 \3 \4/p' "$TMP/log")
shown=$(sed -n '/^  nrm-run\/run-/{n;s/^    whole cores \([^;]*\); partial cores \([^;]*\); L3 groups \([^;]*\); packages [^;]*; NUMA nodes \(.*\)$/\1 \2 \3 \4/p;}' "$TMP/out")
[ -n "$said" ] && [ "$said" = "$shown" ] && ok || fail "status's placement ($shown) is not the run's ($said): $(cat "$TMP/out")"
grep -q '"partialCores": ' "$TMP/out" && ok || fail "status --json has no placement for the run"
grep -q "^CPUs: exclusive $allowed;\|^CPUs: exclusive [0-9]" "$TMP/out" && ok || fail "status shows no exclusive CPU"
grep -q '"allocatedDevices": 1' "$TMP/out" && ok || fail "status --json counts no allocated device"
"$NRM" status --state-dir "$S" >"$TMP/out" 2>&1 || fail "status after the run: $(cat "$TMP/out")"
grep -q "^claims: 0" "$TMP/out" && ok || fail "the run is still listed after it ended"

# A run that holds all of node 0's memory: the shared pool's memory nodes
# leave node 0 out (or keep every node, starved, on a one-node machine).
cap=$("$NRM" slices | python3 -c '
import json, sys
for s in json.load(sys.stdin)["items"]:
    for d in s["spec"].get("devices", []):
        if d["name"] == "numa0" and "memory" in d.get("capacity", {}):
            print(d["capacity"]["memory"]["value"])')
if [ -n "$cap" ]; then
  $RUN --cpus 1 --memory "$cap" -N 0 -- "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1 || fail "status during a full-node run: $(cat "$TMP/out")"
  grep -q "^Memory nodes: shared .*; claimed in full 0" "$TMP/out" && ok || fail "status does not see node 0 held in full: $(grep Memory "$TMP/out")"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^Memory nodes: shared 0.*; claimed in full -$" "$TMP/out" && ok || fail "node 0 still held after the run: $(grep Memory "$TMP/out")"
fi

# The command's exit status is nrm run's; the claim is released afterwards.
$RUN --cpus 1 -- sh -c 'exit 3' 2>/dev/null
[ $? -eq 3 ] && ok || fail "exit status not passed on"
grep -q '"nrm-run"' "$S/cpu.nrm.io.checkpoint.json" && fail "a finished run kept its claim" || ok

# Memory on the same node.
$RUN --cpus 1 --memory 16Mi -- sh -c 'echo "$NRM_MEMS"' >"$TMP/out" 2>"$TMP/err" && ok \
  || fail "run --memory: $(cat "$TMP/err")"
grep -q '^[0-9]' "$TMP/out" && ok || fail "no NRM_MEMS with --memory"
# --memory is also the run's limit: the command is told (cgroup v2 writes
# memory.max, tests/vm/commit-guest.sh reads it back).
$RUN --cpus 1 --memory 16Mi -- sh -c 'echo "$NRM_MEMORY_MAX"' >"$TMP/out" 2>"$TMP/err"
[ "$(cat "$TMP/out")" = 16777216 ] && ok || fail "NRM_MEMORY_MAX is not 16Mi: $(cat "$TMP/out" "$TMP/err")"
if ! grep -q cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  grep -q "held for this run but not enforced" "$TMP/err" && ok || fail "the fallback did not say limits are not enforced"
fi
# --partition: a bad mode is refused; where there is no cgroup v2 cpuset
# (the fallback path) a run that asks for one is refused with 125 before the
# command starts, while the node's cpu.partition lets it run without one.
# The VM test (tests/vm/partition-guest.sh) makes real ones on 6.12.
expect_error "bad partition" "must be off, root or isolated, not \`bogus\`" -- run --state-dir "$S" --cpus 1 --partition bogus -- true
if ! grep -q cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  rm -f "$TMP/ran"
  "$NRM" run --state-dir "$S" --cpus 1 --partition root -- touch "$TMP/ran" >/dev/null 2>&1
  [ $? = 125 ] && [ ! -e "$TMP/ran" ] && ok \
    || fail "--partition root without a cgroup v2 cpuset was not refused with 125 before the command"
  "$NRM" run --state-dir "$S" --cpus 1 --partition isolated -- true 2>"$TMP/err"
  grep -q "no cgroup v2 cpuset here (cgroup v1?), so no cpuset partition" "$TMP/err" && ok \
    || fail "the refusal does not say why: $(cat "$TMP/err")"
  echo '{"cpu": {"partition": "root"}}' >"$TMP/partition.json"
  "$NRM" run -c "$TMP/partition.json" --state-dir "$S" --cpus 1 -- touch "$TMP/ran" 2>"$TMP/err" && [ -e "$TMP/ran" ] && ok \
    || fail "the node's cpu.partition stopped a run where none can be had: $(cat "$TMP/err")"
  rm -f "$TMP/ran"
  "$NRM" run --state-dir "$S" --cpus 1 --partition root --dry-run >"$TMP/out" 2>&1
  grep -q "cpuset partition: root (--partition): unavailable here; no cgroup v2 cpuset here" "$TMP/out" && ok \
    || fail "the dry run does not say the partition is unavailable: $(cat "$TMP/out")"
fi
"$NRM" run --dry-run --json -t "$NRM_TOPOLOGIES/2arm-2c.xml" --cpus 1 --partition isolated >"$TMP/out" 2>&1
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["partition"]; assert p["mode"]=="isolated" and p["from"]=="--partition" and "recorded" in p["why"], p' "$TMP/out" \
  && ok || fail "the dry run's JSON has no partition view: $(cat "$TMP/out")"
# Isolated CPUs only with --isolated, and only when the node has some.
if [ ! -s /sys/devices/system/cpu/isolated ]; then
  expect_error "no isolated CPUs" "has isolated CPUs" -- run --state-dir "$S" --cpus 1 --isolated -- true
fi
if [ "$ncpu" -ge 2 ]; then
  last=$(( ncpu - 1 ))
  $RUN --cpus 1 --isolated --isolated-cpus "$last" -- sh -c 'echo "$NRM_CPUS"' >"$TMP/out" 2>"$TMP/err"
  [ "$(cat "$TMP/out")" = "$last" ] && ok || fail "--isolated did not give isolated CPU $last: $(cat "$TMP/out" "$TMP/err")"
  $RUN --cpus 1 --isolated-cpus "$last" -- sh -c 'echo "$NRM_CPUS"' >"$TMP/out" 2>"$TMP/err"
  [ "$(cat "$TMP/out")" != "$last" ] && ok || fail "a run without --isolated got isolated CPU $last"
fi
# Huge pages: whole pages only; a node without any is refused up front.
expect_error "bad huge pages" "whole pages" -- run --state-dir "$S" --cpus 1 --hugepages-2Mi 3Mi -- true
expect_error "huge pages outside run" "is an option of \`nrm run\`" -- slices --hugepages-2Mi 4Mi
node0=$(ls -d /sys/devices/system/node/node0 2>/dev/null)
if [ -n "$node0" ] && [ "$(cat "$node0/hugepages/hugepages-1048576kB/nr_hugepages" 2>/dev/null || echo 0)" = 0 ]; then
  expect_error "no 1Gi huge pages" "has no 1Gi huge pages" -- run --state-dir "$S" --cpus 1 --numa-node 0 \
    --hugepages-1Gi 1Gi -- touch "$TMP/ran"
  [ -e "$TMP/ran" ] && fail "the command ran although its huge pages were refused" || ok
fi

# A request that cannot be met fails before the command starts.
expect_error "too many CPUs" "is more than the device's" -- run --state-dir "$S" --cpus 4096 -- touch "$TMP/ran"
[ -e "$TMP/ran" ] && fail "the command ran although the request failed" || ok
expect_error "no command" "no command given" -- run --state-dir "$S" --cpus 1
expect_error "no --cpus" "--cpus N (or --physcpubind LIST) is required" -- run --state-dir "$S" -- true
expect_error "--topology" "only for --dry-run" -- run --state-dir "$S" --cpus 1 --topology "$NRM_TOPOLOGIES/2arm-2c.xml" -- true
expect_error "bad option" "unknown CPU option" -- run --state-dir "$S" --cpus 1 --option turbo -- true
expect_error "bad memory" "--memory" -- run --state-dir "$S" --cpus 1 --memory lots -- true

# Exit statuses as timeout(1) and env(1) have them: nrm's own failures
# before the command starts are 125 (bad usage and no room alike), a
# command that is not executable 126, one that is not found 127.
exit_of () { "$NRM" "$@" >/dev/null 2>&1; echo $?; }
[ "$(exit_of run --state-dir "$S" --cpus 1 --turbo -- true)" = 125 ] && ok || fail "bad usage of run is not 125"
[ "$(exit_of run --state-dir "$S" --cpus 4096 -- true)" = 125 ] && ok || fail "no room is not 125"
[ "$(exit_of run --state-dir "$S" --cpus 1)" = 125 ] && ok || fail "no command is not 125"
printf 'echo hi\n' >"$TMP/noexec"
chmod 0644 "$TMP/noexec"
[ "$(exit_of run --state-dir "$S" --cpus 1 --min-shared-cpus 0 -- "$TMP/noexec")" = 126 ] \
  && [ "$(exit_of run --state-dir "$S" --cpus 1 --min-shared-cpus 0 -- no-such-command-nrm)" = 127 ] && ok \
  || fail "not executable is not 126, or not found not 127"
[ "$(exit_of run --state-dir "$S" --cpus 1 --min-shared-cpus 0 -- sh -c 'exit 125')" = 125 ] \
  && [ "$(exit_of run --state-dir "$S" --cpus 1 --min-shared-cpus 0 -- sh -c 'exit 2')" = 2 ] && ok \
  || fail "the command's own status is not passed through"
# Other commands keep 2 for bad usage.
[ "$(exit_of status --state-dir "$S" --turbo)" = 2 ] && ok || fail "bad usage of status is not 2"

# --dry-run: what would be taken and why, and nothing taken.
$RUN --dry-run --cpus 1 -- touch "$TMP/ran" >"$TMP/out" 2>"$TMP/err" || fail "dry run: $(cat "$TMP/err")"
grep -q "^would take CPUs [0-9]" "$TMP/out" && grep -q "whole cores:" "$TMP/out" && grep -q "L3 groups:" "$TMP/out" \
  && grep -q "tried NUMA node" "$TMP/out" && grep -q "nothing was taken" "$TMP/out" && ok \
  || fail "dry run does not explain: $(cat "$TMP/out")"
[ ! -e "$TMP/ran" ] && ! grep -q '"nrm-run"' "$S/cpu.nrm.io.checkpoint.json" && [ -z "$(ls "$S/runs" 2>/dev/null)" ] && ok \
  || fail "a dry run ran the command or took something"
$RUN --dry-run --json --cpus 1 --memory 16Mi >"$TMP/out" 2>"$TMP/err" || fail "dry run --json: $(cat "$TMP/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["dryRun"] and d["count"]==1 and d["memory"]["memory"]=="16Mi" and d["tried"] and "held" in d' "$TMP/out" \
  && ok || fail "dry run --json: $(cat "$TMP/out")"
# A recorded machine: two nodes, distances, and several nodes when no one has room.
T2="$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml"
"$NRM" run --dry-run -t "$T2" --cpus 4 --min-shared-cpus 0 -- app >"$TMP/out" 2>"$TMP/err" || fail "dry run -t: $(cat "$TMP/err")"
grep -q "distances 0:" "$TMP/out" && grep -q "a recorded machine holds nothing" "$TMP/out" && ok \
  || fail "dry run -t shows no distances: $(cat "$TMP/out")"
"$NRM" run --dry-run --json -t "$T2" --cpus 16 --min-shared-cpus 0 >"$TMP/out" 2>"$TMP/err" || fail "16 CPUs over 2 nodes: $(cat "$TMP/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["count"]==16 and d["numaNodes"]=="0-1" and len(d["nodes"])==2' "$TMP/out" \
  && ok || fail "16 CPUs were not spread over both nodes: $(cat "$TMP/out")"
"$NRM" run --dry-run --json -t "$T2" -N 0 --cpus 4 --min-shared-cpus 0 >"$TMP/out" 2>&1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["numaNodes"]=="0"' "$TMP/out" && ok || fail "-N 0: $(cat "$TMP/out")"
"$NRM" run --dry-run --json -t "$T2" -C 1,3 --min-shared-cpus 0 >"$TMP/out" 2>&1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["cpus"]=="1,3" and d["numaNodes"]=="1"' "$TMP/out" && ok || fail "-C 1,3: $(cat "$TMP/out")"
# Its keys in their documented order (docs/run.md), stateDir null on a
# recorded machine; the two CPUs are one thread each of two cores.
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d) == ["dryRun", "cpus", "count", "wholeCores", "partialCores", "l3Groups", "packages", "numaNodes", "nodes",
                   "memory", "tried", "held", "stateDir"], list(d)
assert d["stateDir"] is None and d["wholeCores"] == "" and d["partialCores"] == "1,3" and d["packages"] == "1"
' "$TMP/out" && ok || fail "-C 1,3: the keys: $(cat "$TMP/out")"
"$NRM" run --dry-run --json -t "$T2" -C 0,1 --min-shared-cpus 0 >"$TMP/out" 2>&1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["numaNodes"]=="0-1"' "$TMP/out" && ok || fail "-C over two nodes: $(cat "$TMP/out")"
# Memory by kind and tier on the machine with HBM and NVM nodes.
TH="$NRM_TOPOLOGIES/fakeheteromemtiers.xml"
for kt in "--memory-kind HBM:2:HBM" "--memory-kind nvm:6:NVM" "--memory-tier 0:2:HBM" "--memory-tier 1:0:DRAM"; do
  "$NRM" run --dry-run --json -t "$TH" --cpus 1 --memory 64Mi ${kt%%:*} --min-shared-cpus 0 >"$TMP/out" 2>&1
  rest=${kt#*:}
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); m=d["memory"]; assert m["takenFrom"]==int(sys.argv[2]) and m["nodes"]==sys.argv[2] and sys.argv[3] in m["why"], m' \
    "$TMP/out" "${rest%%:*}" "${rest#*:}" && ok || fail "${kt%%:*}: $(cat "$TMP/out")"
done
expect_error "--memory-kind" "no NUMA node with HBM memory has room for 1073741824 bytes; the nearest, node 2, has" \
  -- run --dry-run -t "$TH" --cpus 1 --memory 1Gi --memory-kind HBM --min-shared-cpus 0
expect_error "--memory-kind" "no NUMA node with CXL memory" -- run --dry-run -t "$TH" --cpus 1 --memory-kind CXL --min-shared-cpus 0
expect_error "--memory-tier" "a tier from 0" -- run --dry-run -t "$TH" --cpus 1 --memory-tier x --min-shared-cpus 0
"$NRM" run --dry-run --json -t "$T2" --cpus 2 --membind 1 --min-shared-cpus 0 >"$TMP/out" 2>&1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["memory"]["policy"]=="bind" and d["memory"]["nodes"]=="1"' "$TMP/out" && ok || fail "--membind 1: $(cat "$TMP/out")"

# numactl's options: bad input is refused with 125, naming it, before the command starts.
expect_error "-C off the machine" "CPU 4095 is not on this machine" -- run --state-dir "$S" -C 4095 -- touch "$TMP/ran"
expect_error "-N off the machine" "NUMA node 63 does not exist" -- run --state-dir "$S" -N 63 --cpus 1 -- touch "$TMP/ran"
expect_error "--membind off the machine" "--membind: NUMA node 63 does not exist" -- run --state-dir "$S" -m 63 --cpus 1 -- touch "$TMP/ran"
expect_error "bad -C" "--physcpubind\` needs a list of CPUs" -- run --state-dir "$S" -C x -- touch "$TMP/ran"
expect_error "two policies" "one memory policy only" -- run --state-dir "$S" --cpus 1 -m 0 -l -- touch "$TMP/ran"
expect_error "-C and --cpus" "--cpus asks for 2" -- run --state-dir "$S" -C 0 --cpus 2 -- touch "$TMP/ran"
expect_error "-C elsewhere" "is an option of \`nrm run\`" -- status -C 0
[ -e "$TMP/ran" ] && fail "the command ran although its options were refused" || ok
[ "$(exit_of run --state-dir "$S" -C 4095 -- true)" = 125 ] && ok || fail "-C off the machine is not 125"
# The CPU asked for with -C is the one the command gets.
$RUN -C 0 -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$TMP/out" 2>"$TMP/err"
grep -q "^Cpus_allowed_list:[[:space:]]*0$" "$TMP/out" && ok || fail "-C 0: $(cat "$TMP/out" "$TMP/err")"
$RUN -N 0 --cpus 1 -- sh -c 'echo "$NRM_CPUS"' >"$TMP/out" 2>"$TMP/err" && ok || fail "-N 0: $(cat "$TMP/err")"
# The memory policy the command runs with (get_mempolicy: 2 bind, 3
# interleave, 1 preferred, 0 or 4 local).
POL='import ctypes; m = ctypes.c_int(); ctypes.CDLL("libnuma.so.1").get_mempolicy(ctypes.byref(m), None, ctypes.c_ulong(0), None, ctypes.c_ulong(0)); print(m.value)'
if python3 -c "$POL" >/dev/null 2>&1; then
  for p in "--membind 0:2" "--interleave 0:3" "-i all:3" "--preferred 0:1" "--localalloc:[04]"; do
    $RUN --cpus 1 ${p%%:*} -- python3 -c "$POL" >"$TMP/out" 2>"$TMP/err"
    grep -qx "${p##*:}" "$TMP/out" && ok || fail "${p%%:*}: policy $(cat "$TMP/out" "$TMP/err")"
  done
  grep -q "policy local" "$TMP/err" && ok || fail "the log does not say the policy: $(cat "$TMP/err")"
fi

if [ "$ncpu" -ge 2 ]; then
  # child_of PID NAME: the pid of PID's child NAME (the command nrm run
  # started once it held its CPUs), waiting up to 10 s for it.
  child_of () { for _ in $(seq 100); do pgrep -P "$1" "$2" && return 0; sleep 0.1; done; return 1; }
  # ended PID: PID is gone, or a zombie, waiting up to 10 s for it.
  ended () {
    for _ in $(seq 100); do
      st=$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)
      { [ -z "$st" ] || [ "$st" = Z ]; } && return 0
      sleep 0.1
    done
    return 1
  }
  # A CPU held by another run is refused, naming the holder; a dry run
  # shows what is held.
  $RUN -C 0 -- sleep 2 2>/dev/null &
  a=$!
  child_of $a sleep >/dev/null
  expect_error "-C held" "CPU 0 is held by run nrm-run/run-$a-" -- run --state-dir "$S" --min-shared-cpus 0 -C 0 -- touch "$TMP/ran"
  $RUN --dry-run --cpus 1 >"$TMP/out" 2>&1
  grep -q "held by nrm-run/run-$a-.*CPUs 0" "$TMP/out" && ok || fail "dry run does not show the held CPU: $(cat "$TMP/out")"
  wait $a
  [ -e "$TMP/ran" ] && fail "the command ran although its CPU was held" || ok
  # Two runs at once never share a CPU.
  $RUN --cpus 1 -- sh -c 'echo $NRM_CPUS; sleep 2' >"$TMP/a" 2>/dev/null &
  a=$!
  for _ in $(seq 100); do [ -s "$TMP/a" ] && break; sleep 0.1; done
  $RUN --cpus 1 -- sh -c 'echo $NRM_CPUS' >"$TMP/b" 2>/dev/null || fail "second concurrent run failed"
  wait $a
  [ -s "$TMP/a" ] && [ "$(cat "$TMP/a")" != "$(cat "$TMP/b")" ] && ok \
    || fail "two concurrent runs got CPU $(cat "$TMP/a") and $(cat "$TMP/b")"

  # kill -9 of the child: nrm run releases; kill -9 of nrm run itself: the
  # next run releases the stale claim.
  $RUN --cpus "$ncpu" -- sleep 30 2>/dev/null &
  r=$!
  child_of $r sleep >/dev/null
  pkill -9 -P $r sleep
  wait $r
  $RUN --cpus "$ncpu" -- true 2>/dev/null && ok || fail "CPUs not released after the command was killed"
  $RUN --cpus "$ncpu" -- sleep 30 2>/dev/null &
  r=$!
  child=$(child_of $r sleep)
  kill -9 $r
  wait $r 2>/dev/null
  # Gone, or a zombie waiting for its new parent to reap it.
  [ -n "$child" ] && ended "$child" && ok \
    || fail "the command outlived its killed nrm run ($(ps -o stat= -p "${child:-0}" 2>/dev/null))"
  $RUN --cpus "$ncpu" -- true 2>"$TMP/err" && ok || fail "stale claim of a killed nrm run kept: $(cat "$TMP/err")"
  grep -q "its nrm process is gone" "$TMP/err" && ok || fail "the stale claim was not reported"
  # A run killed with -9 (its command is ended too): its claim stays behind.
  killed_run () {
    $RUN "$@" -- sleep 30 2>/dev/null &
    r=$!
    child=$(child_of $r sleep)
    kill -9 $r
    wait $r 2>/dev/null
    [ -n "$child" ] && kill $child
  }
  # The memory of a killed run is released too, by any later run.
  killed_run --cpus 1 --memory 16Mi
  $RUN --cpus 1 -- true 2>/dev/null || fail "run after a killed run with memory"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^claims: 0" "$TMP/out" && ok || fail "a killed run's memory is still held: $(cat "$TMP/out")"
  # A run is known by its record in the state directory: one written in
  # another PID namespace (a host run seen from a DaemonSet without
  # hostPID) names a pid that cannot be looked up here, and is left alone.
  killed_run --cpus 1
  rec=$(ls "$S"/runs/*.json 2>/dev/null)
  [ -n "$rec" ] && ok || fail "a run left no record in $S/runs"
  cp "$rec" "$TMP/rec"
  sed 's/"pidNamespace":"[^"]*"/"pidNamespace":"1:1"/' "$TMP/rec" >"$rec"
  $RUN --cpus 1 -- true 2>"$TMP/err" || fail "run beside a foreign record: $(cat "$TMP/err")"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^claims: 1" "$TMP/out" && ok || fail "a run of another PID namespace was released: $(cat "$TMP/out")"
  cp "$TMP/rec" "$rec"
  $RUN --cpus 1 -- true 2>/dev/null || fail "run after restoring the record"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^claims: 0" "$TMP/out" && ok || fail "a killed run of this PID namespace is still held: $(cat "$TMP/out")"
  [ -e "$rec" ] && fail "the record of a released run stayed" || ok
  # nrm plugin releases a killed run's claim too, without waiting for a run.
  killed_run --cpus 1
  mkdir -p "$TMP/claims"
  "$NRM" plugin --state-dir "$S" --claims-dir "$TMP/claims" --kubelet-dir "$TMP/kubelet" --cdi-dir "$TMP/cdi" --allow-no-cpuset \
    --reconcile-interval 0 2>"$TMP/plog" &
  p=$!
  for _ in $(seq 50); do grep -q "its nrm process is gone" "$TMP/plog" && break; sleep 0.1; done
  kill $p
  wait $p
  grep -q "its nrm process is gone" "$TMP/plog" && ok || fail "nrm plugin kept a killed run's claim: $(cat "$TMP/plog")"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^claims: 0" "$TMP/out" && ok || fail "a killed run's claim is still held after nrm plugin: $(cat "$TMP/out")"
fi
finish
