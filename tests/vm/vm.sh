#!/bin/bash
# Runs one command inside a throw-away qemu VM with a real kernel: emulated
# NUMA nodes (ACPI SRAT/SLIT), SMT siblings, and cgroup v2 mounted at
# /sys/fs/cgroup with cpuset, cpu, memory and hugetlb enabled for children.
#
#   tests/vm/vm.sh --nodes N [--cpus C] [--threads T] [--mem-mb M] [--pci] [--iommu]
#                  [--net] [--guestfwd PORT]... [--hostfwd HOSTPORT:PORT]... -- COMMAND [ARGS...]
#   tests/vm/vm.sh --kernel-only     fetch the guest kernel into the cache, boot nothing
#
# With --pci the machine is a q35 with PCIe devices behind one PCIe root
# complex (pxb-pcie) per NUMA node (the layout is under "--pci" in
# tests/vm/README.md); --iommu adds an emulated Intel IOMMU (needed by vfio-pci).
# With --net the guest has one NIC on qemu's user network, restricted (no
# route to the host or beyond), as 10.0.2.15/24 with the netfilter, bridge
# and veth modules a Kubernetes node needs; --guestfwd PORT lets the guest
# reach the host's 127.0.0.1:PORT at 10.0.2.100:PORT, --hostfwd HOSTPORT:PORT
# the host reach the guest's PORT at 127.0.0.1:HOSTPORT.
#
# The guest sees the host's root file system read-only (over 9p) under a
# tmpfs overlay, and the current git work tree (or the current directory)
# read-write at the same path; COMMAND runs chrooted into that, in the same
# working directory, with the caller's exported environment.  Its stdout and
# stderr come back on ours and its exit status is ours.
#
# Exit status: COMMAND's; 77 when something needed is missing (the reason on
# stderr, one line); 124 when the VM ran past the timeout; 125 when the VM
# failed to boot or to report COMMAND's status; 2 for a usage error.
#
# Environment: NRM_VM_CACHE (kernel cache, default /var/cache/nrm-vm),
# NRM_VM_TIMEOUT (seconds, default 300), NRM_VM_BOOT_TIMEOUT (seconds to
# start COMMAND before the VM is booted again, default 60), NRM_VM_QEMU (the qemu binary),
# NRM_VM_ACCEL (tcg or kvm; default kvm only where kvm_intel/kvm_amd is
# loaded), NRM_VM_CPU (the qemu CPU model), NRM_VM_APPEND (more kernel
# arguments), NRM_VM_KERNEL_DEB (a linux-image .deb to use instead of
# fetching one), NRM_VM_DEBUG=1 (print the qemu command, the timings and the
# guest's kernel log, and keep the temporary directory), NRM_VM_LOCK (the
# lock file that lets one VM boot at a time, default
# $TMPDIR/nrm-vm-boot.lock).
set -u

prog=vm.sh
usage () {
  cat <<'EOF'
usage: vm.sh --nodes N [options] -- COMMAND [ARGS...]
  --nodes N           NUMA nodes (default 1)
  --cpus C            CPUs in all, split evenly over the nodes (default 8, or the next
                      multiple of N*T)
  --threads T         SMT threads per core (default 2)
  --sockets S         sockets (default N: one node per socket)
  --mem-mb M          memory in MiB in all, split evenly (default max(1024, 256*N), plus huge pages)
  --hugepages-2m K    reserve K 2 MiB huge pages on every node
  --distances LIST    the N*N distance matrix, row by row, comma-separated
                      (default 10 local, 20 remote)
  --share DIR         also share DIR read-write at the same path (repeatable)
  --timeout S         kill the VM after S seconds (default $NRM_VM_TIMEOUT or 300)
  --pci               a q35 machine with, per NUMA node k, a PCIe root complex on node k
                      (bus 0x20*(k+1)) holding a virtio-gpu, an e1000e and an NVMe, and on
                      the last node also an NVMe with SR-IOV (2 VFs); at most 7 nodes
  --iommu             an emulated Intel IOMMU (intel-iommu, no interrupt remapping)
  --net               a NIC on qemu's user network with restrict=on: the guest is 10.0.2.15/24
                      and reaches nothing but what --guestfwd opens
  --guestfwd PORT     the guest's 10.0.2.100:PORT is the host's 127.0.0.1:PORT (repeatable;
                      implies --net)
  --hostfwd H:G       the host's 127.0.0.1:H is the guest's port G (repeatable; implies --net)
  --kernel-only       fetch and unpack the guest kernel into the cache (once), then exit: a
                      later boot needs no network (the node tests boot with none)
EOF
}
die () { echo "$prog: $*" >&2; exit 2; }
skip () { echo "$prog: skipped: $*" >&2; exit 77; }
debug () { [ -n "${NRM_VM_DEBUG:-}" ] && echo "$prog: $*" >&2; return 0; }
isnum () { case $1 in '' | *[!0-9]*) return 1 ;; esac; return 0; }

nodes=1 cpus='' threads=2 sockets='' mem='' huge=0 dists='' timeout=${NRM_VM_TIMEOUT:-300} pci='' iommu=''
net='' shares=() fwds=() gports=() kernel_only=
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:-}; shift 2 || die "--nodes needs a value" ;;
    --cpus) cpus=${2:-}; shift 2 || die "--cpus needs a value" ;;
    --threads) threads=${2:-}; shift 2 || die "--threads needs a value" ;;
    --sockets) sockets=${2:-}; shift 2 || die "--sockets needs a value" ;;
    --mem-mb) mem=${2:-}; shift 2 || die "--mem-mb needs a value" ;;
    --hugepages-2m) huge=${2:-}; shift 2 || die "--hugepages-2m needs a value" ;;
    --distances) dists=${2:-}; shift 2 || die "--distances needs a value" ;;
    --share) shares+=("${2:-}"); shift 2 || die "--share needs a value" ;;
    --timeout) timeout=${2:-}; shift 2 || die "--timeout needs a value" ;;
    --pci) pci=1; shift ;;
    --iommu) iommu=1; shift ;;
    --net) net=1; shift ;;
    --kernel-only) kernel_only=1; shift ;;
    --guestfwd)
      isnum "${2:-}" && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || die "--guestfwd needs a port: ${2:-}"
      net=1 gports+=("$2"); shift 2 ;;
    --hostfwd)
      h=${2%%:*} g=${2#*:}
      isnum "$h" && isnum "$g" && [ "$h" -ge 1 ] && [ "$h" -le 65535 ] && [ "$g" -ge 1 ] && [ "$g" -le 65535 ] \
        || die "--hostfwd needs HOSTPORT:PORT: ${2:-}"
      net=1 fwds+=("hostfwd=tcp:127.0.0.1:$h-:$g"); shift 2 ;;
    --nodes=* | --cpus=* | --threads=* | --sockets=* | --mem-mb=* | --hugepages-2m=* | --distances=* | --share=* | --timeout=* | --guestfwd=* | --hostfwd=*)
      opt=${1%%=*}; val=${1#*=}; shift; set -- "$opt" "$val" "$@" ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done
[ $# -gt 0 ] || [ -n "$kernel_only" ] || { usage >&2; die "no command given"; }

# --- the shape of the machine ---------------------------------------------
for v in nodes threads huge timeout; do isnum "${!v}" || die "--$v must be a number: ${!v}"; done
[ "$nodes" -ge 1 ] && [ "$nodes" -le 64 ] || die "--nodes must be 1..64"
[ "$threads" -ge 1 ] || die "--threads must be at least 1"
[ "$timeout" -ge 1 ] || die "--timeout must be at least 1"
# Root bus numbers 0x20*(k+1) must stay below 0x100.
[ -z "$pci" ] || [ "$nodes" -le 7 ] || die "--pci supports at most 7 nodes"
if [ -z "$cpus" ]; then # the fewest whole cores per node that make 8 CPUs or more
  cpus=$((nodes * threads * ((8 + nodes * threads - 1) / (nodes * threads))))
fi
isnum "$cpus" && [ "$cpus" -ge 1 ] || die "--cpus must be a positive number: $cpus"
[ -n "$sockets" ] || sockets=$nodes
isnum "$sockets" && [ "$sockets" -ge 1 ] || die "--sockets must be a positive number: $sockets"
[ $((cpus % nodes)) -eq 0 ] || die "--cpus $cpus does not split evenly over $nodes nodes"
per_node=$((cpus / nodes))
[ $((per_node % threads)) -eq 0 ] || die "$per_node CPUs per node is not a whole number of $threads-thread cores"
[ $((cpus % (sockets * threads))) -eq 0 ] || die "--cpus $cpus does not make whole cores on $sockets sockets"
if [ $((nodes % sockets)) -ne 0 ] && [ $((sockets % nodes)) -ne 0 ]; then
  die "--sockets $sockets and --nodes $nodes: one must divide the other"
fi
cores=$((cpus / sockets / threads))
if [ -z "$mem" ]; then
  mem=$((256 * nodes))
  [ "$mem" -lt 1024 ] && mem=1024
  mem=$((mem + 2 * huge * nodes))
fi
isnum "$mem" || die "--mem-mb must be a number: $mem"
node_mem=$((mem / nodes / 2 * 2))
[ "$node_mem" -ge $((64 + 2 * huge)) ] || die "--mem-mb $mem leaves too little memory per node"
mem=$((node_mem * nodes))

# The distance matrix, row by row.
dist=()
if [ -n "$dists" ]; then
  IFS=', ' read -r -a dist <<<"$dists"
  [ "${#dist[@]}" -eq $((nodes * nodes)) ] || die "--distances needs $((nodes * nodes)) values, got ${#dist[@]}"
else
  for ((i = 0; i < nodes; i++)); do for ((j = 0; j < nodes; j++)); do
    if [ "$i" -eq "$j" ]; then dist+=(10); else dist+=(20); fi
  done; done
fi
for ((i = 0; i < nodes; i++)); do for ((j = 0; j < nodes; j++)); do
  d=${dist[i * nodes + j]}
  isnum "$d" || die "distance $i->$j is not a number: $d"
  if [ "$i" -eq "$j" ]; then [ "$d" -eq 10 ] || die "local distance of node $i must be 10"
  else [ "$d" -gt 10 ] && [ "$d" -le 254 ] || die "distance $i->$j must be 11..254"; fi
done; done

# --- what is needed on the host ------------------------------------------
[ "$(uname -m)" = x86_64 ] || skip "the guest runs the host's programs: x86_64 hosts only"
qemu=${NRM_VM_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null 2>&1 || skip "$qemu not found (apt-get install qemu-system-x86)"
busybox=$(command -v busybox 2>/dev/null || true)
[ -n "$busybox" ] || skip "busybox not found (apt-get install busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then skip "$busybox is not static (apt-get install busybox-static)"; fi
command -v cpio >/dev/null 2>&1 || skip "cpio not found (apt-get install cpio)"

# The modules the initramfs loads, in an order that satisfies their
# dependencies (those built into the kernel are left out); the second list
# only with --pci ('?': left out where the kernel lacks it).
want_modules="virtio_pci virtio_console 9pnet_virtio 9p overlay"
want_pci_modules="nvme e1000e virtio_gpu vfio vfio_iommu_type1 vfio_pci aer_inject?"
# With --net: the NIC, and what containerd's CNI bridge and kube-proxy's
# iptables (nf_tables) rules load on a node. crc32c_generic first: it is
# libcrc32c's soft dependency, which insmod does not follow.
want_net_modules="crc32c_generic virtio_net veth bridge br_netfilter nf_tables nft_compat nft_chain_nat nf_nat nf_conntrack
 nft_ct nft_masq nft_reject_ipv4 nft_fib_ipv4? xt_conntrack xt_comment xt_mark xt_MASQUERADE xt_addrtype xt_nat
 xt_statistic xt_multiport xt_tcpudp xt_recent xt_physdev? ipt_REJECT nf_reject_ipv4"
want_all="$want_modules | $want_pci_modules | $want_net_modules"

cache=${NRM_VM_CACHE:-/var/cache/nrm-vm}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/nrm-vm
  mkdir -p "$cache" 2>/dev/null || skip "cannot create a cache directory ($cache)"
fi

# modinfo_depends KO: the modules a .ko file depends on, from its .modinfo.
modinfo_depends () { tr '\0' '\n' <"$1" 2>/dev/null | sed -n 's/^depends=//p' | head -n 1 | tr ',' ' '; }

# extract_vmlinux BZIMAGE OUT: the ELF image inside a compressed kernel.
extract_vmlinux () {
  local magic tool off
  for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -qdc' '\x1f\x8b\x08:gzip -dc'; do
    tool=${magic#*:}
    command -v "${tool%% *}" >/dev/null 2>&1 || continue
    for off in $(LC_ALL=C grep -obUaP "${magic%%:*}" "$1" 2>/dev/null | cut -d: -f1 | head -n 5); do
      tail -c +$((off + 1)) "$1" | $tool >"$2" 2>/dev/null
      [ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = '177ELF' ] && return 0
    done
  done
  return 1
}

# unpack_kernel DEB NAME: unpack the kernel and the needed modules of a
# linux-image package into $cache/NAME (atomically).
unpack_kernel () {
  local deb=$1 name=$2 x dst modroot kver m f
  x=$(mktemp -d "$cache/.unpack.XXXXXX") || return 1
  dst=$x/out
  mkdir -p "$dst/modules"
  if ! dpkg-deb -x "$deb" "$x/root" 2>"$x/err"; then
    echo "$prog: dpkg-deb -x $deb: $(head -n 1 "$x/err")" >&2; rm -rf "$x"; return 1
  fi
  modroot=$(ls -d "$x"/root/lib/modules/*/ "$x"/root/usr/lib/modules/*/ 2>/dev/null | head -n 1)
  kver=$(basename "${modroot:-none}")
  if [ -z "$modroot" ] || [ ! -f "$x/root/boot/vmlinuz-$kver" ]; then
    echo "$prog: $deb holds no kernel and modules" >&2; rm -rf "$x"; return 1
  fi
  cp "$x/root/boot/vmlinuz-$kver" "$dst/vmlinuz"
  # A PVH kernel boots straight from its ELF image, without the BIOS and the
  # decompression of bzImage: 6 s less under TCG.
  if grep -q '^CONFIG_PVH=y' "$x/root/boot/config-$kver" 2>/dev/null; then
    extract_vmlinux "$dst/vmlinuz" "$dst/vmlinux" || rm -f "$dst/vmlinux"
  fi
  # Resolve the dependencies depth first: the load order is post-order.
  local order='' seen=' '
  visit () {
    local mod=$1 path dep optional=''
    case $mod in *'?') optional=1; mod=${mod%'?'} ;; esac
    mod=${mod//-/_}
    case $seen in *" $mod "*) return 0 ;; esac
    seen="$seen$mod "
    if grep -qE "/${mod//_/[-_]}\.ko(\.[a-z]+)?$" "$modroot/modules.builtin" 2>/dev/null; then return 0; fi
    path=$(find "$modroot/kernel" -regextype posix-extended -regex ".*/${mod//_/[-_]}\.ko(\.(xz|zst|gz))?" | head -n 1)
    [ -n "$path" ] || [ -z "$optional" ] || return 0
    [ -n "$path" ] || { echo "$prog: module $mod not in $deb" >&2; return 1; }
    case $path in
      *.xz) xz -dc "$path" >"$dst/modules/$mod.ko" ;;
      *.zst) zstd -qdc "$path" >"$dst/modules/$mod.ko" ;;
      *.gz) gzip -dc "$path" >"$dst/modules/$mod.ko" ;;
      *) cp "$path" "$dst/modules/$mod.ko" ;;
    esac || { echo "$prog: cannot unpack $path" >&2; return 1; }
    for dep in $(modinfo_depends "$dst/modules/$mod.ko"); do visit "$dep" || return 1; done
    order="$order$mod "
  }
  for m in $want_modules; do visit "$m" || { rm -rf "$x"; return 1; }; done
  echo "$order" >"$dst/modules.order"
  order=''
  for m in $want_pci_modules; do visit "$m" || { rm -rf "$x"; return 1; }; done
  echo "$order" >"$dst/modules-pci.order"
  order=''
  for m in $want_net_modules; do visit "$m" || { rm -rf "$x"; return 1; }; done
  echo "$order" >"$dst/modules-net.order"
  echo "$want_all" >"$dst/modules.want"
  echo "$kver" >"$dst/kernel.release"
  dpkg-deb -f "$deb" Package Version >"$dst/package" 2>/dev/null
  rm -rf "${cache:?}/$name"
  mv "$dst" "$cache/$name" && rm -rf "$x"
}

# cached DIR: DIR holds a kernel unpacked with the modules wanted now (a
# cache made before the module lists changed is unpacked again).
cached () { [ -f "$1/vmlinuz" ] && [ "$(cat "$1/modules.want" 2>/dev/null)" = "$want_all" ]; }

# Find (or fetch) the kernel: the one linux-image-amd64 depends on.
get_kernel () {
  local pkg='' d deb
  if [ -n "${NRM_VM_KERNEL_DEB:-}" ]; then
    [ -f "$NRM_VM_KERNEL_DEB" ] || { echo "$prog: NRM_VM_KERNEL_DEB=$NRM_VM_KERNEL_DEB not found" >&2; return 1; }
    pkg=$(dpkg-deb -f "$NRM_VM_KERNEL_DEB" Package 2>/dev/null) || return 1
    cached "$cache/$pkg" || unpack_kernel "$NRM_VM_KERNEL_DEB" "$pkg" || return 1
    kdir=$cache/$pkg; return 0
  fi
  if command -v apt-cache >/dev/null 2>&1; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ <>]*\)$/\1/p' | head -n 1)
  fi
  if [ -n "$pkg" ] && cached "$cache/$pkg"; then kdir=$cache/$pkg; return 0; fi
  if [ -n "$pkg" ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    d=$(mktemp -d "$cache/.download.XXXXXX") || return 1
    echo "$prog: fetching $pkg into $cache (once)" >&2
    if (cd "$d" && apt-get download "$pkg" >"$d/log" 2>&1); then
      deb=$(ls "$d"/*.deb 2>/dev/null | head -n 1)
      if [ -n "$deb" ] && unpack_kernel "$deb" "$pkg"; then rm -rf "$d"; kdir=$cache/$pkg; return 0; fi
    else
      echo "$prog: apt-get download $pkg failed: $(grep -E '^(E|W):' "$d/log" | head -n 1)" >&2
    fi
    rm -rf "$d"
  fi
  # Offline, or no package lists: the newest kernel already in the cache.
  d=$(ls -d "$cache"/linux-image-*/vmlinuz 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] || return 1
  kdir=$(dirname "$d")
}

kdir=''
{
  command -v flock >/dev/null 2>&1 && flock -w 600 9
  get_kernel
} 9>"$cache/.lock"
[ -n "$kdir" ] && [ -f "$kdir/vmlinuz" ] && [ -f "$kdir/modules.order" ] \
  || skip "no guest kernel: apt-get update, then apt-get download linux-image-amd64 must work (or set NRM_VM_KERNEL_DEB)"
if [ -n "$pci" ]; then
  [ -f "$kdir/modules-pci.order" ] || skip "$kdir has no PCI driver modules (remove it to fetch it again)"
fi
if [ -n "$net" ]; then
  [ -f "$kdir/modules-net.order" ] || skip "$kdir has no network modules (remove it to fetch it again)"
fi
for m in $(cat "$kdir/modules.order") $([ -n "$pci" ] && cat "$kdir/modules-pci.order") \
  $([ -n "$net" ] && cat "$kdir/modules-net.order"); do
  [ -f "$kdir/modules/$m.ko" ] || skip "module $m missing from $kdir (remove it to fetch it again)"
done
[ -z "$kernel_only" ] || exit 0

# --- the run ----------------------------------------------------------------
# Under TCG one thread runs all the vCPUs: with a thread per vCPU, qemu 7.2
# hung about one boot in 30 (after "sched_clock: Marking stable") and once
# crashed; 60 boots in a row passed with one thread, and were no slower.
accel=${NRM_VM_ACCEL:-}
if [ -z "$accel" ]; then
  accel=tcg,thread=single
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then accel=kvm; fi
fi
if [ "$accel" = kvm ]; then cpu_model=host; else cpu_model=max,vendor=GenuineIntel; fi
cpu_model=${NRM_VM_CPU:-$cpu_model}

cwd=$(pwd -P) || die "cannot read the current directory"
# Shared read-write: the git work tree that holds the current directory (else
# the current directory itself), and each --share; parents are mounted first.
top=$(git rev-parse --show-toplevel 2>/dev/null || true)
[ -n "$top" ] && [ -d "$top" ] && top=$(cd "$top" && pwd -P) || top=$cwd
list=()
[ "$top" != / ] && list+=("$top")
for d in ${shares[@]+"${shares[@]}"}; do
  d=$(cd "$d" 2>/dev/null && pwd -P) || die "--share: no such directory: $d"
  [ "$d" != / ] || die "--share /: the root is already shared (read-only)"
  case $d in *$'\n'*) die "--share: a path with a newline: $d" ;; esac
  list+=("$d")
done
shares=()
if [ ${#list[@]} -gt 0 ]; then
  while IFS= read -r d; do shares+=("$d"); done < <(printf '%s\n' "${list[@]}" | LC_ALL=C sort -u)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nrm-vm.XXXXXX") || die "cannot create a temporary directory"
qpid='' cat_pids=()
cleanup () {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
  # Release readers still waiting for qemu to open their fifo.
  for f in "$tmp/stdout" "$tmp/stderr"; do [ -p "$f" ] && : <>"$f"; done
  [ ${#cat_pids[@]} -gt 0 ] && wait "${cat_pids[@]}" 2>/dev/null
  if [ -n "${NRM_VM_DEBUG:-}" ]; then echo "$prog: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# sq WORD: WORD quoted for a POSIX shell.
sq () { local q="'\\''"; printf "'%s'" "${1//\'/$q}"; }

# The initramfs: busybox, the modules, /init, and the command to run.
ird=$tmp/initramfs
mkdir -p "$ird/bin" "$ird/modules" "$ird/proc" "$ird/sys" "$ird/dev" "$ird/lower" "$ird/upper" "$ird/newroot"
cp "$busybox" "$ird/bin/busybox"
for m in $(cat "$kdir/modules.order") $([ -n "$pci" ] && cat "$kdir/modules-pci.order") \
  $([ -n "$net" ] && cat "$kdir/modules-net.order"); do
  cp "$kdir/modules/$m.ko" "$ird/modules/"
done
cp "$kdir/modules.order" "$ird/modules.order"
if [ -n "$pci" ]; then cp "$kdir/modules-pci.order" "$ird/modules-pci.order"; else : >"$ird/modules-pci.order"; fi
if [ -n "$net" ]; then cp "$kdir/modules-net.order" "$ird/modules-net.order"; else : >"$ird/modules-net.order"; fi
{
  echo "NODES=$nodes"
  echo "HUGEPAGES=$huge"
  echo "ACCEL=$accel"
  echo "NET=${net:-0}"
  echo "SHARES=${#shares[@]}"
  for i in "${!shares[@]}"; do echo "SHARE_$i=$(sq "${shares[i]}")"; done
} >"$ird/config"
{
  echo "# the command, as vm.sh was given it"
  while IFS= read -r name; do
    case $name in PWD | OLDPWD | SHLVL | _ | *[!A-Za-z0-9_]*) continue ;; esac
    echo "export $name=$(sq "${!name}")"
  done < <(compgen -e)
  echo "cd $(sq "$cwd") || { echo \"vm.sh: cannot enter $(sq "$cwd") in the guest\" >&2; exit 125; }"
  printf 'exec'
  for a in "$@"; do printf ' %s' "$(sq "$a")"; done
  echo
} >"$ird/run.sh"
cat >"$ird/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
hostname nrm-vm
. /config
# Progress marks in the kernel log (the console log of NRM_VM_DEBUG=1).
mark () { echo "<4>vm-init: $*" >/dev/kmsg; }
fail () {
  echo "vm-init: $*" >&2
  [ -n "${status:-}" ] && echo "init-error: $*" >&5
  poweroff -f
}
mark "loading modules"
for m in $(cat /modules.order); do insmod "/modules/$m.ko" || fail "insmod $m"; done
# The PCI drivers (--pci) after the mounts' modules; as modprobe would, each
# gets its MODULE.PARAM=VALUE options from the kernel command line.
for m in $(cat /modules-pci.order); do
  set --
  for a in $(cat /proc/cmdline); do case $a in "$m".*=*) set -- "$@" "${a#"$m".}" ;; esac; done
  insmod "/modules/$m.ko" "$@" || fail "insmod $m $*"
done
for m in $(cat /modules-net.order); do insmod "/modules/$m.ko" || fail "insmod $m"; done
if [ "$NET" = 1 ]; then
  # qemu's user network: the guest is 10.0.2.15, the host's side 10.0.2.2.
  # Its NIC is found by MAC: with --pci the e1000e (loaded first) take eth0..
  nic=
  for n in /sys/class/net/*; do
    [ "$(cat "$n/address")" = 52:54:00:12:34:56 ] && nic=${n##*/}
  done
  [ -n "$nic" ] || fail "no NIC with MAC 52:54:00:12:34:56"
  ip link set lo up && ip link set "$nic" up && ip addr add 10.0.2.15/24 dev "$nic" \
    && ip route add default via 10.0.2.2 || fail "network setup"
fi
# The virtio ports, by name.
port () {
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    for p in /sys/class/virtio-ports/*; do
      if [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && [ -c "/dev/${p##*/}" ]; then echo "/dev/${p##*/}"; return 0; fi
    done
    sleep 0.05
  done
  return 1
}
status=$(port nrm.status) || { status=''; fail "no status port"; }
exec 5>"$status"
out=$(port nrm.stdout) || fail "no stdout port"
err=$(port nrm.stderr) || fail "no stderr port"
# A port can be open only once: hold them on fds 3, 4 and 5.
exec 3>"$out" 4>"$err" 2>&4
mark "mounting"
# The host's root, read-only, under a tmpfs overlay.
opts=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$opts,ro,cache=loose" hostroot /lower || fail "mount hostroot"
mount -t tmpfs -o mode=0755 upper /upper || fail "mount tmpfs"
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w,index=off,metacopy=off,redirect_dir=off,xino=off \
  overlay /newroot || fail "mount overlay"
r=/newroot
mount -t proc proc $r/proc || fail "mount proc"
mount -t sysfs sys $r/sys || fail "mount sysfs"
mount -t devtmpfs dev $r/dev || fail "mount devtmpfs"
mkdir -p $r/dev/pts $r/dev/shm $r/dev/hugepages
mount -t devpts -o newinstance,ptmxmode=0666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 shm $r/dev/shm
mount -t hugetlbfs hugetlbfs $r/dev/hugepages
mount -t tmpfs -o mode=0755 run $r/run || fail "mount /run"
mount -t cgroup2 cgroup2 $r/sys/fs/cgroup || fail "mount cgroup2"
echo "+cpuset +cpu +memory +hugetlb" >$r/sys/fs/cgroup/cgroup.subtree_control || fail "enable cgroup controllers"
i=0
while [ $i -lt "$SHARES" ]; do
  eval "dir=\$SHARE_$i"
  mkdir -p "$r$dir" && mount -t 9p -o "$opts,cache=mmap" "share$i" "$r$dir" || fail "mount $dir"
  i=$((i + 1))
done
if [ "$HUGEPAGES" -gt 0 ]; then
  for n in /sys/devices/system/node/node*; do
    echo "$HUGEPAGES" >"$n/hugepages/hugepages-2048kB/nr_hugepages" || fail "huge pages on ${n##*/}"
    got=$(cat "$n/hugepages/hugepages-2048kB/nr_hugepages")
    [ "$got" -eq "$HUGEPAGES" ] || fail "only $got of $HUGEPAGES huge pages on ${n##*/}"
  done
fi
mark "running the command"
mkdir -p $r/run/nrm-vm
cp /run.sh $r/run/nrm-vm/run.sh
echo started >&5
chroot $r /bin/sh /run/nrm-vm/run.sh </dev/null >&3 2>&4 3>&- 4>&- 5>&-
rc=$?
mark "command exited $rc"
exec 2>/dev/console 3>&- 4>&-
# With KVM the host takes the last output asynchronously: give it a moment.
[ "$ACCEL" = kvm ] && sleep 0.3
echo "rc $rc" >&5
mark "syncing"
sync
i=$((SHARES - 1))
while [ $i -ge 0 ]; do eval "umount \"\$r\$SHARE_$i\""; i=$((i - 1)); done
# Nothing is left to lose: the host may stop the VM now, without waiting for
# the devices' shutdown (the e1000e take 2 s each under TCG).
echo done >&5
mark "powering off"
poweroff -f
EOF
chmod 0755 "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet) >"$tmp/initrd" || die "cpio failed"

# qemu's arguments.
kernel=$kdir/vmlinuz
[ -f "$kdir/vmlinux" ] && kernel=$kdir/vmlinux
# PCIe root complexes and vIOMMU need q35; the firmware stays qemu's default,
# SeaBIOS (qboot would not enumerate the expander buses).
machine=pc append=''
[ -n "$pci$iommu" ] && machine=q35
# Without udev nothing else would keep fbdev off virtio-gpu (a flood of
# warnings under TCG) or give each NVMe in a subsystem a PCI parent.
[ -n "$pci" ] && append="$append drm_kms_helper.fbdev_emulation=0 nvme_core.multipath=N"
[ -n "$iommu" ] && append="$append intel_iommu=on"
# shellcheck disable=SC2054 # commas inside qemu's option values
args=(-accel "$accel" -cpu "$cpu_model" -machine "$machine"
  -smp "$cpus,sockets=$sockets,cores=$cores,threads=$threads" -m "${mem}M"
  -nodefaults -no-user-config -display none -no-reboot
  -kernel "$kernel" -initrd "$tmp/initrd"
  -append "console=ttyS0 quiet loglevel=5 panic=-1 rdinit=/init$append${NRM_VM_APPEND:+ $NRM_VM_APPEND}"
  -serial "file:$tmp/console.log")
# The vIOMMU before every other device, so that it covers them all.
[ -n "$iommu" ] && args+=(-device intel-iommu,intremap=off)
args+=(-device virtio-serial-pci
  -chardev "file,id=out,path=$tmp/stdout" -device virtserialport,chardev=out,name=nrm.stdout
  -chardev "file,id=err,path=$tmp/stderr" -device virtserialport,chardev=err,name=nrm.stderr
  -chardev "file,id=st,path=$tmp/status" -device virtserialport,chardev=st,name=nrm.status
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap)
for i in "${!shares[@]}"; do
  args+=(-virtfs "local,path=${shares[i]},mount_tag=share$i,security_model=none,multidevs=remap")
done
if [ -n "$net" ]; then
  netdev=user,id=net0,restrict=on
  for f in ${fwds[@]+"${fwds[@]}"}; do netdev="$netdev,$f"; done
  # cmd: one relay per connection (a chardev would carry only the first).
  for p in ${gports[@]+"${gports[@]}"}; do netdev="$netdev,guestfwd=tcp:10.0.2.100:$p-cmd:$busybox nc 127.0.0.1 $p"; done
  args+=(-netdev "$netdev" -device virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56)
fi
if [ -n "$pci" ]; then
  # After the devices placed on the first free slot, which would otherwise go
  # behind the last root complex.  Node k: root complex pxb<k> on bus
  # 0x20*(k+1), one root port per endpoint (so each endpoint has its own
  # IOMMU group); fixed MACs and serials.
  for ((k = 0; k < nodes; k++)); do
    bus=$(printf '0x%02x' $((0x20 * (k + 1))))
    args+=(-device "pxb-pcie,id=pxb$k,bus_nr=$bus,numa_node=$k,bus=pcie.0")
    ports=(g n s)
    [ "$k" -eq $((nodes - 1)) ] && ports+=(v)
    for i in "${!ports[@]}"; do
      args+=(-device "pcie-root-port,id=rp$k${ports[i]},bus=pxb$k,chassis=$((k * 4 + i + 1)),slot=0")
    done
    args+=(-device "virtio-gpu-pci,bus=rp${k}g"
      -device "e1000e,bus=rp${k}n,mac=52:54:00:00:0$k:01"
      -blockdev "driver=null-co,node-name=nvm$k,size=1073741824,read-zeroes=on"
      -device "nvme,serial=nrm-nvme$k,drive=nvm$k,bus=rp${k}s")
    if [ "$k" -eq $((nodes - 1)) ]; then
      args+=(-blockdev "driver=null-co,node-name=nvmvf,size=1073741824,read-zeroes=on"
        -device nvme-subsys,id=subsys0
        -device "nvme,id=nvmepf,serial=nrm-sriov,subsys=subsys0,bus=rp${k}v,sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2"
        -device nvme-ns,drive=nvmvf,bus=nvmepf,nsid=1)
    fi
  done
fi
cpu0=0
for ((n = 0; n < nodes; n++)); do
  args+=(-object "memory-backend-ram,id=m$n,size=${node_mem}M"
    -numa "node,nodeid=$n,cpus=$cpu0-$((cpu0 + per_node - 1)),memdev=m$n")
  cpu0=$((cpu0 + per_node))
done
if [ "$nodes" -gt 1 ]; then
  for ((i = 0; i < nodes; i++)); do for ((j = 0; j < nodes; j++)); do
    [ "$i" -ne "$j" ] && args+=(-numa "dist,src=$i,dst=$j,val=${dist[i * nodes + j]}")
  done; done
fi

# Boot; a VM that has not started COMMAND within the boot timeout is booted
# again (under TCG a boot hangs now and then, and nothing has run yet).
boot_timeout=${NRM_VM_BOOT_TIMEOUT:-60}
isnum "$boot_timeout" || die "NRM_VM_BOOT_TIMEOUT must be a number"
debug "booting $kdir ($accel): $cpus CPUs ($sockets sockets, $cores cores, $threads threads), $nodes nodes of ${node_mem} MiB"
debug "$qemu ${args[*]}"
# One VM at a time on this machine (make -j runs VM tests side by side):
# under TCG two guests share the host's cores and each runs past its
# timeout. The timeout counts from here, once the machine is ours.
exec 9>"${NRM_VM_LOCK:-${TMPDIR:-/tmp}/nrm-vm-boot.lock}"
flock 9
SECONDS=0
attempt=0
while :; do
  attempt=$((attempt + 1))
  rm -f "$tmp/stdout" "$tmp/stderr"
  mkfifo "$tmp/stdout" "$tmp/stderr" || die "mkfifo failed"
  : >"$tmp/status"
  : >"$tmp/console.log"
  cat "$tmp/stdout" &
  cat_pids+=($!)
  cat "$tmp/stderr" >&2 &
  cat_pids+=($!)
  left=$((timeout - SECONDS))
  [ "$left" -ge 1 ] || left=1
  start=$(date +%s.%N)
  boot_start=$SECONDS
  timeout --foreground -k 5 "$left" "$qemu" "${args[@]}" </dev/null >"$tmp/qemu.log" 2>&1 &
  qpid=$!
  booted='' hung=''
  while kill -0 "$qpid" 2>/dev/null; do
    if grep -q '^started' "$tmp/status" 2>/dev/null; then booted=1; break; fi
    if [ "$SECONDS" -ge "$timeout" ]; then break; fi
    if [ $((SECONDS - boot_start)) -ge "$boot_timeout" ]; then
      kill "$qpid" 2>/dev/null
      hung=1
      break
    fi
    sleep 0.2
  done
  # Once the guest has synced and unmounted the shares, its power-off is
  # only waited for.
  if [ -n "$booted" ]; then
    while kill -0 "$qpid" 2>/dev/null && [ "$SECONDS" -lt "$timeout" ]; do
      if grep -q '^done' "$tmp/status" 2>/dev/null; then kill "$qpid" 2>/dev/null; break; fi
      sleep 0.1
    done
  fi
  wait "$qpid"
  qrc=$?
  qpid=''
  for f in "$tmp/stdout" "$tmp/stderr"; do : <>"$f"; done
  wait "${cat_pids[@]}" 2>/dev/null
  cat_pids=()
  debug "qemu exited $qrc after $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
  if [ -n "${NRM_VM_DEBUG:-}" ]; then
    sed "s/^/console: /" "$tmp/console.log" >&2
    sed "s/^/qemu: /" "$tmp/qemu.log" >&2
  fi
  grep -q '^started' "$tmp/status" && booted=1
  # Booted, a failure of /init, out of time or of tries: no more boots.
  if [ -n "$booted" ] || grep -q '^init-error' "$tmp/status" || [ "$SECONDS" -ge "$timeout" ] || [ "$attempt" -ge 3 ]; then
    break
  fi
  if [ -n "$hung" ]; then why="had not started the command after $boot_timeout s"; else why="stopped (qemu exit $qrc)"; fi
  echo "$prog: the VM $why, at: $(tail -n 1 "$tmp/console.log" | tr -d '\r' | cut -c1-100); booting again" >&2
done

rc=$(tr -d '\r' <"$tmp/status" | sed -n 's/^rc //p' | tail -n 1)
[ -n "$rc" ] && isnum "$rc" && exit "$rc"
st=$(tr -d '\r' <"$tmp/status" | tail -n 1)
if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ] || [ "$SECONDS" -ge "$timeout" ]; then
  echo "$prog: timed out after $timeout s" >&2
  sed "s/^/$prog: console: /" "$tmp/console.log" | tail -n 20 >&2
  exit 124
fi
echo "$prog: the VM failed (qemu exit $qrc${st:+, $st}, $attempt boot(s))" >&2
sed "s/^/$prog: qemu: /" "$tmp/qemu.log" | tail -n 5 >&2
sed "s/^/$prog: console: /" "$tmp/console.log" | tail -n 20 >&2
exit 125
