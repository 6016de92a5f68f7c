#!/bin/sh
# Runs inside the VM that tests/vm/pci-plugin.vm declares (2 nodes, --pci
# --iommu), under busybox sh (its applets are forked, not exec'd over 9p).
# `nrm plugin` with the cpu, memory and pci drivers, claims from a folder,
# every assertion read back from the kernel:
#   1. a claim of node 1's GPU with 2 CPUs and 16Mi on node 1: its CDI spec,
#      then a real container (podman, the CDI library of containerd and
#      CRI-O) started with the claim's CDI ids;
#   2. passthrough of node 1's e1000e (its -vfio twin): vfio-pci while
#      prepared, e1000e again after unprepare, also across a kill -9;
#   3. hotplug (remove, rescan) in `nrm slices`, and a corrected AER error
#      in the health stream the kubelet watches;
#   4. tests/gpu/check.sh against the virtio GPUs.
# One "ok:"/"FAIL:" line a check, "time: PART MS" lines, and a summary.
#   pci-plugin-guest.sh BUILDDIR SRCDIR
# NRM_VM_PCI_BREAK=1 expects wrong things on purpose (node 0's GPU, memory
# node 0, e1000e while passed through, no NVMe removed, 2 AER errors), to
# see those checks fail.
set -u
B=$1 SRC=$2 BREAK=${NRM_VM_PCI_BREAK:-}
NRM=$B/nrm/nrm HOOK=$B/nrm/nrm-hook CLIENT=$B/tests/plugin/dra-client
S=/sys/bus/pci/devices
W=/tmp/nrm-pp
CDI=/var/run/cdi # where podman looks
mkdir -p $W/claims $W/state $W/k $CDI
. "$(dirname "$0")/guest-lib.sh"
want () { if [ -n "$BREAK" ]; then echo "$2"; else echo "$1"; fi; } # want RIGHT WRONG
ms; T0=$MS TP=$MS
part () { ms; echo "time: $1 $((MS - TP)) ms"; TP=$MS; }
name_of () { N=${2//:/-}; N=$1-${N//./-}; } # name_of CLASS BDF -> N
net_of () { NET=-; for n in $S/$1/net/*; do [ -e "$n" ] && NET=${n##*/}; done; }
# The device node paths of a CDI spec, sorted, on one line.
spec_nodes () { grep -o '"path": *"/dev/[^"]*"' "$1" | sed 's/.*"\(\/dev\/[^"]*\)"/\1/' | sort | tr '\n' ' '; }

# The kernel's view: node 1's GPU and e1000e, node 0's e1000e and NVMe.
gpu1='' gpu0='' nic1='' nic0='' nvme0=''
for d in $S/*; do
  attr "$d/numa_node"; n=$A
  attr "$d/class"
  case $A:$n in
    0x03*:1) gpu1=${d##*/} ;;
    0x03*:0) gpu0=${d##*/} ;;
    0x0200*:1) nic1=${d##*/} ;;
    0x0200*:0) nic0=${d##*/} ;;
    0x0108*:0) nvme0=${d##*/} ;;
  esac
done
echo "devices: gpu1=$gpu1 nic1=$nic1 nic0=$nic0 nvme0=$nvme0"
card='' render='' g=$gpu1
[ -n "$BREAK" ] && g=$gpu0
for e in $S/$g/drm/* $S/$g/virtio*/drm/*; do
  case ${e##*/} in card[0-9]*) card=/dev/dri/${e##*/} ;; renderD[0-9]*) render=/dev/dri/${e##*/} ;; esac
done
echo "node 1's GPU $gpu1: $card $render"
check "node 1's GPU has a DRM card and render node in sysfs" [ -c "$card" -a -c "$render" ]
check "vfio-pci is loaded" [ -d /sys/bus/pci/drivers/vfio-pci ]
node1cpus=$(cat /sys/devices/system/node/node1/cpulist)

printf 'pci:\n  classes: [gpu, accel, fpga, coproc, ib, nic, nvme]\n  passthrough: true\n' >$W/pci.yaml
slices () { "$NRM" slices --node-name vm --drivers cpu,memory,pci -c $W/pci.yaml >$W/slices.json 2>$W/slices.err; }
slices
same "nrm slices exit status" 0 "$?"
listed () { grep -q "\"name\": *\"$1\"" $W/slices.json; }
name_of gpu "$gpu1"; gpuname=$N
name_of nic "$nic1"; twin=$N-vfio
check "nrm slices lists node 1's GPU as $gpuname" listed "$gpuname"
check "nrm slices lists the passthrough twin $twin" listed "$twin"
part discovery

start_plugin () {
  "$NRM" plugin --node-name vm --drivers cpu,memory,pci -c $W/pci.yaml --kubelet-dir $W/k --cdi-dir $CDI \
    --state-dir $W/state --claims-dir $W/claims --hook-path "$HOOK" --device-metadata \
    2>>$W/plugin.log &
  plugin=$!
  wait_for 150 [ -S $W/k/plugins_registry/pci.nrm.io-reg.sock -a -S $W/k/plugins_registry/cpu.nrm.io-reg.sock \
    -a -S $W/k/plugins_registry/memory.nrm.io-reg.sock ]
}
sock () { echo "$W/k/plugins/$1/dra.sock"; }
claim () { # claim NAME UID RESULTS
  echo "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",
 \"metadata\":{\"namespace\":\"default\",\"name\":\"$1\",\"uid\":\"$2\"},
 \"status\":{\"allocation\":{\"devices\":{\"results\":[$3]}}}}" >$W/claims/default_$1.json
}

# --- 1. node 1's GPU, CPUs and memory --------------------------------------
uid1=00000000-0000-4000-8000-0000000000c1
claim gpu $uid1 "{\"request\":\"gpu\",\"driver\":\"pci.nrm.io\",\"pool\":\"vm\",\"device\":\"$gpuname\"},
  {\"request\":\"cpus\",\"driver\":\"cpu.nrm.io\",\"pool\":\"vm\",\"device\":\"numa1\",\"consumedCapacity\":{\"cpus\":\"2\"}},
  {\"request\":\"mem\",\"driver\":\"memory.nrm.io\",\"pool\":\"vm\",\"device\":\"numa1\",\"consumedCapacity\":{\"memory\":\"16Mi\"}}"
start_plugin
check "the plugin serves the cpu, memory and pci drivers" [ -S "$(sock pci.nrm.io)" ]
: >$W/ids
for drv in cpu.nrm.io memory.nrm.io pci.nrm.io; do
  "$CLIENT" prepare "$(sock $drv)" default gpu $uid1 >>$W/ids 2>$W/err
  check "prepare through $drv's socket $(cat $W/err)" [ $? -eq 0 ]
done
echo "CDI ids: $(tr '\n' ' ' <$W/ids)"
spec=$CDI/pci.nrm.io-$uid1.json
check "the pci driver's CDI spec $spec" [ -f "$spec" ]
same "its device nodes (node 1's GPU, mapped through sysfs)" "$(echo "$card $render" | tr ' ' '\n' | sort | tr '\n' ' ')" \
  "$(spec_nodes "$spec")"
same "its NRM_PCI_DEVICES" "$gpu1" "$(grep -o '"NRM_PCI_DEVICES=[^"]*"' "$spec" | sed 's/.*=//; s/"$//')"
part prepare-gpu

# A real CDI consumer: podman resolves the ids from /var/run/cdi, applies
# the nodes, the environment and the metadata mounts, and runs the CPU
# driver's createRuntime hook through runc.
P="podman --root $W/pm/root --runroot $W/pm/run --tmpdir $W/pm/tmp --storage-driver vfs --cgroup-manager cgroupfs
  --events-backend none --runtime runc"
for f in $CDI/*_metadata_${uid1}_*.json; do
  h=$(sed -n 's/.*"hostPath": "\([^"]*\)".*/\1/p' "$f")
  echo "  metadata ${f##*/}: $(tr -d ' \n' <"$h" | cut -c 1-400)"
done
meta=$(for f in $CDI/*_metadata_${uid1}_*.json; do sed -n 's/.*"containerPath": "\([^"]*\)".*/\1/p' "$f"; done | tr '\n' ' ')
if ! command -v podman >/dev/null 2>&1; then
  bad "podman is missing (apt-get install podman): no container started"
else
  mkdir -p $W/pm/tmp $W/rootfs/bin
  for bb in /usr/bin/busybox /bin/busybox; do [ -x $bb ] && cp $bb $W/rootfs/bin/busybox && break; done
  tar -C $W/rootfs -cf $W/rootfs.tar . && $P import $W/rootfs.tar localhost/nrm-bb >/dev/null 2>$W/pm.err
  check "podman imports a busybox rootfs $(tail -n 2 $W/pm.err)" [ $? -eq 0 ]
  devs='' ids=''
  for id in $(cat $W/ids); do devs="$devs --device $id"; ids="$ids $id"; done
  part podman-import
  # shellcheck disable=SC2086
  $P run --rm --network none --ulimit nofile=20000 --ulimit nproc=32768 $devs localhost/nrm-bb \
    /bin/busybox sh -c 'for f in /dev/dri/*; do [ -c "$f" ] && echo "node $f"; done
      grep _allowed_list /proc/self/status; echo "env NRM_PCI_DEVICES=$NRM_PCI_DEVICES"
      for m in '"$meta"'; do echo "meta $m"; tr -d " \n" <"$m"; echo; done' >$W/run.out 2>$W/run.err
  check "podman run --device$ids" [ $? -eq 0 ]
  sed 's/^/  podman: /' $W/run.err | tail -n 5
  sed 's/^/  container: /' $W/run.out | cut -c 1-300
  same "the container's /dev/dri" "$card $render " "$(sed -n 's/^node //p' $W/run.out | sort | tr '\n' ' ')"
  ccpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' $W/run.out)
  check "the container's CPUs ($ccpus) are 2 of node 1's ($node1cpus)" sh -c "[ -n '$ccpus' ] && '$CLIENT' cpus-within '$ccpus' '$node1cpus' && [ \$(echo '$ccpus' | tr ',' '\n' | awk -F- '{ n += (NF == 2 ? \$2 - \$1 + 1 : 1) } END { print n }') -eq 2 ]"
  same "the container's memory nodes" "$(want 1 0)" "$(sed -n 's/^Mems_allowed_list:[[:space:]]*//p' $W/run.out)"
  same "the container's NRM_PCI_DEVICES" "$gpu1" "$(sed -n 's/^env NRM_PCI_DEVICES=//p' $W/run.out)"
  check "the container reads the GPU's metadata (its pciBusID)" grep -q "\"$gpuname\".*pciBusID\":{\"string\":\"$gpu1\"}" $W/run.out
  near=$(grep -o '"nearDevices":{[^}]*}' $W/run.out)
  echo "  cpu metadata nearDevices: ${near:-none}"
  check "the CPU device's nearDevices names the GPU" sh -c "echo '$near' | grep -q '$gpu1'"
fi
part podman-run
for drv in pci.nrm.io memory.nrm.io cpu.nrm.io; do
  check "unprepare through $drv" "$CLIENT" unprepare "$(sock $drv)" $uid1
done
check "the pci driver's CDI spec is gone" [ ! -e "$spec" ]
rm -f $W/claims/default_gpu.json
part unprepare-gpu

# --- 2. passthrough of node 1's e1000e -------------------------------------
uid2=00000000-0000-4000-8000-0000000000c2
target $S/$nic1/iommu_group; grp=$T
net_of $nic1; net1=$NET
journal=$W/state/pci.nrm.io.vfio/$nic1.json
claim vfio $uid2 "{\"request\":\"nic\",\"driver\":\"pci.nrm.io\",\"pool\":\"vm\",\"device\":\"$twin\"}"
target $S/$nic1/driver
same "$nic1's driver before" e1000e "$T"
passthrough () { # passthrough WHAT: prepare and check the binding
  "$CLIENT" prepare "$(sock pci.nrm.io)" default vfio $uid2 >$W/ids2 2>$W/err
  check "$1: prepare of $twin $(cat $W/err)" [ $? -eq 0 ]
  target $S/$nic1/driver
  same "$1: $nic1's driver" "$(want vfio-pci e1000e)" "$T"
  check "$1: /dev/vfio/$grp is a character device" [ -c /dev/vfio/$grp ]
  same "$1: the CDI spec's device nodes" "/dev/vfio/$grp /dev/vfio/vfio " "$(spec_nodes $CDI/pci.nrm.io-$uid2.json)"
  net_of $nic1
  same "$1: its interface while passed through" - "$NET"
  check "$1: the journal $journal" [ -f "$journal" ]
}
given_back () {
  target $S/$nic1/driver
  same "$1: $nic1's driver" e1000e "$T"
  net_of $nic1
  same "$1: its interface" "$net1" "$NET"
  check "$1: /dev/vfio/$grp is gone" [ ! -e /dev/vfio/$grp ]
  check "$1: the journal is gone" [ ! -e "$journal" ]
}
passthrough "prepare"
part vfio-prepare
check "unprepare of $twin" "$CLIENT" unprepare "$(sock pci.nrm.io)" $uid2
given_back "after unprepare"
part vfio-unprepare
passthrough "crash: prepare"
kill -9 $plugin
wait $plugin 2>/dev/null
# What a kill -9 leaves (the kubelet's registry would too): the restart is
# seen when the new sockets appear.
rm -f $W/k/plugins_registry/*.sock
target $S/$nic1/driver
same "crash: after kill -9, $nic1's driver" vfio-pci "$T"
check "crash: the journal survives the kill" [ -f "$journal" ]
start_plugin
check "crash: the plugin restarts" [ -S "$(sock pci.nrm.io)" ]
target $S/$nic1/driver
same "crash: after the restart, $nic1's driver (the claim is still prepared)" vfio-pci "$T"
check "crash: unprepare after the restart" "$CLIENT" unprepare "$(sock pci.nrm.io)" $uid2
given_back "crash: after unprepare"
rm -f $W/claims/default_vfio.json
part vfio-crash

# --- 3. hotplug and health -------------------------------------------------
name_of nvme "$nvme0"; nvmename=$N
check "nrm slices lists $nvmename" listed "$nvmename"
[ -z "$BREAK" ] && echo 1 >$S/$nvme0/remove
slices
check "after $nvme0/remove, nrm slices no longer lists $nvmename" sh -c "! grep -q '\"$nvmename\"' $W/slices.json"
echo 1 >/sys/bus/pci/rescan
wait_for 50 [ -e $S/$nvme0 ]
slices
check "after /sys/bus/pci/rescan, nrm slices lists $nvmename again" listed "$nvmename"
part hotplug

# A corrected error (RxErr) on node 0's e1000e through aer_inject: struct
# aer_error_inj is bus, dev, fn, a pad byte, uncor_status, cor_status,
# header_log[4], domain (little-endian u32s), written in one write.
name_of nic "$nic0"; nic0name=$N
"$CLIENT" health "$(sock pci.nrm.io)" 28 >$W/health.out 2>$W/health.err &
watcher=$!
wait_for 100 grep -q "^1 $nic0name " $W/health.out
first=$(sed -n "s/^1 $nic0name //p" $W/health.out)
check "the health stream's first message has $nic0name, without AER errors: $first" \
  sh -c "[ -n '$first' ] && ! echo '$first' | grep -q AER"
bus=${nic0#*:}; bus=${bus%%:*} dev=${nic0##*:}; fn=${dev#*.} dev=${dev%.*}
o () { printf '\\%03o' $(($1)); }
if [ -c /dev/aer_inject ]; then
  printf "$(o 0x$bus)$(o 0x$dev)$(o $fn)\\000\\000\\000\\000\\000\\001\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000" \
    >/dev/aer_inject
  check "a corrected error injected on $nic0" [ $? -eq 0 ]
  grep -E 'RxErr|TOTAL_ERR_COR' $S/$nic0/aer_dev_correctable | tr '\n' ' ' | sed 's/^/  aer_dev_correctable: /'; echo
  check "the kernel counts it (TOTAL_ERR_COR 1)" grep -q '^TOTAL_ERR_COR 1$' $S/$nic0/aer_dev_correctable
  # The driver reads the counters at every health pass (10 s).
  aer="^[0-9]* $nic0name Healthy .*$(want 1 2) corrected AER errors since boot"
  wait_for 250 grep -q "$aer" $W/health.out
  check "the health stream reports it: $(grep " $nic0name " $W/health.out | tail -n 1)" grep -q "$aer" $W/health.out
else
  bad "no /dev/aer_inject (aer_inject not loaded)"
fi
kill $watcher 2>/dev/null
wait $watcher 2>/dev/null
part aer
kill -TERM $plugin
wait $plugin
check "the plugin stops cleanly on SIGTERM" [ $? -eq 0 ]

# --- 4. tests/gpu/check.sh against the virtio GPUs -------------------------
sh "$SRC/tests/gpu/check.sh" "$B" >$W/gpu.out 2>&1
rc=$?
sed 's/^/  gpu: /' $W/gpu.out | cut -c 1-240
same "tests/gpu/check.sh exit status ($(tail -n 1 $W/gpu.out))" 0 "$rc"
part gpu-check

if [ "$fail" -ne 0 ]; then
  echo "--- plugin log"
  tail -n 40 $W/plugin.log
fi
ms
echo "time: total $((MS - T0)) ms"
finish
