#!/bin/sh
# The PCI driver end to end on a real kernel: one boot of a 2-node VM with
# PCIe devices on both nodes and an emulated IOMMU (tests/vm/vm.sh --pci
# --iommu), in which tests/vm/pci-plugin-guest.sh runs `nrm plugin` with the
# cpu, memory and pci drivers on claims from a folder: a GPU, CPUs and
# memory on node 1 prepared and run in a podman container with their CDI
# ids; the passthrough twin of node 1's e1000e bound to vfio-pci and given
# back, also across a kill -9 of the plugin; an NVMe removed and rescanned;
# a corrected AER error in the health stream; and tests/gpu/check.sh.
# Exit 0: passed, 1: failed, 77: skipped (no qemu, kernel or modules).
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
src=${NRM_SRCDIR:-$(cd "$here/../.." && pwd -P)}
build=$(cd "$(dirname "${NRM:?run through make check, or give NRM=BUILDDIR/nrm/nrm}")/.." && pwd -P)
for f in "$build/nrm/nrm" "$build/nrm/nrm-hook" "$build/tests/plugin/dra-client"; do
  [ -x "$f" ] || { echo "FAIL: $f is not built (make check builds it)"; exit 1; }
done
command -v busybox >/dev/null 2>&1 || { echo "SKIP: busybox not found (apt-get install busybox-static)"; exit 77; }
out=$(mktemp "${TMPDIR:-/tmp}/nrm-vmpp.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
start=$(date +%s)
"$here/vm.sh" --nodes 2 --cpus 8 --pci --iommu --share "$build" --timeout "${NRM_VM_TIMEOUT:-600}" -- \
  busybox sh "$here/pci-plugin-guest.sh" "$build" "$src" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 77 ] && exit 77
echo "boot, checks and poweroff took $(($(date +%s) - start)) s"
exit $rc
