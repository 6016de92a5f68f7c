#!/bin/sh
# Runs inside the VM that tests/vm/pci.vm boots with --pci --iommu (under
# busybox sh: its applets are not exec'd, and each exec costs 0.1-0.2 s
# under emulation; ${A// /_} is busybox's).  It only prints; pci-check.sh checks the output on the host:
#   @@ sriov     the SR-IOV NVMe's VFs enabled (sriov_numvfs=2, no autoprobe)
#   @@ sysfs     one "pci BDF key=value..." line per function, the kernel's view
#   @@ class     one "class CLASS NAME dev=M:N device=BDF node=..." line per entry
#   @@ topology  nrm topology --json, then "@@ rc N" and "@@ stderr" with its stderr
#   @@ slices    nrm slices --drivers cpu,memory,pci, the same
#   @@ vfio      the e1000e on node 1 moved to vfio-pci and back
#   pci-guest.sh NRM [SNAPSHOT_DIR]   (SNAPSHOT_DIR: tests/vm/pci-tree.sh runs
#                                      while that e1000e is on vfio-pci)
set -u
NRM=$1 SNAP=${2:-}
here=${0%/*}
S=/sys/bus/pci/devices
W=/tmp/nrm-pci
mkdir -p $W

# ms, target, attr
. "$(dirname "$0")/guest-lib.sh"

echo "@@ sriov"
for d in $S/*; do
  attr "$d/sriov_totalvfs"
  [ "$A" != - ] && [ "$A" -gt 0 ] || continue
  echo 0 >"$d/sriov_drivers_autoprobe"
  ms; t0=$MS
  echo 2 >"$d/sriov_numvfs" || echo "sriov ${d##*/} error"
  ms
  attr "$d/sriov_totalvfs"; total=$A
  attr "$d/sriov_numvfs"
  echo "sriov ${d##*/} totalvfs=$total numvfs=$A ms=$((MS - t0))"
done

echo "@@ sysfs"
for d in $S/*; do
  b=${d##*/}
  cd -P "$d" && path=$PWD && cd /
  line="pci $b path=$path"
  for a in class vendor device numa_node local_cpulist sriov_totalvfs sriov_numvfs current_link_speed \
    max_link_speed current_link_width max_link_width aer_dev_correctable; do
    attr "$d/$a"
    A=${A// /_} # "16.0 GT/s PCIe"
    [ "$a" = aer_dev_correctable ] && { [ -e "$d/$a" ] && A=yes || A=no; }
    line="$line $a=$A"
  done
  for l in driver iommu_group physfn; do target "$d/$l"; line="$line $l=$T"; done
  echo "$line"
done

echo "@@ class"
for e in /sys/class/drm/* /sys/class/nvme/* /sys/class/net/* /sys/class/vfio/*; do
  [ -L "$e" ] || continue
  c=${e%/*}; c=${c##*/}
  target "$e/device"; dev=$T
  attr "$e/dev"; mm=$A
  name=-
  if [ -r "$e/uevent" ]; then
    while IFS= read -r l; do case $l in DEVNAME=*) name=/dev/${l#DEVNAME=} ;; esac; done <"$e/uevent"
  fi
  kind=-
  [ "$name" != - ] && { if [ -c "$name" ]; then kind=c; elif [ -e "$name" ]; then kind=other; else kind=missing; fi; }
  echo "class $c ${e##*/} dev=$mm device=$dev node=$name kind=$kind"
done

echo "@@ topology"
"$NRM" topology --json 2>$W/topo.err
echo "@@ rc $?"
echo "@@ stderr"
cat $W/topo.err

echo "@@ slices"
# Every class, NICs and NVMe drives included (none of them is the guest's own).
printf 'pci:\n  classes: [gpu, accel, fpga, coproc, ib, nic, nvme]\n' >$W/pci.yaml
"$NRM" slices --node-name vm-pci --drivers cpu,memory,pci -c $W/pci.yaml 2>$W/slices.err
echo "@@ rc $?"
echo "@@ stderr"
cat $W/slices.err

echo "@@ vfio"
# The e1000e on node 1, its group, the driver moves.
nic=''
for d in $S/*; do
  target "$d/driver"
  attr "$d/numa_node"
  [ "$T" = e1000e ] && [ "$A" = 1 ] && { nic=$d; break; }
done
if [ -z "$nic" ]; then
  echo "vfio none"
else
  b=${nic##*/}
  target "$nic/iommu_group"; grp=$T
  members=''
  for m in /sys/kernel/iommu_groups/"$grp"/devices/*; do members="$members${members:+,}${m##*/}"; done
  net=-
  for n in $nic/net/*; do [ -e "$n" ] && net=${n##*/}; done
  echo "vfio $b group=$grp members=$members net=$net before=e1000e"
  ms; t0=$MS
  echo vfio-pci >"$nic/driver_override"
  echo "$b" >"$nic/driver/unbind"
  echo "$b" >/sys/bus/pci/drivers_probe
  ms; t1=$MS
  target "$nic/driver"; drv=$T
  kind=missing
  [ -c "/dev/vfio/$grp" ] && kind=c
  attr "/sys/class/vfio/$grp/dev"; mm=$A
  attr "/sys/class/misc/vfio/dev"; cmm=$A
  ckind=missing
  [ -c /dev/vfio/vfio ] && ckind=c
  net=-
  for n in $nic/net/*; do [ -e "$n" ] && net=${n##*/}; done
  echo "vfio bound driver=$drv node=/dev/vfio/$grp kind=$kind dev=$mm container=$ckind container_dev=$cmm net=$net ms=$((t1 - t0))"
  if [ -n "$SNAP" ]; then
    ms; t2=$MS
    # Made on the guest's tmpfs, then copied by one process: a file made
    # over 9p costs about 50 ms.
    if busybox sh "$here/pci-tree.sh" $W/tree 2>$W/tree.err && cp -a $W/tree/. "$SNAP/" 2>>$W/tree.err; then
      echo "snapshot $SNAP"
    else
      echo "snapshot failed: $(cat $W/tree.err)"
    fi
    ms
    echo "snapshot ms=$((MS - t2))"
  fi
  ms; t0=$MS
  echo >"$nic/driver_override"
  echo "$b" >"$nic/driver/unbind"
  echo "$b" >/sys/bus/pci/drivers_probe
  ms; t1=$MS
  target "$nic/driver"; drv=$T
  kind=gone
  [ -e "/dev/vfio/$grp" ] && kind=present
  attr "$nic/driver_override"; ovr=$A
  net=-
  for n in $nic/net/*; do [ -e "$n" ] && net=${n##*/}; done
  echo "vfio back driver=$drv node=/dev/vfio/$grp kind=$kind override=$ovr net=$net ms=$((t1 - t0))"
fi
echo "@@ end"
