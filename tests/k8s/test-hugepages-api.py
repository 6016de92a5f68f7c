#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Huge pages on demand (memory.hugepagesOnDemand) against a Kubernetes API
server on loopback (fakeapi.py), over a fake sysfs tree: the memory driver
publishes a node's 2Mi room with its binding conditions; a claim allocated
on this node gets its condition True once the node's nr_hugepages is raised
for it, and takes that memory off the node's ordinary-memory device; a claim
the node cannot hold (too little free memory) gets the failure condition,
naming the node, and the pool stays as it was; a restart keeps the raised
pool from its journal."""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
NODE = "node-h"
DRIVER = "memory.nrm.io"
READY, FAILED = DRIVER + "/hugepages-ready", DRIVER + "/hugepages-failed"

work = tempfile.mkdtemp(prefix="nrm-hugepages-api-")
root = os.path.join(work, "root")
NODE_DIR = os.path.join(root, "sys/devices/system/node")


def put(rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


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

api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE)
token = os.path.join(work, "token")
with open(token, "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=token)
log = os.path.join(work, "plugin.log")


def start():
    return subprocess.Popen(
        [NRM, "plugin", "-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"), "--node-name", NODE,
         "--fsroot", root, "--drivers", "memory", "--kubelet-dir", os.path.join(work, "kubelet"),
         "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"), "--create-state-dir",
         "--allow-no-cpuset", "--kubeconfig", kubeconfig, "--log-level", "debug"],
        stdout=open(log, "a"), stderr=subprocess.STDOUT)


def device(name):
    for s in api.slices():
        if s["spec"]["driver"] == DRIVER:
            for d in s["spec"].get("devices", []):
                if d["name"] == name:
                    return d
    return None


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
    return api.put_claim({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": name, "uid": "uid-" + name, "labels": {"nrm.io/node": NODE}},
        "spec": {"devices": {"requests": [{"name": "hp", "exactly": {"deviceClassName": "hugepages.memory.nrm.io"}}]}},
        "status": {"allocation": {
            "devices": {"results": [{"request": "hp", "driver": DRIVER, "pool": NODE, "device": "numa1-hugepages-2mi",
                                     "consumedCapacity": {"hugepages": amount},
                                     "bindingConditions": [READY], "bindingFailureConditions": [FAILED]}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
            "allocationTimestamp": "2026-12-01T10:00:00Z"}}})


def conditions(name):
    for d in (api.get_claim("default", name) or {}).get("status", {}).get("devices", []):
        if d.get("driver") == DRIVER and d.get("device") == "numa1-hugepages-2mi":
            return {c["type"]: c for c in d.get("conditions", [])}
    return {}


plugin = start()
try:
    check(wait_for(lambda: capacity("numa1-hugepages-2mi", "hugepages") == "64Mi"),
          "numa1-hugepages-2mi is published with the on-demand room, 64Mi, though no page is configured")
    dev = device("numa1-hugepages-2mi") or {}
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
          "numa1's ordinary memory is published 16Mi smaller (%s, was %sMi)"
          % (capacity("numa1", "memory"), memory_before))

    claim("hp-b", "48Mi")
    check(wait_for(lambda: conditions("hp-b").get(FAILED, {}).get("status") == "True"),
          "a claim of 48Mi the node lacks the free memory for gets %s True: %s" % (FAILED, conditions("hp-b")))
    msg = conditions("hp-b").get(FAILED, {}).get("message", "")
    check("NUMA node 1: 2Mi huge pages" in msg and "40Mi free" in msg, "...naming the node, the size and why: " + msg)
    check(READY not in conditions("hp-b") and pages(1) == 8, "...and the pool stays at 8 (%d)" % pages(1))

    plugin.send_signal(15)
    check(plugin.wait(15) == 0, "the plugin stops")
    check(pages(1) == 8, "a stop leaves the raised pages to the claim (%d)" % pages(1))
    starts = open(log).read().count("serving ")
    # What the restart publishes, not what the last run left.
    for sl in api.slices():
        if sl["spec"]["driver"] == DRIVER:
            api.delete_slice(sl["metadata"]["name"])
    plugin = start()
    check(wait_for(lambda: open(log).read().count("serving ") > starts), "the plugin starts again")
    check(wait_for(lambda: mebibytes(capacity("numa1", "memory") or "0") == memory_before - 16),
          "after a restart the journal keeps the pool raised and numa1 16Mi smaller (%s)" % capacity("numa1", "memory"))
    check(pages(1) == 8, "nr_hugepages stays 8 after the restart (%d)" % pages(1))
finally:
    stop_plugin(plugin, api, log, work)

finish()
