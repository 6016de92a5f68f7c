#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Huge pages on demand (memory.hugepagesOnDemand) on the real control plane
(kube-apiserver, scheduler, controller-manager), over a fake sysfs tree (the
one stand-in: nr_hugepages and meminfo files under --fsroot). nrm plugin
runs as the DaemonSet's ServiceAccount with a token bound to its pod on the
node. The memory driver publishes the node's 2Mi room with its binding
conditions, read back from the server; a claim the test's admin allocates
on this node (through resourceclaims/status, labelled nrm.io/node as nrm
controller labels it) gets its condition True, written by the plugin, once
the node's nr_hugepages is raised for it, and that memory leaves the node's
ordinary-memory device; a claim the node cannot hold (too little free
memory) gets the failure condition, naming the node, and the pool stays as
it was; a restart keeps the raised pool from its journal.

tests/cluster/test-binding.py proves the rest of the path on this server:
the real scheduler allocating with the binding condition, nrm controller's
label, and the pod bound once the condition is True."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check, failures,  # noqa: E402
                        finish, skip, wait_for, workdir, put_file)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE = "node-h"
DRIVER = "memory.nrm.io"
READY, FAILED = DRIVER + "/hugepages-ready", DRIVER + "/hugepages-failed"
HP = "numa1-hugepages-2mi"
bindir = binaries()
work = workdir()
root = os.path.join(work, "root")
NODE_DIR = os.path.join(root, "sys/devices/system/node")


def put(rel, text):
    put_file(root, rel, text)


def pages(node):
    with open(os.path.join(NODE_DIR, "node%d/hugepages/hugepages-2048kB/nr_hugepages" % node)) as fh:
        return int(fh.read())


for n in (0, 1):
    put("sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages" % n, "0\n")
# 40Mi free on node 1: 16Mi can be raised, 48Mi more cannot.
put("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: 18874368 kB\nNode 1 MemFree: 40960 kB\n")
config = os.path.join(work, "nrm.yaml")
with open(config, "w") as fh:
    fh.write("memory:\n  hugepagesOnDemand:\n    2Mi: 64Mi\n")

cluster = Cluster(work, "hugepages", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 24, 64 << 30, {"hugepages-2Mi": "64Mi"})])
plugin = NrmPlugin(cluster, NODE, work, ["-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"),
                                         "--fsroot", root, "--drivers", "memory"])


def located(name):
    """(the slice's pool, the device) as the server holds them, or (None, None)."""
    for s in cluster.slices(NODE, DRIVER):
        for d in s["spec"].get("devices", []):
            if d["name"] == name:
                return s["spec"]["pool"]["name"], d
    return None, None


def device(name):
    return located(name)[1]


def capacity(name, key):
    d = device(name)
    return d and d.get("capacity", {}).get(key, {}).get("value")


def mebibytes(q):
    units = {"Ki": 1.0 / 1024, "Mi": 1, "Gi": 1024}
    for u, f in units.items():
        if q.endswith(u):
            return int(q[:-2]) * f
    return int(q) / (1024 * 1024)


def claim(name, amount):
    """A claim of amount on numa1's 2Mi pages, labelled for the node and
    allocated there by the test's admin, with the device's conditions."""
    pool, _ = located(HP)
    return cluster.allocate({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": name, "labels": {"nrm.io/node": NODE}},
        "spec": {"devices": {"requests": [{"name": "hp", "exactly": {
            "deviceClassName": "hugepages-2mi.memory.nrm.io", "capacity": {"requests": {"hugepages": amount}}}}]}}},
        NODE, [("hp", DRIVER, pool, HP, {"consumedCapacity": {"hugepages": amount},
                                         "bindingConditions": [READY], "bindingFailureConditions": [FAILED]})])


def conditions(name):
    for d in (cluster.claim("default", name) or {}).get("status", {}).get("devices", []):
        if d.get("driver") == DRIVER and d.get("device") == HP:
            return {c["type"]: c for c in d.get("conditions", [])}
    return {}


plugin.start("--allow-no-cpuset")  # the fake tree has no cgroup: nothing to bind here
check(plugin.register() and wait_for(plugin.settled, 60), "nrm publishes for %s" % NODE)
check(wait_for(lambda: capacity(HP, "hugepages") == "64Mi"),
      "%s is published with the on-demand room, 64Mi, though no page is configured" % HP)
dev = device(HP) or {}
check(dev.get("bindsToNode") is True and dev.get("bindingConditions") == [READY]
      and dev.get("bindingFailureConditions") == [FAILED],
      "...with bindsToNode and its binding conditions: %s" % {k: dev.get(k) for k in (
          "bindsToNode", "bindingConditions", "bindingFailureConditions")})
memory_before = mebibytes(capacity("numa1", "memory"))

claim("hp-a", "16Mi")
check(wait_for(lambda: conditions("hp-a").get(READY, {}).get("status") == "True"),
      "a claim of 16Mi on node 1 gets %s True: %s" % (READY, conditions("hp-a")))
check(pages(1) == 8 and pages(0) == 0, "node1's nr_hugepages is raised to 8, node0's stays 0 (%d, %d)"
      % (pages(1), pages(0)))
check(wait_for(lambda: mebibytes(capacity("numa1", "memory")) == memory_before - 16),
      "numa1's ordinary memory is published 16Mi smaller (%s, was %sMi)" % (capacity("numa1", "memory"), memory_before))

claim("hp-b", "48Mi")
check(wait_for(lambda: conditions("hp-b").get(FAILED, {}).get("status") == "True"),
      "a claim of 48Mi the node lacks the free memory for gets %s True: %s" % (FAILED, conditions("hp-b")))
msg = conditions("hp-b").get(FAILED, {}).get("message", "")
check("NUMA node 1: 2Mi huge pages" in msg and "40Mi free" in msg, "...naming the node, the size and why: " + msg)
check(READY not in conditions("hp-b") and pages(1) == 8, "...and the pool stays at 8 (%d)" % pages(1))

check(plugin.stop() == 0, "the plugin stops")
check(pages(1) == 8, "a stop leaves the raised pages to the claim (%d)" % pages(1))
starts = plugin.text().count("serving ")
# What the restart publishes, not what the last run left.
for sl in cluster.slices(NODE, DRIVER):
    cluster.api("DELETE", "/apis/resource.k8s.io/v1/resourceslices/" + sl["metadata"]["name"])
check(wait_for(lambda: not cluster.slices(NODE, DRIVER), 30), "the test's admin deletes the node's memory slices")
plugin.start("--allow-no-cpuset")
check(wait_for(lambda: plugin.text().count("serving ") > starts), "the plugin starts again")
check(wait_for(lambda: mebibytes(capacity("numa1", "memory") or "0") == memory_before - 16),
      "after a restart the journal keeps the pool raised and numa1 16Mi smaller (%s)" % capacity("numa1", "memory"))
check(pages(1) == 8, "nr_hugepages stays 8 after the restart (%d)" % pages(1))
check(plugin.stop() == 0, "the plugin stops cleanly")
if failures:
    print(plugin.text()[-3000:])
cluster.stop()
finish()
