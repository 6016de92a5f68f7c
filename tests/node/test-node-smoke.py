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

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodelib  # noqa: E402
from nodelib import check, clusterlib, wait_for  # noqa: E402


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

    c.kubectl("delete", "pod", "cpus-and-memory-same-numa", "--wait=true", "--timeout=300s")
    back = wait_for(lambda: node.cpus("default", "plain", "c") == online, 120, 3)
    check(back, "once the claimed pod is gone, the container without a claim has every CPU again")
    node.finish(t0, "node smoke test")


if __name__ == "__main__":
    main()
