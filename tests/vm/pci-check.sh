#!/bin/sh
# nrm's PCI discovery against a real kernel (tests/vm/vm.sh --pci --iommu):
# after one boot of a 2-node VM with a PCIe root complex per node, in which
# tests/vm/pci-guest.sh prints the kernel's view (sysfs, /sys/class, /dev)
# and nrm's, and moves the e1000e on node 1 to vfio-pci and back.  From that
# output only, it checks
#   - the layout: every function behind node k's root complex (bus
#     0x20*(k+1)) has numa_node k and lies under pci0000:<bus>; bus 00 has
#     none; the SR-IOV NVMe's VFs have their PF's node, root and a group of
#     their own; no two endpoints share an IOMMU group; the drivers' device
#     nodes exist;
#   - nrm topology --json: every pciDevices entry's busID, pcieRoot and
#     numaNode against sysfs, and every function behind a root complex listed;
#   - nrm slices --drivers cpu,memory,pci, where nrm has the pci driver (else
#     a note): every published device's pciBusID, pcieRoot and numaNode, and
#     every GPU, NIC and NVMe function published;
#   - vfio-pci: driver_override + unbind + drivers_probe gives /dev/vfio/<group>,
#     and the same back to e1000e removes it and brings the interface back.
#
#   pci-check.sh OUTPUT   (vmtest.sh tests/vm/pci.vm runs it on the guest's
#                         output; a kept OUTPUT can be checked again without a
#                         boot, to see each check fail on a changed copy)
# NRM_VM_PCI_KEEP=FILE keeps the guest's output.  With a snapshot (pci.vm's
# command with a directory after @NRM@, tests/fixtures/sysfs-vm-pci.md) it
# also checks that the guest copied its PCI sysfs there (pci-tree.sh).
# Exit 0: passed, 1: failed.
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: pci-check.sh OUTPUT" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nrm-vmpci.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
cp "$1" "$TMP/out" || exit 1
. "$here/check-lib.sh"
. "$here/json.sh"

nodes=2
section () { awk -v s="@@ $1" '$0 == s { f = 1; next } /^@@ / { f = 0 } f' "$TMP/out"; }
section sysfs >"$TMP/sysfs"
section class >"$TMP/class"
section vfio >"$TMP/vfio"
[ -n "${NRM_VM_PCI_KEEP:-}" ] && cp "$TMP/out" "$NRM_VM_PCI_KEEP"

# The kernel's view, one line per function: "BDF numa root class driver group physfn".
awk '{ for (i = 3; i <= NF; i++) { k = $i; sub(/=.*/, "", k); v[k] = substr($i, length(k) + 2) }
       root = v["path"]; sub(/^\/sys\/devices\//, "", root); sub(/\/.*/, "", root)
       print $2, v["numa_node"], root, substr(v["class"], 3, 4), v["driver"], v["iommu_group"], v["physfn"] }' \
  "$TMP/sysfs" | sort >"$TMP/truth"
check "PCI functions seen in sysfs" yes "$([ -s "$TMP/truth" ] && echo yes || echo no)"
echo "ground truth (BDF numa_node root class driver iommu_group physfn):"
sed 's/^/  /' "$TMP/truth"

# The layout vm.sh --pci promises.
bad=$(awk -v nodes=$nodes '
  { bus = 16 * (index("0123456789abcdef", substr($1, 6, 1)) - 1) + index("0123456789abcdef", substr($1, 7, 1)) - 1 }
  bus == 0 { if ($2 != -1 || $3 != "pci0000:00") printf " %s:numa=%s,root=%s", $1, $2, $3; next }
  { k = int(bus / 32) - 1; want = sprintf("pci0000:%02x", 32 * (k + 1))
    if (k < 0 || k >= nodes || $2 != k || $3 != want) printf " %s:numa=%s,root=%s(want node %d, %s)", $1, $2, $3, k, want }' "$TMP/truth")
verdict "every function behind node k's root complex (bus 0x20*(k+1)) has numa_node k and root pci0000:<bus>; bus 00 none and pci0000:00" "$bad"
k=0
while [ $k -lt $nodes ]; do
  bus=$(printf '%02x' $((0x20 * (k + 1))))
  got=$(awk -v r="pci0000:$bus" '$3 == r && $4 != "0604" { print $4 }' "$TMP/truth" | sort | tr '\n' ' ')
  want="0108 0200 0380 " # virtio-gpu is a display controller "other"
  [ $k -eq $((nodes - 1)) ] && want="0108 0108 0108 0108 0200 0380 "
  check "node $k: endpoint classes under pci0000:$bus" "$want" "$got"
  k=$((k + 1))
done
sriov=$(section sriov)
check "SR-IOV PF: sriov_numvfs after writing 2" 2 "$(echo "$sriov" | sed -n 's/.*numvfs=\([0-9]*\).*/\1/p')"
pf=$(echo "$sriov" | awk '{ print $2; exit }')
bad=$(awk -v pf="$pf" '$1 == pf { n = $2; r = $3; g = $6 } $7 == pf { vf[$1] = $2 " " $3 " " $6 }
  END { c = 0; for (v in vf) { c++; split(vf[v], a, " "); if (a[1] != n || a[2] != r || a[3] == g) printf " %s:%s", v, vf[v] }
        if (c != 2) printf " %d VFs with physfn %s", c, pf }' "$TMP/truth")
verdict "the 2 VFs of $pf link to it (physfn), share its numa_node and root, and have IOMMU groups of their own" "$bad"
bad=$(awk '$4 != "0604" && $4 != "0600" && $3 != "pci0000:00" { if ($6 == "-" || ($6 in seen)) printf " %s:group=%s(%s)", $1, $6, seen[$6]; seen[$6] = $1 }' "$TMP/truth")
verdict "every endpoint behind a root complex is alone in its IOMMU group" "$bad"

# The drivers' entries and device nodes (devtmpfs, no udev).
bad=$(awk 'NR == FNR { c = substr($4, 1, 2); if (c == "03") want[$1] = "gpu"; else if ($4 == "0108") want[$1] = "nvme"
                        else if (c == "02") want[$1] = "nic"; if ($7 != "-") vf[$1] = 1; next }
  { for (i = 4; i <= NF; i++) { k = $i; sub(/=.*/, "", k); v[k] = substr($i, length(k) + 2) }
    d = v["device"]
    if ($2 == "drm" && $3 ~ /^card[0-9]+$/) { card[d]++; if (v["kind"] != "c") printf " %s:%s", $3, v["kind"] }
    if ($2 == "drm" && $3 ~ /^renderD[0-9]+$/) { render[d]++; if (v["kind"] != "c") printf " %s:%s", $3, v["kind"] }
    if ($2 == "nvme") { ctrl[d]++; if (v["kind"] != "c") printf " %s:%s", $3, v["kind"] }
    if ($2 == "net") net[d]++ }
  END { for (b in want) {
          if (want[b] == "gpu" && (card[b] != 1 || render[b] != 1)) printf " %s:card=%d,render=%d", b, card[b], render[b]
          if (want[b] == "nvme" && !(b in vf) && ctrl[b] != 1) printf " %s:nvme=%d", b, ctrl[b]
          if (want[b] == "nic" && net[b] != 1) printf " %s:net=%d", b, net[b] } }' "$TMP/truth" "$TMP/class")
verdict "each GPU has a /dev/dri card and render node, each NVMe PF a /dev/nvmeN, each NIC an interface" "$bad"
echo "class entries:"
grep -v '^class net lo ' "$TMP/class" | sed 's/^/  /'

# nrm topology --json against it.
section topology >"$TMP/topo.json"
check "nrm topology --json exit status" "@@ rc 0" "$(grep '^@@ rc' "$TMP/out" | sed -n 1p)"
if flatten <"$TMP/topo.json" >"$TMP/t" 2>"$TMP/e"; then
  awk '{ k = $0; sub(/=.*/, "", k); v = substr($0, length(k) + 2) }
       k ~ /^pciDevices\.[0-9]+\.busID$/ { split(k, a, "."); id[a[2]] = v }
       k ~ /^pciDevices\.[0-9]+\.pcieRoot$/ { split(k, a, "."); root[a[2]] = v }
       k ~ /^pciDevices\.[0-9]+\.numaNode$/ { split(k, a, "."); numa[a[2]] = (v == "null" ? -1 : v) }
       END { for (i in id) print id[i], numa[i], root[i] }' "$TMP/t" | sort >"$TMP/nrm"
  check "pciDevices entries" yes "$([ -s "$TMP/nrm" ] && echo yes || echo no)"
  bad=$(awk 'NR == FNR { t[$1] = $2 " " $3; next }
    { if (!($1 in t)) printf " %s:not in sysfs", $1; else if (t[$1] != $2 " " $3) printf " %s:nrm=%s/%s,sysfs=%s", $1, $2, $3, t[$1] }' \
    "$TMP/truth" "$TMP/nrm")
  verdict "every pciDevices entry ($(wc -l <"$TMP/nrm")) has the busID, numaNode and pcieRoot of sysfs" "$bad"
  bad=$(awk 'NR == FNR { n[$1] = 1; next } $3 != "pci0000:00" && $4 != "0604" && !($1 in n) { printf " %s", $1 }' "$TMP/nrm" "$TMP/truth")
  verdict "every function behind a root complex is in pciDevices" "$bad"
else
  fail "nrm topology --json is not JSON: $(head -c 300 "$TMP/e")"
fi

# nrm slices with the pci driver, where nrm has it.
section slices >"$TMP/slices.all"
src=$(grep '^@@ rc' "$TMP/out" | sed -n 2p)
serr=$(awk '$0 == "@@ slices" { s = 1 } s && $0 == "@@ stderr" { f = 1; next } f && /^@@ / { exit } f' "$TMP/out")
if [ "$src" != "@@ rc 0" ] && echo "$serr" | grep -q 'unknown driver .pci'; then
  echo "NOTE: this nrm has no pci driver ($(echo "$serr" | head -n 1)): the ResourceSlices are not checked, only the topology"
else
  check "nrm slices --drivers cpu,memory,pci exit status" "@@ rc 0" "$src${serr:+ ($serr)}"
  cp "$TMP/slices.all" "$TMP/slices.json"
  if flatten <"$TMP/slices.json" >"$TMP/s" 2>"$TMP/e"; then
    awk '{ k = $0; sub(/=.*/, "", k); v = substr($0, length(k) + 2); split(k, a, ".") }
      k ~ /^items\.[0-9]+\.spec\.driver$/ { drv[a[2]] = v }
      k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.name$/ { name[a[2] "." a[5]] = v }
      k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.resource\.kubernetes\.io\/pciBusID\.string$/ { id[a[2] "." a[5]] = v }
      k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.resource\.kubernetes\.io\/pcieRoot\.string$/ { root[a[2] "." a[5]] = v }
      k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.resource\.kubernetes\.io\/numaNode\.int$/ { numa[a[2] "." a[5]] = v }
      END { for (d in name) { split(d, b, "."); if (drv[b[1]] == "pci.nrm.io")
              print (d in id ? id[d] : "-"), (d in numa ? numa[d] : -1), (d in root ? root[d] : "-"), name[d] } }' \
      "$TMP/s" | sort >"$TMP/pub"
    echo "published: $(awk '{ print $4 }' "$TMP/pub" | tr '\n' ' ')"
    bad=$(awk 'NR == FNR { t[$1] = $2 " " $3; next }
      { n = $1; gsub(/[:.]/, "-", n)
        if (!($1 in t)) printf " %s:%s not in sysfs", $4, $1
        else if (t[$1] != $2 " " $3) printf " %s:slice=%s/%s,sysfs=%s", $4, $2, $3, t[$1]
        else if ($4 !~ ("^[a-z]+-" n "$")) printf " %s:name does not match %s", $4, $1 }' "$TMP/truth" "$TMP/pub")
    verdict "every pci.nrm.io device ($(wc -l <"$TMP/pub")) has the pciBusID, numaNode and pcieRoot of sysfs and is named after it" "$bad"
    # An SR-IOV PF whose VFs are enabled is not published: its VFs are.
    # (the driver field may be empty: a PF is any bus id after the class)
    bad=$(awk 'NR == FNR { p[$1] = 1; next }
      { for (i = 5; i <= NF; i++) if ($i ~ /^[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:/) pf[$i] = 1; t[FNR] = $0 }
      END { for (i in t) { split(t[i], f, " ")
              if ((f[4] ~ /^030[02]$/ || f[4] == "0380" || f[4] ~ /^02/ || f[4] == "0108") && !(f[1] in p) && !(f[1] in pf))
                printf " %s(%s)", f[1], f[4] } }' "$TMP/pub" "$TMP/truth")
    verdict "every GPU, NIC and NVMe function is published (a PF with enabled VFs through its VFs)" "$bad"
    bad=$(awk 'NR == FNR { for (i = 5; i <= NF; i++) if ($i ~ /^[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:/) pf[$i] = 1; next }
      ($1 in pf) { printf " %s", $1 }' "$TMP/truth" "$TMP/pub")
    verdict "no SR-IOV PF with enabled VFs is published beside them" "$bad"
  else
    fail "nrm slices is not JSON: $(head -c 300 "$TMP/e")"
  fi
fi

# vfio-pci and back.
echo "vfio:"
sed 's/^/  /' "$TMP/vfio"
first=$(awk '$1 == "vfio" && $2 ~ /^0000:/' "$TMP/vfio")
bound=$(awk '$1 == "vfio" && $2 == "bound"' "$TMP/vfio")
back=$(awk '$1 == "vfio" && $2 == "back"' "$TMP/vfio")
field () { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
nicbdf=$(echo "$first" | awk '{ print $2 }')
grp=$(field "$first" group)
check "the e1000e on node 1 is alone in its IOMMU group" "$nicbdf" "$(field "$first" members)"
check "after driver_override=vfio-pci, unbind, drivers_probe: its driver" vfio-pci "$(field "$bound" driver)"
check "its group's node /dev/vfio/$grp" c "$(field "$bound" kind)"
check "its /sys/class/vfio/$grp/dev is MAJOR:MINOR" yes "$(field "$bound" dev | grep -qx '[0-9]*:[0-9]*' && echo yes || echo no)"
check "the container /dev/vfio/vfio" c "$(field "$bound" container)"
check "its interface is gone while on vfio-pci" - "$(field "$bound" net)"
check "after clearing driver_override, unbind, drivers_probe: its driver" e1000e "$(field "$back" driver)"
check "/dev/vfio/$grp after the move back" gone "$(field "$back" kind)"
check "its interface is back" yes "$([ "$(field "$back" net)" != - ] && [ -n "$(field "$back" net)" ] && echo yes || echo no)"
snap=$(sed -n 's/^snapshot \(\/.*\)/\1/p' "$TMP/vfio")
if grep -q '^snapshot failed' "$TMP/vfio"; then
  fail "the snapshot: $(grep '^snapshot failed' "$TMP/vfio")"
elif [ -n "$snap" ]; then
  check "the snapshot in $snap" yes "$([ -d "$snap/sys" ] && echo yes || echo no)"
fi
finish
