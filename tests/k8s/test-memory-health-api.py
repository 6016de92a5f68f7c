#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's memory driver against a Kubernetes API server on loopback
(fakeapi.py), over a fake sysfs tree: an uncorrected EDAC error on socket
1's controller taints numa1 NoExecute in the ResourceSlice, corrected
errors over memory.health.correctedErrorThreshold taint numa0 NoSchedule,
and a memory block of node 0 going offline shrinks numa0's published
capacity, all without a restart (memory.health.pollSeconds: 1)."""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
NODE = "node-m"
DRIVER = "memory.nrm.io"

work = tempfile.mkdtemp(prefix="nrm-memhealth-api-")
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

api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE)
token = os.path.join(work, "token")
with open(token, "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=token)
log = os.path.join(work, "plugin.log")
plugin = subprocess.Popen(
    [NRM, "plugin", "-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"), "--node-name", NODE,
     "--fsroot", root, "--drivers", "memory", "--kubelet-dir", os.path.join(work, "kubelet"),
     "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"), "--create-state-dir",
     "--kubeconfig", kubeconfig, "--log-level", "debug"],
    stdout=open(log, "w"), stderr=subprocess.STDOUT)


def devices():
    out = {}
    for s in api.slices():
        if s["spec"]["driver"] == DRIVER:
            out.update({d["name"]: d for d in s["spec"].get("devices", [])})
    return out


def taints(name):
    return sorted((t["key"], t["effect"]) for t in devices().get(name, {}).get("taints") or [])


def capacity(name):
    return devices().get(name, {}).get("capacity", {}).get("memory", {}).get("value")


try:
    check(wait_for(lambda: set(devices()) == {"numa0", "numa1"}), "memory.nrm.io publishes numa0 and numa1: %s"
          % sorted(devices()))
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
    with open(log) as fh:
        text = fh.read()
    check("device numa1: mc1: 1 uncorrected memory errors; tainted memory.nrm.io/memory-uncorrected:NoExecute"
          in text, "the log names the device, the counts and the taint")
finally:
    stop_plugin(plugin, api, log, work)

finish()
