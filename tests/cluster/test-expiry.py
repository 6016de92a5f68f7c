#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every watch expires at once (410 Expired, as from an API server that
restarted or whose watch cache fell behind), on a real control plane: each
of the plugin's lists and watches (the publishers, the node view, the
binder) lists again once, after a random wait of 0.25 to 0.75 s rather than
at once, so that a fleet of nodes does not hit the API server in step; then
watches again, and writes nothing, since nothing changed.

The real server gives a 410 only when a watch resumes from a version it no
longer holds, which cannot be timed for every watch of a plugin at once
(test-faults.py found that a restart sends bookmarks first): the 410 events
come from faultproxy.py between nrm and the real server. Everything else
nrm reads and writes is the real server's."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check, finish, skip, wait_for, workdir  # noqa
from faultproxy import FaultProxy  # noqa: E402

if not os.access(NRM, os.X_OK):
    skip("build nrm first (make check)")
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-x"
ROUNDS = 3

bindir = binaries()
work = workdir()
cluster = Cluster(work, "expiry", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 24, 64 << 30)])
proxy = FaultProxy(cluster)


plugin = NrmPlugin(cluster, NODE, work, ["-t", TOPO, "--cpu-mode", "numa"], proxy=proxy)
plugin.start()


def stream(r):
    return (r["path"], r["query"].get("fieldSelector", ""), r["query"].get("labelSelector", ""))


def lists(reqs):
    return [r for r in reqs if r["method"] == "GET" and not r["watch"] and "/nodes/" not in r["path"]]


def watching(since):
    """Every stream listed since `since` has its watch open again."""
    reqs = [r for r in proxy.requests if r["t"] >= since]
    listed = {stream(r) for r in lists(reqs)}
    opened = {stream(r) for r in reqs if r["watch"] and r["status"] == 200}
    return listed and listed <= opened and proxy.open_watches() == len(listed)


check(plugin.register() and wait_for(plugin.settled, 60), "the plugin publishes through the proxy")
check(wait_for(lambda: watching(0.0), 30), "the plugin watches (%d open)" % proxy.open_watches())
streams = {stream(r) for r in lists(proxy.requests)}
check(len(streams) >= 3, "it lists and watches %d collections: %s" % (len(streams), sorted(s[0] for s in streams)))
slices = cluster.slices(NODE)
mark = len(cluster.audit())
delays = []
for n in range(ROUNDS):
    time.sleep(0.5)
    t0 = time.monotonic()
    ended = proxy.expire_watches()
    ok = wait_for(lambda: watching(t0) and {stream(r) for r in lists(proxy.requests) if r["t"] >= t0} == streams,
                  20)
    check(ok and ended == len(streams), "round %d: %d watches got 410 Expired; every stream lists and watches "
          "again" % (n, ended))
    reqs = [r for r in proxy.requests if r["t"] >= t0]
    again = lists(reqs)
    check(len(again) == len(streams), "round %d: one list per stream (%d lists, %d streams)"
          % (n, len(again), len(streams)))
    check(not [r for r in reqs if r["method"] != "GET"], "round %d: no writes" % n)
    delays += [r["t"] - t0 for r in again]
print("# delays: " + " ".join("%.3f" % d for d in sorted(delays)))
# The ERROR event leaves at once; a list before 0.2 s did not wait.
check(delays and min(delays) >= 0.2, "no list sooner than 0.2 s after the expiry (first %.3f s)" % min(delays or [0]))
check(delays and max(delays) < 5.0, "every list within 5 s (last %.3f s)" % max(delays or [0]))
# Random waits: lists within 50 ms of each other would be a fleet in step.
check(delays and max(delays) - min(delays) > 0.05, "the waits differ (span %.3f s)"
      % (max(delays or [0]) - min(delays or [0])))
time.sleep(2)  # the audit log's batch
check(cluster.slices(NODE) == slices and not cluster.writes(mark),
      "the slices are unchanged, and the real server's audit log shows no write by nrm (%d)"
      % len(cluster.writes(mark)))
check(plugin.stop() == 0, "the plugin stops cleanly")
proxy.stop()
cluster.stop()
finish()
