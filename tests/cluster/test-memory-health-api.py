#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's memory driver on the real control plane, over a fake sysfs
tree (--fsroot, the one stand-in), as the DaemonSet's identity: an
uncorrected EDAC error on socket 1's controller taints numa1 NoExecute in
the ResourceSlice, corrected errors over memory.health.correctedErrorThreshold
taint numa0 NoSchedule, and a memory block of node 0 going offline shrinks
numa0's published capacity, all without a restart (memory.health.pollSeconds:
1). Every taint and capacity is read back from the real API server, whose
DRADeviceTaints gate is on by default in 1.36. The NoExecute taint on numa1,
a device that several claims share, makes kube-controller-manager's
device-taint eviction controller delete every pod with a claim on it but
the one whose request tolerates it; a pod on numa0 stays. Then the machine
turns firmware-first (one ghes_edac controller): an uncorrected error whose
ras:mc_event line, in the fake tree's tracefs, has an address of node 0
taints numa0 alone, and the pod there is deleted."""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, stop_all, wait_for, workdir, put_file, edac_mc)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE = "node-m"
DRIVER = "memory.nrm.io"
bindir = binaries()
work = workdir()
root = os.path.join(work, "root")


def put(rel, text):
    put_file(root, rel, text + "\n")


def block(b, node, state):
    put("sys/devices/system/memory/memory%d/state" % b, state)
    link = os.path.join(root, "sys/devices/system/node/node%d/memory%d" % (node, b))
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink("../../memory/memory%d" % b, link)


put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb")
put("sys/devices/system/memory/block_size_bytes", "8000000")  # 128Mi
for b in range(8):
    block(b, b // 4, "online")
edac_mc(root, 0, "Skylake Socket#0 IMC#0", 0, 0)
edac_mc(root, 1, "Skylake Socket#1 IMC#0", 0, 0)
# tracefs as the plugin finds it: ras:mc_event at the top level and in its
# instance (the kernel makes an instance's files; a tree cannot), and
# trace_pipe, a file that lines are added to.
put("sys/kernel/tracing/events/ras/mc_event/enable", "0")
put("sys/kernel/tracing/instances/nrm/events/ras/mc_event/enable", "0")
trace_pipe = os.path.join(root, "sys/kernel/tracing/instances/nrm/trace_pipe")
open(trace_pipe, "w").close()
config = os.path.join(work, "nrm.json")
with open(config, "w") as fh:
    json.dump({"memory": {"health": {"pollSeconds": 1, "correctedErrorThreshold": 5}}}, fh)

cluster = Cluster(work, "memhealth", bindir)
plugin = None
try:
    cluster.install_nrm()
    cluster.create_nodes([(NODE, 24, 64 << 30)])
    plugin = NrmPlugin(cluster, NODE, work, ["-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"),
                                             "--fsroot", root, "--drivers", "memory"])
    plugin.start()

    def devices():
        return {d["name"]: d for s in cluster.slices(NODE, DRIVER) for d in s["spec"].get("devices", [])}

    def taints(name):
        return sorted((t["key"], t["effect"]) for t in devices().get(name, {}).get("taints") or [])

    def capacity(name):
        return devices().get(name, {}).get("capacity", {}).get("memory", {}).get("value")

    check(plugin.register() and wait_for(lambda: set(devices()) == {"numa0", "numa1"}),
          "memory.nrm.io publishes numa0 and numa1: %s" % sorted(devices()))
    check(taints("numa0") == [] and taints("numa1") == [], "no taints while the counters are 0")
    start0 = capacity("numa0")

    # Pods the real scheduler places on the node, each with a claim of 1Gi
    # of one NUMA node's memory (numa1 is shared by a, b and t); t's request
    # tolerates the taint. No kubelet runs them: what the device-taint
    # eviction controller does is read from the API (a deletion).
    pods = {"a": (1, False), "b": (1, False), "c": (0, False), "t": (1, True)}
    for name, (numa, tolerate) in pods.items():
        req = {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "1Gi"}},
               "selectors": [{"cel": {"expression": 'device.attributes["resource.kubernetes.io"].numaNode == %d'
                                      % numa}}]}
        if tolerate:
            req["tolerations"] = [{"key": DRIVER + "/memory-uncorrected", "operator": "Exists",
                                   "effect": "NoExecute"}]
        s, r = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "mem-" + name},
            "spec": {"devices": {"requests": [{"name": "mem", "exactly": req}]}}})
        check(s == 201, "claim mem-%s created: %s" % (name, s if s == 201 else r))
        s, r = cluster.api("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-" + name},
            "spec": {"resourceClaims": [{"name": "m", "resourceClaimName": "mem-" + name}],
                     "containers": [{"name": "c", "image": "never-run", "resources": {"claims": [{"name": "m"}]}}]}})
        check(s == 201, "pod-%s created: %s" % (name, s if s == 201 else r))

    def pod(name):
        s, p = cluster.api("GET", "/api/v1/namespaces/default/pods/pod-" + name)
        return p if s == 200 else None

    def evicted(name):
        p = pod(name)
        return p is None or bool(p["metadata"].get("deletionTimestamp"))

    def placed():
        out = {}
        for name in pods:
            s, c = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/mem-" + name)
            res = ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
            out[name] = (res[0]["device"] if res else None, (pod(name) or {}).get("spec", {}).get("nodeName"))
        return out
    want = {n: ("numa%d" % numa, NODE) for n, (numa, _) in pods.items()}
    check(wait_for(lambda: placed() == want, 120, 1),
          "the scheduler places the four pods, their claims on numa1 (a, b, t) and numa0 (c): %s" % placed())

    edac_mc(root, 1, "Skylake Socket#1 IMC#0", 0, 1)
    check(wait_for(lambda: taints("numa1") == [(DRIVER + "/memory-uncorrected", "NoExecute")]),
          "an uncorrected error on socket 1 taints numa1 NoExecute: %s" % taints("numa1"))
    check(taints("numa0") == [], "numa0 stays untainted: %s" % taints("numa0"))
    check(wait_for(lambda: evicted("a") and evicted("b"), 60, 1),
          "the device-taint eviction controller deletes both pods that share numa1 (their conditions: %s)"
          % sorted({"%s %s" % (c["type"], c.get("reason")) for p in (pod("a"), pod("b"))
                    for c in (p or {}).get("status", {}).get("conditions", [])}))
    wait_for(lambda: evicted("c") or evicted("t"), 10, 1)
    check(not evicted("c"), "the pod with memory on numa0 stays")
    check(not evicted("t"), "the pod whose request tolerates memory-uncorrected stays")

    edac_mc(root, 0, "Skylake Socket#0 IMC#0", 3, 0)
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-corrected", "None")]),
          "corrected errors under the threshold: effect None: %s" % taints("numa0"))
    edac_mc(root, 0, "Skylake Socket#0 IMC#0", 6, 0)
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-corrected", "NoSchedule")]),
          "over the threshold: NoSchedule: %s" % taints("numa0"))

    edac_mc(root, 0, "Skylake Socket#0 IMC#0", 0, 0)
    block(3, 0, "offline")
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-offline", "None")]),
          "a block offline: a note on numa0: %s" % taints("numa0"))
    check(wait_for(lambda: capacity("numa0") != start0), "and numa0's capacity follows: %s -> %s"
          % (start0, capacity("numa0")))
    block(3, 0, "online")
    check(wait_for(lambda: capacity("numa0") == start0 and taints("numa0") == []),
          "online again: the capacity is back, the taint gone: %s %s" % (capacity("numa0"), taints("numa0")))
    check("device numa1: mc1: 1 uncorrected memory errors; tainted memory.nrm.io/memory-uncorrected:NoExecute"
          in plugin.text(), "the log names the device, the counts and the taint")

    # Firmware-first: one controller for the machine; the error's address
    # (block 1, node 0) says where it is, as ghes_edac reports it and
    # trace_pipe prints it.
    with open(os.path.join(root, "sys/kernel/tracing/instances/nrm/events/ras/mc_event/enable")) as fh:
        check(fh.read().strip() == "1", "the plugin enabled ras:mc_event in its trace instance")
    shutil.rmtree(os.path.join(root, "sys/devices/system/edac/mc/mc1"))
    edac_mc(root, 0, "ghes_edac", 0, 0)
    check(wait_for(lambda: taints("numa0") == [] and taints("numa1") == []),
          "ghes_edac without errors: no taints: %s %s" % (taints("numa0"), taints("numa1")))
    with open(trace_pipe, "a") as fh:
        fh.write("          <idle>-0       [002] d.h1.  8120.551203: mc_event: 1 Uncorrected error: Multi-bit ECC "
                 "on CPU0_DIMM_A2 (mc:0 location:1:-1:-1 address:0x08000040 grain:64 syndrome:0x00000000 APEI "
                 "location: node:0 card:0 module:1 rank:0 bank:2 row:1033 col:16 DIMM location:CPU0 DIMM_A2 "
                 "status(0x0000000000000400): Storage error in DRAM memory)\n")
    edac_mc(root, 0, "ghes_edac", 0, 1)
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-uncorrected", "NoExecute")]),
          "a firmware-first uncorrected error at an address of node 0 taints numa0 NoExecute: %s" % taints("numa0"))
    check(taints("numa1") == [], "numa1 stays untainted: %s" % taints("numa1"))
    check(wait_for(lambda: evicted("c"), 60, 1), "the pod with memory on numa0 is deleted")
    check(not evicted("t"), "the pod whose request tolerates memory-uncorrected stays")
    check("device numa0: mc0 (by error address): 1 uncorrected memory errors" in plugin.text(),
          "the log says the error was placed by its address")
finally:
    stop_all(cluster, plugin)

finish()
