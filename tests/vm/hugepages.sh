#!/bin/sh
# Huge pages on demand on a real kernel: one boot of a 2-node VM in which
# tests/vm/hugepages-guest.sh runs `nrm plugin` with
# memory.hugepagesOnDemand: node 1's 2Mi pool raised for a claim and given
# back to the baseline (also across a kill -9), and a claim the node cannot
# hold refused (NRM=build/nrm/nrm tests/vm/hugepages.sh; in make check).
# Exit 0: passed, 1: failed, 77: skipped (no qemu or kernel).
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
src=${NRM_SRCDIR:-$(cd "$here/../.." && pwd -P)}
build=$(cd "$(dirname "${NRM:?run through make check, or give NRM=BUILDDIR/nrm/nrm}")/.." && pwd -P)
for f in "$build/nrm/nrm" "$build/nrm/nrm-hook" "$build/tests/plugin/dra-client"; do
  [ -x "$f" ] || { echo "FAIL: $f is not built (make check builds it)"; exit 1; }
done
command -v busybox >/dev/null 2>&1 || { echo "SKIP: busybox not found (apt-get install busybox-static)"; exit 77; }
"$here/vm.sh" --nodes 2 --cpus 4 --share "$build" --timeout "${NRM_VM_TIMEOUT:-300}" -- \
  busybox sh "$here/hugepages-guest.sh" "$build" "$src"
