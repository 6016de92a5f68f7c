#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin's PCI driver on the real control plane, over a fake sysfs tree
(--fsroot, the one stand-in): as the DaemonSet's identity it publishes the
tree's GPUs, steps aside from a GPU that another driver publishes on the
node (a ResourceSlice the test's admin creates on the real API server, read
by nrm through its watch of the node's slices), and serves it again once
that driver's slice is deleted, without a restart, with an Event on the
Node for each (under the manifest's RBAC). Every expectation is read back
from the real server."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, stop_all, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE = "node-p"
DRIVER = "pci.nrm.io"
OTHER = "gpu.example.com"
bindir = binaries()
work = workdir()
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

cluster = Cluster(work, "pci", bindir)
plugin = None
try:
    cluster.install_nrm()
    cluster.create_nodes([(NODE, 24, 64 << 30)])
    plugin = NrmPlugin(cluster, NODE, work, ["-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"),
                                             "--fsroot", root, "--drivers", "pci"])
    plugin.start()

    def node_events(reason):
        s, lst = cluster.api("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
        return [e.get("note", "") for e in (lst.get("items", []) if s == 200 else [])
                if e.get("reason") == reason and e.get("reportingController") == DRIVER
                and e.get("regarding", {}).get("kind") == "Node" and e["regarding"].get("name") == NODE]

    def ours():
        return {d["name"] for s in cluster.slices(NODE, DRIVER) for d in s["spec"].get("devices", [])}

    check(plugin.register() and wait_for(lambda: ours() == {"gpu-0000-41-00-0", "gpu-0000-42-00-0"}),
          "pci.nrm.io publishes both GPUs of the tree: %s" % sorted(ours()))
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": OTHER + "-" + NODE},
             "spec": {"driver": OTHER, "nodeName": NODE,
                      "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                      "devices": [{"name": "gpu-0", "attributes": {
                          "resource.kubernetes.io/pciBusID": {"string": "0000:41:00.0"}}}]}}
    s, body = cluster.api("POST", "/apis/resource.k8s.io/v1/resourceslices", other)
    check(s == 201, "the admin creates %s's slice with the GPU 0000:41:00.0 on the real server: %s %s"
          % (OTHER, s, "" if s == 201 else body))
    check(wait_for(lambda: ours() == {"gpu-0000-42-00-0"}),
          "the GPU another driver publishes leaves nrm's slice: %s" % sorted(ours()))
    check("leaves 0000:41:00.0 to %s" % OTHER in plugin.text(), "the log says which and to whom")
    left = ("%s leaves PCI function 0000:41:00.0 out of its ResourceSlices: it is left to %s (it publishes the "
            "function)" % (DRIVER, OTHER))
    check(wait_for(lambda: node_events("DeviceLeftOut") == [left], 30),
          "a Normal Event on the Node says it too: %s" % node_events("DeviceLeftOut"))
    s, body = cluster.api("DELETE", "/apis/resource.k8s.io/v1/resourceslices/" + other["metadata"]["name"])
    check(s == 200 and wait_for(lambda: ours() == {"gpu-0000-41-00-0", "gpu-0000-42-00-0"}),
          "and comes back once that driver's slice is gone: %s" % sorted(ours()))
    check(wait_for(lambda: node_events("DeviceServedAgain") == [
        "%s publishes PCI function 0000:41:00.0 again (it was left to %s (it publishes the function))"
        % (DRIVER, OTHER)], 30),
          "with an Event on the Node: %s" % node_events("DeviceServedAgain"))
finally:
    stop_all(cluster, plugin)

finish()
