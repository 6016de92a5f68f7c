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
import importlib
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
sys.path.insert(0, HERE)
import clusterlib  # noqa: E402
from clusterlib import Cluster, binaries, skip, wait_for  # noqa: E402
try:
    import fleetcost  # noqa: E402
    import fleetplots  # noqa: E402
except ImportError as e:  # prometheus_client or matplotlib: scripts/deps.sh installs both
    skip("bench-fleet: %s (scripts/deps.sh installs it)" % e)
import fleetnodes  # noqa: E402
fleet_binding = importlib.import_module("fleet-binding")
fleet_sched = importlib.import_module("fleet-sched")
import fleetplugins  # noqa: E402

# The large recorded machines first: a small fleet has them too.
LARGE = ("192em64t-24n8c2t", "AMD-19h-Zen4-2xEpyc-9654", "256ppc-8n8s4t")


def machines():
    """The recorded machines of 16 CPUs or more (fleetnodes), the large ones first, in the order nodes take them."""
    all_ = fleetnodes.machines()
    first = [m for name in LARGE for m in all_ if m.name == name]
    return first + [m for m in all_ if m not in first]


def minmax(rows, mode):
    v = [r["bytes"] for r in rows if r["mode"] == mode and not r["pci"]]
    return min(v), max(v)


def verdict(ok):
    return "met" if ok else "NOT MET"


class Fleet:
    """The Nodes (fleetnodes: Ready, the DaemonSet's pod and a pod-bound token each) and their publishers: real
    plugins for the first plugins_max, fleet-publish for the rest, a process per batch of nodes added."""

    def __init__(self, cluster, work, plugins_max, fleet_publish):
        self.cluster, self.work, self.plugins_max, self.program = cluster, work, plugins_max, fleet_publish
        self.topos = machines()
        self.real = None
        self.sims = []  # FleetNodes batches, each published by its own fleet-publish
        self.plugins = []
        self.expected = {}  # node: slices its publisher wants

    def nodes(self):
        return (self.real.names if self.real else []) + [n for b in self.sims for n in b.names]

    def want(self, batch):
        for name, files in zip(batch.names, batch.slice_files):
            self.expected[name] = sum(len(json.load(open(f))["items"]) for f in files)

    def grow(self, n):
        """Nodes up to n and their publishers started; returns ({step: seconds}, the new nodes)."""
        have = len(self.nodes())
        took, new = {}, []
        if self.real is None:
            self.real = fleetnodes.FleetNodes(self.cluster, self.work, min(n, self.plugins_max), self.topos,
                                              prefix="node")
            took = self.real.create()
            self.want(self.real)
            for i, name in enumerate(self.real.names):
                pl = fleetplugins.Plugin(self.cluster, name, self.real.machine(i).path, "numa", self.work)
                pl.kubeconfig = self.real.kubeconfigs[i]
                pl.start()
                self.plugins.append(pl)
            new += self.real.names
        if n > len(self.nodes()):
            k = len(self.sims)
            shift = len(self.nodes()) % len(self.topos)  # the machines go on in turn
            batch = fleetnodes.FleetNodes(self.cluster, self.work, n - len(self.nodes()),
                                          self.topos[shift:] + self.topos[:shift], prefix="sim%d" % k)
            took = batch.create()
            self.want(batch)
            batch.state = os.path.join(self.work, "sim%d-state" % k)
            t = time.monotonic()
            took["fleet-publish synced"] = batch.start(self.program, state_dir=batch.state, instance_uid="gen1")
            took["fleet-publish wall"] = time.monotonic() - t
            self.sims.append(batch)
            new += batch.names
        assert len(self.nodes()) == max(n, have)
        return took, new

    def check_alive(self):
        for p in self.plugins:
            if not p.alive():
                raise SystemExit("bench-fleet: the plugin of %s exited:\n%s" % (p.node, p.log_tail()))
        for b in self.sims:
            if any(p.poll() is not None for p in b.procs):
                raise SystemExit("bench-fleet: a fleet-publish exited (log %s)" % b.procs[-1].log)

    def published(self, nodes):
        """The publishers of nodes said their slices are in sync (fleet-publish's "synced" line was awaited in
        grow(), the plugins log it): nothing is listed to know, so that the start's server figures are nrm's
        alone."""
        nodes = set(nodes)
        return all(p.synced() for p in self.plugins if p.node in nodes)

    def holds_all(self):
        """Every node holds the slices its publisher wants on the server (one list, once the start is counted)."""
        have = {}
        for sl in self.cluster.slices():
            have[sl["spec"].get("nodeName")] = have.get(sl["spec"].get("nodeName"), 0) + 1
        return [n for n, w in self.expected.items() if have.get(n, 0) < w]

    def storm(self, spread_s=10.0):
        """Every nrm restarted within spread_s: the plugins one by one, and beside them each fleet-publish
        started again with its nodes one after another over the same spread_s."""
        t0 = time.monotonic()
        started = []
        for b in self.sims:
            b.stop()
            started.append((b, b.spawn(self.program, "--spread", "%g" % spread_s, state_dir=b.state,
                                       instance_uid="gen%d" % time.monotonic_ns())))
        fleetplugins.restart_storm(self.plugins, spread_s)
        for b, proc in started:
            b.read_line(proc, "synced", 120 + b.n + spread_s)
        return time.monotonic() - t0

    def rolling(self, spread_s=10.0):
        """The DaemonSet's rolling update: a new instance beside each, which takes over; the old one stopped.
        The nodes' new instances start over spread_s, the plugins' and fleet-publish's alike."""
        t0 = time.monotonic()
        begun = [(b, b.restart_begin(self.program, "--spread", "%g" % spread_s, state_dir=b.state))
                 for b in self.sims]
        fleetplugins.rolling_update(self.plugins, spread_s)
        for b, (old, new) in begun:
            b.restart_end(old, new, timeout=120 + b.n + spread_s)
        return time.monotonic() - t0

    def stop(self):
        for p in self.plugins:
            p.stop()
        for b in self.sims:
            b.stop_all()


def phase(name, fleet, audit, mark, t0, nodes, drivers, results, goal_per_driver=None):
    """The requests of nodes since mark, until quiet: printed per node, judged per driver."""
    events = audit.since(mark)
    counts = fleetcost.per_node(events, nodes)
    t_quiet = fleetcost.last_request(events, set(nodes))
    tab = fleetcost.table(counts, ("all", "list", "watch", "get", "write", "refused") + tuple(drivers))
    print("  %-14s per node, median/max: %s" % (name, "  ".join("%s %g/%g" % (k, v[0], v[1]) for k, v in tab.items())))
    out = {"counts": tab, "quiet_s": (t_quiet - t0) if t_quiet else 0.0}
    if goal_per_driver is not None:
        worst = fleetcost.per_driver_max(counts, drivers)
        served = fleetcost.per_driver_max(counts, drivers, served=True)
        results.append(("%s: requests per node and driver <= %d" % (name, goal_per_driver), worst <= goal_per_driver,
                        "max %d (%d without those refused with 429); quiet %.1f s after it began"
                        % (worst, served, out["quiet_s"])))
        out["max_per_driver"] = worst
        out["max_per_driver_served"] = served
        over = sorted((c.get(d, 0), n, d) for n, c in counts.items() for d in drivers if c.get(d, 0) > goal_per_driver)
        out["over_goal"] = len(over)
        if over:
            # The worst node's requests for that driver, to say why.
            _, n, d = over[-1]
            mine = [e for e in events if fleetcost.node_of(e) == n and fleetcost.driver_of(e) == d]
            print("  %-14s %d node-drivers over %d; %s %s: %s" % (
                "", len(over), goal_per_driver, n, d, ", ".join(
                    "%s %s %s" % (e["requestReceivedTimestamp"][14:23], e["verb"],
                                  e.get("responseStatus", {}).get("code")) for e in mine)))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nrm", help="the nrm program")
    p.add_argument("--nodes", default="100,1000", help="fleet sizes, ascending (default 100,1000)")
    p.add_argument("--plugins", type=int, default=100, help="real nrm plugin processes at most (default 100)")
    p.add_argument("--rest", type=float, default=600.0, help="seconds at rest at the largest size (default 600)")
    p.add_argument("--quick", action="store_true", help="100 nodes, 60 s at rest, one run (make bench)")
    p.add_argument("--fleet-publish", help="tests/bench/fleet-publish (default: beside NRM's build folder)")
    p.add_argument("--binding", default="200,2000", help="binders (nodes) and claims for nrm controller and the "
                   "binders; 0 leaves them out (default 200,2000)")
    p.add_argument("--sched", default="100:10:all,1000:2:a+a1+b+d-individual+d-grouped+e",
                   help="the scheduler's cases: N:pods-per-node:cases (+ between cases, all for every one), "
                   "comma-separated; none leaves them out")
    p.add_argument("--runs", type=int, default=1, help="runs of each scheduler case (default 1)")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--docs", help="write docs/scale.md's plots and tables into this folder")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.rest = "100", min(args.rest, 60.0)
    sizes = [int(x) for x in args.nodes.split(",")]
    if args.quick:
        args.sched = "100:10:a+a1+b+d-individual+d-grouped"
    args.sched = [] if args.sched == "none" else [
        (int(n), int(ppn), fleet_sched.CASES if cs == "all" else cs.split("+"))
        for n, ppn, cs in (x.split(":") for x in args.sched.split(","))]
    args.binding = None if args.binding in ("0", "") or args.quick else tuple(int(x) for x in args.binding.split(","))
    clusterlib.NRM = os.path.abspath(args.nrm)
    args.fleet_publish = os.path.abspath(args.fleet_publish or os.path.join(
        os.path.dirname(clusterlib.NRM), "..", "tests", "bench", "fleet-publish"))
    if max(sizes) > args.plugins and not os.access(args.fleet_publish, os.X_OK):
        skip("bench-fleet: no fleet-publish at %s (make tests/bench/fleet-publish)" % args.fleet_publish)
    if not os.access(clusterlib.NRM, os.X_OK):
        skip("bench-fleet: no nrm program at %s" % args.nrm)
    t_bench = time.monotonic()
    bindir = binaries()
    work = tempfile.mkdtemp(prefix="nf-", dir="/tmp")
    results, figures = [], {"sizes": {}}
    fleet = cluster = None
    drivers = ("cpu.nrm.io", "memory.nrm.io")
    try:
        topos = [m.path for m in machines()]
        figures["shapes"] = fleetcost.shapes(clusterlib.NRM, topos, os.environ.get("NRM_K8S_LINE", "v1.36").lstrip("v"))
        big = [r for r in figures["shapes"] if r["machine"] in LARGE or r["pci"] is False]
        print("bench-fleet: nrm's slices per node for %d recorded machines of 16 CPUs or more (nrm slices): "
              "numa mode %d-%d bytes, partitioned %d-%d bytes"
              % (len(topos), *minmax(big, "numa"), *minmax(big, "partitioned")))
        cluster = Cluster(work, "fleet", bindir)
        cluster.install_nrm()
        fleet = Fleet(cluster, work, args.plugins, args.fleet_publish)
        audit = fleetcost.Audit(cluster)
        for n in sizes:
            fig = figures["sizes"][n] = {}
            # -- start: only nrm's own tokens count per node, so the test's set-up (Nodes, tokens) does not
            m0, before = audit.mark(), fleetcost.Metrics(cluster)
            t0 = time.time()
            took, new = fleet.grow(n)
            if not wait_for(lambda: fleet.check_alive() is None and fleet.published(new), 120 + 2 * n, 1.0):
                raise SystemExit("bench-fleet: the fleet did not publish")
            t_q = fleetcost.quiet(audit, new, m0, t0)
            after = fleetcost.Metrics(cluster)
            short = fleet.holds_all()
            if short:
                raise SystemExit("bench-fleet: %d nodes lack slices their publisher said are in sync: %s"
                                 % (len(short), " ".join(short[:5])))
            nodes = fleet.nodes()
            print("bench-fleet: %d nodes (%d real nrm plugin processes, %d published by fleet-publish), %s; "
                  "kube-apiserver %s, %d CPUs here"
                  % (n, len(fleet.plugins), n - len(fleet.plugins),
                     ", ".join("%s %.1f s" % kv for kv in took.items()), cluster.version, os.cpu_count()))
            fig["start"] = phase("start", fleet, audit, m0, t0, new, drivers, results)
            fig["start"]["server"] = fleetcost.api_delta(before, after)
            fig["start"]["stored"] = fleetcost.stored(cluster, after)
            fig["start"]["took"] = took
            print("           quiet %.1f s after the start; the server: %s; holds %s"
                  % (t_q if t_q is not None else -1, fig["start"]["server"], fig["start"]["stored"]))
            # -- rest
            rest = args.rest if n == sizes[-1] else min(args.rest, 60.0)
            m1, before = audit.mark(), fleetcost.Metrics(cluster)
            time.sleep(rest)
            fleet.check_alive()
            events = audit.since(m1)
            counts = fleetcost.per_node(events, nodes)
            writes = sum(c["write"] for c in counts.values())
            per_h = writes * 3600.0 / rest / max(1, len(nodes))
            fig["rest"] = {"seconds": rest, "writes": writes, "writes_per_node_hour": per_h,
                           "counts": fleetcost.table(counts, ("all", "list", "watch", "get", "write")),
                           "server": fleetcost.api_delta(before, fleetcost.Metrics(cluster))}
            print("  %-8s %.0f s: %d writes by %d nodes (%.2f per node and hour, extrapolated); per node "
                  "median/max %s" % ("rest", rest, writes, len(nodes), per_h, fig["rest"]["counts"]))
            results.append(("rest at %d nodes: 0 writes while nothing changes" % n, writes == 0,
                            "%d writes in %.0f s" % (writes, rest)))
            # -- restart storm
            m2, t2 = audit.mark(), time.time()
            spent = fleet.storm(10.0)
            wait_for(lambda: fleet.check_alive() is None, 30, 1.0)
            fleetcost.quiet(audit, nodes, m2, t2, timeout=300 + n)
            fig["storm"] = phase("storm at %d" % n, fleet, audit, m2, t2, nodes, drivers, results, 3)
            fig["storm"]["restarts_s"] = spent
            # -- rolling update
            m3, t3 = audit.mark(), time.time()
            spent = fleet.rolling(10.0)
            fleet.check_alive()
            fleetcost.quiet(audit, nodes, m3, t3, timeout=300 + n)
            fig["rolling"] = phase("rolling at %d" % n, fleet, audit, m3, t3, nodes, drivers, results, 3)
            fig["rolling"]["restarts_s"] = spent
        if fleet:
            fleet.stop()
        cluster.stop()
        fleet = None
        # -- the scheduler's speed, on a control plane of its own per size (fleet-sched.py)
        for n, ppn, cases in args.sched:
            print("bench-fleet: the scheduler with %d nodes, %d pods a case (%d a node), cases %s, %d run(s)"
                  % (n, n * ppn, ppn, ",".join(cases), args.runs), flush=True)
            out = os.path.join(work, "sched-%d.json" % n)
            argv = [clusterlib.NRM, "--nodes", str(n), "--pods-per-node", str(ppn), "--runs", str(args.runs),
                    "--cases", ",".join(cases), "--json", out, "--case-timeout", "600" if n > 100 else "300",
                    "--profile-max", "30" if n <= 100 else "0"]
            if args.docs:
                argv += ["--profile-dir", os.path.join(args.docs, "profiles-%d" % n)]
            fleet_sched.main(argv)
            with open(out) as fh:
                sch = json.load(fh)
            keep = ("nodes", "pods_per_node", "rate", "summary", "durations_s", "machines", "profiles")
            figures.setdefault("sched", {})[n] = {k: sch[k] for k in keep}
            figures["sched"][n]["bound"] = {c: [r["bound"] for r in rs] for c, rs in sch["runs"].items()}
            results += [("scheduler at %d nodes: %s" % (n, g["goal"]), g["met"], "see its table") for g in sch["goals"]]
        # -- nrm controller and the binders, on a control plane of their own (the fleet's is stopped first)
        if args.binding:
            nb, mb = args.binding
            print("bench-fleet: nrm controller and %d binders, %d claims, 6%% waiting on binding conditions" % (nb, mb))
            fb = fleet_binding.run(None, nodes=nb, claims=mb, binding_fraction=0.06,
                                   log=lambda text: print("  " + text, flush=True))
            figures["binding"] = {k: v for k, v in fb.items() if k != "goals"}
            results += [("binding: %s" % w, ok, f) for w, ok, f in fb["goals"]]
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
