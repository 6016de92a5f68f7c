#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A fleet, simulated: N `nrm plugin` processes with distinct node names
(recorded machines, rotating through tests/topologies/*.xml; claims from
the API) against one real kube-apiserver (tests/cluster: the upstream
control plane on loopback, nrm.yaml applied, one Node per plugin). Each
plugin is nrm's DaemonSet ServiceAccount with a token bound to the
DaemonSet's pod on its own Node, as the kubelet gives it, and reaches the
server through one tests/cluster/faultproxy.py, which records every request
with a hash of its bearer token: the token names the plugin. Counted per
plugin, by kind (list, watch, get, write):

  start   from launch until every plugin has opened a ResourceSlice watch
          for each driver it listed, and the fleet is quiet;
  rest    a quiet period, extrapolated to an hour (said so), beside what the
          plugin's own timers add in an hour (watch timeouts of 300-599 s,
          the full relist every 600 s), which a short rest cannot see;
  expire  every open watch ended at once with 410 Expired (the proxy injects
          it: a real server gives a 410 only to a watch resumed from a
          version it no longer holds, which cannot be timed);
  restart the real kube-apiserver restarted (control-plane.sh
          restart-apiserver; the proxy stays and answers 502 while it is
          away).

After each storm it counts until the fleet watches again and is quiet, and
measures how the first re-lists (or, where the real server lets a watch
resume without one, the re-watches) spread in time (span, standard
deviation): a fleet that re-lists in step hits a restarted API server all
at once. Requests the server could not answer (the proxy's 502 while it
restarts, or the server's own 5xx) are counted apart.

Exits 77 where the upstream binaries cannot be built (tests/cluster/build.sh).

  bench-storms.py NRM [--nodes N] [--rest S] [--quick]

(bench-fleet.py measures a fleet of 100 and 1,000 nodes through the audit log, with the
scheduler and the binders: docs/scale.md.)"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import NAMESPACE, Cluster, NrmPlugin, binaries, skip, wait_for  # noqa: E402
from faultproxy import FaultProxy, token_id  # noqa: E402

TOPOLOGIES = os.path.join(HERE, "..", "topologies")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
KINDS = ("list", "watch", "get", "write")
QUIET_S = 3.0  # no request but watches for this long: the fleet is quiet


def node(i):
    return "node-%03d" % i


def kind(r):
    if r["method"] in ("POST", "PUT", "PATCH", "DELETE"):
        return "write"
    if r["method"] != "GET":
        return "other"
    if r["watch"]:
        return "watch"
    # A collection (its path does not name one object) is a list.
    if r["path"] in (SLICES, "/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceclaims") \
            or r["path"].endswith("/resourceclaims"):
        return "list"
    return "get"


def failed(r):
    """A read the server did not answer: the proxy's 502 while the server is away, a starting server's 403
    (its authorizer not synced yet) or 5xx. Writes count as writes, whatever their answer."""
    return r["method"] == "GET" and r["status"] is not None and r["status"] >= 400


def stream_of(r):
    """What a list or watch follows: its path and selectors (a publisher's driver, the node
    view's slices of the node, the binder's labelled claims)."""
    q = r["query"]
    return (r["path"], q.get("fieldSelector", ""), q.get("labelSelector", ""))


def stream_name(key):
    path, fields, labels = key
    what = path.rsplit("/", 1)[-1]
    return "%s %s" % (what, ",".join(x for x in (fields, labels) if x))


class Fleet:
    def __init__(self, nodes, work):
        self.nodes, self.work, self.plugins = nodes, work, []
        self.cluster = self.proxy = None
        self.index = {}

    def up(self, bindir):
        """The control plane, nrm.yaml, the Nodes, the proxy, and the DaemonSet's pod on every Node."""
        self.cluster = Cluster(self.work, "fleet", bindir)
        nodes = self.nodes
        self.cluster.install_nrm()
        # Nodes of one size: the slices come from the recorded machines, which the server does not compare.
        self.cluster.create_nodes([(node(i), 64, 256 << 30) for i in range(nodes)])
        # socketserver listens with a backlog of 5, which a fleet connecting at once overflows (the
        # kernel drops a SYN, the client sends it again after 1 s): widened, so the spreads are nrm's.
        self.proxy = FaultProxy(self.cluster)
        self.proxy.server.socket.listen(1024)
        t0 = time.monotonic()
        if not wait_for(lambda: len(self.daemon_pods()) == nodes, 120 + nodes, 0.5):
            raise SystemExit("bench-storms: the DaemonSet controller made %d of %d pods"
                             % (len(self.daemon_pods()), nodes))
        self.pods_s = time.monotonic() - t0
        self.topos = sorted(glob.glob(os.path.join(TOPOLOGIES, "*.xml")))

    def daemon_pods(self):
        """{node: the DaemonSet's pod on it}, for the pods the scheduler placed."""
        s, pods = self.cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io%%2Fname%%3Dnrm"
                                   % NAMESPACE)
        return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in (pods.get("items", []) if s == 200 else [])
                if p["spec"].get("nodeName")
                and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}

    def start(self):
        """Every plugin started, each with its own token (read back to name its requests)."""
        for i in range(self.nodes):
            p = NrmPlugin(self.cluster, node(i), self.work, ["-t", self.topos[i % len(self.topos)]], proxy=self.proxy)
            p.start()
            with open(os.path.join(p.dir, "kubeconfig.token")) as fh:
                self.index[token_id(fh.read().strip())] = i
            self.plugins.append(p)

    def requests(self, since):
        with self.proxy.lock:
            return [r for r in self.proxy.requests if r["t"] >= since]

    def who(self, r):
        return self.index.get(r["token"])

    def streams(self, since, k):
        """{plugin: the streams it listed (k "list") or watched (k "watch") with a 200 since since}."""
        out = {}
        for r in self.requests(since):
            if r["status"] == 200 and kind(r) == k and self.who(r) is not None:
                out.setdefault(self.who(r), set()).add(stream_of(r))
        return out

    def published(self, since):
        """Every plugin watches all it listed (and listed at least one collection)."""
        listed, watched = self.streams(since, "list"), self.streams(since, "watch")
        return all(listed.get(i) and listed[i] <= watched.get(i, set()) for i in range(self.nodes))

    def watching(self, since, streams):
        """Every plugin has opened a watch again on each of its streams since since."""
        watched = self.streams(since, "watch")
        return all(streams.get(i, set()) <= watched.get(i, set()) for i in range(self.nodes))

    def quiet_since(self, since):
        """When the last request other than a watch arrived (since, when none)."""
        ts = [r["t"] for r in self.requests(since) if kind(r) != "watch"]
        return max(ts) if ts else since

    def wait_quiet(self, since, timeout, ready):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if ready() and time.monotonic() - self.quiet_since(since) >= QUIET_S:
                return True
            time.sleep(0.25)
        return False

    def check_alive(self):
        for p in self.plugins:
            if p.proc.poll() is not None:
                raise SystemExit("bench-storms: the plugin of %s exited (%s):\n%s"
                                 % (p.node, p.proc.returncode, p.text()[-2000:]))

    def restart_apiserver(self):
        subprocess.run([os.path.join(clusterlib.HERE, "control-plane.sh"), "restart-apiserver", self.cluster.dir],
                       check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        for p in self.plugins:
            if p.proc and p.proc.poll() is None:
                p.proc.terminate()
        for p in self.plugins:
            p.stop()
        if self.proxy:
            self.proxy.stop()
        if self.cluster:
            self.cluster.stop()


def per_plugin(fleet, reqs):
    """{kind: [count for each plugin]}, the reads the server did not answer counted apart as "failed"."""
    out = {k: [0] * fleet.nodes for k in KINDS + ("failed",)}
    for r in reqs:
        i, k = fleet.who(r), kind(r)
        if i is None:
            continue
        if failed(r):
            out["failed"][i] += 1
        elif k in out:
            out[k][i] += 1
    if not any(out["failed"]):
        del out["failed"]
    return out


def summary(counts):
    return "  ".join("%s %g/%g" % (k, statistics.median(v), max(v)) for k, v in counts.items())


def firsts(fleet, reqs, t0, k):
    """Seconds from t0 to the first request of kind k answered 200 of each stream of each plugin."""
    first = {}
    for r in sorted(reqs, key=lambda r: r["t"]):
        if kind(r) == k and r["status"] == 200:
            first.setdefault((fleet.who(r), stream_of(r)), r["t"] - t0)
    return sorted(first.values())


def verdict(ok):
    return "met" if ok else "NOT MET"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nrm", help="the nrm program")
    p.add_argument("--nodes", type=int, default=100, help="plugins, one node each (default 100)")
    p.add_argument("--rest", type=float, default=60.0, help="seconds at rest (default 60)")
    p.add_argument("--quick", action="store_true", help="20 nodes, 15 s at rest (make bench)")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.rest = min(args.nodes, 20), min(args.rest, 15.0)
    clusterlib.NRM = os.path.abspath(args.nrm)
    if not os.access(clusterlib.NRM, os.X_OK):
        skip("bench-storms: no nrm program at %s" % args.nrm)
    bindir = binaries()
    # Short: a plugin's kubelet directory holds sockets, whose paths must fit 107 characters.
    work = tempfile.mkdtemp(prefix="nrm-fleet-")
    fleet = None
    try:
        fleet = Fleet(args.nodes, work)
        fleet.up(bindir)
        n = args.nodes
        t0 = time.monotonic()
        fleet.start()
        if not fleet.wait_quiet(t0, 60 + 3 * n, lambda: fleet.published(t0)):
            raise SystemExit("bench-storms: the fleet did not publish within %d s" % (60 + 3 * n))
        t_pub = fleet.quiet_since(t0) - t0
        start = fleet.requests(t0)
        streams = fleet.streams(t0, "list")
        nst = [len(streams.get(i, ())) for i in range(n)]
        kinds = {}
        for i in range(n):
            for key in streams.get(i, ()):
                label = stream_name(key).replace(node(i), "<node>")
                kinds[label] = kinds.get(label, 0) + 1
        print("bench-storms: %d plugins (%s..%s, %d recorded machines in turn, claims from the API), one real "
              "kube-apiserver %s (nrm.yaml applied, a Node and a DaemonSet pod each, %d pods made in %.1f s) behind "
              "one recording proxy, %d CPUs here"
              % (n, node(0), node(n - 1), len(fleet.topos), fleet.cluster.version, n, fleet.pods_s, os.cpu_count()))
        print("  what the plugins list and watch (plugins each):")
        for k in sorted(kinds):
            print("    %-72s %d" % (k, kinds[k]))
        print("  streams per plugin: median %g, max %d; every plugin watching all it listed, and quiet, "
              "after %.1f s" % (statistics.median(nst), max(nst), t_pub))
        print("  counts per plugin, median/max; list: a collection GET, watch: watch=true, get: one object, "
              "write: POST/PUT/PATCH/DELETE; failed: a GET answered 4xx or 5xx, apart")
        results = []

        c_start = per_plugin(fleet, start)
        print("  %-8s %s" % ("start", summary(c_start)))
        per_node = {}
        for sl in fleet.cluster.slices():
            per_node[sl["spec"].get("nodeName")] = per_node.get(sl["spec"].get("nodeName"), 0) + 1
        needed = [per_node.get(node(i), 0) for i in range(n)]
        results.append(("start: a list per stream", all(c_start["list"][i] <= nst[i] for i in range(n)),
                        "lists max %d, streams max %d" % (max(c_start["list"]), max(nst))))
        # An empty server: the needed writes are one create per slice.
        results.append(("start: writes = the slices published", c_start["write"] == needed,
                        "%d writes for %d slices" % (sum(c_start["write"]), sum(needed))))
        results.append(("start: a watch per stream", all(c_start["watch"][i] <= nst[i] for i in range(n)),
                        "watches max %d" % max(c_start["watch"])))

        # -- rest
        t_rest = time.monotonic()
        time.sleep(args.rest)
        fleet.check_alive()
        rest = fleet.requests(t_rest)
        scale = 3600.0 / args.rest
        c_rest = per_plugin(fleet, rest)
        hourly = {k: [x * scale for x in v] for k, v in c_rest.items()}
        print("  %-8s %s   (%.0f s)" % ("rest", summary(c_rest), args.rest))
        print("  %-8s %s   (extrapolated from %.0f s)" % ("per hour", summary(hourly), args.rest))
        pubs = statistics.median(sum(1 for k in streams.get(i, ()) if "spec.driver=" in k[1]) for i in range(n))
        # What the timers do in an hour, which a short rest may miss (docs/kubernetes-api.md):
        # a watch ends after its timeoutSeconds (300-599 s, mean 450) and is opened again; a
        # publisher lists again every 600 s (a new watch follows, and a Node GET); the binder's
        # resync every 60 s replays its store and sends nothing.
        binder = statistics.median(sum(1 for k in streams.get(i, ()) if k[0].endswith("/resourceclaims"))
                                   for i in range(n))
        others = statistics.median(nst) - pubs - binder
        print("  %-8s watch %.0f  list %.0f  get %.0f   (expected from the timers: %g publishers list every 600 s, "
              "each list and each watch timeout (300-599 s) opens a watch, for %g more streams too; "
              "the binder's resync sends no request)"
              % ("timers/h", pubs * 12 + (others + binder) * 8, pubs * 6, pubs * 6, pubs, others + binder))
        results.append(("rest: no writes", sum(c_rest["write"]) == 0, "%d writes" % sum(c_rest["write"])))
        open_w = fleet.proxy.open_watches()
        results.append(("rest: one watch per stream", open_w == sum(nst),
                        "%d watches open for %d streams" % (open_w, sum(nst))))
        timer_lists = pubs * 6
        results.append(("rest: no lists in an hour (measured and timers)",
                        sum(c_rest["list"]) == 0 and timer_lists == 0,
                        "%d lists in %.0f s, %.0f per plugin and hour extrapolated; %.0f from the timers"
                        % (sum(c_rest["list"]), args.rest, statistics.median(hourly["list"]), timer_lists)))

        # -- storms
        for name in ("expire", "restart"):
            t_s = time.monotonic()
            marks = [len(p.text()) for p in fleet.plugins]
            if name == "expire":
                ended = fleet.proxy.expire_watches()
                how = "%d watches ended with 410 Expired by the proxy" % ended
            else:
                fleet.restart_apiserver()
                how = "restart-apiserver returned (/readyz) after %.1f s" % (time.monotonic() - t_s)
            if not fleet.wait_quiet(t_s, 60 + 2 * n, lambda: fleet.watching(t_s, streams)
                                    and fleet.proxy.open_watches() >= sum(nst)):
                raise SystemExit("bench-storms: the fleet did not watch again and was not quiet within %d s after the "
                                 "%s (%d watches open for %d streams)"
                                 % (60 + 2 * n, name, fleet.proxy.open_watches(), sum(nst)))
            reqs = fleet.requests(t_s)
            t_quiet = fleet.quiet_since(t_s) - t_s
            c = per_plugin(fleet, reqs)
            print("  %-8s %s   (%s)" % (name, summary(c), how))
            t_back, since = t_s, "after it"
            if name == "restart":
                # The new server answers before /readyz says so: its first answer, after the proxy's last 502.
                down = [r["t"] for r in reqs if r["status"] == 502]
                up = [r["t"] for r in reqs if r["status"] not in (None, 502) and r["t"] >= max(down or [t_s])]
                t_back = min(up or [t_s])
                since = "after the new server's first answer"
                print("           the new server answered %.1f s after the restart began (%d requests refused by "
                      "the proxy while it was away, %d answered 403 while it started)"
                      % (t_back - t_s, len(down), sum(1 for r in reqs if r["status"] == 403)))
            too_old = sum(p.text()[m:].count("too old resource version") for p, m in zip(fleet.plugins, marks))
            if name == "restart":
                print("           %d watches resumed from their last version were told too old resource version "
                      "(410) by the new server, whose watch cache starts at its own list (the plugins' logs)"
                      % too_old)
            lists_ = firsts(fleet, reqs, t_back, "list")
            first, what = (lists_, "re-lists") if lists_ else (firsts(fleet, reqs, t_back, "watch"), "re-watches")
            if len(first) > 1:
                sd = statistics.pstdev(first)
                early = sum(1 for x in first if x < first[0] + 0.1)
                print("           %s of %d streams from %.2f to %.2f s %s (span %.2f s, stddev %.3f s; "
                      "%d within 0.1 s of the first), quiet %.1f s after the %s"
                      % (what, len(first), first[0], first[-1], since, first[-1] - first[0], sd, early, t_quiet,
                         name))
            results.append(("%s: a list per stream" % name, all(c["list"][i] <= nst[i] for i in range(n)),
                            "lists max %d" % max(c["list"])))
            results.append(("%s: no writes (nothing changed)" % name, sum(c["write"]) == 0,
                            "%d writes" % sum(c["write"])))
            more = ", %d of them resumed watches the new server ended with 410, each listed and watched again" \
                % too_old if name == "restart" and too_old else ""
            if "failed" in c:
                more += ", and %d failed while the server was away or starting" % sum(c["failed"])
            results.append(("%s: a watch per stream" % name, all(c["watch"][i] <= nst[i] for i in range(n)),
                            "watches answered max %d%s" % (max(c["watch"]), more)))
            if name == "expire" and lists_:
                # The proxy ends each watch within 0.1 s of the call: a list within 0.2 s of the
                # call did not wait (the server's queueing can only add to the wait, never take from it).
                soon = sum(1 for x in lists_ if x < 0.2)
                print("           from the expiry to its list, per stream: min %.3f, median %.3f, max %.3f s; "
                      "%d of %d under 0.2 s" % (lists_[0], statistics.median(lists_), lists_[-1], soon, len(lists_)))
                results.append(("expire: no list within 0.2 s of the expiry", soon == 0,
                                "%d of %d lists within 0.2 s; min %.3f s" % (soon, len(lists_), lists_[0])))
        print("(the waits include the server's and the proxy's own queueing, which grows with the fleet; "
              "tests/cluster/test-expiry.py measures one plugin)")
        print("goals:")
        for what, ok, fig in results:
            print("  %-48s %-8s (%s)" % (what, verdict(ok), fig))
    finally:
        if fleet:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
