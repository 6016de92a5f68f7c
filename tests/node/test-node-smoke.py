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
  - a container without a claim stays on the shared pool (all CPUs but the
    claim's), and gets them back once the claimed pod is deleted.

NRM_K8S_LINE=v1.37 runs it on 1.37 (make check-cluster). Exit 77 without
Go, podman, root, qemu or a nrm image that can be built."""

import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodelib  # noqa: E402
from nodelib import SRCDIR, check, clusterlib, skip, wait_for  # noqa: E402

EXAMPLE = os.path.join(SRCDIR, "deploy", "kubernetes", "examples", "cpus-and-memory-same-numa.yaml")


def cpus_of(text):
    return clusterlib.cpulist(text)


def example_for_the_vm():
    """The example, with the changes the VM needs, each checked to apply."""
    with open(EXAMPLE) as fh:
        text = fh.read()
    for old, new in (("image: debian:12-slim", "image: %s\n    imagePullPolicy: Never" % nodelib.WORKLOAD),
                     ('cpus: "4"', 'cpus: "2"'), ('cpu: "4"', 'cpu: "2"'), ("memory: 4Gi", "memory: 512Mi")):
        if old not in text:
            raise SystemExit("FAIL %s no longer has %r: update this test" % (EXAMPLE, old))
        text = text.replace(old, new)
    return text


def container_view(node, cluster, ns, pod, container):
    """What the container sees, read in the guest: a dict of its
    Cpus_allowed_list, Mems_allowed_list, NRM_* variables, memory.max."""
    s, p = cluster.api("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, pod))
    cid = next((c.get("containerID", "") for c in p["status"].get("containerStatuses", [])
                if c["name"] == container), "")
    cid = cid.split("//", 1)[-1]
    if not re.fullmatch(r"[0-9a-f]{64}", cid):
        return {}
    rc, out = node.guest("""d=$(find /sys/fs/cgroup/kubepods -type d -name %s | head -n 1)
pid=$(head -n 1 "$d/cgroup.procs")
grep -E '^(Cpus|Mems)_allowed_list' /proc/$pid/status | tr -d '\\t'
tr '\\0' '\\n' </proc/$pid/environ | grep '^NRM_' | sed 's/=/:/'
echo "memory.max:$(cat "$d/memory.max")"
""" % cid)
    view = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        view[k] = v.strip()
    return view


def main():
    if shutil.which("podman") is None:
        skip("podman is not installed (./scripts/deps.sh): it builds the node's images")
    if os.geteuid() != 0:
        skip("needs root: podman's root storage, and the VM shares the work folder as root")
    work = clusterlib.workdir()
    bindir = nodelib.node_binaries()
    t0 = time.time()
    node = nodelib.Node(work, bindir)
    c = node.cluster
    n = node.ready(600)
    if not check(n is not None, "the Node %s registers and turns Ready" % nodelib.NODE):
        node.stop()
        print(node.logs())
        clusterlib.finish()
    node.import_nrm()
    c.install_nrm()
    pod = c.nrm_pod(nodelib.NODE, timeout=300)
    check(pod is not None, "nrm's DaemonSet has a pod on the node")

    def nrm_ready():
        s, p = c.api("GET", "/api/v1/namespaces/%s/pods/%s" % (clusterlib.NAMESPACE, pod))
        conds = {x["type"]: x["status"] for x in p.get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True"
    ready = wait_for(nrm_ready, 400, 2) if pod else False
    check(ready, "nrm's pod turns Ready (registered with the kubelet, slices in sync) after %.0f s"
          % (time.time() - t0))
    drivers = sorted({sl["spec"]["driver"] for sl in c.slices(node=nodelib.NODE)})
    check(drivers == ["cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"],
          "the node's slices come from nrm's three drivers: %s" % drivers)
    if not ready:
        print(node.logs())
        node.stop()
        clusterlib.finish()

    # A pod without a claim, then the example.
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": nodelib.WORKLOAD, "imagePullPolicy": "Never"}]}}
    c.kubectl("apply", "-f", "-", stdin=json.dumps(plain))
    c.kubectl("apply", "-f", "-", stdin=example_for_the_vm())

    def running(name):
        s, p = c.api("GET", "/api/v1/namespaces/default/pods/" + name)
        return s == 200 and p["status"].get("phase") == "Running" and all(
            cs.get("ready") for cs in p["status"].get("containerStatuses", [{}]))
    ok = wait_for(lambda: running("cpus-and-memory-same-numa") and running("plain"), 400, 2)
    if not check(ok, "the example's pod and a pod without a claim run"):
        print(c.kubectl("get", "events", "-A").stdout[-4000:])
        print(node.logs())
        node.stop()
        clusterlib.finish()

    s, p = c.api("GET", "/api/v1/namespaces/default/pods/cpus-and-memory-same-numa")
    claim = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    s, cl = c.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + claim)
    results = {r["request"]: r for r in cl["status"]["allocation"]["devices"]["results"]}
    dev = results["cpus"]["device"]
    numa = None
    for sl in c.slices(node=nodelib.NODE, driver="cpu.nrm.io"):
        for d in sl["spec"].get("devices", []):
            if d["name"] == dev:
                numa = d.get("attributes", {}).get("resource.kubernetes.io/numaNode", {}).get("int")
    rc, node_cpus = node.guest("cat /sys/devices/system/node/node%s/cpulist; cat /sys/devices/system/cpu/online"
                               % numa)
    node_cpus, online = (cpus_of(x) for x in node_cpus.split())
    v = container_view(node, c, "default", "cpus-and-memory-same-numa", "app")
    got = cpus_of(v.get("Cpus_allowed_list", ""))
    print("# claim %s: device %s (NUMA node %s); the container sees %s" % (claim, dev, numa, v))
    check(len(got) == 2 and got == cpus_of(v.get("NRM_CPUS", "x")),
          "the container's Cpus_allowed_list is NRM_CPUS, 2 CPUs: %s" % v.get("Cpus_allowed_list"))
    check(got and got <= node_cpus, "... on the NUMA node of the allocated device %s (node %s: %s)"
          % (dev, numa, sorted(node_cpus)))
    check(v.get("Mems_allowed_list") == str(numa),
          "its Mems_allowed_list is that node: %s" % v.get("Mems_allowed_list"))
    check(v.get("memory.max") == str(512 << 20), "its memory.max is the claimed 512 MiB: %s" % v.get("memory.max"))
    pv = container_view(node, c, "default", "plain", "c")
    shared = cpus_of(pv.get("Cpus_allowed_list", ""))
    check(shared == online - got, "the container without a claim is on the shared pool, all CPUs but the claim's: %s"
          % pv.get("Cpus_allowed_list"))

    c.kubectl("delete", "pod", "cpus-and-memory-same-numa", "--wait=true", "--timeout=300s")
    back = wait_for(lambda: cpus_of(container_view(node, c, "default", "plain", "c")
                                    .get("Cpus_allowed_list", "")) == online, 120, 3)
    check(back, "once the claimed pod is gone, the container without a claim has every CPU again")
    if clusterlib.failures:
        print(node.logs())
    node.stop()
    print("# node smoke test: %.0f s" % (time.time() - t0))
    clusterlib.finish()


if __name__ == "__main__":
    main()
