#!/bin/bash
# Runs inside the test VM (tests/vm/partition.vm, through vmtest.sh, starts it): an exclusive
# container made a cpuset partition through the CDI hook in real cgroup v2,
# read back from the kernel. Linux 6.7+ (cpuset.cpus.exclusive): the
# partition is made, and a process outside kubepods cannot set its affinity
# onto the claim's CPUs. Older kernels: the hook refuses when the claim asks
# for a partition, and otherwise runs the container without one and says why.
#   partition-guest.sh BUILDDIR
set -u
B=$1
NRM=$B/nrm/nrm HOOK=$B/nrm/nrm-hook CLIENT=$B/tests/plugin/dra-client
CG=/sys/fs/cgroup
W=$(mktemp -d /tmp/nrm-vm.XXXXXX)
. "$(dirname "$0")/guest-lib.sh"
rd () { cat "$CG/$1/$2" 2>/dev/null || echo "(no $2)"; }

kernel=$(uname -r)
major=${kernel%%.*} rest=${kernel#*.} minor=${rest%%.*}
remote=no
[ "$major" -gt 6 ] || { [ "$major" -eq 6 ] && [ "$minor" -ge 7 ]; } && remote=yes
echo "kernel $kernel: remote partitions expected: $remote"
echo "root: cpuset.cpus.effective $(rd . cpuset.cpus.effective); cpuset.cpus.isolated $(rd . cpuset.cpus.isolated)"

# The kubelet's systemd layout: a burstable pod with the claim's container
# and a sidecar, a besteffort pod, and a cgroup outside kubepods (a system
# service, another container engine's container).
KP=kubepods.slice QOS=$KP/kubepods-burstable.slice POD=$QOS/kubepods-burstable-pod11.slice
BE=$KP/kubepods-besteffort.slice POD2=$BE/kubepods-besteffort-pod22.slice
for d in $KP $QOS $POD $BE $POD2; do
  mkdir -p "$CG/$d"
  echo "+cpuset +cpu +memory" >"$CG/$d/cgroup.subtree_control"
done
C1=$POD/cri-containerd-c1.scope SIDE=$POD/cri-containerd-side.scope C2=$POD2/cri-containerd-c2.scope
C3=$POD2/cri-containerd-c3.scope OTHER=other.slice
mkdir -p "$CG/$C1" "$CG/$SIDE" "$CG/$C2" "$CG/$C3" "$CG/$OTHER"
start_in () { sleep 600 >/dev/null 2>&1 & echo $! >"$CG/$1/cgroup.procs"; echo $!; }
side_pid=$(start_in $SIDE) other_pid=$(start_in $OTHER)

# The claim's CPUs: the last two of the last node.
last=$(ls -d /sys/devices/system/node/node* | sed 's/.*node//' | sort -n | tail -n 1)
expand () { tr ',' '\n' <"$1" | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'; }
cpus=$(expand "/sys/devices/system/node/node$last/cpulist" | tail -n 2 | paste -sd, -)
cpus2=$(expand "/sys/devices/system/node/node$last/cpulist" | tail -n 4 | head -n 2 | paste -sd, -)
echo "claim CPUs $cpus (node $last), second claim $cpus2"

# The hook as a runtime runs it: the process already in its cgroup.
hook () { # CONTAINER-ID CGROUP ENV-JSON -> exit status; stderr in $W/<id>.err
  local pid
  pid=$(start_in "$2")
  mkdir -p "$W/$1"
  echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[$3]}}" >"$W/$1/config.json"
  echo "{\"ociVersion\":\"1.0.2\",\"id\":\"$1\",\"status\":\"creating\",\"pid\":$pid,\"bundle\":\"$W/$1\"}" \
    | "$HOOK" --fsroot / --state-dir "$W/state" 2>"$W/$1.err"
}
envs () { echo "\"NRM_CPUS=$1\",\"NRM_CPU_NODES=$last\",\"NRM_PARTITION=$2\"${3:+,\"NRM_PARTITION_REQUIRED=true\"}"; }

mkdir -p "$W/state"
"$NRM" status --state-dir "$W/state" >"$W/status" 2>&1
echo "nrm status: $(grep '^CPU partitions' "$W/status")"

if [ $remote = yes ]; then
  check "the hook makes c1 an isolated partition (asked for by the claim)" hook c1 $C1 "$(envs "$cpus" isolated 1)"
  [ -s "$W/c1.err" ] && echo "  hook: $(cat "$W/c1.err")"
  echo "c1: partition '$(rd $C1 cpuset.cpus.partition)', effective $(rd $C1 cpuset.cpus.effective), exclusive $(rd $C1 cpuset.cpus.exclusive.effective)"
  for d in . $KP $QOS $POD $SIDE $C2 $OTHER; do
    echo "  $d: partition '$(rd $d cpuset.cpus.partition)', effective $(rd $d cpuset.cpus.effective), exclusive '$(rd $d cpuset.cpus.exclusive)'"
  done
  check "c1 reads back isolated" [ "$(rd $C1 cpuset.cpus.partition)" = isolated ]
  check "c1's effective CPUs are the claim's ($cpus)" "$CLIENT" cpus-equal "$(rd $C1 cpuset.cpus.effective)" "$cpus"
  for d in . $SIDE $OTHER $C2; do
    check "$d no longer has $cpus in cpuset.cpus.effective" "$CLIENT" cpus-disjoint "$(rd $d cpuset.cpus.effective)" "$cpus"
  done
  [ -f "$CG/cpuset.cpus.isolated" ] && check "the root lists $cpus as isolated" \
    "$CLIENT" cpus-equal "$(rd . cpuset.cpus.isolated)" "$cpus"
  check "the record says partition isolated" grep -q '"partition":"isolated"' "$W/state/containers/c1.json"
  # Affinity from outside kubepods: refused, or not onto the claim's CPUs.
  one=${cpus%%,*}
  if taskset -pc "$one" "$other_pid" >"$W/ts" 2>&1; then
    bad "taskset -pc $one of a process in $OTHER succeeded: $(cat "$W/ts")"
  else
    ok "taskset -pc $one of a process in $OTHER is refused: $(tail -n 1 "$W/ts")"
  fi
  check "that process's Cpus_allowed_list ($(status_list "$other_pid" Cpus_allowed_list)) has none of $cpus" \
    "$CLIENT" cpus-disjoint "$(status_list "$other_pid" Cpus_allowed_list)" "$cpus"
  sh -c "echo \$\$ >$CG/$OTHER/cgroup.procs; exec taskset -c $one cat /proc/self/status" >"$W/self" 2>&1
  check "a new process in $OTHER cannot run on CPU $one itself: $(grep -m1 -i 'invalid\|failed\|Cpus_allowed_list' "$W/self")" \
    sh -c "! grep -q '^Cpus_allowed_list:[[:space:]]*$one\$' '$W/self'"
  # A second claim on one of the same CPUs in another pod: the kernel
  # refuses, and what the hook wrote is put back.
  be_before=$(rd $BE cpuset.cpus.exclusive) kp_before=$(rd $KP cpuset.cpus.exclusive)
  if hook c2 $C2 "$(envs "${cpus##*,}" root 1)"; then
    bad "an overlapping partition was made: c2 reads '$(rd $C2 cpuset.cpus.partition)'"
  else
    ok "an overlapping partition is refused: $(cat "$W/c2.err")"
  fi
  check "besteffort's cpuset.cpus.exclusive is back ('$be_before': '$(rd $BE cpuset.cpus.exclusive)')" \
    [ "$(rd $BE cpuset.cpus.exclusive)" = "$be_before" ]
  check "kubepods' cpuset.cpus.exclusive is back ('$kp_before')" [ "$(rd $KP cpuset.cpus.exclusive)" = "$kp_before" ]
  check "c1 is still isolated" [ "$(rd $C1 cpuset.cpus.partition)" = isolated ]
  # Another claim on other CPUs, by the node's setting: a root partition.
  check "the hook makes c3 a root partition of $cpus2" hook c3 $C3 "$(envs "$cpus2" root)"
  echo "c3: partition '$(rd $C3 cpuset.cpus.partition)', effective $(rd $C3 cpuset.cpus.effective); kubepods exclusive '$(rd $KP cpuset.cpus.exclusive)'"
  check "c3 reads back root" [ "$(rd $C3 cpuset.cpus.partition)" = root ]
  check "$OTHER is off both claims" "$CLIENT" cpus-disjoint "$(rd $OTHER cpuset.cpus.effective)" "$cpus,$cpus2"
  check "nrm status: the kernel has remote partitions" grep -q '^CPU partitions: off; the kernel has remote partitions' "$W/status"
else
  if hook c1 $C1 "$(envs "$cpus" isolated 1)"; then
    bad "a partition asked for by the claim was not refused on $kernel"
  else
    ok "asked for by the claim, refused: $(cat "$W/c1.err")"
  fi
  check "... with the reason" grep -q "only local partitions" "$W/c1.err"
  check "... and no record" [ ! -e "$W/state/containers/c1.json" ]
  check "the hook runs c1 without a partition by the node's setting" hook c1b $C1 "$(envs "$cpus" root)"
  echo "  hook: $(cat "$W/c1b.err")"
  check "... saying why on stderr" grep -q "partition: unavailable (this kernel has only local partitions" "$W/c1b.err"
  check "... and in the record" grep -q '"partition":"unavailable (this kernel has only local' "$W/state/containers/c1b.json"
  check "c1 reads back member" [ "$(rd $C1 cpuset.cpus.partition)" = member ]
  check "c1's CPUs are the claim's" "$CLIENT" cpus-equal "$(rd $C1 cpuset.cpus.effective)" "$cpus"
  # What the kernel does with a local partition under kubepods, for the record.
  echo root >"$CG/$C1/cpuset.cpus.partition" 2>"$W/local"
  echo "  a local partition written by hand: '$(rd $C1 cpuset.cpus.partition)' $(cat "$W/local")"
  check "the kernel refuses a local partition under kubepods" sh -c "[ \"\$(cat $CG/$C1/cpuset.cpus.partition)\" != root ]"
  echo member >"$CG/$C1/cpuset.cpus.partition" 2>/dev/null
  # Without a partition, only cpuset.cpus keeps others off: a process
  # outside kubepods (no reconciler there yet) can still move onto them.
  one=${cpus%%,*}
  taskset -pc "$one" "$other_pid" >"$W/ts" 2>&1
  echo "NOTE: without a partition, taskset -pc $one of a process in $OTHER: rc $? $(tail -n 1 "$W/ts")"
  check "nrm status says partitions are unavailable" grep -q '^CPU partitions: off; unavailable (this kernel has only local partitions' "$W/status"
fi
# nrm run --partition: the run's transient cgroup (nrm.slice/run-<pid>) is
# the partition; on 6.1 a run that asks for one is refused before its
# command starts, and one under the node's cpu.partition runs without.
rc=$(expand /sys/devices/system/node/node0/cpulist | sed -n 2p)
mkdir -p "$W/runstate"
inside='cg=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "$(cat /sys/fs/cgroup$cg/cpuset.cpus.partition) $(cat /sys/fs/cgroup$cg/cpuset.cpus.effective) $(cat /sys/fs/cgroup/'$OTHER'/cpuset.cpus.effective)"'
"$NRM" run -C "$rc" --partition root --dry-run --state-dir "$W/runstate" >"$W/dry" 2>&1
echo "  dry run: $(grep 'cpuset partition' "$W/dry")"
echo '{"cpu": {"partition": "root"}}' >"$W/node.json"
if [ $remote = yes ]; then
  check "a dry run says this kernel can make the partition" grep -q 'cpuset partition: root (--partition): this kernel can make one' "$W/dry"
  "$NRM" run -C "$rc" --partition isolated --state-dir "$W/runstate" -- sh -c "$inside" >"$W/run.out" 2>"$W/run.err"
  rcode=$?
  check "nrm run --partition isolated runs its command ($(tail -n 1 "$W/run.err"))" [ $rcode -eq 0 ]
  read -r rpart reff roth <"$W/run.out"
  check "inside, its cgroup reads back isolated ($rpart) with CPU $rc ($reff)" \
    sh -c "[ '$rpart' = isolated ] && '$CLIENT' cpus-equal '$reff' '$rc'"
  check "meanwhile $OTHER is off CPU $rc ($roth)" "$CLIENT" cpus-disjoint "$roth" "$rc"
  check "afterwards the run's cgroup is gone and nrm.slice holds no exclusive CPU ('$(rd nrm.slice cpuset.cpus.exclusive)')" \
    sh -c "! ls -d $CG/nrm.slice/run-* >/dev/null 2>&1 && [ -z \"\$(cat $CG/nrm.slice/cpuset.cpus.exclusive)\" ]"
  check "and $OTHER has CPU $rc again" "$CLIENT" cpus-within "$rc" "$(rd $OTHER cpuset.cpus.effective)"
  # nrm run killed with -9 while its command runs: the next run releases
  # its claim and ends its partition, so that the CPU can be had again.
  "$NRM" run -C "$rc" --partition root --state-dir "$W/runstate" -- sleep 600 >/dev/null 2>&1 &
  killed=$!
  for _ in $(seq 100); do [ "$(cat $CG/nrm.slice/run-$killed/cpuset.cpus.partition 2>/dev/null)" = root ] && break; sleep 0.1; done
  check "a run to be killed holds a root partition" [ "$(rd nrm.slice/run-$killed cpuset.cpus.partition)" = root ]
  kill -9 $killed
  wait $killed 2>/dev/null
  "$NRM" run -C "$rc" --partition root --state-dir "$W/runstate" -- sh -c "$inside" >"$W/run2.out" 2>"$W/run2.err"
  check "after kill -9, a new run on the same CPU gets its own partition ($(cat "$W/run2.out"; tail -n 1 "$W/run2.err"))" \
    sh -c "read -r p e o <'$W/run2.out' && [ \"\$p\" = root ]"
  check "the killed run's cgroup is no partition any more ('$(rd nrm.slice/run-$killed cpuset.cpus.partition)')" \
    sh -c "[ ! -d $CG/nrm.slice/run-$killed ] || [ \"\$(cat $CG/nrm.slice/run-$killed/cpuset.cpus.partition)\" = member ]"
  pkill -9 -f 'sleep 600' 2>/dev/null
else
  check "a dry run says the partition is unavailable here" grep -q 'cpuset partition: root (--partition): unavailable here; this kernel has only local partitions' "$W/dry"
  "$NRM" run -C "$rc" --partition root --state-dir "$W/runstate" -- touch "$W/ran" 2>"$W/run.err"
  rcode=$?
  check "nrm run --partition root is refused with 125 before its command ($rcode: $(tail -n 1 "$W/run.err"))" \
    sh -c "[ $rcode -eq 125 ] && [ ! -e '$W/ran' ] && grep -q 'only local partitions' '$W/run.err'"
  "$NRM" run -c "$W/node.json" -C "$rc" --state-dir "$W/runstate" -- sh -c "$inside" >"$W/run.out" 2>"$W/run.err"
  rcode=$?
  check "under the node's cpu.partition a run goes on without one ($(cat "$W/run.out"))" \
    sh -c "[ $rcode -eq 0 ] && read -r p e o <'$W/run.out' && [ \"\$p\" = member ] && grep -q 'no cpuset partition (cpu.partition root)' '$W/run.err'"
fi

# The jitter benchmark's method on cgroup v2 (docs/jitter.md): nrm run makes
# its cgroup, the bench its own partition, and nrm run --partition its own
# where the kernel can; under TCG the figures themselves say nothing.
J=$B/tests/bench/bench-jitter
if [ -x "$J" ]; then
  "$J" --nrm "$NRM" --rounds 1 --seconds 0.3 --neighbours 1 --state-dir "$W/jstate" >"$W/jitter.out" 2>&1
  jrc=$?
  sed 's/^/  jitter: /' "$W/jitter.out"
  row () { grep "^($1)" "$W/jitter.out"; }
  check "bench-jitter runs (status $jrc)" [ $jrc -eq 0 ]
  check "row (c), nrm run in its cgroup v2, is measured" sh -c "! grep '^(c)' '$W/jitter.out' | grep -q skipped"
  check "row (d), the bench's own isolated partition, is measured" sh -c "! grep '^(d)' '$W/jitter.out' | grep -q skipped"
  if [ $remote = yes ]; then
    check "row (e), nrm run --partition isolated, is measured" sh -c "! grep '^(e)' '$W/jitter.out' | grep -q skipped"
  else
    check "row (e) is skipped with the kernel's reason" sh -c "grep '^(e)' '$W/jitter.out' | grep -q 'only local partitions'"
  fi
else
  bad "tests/bench/bench-jitter is not built (make check builds it)"
fi

finish
