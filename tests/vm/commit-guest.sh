#!/bin/bash
# Runs inside the test VM (tests/vm/commit.vm, through vmtest.sh, starts it): a kubepods tree in
# real cgroup v2, `nrm plugin` on the VM's real NUMA topology, a claim
# prepared through its socket, a "container" started through the CDI hook as
# a runtime would, and every assertion read back from the kernel.
#   commit-guest.sh BUILDDIR NODES
set -u
B=$1 NODES=$2
NRM=$B/nrm/nrm HOOK=$B/nrm/nrm-hook CLIENT=$B/tests/plugin/dra-client
CG=/sys/fs/cgroup
W=$(mktemp -d /tmp/nrm-vm.XXXXXX)
. "$(dirname "$0")/guest-lib.sh"

# The machine as the kernel shows it, and as nrm models it.
online=$(cat /sys/devices/system/cpu/online)
"$NRM" topology --json >"$W/topo.json" 2>"$W/err" || bad "nrm topology: $(cat "$W/err")"
check "nrm sees $NODES NUMA nodes" [ "$(grep -c '"memoryKind"' "$W/topo.json")" -eq "$NODES" ]

# A kubepods tree as the kubelet's cgroupfs driver makes it.
for d in kubepods kubepods/besteffort kubepods/besteffort/podshared kubepods/podexcl; do
  mkdir -p "$CG/$d"
  echo "+cpuset +cpu +memory" >"$CG/$d/cgroup.subtree_control"
done
mkdir -p "$CG/kubepods/besteffort/podshared/shared1" "$CG/kubepods/podexcl/excl1"
sleep 600 &
shared_pid=$!
echo "$shared_pid" >"$CG/kubepods/besteffort/podshared/shared1/cgroup.procs"

# The plugin on the VM itself.
last=$((NODES - 1))
mkdir -p "$W/claims" "$W/state"
cat >"$W/claims/default_excl.json" <<EOF
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"excl","uid":"00000000-0000-4000-8000-0000000000aa"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"cpus","driver":"cpu.nrm.io","pool":"vm","device":"numa$last","consumedCapacity":{"cpus":"2"}},
  {"request":"mem","driver":"memory.nrm.io","pool":"vm","device":"numa$last","consumedCapacity":{"memory":"16Mi"}}]}}}}
EOF
"$NRM" plugin --node-name vm --kubelet-dir "$W/k" --cdi-dir "$W/cdi" --state-dir "$W/state" --claims-dir "$W/claims" \
  --reconcile-interval 1 --hook-path "$HOOK" --device-metadata --shared-pool-cgroups system.slice,machine.slice \
  2>"$W/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$W/k/plugins_registry/memory.nrm.io-reg.sock" ] && break; sleep 0.1; done
uid=00000000-0000-4000-8000-0000000000aa
check "prepare through the CPU driver's socket" "$CLIENT" prepare "$W/k/plugins/cpu.nrm.io/dra.sock" default excl $uid
check "prepare through the memory driver's socket" "$CLIENT" prepare "$W/k/plugins/memory.nrm.io/dra.sock" default excl $uid

# What the CDI specs carry.
spec_env () { grep -o "\"$1=[^\"]*\"" "$W"/cdi/*"$uid".json | head -n 1 | sed 's/.*=//; s/"$//'; }
cpus=$(spec_env NRM_CPUS) mems=$(spec_env NRM_MEMS)
nodecpus=$(cat "/sys/devices/system/node/node$last/cpulist")
check "claim CPUs $cpus are on node $last ($nodecpus)" "$CLIENT" cpus-within "$cpus" "$nodecpus"
check "claim memory node is $last" [ "$mems" = "$last" ]

# The shared container leaves the claim's CPUs before the claim's own starts.
for _ in $(seq 50); do
  "$CLIENT" cpus-disjoint "$(cat "$CG/kubepods/besteffort/podshared/shared1/cpuset.cpus.effective")" "$cpus" && break
  sleep 0.1
done
check "shared container is off the claim's CPUs" \
  "$CLIENT" cpus-disjoint "$(status_list $shared_pid Cpus_allowed_list)" "$cpus"

# A runtime creating the claim's container: the process sits in its cgroup,
# the bundle carries the CDI environment, the createRuntime hook runs.
sleep 600 &
excl_pid=$!
echo "$excl_pid" >"$CG/kubepods/podexcl/excl1/cgroup.procs"
mkdir -p "$W/bundle"
env_json=$(grep -ho '"NRM_[A-Z_0-9]*=[^"]*"' "$W"/cdi/*"$uid".json | paste -sd, -)
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[$env_json]}}" >"$W/bundle/config.json"
hook_path=$(grep -ho '"path": "[^"]*"' "$W"/cdi/cpu.nrm.io-$uid.json | head -n 1 | sed 's/.*: "//; s/"$//')
echo "{\"ociVersion\":\"1.0.2\",\"id\":\"excl1\",\"status\":\"creating\",\"pid\":$excl_pid,\"bundle\":\"$W/bundle\"}" \
  | "$hook_path" --fsroot / --state-dir "$W/state"
check "the CDI hook ran" [ $? -eq 0 ]
check "container CPUs are the claim's ($cpus)" "$CLIENT" cpus-equal "$(status_list $excl_pid Cpus_allowed_list)" "$cpus"
check "container memory nodes are the claim's ($mems)" [ "$(status_list $excl_pid Mems_allowed_list)" = "$mems" ]

# The claim's device metadata (KEP-5304) inside a real container: runc runs
# a bundle with the mount the metadata CDI spec asks for, applied as a CDI
# runtime applies it (an OCI bind mount with the spec's options), and the
# container reads its own CPUs there.
meta_spec="$W/cdi/cpu.nrm.io_metadata_${uid}_cpus.json"
if ! command -v runc >/dev/null 2>&1; then
  bad "runc is missing (apt-get install runc): the metadata cannot be read in a container"
elif [ ! -f "$meta_spec" ]; then
  bad "no metadata CDI spec $meta_spec"
else
  mhost=$(sed -n 's/.*"hostPath": "\([^"]*\)".*/\1/p' "$meta_spec")
  mcont=$(sed -n 's/.*"containerPath": "\([^"]*\)".*/\1/p' "$meta_spec")
  mopts=$(tr -d ' \n' <"$meta_spec" | sed -n 's/.*"options":\(\[[^]]*\]\).*/\1/p')
  R=$(mktemp -d /run/nrm-runc.XXXXXX)
  mkdir -p "$R/bundle/rootfs/bin" "$R/bundle/rootfs/proc" "$R/state"
  cp "$(command -v busybox)" "$R/bundle/rootfs/bin/busybox"
  cat >"$R/bundle/config.json" <<JSON
{"ociVersion":"1.0.2","process":{"terminal":false,"user":{"uid":0,"gid":0},"cwd":"/",
  "args":["/bin/busybox","cat","$mcont"],"env":["PATH=/bin"]},
 "root":{"path":"rootfs","readonly":true},
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
  {"destination":"$mcont","type":"bind","source":"$mhost","options":$mopts}],
 "linux":{"namespaces":[{"type":"mount"},{"type":"pid"}]}}
JSON
  runc --root "$R/state" run --bundle "$R/bundle" meta1 </dev/null >"$R/out" 2>"$R/err"
  check "a container reads its metadata file at $mcont: $(head -c 200 "$R/err")" [ $? -eq 0 ]
  check "the metadata is the claim's DeviceMetadata" \
    sh -c "grep -q '\"kind\": \"DeviceMetadata\"' '$R/out' && grep -q '\"uid\": \"$uid\"' '$R/out'"
  meta_cpus=$(tr -d ' \n' <"$R/out" | sed -n 's/.*"cpus":{"string":"\([^"]*\)"}.*/\1/p')
  check "the container's metadata names the claim's CPUs ($meta_cpus)" "$CLIENT" cpus-equal "$meta_cpus" "$cpus"
  check "the metadata mount is read-only: $mopts" sh -c "echo '$mopts' | grep -q '\"ro\"'"
  rm -rf "$R"
fi

# Drift written by someone else is repaired.
echo "$online" >"$CG/kubepods/podexcl/excl1/cpuset.cpus"
for _ in $(seq 50); do
  "$CLIENT" cpus-equal "$(status_list $excl_pid Cpus_allowed_list)" "$cpus" && break
  sleep 0.1
done
check "drift on the claim's container is repaired" \
  "$CLIENT" cpus-equal "$(status_list $excl_pid Cpus_allowed_list)" "$cpus"

# A binding that would leave no memory node is refused, nothing changes.
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"NRM_CPUS=$cpus\",\"NRM_MEMS=\"]}}" >"$W/bundle/config.json"
if echo "{\"id\":\"excl1\",\"pid\":$excl_pid,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state" 2>/dev/null; then
  bad "an empty memory binding was accepted"
else
  ok "an empty memory binding is refused"
fi
check "and the container is unchanged" [ "$(status_list $excl_pid Mems_allowed_list)" = "$mems" ]

# The kernel refuses a memory node that does not exist: the hook fails and
# the CPUs it had written are put back (all or nothing).
mkdir -p "$CG/kubepods/podexcl/excl2"
sleep 600 &
excl2=$!
echo "$excl2" >"$CG/kubepods/podexcl/excl2/cgroup.procs"
before=$(cat "$CG/kubepods/podexcl/excl2/cpuset.cpus")
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"NRM_CPUS=$cpus\",\"NRM_MEMS=63\"]}}" >"$W/bundle/config.json"
if echo "{\"id\":\"excl2\",\"pid\":$excl2,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state" 2>"$W/hookerr"; then
  bad "memory node 63 was accepted"
else
  ok "the kernel's refusal fails the hook: $(head -c 160 "$W/hookerr")"
fi
check "and cpuset.cpus is as it was" [ "$(cat "$CG/kubepods/podexcl/excl2/cpuset.cpus")" = "$before" ]
check "and no record is left" [ ! -e "$W/state/containers/excl2.json" ]
kill $excl2

# A new shared container (inotify) is put on the shared pool at once.
mkdir -p "$CG/kubepods/besteffort/podshared/shared2"
sleep 600 &
shared2=$!
echo "$shared2" >"$CG/kubepods/besteffort/podshared/shared2/cgroup.procs"
for _ in $(seq 50); do
  "$CLIENT" cpus-disjoint "$(status_list $shared2 Cpus_allowed_list)" "$cpus" && break
  sleep 0.1
done
check "a new shared container avoids the claim's CPUs" \
  "$CLIENT" cpus-disjoint "$(status_list $shared2 Cpus_allowed_list)" "$cpus"

# A mixed claim's container (CPUConfig sharedCPUs): its claim's CPUs and the
# shared pool, from the hook on.
mkdir -p "$CG/kubepods/podexcl/excl3"
sleep 600 &
excl3=$!
echo "$excl3" >"$CG/kubepods/podexcl/excl3/cgroup.procs"
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"NRM_CPUS=$cpus\",\"NRM_MEMS=$mems\",\"NRM_SHARED_CPUS=true\"]}}" \
  >"$W/bundle/config.json"
echo "{\"id\":\"excl3\",\"pid\":$excl3,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state"
shared_now=$(status_list $shared_pid Cpus_allowed_list)
check "a mixed claim's container runs on its CPUs and the shared pool ($cpus + $shared_now)" \
  "$CLIENT" cpus-equal "$(status_list $excl3 Cpus_allowed_list)" "$cpus,$shared_now"
kill $excl3

# The host's own cgroups (cpu.sharedPoolCgroups): a service in system.slice
# and a podman-like container in machine.slice, neither with cpuset turned
# on for it, leave the claim's CPUs; a claimed container started below the
# held machine.slice gets its CPUs without handing them to its neighbour.
for d in system.slice/svc.service machine.slice/libpod-a.scope machine.slice/libpod-b.scope; do mkdir -p "$CG/$d"; done
sleep 600 &
svc=$!
echo "$svc" >"$CG/system.slice/svc.service/cgroup.procs"
sleep 600 &
pa=$!
echo "$pa" >"$CG/machine.slice/libpod-a.scope/cgroup.procs"
for _ in $(seq 50); do
  "$CLIENT" cpus-disjoint "$(status_list $svc Cpus_allowed_list)" "$cpus" \
    && "$CLIENT" cpus-disjoint "$(status_list $pa Cpus_allowed_list)" "$cpus" && break
  sleep 0.1
done
check "a system service is off the claim's CPUs ($(status_list $svc Cpus_allowed_list))" \
  "$CLIENT" cpus-disjoint "$(status_list $svc Cpus_allowed_list)" "$cpus"
check "a container in machine.slice is off them ($(status_list $pa Cpus_allowed_list))" \
  "$CLIENT" cpus-disjoint "$(status_list $pa Cpus_allowed_list)" "$cpus"
check "system.slice holds the shared pool itself; its service inherits" \
  sh -c "[ -n \"\$(cat $CG/system.slice/cpuset.cpus)\" ] && [ ! -e $CG/system.slice/svc.service/cpuset.cpus ]"
sleep 600 &
pb=$!
echo "$pb" >"$CG/machine.slice/libpod-b.scope/cgroup.procs"
echo "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[$env_json]}}" >"$W/bundle/config.json"
echo "{\"id\":\"libpod-b\",\"pid\":$pb,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state" 2>"$W/hookerr"
hrc=$?
check "the hook binds a claimed container below the held machine.slice $(head -c 200 "$W/hookerr")" [ $hrc -eq 0 ]
check "its CPUs are the claim's" "$CLIENT" cpus-equal "$(status_list $pb Cpus_allowed_list)" "$cpus"
check "and its neighbour stays off them" "$CLIENT" cpus-disjoint "$(status_list $pa Cpus_allowed_list)" "$cpus"
for _ in $(seq 50); do [ "$(cat $CG/machine.slice/cpuset.cpus)" = "$online" ] && break; sleep 0.1; done
check "the next pass: machine.slice has all CPUs again ($(cat $CG/machine.slice/cpuset.cpus)), its other container the pool" \
  sh -c "[ \"\$(cat $CG/machine.slice/cpuset.cpus)\" = '$online' ] && '$CLIENT' cpus-disjoint \"\$(cat $CG/machine.slice/libpod-a.scope/cpuset.cpus)\" '$cpus'"
check "still: claimed $(status_list $pb Cpus_allowed_list), neighbour $(status_list $pa Cpus_allowed_list)" \
  sh -c "'$CLIENT' cpus-equal '$(status_list $pb Cpus_allowed_list)' '$cpus' && '$CLIENT' cpus-disjoint '$(status_list $pa Cpus_allowed_list)' '$cpus'"
# A process may not set its own affinity outside its cpuset.
if taskset -p -c "$cpus" $svc >/dev/null 2>&1 && ! "$CLIENT" cpus-disjoint "$(status_list $svc Cpus_allowed_list)" "$cpus"; then
  bad "a service reached the claim's CPUs through sched_setaffinity"
else
  ok "a service cannot set its affinity onto the claim's CPUs"
fi
# The claimed container goes: machine.slice holds the pool again, the
# neighbour nrm held goes back to inheriting.
kill $pb
wait $pb 2>/dev/null
rmdir "$CG/machine.slice/libpod-b.scope"
for _ in $(seq 50); do "$CLIENT" cpus-disjoint "$(cat $CG/machine.slice/cpuset.cpus)" "$cpus" && break; sleep 0.1; done
check "once it is gone, machine.slice holds the pool again ($(cat $CG/machine.slice/cpuset.cpus))" \
  "$CLIENT" cpus-disjoint "$(cat $CG/machine.slice/cpuset.cpus)" "$cpus"
check "nrm lists what it holds" grep -q '"system.slice"' "$W/state/host-cgroups.json"
kill $pa

# A huge-page claim in a pod whose own hugetlb limit the kubelet set to 0
# (it requests no hugepages-2Mi), under kubepods at an allocatable below the
# claim (pages added after the kubelet started) and an unbounded QoS level:
# the hook raises pod and kubepods, the container can take the pages, and
# the reconciler puts the originals back once the container is gone.
HP=kubepods/burstable/podhuge
echo "+hugetlb" >"$CG/kubepods/cgroup.subtree_control"
mkdir -p "$CG/kubepods/burstable" "$CG/$HP/huge1"
for d in kubepods/burstable $HP; do echo "+cpuset +cpu +memory +hugetlb" >"$CG/$d/cgroup.subtree_control"; done
hp_set () { echo "$2" >"$CG/$1/hugetlb.2MB.max" && echo "$2" >"$CG/$1/hugetlb.2MB.rsvd.max"; }
hp_get () { echo "$(cat "$CG/$1/hugetlb.2MB.max") $(cat "$CG/$1/hugetlb.2MB.rsvd.max")"; }
kp_before=$(hp_get kubepods)
hp_set kubepods 2097152
hp_set kubepods/burstable 4611686018427387904
hp_set $HP 0
in_huge1 () { sh -c "echo \$\$ >'$CG/$HP/huge1/cgroup.procs' && exec '$CLIENT' hugetlb-map $1" 2>/dev/null; }
if in_huge1 4194304; then bad "4 MiB of huge pages mapped in a pod limited to 0"; else ok "before the hook, the pod's 0 refuses 4 MiB of huge pages"; fi
sleep 600 &
huge1=$!
echo "$huge1" >"$CG/$HP/huge1/cgroup.procs"
echo '{"ociVersion":"1.0.2","process":{"env":["NRM_HUGETLB_2MB=4194304","NRM_HUGETLB_2MB_00000000_0000_4000_8000_0000000000BB=4194304"]}}' \
  >"$W/bundle/config.json"
echo "{\"id\":\"huge1\",\"pid\":$huge1,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state" 2>"$W/hookerr"
check "the hook of a huge-page claim succeeds: $(head -c 160 "$W/hookerr")" [ $? -eq 0 ]
check "the pod's hugetlb.2MB.max and .rsvd.max allow the claim: $(hp_get $HP)" [ "$(hp_get $HP)" = "4194304 4194304" ]
check "kubepods is raised by the claim: $(hp_get kubepods)" [ "$(hp_get kubepods)" = "6291456 6291456" ]
check "the QoS level is left unbounded" [ "$(hp_get kubepods/burstable)" = "4611686018427387904 4611686018427387904" ]
check "the container's limit is the claim" [ "$(hp_get $HP/huge1)" = "4194304 4194304" ]
check "a process of the container maps and touches 4 MiB of huge pages" in_huge1 4194304
if in_huge1 6291456; then bad "6 MiB mapped with a 4 MiB claim"; else ok "but not 6 MiB"; fi
# A second container of the pod with the same claim: no second raise.
mkdir -p "$CG/$HP/huge2"
sleep 600 &
huge2=$!
echo "$huge2" >"$CG/$HP/huge2/cgroup.procs"
echo "{\"id\":\"huge2\",\"pid\":$huge2,\"bundle\":\"$W/bundle\"}" | "$hook_path" --fsroot / --state-dir "$W/state"
check "a second container of the claim does not raise the pod again: $(hp_get $HP)" [ "$(hp_get $HP)" = "4194304 4194304" ]
# The containers go (the pod stays): the reconciler puts the originals back.
kill $huge1 $huge2
wait $huge1 $huge2 2>/dev/null
rmdir "$CG/$HP/huge1" "$CG/$HP/huge2"
for _ in $(seq 50); do [ "$(hp_get $HP)" = "0 0" ] && break; sleep 0.1; done
check "the reconciler puts the pod's 0 back: $(hp_get $HP)" [ "$(hp_get $HP)" = "0 0" ]
check "and kubepods' value: $(hp_get kubepods)" [ "$(hp_get kubepods)" = "2097152 2097152" ]
check "and drops the journal" [ ! -e "$W/state/hugetlb-pods.json" ]
rmdir "$CG/$HP"
read -r kp_max kp_rsvd <<<"$kp_before"
echo "$kp_max" >"$CG/kubepods/hugetlb.2MB.max"
echo "$kp_rsvd" >"$CG/kubepods/hugetlb.2MB.rsvd.max"

# nrm run beside the plugin: the same state, so never the claim's CPUs; a
# transient cgroup v2 holds the command.
"$NRM" run --cpus 2 --state-dir "$W/state" -- sh -c 'cat /proc/self/cgroup; grep _allowed_list /proc/self/status' \
  >"$W/run.out" 2>"$W/run.err"
check "nrm run succeeds beside the plugin" [ $? -eq 0 ]
run_cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$W/run.out")
check "nrm run's command has 2 CPUs ($run_cpus), none of the claim's" \
  sh -c "'$CLIENT' cpus-disjoint '$run_cpus' '$cpus' && [ \$(echo '$run_cpus' | tr ',' '\n' | \
    awk -F- '{ n += (NF == 2 ? \$2 - \$1 + 1 : 1) } END { print n }') -eq 2 ]"
check "nrm run's command is in nrm.slice" grep -q '^0::/nrm.slice/run-' "$W/run.out"
check "nrm run removes its cgroup" sh -c "! ls -d $CG/nrm.slice/run-* 2>/dev/null | grep -q ."

# numactl's choices on the cgroup v2 path: -C across two nodes (both nodes'
# memory), a CPU a claim holds refused before the command starts, naming
# the holder, full-pcpus-only taking a whole core, a dry run taking nothing.
first0=$(cut -d, -f1 /sys/devices/system/node/node0/cpulist | cut -d- -f1)
# A free CPU of node 1 (past the claim's two when node 1 is the last).
other=$(( $(cut -d, -f1 /sys/devices/system/node/node1/cpulist | cut -d- -f1) + (last == 1 ? 2 : 0) ))
"$NRM" run -C "$first0,$other" --state-dir "$W/state" -- grep _allowed_list /proc/self/status >"$W/two.out" 2>"$W/two.err"
check "nrm run -C $first0,$other over two nodes: $(tr '\n' ' ' <"$W/two.out" "$W/two.err" | tail -c 300)" \
  sh -c "grep -q '^Cpus_allowed_list:[[:space:]]*$first0,$other\$' '$W/two.out' \
    && grep -q '^Mems_allowed_list:[[:space:]]*0[-,]1\$' '$W/two.out'"
held=${cpus%%[-,]*}
"$NRM" run -C "$held" --state-dir "$W/state" -- touch "$W/ran-held" 2>"$W/held.err"
hrc=$?
check "nrm run -C $held (the claim's) is refused with 125 naming its holder: $(tail -n 1 "$W/held.err")" \
  sh -c "[ $hrc -eq 125 ] && [ ! -e '$W/ran-held' ] && grep -q 'CPU $held is held by claim default/excl' '$W/held.err'"
"$NRM" run --cpus 2 --option full-pcpus-only --state-dir "$W/state" -- grep Cpus_allowed_list /proc/self/status >"$W/core.out" 2>&1
core=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$W/core.out")
sib=$(cat /sys/devices/system/cpu/cpu${core%%[-,]*}/topology/thread_siblings_list 2>/dev/null)
check "nrm run --option full-pcpus-only --cpus 2 gets one whole core ($core; siblings $sib)" "$CLIENT" cpus-equal "$core" "$sib"
# numactl's long names, isolated CPUs and 1 GiB pages on the cgroup v2 path.
"$NRM" run --physcpubind "$first0" --state-dir "$W/state" -- grep Cpus_allowed_list /proc/self/status >"$W/long.out" 2>&1
check "nrm run --physcpubind $first0: $(cat "$W/long.out")" grep -q "^Cpus_allowed_list:[[:space:]]*$first0\$" "$W/long.out"
"$NRM" run --cpunodebind 0 --cpus 1 --state-dir "$W/state" -- grep Cpus_allowed_list /proc/self/status >"$W/long.out" 2>&1
check "nrm run --cpunodebind 0 --cpus 1 is on node 0: $(cat "$W/long.out")" \
  "$CLIENT" cpus-within "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$W/long.out")" \
  "$(cat /sys/devices/system/node/node0/cpulist)"
iso=$(cut -d, -f1 /sys/devices/system/node/node0/cpulist | cut -d- -f1)
iso=$((iso + 3))
"$NRM" run --isolated --isolated-cpus "$iso" --cpus 1 --state-dir "$W/state" -- grep Cpus_allowed_list /proc/self/status \
  >"$W/iso.out" 2>&1
check "nrm run --isolated --isolated-cpus $iso gets CPU $iso: $(cat "$W/iso.out")" \
  grep -q "^Cpus_allowed_list:[[:space:]]*$iso\$" "$W/iso.out"
"$NRM" run --hugepages-1Gi 1Gi --cpus 1 --numa-node 0 --state-dir "$W/state" -- touch "$W/ran-1g" 2>"$W/1g.err"
grc=$?
check "nrm run --hugepages-1Gi where node 0 has none: 125 before the command ($(tail -n 1 "$W/1g.err"))" \
  sh -c "[ $grc -eq 125 ] && [ ! -e '$W/ran-1g' ] && grep -q 'has no 1Gi huge pages' '$W/1g.err'"
before=$(ls "$W/state" | sort | md5sum)
"$NRM" run --dry-run --json --cpus 2 --state-dir "$W/state" >"$W/dry.json" 2>&1
check "a live dry run says what it would take and takes nothing" \
  sh -c "grep -q '\"dryRun\": true' '$W/dry.json' && [ \"\$(ls '$W/state' | sort | md5sum)\" = '$before' ] \
    && '$CLIENT' cpus-disjoint \"\$(sed -n 's/^  \"cpus\": \"\\(.*\\)\",/\\1/p' '$W/dry.json')\" '$cpus'"

# A run with memory and huge pages: both limits are in its cgroup, and the
# huge pages are held while it runs.
"$NRM" run --cpus 1 --memory 32Mi --hugepages-2Mi 4Mi --numa-node 0 --state-dir "$W/state" -- \
  sh -c 'cg=$(sed -n "s/^0:://p" /proc/self/cgroup); cat /sys/fs/cgroup$cg/memory.max /sys/fs/cgroup$cg/hugetlb.2MB.max;
         echo "env $NRM_MEMORY_MAX $NRM_HUGETLB_2MB"' >"$W/runmem.out" 2>"$W/runmem.err"
check "nrm run with --memory and --hugepages-2Mi succeeds: $(tail -1 "$W/runmem.err")" [ $? -eq 0 ]
check "the run's memory.max is 32Mi and hugetlb.2MB.max 4Mi: $(tr '\n' ' ' <"$W/runmem.out")" \
  [ "$(tr '\n' ' ' <"$W/runmem.out")" = "33554432 4194304 env 33554432 4194304 " ]
"$NRM" run --cpus 1 --hugepages-2Mi 64Mi --numa-node 0 --state-dir "$W/state" -- true 2>"$W/runbig.err"
check "more huge pages than node 0 has: refused before the command runs" \
  sh -c "[ $? -ne 0 ] && grep -q 'numa0-hugepages-2mi' '$W/runbig.err'"

# Unprepare: the CPUs go back to the shared pool.
kill $excl_pid
check "unprepare (CPU)" "$CLIENT" unprepare "$W/k/plugins/cpu.nrm.io/dra.sock" $uid
check "unprepare (memory)" "$CLIENT" unprepare "$W/k/plugins/memory.nrm.io/dra.sock" $uid
for _ in $(seq 50); do
  "$CLIENT" cpus-within "$cpus" "$(status_list $shared_pid Cpus_allowed_list)" && break
  sleep 0.1
done
check "the claim's CPUs are back in the shared pool" \
  "$CLIENT" cpus-within "$cpus" "$(status_list $shared_pid Cpus_allowed_list)"
for _ in $(seq 50); do "$CLIENT" cpus-within "$cpus" "$(status_list $svc Cpus_allowed_list)" && break; sleep 0.1; done
check "and the system service's" "$CLIENT" cpus-within "$cpus" "$(status_list $svc Cpus_allowed_list)"
kill $svc

# nrm run takes the fullest node with room (the order in which the slices
# offer the nodes to the scheduler): with one CPU of the last node held, the
# next run goes there too.
last=$((NODES - 1))
"$NRM" run --cpus 1 --numa-node $last --min-shared-cpus 0 --state-dir "$W/state" -- sleep 60 2>/dev/null &
holder=$!
for _ in $(seq 50); do grep -q '"nrm-run"' "$W/state/cpu.nrm.io.checkpoint.json" 2>/dev/null && break; sleep 0.1; done
"$NRM" run --cpus 1 --min-shared-cpus 0 --state-dir "$W/state" -- sh -c 'echo "$NRM_MEMS"' >"$W/fit.out" 2>"$W/fit.err"
check "a run goes to the fullest node with room, node $last ($(cat "$W/fit.out"))" [ "$(cat "$W/fit.out")" = "$last" ]
kill $holder
wait $holder 2>/dev/null

# nrm run --pid: a running process moved into nrm.slice/run-<pid> (its
# cgroup.procs) and onto the CPU taken; SIGTERM of nrm run puts it back in
# its old cgroup and on its old CPUs (143); its exit releases (0) and the
# cgroup goes.
sleep 600 &
att=$!
att_cg=$(sed -n 's/^0:://p' /proc/$att/cgroup)
att_cpus=$(status_list $att Cpus_allowed_list)
"$NRM" run --pid $att --cpus 1 --min-shared-cpus 0 --state-dir "$W/state" 2>"$W/att.err" &
attr=$!
for _ in $(seq 50); do grep -q "held until it exits" "$W/att.err" && break; sleep 0.1; done
check "nrm run --pid moves the process into nrm.slice/run-$attr: $(cat /proc/$att/cgroup)" \
  grep -qx "0::/nrm.slice/run-$attr" /proc/$att/cgroup
got=$(status_list $att Cpus_allowed_list)
check "the attached process is on the one CPU taken ($got), the cgroup's cpuset.cpus" \
  sh -c "[ '$got' = \"\$(cat $CG/nrm.slice/run-$attr/cpuset.cpus)\" ] && ! echo '$got' | grep -q '[,-]'"
kill -TERM $attr
wait $attr
attrc=$?
check "SIGTERM of nrm run --pid exits 143 ($attrc)" [ $attrc -eq 143 ]
check "the process is back in its cgroup ($att_cg: $(sed -n 's/^0:://p' /proc/$att/cgroup)) and on its CPUs ($att_cpus: $(status_list $att Cpus_allowed_list))" \
  sh -c "[ \"\$(sed -n 's/^0:://p' /proc/$att/cgroup)\" = '$att_cg' ] && [ \"\$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$att/status)\" = '$att_cpus' ]"
check "the attach's cgroup is removed after SIGTERM" [ ! -d "$CG/nrm.slice/run-$attr" ]
"$NRM" run --pid $att --cpus 1 --min-shared-cpus 0 --state-dir "$W/state" 2>"$W/att.err" &
attr=$!
for _ in $(seq 50); do grep -q "held until it exits" "$W/att.err" && break; sleep 0.1; done
kill $att
wait $att 2>/dev/null
wait $attr
attrc=$?
check "nrm run --pid exits 0 when the process does: $(tail -1 "$W/att.err")" [ $attrc -eq 0 ]
check "the attach's cgroup is removed after the process exits" [ ! -d "$CG/nrm.slice/run-$attr" ]
check "the attach's claim is released" sh -c "! grep -q '\"nrm-run\"' '$W/state/cpu.nrm.io.checkpoint.json'"

kill -TERM $plugin
wait $plugin
check "the plugin stops cleanly on SIGTERM" [ $? -eq 0 ]

# Another process's checkpoint (a run) wakes the shared-pool reconciler at
# once through inotify: with an hour between periodic passes, the shared
# container still leaves the run's CPUs within 3 s.
"$NRM" plugin --node-name vm --kubelet-dir "$W/k" --cdi-dir "$W/cdi" --state-dir "$W/state" --claims-dir "$W/claims" \
  --reconcile-interval 3600 --hook-path "$HOOK" 2>>"$W/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$W/k/plugins_registry/memory.nrm.io-reg.sock" ] && break; sleep 0.1; done
sleep 2 # the pass at start is over
"$NRM" run --cpus 2 --min-shared-cpus 0 --state-dir "$W/state" -- sh -c 'echo "$NRM_CPUS"; sleep 60' \
  >"$W/wake.out" 2>/dev/null &
runner=$!
for _ in $(seq 50); do [ -s "$W/wake.out" ] && break; sleep 0.1; done
wake_cpus=$(head -n 1 "$W/wake.out")
for _ in $(seq 30); do
  "$CLIENT" cpus-disjoint "$(status_list $shared_pid Cpus_allowed_list)" "$wake_cpus" && break
  sleep 0.1
done
check "a run's checkpoint wakes the reconciler: the shared container leaves its CPUs ($wake_cpus) at once" \
  sh -c "[ -n '$wake_cpus' ] && '$CLIENT' cpus-disjoint '$(status_list $shared_pid Cpus_allowed_list)' '$wake_cpus'"
kill $runner
wait $runner 2>/dev/null
kill -TERM $plugin
wait $plugin
kill $shared_pid $shared2 2>/dev/null
if [ "$fail" -ne 0 ]; then
  echo "--- plugin log"
  cat "$W/plugin.log"
fi
finish
