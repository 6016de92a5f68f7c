#!/bin/bash
# Runs inside the test VM (tests/vm/memory.vm, through vmtest.sh, starts it): the memory half in
# a real kernel. A container bound by a memory claim allocates only on the
# claim's node (its /proc/PID/numa_maps), with memory.min and memory.max;
# nrm run's interleave and preferred policies as numa_maps shows them; the
# shared pool's cpuset.mems while a claim holds a node in full; amounts the
# machine cannot have refused by the hook. Every value read back from the
# kernel.
#   memory-guest.sh BUILDDIR
set -u
B=$1
NRM=$B/nrm/nrm HOOK=$B/nrm/nrm-hook CLIENT=$B/tests/plugin/dra-client
CG=/sys/fs/cgroup
W=$(mktemp -d /tmp/nrm-vm.XXXXXX)
. "$(dirname "$0")/guest-lib.sh"

# A program that maps 64 MiB of anonymous memory, touches every page, says
# so in $1 (its pid) and waits.
cat >"$W/alloc.py" <<'PY'
import mmap, os, sys, time
# Private: the pages are anonymous ones (anon= in numa_maps), not shmem.
m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, 64 << 20, 4096):
    m[i] = 1
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
PY
# Pages of the 64 MiB mapping per node, and its policy: "N0 N1 policy".
# The mapping is the anonymous one of 16384 pages or more.
numa_of () {
  awk '/anon=/ { n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^anon=/) { split($i, a, "="); n = a[2] }
                 if (n >= 16000) { n0 = 0; n1 = 0
                   for (i = 1; i <= NF; i++) { if ($i ~ /^N0=/) { split($i, a, "="); n0 = a[2] }
                                               if ($i ~ /^N1=/) { split($i, a, "="); n1 = a[2] } }
                   print n0, n1, $2; exit } }' "/proc/$1/numa_maps"
}
wait_file () { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

# A kubepods tree as the kubelet's cgroupfs driver makes it.
for d in kubepods kubepods/besteffort kubepods/besteffort/podshared kubepods/podmem; do
  mkdir -p "$CG/$d"
  echo "+cpuset +cpu +memory" >"$CG/$d/cgroup.subtree_control"
done
mkdir -p "$CG/kubepods/besteffort/podshared/shared1" "$CG/kubepods/podmem/mem1"
sleep 600 &
shared_pid=$!
echo "$shared_pid" >"$CG/kubepods/besteffort/podshared/shared1/cgroup.procs"

# The plugin on the VM, and a claim of 64 MiB on node 1 that is also the
# container's limit and guarantee.
mkdir -p "$W/claims" "$W/state"
uid=00000000-0000-4000-8000-0000000000bb
cat >"$W/claims/default_mem.json" <<JSON
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"mem","uid":"$uid"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"mem","driver":"memory.nrm.io","pool":"vm","device":"numa1","consumedCapacity":{"memory":"80Mi"}}],
  "config":[{"source":"FromClaim","requests":["mem"],"opaque":{"driver":"memory.nrm.io","parameters":
   {"apiVersion":"memory.nrm.io/v1alpha1","kind":"MemoryConfig","limit":true,"guarantee":true,"policy":"bind"}}}]}}}}
JSON
"$NRM" plugin --node-name vm --kubelet-dir "$W/k" --cdi-dir "$W/cdi" --state-dir "$W/state" --claims-dir "$W/claims" \
  --reconcile-interval 1 --hook-path "$HOOK" 2>"$W/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$W/k/plugins_registry/memory.nrm.io-reg.sock" ] && break; sleep 0.1; done
MSOCK=$W/k/plugins/memory.nrm.io/dra.sock
check "prepare the memory claim" "$CLIENT" prepare "$MSOCK" default mem $uid

# The container: its first process waits in the cgroup until the hook has
# run, then execs the allocator.
mkfifo "$W/go"
sh -c "read x <'$W/go'; exec python3 '$W/alloc.py' '$W/mem1.pid'" &
c_pid=$!
echo "$c_pid" >"$CG/kubepods/podmem/mem1/cgroup.procs"
mkdir -p "$W/bundle"
env_json=$(grep -ho '"NRM_[A-Z_0-9]*=[^"]*"' "$W"/cdi/*"$uid".json | paste -sd, -)
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[$env_json]}}" >"$W/bundle/config.json"
echo "{\"ociVersion\":\"1.0.2\",\"id\":\"mem1\",\"status\":\"creating\",\"pid\":$c_pid,\"bundle\":\"$W/bundle\"}" \
  | "$HOOK" --fsroot / --state-dir "$W/state"
check "the CDI hook ran" [ $? -eq 0 ]
echo go >"$W/go"
wait_file "$W/mem1.pid"
apid=$(cat "$W/mem1.pid")
read -r n0 n1 pol <<<"$(numa_of "$apid")"
check "the container's 64 MiB are on node 1 (N0=$n0 N1=$n1, $pol)" sh -c "[ '${n1:-0}' -ge 16000 ] && [ '${n0:-1}' -eq 0 ]"
check "container cpuset.mems is 1" [ "$(cat "$CG/kubepods/podmem/mem1/cpuset.mems")" = 1 ]
check "memory.max is the claim (83886080): $(cat "$CG/kubepods/podmem/mem1/memory.max")" \
  [ "$(cat "$CG/kubepods/podmem/mem1/memory.max")" = 83886080 ]
check "memory.min is the claim (83886080): $(cat "$CG/kubepods/podmem/mem1/memory.min")" \
  [ "$(cat "$CG/kubepods/podmem/mem1/memory.min")" = 83886080 ]
check "the container reads NRM_MEMORY_POLICY=bind" grep -q '"NRM_MEMORY_POLICY=bind"' "$W/bundle/config.json"
kill "$apid" 2>/dev/null

# A claim of all of node 0's memory: the shared container leaves node 0;
# unprepared, it has both nodes again.
cap0=$("$NRM" slices --node-name vm | python3 -c '
import json, sys
for s in json.load(sys.stdin)["items"]:
    for d in s["spec"].get("devices", []):
        if d["name"] == "numa0" and "memory" in d.get("capacity", {}):
            print(d["capacity"]["memory"]["value"])')
uid2=00000000-0000-4000-8000-0000000000bc
cat >"$W/claims/default_full.json" <<JSON
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"full","uid":"$uid2"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"mem","driver":"memory.nrm.io","pool":"vm","device":"numa0","consumedCapacity":{"memory":"$cap0"}}]}}}}
JSON
check "prepare a claim of node 0's whole $cap0" "$CLIENT" prepare "$MSOCK" default full $uid2
smems=$CG/kubepods/besteffort/podshared/shared1/cpuset.mems
for _ in $(seq 50); do [ "$(cat "$smems")" = 1 ] && break; sleep 0.1; done
check "the shared container's cpuset.mems leaves node 0: $(cat "$smems")" [ "$(cat "$smems")" = 1 ]
check "and the kernel says so: Mems_allowed_list $(status_list $shared_pid Mems_allowed_list)" \
  [ "$(status_list $shared_pid Mems_allowed_list)" = 1 ]
check "the memory claim's container keeps node 1" [ "$(cat "$CG/kubepods/podmem/mem1/cpuset.mems")" = 1 ]
"$NRM" status --state-dir "$W/state" --node-name vm >"$W/status" 2>&1
check "nrm status: $(grep '^Memory nodes' "$W/status")" grep -q '^Memory nodes: shared 1; claimed in full 0$' "$W/status"
check "unprepare the full claim" "$CLIENT" unprepare "$MSOCK" $uid2
for _ in $(seq 50); do [ "$(cat "$smems")" = 0-1 ] && break; sleep 0.1; done
check "the shared container has both nodes again: $(cat "$smems")" [ "$(cat "$smems")" = 0-1 ]

# Amounts the machine cannot have: refused, nothing written.
echo '{"ociVersion":"1.0.2","process":{"env":["NRM_MEMS=1","NRM_MEMORY_MAX=1"]}}' >"$W/bundle/config.json"
sleep 600 &
b_pid=$!
mkdir -p "$CG/kubepods/podmem/mem2"
echo "$b_pid" >"$CG/kubepods/podmem/mem2/cgroup.procs"
echo "{\"ociVersion\":\"1.0.2\",\"id\":\"mem2\",\"status\":\"creating\",\"pid\":$b_pid,\"bundle\":\"$W/bundle\"}" \
  | "$HOOK" --fsroot / --state-dir "$W/state" 2>"$W/hook.err"
hook_rc=$?
check "memory.max of 1 byte is refused: $(cat "$W/hook.err")" \
  sh -c "[ $hook_rc -ne 0 ] && grep -q 'below the least' '$W/hook.err' && [ \"\$(cat $CG/kubepods/podmem/mem2/memory.max)\" = max ] \
    && [ -z \"\$(cat $CG/kubepods/podmem/mem2/cpuset.mems)\" ]"
kill $b_pid
kill -TERM $plugin
wait $plugin

# nrm run's own policies, as the kernel records them per mapping.
# run_policy NAME CHECK RUN-OPTIONS...: CHECK is evaluated with n0, n1 and pol
# set from the run's 64 MiB mapping.
run_policy () {
  local name=$1 cond=$2
  shift 2
  rm -f "$W/$name.pid"
  "$NRM" run --cpus 1 --min-shared-cpus 0 --state-dir "$W/state" "$@" -- python3 "$W/alloc.py" "$W/$name.pid" \
    2>"$W/run-$name.err" &
  local runner=$!
  if wait_file "$W/$name.pid"; then
    read -r n0 n1 pol <<<"$(numa_of "$(cat "$W/$name.pid")")"
    check "$* : policy $pol, N0=$n0 N1=$n1" sh -c "n0=${n0:-0} n1=${n1:-0} pol='$pol'; $cond"
    kill "$(cat "$W/$name.pid")"
  else
    bad "nrm run $* did not start: $(cat "$W/run-$name.err")"
  fi
  wait $runner 2>/dev/null
}
run_policy i '[ "$pol" = interleave:0-1 ] && [ $n0 -ge 6000 ] && [ $n1 -ge 6000 ]' --interleave 0-1
run_policy p '[ "$pol" = prefer:1 ] && [ $n1 -ge 16000 ]' -N 0 --preferred 1
run_policy b '[ "$pol" = bind:1 ] && [ $n1 -ge 16000 ] && [ $n0 -eq 0 ]' -N 0 --membind 1
run_policy l '[ "$pol" = local ] && [ $n1 -ge 16000 ] && [ $n0 -eq 0 ]' -N 1 --localalloc
# Memory by kind and tier: both nodes are DRAM (tier 0), so the nearest is
# the CPUs' own node.
run_policy k '[ $n1 -ge 16000 ] && [ $n0 -eq 0 ]' -N 1 --memory 128Mi --memory-kind DRAM
run_policy t '[ $n0 -ge 16000 ] && [ $n1 -eq 0 ]' -N 0 --memory 128Mi --memory-tier 0

kill $shared_pid 2>/dev/null
if [ "$fail" -ne 0 ]; then
  echo "--- plugin log"
  cat "$W/plugin.log"
fi
finish
