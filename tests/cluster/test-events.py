#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's Events (events.k8s.io/v1) on the real control plane, written
as the DaemonSet's identity with exactly the RBAC of
deploy/kubernetes/nrm.yaml (a rule missing there, and no Event reaches the
server): a claim whose prepare nrm refuses gets a Warning Event with the
reason and the very message of the kubelet's answer; the same refusal
repeated is one Event whose series counts the repetitions, patched, not an
Event each; a device turning unhealthy (an uncorrected EDAC error in a fake
sysfs tree, --fsroot, the one stand-in) gives a Warning Event on the Node,
and its recovery a Normal one. Everything is read back from the real
server and its audit log."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, stop_all, wait_for, workdir, put_file, edac_mc)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE = "node-e"
DRIVER = "memory.nrm.io"
SA = "system:serviceaccount:nrm-system:nrm"
bindir = binaries()
work = workdir()
root = os.path.join(work, "root")


def put(rel, text):
    put_file(root, rel, text + "\n")


put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb")
edac_mc(root, 0, "Skylake Socket#0 IMC#0", 0, 0)
edac_mc(root, 1, "Skylake Socket#1 IMC#0", 0, 0)
config = os.path.join(work, "nrm.json")
with open(config, "w") as fh:
    json.dump({"memory": {"health": {"pollSeconds": 1}}}, fh)

cluster = Cluster(work, "events", bindir)
plugin = None
try:
    cluster.install_nrm()
    cluster.create_nodes([(NODE, 24, 64 << 30)])
    plugin = NrmPlugin(cluster, NODE, work, ["-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"),
                                             "--fsroot", root, "--drivers", "memory"])
    plugin.start()
    check(plugin.register() and wait_for(plugin.settled), "memory.nrm.io registers and publishes")

    def events(**want):
        s, lst = cluster.api("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
        return [e for e in (lst.get("items", []) if s == 200 else [])
                if e.get("reportingController") == DRIVER
                and all(e.get(k) == v or e.get("regarding", {}).get(k) == v for k, v in want.items())]

    # --- a refused prepare: an Event on the claim -----------------------------
    claim = cluster.allocate({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                              "metadata": {"name": "mem-bad", "namespace": "default"},
                              "spec": {"devices": {"requests": [{"name": "mem", "exactly": {
                                  "deviceClassName": DRIVER}}]}}},
                             NODE, [("mem", DRIVER, NODE, "numa9")])
    mark = len(cluster.audit())
    ok, out = plugin.prepare(DRIVER, claim)
    check(not ok and "numa9" in out, "nrm refuses a claim on a device its pool lacks: " + out)
    uid = claim["metadata"]["uid"]

    def on_claim():
        return events(kind="ResourceClaim", name="mem-bad")
    check(wait_for(lambda: len(on_claim()) == 1, 30), "one Event on the claim: %s" % on_claim())
    ev = (on_claim() or [{}])[0]
    reg = ev.get("regarding", {})
    check(ev.get("type") == "Warning" and ev.get("reason") == "NotFound" and ev.get("action") == "PrepareResources",
          "a Warning, reason NotFound (the rule that refused, as /metrics counts it), action PrepareResources: "
          "%s %s %s" % (ev.get("type"), ev.get("reason"), ev.get("action")))
    check(reg == {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "namespace": "default",
                  "name": "mem-bad", "uid": uid}, "it regards the claim, by its UID too: %s" % reg)
    check(ev.get("reportingInstance") == NODE and ev.get("eventTime"),
          "reported by %s on node %s at %s" % (ev.get("reportingController"), ev.get("reportingInstance"),
                                               ev.get("eventTime")))
    # The kubelet's answer, as dra-client prints it, holds the same message.
    check(ev.get("note") and ev["note"] in out and ev["note"].startswith(DRIVER + ": claim default/mem-bad: "),
          "its note is the message of the kubelet's answer: %s" % ev.get("note"))

    # --- the same refusal again: one Event, a series --------------------------
    for _ in range(3):
        plugin.prepare(DRIVER, claim)

    def count():
        e = on_claim()
        return (e[0].get("series") or {}).get("count") if len(e) == 1 else None
    check(wait_for(lambda: count() is not None and count() >= 2, 10),
          "the second refusal makes a series at once: %s" % count())
    check(wait_for(lambda: count() == 4, 45, 1),
          "four refusals: still one Event, series.count 4 (patched within 30 s): %s" % on_claim())
    writes = [(e["verb"], e["objectRef"].get("resource"), e.get("responseStatus", {}).get("code"))
              for e in cluster.writes(mark, user=SA) if e["objectRef"].get("apiGroup") == "events.k8s.io"]
    check(writes and writes[0] == ("create", "events", 201) and all(w[0] in ("create", "patch") for w in writes)
          and sum(w[0] == "create" for w in writes) == 1 and all(w[2] in (200, 201) for w in writes),
          "the audit log: one create, then patches, all allowed by nrm.yaml's RBAC: %s" % writes)

    # --- health on the Node ---------------------------------------------------
    def on_node(reason):
        return events(kind="Node", name=NODE, reason=reason)
    check(not on_node("DeviceUnhealthy") and not on_node("DeviceHealthy"), "no health Event while all is well")
    edac_mc(root, 1, "Skylake Socket#1 IMC#0", 0, 1)
    check(wait_for(lambda: on_node("DeviceUnhealthy"), 60),
          "an uncorrected error on socket 1: an Event on the Node: %s" % on_node("DeviceUnhealthy"))
    ev = (on_node("DeviceUnhealthy") or [{}])[0]
    check(ev.get("type") == "Warning" and ev.get("regarding") == {"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                                  "uid": NODE}
          and ev.get("metadata", {}).get("namespace") == "default",
          "a Warning in `default`, regarding the Node as the kubelet names it (uid: its name): %s"
          % ev.get("regarding"))
    check("device numa1 is unhealthy" in ev.get("note", "") and "1 uncorrected" in ev.get("note", "")
          and DRIVER + "/memory-uncorrected:NoExecute" in ev.get("note", ""),
          "its note names the device, the count and the taint: %s" % ev.get("note"))
    time.sleep(12)  # more than one health pass of each kind while unhealthy
    edac_mc(root, 1, "Skylake Socket#1 IMC#0", 0, 0)
    check(wait_for(lambda: on_node("DeviceHealthy"), 60), "the counter cleared: a Normal Event: %s"
          % [e.get("note") for e in on_node("DeviceHealthy")])
    ev = (on_node("DeviceHealthy") or [{}])[0]
    check(ev.get("type") == "Normal" and "device numa1 is healthy again" in ev.get("note", ""),
          "Normal, numa1 healthy again: %s %s" % (ev.get("type"), ev.get("note")))
    # A health pass every second (pollSeconds 1) and every 10 s: only the
    # turns are Events, neither repeated nor a series.
    check(len(on_node("DeviceUnhealthy")) == 1 and len(on_node("DeviceHealthy")) == 1
          and not any(e.get("series") for e in on_node("DeviceUnhealthy") + on_node("DeviceHealthy")),
          "one Event each, once: not one a health pass")
finally:
    stop_all(cluster, plugin)

finish()
