#!/bin/bash
# Real-kernel test of the memory half: boots a 2-node VM and runs
# tests/vm/memory-guest.sh there. Skips (77) where qemu or the guest kernel
# is not available.
set -u
src=${NRM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=$(cd "$(dirname "${NRM:?run through make check}")/.." && pwd)
# Nodes of 512 MiB: a 64 MiB mapping fits on either, and node 0's whole
# device is small enough to claim.
exec "$src/tests/vm/vm.sh" --nodes 2 --cpus 4 --threads 2 --mem-mb 1024 --share "$build" \
  --timeout "${NRM_VM_TIMEOUT:-600}" -- "$src/tests/vm/memory-guest.sh" "$build"
