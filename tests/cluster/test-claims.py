#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The claim examples of deploy/kubernetes/examples judged by the real
kube-scheduler (item 4 of the real-Kubernetes control-plane work).

A real control plane (1.36 defaults) with nrm.yaml applied by kubectl, and
four Nodes of recorded machines, each with an nrm plugin publishing as the
DaemonSet's identity: "node-numa" (32em64t-2n8c2t-pci-normalio: GPUs, an
InfiniBand and NICs; cpu.mode numa; 2 CPUs isolated), "node-part"
(24em64t-2n6c2t-pci; cpu.mode partitioned) and "node-huge" (the same
machine in cpu.mode numa, given 128 pages of 2 MiB and 2 of 1 GiB on each
NUMA node in a copy of its hwloc XML, as a node has them from its boot
settings; its Node says so in its capacity, as the kubelet would) and
"node-big" (128arm-2pa2n8cluster4co: two sockets of two NUMA nodes with 125
GiB each). Every example
is applied with kubectl as its header says, in a namespace of its own; the
real scheduler allocates its claims and binds the pod, or leaves the pod
Pending where the example's header says so (the scheduler's reason is
quoted). Then tests/plugin/dra-client, standing in for the kubelet of this
layer, calls NodePrepareResources on the node's plugin with each claim as
the API server holds it, and the CPUs and memory nodes nrm gives (the CDI
spec's NRM_* variables) must be what the example promises. Each example is
unprepared and deleted before the next."""

import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, SRCDIR, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        claim_docs, cpulist, finish, skip, wait_for, workdir)

EXAMPLES = os.path.join(SRCDIR, "deploy", "kubernetes", "examples")
PCI_ALL = os.path.join(SRCDIR, "tests", "bench", "pci-every-class.yaml")

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
bindir = binaries()
work = workdir()


def with_hugepages(topo):
    """A copy of a recorded machine with 128 pages of 2 MiB and 2 of 1 GiB
    on each NUMA node."""
    with open(os.path.join(TOPOLOGIES, topo)) as fh:
        xml = fh.read()
    xml = xml.replace('<page_type size="2097152" count="0"/>',
                      '<page_type size="2097152" count="128"/>\n<page_type size="1073741824" count="2"/>')
    out = os.path.join(work, "huge-" + topo)
    with open(out, "w") as fh:
        fh.write(xml)
    return out


def numa_of(topo):
    """{cpu: NUMA node} of a machine, from nrm topology --json."""
    t = json.loads(subprocess.run([NRM, "topology", "--json", "-t", topo], capture_output=True, text=True,
                                  check=True).stdout)
    out = {}
    for n in t["numaNodes"]:
        for c in cpulist(n["cpus"]):
            out[c] = n["id"]
    cores = [cpulist(c["cpus"]) for c in t["cores"]]
    return out, cores


T_NUMA = os.path.join(TOPOLOGIES, "32em64t-2n8c2t-pci-normalio.xml")
T_PART = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
T_HUGE = with_hugepages("24em64t-2n6c2t-pci.xml")
NUMA_CPUS, NUMA_CORES = numa_of(T_NUMA)
PART_CPUS, PART_CORES = numa_of(T_PART)
# Two CPUs of node 0 isolated (as isolcpus= would): one whole core.
ISOLATED = sorted(next(c for c in NUMA_CORES if all(NUMA_CPUS[x] == 0 for x in c)))

cluster = Cluster(work, "claims", bindir)
cluster.install_nrm()
plugins = {
    "node-numa": NrmPlugin(cluster, "node-numa", work, [
        "-t", T_NUMA, "--cpu-mode", "numa", "--drivers", "cpu,memory,pci", "--config", PCI_ALL,
        "--isolated-cpus", ",".join(map(str, ISOLATED))]),
    "node-part": NrmPlugin(cluster, "node-part", work, [
        "-t", T_PART, "--cpu-mode", "partitioned", "--drivers", "cpu,memory,pci", "--config", PCI_ALL]),
    "node-huge": NrmPlugin(cluster, "node-huge", work, [
        "-t", T_HUGE, "--cpu-mode", "numa", "--drivers", "cpu,memory"]),
}
cluster.create_nodes([("node-numa", len(NUMA_CPUS), 128 << 30), ("node-part", len(PART_CPUS), 128 << 30),
                      ("node-huge", len(PART_CPUS), 128 << 30, {"hugepages-2Mi": "512Mi", "hugepages-1Gi": "4Gi"})])
for p in plugins.values():
    p.start()
check(all(p.register() for p in plugins.values()), "both plugins registered (as the kubelet does)")
check(wait_for(lambda: all(p.settled() for p in plugins.values()), 120, 0.5),
      "both plugins published their slices")
for p in plugins.values():
    check(all(p.metric("nrm_slices_synced", d) == 1 for d in p.drivers()),
          "%s: every driver in sync with the real API server" % p.node)


def pod_of(ns):
    s, pods = cluster.api("GET", "/api/v1/namespaces/%s/pods" % ns)
    return pods["items"][0] if s == 200 and pods["items"] else None


def scheduled(ns):
    """(node, None) once the pod is bound, (None, reason) once the scheduler
    said why not, else None."""
    pod = pod_of(ns)
    if not pod:
        return None
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"], None
    for c in pod.get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
            return None, c["message"]
    return None


def claims_of(ns):
    pod = pod_of(ns)
    names = [s.get("resourceClaimName") for s in pod.get("status", {}).get("resourceClaimStatuses", [])]
    names += [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims", []) if c.get("resourceClaimName")]
    if pod.get("status", {}).get("extendedResourceClaimStatus"):
        names.append(pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"])
    out = []
    for n in filter(None, dict.fromkeys(names)):
        s, c = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % (ns, n))
        if s == 200:
            out.append(c)
    return out


def one_node(cs, numa):
    return len({numa[c] for c in cs}) == 1


def whole_cores(cs, cores):
    return all(core <= cs or not (core & cs) for core in cores)


# What each example promises, read from its header: (expected node or None
# for Pending, a check of the prepared claims' NRM_* variables).
def expect_cpus_and_memory(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    numa = NUMA_CPUS
    return (len(cs) == 4 and one_node(cs, numa) and env.get("NRM_MEMS") == str(numa[min(cs)]),
            "4 CPUs and the memory on one NUMA node")


def expect_full_pcpus(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return len(cs) == 4 and whole_cores(cs, NUMA_CORES), "4 CPUs as whole cores"


def expect_partitioned_cores(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return (len(cs) == 8 and whole_cores(cs, PART_CORES) and one_node(cs, PART_CPUS)
            and env.get("NRM_MEMS") == str(PART_CPUS[min(cs)]), "4 whole 2-thread cores and the memory on one node")


def expect_isolated(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return (sorted(cs) == ISOLATED and env.get("NRM_MEMS") == "0",
            "the 2 isolated CPUs %s and memory on their node" % ISOLATED)


def expect_gpu_one_node(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return len(cs) == 8 and one_node(cs, NUMA_CPUS) and env.get("NRM_MEMS") == str(NUMA_CPUS[min(cs)]), \
        "8 CPUs and the memory on the GPU's node"


def expect_two_gpus(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return len(cs) == 16, "16 CPUs, 8 beside each GPU"


def expect_hugepages(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return (len(cs) == 2 and env.get("NRM_MEMS") == str(PART_CPUS[min(cs)])
            and any(k.startswith("NRM_HUGETLB_2MB") and v == str(256 << 20) for k, v in env.items()),
            "2 CPUs and 256 MiB of 2 MiB pages on their NUMA node")


def expect_prioritized_cpus(env, node):
    """A whole L3 group of at least 8 CPUs, 4 whole 2-thread cores, or 8
    CPUs, on one NUMA node, as the subrequest taken says."""
    cs = cpulist(env.get("NRM_CPUS"))
    numa = NUMA_CPUS if node == "node-numa" else PART_CPUS
    return len(cs) >= 8 and one_node(cs, numa), "at least 8 CPUs on one NUMA node"


def expect_cores(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return len(cs) == 4 and whole_cores(cs, PART_CORES), "2 whole cores, 4 CPUs"


def expect_pages(env, node):
    return (any(k.startswith("NRM_HUGETLB_1GB") and v == str(2 << 30) for k, v in env.items())
            and env.get("NRM_MEMS") == "0-1"), "2 GiB of 1 GiB pages, one on each NUMA node"


def expect_prioritized_memory(env, node):
    cs = cpulist(env.get("NRM_CPUS"))
    return len(cs) == 4 and env.get("NRM_MEMS") == str(NUMA_CPUS[min(cs)]), "4 CPUs, all memory on their node"


EXPECT = {
    "cpus-and-memory-same-numa.yaml": ("node-numa", expect_cpus_and_memory),
    "full-pcpus-only.yaml": ("node-numa", expect_full_pcpus),
    "partitioned-whole-cores.yaml": ("node-part", expect_partitioned_cores),
    "isolated-cpus.yaml": ("node-numa", expect_isolated),
    "gpu-cpus-memory-one-node.yaml": ("node-numa", expect_gpu_one_node),
    "two-gpus-each-with-cpus.yaml": ("node-numa", expect_two_gpus),
    "hugepages.yaml": ("node-huge", expect_hugepages),
    "prioritized-cpus.yaml": (None, expect_prioritized_cpus),
    "prioritized-memory.yaml": ("node-numa", expect_prioritized_memory),
    "extended-resource-cpus.yaml": ("node-part", expect_cores),
    "extended-resource-hugepages.yaml": ("node-huge", expect_pages),
    # Pending by design here: gpu.nvidia.com is another driver's class, and
    # the CPUs' pcieRoot list needs DRAListTypeAttributes, off in 1.36.
    "gpu-cpu-memory-aligned.yaml": ("Pending", None),
    "nic-cpus-same-pcie-root.yaml": ("Pending", None),
}
examples = sorted(os.path.basename(f) for f in glob.glob(os.path.join(EXAMPLES, "*.yaml")))
check(sorted(EXPECT) == examples, "every example has its expectation here (%s)"
      % ", ".join(sorted(set(examples) ^ set(EXPECT))))

for i, ex in enumerate(examples):
    want_node, expect = EXPECT.get(ex, ("?", None))
    ns = "ex%d" % i
    cluster.kubectl("create", "namespace", ns)
    p = cluster.kubectl("apply", "-n", ns, "-f", os.path.join(EXAMPLES, ex), check=False)
    if not check(p.returncode == 0, "%s: kubectl apply accepted by the real API server%s"
                 % (ex, "" if p.returncode == 0 else ": " + p.stderr.strip()[:300])):
        continue
    got = wait_for(lambda: scheduled(ns), 90, 0.5)
    if want_node == "Pending":
        check(got is not None and got[0] is None,
              "%s: stays Pending, the scheduler says: %s" % (ex, got and got[1]))
        continue
    node, why = got if got else (None, "no answer in 90 s")
    if not check(node is not None and (want_node is None or node == want_node),
                 "%s: the real scheduler binds the pod to %s (%s)" % (ex, want_node or "a node", node or why)):
        continue
    plugin = plugins[node]
    cs = claims_of(ns)
    results = [(c, r["driver"]) for c in cs for r in c["status"]["allocation"]["devices"]["results"]]
    check(cs and all(c.get("status", {}).get("allocation") for c in cs),
          "%s: %d claims allocated: %s" % (ex, len(cs), "; ".join(
              "%s/%s %s" % (r["driver"], r["device"], r["request"]) for c in cs
              for r in c["status"]["allocation"]["devices"]["results"])))
    env = {}
    prepared = []
    for c in cs:
        for d in sorted({r["driver"] for r in c["status"]["allocation"]["devices"]["results"]}):
            ok, out = plugin.prepare(d, c)
            check(ok, "%s: NodePrepareResources of %s for claim %s: %s" % (ex, d, c["metadata"]["name"],
                                                                           " ".join(out.split())[:200]))
            prepared.append((d, c))
        env.update(plugin.claim_env(c))
    good, what = expect(env, node)
    check(good, "%s: nrm gives %s (%s)" % (ex, what, " ".join("%s=%s" % kv for kv in sorted(env.items()))))
    for d, c in prepared:
        check(plugin.unprepare(d, c), "%s: NodeUnprepareResources of %s" % (ex, d))
    cluster.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

# --- every complete claim of docs/ ---------------------------------------------------
# Applied with a pod that uses it (the block's own, else a bare one); the
# real scheduler allocates it on a node that has what it asks for, and nrm
# prepares it. Pending where the claim names another driver's class.
DOCS_PENDING = {"cpus-memory-gpu": "gpu.nvidia.com"}


def pod_for(claim):
    key = "resourceClaimTemplateName" if claim["kind"] == "ResourceClaimTemplate" else "resourceClaimName"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
            "spec": {"resourceClaims": [{"name": "c", key: claim["metadata"]["name"]}],
                     "containers": [{"name": "app", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}}


# Two sockets of two NUMA nodes, 32 CPUs and 125 GiB each, for the docs'
# socket and big-memory claims: joins after the examples, whose nodes it
# would otherwise take.
plugins["node-big"] = NrmPlugin(cluster, "node-big", work, [
    "-t", os.path.join(TOPOLOGIES, "128arm-2pa2n8cluster4co.xml"), "--cpu-mode", "numa", "--drivers", "cpu,memory"])
cluster.create_nodes([("node-big", 128, 512 << 30)])
plugins["node-big"].start()
check(plugins["node-big"].register() and wait_for(plugins["node-big"].settled, 60), "node-big publishes")


def for_mode(pod, claim):
    """A docs claim is written for one CPU mode: one that selects on
    granularity wants partitioned mode (node-part), any other numa mode.
    In partitioned mode a capacity request only filters and the claim gets
    whole devices, which min-shared-cpus may then refuse at prepare."""
    partitioned = "granularity" in json.dumps(claim)
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                                                     "operator": "In" if partitioned else "NotIn",
                                                     "values": ["node-part"]}]}]}}}
    return pod


found = claim_docs()
check(len(found) >= 15, "docs/ holds %d complete claims" % len(found))
for j, (where, objs) in enumerate(found):
    ns = "doc%d" % j
    claim = next(o for o in objs if o["kind"] in ("ResourceClaim", "ResourceClaimTemplate"))
    name = claim["metadata"]["name"]
    if not any(o["kind"] == "Pod" for o in objs):
        objs = objs + [pod_for(claim)]
    objs = [for_mode(o, claim) if o["kind"] == "Pod" else o for o in objs]
    cluster.kubectl("create", "namespace", ns)
    p = cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                         "items": objs}), check=False)
    if not check(p.returncode == 0, "%s (%s): accepted by the real API server%s"
                 % (where, name, "" if p.returncode == 0 else ": " + p.stderr.strip()[:300])):
        continue
    got = wait_for(lambda: scheduled(ns), 90, 0.5)
    node, why = got if got else (None, "no answer in 90 s")
    if name in DOCS_PENDING:
        check(node is None and why and DOCS_PENDING[name] in why,
              "%s (%s): Pending, the scheduler says: %s" % (where, name, why))
        continue
    if not check(node is not None, "%s (%s): the real scheduler allocates it and binds the pod (%s)"
                 % (where, name, node or why)):
        continue
    plugin = plugins[node]
    prepared, env = [], {}
    for c in claims_of(ns):
        for d in sorted({r["driver"] for r in c["status"]["allocation"]["devices"]["results"]}):
            ok, out = plugin.prepare(d, c)
            prepared.append((d, c, ok, out))
        env.update(plugin.claim_env(c))
    check(prepared and all(ok for _, _, ok, _ in prepared),
          "%s (%s): on %s, prepared by nrm: %s" % (where, name, node, " ".join(
              "%s=%s" % kv for kv in sorted(env.items()) if "_" not in kv[0][4:] or kv[0].count("_") < 3)[:300]
              if all(ok for _, _, ok, _ in prepared) else "; ".join(out for _, _, ok, out in prepared if not ok)))
    for d, c, ok, _ in prepared:
        if ok:
            plugin.unprepare(d, c)
    cluster.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

for p in plugins.values():
    check(p.stop() == 0, "%s: the plugin stops cleanly" % p.node)
cluster.stop()
finish()
