#!/usr/bin/env python3
"""The node smoke test: one VM boot, a real node, nrm as its DaemonSet.

The real control plane of tests/cluster runs on the host's loopback; in the
cgroup v2 VM (2 NUMA nodes, 8 CPUs) containerd 2, runc, the CNI bridge,
kube-proxy and the kubelet of the same release join it (tests/node/nodelib.py).
Then, as docs/install.md says: nrm's image saved on the host and imported on
the node ("Without a registry", run as written), `kubectl apply -f
deploy/kubernetes/nrm.yaml`. Checked:
  - the Node turns Ready; nrm's DaemonSet pod starts from its image and turns
    Ready (registered with the kubelet, slices in sync), and its three
    drivers publish slices for the node;
  - the example deploy/kubernetes/examples/cpus-and-memory-same-numa.yaml
    (its image the test's busybox image, and 2 CPUs and 512 MiB to fit the
    VM) runs: what its container sees, read in the guest from /proc and the
    cgroup, not through kubectl: Cpus_allowed_list is NRM_CPUS, 2 CPUs of
    the NUMA node of the allocated cpu.nrm.io device, Mems_allowed_list is
    that node, memory.max is the claimed 512 MiB (MemoryConfig limit);
  - the claim's placement in its status (status.devices of cpu.nrm.io and
    memory.nrm.io, Ready, the container's CPUs and NUMA node, 512 MiB), the
    same through `kubectl nrm claim` (the real kubectl running nrm's
    kubectl-nrm link), and `kubectl nrm nodes` per NUMA node: the published
    capacity of the node's slices, the claim's 2 CPUs and 512 MiB allocated
    and prepared on its NUMA node, nothing on the other;
  - a prepare nrm refuses (a claim allocated by hand to a device the node
    does not have): the kubelet's FailedPrepareDynamicResources Event on
    the pod carries nrm's whole message, and nrm's own Warning Event on the
    claim has the reason and the same message;
  - a container without a claim stays on the shared pool (all CPUs but the
    claim's), and gets them back once the claimed pod is deleted.

NRM_K8S_LINE=v1.37 runs it on 1.37 (make check-cluster). Exit 77 without
Go, podman, root, qemu or a nrm image that can be built."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodelib  # noqa: E402
from nodelib import check, clusterlib, wait_for  # noqa: E402


def kubectl_nrm(node, *args):
    """The real kubectl running nrm's kubectl-nrm link (this tree's nrm on
    the host) as a plugin from PATH."""
    c = node.cluster
    bindir = os.path.join(c.dir, "plugin-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "kubectl-nrm")
    if not os.path.islink(link):
        os.symlink(os.path.abspath(os.environ["NRM"]), link)
    env = dict(os.environ, KUBECONFIG=c.kubeconfig, PATH=bindir + ":" + os.environ.get("PATH", ""))
    p = subprocess.run([os.path.join(c.bin, "kubectl"), "nrm", *args], env=env, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def quantity(q):
    """A capacity's value as the API server writes it back (a whole number,
    or one with a binary suffix) as a number."""
    for suffix, mult in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40)):
        if q.endswith(suffix):
            return int(q[:-2]) * mult
    return int(q)


def entries(node, claim):
    s, cl = node.cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + claim)
    return {e["driver"]: e for e in cl.get("status", {}).get("devices", []) if e["driver"].endswith(".nrm.io")}


def ready(e):
    return any(x.get("type") == "Ready" and x.get("status") == "True" for x in e.get("conditions", []))


def placement(node, claim, got, numa):
    """The claim's placement in its status, through kubectl nrm claim, and
    kubectl nrm nodes against the node's slices."""
    devs = wait_for(lambda: (lambda d: d if len(d) == 2 and all(map(ready, d.values())) else None)(
        entries(node, claim)), 60, 2) or entries(node, claim)
    cpu, mem = devs.get("cpu.nrm.io", {}), devs.get("memory.nrm.io", {})
    cd, md = cpu.get("data", {}), mem.get("data", {})
    print("# the claim's status.devices: %s" % json.dumps(list(devs.values()))[:1500])
    check(ready(cpu) and clusterlib.cpulist(cd.get("cpus", "")) == got and cd.get("numaNodes") == [numa],
          "the claim's status holds the CPU driver's placement, Ready: CPUs %s on NUMA node %s"
          % (cd.get("cpus"), cd.get("numaNodes")))
    check(ready(mem) and md.get("bytes") == 512 << 20 and md.get("numaNodes") == [numa],
          "... and the memory driver's, Ready: %s bytes on NUMA node %s" % (md.get("bytes"), md.get("numaNodes")))
    rc, out = kubectl_nrm(node, "claim", claim, "-n", "default")
    print(out)
    check(rc == 0 and cd.get("cpus", "?") in out and "Ready=True" in out,
          "`kubectl nrm claim %s` shows the placement (CPUs %s, Ready)" % (claim, cd.get("cpus")))
    rc, out = kubectl_nrm(node, "nodes", "--node", nodelib.NODE, "-o", "json")
    view = json.loads(out) if rc == 0 else {}
    rows = {(r["numaNode"], r["resource"]): r for r in view.get("resources", [])}
    # What the node's slices publish, per NUMA node: the CPU driver's numa<N>
    # devices' cpus, the memory driver's memory.
    published = {}
    for sl in node.cluster.slices(node=nodelib.NODE):
        for d in sl["spec"].get("devices", []):
            n = d.get("attributes", {}).get("resource.kubernetes.io/numaNode", {}).get("int")
            for res in ("cpus", "memory"):
                q = d.get("capacity", {}).get(res, {}).get("value")
                if q is not None and d["name"] == "numa%s" % n:
                    published[(n, res)] = quantity(q)
    ok = bool(published)
    for (n, res), want in sorted(published.items()):
        r = rows.get((n, res), {})
        mine = (2 if res == "cpus" else 512 << 20) if n == numa else 0
        ok &= r.get("published") == want and r.get("allocated") == mine and r.get("prepared") == mine
    check(ok, "`kubectl nrm nodes` matches the slices per NUMA node and the claim's 2 CPUs and 512 MiB, "
          "allocated and prepared on node %s: %s"
          % (numa, sorted((k, (v["published"], v["allocated"], v["prepared"])) for k, v in rows.items())))


def refused(node):
    """A claim allocated by hand to numa9, which the node's CPU driver does
    not publish, and a pod bound to the node that uses it: the kubelet asks
    nrm to prepare it, nrm refuses."""
    c = node.cluster
    c.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "refused", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "cpu.nrm.io"}}]}}}))
    s, cl = c.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/refused")
    c.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "refused", "namespace": "default"},
        "spec": {"nodeName": nodelib.NODE, "resourceClaims": [{"name": "c", "resourceClaimName": "refused"}],
                 "containers": [{"name": "app", "image": nodelib.WORKLOAD, "imagePullPolicy": "Never",
                                 "resources": {"claims": [{"name": "c"}]}}]}}))
    s, pod = c.api("GET", "/api/v1/namespaces/default/pods/refused")
    cl["status"] = {"allocation": {
        "devices": {"results": [{"request": "cpus", "driver": "cpu.nrm.io", "pool": nodelib.NODE,
                                 "device": "numa9"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [nodelib.NODE]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "refused", "uid": pod["metadata"]["uid"]}]}
    s, _ = c.api("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/refused/status", cl)
    check(s == 200, "the claim `refused` allocated by hand to cpu.nrm.io's numa9 and reserved for its pod "
          "(HTTP %s)" % s)

    def events(kind):
        s, ev = c.api("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
        return [e for e in ev.get("items", []) if e.get("regarding", {}).get("kind") == kind
                and e["regarding"].get("name") == "refused"]
    t = time.time()
    kubelet = wait_for(lambda: [e for e in events("Pod") if e.get("reason") == "FailedPrepareDynamicResources"],
                       300, 3) or []
    mine = wait_for(lambda: events("ResourceClaim"), 120, 3) or []
    kmsg = kubelet[0].get("note", "") if kubelet else ""
    note = mine[0].get("note", "") if mine else ""
    print("# the kubelet's Event: %s\n# nrm's Event: %s" % (kmsg, json.dumps(mine[:1])[:1500]))
    check(kubelet and "numa9" in kmsg and not kmsg.endswith("..."),
          "the kubelet's FailedPrepareDynamicResources Event on the pod carries nrm's message (%.0f s): %s"
          % (time.time() - t, kmsg))
    check(mine and mine[0].get("type") == "Warning" and mine[0].get("reason") == "NotFound"
          and mine[0].get("reportingController") == "cpu.nrm.io" and note and note in kmsg,
          "nrm's Warning Event on the claim: reason %s, its note the same message: %s"
          % (mine[0].get("reason") if mine else None, note))
    c.kubectl("delete", "pod", "refused", "--wait=false")
    c.kubectl("delete", "resourceclaim", "refused", "--wait=false")


def main():
    node, _, t0 = nodelib.start_with_pods()
    c = node.cluster

    claim, results, numa = node.claim_of("cpus-and-memory-same-numa")
    online = node.online()
    v = node.view("default", "cpus-and-memory-same-numa", "app")
    got = clusterlib.cpulist(v.get("Cpus_allowed_list", ""))
    print("# claim %s: device %s (NUMA node %s); the container sees %s" % (claim, results["cpus"]["device"], numa, v))
    check(len(got) == 2 and got == clusterlib.cpulist(v.get("NRM_CPUS", "x")),
          "the container's Cpus_allowed_list is NRM_CPUS, 2 CPUs: %s" % v.get("Cpus_allowed_list"))
    check(got and numa is not None and got <= node.node_cpus(numa),
          "... on the NUMA node of the allocated device %s (node %s)" % (results["cpus"]["device"], numa))
    check(v.get("Mems_allowed_list") == str(numa),
          "its Mems_allowed_list is that node: %s" % v.get("Mems_allowed_list"))
    check(v.get("memory.max") == str(512 << 20), "its memory.max is the claimed 512 MiB: %s" % v.get("memory.max"))
    shared = node.cpus("default", "plain", "c")
    check(shared == online - got, "the container without a claim is on the shared pool, all CPUs but the "
          "claim's: %s" % sorted(shared))

    placement(node, claim, got, numa)
    refused(node)

    c.kubectl("delete", "pod", "cpus-and-memory-same-numa", "--wait=true", "--timeout=300s")
    back = wait_for(lambda: node.cpus("default", "plain", "c") == online, 120, 3)
    check(back, "once the claimed pod is gone, the container without a claim has every CPU again")
    node.finish(t0, "node smoke test")


if __name__ == "__main__":
    main()
