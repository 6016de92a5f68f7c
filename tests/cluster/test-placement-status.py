#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What nrm chose for each claim, in the claim's status, on the real
kube-apiserver (docs/kubernetes-api.md, placement).

Two Nodes of a recorded machine (24em64t-2n6c2t-pci), each with nrm plugin
as the DaemonSet's ServiceAccount with a token bound to its pod there:
"node-p" serves CPUs and memory, with huge pages on demand over a fake
sysfs tree (the one stand-in: nr_hugepages and meminfo files under
--fsroot, as tests/cluster/test-hugepages-api.py builds them), so that the
real binder writes its binding condition into the same claims; "node-q"
serves the machine's PCI functions. The test's admin allocates each claim
through resourceclaims/status (as the scheduler writes it) and
tests/plugin/dra-client, standing in for the kubelet, prepares it.

After a prepare, the claim read back with kubectl has nrm's entries in
status.devices, each with its data (the request, the CPUs and how they lie,
the memory's node, bytes and page size, the PCI function) and a Ready
condition, written by the field manager <driver>/placement; the binder's
condition on the same device stays, whichever of the two writes first, and
neither takes the other's fields. A prepare answers at once while its
status write hangs (node-q reaches the server through
tests/cluster/faultproxy.py, which holds and refuses writes on cue), and
the write is tried again until it lands. After an unprepare its entries
are gone and the binder's stays. A restart of nrm writes nothing to a claim whose
status is as it should be: its resourceVersion stays."""

import json
import os
import re
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check, failures,  # noqa: E402
                        finish, skip, wait_for, workdir, put_file)
from faultproxy import FaultProxy  # noqa: E402

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
NODE, PCI_NODE = "node-p", "node-q"
CPU, MEM, PCI = "cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"
READY, FAILED = MEM + "/hugepages-ready", MEM + "/hugepages-failed"
HP = "numa1-hugepages-2mi"
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
bindir = binaries()
work = workdir()
root = os.path.join(work, "root")


def put(rel, text):
    put_file(root, rel, text)


for n in (0, 1):
    put("sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages" % n, "0\n")
    put("sys/devices/system/node/node%d/meminfo" % n,
        "Node %d MemTotal: 18874368 kB\nNode %d MemFree: 1048576 kB\n" % (n, n))
config = os.path.join(work, "nrm.yaml")
with open(config, "w") as fh:
    fh.write("memory:\n  hugepagesOnDemand:\n    2Mi: 64Mi\n")

cluster = Cluster(work, "placement", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 24, 64 << 30, {"hugepages-2Mi": "64Mi"}), (PCI_NODE, 24, 64 << 30)])
plugin = NrmPlugin(cluster, NODE, work, ["-c", config, "-t", TOPO, "--fsroot", root, "--drivers", "cpu,memory"])
# node-q's plugin reaches the server through a proxy that fails its status
# writes on cue.
proxy = FaultProxy(cluster)
pci_plugin = NrmPlugin(cluster, PCI_NODE, work, ["-t", TOPO, "--drivers", "pci"], proxy=proxy)
plugin.start("--allow-no-cpuset")  # the fake tree has no cgroup: nothing to bind here
pci_plugin.start()
check(plugin.register() and pci_plugin.register() and wait_for(plugin.settled, 60)
      and wait_for(pci_plugin.settled, 60), "both nodes' plugins register and publish")


def pool_of(node, driver, device):
    for s in cluster.slices(node, driver):
        if any(d["name"] == device for d in s["spec"].get("devices", [])):
            return s["spec"]["pool"]["name"]
    return None


HP_POOL = wait_for(lambda: pool_of(NODE, MEM, HP), 30, 0.5)
check(HP_POOL is not None, "%s is published with its on-demand room" % HP)


def allocate(name, results, node=NODE, labelled=False):
    """A claim with one request per result (request, driver, device,
    capacity key, amount[, more]), allocated on node by the test's admin."""
    reqs, res = [], []
    classes = {CPU: CPU, MEM: MEM, PCI: PCI}
    for request, driver, device, key, amount, *more in results:
        cls = "hugepages-2mi.memory.nrm.io" if device == HP else classes[driver]
        ex = {"deviceClassName": cls}
        if key:
            ex["capacity"] = {"requests": {key: amount}}
        reqs.append({"name": request, "exactly": ex})
        extra = dict(more[0]) if more else {}
        if key:
            extra["consumedCapacity"] = {key: amount}
            if device != HP:
                extra["shareID"] = str(uuid.uuid4())
        res.append((request, driver, pool_of(node, driver, device) or node, device, extra))
    meta = {"namespace": "default", "name": name}
    if labelled:
        meta["labels"] = {"nrm.io/node": node}
    return cluster.allocate({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
                             "spec": {"devices": {"requests": reqs}}}, node, res)


def get(name):
    """The claim as kubectl shows it (-o json: what -o yaml shows)."""
    p = cluster.kubectl("get", "resourceclaim", name, "-n", "default", "-o", "json", "--show-managed-fields",
                        check=False)
    return json.loads(p.stdout) if p.returncode == 0 else {}


def entry(claim, driver, device):
    for d in claim.get("status", {}).get("devices", []):
        if d.get("driver") == driver and d.get("device") == device:
            return d
    return None


def conds(e):
    return {c["type"]: c for c in (e or {}).get("conditions", [])}


def managers(claim):
    return sorted(m["manager"] for m in claim["metadata"].get("managedFields", [])
                  if m.get("subresource") == "status")


def placed(name, driver, device):
    """The entry once nrm's Ready condition is in it, else None."""
    e = entry(get(name), driver, device)
    return e if conds(e).get("Ready", {}).get("status") == "True" and "data" in e else None


BINDING = {"bindingConditions": [READY], "bindingFailureConditions": [FAILED]}

# --- the binder first, then the placement --------------------------------------------
a = allocate("first", [("cpus", CPU, "numa0", "cpus", "3"), ("mem", MEM, "numa1", "memory", "64Mi"),
                       ("hp", MEM, HP, "hugepages", "16Mi", BINDING)], labelled=True)
check(wait_for(lambda: conds(entry(get("first"), MEM, HP)).get(READY, {}).get("status") == "True", 60, 0.5),
      "the binder writes %s True for the claim's huge pages" % READY)
bound = conds(entry(get("first"), MEM, HP))[READY]
ok_cpu, out_cpu = plugin.prepare(CPU, a)
ok_mem, out_mem = plugin.prepare(MEM, a)
check(ok_cpu and ok_mem, "the claim is prepared by the CPU and the memory driver (%s; %s)" % (out_cpu, out_mem))
cpu_e = wait_for(lambda: placed("first", CPU, "numa0"), 30, 0.3)
mem_e = wait_for(lambda: placed("first", MEM, "numa1"), 30, 0.3)
hp_e = wait_for(lambda: placed("first", MEM, HP), 30, 0.3)
check(cpu_e and mem_e and hp_e, "kubectl shows nrm's entry with data and Ready for each of the claim's devices")
cpus = plugin.claim_env(a).get("NRM_CPUS")
d = (cpu_e or {}).get("data", {})
check(d.get("request") == "cpus" and d.get("cpus") == cpus and d.get("numaNodes") == [0]
      and d.get("l3Groups") == "0" and "wholeCores" in d and "partialCores" in d,
      "the CPU entry tells the request, the claim's CPUs (%s, as NRM_CPUS: %s), its cores, L3 group and node: %s"
      % (d.get("cpus"), cpus, json.dumps(d, sort_keys=True)))
check((cpu_e or {}).get("shareID") == a["status"]["allocation"]["devices"]["results"][0]["shareID"]
      and (cpu_e or {}).get("pool") == a["status"]["allocation"]["devices"]["results"][0]["pool"],
      "...keyed by the allocation's pool and shareID")
d = (mem_e or {}).get("data", {})
check(d == {"request": "mem", "numaNodes": [1], "bytes": 64 << 20, "pageSize": "4Ki"},
      "the memory entry tells node, bytes and page size: %s" % json.dumps(d, sort_keys=True))
d = (hp_e or {}).get("data", {})
check(d == {"request": "hp", "numaNodes": [1], "bytes": 16 << 20, "pageSize": "2Mi"},
      "the huge-pages entry too: %s" % json.dumps(d, sort_keys=True))
c = conds(cpu_e)["Ready"] if cpu_e else {}
check(c.get("reason") == "Prepared" and c.get("message") == "prepared on node " + NODE and c.get("lastTransitionTime"),
      "Ready: reason Prepared, a message naming the node, lastTransitionTime: %s" % c)
hp_c = conds(hp_e)
check(hp_c.get(READY) == bound and set(hp_c) == {READY, "Ready"},
      "the binder's %s stays as it was beside nrm's Ready on the same device: %s" % (READY, sorted(hp_c)))
claim = get("first")
check(set(managers(claim)) >= {CPU + "/placement", MEM + "/placement", MEM},
      "the status has the field managers %s/placement, %s/placement and the binder's %s: %s"
      % (CPU, MEM, MEM, managers(claim)))

# --- the placement first, then the binder -------------------------------------------
b = allocate("second", [("hp", MEM, HP, "hugepages", "8Mi", BINDING)])
ok, out = plugin.prepare(MEM, b)
check(ok, "an unlabelled claim is prepared first, its pages raised by prepare (%s)" % out)
check(wait_for(lambda: placed("second", MEM, HP), 30, 0.3), "its placement is written")
before = placed("second", MEM, HP) or {}
s, _ = cluster.api("PATCH", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/second",
                   {"metadata": {"labels": {"nrm.io/node": NODE}}}, content_type="application/merge-patch+json")
check(s == 200, "the test's admin labels it nrm.io/node=%s, as nrm controller does (%s)" % (NODE, s))
check(wait_for(lambda: conds(entry(get("second"), MEM, HP)).get(READY, {}).get("status") == "True", 60, 0.5),
      "the binder writes %s True then" % READY)
after = entry(get("second"), MEM, HP) or {}
check(after.get("data") == before.get("data") and conds(after).get("Ready") == conds(before).get("Ready"),
      "nrm's data and Ready stay as they were after the binder's write: %s" % json.dumps(after, sort_keys=True))

# --- PCI ------------------------------------------------------------------------------
GPU = "gpu-0000-06-00-0"
cc = allocate("third", [("gpu", PCI, GPU, None, None)], node=PCI_NODE)
# Its status write held past the client's 10 s timeout, then refused twice.
proxy.delay_next(1, 12, method="PATCH", path_contains="/resourceclaims/third/status")
proxy.fail_next(2, code=403, method="PATCH", path_contains="/resourceclaims/third/status")
t0 = time.monotonic()
ok, out = pci_plugin.prepare(PCI, cc)
took = time.monotonic() - t0
check(ok and took < 5, "a PCI function is prepared on %s in %.1f s, while its status write hangs (%s)"
      % (PCI_NODE, took, out))
pe = wait_for(lambda: placed("third", PCI, GPU), 60, 0.3)
retried = re.findall(r"placement: %s: claim default/third: placement status: writing its status: HTTP 403.*; "
                     r"again in (\d+) s" % PCI, pci_plugin.text())
check(pe is not None and retried == ["1", "2"],
      "the write is tried again after the timeout and after each refusal (again in %s s), and lands"
      % ", ".join(retried))
d = (pe or {}).get("data", {})
# A recorded machine without its /dev: the container gets no device node.
check(d == {"request": "gpu", "busID": "0000:06:00.0", "deviceNodes": []},
      "the PCI entry tells the function's bus id and its device nodes: %s" % json.dumps(d, sort_keys=True))

# --- unprepare --------------------------------------------------------------------------
check(plugin.unprepare(MEM, a), "the memory driver unprepares the first claim")
check(wait_for(lambda: entry(get("first"), MEM, "numa1") is None, 30, 0.3),
      "its memory entry is gone from the status")
hp_left = entry(get("first"), MEM, HP) or {}
check(set(conds(hp_left)) == {READY} and "data" not in hp_left and conds(hp_left)[READY] == bound,
      "the huge-pages entry keeps the binder's condition alone, no data, no Ready: %s"
      % json.dumps(hp_left, sort_keys=True))
check(placed("first", CPU, "numa0") is not None, "the CPU driver's entry stays until its own unprepare")
check(MEM + "/placement" not in managers(get("first")), "%s/placement holds nothing of the claim any more" % MEM)
check(plugin.unprepare(CPU, a), "the CPU driver unprepares it")
check(wait_for(lambda: entry(get("first"), CPU, "numa0") is None, 30, 0.3), "its CPU entry is gone too")
check(pci_plugin.unprepare(PCI, cc) and wait_for(lambda: entry(get("third"), PCI, GPU) is None, 30, 0.3),
      "the PCI entry is gone after its unprepare")

# --- a restart writes nothing that is there ------------------------------------------------
rv = get("second")["metadata"]["resourceVersion"]
check(plugin.stop() == 0, "the plugin stops")
since = len(cluster.audit())
plugin.start("--allow-no-cpuset")
check(plugin.register(), "the plugin starts again")
check(wait_for(lambda: re.search(r"%s: claim default/second: its status holds the placement already" % MEM,
                                 plugin.text()[plugin.since:]), 30, 0.3),
      "after the restart nrm looks at the prepared claim and finds its placement there")
# The audit log: an apply that changes nothing leaves the resourceVersion
# as it was, but it is a write all the same.
claim_writes = [e["verb"] + " " + e["requestURI"] for e in cluster.writes(since)
                if e.get("objectRef", {}).get("resource") == "resourceclaims"]
check(get("second")["metadata"]["resourceVersion"] == rv and placed("second", MEM, HP) and not claim_writes,
      "...and writes nothing: the claim's resourceVersion stays %s, the audit log has no claim write by nrm (%s)"
      % (rv, claim_writes))
check(plugin.unprepare(MEM, b) and wait_for(lambda: placed("second", MEM, HP) is None, 30, 0.3),
      "after the restart an unprepare still removes the entry")

for p in (plugin, pci_plugin):
    check(p.stop() == 0, "%s: the plugin stops cleanly" % p.node)
if failures:
    print(plugin.text()[-4000:])
    print(pci_plugin.text()[-3000:])
proxy.stop()
cluster.stop()
finish()
