#!/bin/bash
# Real-kernel test of the cgroup v2 commit: boots a VM with 2 and then 4
# NUMA nodes (SMT2) and runs tests/vm/commit-guest.sh in each. Skips (77)
# where qemu or the guest kernel is not available.
set -u
src=${NRM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=$(cd "$(dirname "${NRM:?run through make check}")/.." && pwd)
rc=0
for nodes in 2 4; do
  echo "=== $nodes NUMA nodes"
  # About 170 s a boot under TCG on 2 idle cores: 600 s leaves room for a busy machine.
  "$src/tests/vm/vm.sh" --nodes "$nodes" --cpus 8 --threads 2 --hugepages-2m 8 --share "$build" \
    --timeout "${NRM_VM_TIMEOUT:-600}" -- \
    "$src/tests/vm/commit-guest.sh" "$build" "$nodes"
  r=$?
  [ $r -eq 77 ] && exit 77
  [ $r -ne 0 ] && rc=1
done
exit $rc
