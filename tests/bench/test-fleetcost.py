#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fleetcost's readers on recorded answers: audit events counted per node,
kind and driver (429s apart), the last request but a watch, timestamps,
medians, and the server's /metrics parsed into deltas. The fleet benches
print their goals from these; a wrong count here is a wrong verdict there.
Exits 77 without prometheus_client (scripts/deps.sh installs it)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import fleetcost
except ImportError as e:
    print("SKIP: %s (scripts/deps.sh installs it)" % e)
    sys.exit(77)

failed = 0


def check(ok, what):
    global failed
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    failed += not ok


def ev(node, verb, name="", uri="", code=200, at="2026-12-08T01:00:00.000000Z", resource="resourceslices"):
    e = {"verb": verb, "requestURI": uri, "objectRef": {"resource": resource, "name": name},
         "responseStatus": {"code": code}, "requestReceivedTimestamp": at}
    if node:
        e["user"] = {"extra": {fleetcost.NODE_KEY: [node]}}
    return e


SEL = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dcpu.nrm.io"
events = [
    ev("n1", "list", uri=SEL),
    ev("n1", "list", uri=SEL, code=429),
    ev("n1", "watch", uri=SEL, at="2026-12-08T01:00:09.000000Z"),
    ev("n1", "create", name="00000-memory.nrm.io-n1-abcde", at="2026-12-08T01:00:05.250000Z"),
    ev("n1", "get", uri="/api/v1/nodes/n1", resource="nodes"),
    ev("n2", "patch", name="00000-cpu.nrm.io-n2-xyz", at="2026-12-08T01:00:07.000000Z"),
    ev(None, "list", uri=SEL),  # the bench's admin: no node
    ev("elsewhere", "delete", name="00000-cpu.nrm.io-elsewhere"),  # a node not asked for
]
c = fleetcost.per_node(events, ["n1", "n2", "n3"])
check(sorted(c) == ["n1", "n2", "n3"], "every node asked for is present, no other")
check(c["n3"]["all"] == 0, "a node without requests counts 0")
check((c["n1"]["all"], c["n1"]["list"], c["n1"]["watch"], c["n1"]["write"], c["n1"]["get"]) == (5, 2, 1, 1, 1),
      "n1: 5 requests, 2 lists, 1 watch, 1 write, 1 get: %s" % c["n1"])
check(c["n1"]["refused"] == 1 and c["n1"].get("cpu.nrm.io refused") == 1, "the 429 counted, and for its driver")
check(c["n1"].get("cpu.nrm.io") == 3 and c["n1"].get("memory.nrm.io") == 1,
      "drivers from the field selector and the slice name: %s" % c["n1"])
check(c["n2"]["write"] == 1 and c["n2"].get("cpu.nrm.io") == 1, "a patch is a write, of its driver")
check(fleetcost.per_driver_max(c, fleetcost.DRIVERS) == 3, "the most requests a node made for one driver: 3")
check(fleetcost.per_driver_max(c, fleetcost.DRIVERS, served=True) == 2, "...2 without the refused one")
only = fleetcost.per_node(events, ["n1"], resource="nodes")
check(only["n1"]["all"] == 1, "resource= keeps that resource's requests only")

last = fleetcost.last_request(events, {"n1", "n2"})
check(last == fleetcost.parse_time("2026-12-08T01:00:07.000000Z"), "the last request but a watch (the patch)")
check(fleetcost.last_request(events, {"n3"}) is None, "no request: None")
check(abs(fleetcost.parse_time("2026-12-08T01:00:05.250000Z") - fleetcost.parse_time("2026-12-08T01:00:00.000000Z")
          - 5.25) < 1e-6, "audit timestamps to the microsecond")
check(fleetcost.parse_time("1970-01-01T00:00:01.000000Z") == 1.0, "timestamps are UTC")

tab = fleetcost.table(c, ("all", "write"))
check(tab["all"] == (1, 5) and tab["write"] == (1, 1), "median and max over the nodes: %s" % tab)


class FakeCluster:
    def __init__(self, text):
        self.text = text

    def api(self, method, path, content_type=None):
        return 200, self.text


def metrics(lists, watch_events, watch_bytes, db):
    return FakeCluster("""# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="resourceslices",verb="LIST",group="resource.k8s.io"} %d
apiserver_request_total{code="429",resource="resourceslices",verb="LIST",group="resource.k8s.io"} 1
apiserver_request_total{code="200",resource="nodes",verb="LIST",group=""} 1000
apiserver_request_total{code="201",resource="resourceslices",verb="POST",group="resource.k8s.io"} 7
# HELP apiserver_watch_events_total x
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="resource.k8s.io",resource="resourceslices",version="v1"} %d
# HELP apiserver_watch_events_sizes x
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{group="resource.k8s.io",resource="resourceslices",version="v1",le="+Inf"} %d
apiserver_watch_events_sizes_sum{group="resource.k8s.io",resource="resourceslices",version="v1"} %d
apiserver_watch_events_sizes_count{group="resource.k8s.io",resource="resourceslices",version="v1"} %d
# HELP apiserver_storage_size_bytes x
# TYPE apiserver_storage_size_bytes gauge
apiserver_storage_size_bytes{storage_cluster_id="etcd-0"} %d
""" % (lists, watch_events, watch_events, watch_bytes, watch_events, db))


before = fleetcost.Metrics(metrics(10, 100, 5000, 1 << 20))
after = fleetcost.Metrics(metrics(25, 130, 8000, 2 << 20))
check(before.sum("apiserver_request_total", resource="resourceslices", verb="LIST") == 11,
      "a sum over every code of the labels asked for")
d = fleetcost.api_delta(before, after)
check(d["list"] == 15 and d["post"] == 0 and d["watch"] == 0, "request deltas for slices alone: %s" % d)
check(d["watch_events"] == 30 and d["watch_event_bytes"] == 3000, "watch events and their bytes between snapshots")
check(after.sum("apiserver_storage_size_bytes") == 2 << 20, "the storage's size")

print("%d failed" % failed if failed else "all passed")
sys.exit(1 if failed else 0)
