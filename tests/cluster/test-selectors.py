#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every claim of the examples (deploy/kubernetes/examples) and of docs/,
and every selector in them and in nrm's DeviceClasses, judged by the real
kube-scheduler on recorded machines in both CPU modes.

One control plane (1.36 defaults) holds a Node for each machine and mode,
with the slices `nrm slices` prints for it (CPU, memory and PCI drivers,
every PCI class), created by the test's admin: what is judged here is the
devices' attributes against the claims' CEL, which needs no plugin. Then,
one claim at a time, a pod for each Node, held to it by node affinity,
uses the claim:
- as written: the real scheduler allocates it or says why not, and never
  because of a CEL error; for the prioritized lists, the subrequest it
  takes on chosen machines is the one docs/devices.md promises;
- as probes: each request and subrequest's class and selectors with
  allocationMode All, so that the scheduler evaluates them on every device
  of every node (a CEL runtime error on any device fails a claim in
  Kubernetes, even one that would have fitted elsewhere).

NRM_CLUSTER_TOPOLOGIES: "all", or a comma list of file names (default: a
sample of six machines, the prioritized lists' cases among them)."""

import glob
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (NRM, SRCDIR, TOPOLOGIES, Cluster, binaries, check, claim_docs, cpulist, finish,  # noqa: E402
                        skip, wait_for, workdir)

try:
    import yaml
except ImportError:
    skip("python3-yaml is not installed")
if not os.access(NRM, os.X_OK):
    skip("build nrm first (make check)")
EXAMPLES = os.path.join(SRCDIR, "deploy", "kubernetes", "examples")
PCI_ALL = os.path.join(SRCDIR, "tests", "bench", "pci-every-class.yaml")
SAMPLE = ["24em64t-2n6c2t-pci.xml", "8em64t-4c2t.xml", "64amd64-4s2n4ca2co.xml", "AMD-17h-Zen-2xEpyc-7451.xml",
          "16amd64-8n2c.xml", "32em64t-2n8c2t-pci-normalio.xml"]
# What docs/devices.md promises of the prioritized lists: the subrequests
# taken (none: the pod stays Pending).
PRIORITIZED = {
    ("24em64t-2n6c2t-pci.xml", "p", "prioritized-cpus.yaml"): ["cpus/l3-group"],
    ("8em64t-4c2t.xml", "p", "prioritized-cpus.yaml"): ["cpus/l3-group"],
    ("64amd64-4s2n4ca2co.xml", "p", "prioritized-cpus.yaml"): ["cpus/l3-group"],
    ("AMD-17h-Zen-2xEpyc-7451.xml", "p", "prioritized-cpus.yaml"): ["cpus/whole-cores"],
    ("16amd64-8n2c.xml", "p", "prioritized-cpus.yaml"): [],
    ("24em64t-2n6c2t-pci.xml", "n", "prioritized-cpus.yaml"): ["cpus/any-cpus"],
    ("16amd64-8n2c.xml", "n", "prioritized-cpus.yaml"): [],
    ("24em64t-2n6c2t-pci.xml", "n", "prioritized-memory.yaml"): ["cpus", "mem/cpu-node"],
}
CEL_ERROR = re.compile(r"CEL (runtime|compile) error[^;]*")

want = os.environ.get("NRM_CLUSTER_TOPOLOGIES", "")
topologies = (sorted(os.path.basename(f) for f in glob.glob(os.path.join(TOPOLOGIES, "*.xml"))) if want == "all"
              else [t for t in want.split(",") if t] or SAMPLE)
bindir = binaries()
work = workdir()
cluster = Cluster(work, "selectors", bindir)
cluster.install_nrm()
with open(os.path.join(SRCDIR, "deploy", "kubernetes", "nrm.yaml")) as fh:
    CLASSES = {d["metadata"]["name"] for d in yaml.safe_load_all(fh) if d and d.get("kind") == "DeviceClass"}

# --- the nodes and their slices ---------------------------------------------------------
nodes = {}  # node name -> (machine, mode letter)
for i, topo in enumerate(topologies):
    t = json.loads(subprocess.run([NRM, "topology", "--json", "-t", os.path.join(TOPOLOGIES, topo)],
                                  capture_output=True, text=True, check=True).stdout)
    cpus = max(len(cpulist(t["cpus"]["online"])), 1)
    mem = sum(n.get("memoryBytes", 0) for n in t.get("numaNodes", [])) or 64 << 30
    for mode in ("numa", "partitioned"):
        name = "m%d-%s" % (i, mode[0])
        nodes[name] = (topo, mode[0], cpus, mem)
cluster.create_nodes([(n, c, m) for n, (_, _, c, m) in nodes.items()])
made = 0
for name, (topo, mode, _, _) in nodes.items():
    out = subprocess.run([NRM, "slices", "--node-name", name, "-t", os.path.join(TOPOLOGIES, topo), "--cpu-mode",
                          "numa" if mode == "n" else "partitioned", "--drivers", "cpu,memory,pci", "--config",
                          PCI_ALL], capture_output=True, text=True, check=True).stdout
    for s in json.loads(out)["items"]:
        code, body = cluster.api("POST", "/apis/resource.k8s.io/v1/resourceslices", s)
        if code != 201:
            raise SystemExit("FAIL %s: slice %s refused: %s" % (name, s["metadata"]["name"], body))
        made += 1
print("# %d nodes (%d machines, both CPU modes), %d slices" % (len(nodes), len(topologies), made))


# --- the claims -----------------------------------------------------------------------------
def example_claims():
    """(name, devices of its claim template, or None, pod containers'
    resources) of each example."""
    out = []
    for f in sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))):
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        tmpl = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
        pod = [d for d in docs if d["kind"] == "Pod"][0]
        out.append((os.path.basename(f), tmpl[0]["spec"]["spec"]["devices"] if tmpl else None,
                    [c.get("resources", {}) for c in pod["spec"]["containers"]]))
    return out


claims = example_claims()
claims += [("%s (%s)" % (where, c["metadata"]["name"]),
            c["spec"]["spec"]["devices"] if c["kind"] == "ResourceClaimTemplate" else c["spec"]["devices"], None)
           for where, objs in claim_docs() for c in objs if c["kind"] in ("ResourceClaim", "ResourceClaimTemplate")]
check(len(claims) >= 28, "%d claims: %d examples, %d complete claims of docs/"
      % (len(claims), len(example_claims()), len(claims) - len(example_claims())))


def probes(devices):
    """Each request and subrequest's class and selectors, allocationMode All."""
    out = []
    for r in devices["requests"]:
        for s in r.get("firstAvailable") or [r["exactly"]]:
            if s["deviceClassName"] in CLASSES:
                p = {"deviceClassName": s["deviceClassName"], "allocationMode": "All"}
                if s.get("selectors"):
                    p["selectors"] = s["selectors"]
                out.append(p)
    return out


def pod(ns, node, resources=None):
    res = resources or [{"claims": [{"name": "c"}]}]
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
        "containers": [{"name": "c%d" % i, "image": "none", "resources": r} for i, r in enumerate(res)]}
    if not resources:
        spec["resourceClaims"] = [{"name": "c", "resourceClaimName": "c-" + node}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-" + node, "namespace": ns}, "spec": spec}


def outcome(ns, node):
    """("bound", [requests]) or ("pending", reason), or None while undecided."""
    s, p = cluster.api("GET", "/api/v1/namespaces/%s/pods/p-%s" % (ns, node))
    if s != 200:
        return None
    if p["spec"].get("nodeName"):
        names = [c.get("resourceClaimName") for c in p["spec"].get("resourceClaims", [])]
        ext = p.get("status", {}).get("extendedResourceClaimStatus", {}).get("resourceClaimName")
        reqs = []
        for n in filter(None, names + [ext]):
            c = cluster.claim(ns, n) or {}
            reqs += [r["request"] for r in c.get("status", {}).get("allocation", {}).get("devices", {})
                     .get("results", [])]
        return "bound", sorted(set(reqs))
    for c in p.get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
            return "pending", c["message"]
    return None


def gone(ns):
    s, lst = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns)
    s2, pods = cluster.api("GET", "/api/v1/namespaces/%s/pods" % ns)
    return not lst.get("items") and not pods.get("items")


def round_(ns, devices, resources=None):
    """One claim on every node at once: {node: outcome}; then the pods and
    claims deleted, their devices free again."""
    cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # A pod is refused until the controller-manager gave the namespace its
    # default ServiceAccount.
    wait_for(lambda: cluster.api("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)[0] == 200, 30, 0.2)
    for node in nodes:
        if devices is not None:
            code, body = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "c-" + node}, "spec": {"devices": devices}})
            if code != 201:
                return {n: ("refused", str(body)[:300]) for n in nodes}
        code, body = cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod(ns, node, resources))
        if code != 201:
            return {n: ("refused", str(body)[:300]) for n in nodes}
    got = {}

    def decided():
        for n in nodes:
            if n not in got:
                o = outcome(ns, n)
                if o:
                    got[n] = o
        return len(got) == len(nodes)

    wait_for(decided, 120, 0.5)
    for n in nodes:
        got.setdefault(n, ("undecided", "no answer from the scheduler in 120 s"))
    cluster.delete_pods(ns, *("p-" + node for node in nodes))
    cluster.api("DELETE", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns)
    if not wait_for(lambda: gone(ns), 120, 0.5):
        raise SystemExit("FAIL %s: the claims of a round were not deleted in 120 s" % ns)
    return got


t0 = time.time()
n_probes = 0
for i, (name, devices, resources) in enumerate(claims):
    got = round_("c%d" % i, devices, resources if devices is None else None)
    errs = ["%s: %s" % (n, CEL_ERROR.search(why).group(0)) for n, (k, why) in got.items()
            if k == "pending" and CEL_ERROR.search(why)]
    bad = ["%s: %s %s" % (n, k, why) for n, (k, why) in got.items() if k in ("refused", "undecided")]
    bound = sorted(n for n, (k, _) in got.items() if k == "bound")
    check(not errs and not bad, "%s: allocated on %d of %d nodes, Pending on the rest, no CEL error%s"
          % (name, len(bound), len(nodes), ": " + "; ".join((errs + bad)[:2]) if errs or bad else ""))
    for (topo, mode, ex), want in PRIORITIZED.items():
        if ex != name or topo not in topologies:
            continue
        node = next(n for n, v in nodes.items() if v[0] == topo and v[1] == mode)
        k, reqs = got[node]
        have = reqs if k == "bound" else []
        check(have == want, "%s on %s, %s mode: the real scheduler takes %s (%s)"
              % (ex, topo, "numa" if mode == "n" else "partitioned", want or "nothing, Pending",
                 have or (reqs if k != "bound" else "nothing")[:200]))
    if devices is None:
        continue
    ps = [p for j, p in enumerate(probes(devices)) if p not in probes(devices)[:j]]
    wrong, fitted = [], 0
    for j, p in enumerate(ps):
        n_probes += 1
        got = round_("c%d-p%d" % (i, j), {"requests": [{"name": "p", "exactly": p}]})
        fitted += sum(k == "bound" for k, _ in got.values())
        wrong += ["%s %s: %s: %s" % (p["deviceClassName"], json.dumps(p.get("selectors", []))[:120], n,
                                     CEL_ERROR.search(why).group(0) if CEL_ERROR.search(why) else why[:200])
                  for n, (k, why) in got.items()
                  if k in ("refused", "undecided") or (k == "pending" and CEL_ERROR.search(why))]
    check(not wrong, "%s: its %d class and selector sets evaluated on every device of every node (all devices "
          "matching taken on %d node checks), no CEL error%s" % (name, len(ps), fitted,
                                                                 ": " + "; ".join(wrong[:2]) if wrong else ""))
print("# %d claims and %d probes on %d nodes in %.0f s" % (len(claims), n_probes, len(nodes), time.time() - t0))
cluster.stop()
finish()
