#!/bin/bash
# Real-kernel test of cpuset partitions: boots a 2-node VM and runs
# tests/vm/partition-guest.sh in it, with Debian's default kernel (6.1: the
# fallback) or NRM_VM_KERNEL_DEB (bookworm-backports' 6.12: remote
# partitions). Skips (77) where qemu or the guest kernel is not available.
set -u
src=${NRM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=$(cd "$(dirname "${NRM:?run through make check}")/.." && pwd)
"$src/tests/vm/vm.sh" --nodes 2 --cpus 8 --threads 2 --share "$build" --timeout "${NRM_VM_TIMEOUT:-600}" -- \
  "$src/tests/vm/partition-guest.sh" "$build"
