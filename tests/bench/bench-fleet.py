#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A fleet of nrm instances on the real control plane (tests/cluster: the
upstream kube-apiserver, scheduler and controller-manager on loopback, the
node-lifecycle controller left out so that no heartbeat loads the server,
nrm.yaml applied). N Nodes are created Ready once, each with nrm's real
publisher for a recorded machine of at least 16 CPUs, in turn: real `nrm
plugin` processes (as the DaemonSet runs them, a token bound to the
DaemonSet's pod on each Node) up to --plugins, and beyond that
tests/bench/fleet-publish, which runs nrm's publisher for many Nodes in one
process, each with its own token. Everything is counted by the server: its
audit log per node (the token's node is in the request's user), its
/metrics in total.

  shapes   ResourceSlice objects, devices and bytes per node, per machine,
           CPU mode, with and without the PCI driver (nrm slices);
  start    requests per node and driver until the fleet is quiet, the
           objects and storage the server holds;
  rest     writes per node over --rest seconds at steady state (at least
           600 at the largest N: one relist period of nrm's watches),
           extrapolated to an hour (goal: 0 writes while nothing changes);
  storm    every nrm restarted within 10 s; requests per node and driver
           (goal: at most 3) and the time until the server is quiet again;
  rolling  a second instance with a new --instance-uid per node, the old
           one stopped when the new one serves, as the DaemonSet's rolling
           update does (the same goal);

then the scheduler's speed with nrm's devices (fleet-sched.py) at each N,
and nrm controller with the node binders (fleet-binding.py). Prints every
figure beside its goal with met or not, its own time, and with --docs DIR
writes the tables and plots (PNG) that docs/scale.md shows.

Exits 77 where the upstream binaries cannot be built (tests/cluster/build.sh).

  bench-fleet.py NRM [--quick] [--nodes 100,1000] [--plugins P] [--rest S] [--runs R] [--json FILE] [--docs DIR]"""

import argparse
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
sys.path.insert(0, HERE)
import clusterlib  # noqa: E402
from clusterlib import NAMESPACE, Cluster, binaries, skip, wait_for  # noqa: E402
import fleetcost  # noqa: E402
import fleetplots  # noqa: E402
import fleetplugins  # noqa: E402

TOPOLOGIES = os.path.join(HERE, "..", "topologies")
# Recorded machines of at least 16 CPUs, the large ones first (a fleet of 3 machines when N is small still has
# the 192-, 256- and 384-CPU ones).
LARGE = ("192em64t-24n8c2t", "AMD-19h-Zen4-2xEpyc-9654", "256ppc-8n8s4t")


def pus(topo):
    with open(topo) as fh:
        return len(re.findall(r'type="PU"', fh.read()))


def machines():
    """The recorded machines of a fleet, in the order nodes take them."""
    all_ = sorted(glob.glob(os.path.join(TOPOLOGIES, "*.xml")))
    big = [t for t in all_ if pus(t) >= 16]
    first = [t for name in LARGE for t in big if os.path.basename(t) == name + ".xml"]
    return first + [t for t in big if t not in first]


def node(i):
    return "node-%04d" % i


def minmax(rows, mode):
    v = [r["bytes"] for r in rows if r["mode"] == mode and not r["pci"]]
    return min(v), max(v)


def verdict(ok):
    return "met" if ok else "NOT MET"


class Fleet:
    """The Nodes, the DaemonSet's pods on them, and their publishers."""

    def __init__(self, cluster, work, plugins_max, mode="numa"):
        self.cluster, self.work, self.plugins_max, self.mode = cluster, work, plugins_max, mode
        self.topos = machines()
        self.nodes = []
        self.plugins = []

    def topo(self, i):
        return self.topos[i % len(self.topos)]

    def daemon_pods(self):
        s, pods = self.cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io%%2Fname%%3Dnrm"
                                   % NAMESPACE)
        return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in (pods.get("items", []) if s == 200 else [])
                if p["spec"].get("nodeName")
                and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}

    def grow(self, n):
        """Nodes up to n, Ready, with their machine's CPUs; the DaemonSet's pods on them; returns seconds taken."""
        t0 = time.monotonic()
        new = [(node(i), pus(self.topo(i)), 1 << 40) for i in range(len(self.nodes), n)]
        for k in range(0, len(new), 200):
            self.cluster.create_nodes(new[k:k + 200])
        self.nodes += [x[0] for x in new]
        if not wait_for(lambda: len(self.daemon_pods()) >= n, 120 + n, 1.0):
            raise SystemExit("bench-fleet: the DaemonSet controller made %d of %d pods" % (len(self.daemon_pods()), n))
        return time.monotonic() - t0

    def start_plugins(self, upto):
        """Real plugins for the nodes without a publisher, up to index upto."""
        pods = self.daemon_pods()
        for i in range(len(self.plugins), min(upto, len(self.nodes))):
            p = fleetplugins.Plugin(self.cluster, self.nodes[i], self.topo(i), self.mode, self.work)
            os.makedirs(p.dir, exist_ok=True)
            p.kubeconfig = self.cluster.nrm_kubeconfig(self.nodes[i], os.path.join(p.dir, "kubeconfig"),
                                                       pod=pods[self.nodes[i]])
            p.start()
            self.plugins.append(p)

    def check_alive(self):
        for p in self.plugins:
            if not p.alive():
                raise SystemExit("bench-fleet: the plugin of %s exited:\n%s" % (p.node, p.log_tail()))

    def expected_slices(self):
        """{node: the slices its publisher wants}, from nrm slices per machine (the server does not compare)."""
        if not hasattr(self, "_per_topo"):
            self._per_topo = {}
        out = {}
        for i, n in enumerate(self.nodes[:len(self.plugins)]):
            t = self.topo(i)
            if t not in self._per_topo:
                self._per_topo[t] = len(fleetcost.slices_of(clusterlib.NRM, t, self.mode, "cpu,memory",
                                                            "1.%d" % self.cluster.minor))
            out[n] = self._per_topo[t]
        return out

    def published(self):
        """Every publisher's node holds its slices on the server."""
        want = self.expected_slices()
        have = {}
        for sl in self.cluster.slices():
            have[sl["spec"].get("nodeName")] = have.get(sl["spec"].get("nodeName"), 0) + 1
        return all(have.get(n, 0) >= w for n, w in want.items())

    def stop(self):
        for p in self.plugins:
            p.stop()


def phase(name, fleet, audit, mark, t0, nodes, drivers, results, goal_per_driver=None):
    """The requests of nodes since mark, until quiet: printed per node, judged per driver."""
    events = audit.since(mark)
    counts = fleetcost.per_node(events, nodes)
    t_quiet = fleetcost.last_request(events, set(nodes))
    tab = fleetcost.table(counts, ("all", "list", "watch", "get", "write") + tuple(drivers))
    print("  %-8s per node, median/max: %s" % (name, "  ".join("%s %g/%g" % (k, v[0], v[1]) for k, v in tab.items())))
    out = {"counts": tab, "quiet_s": (t_quiet - t0) if t_quiet else 0.0}
    if goal_per_driver is not None:
        worst = fleetcost.per_driver_max(counts, drivers)
        results.append(("%s: requests per node and driver <= %d" % (name, goal_per_driver), worst <= goal_per_driver,
                        "max %d; quiet %.1f s after it began" % (worst, out["quiet_s"])))
        out["max_per_driver"] = worst
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nrm", help="the nrm program")
    p.add_argument("--nodes", default="100,1000", help="fleet sizes, ascending (default 100,1000)")
    p.add_argument("--plugins", type=int, default=100, help="real nrm plugin processes at most (default 100)")
    p.add_argument("--rest", type=float, default=600.0, help="seconds at rest at the largest size (default 600)")
    p.add_argument("--quick", action="store_true", help="100 nodes, 60 s at rest, one run (make bench)")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--docs", help="write docs/scale.md's plots and tables into this folder")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.rest = "100", min(args.rest, 60.0)
    sizes = [int(x) for x in args.nodes.split(",")]
    clusterlib.NRM = os.path.abspath(args.nrm)
    if not os.access(clusterlib.NRM, os.X_OK):
        skip("bench-fleet: no nrm program at %s" % args.nrm)
    t_bench = time.monotonic()
    bindir = binaries()
    work = tempfile.mkdtemp(prefix="nf-", dir="/tmp")
    results, figures = [], {"sizes": {}}
    fleet = cluster = None
    drivers = ("cpu.nrm.io", "memory.nrm.io")
    try:
        topos = machines()
        figures["shapes"] = fleetcost.shapes(clusterlib.NRM, topos, "1.36")
        big = [r for r in figures["shapes"] if r["machine"] in LARGE or r["pci"] is False]
        print("bench-fleet: nrm's slices per node for %d recorded machines of 16 CPUs or more (nrm slices): "
              "numa mode %d-%d bytes, partitioned %d-%d bytes"
              % (len(topos), *minmax(big, "numa"), *minmax(big, "partitioned")))
        cluster = Cluster(work, "fleet", bindir)
        cluster.install_nrm()
        fleet = Fleet(cluster, work, args.plugins)
        audit = fleetcost.Audit(cluster)
        for n in sizes:
            fig = figures["sizes"][n] = {}
            grown = fleet.grow(n)
            print("bench-fleet: %d nodes (%s..%s) Ready with the DaemonSet's pods in %.1f s; %s %s, %d CPUs here"
                  % (n, fleet.nodes[0], fleet.nodes[-1], grown, "kube-apiserver", cluster.version, os.cpu_count()))
            # -- start
            m0, before = audit.mark(), fleetcost.Metrics(cluster)
            t0 = time.time()
            fleet.start_plugins(min(n, args.plugins))
            if not wait_for(lambda: fleet.check_alive() is None and fleet.published(), 120 + 2 * n, 1.0):
                raise SystemExit("bench-fleet: the fleet did not publish")
            fresh = [x.node for x in fleet.plugins if x.node in fleet.nodes[len(fleet.nodes) - n:]]
            t_q = fleetcost.quiet(audit, fresh, m0, t0)
            after = fleetcost.Metrics(cluster)
            fig["start"] = phase("start", fleet, audit, m0, t0, fresh, drivers, results)
            fig["start"]["server"] = fleetcost.api_delta(before, after)
            fig["start"]["stored"] = fleetcost.stored(cluster, after)
            print("           quiet %.1f s after the start; the server: %s; holds %s"
                  % (t_q or -1, fig["start"]["server"], fig["start"]["stored"]))
            # -- rest
            rest = args.rest if n == sizes[-1] else min(args.rest, 60.0)
            m1, before = audit.mark(), fleetcost.Metrics(cluster)
            time.sleep(rest)
            fleet.check_alive()
            events = audit.since(m1)
            nodes_all = [x.node for x in fleet.plugins]
            counts = fleetcost.per_node(events, nodes_all)
            writes = sum(c["write"] for c in counts.values())
            per_h = writes * 3600.0 / rest / max(1, len(nodes_all))
            fig["rest"] = {"seconds": rest, "writes": writes, "writes_per_node_hour": per_h,
                           "counts": fleetcost.table(counts, ("all", "list", "watch", "get", "write")),
                           "server": fleetcost.api_delta(before, fleetcost.Metrics(cluster))}
            print("  %-8s %.0f s: %d writes by %d nodes (%.2f per node and hour, extrapolated); per node "
                  "median/max %s" % ("rest", rest, writes, len(nodes_all), per_h, fig["rest"]["counts"]))
            results.append(("rest at %d nodes: 0 writes while nothing changes" % n, writes == 0,
                            "%d writes in %.0f s" % (writes, rest)))
            # -- restart storm
            m2, t2 = audit.mark(), time.time()
            fleetplugins.restart_storm(fleet.plugins, 10.0)
            wait_for(lambda: fleet.check_alive() is None, 30, 1.0)
            fleetcost.quiet(audit, nodes_all, m2, t2)
            fig["storm"] = phase("storm", fleet, audit, m2, t2, nodes_all, drivers, results, 3)
            # -- rolling update
            m3, t3 = audit.mark(), time.time()
            fleetplugins.rolling_update(fleet.plugins, 10.0)
            fleet.check_alive()
            fleetcost.quiet(audit, nodes_all, m3, t3)
            fig["rolling"] = phase("rolling", fleet, audit, m3, t3, nodes_all, drivers, results, 3)
        print("goals:")
        for what, ok, f in results:
            print("  %-56s %-8s (%s)" % (what, verdict(ok), f))
        print("bench-fleet: done in %.1f min" % ((time.monotonic() - t_bench) / 60))
        if args.docs:
            print("bench-fleet: wrote %s" % ", ".join(fleetplots.write(figures, args.docs)))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"figures": figures, "goals": [{"what": w, "met": ok, "figure": f}
                                                         for w, ok, f in results]}, fh, indent=1, default=str)
    finally:
        if fleet:
            fleet.stop()
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
