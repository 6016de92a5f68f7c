#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's memory driver on the real control plane, over a fake sysfs
tree (--fsroot, the one stand-in), as the DaemonSet's identity: an
uncorrected EDAC error on socket 1's controller taints numa1 NoExecute in
the ResourceSlice, corrected errors over memory.health.correctedErrorThreshold
taint numa0 NoSchedule, and a memory block of node 0 going offline shrinks
numa0's published capacity, all without a restart (memory.health.pollSeconds:
1). Every taint and capacity is read back from the real API server, whose
DRADeviceTaints gate is on by default in 1.36."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, stop_all, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE = "node-m"
DRIVER = "memory.nrm.io"
bindir = binaries()
work = workdir()
root = os.path.join(work, "root")


def put(rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text + "\n")


def mc(i, name, ce, ue):
    put("sys/devices/system/edac/mc/mc%d/mc_name" % i, name)
    put("sys/devices/system/edac/mc/mc%d/ce_count" % i, str(ce))
    put("sys/devices/system/edac/mc/mc%d/ue_count" % i, str(ue))


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
mc(0, "Skylake Socket#0 IMC#0", 0, 0)
mc(1, "Skylake Socket#1 IMC#0", 0, 0)
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

    mc(1, "Skylake Socket#1 IMC#0", 0, 1)
    check(wait_for(lambda: taints("numa1") == [(DRIVER + "/memory-uncorrected", "NoExecute")]),
          "an uncorrected error on socket 1 taints numa1 NoExecute: %s" % taints("numa1"))
    check(taints("numa0") == [], "numa0 stays untainted: %s" % taints("numa0"))

    mc(0, "Skylake Socket#0 IMC#0", 3, 0)
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-corrected", "None")]),
          "corrected errors under the threshold: effect None: %s" % taints("numa0"))
    mc(0, "Skylake Socket#0 IMC#0", 6, 0)
    check(wait_for(lambda: taints("numa0") == [(DRIVER + "/memory-corrected", "NoSchedule")]),
          "over the threshold: NoSchedule: %s" % taints("numa0"))

    mc(0, "Skylake Socket#0 IMC#0", 0, 0)
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
finally:
    stop_all(cluster, plugin)

finish()
