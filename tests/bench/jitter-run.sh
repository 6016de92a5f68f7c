#!/bin/sh
# The jitter benchmark (docs/jitter.md) on a real machine, in one call:
# describes the machine (CPUs, kernel, cgroup, isolation on the kernel
# command line, frequency governor, steal), then runs the built
# bench-jitter against the built nrm long enough for p99.99 to rest on
# tens of samples, and prints its table. Builds nothing; writes only under
# /tmp (and, for the isolated partition, a cgroup it removes again).
#
#   tests/bench/jitter-run.sh [BUILD_DIR] [bench-jitter options]
#       exit 0 ran, 1 the bench failed, 77 not built here
#
# Defaults: 6 rounds x 4 s per scenario (5 scenarios: about 2.5 minutes),
# one neighbour per CPU; NRM_BENCH_JITTER_ROUNDS and _SECONDS change them.
# As root for nrm run's pinning and the partition; on a cgroup v2 host
# whose /sys/fs/cgroup cannot be written (a container), nrm run fails and
# says so in its row: give --nrm-arg options as the host needs.
set -u
B=$(dirname "$0")/../..
if [ $# -gt 0 ] && [ -d "$1" ]; then B=$1; shift; fi
B=$(cd "$B" && pwd)
J=$B/tests/bench/bench-jitter NRM=$B/nrm/nrm
for f in "$J" "$NRM" "$B/nrm/nrm-agent"; do
  [ -x "$f" ] || { echo "SKIP: $f is not built (make -j tests/bench/bench-jitter nrm/nrm nrm/nrm-agent)"; exit 77; }
done
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort -u | head -1)), Linux $(uname -r)"
echo "  cgroup: $(stat -fc %T /sys/fs/cgroup 2>/dev/null) at /sys/fs/cgroup$( [ -w /sys/fs/cgroup/cgroup.subtree_control ] && echo ', writable' || echo ', not writable')"
echo "  kernel command line isolation: $(tr ' ' '\n' </proc/cmdline | grep -E '^(isolcpus|nohz_full|rcu_nocbs|irqaffinity)=' | tr '\n' ' ')"
echo "  governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none)"
echo "  steal so far: $(awk '/^cpu /{print $9}' /proc/stat) ticks; load $(cut -d' ' -f1-3 /proc/loadavg); user $(id -un)"
NRM_BENCH_JITTER_ROUNDS=${NRM_BENCH_JITTER_ROUNDS:-6} NRM_BENCH_JITTER_SECONDS=${NRM_BENCH_JITTER_SECONDS:-4} \
  "$J" --nrm "$NRM" "$@" || exit 1
