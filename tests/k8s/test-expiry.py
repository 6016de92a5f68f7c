#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every watch expires at once (410 Expired, as from an API server that
restarted or fell behind): each of the plugin's lists and watches (the
publishers, the node view, the binder) lists again once, after a random
wait of 0.25 to 0.75 s rather than at once, so that a fleet of nodes does
not hit the API server in step; then watches again, and writes nothing,
since nothing changed."""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-x"
ROUNDS = 3


def is_watch(r):
    return r["query"].get("watch") in ("1", "true")


def stream(r):
    return (r["path"], r["query"].get("fieldSelector", ""), r["query"].get("labelSelector", ""))


def lists(reqs):
    return [r for r in reqs if r["method"] == "GET" and not is_watch(r) and "/nodes/" not in r["path"]]


work = tempfile.mkdtemp(prefix="nrm-expiry-")
api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE)
api.write_kubeconfig(os.path.join(work, "kubeconfig"), token="token-0")
log = os.path.join(work, "plugin.log")
plugin = subprocess.Popen([NRM, "plugin", "-t", TOPO, "--node-name", NODE, "--kubeconfig",
                           os.path.join(work, "kubeconfig"), "--kubelet-dir", os.path.join(work, "k"),
                           "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"),
                           "--create-state-dir", "--reconcile-interval", "0"],
                          stdout=open(log, "w"), stderr=subprocess.STDOUT)


def watching(since):
    """Every stream listed since `since` has its watch open again."""
    reqs = [r for r in api.requests if r["t"] >= since]
    listed = {stream(r) for r in lists(reqs)}
    opened = {stream(r) for r in reqs if is_watch(r) and r["status"] == 200}
    return listed and listed <= opened and len(api.open_watches()) == len(listed)


check(wait_for(lambda: watching(0.0), 30), "the plugin publishes and watches")
streams = {stream(r) for r in lists(api.requests)}
check(len(streams) >= 3, "it lists and watches %d collections" % len(streams))
slices = api.slices()
delays = []
for n in range(ROUNDS):
    time.sleep(0.5)
    t0 = time.monotonic()
    api.expire_watches()
    ok = wait_for(lambda: watching(t0) and {stream(r) for r in lists(api.requests) if r["t"] >= t0} == streams, 20)
    check(ok, "round %d: every stream lists and watches again" % n)
    reqs = [r for r in api.requests if r["t"] >= t0]
    again = lists(reqs)
    check(len(again) == len(streams), "round %d: one list per stream (%d lists, %d streams)"
          % (n, len(again), len(streams)))
    check(not [r for r in reqs if r["method"] != "GET"], "round %d: no writes" % n)
    delays += [r["t"] - t0 for r in again]
print("delays: " + " ".join("%.3f" % d for d in sorted(delays)))
# The ERROR event leaves at once; a list before 0.2 s did not wait.
check(min(delays) >= 0.2, "no list sooner than 0.2 s after the expiry (first %.3f s)" % min(delays))
check(max(delays) < 5.0, "every list within 5 s (last %.3f s)" % max(delays))
# Random waits: %d lists within 50 ms of each other would be a fleet in step.
check(max(delays) - min(delays) > 0.05, "the waits differ (span %.3f s)" % (max(delays) - min(delays)))
check(api.slices() == slices, "the slices are unchanged")
stop_plugin(plugin, api, log, work)
finish()
