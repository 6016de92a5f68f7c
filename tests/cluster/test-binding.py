#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Binding conditions (KEP-5007) through the real control plane, on the two
long node names of item 3 (a 41-character cloud name and a 253-character
DNS subdomain, the longest a Node may have).

On a recorded machine, huge pages on demand need a sysfs to raise them in:
each node's nrm plugin runs over a fake --fsroot tree (nr_hugepages and
meminfo files, as tests/cluster/test-hugepages-api.py builds them), which is the
one stand-in here. Everything else is real: the real scheduler allocates a
claim on a device with binding conditions and holds the pod in PreBind;
`nrm controller`, with the identity of nrm.yaml's nrm-controller
ServiceAccount, labels the claim with its node (the label value of a name
over 63 characters is its cut-and-hashed form); the node's plugin, as the
DaemonSet's ServiceAccount with a token bound to its pod on that node,
raises the pool and writes the condition through resourceclaims/status with
the 1.36 associated-node permission; the scheduler then binds the pod."""

import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NAMESPACE, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, on_demand_tree, skip, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODES = ["ip-10-0-123-45.eu-west-1.compute.internal", ".".join(["n" * 63] * 3 + ["n" * 61])]
DRIVER = "memory.nrm.io"
READY = DRIVER + "/hugepages-ready"
bindir = binaries()
work = workdir()
cluster = Cluster(work, "binding", bindir)
cluster.install_nrm()
cluster.create_nodes([(n, 24, 64 << 30, {"hugepages-2Mi": "64Mi"}) for n in NODES])


def label_value(node):
    """nrm's NRM_NODE_LABEL value, as docs/kubernetes-api.md gives it."""
    if len(node) <= 63:
        return node
    return node[:46] + "-" + hashlib.sha256(node.encode()).hexdigest()[:16]


plugins = []
for i, node in enumerate(NODES):
    root = os.path.join(work, "root%d" % i)
    on_demand_tree(root)
    config = os.path.join(work, "nrm%d.yaml" % i)
    with open(config, "w") as fh:
        fh.write("memory:\n  hugepagesOnDemand:\n    2Mi: 64Mi\n")
    p = NrmPlugin(cluster, node, work, ["-c", config, "-t", os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml"),
                                        "--fsroot", root, "--drivers", "memory"])
    p.root = root
    p.start("--allow-no-cpuset")  # the fake tree has no cgroup: nothing to bind here
    plugins.append(p)
check(all(p.register() and wait_for(p.settled, 60) for p in plugins),
      "both nodes' plugins publish their memory devices, on-demand huge pages included")

# nrm controller, as nrm.yaml's nrm-controller ServiceAccount (its token
# bound to the Deployment's pod, which the scheduler placed on a node).
ctl_pod = wait_for(lambda: next((p["metadata"]["name"] for p in cluster.api(
    "GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io/component%%3Dcontroller" % NAMESPACE)[1]
    .get("items", []) if p["spec"].get("nodeName")), None), 120, 0.5)
check(ctl_pod is not None, "the controller Deployment's pod is scheduled (%s)" % ctl_pod)
ctl_kc = cluster.nrm_kubeconfig(None, os.path.join(work, "controller.kubeconfig"), account="nrm-controller",
                                pod=ctl_pod)
ctl_log = os.path.join(work, "controller.log")
ctl = subprocess.Popen([NRM, "controller", "--kubeconfig", ctl_kc, "--drivers", "memory", "--lease-namespace",
                        NAMESPACE, "--log-level", "debug"], stdout=open(ctl_log, "w"), stderr=subprocess.STDOUT)

for i, (node, p) in enumerate(zip(NODES, plugins)):
    ns = "b%d" % i
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin="""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pages}
spec:
  devices:
    requests:
    - name: hp
      exactly:
        deviceClassName: hugepages-2mi.memory.nrm.io
        capacity: {requests: {hugepages: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  nodeSelector: {kubernetes.io/hostname: "%s"}
  resourceClaims: [{name: hp, resourceClaimName: pages}]
  containers:
  - name: app
    image: none
    resources:
      requests: {hugepages-2Mi: 16Mi, memory: 16Mi}
      limits: {hugepages-2Mi: 16Mi, memory: 16Mi}
      claims: [{name: hp}]
""" % node[:63])
    what = "%d-character node" % len(node)

    def claim():
        s, c = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/pages" % ns)
        return c if s == 200 else {}

    def bound():
        s, pod = cluster.api("GET", "/api/v1/namespaces/%s/pods/app" % ns)
        return s == 200 and pod["spec"].get("nodeName") == node

    res = wait_for(lambda: (claim().get("status", {}).get("allocation", {}).get("devices", {})
                            .get("results") or [None])[0], 60, 0.5)
    check(res and res.get("bindingConditions") == [READY],
          "%s: the real scheduler allocated %s with its binding condition %s" % (what, res and res["device"], READY))
    lbl = wait_for(lambda: claim().get("metadata", {}).get("labels", {}).get("nrm.io/node"), 60, 0.5)
    check(lbl == label_value(node), "%s: nrm controller labelled the claim nrm.io/node=%s" % (what, lbl))
    conds = wait_for(lambda: next((d.get("conditions") for d in claim().get("status", {}).get("devices", [])
                                   if d.get("driver") == DRIVER), None), 90, 0.5)
    check(conds and any(c["type"] == READY and c["status"] == "True" for c in conds),
          "%s: the node's plugin wrote %s True (resourceclaims/status, associated-node)" % (what, READY))
    with open(os.path.join(p.root, "sys/devices/system/node/node%s/hugepages/hugepages-2048kB/nr_hugepages"
                           % res["device"][4:5])) as fh:
        pages = int(fh.read())
    check(pages == 8, "%s: the plugin raised %s's pool to 8 pages of 2 MiB (%d)" % (what, res["device"], pages))
    check(wait_for(bound, 90, 0.5), "%s: the scheduler bound the pod once the condition was True" % what)

ctl.terminate()
check(ctl.wait(20) == 0, "nrm controller stops cleanly")
for p in plugins:
    check(p.stop() == 0, "%s...: the plugin stops cleanly" % p.node[:20])
cluster.stop()
finish()
