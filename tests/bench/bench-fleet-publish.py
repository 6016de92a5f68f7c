#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a simulated node costs, with nrm's real ResourceSlice publisher on a
real control plane (tests/cluster, nrm.yaml applied): one real `nrm plugin`
(cpu and memory drivers, claims from the API) against fleet-publish, which
runs the same publisher for many nodes from one process (fleetnodes.py:
Nodes of recorded machines with >= 16 CPUs, a pod-bound token each). Per
fleet size: seconds until every publisher holds its slices (from an empty
server: the slices of the previous size are deleted first), writes against
the slices published, API errors, and the RSS, PSS and threads of the
process; then the largest fleet this machine holds with each approach,
estimated from the per-node figures. With --takeover, a second
fleet-publish on the same state directory takes every node over as a
DaemonSet's rolling update does (nrm's handover), with no write.

Exits 77 where the upstream binaries cannot be built (tests/cluster/build.sh).

  bench-fleet-publish.py NRM FLEET_PUBLISH [--nodes 10,100] [--plugins 3] [--takeover] [--shards K]"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import Cluster, binaries, skip  # noqa: E402
import fleetnodes  # noqa: E402

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# Issue #28's largest fleet: what this machine must hold with one of the approaches.
FLEET_GOAL = 1000


def verdict(ok):
    return "met" if ok else "NOT MET"


def mem_available_kib():
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """User and system CPU seconds of pid so far."""
    with open("/proc/%d/stat" % pid) as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def status_sum(fleet, procs):
    """The status of each fleet-publish process (fleetnodes.status), summed over them."""
    sts = [fleet.status(x) for x in procs]
    return {k: sum(x.get(k, 0) for x in sts) for k, v in sts[0].items() if isinstance(v, (int, float))} if sts else {}


def cp_kib(*pids):
    return sum(fleetnodes.proc_kib(p) or 0 for p in pids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nrm")
    ap.add_argument("fleet_publish")
    ap.add_argument("--nodes", default="10,100", help="fleet sizes, comma-separated (default 10,100)")
    ap.add_argument("--plugins", type=int, default=3, help="real nrm plugin processes measured (default 3)")
    ap.add_argument("--takeover", action="store_true", help="a second fleet-publish takes over (the largest size)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds at rest measured after each sync")
    ap.add_argument("--shards", type=int, default=1,
                    help="fleet-publish processes sharing each size's nodes (one holds about open-files-limit / 8)")
    args = ap.parse_args(argv)
    clusterlib.NRM = os.path.abspath(args.nrm)
    sizes = [int(x) for x in args.nodes.split(",")]
    for prog in (clusterlib.NRM, args.fleet_publish):
        if not os.access(prog, os.X_OK):
            skip("bench-fleet-publish: no program at %s" % prog)
    bindir = binaries()
    work = tempfile.mkdtemp(prefix="nrm-fpub-")
    results = []
    cluster = Cluster(work, "fpub", bindir)
    cluster.install_nrm()
    # apiserver.sh execs kube-apiserver: its pid is the server's.
    api, etcd = int(cluster.env["APISERVER_PID"]), int(cluster.env["ETCD_PID"])
    cp0 = cp_kib(api, etcd)
    total = max(sizes + [args.plugins])
    fleet = fleetnodes.FleetNodes(cluster, work, total)
    took = fleet.create()
    cp1 = cp_kib(api, etcd)
    print("bench-fleet-publish: %s, %d Nodes (%s in turn), %d CPUs here; set up in %s"
          % (cluster.version, total, ", ".join(m.name for m in fleet.machines[:4]) + ", ...", os.cpu_count(),
             ", ".join("%s %.1f s" % kv for kv in took.items())))
    print("  control plane (kube-apiserver + etcd RSS): %d MiB before the Nodes, %d MiB with %d Nodes, their pods "
          "and tokens (%.0f KiB a node)" % (cp0 >> 10, cp1 >> 10, total, (cp1 - cp0) / total))

    def clear():
        s, body = cluster.api("DELETE", SLICES)
        if s != 200:
            raise RuntimeError("deleting ResourceSlices: %s %s" % (s, body))
        clusterlib.wait_for(lambda: not cluster.slices(), 60, 0.5)

    # -- real nrm plugin processes
    plugin_kib = None
    if args.plugins:
        clear()
        t = time.monotonic()
        plugins = fleet.start_plugins(args.plugins)
        t_pl = time.monotonic() - t
        time.sleep(2)
        pids = [p.proc.pid for p in plugins]
        c0, a0 = sum(cpu_s(pid) for pid in pids), cpu_s(api)
        time.sleep(args.idle)
        plugin_cpu = (sum(cpu_s(pid) for pid in pids) - c0) / args.idle / len(pids)
        api_cpu = (cpu_s(api) - a0) / args.idle
        rss = [fleetnodes.proc_kib(pid) for pid in pids]
        priv = [fleetnodes.proc_kib(pid, "Private") for pid in pids]
        thr = [fleetnodes.proc_kib(pid, "Threads") for pid in pids]
        plugin_kib = sum(priv) / len(priv)
        plugin_shared = sum(rss) / len(rss) - plugin_kib
        plugin_threads = max(thr)
        print("  nrm plugin x%d (cpu, memory drivers, the API; every driver published in %.1f s): RSS %s KiB, "
              "private %s KiB (what one more costs), threads %s; at rest %.4f CPU s/s each (kube-apiserver %.3f s/s)"
              % (len(plugins), t_pl, "/".join(map(str, rss)), "/".join(map(str, priv)), "/".join(map(str, thr)),
                 plugin_cpu, api_cpu))
        rcs = fleetnodes.stop_plugins(plugins)
        results.append(("nrm plugin stops cleanly", all(rc == 0 for rc in rcs), "exit %s" % rcs))

    # -- fleet-publish
    priv = {}
    cp = {}
    for n in sizes:
        clear()
        fleet.write_manifest(n)
        api0 = cpu_s(api)
        if args.shards > 1:
            secs = fleet.start_sharded(args.fleet_publish, args.shards, count=n, timeout=120 + 2 * n)
        else:
            secs = fleet.start(args.fleet_publish, timeout=120 + 2 * n)
        procs = list(fleet.procs)
        st = status_sum(fleet, procs)
        c0, api1 = sum(cpu_s(x.pid) for x in procs), cpu_s(api)
        time.sleep(args.idle)
        idle = status_sum(fleet, procs)
        c1, api2 = sum(cpu_s(x.pid) for x in procs), cpu_s(api)
        slices = len(cluster.slices())
        priv[n] = idle["private_kib"]
        cp[n] = cp_kib(api, etcd)
        print("  fleet-publish %5d nodes: %d publishers synced in %.2f s, %d writes for %d slices, api_errors %d; "
              "RSS %d KiB, private %d KiB (%.0f KiB a node), %d threads, %d fds; control plane %d MiB; "
              "kube-apiserver CPU %.1f s to sync, at rest %.3f s/s (fleet-publish %.3f s/s)"
              % (n, st["publishers"], secs, st["writes"], slices, st["api_errors"], idle["rss_kib"],
                 priv[n], priv[n] / n, idle["threads"], idle["fds"], cp[n] >> 10, api1 - api0,
                 (api2 - api1) / args.idle, (c1 - c0) / args.idle))
        results.append(("%d nodes: every publisher synced" % n, st["synced"] == st["publishers"] == 2 * n,
                        "%d of %d" % (st["synced"], st["publishers"])))
        results.append(("%d nodes: one create a slice from an empty server" % n, st["writes"] == slices,
                        "%d writes, %d slices" % (st["writes"], slices)))
        results.append(("%d nodes: no API errors" % n, idle["api_errors"] == 0, "%d" % idle["api_errors"]))
        if args.takeover and n == sizes[-1] and args.shards == 1:
            fleet.stop()
            clear()
            state = os.path.join(fleet.dir, "state")
            fleet.start(args.fleet_publish, timeout=120 + 2 * n, state_dir=state, instance_uid="gen1")
            w0 = fleet.status()["writes"]
            secs2, standby, rc_old = fleet.restart(args.fleet_publish, state_dir=state, timeout=120 + 2 * n)
            st2 = fleet.status()
            print("  takeover of %d nodes by a second fleet-publish (nrm's handover): synced in %.2f s, %d writes "
                  "(the first: %d); the first in standby %s, exits %s" % (n, secs2, st2["writes"], w0, standby, rc_old))
            results.append(("takeover: no write (the slices are in sync)", st2["writes"] == 0, "%d" % st2["writes"]))
            results.append(("takeover: the old one's publishers all in standby", standby, ""))
            results.append(("takeover: the old one stops cleanly", rc_old == 0, "exit %s" % rc_old))
        offs = [(x.log, os.path.getsize(x.log)) for x in fleet.procs]
        rcs = fleet.stop_all()
        rc = next((r for r in rcs if r != 0), 0)
        errs = []
        for log, off in offs:
            with open(log) as fh:
                fh.seek(off)
                errs += [line for line in fh if line.startswith("error")]
        first = ": " + errs[0].strip()[:100] if errs else ""
        results.append(("%d nodes: fleet-publish stops cleanly" % n, rc == 0 and not errs,
                        "exit %s, %d errors logged while stopping%s" % (rc, len(errs), first)))

    # -- a node's cost, between the sizes (the process's own base left out), and the largest fleet
    lo, hi = min(sizes), max(sizes)
    node_kib = (priv[hi] - priv[lo]) / (hi - lo) if hi > lo else priv[hi] / hi
    cp_node = (cp1 - cp0) / total + ((cp[hi] - cp[lo]) / (hi - lo) if hi > lo else 0)
    print("  a node: fleet-publish %.0f KiB (between %d and %d nodes), control plane %.0f KiB (its Node, pod and "
          "token, and its slices and watches)" % (node_kib, lo, hi, cp_node))
    if plugin_kib:
        results.append(("a fleet-publish node costs less than an nrm plugin", node_kib < plugin_kib,
                        "%.0f KiB vs %.0f KiB (%.1fx)" % (node_kib, plugin_kib, plugin_kib / node_kib)))
    avail = mem_available_kib()
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    nofile = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
    if plugin_kib:
        by_mem = (avail - plugin_shared) / (plugin_kib + cp_node)
        print("  estimate: nrm plugin processes: %d by memory (%d MiB available now, %.0f KiB each and %.0f KiB of "
              "control plane), %d by threads (%d each; every thread takes a pid of kernel.pid_max %d), %s by "
              "CPU at rest (%.4f s/s each, of %d CPUs)"
              % (by_mem, avail >> 10, plugin_kib, cp_node, pid_max / plugin_threads, plugin_threads, pid_max,
                 "%d" % (os.cpu_count() / plugin_cpu) if plugin_cpu > 0 else "no limit seen", plugin_cpu,
                 os.cpu_count()))
    fp_max = avail / (node_kib + cp_node)
    results.append(("fleet-publish: %d nodes fit in this machine's memory" % FLEET_GOAL, fp_max >= FLEET_GOAL,
                    "about %d" % fp_max))
    print("  estimate: fleet-publish nodes: %d by memory (%.0f KiB each and %.0f KiB of control plane), %d by "
          "threads (one a publisher, two a node, of kernel.pid_max %d), %s a process by open files (8 a node, of "
          "the hard limit %s, which only CAP_SYS_RESOURCE raises: more, with more processes)"
          % (fp_max, node_kib, cp_node, pid_max / 2, pid_max, int(nofile) // 8 if nofile.isdigit() else nofile,
             nofile))
    cluster.stop()
    failed = 0
    for what, ok, detail in results:
        print("  %-60s %-8s %s" % (what, verdict(ok), detail))
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
