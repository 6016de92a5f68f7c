#!/bin/sh
# Copies what nrm's PCI discovery reads from a running kernel into a plain
# directory tree that works as a fake --fsroot (tests/fixtures/sysfs-vm-pci/
# is one, taken in the VM of tests/vm/pci.vm; its README describes the format):
#
#   - for every /sys/bus/pci/devices/<BDF>: the link itself, and in the
#     device's own directory (under sys/devices/pci<domain>:<bus>/...) the
#     attribute files below that exist, and the links driver, iommu_group,
#     physfn and virtfn<N>, all as relative links, like the kernel's own;
#   - the links back: sys/kernel/iommu_groups/<N>/devices/<BDF> and
#     sys/bus/pci/drivers/<name>/<BDF>;
#   - every entry of /sys/class/{drm,nvme,net,infiniband_verbs,vfio}: the
#     class link, and in its target directory the files dev and uevent and
#     the device link;
#   - the device nodes of those entries and /dev/vfio/*: an empty regular file
#     each (dev/...), and a line "NAME c|b MAJOR:MINOR" in the file devnodes.
#
#   pci-tree.sh OUTDIR   (OUTDIR may exist, but without sys, dev or devnodes in it)
#
# Only shell built-ins in the loops, and mkdir/ln: each exec costs 0.1-0.2 s
# in the VM under emulation (run it with busybox sh there: its applets are not
# exec'd).
set -eu
[ $# -eq 1 ] || { echo "usage: pci-tree.sh OUTDIR" >&2; exit 2; }
out=$1
for f in sys dev devnodes; do
  [ ! -e "$out/$f" ] || { echo "pci-tree.sh: $out/$f exists" >&2; exit 2; }
done
mkdir -p "$out"
cd "$out"
out=$(pwd -P)

attrs="class vendor device subsystem_vendor subsystem_device revision numa_node local_cpulist
  current_link_speed max_link_speed current_link_width max_link_width sriov_totalvfs sriov_numvfs
  sriov_drivers_autoprobe driver_override aer_dev_correctable aer_dev_nonfatal aer_dev_fatal"

# rel DIR TARGET: sets R to TARGET relative to DIR (both absolute and resolved).
rel () {
  _from=$1/ _to=$2/ _up=''
  while [ "${_to#"$_from"}" = "$_to" ]; do _from=${_from%/*/}/; _up="../$_up"; done
  R=$_up${_to#"$_from"}
  R=${R%/}
}
# resolve PATH: sets P to PATH with every link resolved (a directory).
resolve () { cd -P "$1" && P=$(pwd -P) && cd "$out"; }
# copy FILE: FILE (absolute) to the same path under $out.
copy () {
  [ -f "$1" ] && [ -r "$1" ] || return 0
  { while IFS= read -r _l || [ -n "$_l" ]; do printf '%s\n' "$_l"; done <"$1"; } >"$out$1" 2>/dev/null \
    || rm -f "$out$1"
}
# link LINK TARGETDIR: LINK (absolute) under $out, pointing at TARGETDIR
# (absolute, resolved) relatively; the target directory is made too.
link () {
  [ -d "$out${1%/*}" ] || mkdir -p "$out${1%/*}"
  [ -d "$out$2" ] || mkdir -p "$out$2"
  rel "${1%/*}" "$2"
  ln -s "$R" "$out$1"
}

for d in /sys/bus/pci/devices/*; do
  [ -e "$d" ] || continue
  resolve "$d"
  dir=$P
  link "$d" "$dir"
  for a in $attrs; do copy "$dir/$a"; done
  for l in driver iommu_group physfn "$dir"/virtfn*; do
    l=${l##*/}
    [ -e "$dir/$l" ] || continue
    resolve "$dir/$l"
    link "$dir/$l" "$P"
    # The back links, as in sysfs (a driver's directory is never empty).
    case $l in
      iommu_group) link "$P/devices/${d##*/}" "$dir" ;;
      driver) link "$P/${d##*/}" "$dir" ;;
    esac
  done
done

# node NAME MAJOR:MINOR: the device node /dev/NAME, where it exists.
node () {
  if [ -c "/dev/$1" ]; then t=c; elif [ -b "/dev/$1" ]; then t=b; else return 0; fi
  case $1 in */*) mkdir -p "$out/dev/${1%/*}" ;; *) mkdir -p "$out/dev" ;; esac
  : >"$out/dev/$1"
  echo "$1 $t $2" >>"$out/devnodes"
}

: >"$out/devnodes"
for cls in drm nvme net infiniband_verbs vfio; do
  [ -d "/sys/class/$cls" ] || continue
  mkdir -p "$out/sys/class/$cls"
  for e in "/sys/class/$cls"/*; do
    [ -e "$e" ] || continue
    if [ ! -L "$e" ]; then copy "$e"; continue; fi # drm/version
    resolve "$e"
    t=$P
    link "$e" "$t"
    copy "$t/dev"
    copy "$t/uevent"
    if [ -e "$t/device" ]; then resolve "$t/device"; link "$t/device" "$P"; fi
    # Its device node, by the name the kernel gave it.
    [ -r "$t/dev" ] && [ -r "$t/uevent" ] || continue
    name=''
    while IFS= read -r l; do case $l in DEVNAME=*) name=${l#DEVNAME=} ;; esac; done <"$t/uevent"
    read -r mm <"$t/dev"
    [ -z "$name" ] || node "$name" "$mm"
  done
done

# /dev/vfio/vfio, the container, is a misc device.
[ -r /sys/class/misc/vfio/dev ] && read -r mm </sys/class/misc/vfio/dev && node vfio/vfio "$mm"
sort -o "$out/devnodes" "$out/devnodes"
