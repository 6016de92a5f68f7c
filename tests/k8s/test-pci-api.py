#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's PCI driver against a Kubernetes API server on loopback
(fakeapi.py), over a fake sysfs tree: it publishes the tree's GPUs, steps
aside from a GPU that another driver publishes on the node (its
ResourceSlice, read through a watch of the node's slices), and serves it
again once that driver's slice is gone, without a restart."""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
NODE = "node-p"

work = tempfile.mkdtemp(prefix="nrm-pci-api-")
root = os.path.join(work, "root")


def function(bdf, bridge, vendor, cls, numa):
    d = os.path.join(root, "sys/devices", bridge, bridge[3:] + ":01.0", bdf)
    os.makedirs(d)
    for name, value in (("vendor", vendor), ("device", "0x1234"), ("class", cls), ("numa_node", str(numa))):
        with open(os.path.join(d, name), "w") as fh:
            fh.write(value + "\n")
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.symlink(os.path.relpath(d, os.path.join(root, "sys/bus/pci/devices")),
               os.path.join(root, "sys/bus/pci/devices", bdf))


function("0000:41:00.0", "pci0000:40", "0x10de", "0x030200", 1)
function("0000:42:00.0", "pci0000:40", "0x1002", "0x038000", 1)

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
    [NRM, "plugin", "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"), "--node-name", NODE,
     "--fsroot", root, "--drivers", "pci", "--kubelet-dir", os.path.join(work, "kubelet"),
     "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"), "--create-state-dir",
     "--kubeconfig", kubeconfig, "--log-level", "debug"],
    stdout=open(log, "w"), stderr=subprocess.STDOUT)


def ours():
    names = set()
    for s in api.slices():
        if s["spec"]["driver"] == "pci.nrm.io":
            names |= {d["name"] for d in s["spec"].get("devices", [])}
    return names


try:
    check(wait_for(lambda: ours() == {"gpu-0000-41-00-0", "gpu-0000-42-00-0"}),
          "pci.nrm.io publishes both GPUs of the tree: %s" % sorted(ours()))
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": "gpu.example.com-" + NODE},
             "spec": {"driver": "gpu.example.com", "nodeName": NODE,
                      "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                      "devices": [{"name": "gpu-0", "attributes": {
                          "resource.kubernetes.io/pciBusID": {"string": "0000:41:00.0"}}}]}}
    api.add_slice(other)
    check(wait_for(lambda: ours() == {"gpu-0000-42-00-0"}),
          "the GPU another driver publishes leaves nrm's slice: %s" % sorted(ours()))
    with open(log) as fh:
        check("leaves 0000:41:00.0 to gpu.example.com" in fh.read(), "the log says which and to whom")
    api.delete_slice(other["metadata"]["name"])
    check(wait_for(lambda: ours() == {"gpu-0000-41-00-0", "gpu-0000-42-00-0"}),
          "and comes back once that driver's slice is gone: %s" % sorted(ours()))
finally:
    stop_plugin(plugin, api, log, work)

finish()
