#!/usr/bin/env python3
"""PCI devices, binding conditions and health on a real node (make
check-cluster).

The node of tests/node/nodelib.py with the PCI devices of `vm.sh --pci
--iommu` (per NUMA node a virtio GPU, an e1000e and an NVMe, each in an
IOMMU group of its own), nrm installed with helm and the values of
docs/install.md's "Passthrough and huge pages on demand". Then:
  1. the example gpu-cpus-memory-one-node (2 CPUs, 256 MiB): the container
     has the GPU's DRM nodes, NRM_PCI_DEVICES, and CPUs and memory of the
     GPU's NUMA node;
  2. a claim of node 1's e1000e passthrough twin: the scheduler holds the
     pod until nrm's binder, with the DaemonSet's permissions, sets
     vfio-ready; the function is on vfio-pci and the container has
     /dev/vfio; back on e1000e once the pod is deleted;
  3. the same for node 0's e1000e, nrm killed with SIGKILL as its binder
     starts the move: after the restart the binding conditions complete or
     fail with a reason, and the function has one driver;
  4. huge pages on demand: a claim of 32 MiB of 2 MiB pages raises the NUMA
     node's pool behind binding conditions, the container's hugetlb limit
     is the claim's, and the pool goes back when the pod is deleted;
  5. health: a CPU of the GPU pod's NUMA node taken offline shows in the
     pod's allocatedResourcesStatus and as the NoSchedule taint
     cpu.nrm.io/cpus-offline on the slice (the pod stays); a corrected AER
     error on an e1000e held by a pod is the taint
     pci.nrm.io/aer-correctable, effect None (the pod stays, the device
     Healthy); the NVMe of a pod removed from the bus is the
     NoExecute taint pci.nrm.io/removed, and the device-taint eviction
     controller deletes the pod.

NRM_K8S_LINE=v1.37 runs it on 1.37. Exit 77 where the smoke test skips."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodelib  # noqa: E402
from nodelib import check, clusterlib, wait_for  # noqa: E402

NODE = nodelib.NODE
GPU_EXAMPLE = os.path.join(nodelib.EXAMPLES, "gpu-cpus-memory-one-node.yaml")
VFIO_STATE = "/var/lib/nrm/pci.nrm.io.vfio"


def gpu_example():
    return nodelib.adapt(GPU_EXAMPLE, [
        ("image: debian:12-slim", "image: %s\n    imagePullPolicy: Never" % nodelib.WORKLOAD),
        ('cpus: "8"', 'cpus: "2"'), ('cpu: "8"', 'cpu: "2"'), ("memory: 32Gi", "memory: 256Mi")])


def claim_pod(name, requests, constraints=None):
    """A ResourceClaimTemplate of requests and a pod of the workload image
    with it (terminationGracePeriodSeconds 1: busybox's sleep ignores
    SIGTERM)."""
    spec = {"devices": {"requests": requests}}
    if constraints:
        spec["devices"]["constraints"] = constraints
    tmpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": spec}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "c", "resourceClaimTemplateName": name}],
                    "containers": [{"name": "app", "image": nodelib.WORKLOAD, "imagePullPolicy": "Never",
                                    "resources": {"claims": [{"name": "c"}]}}]}}
    return json.dumps(tmpl) + "\n---\n" + json.dumps(pod)


def by_bus(cls, bus):
    return {"name": "dev", "exactly": {"deviceClassName": cls, "selectors": [{"cel": {
        "expression": 'device.attributes["resource.kubernetes.io"].pciBusID == "%s"' % bus}}]}}


def cpus_request(n=2):
    return {"name": "cpus", "exactly": {"deviceClassName": "cpu.nrm.io",
                                        "capacity": {"requests": {"cpus": str(n)}}}}


def claim(node, pod):
    name, results, numa = node.claim_of(pod)
    return node.cluster.claim("default", name) or {}, results, numa


def conditions(cl):
    """{condition type: (status, reason, message)} of the claim's device
    status entries."""
    out = {}
    for d in cl.get("status", {}).get("devices", []) or []:
        for x in d.get("conditions", []) or []:
            out[x["type"]] = (x["status"], x.get("reason", ""), x.get("message", ""))
    return out


def driver_of(node, bus):
    rc, out = node.guest("basename \"$(readlink /sys/bus/pci/devices/%s/driver)\"" % bus)
    return out.strip() if rc == 0 else "?"


def device_of(node, driver, name):
    for sl in node.cluster.slices(node=NODE, driver=driver):
        for d in sl["spec"].get("devices", []):
            if d["name"] == name:
                return d
    return None


def taints(node, driver, name):
    d = device_of(node, driver, name)
    return [(t["key"], t["effect"]) for t in (d or {}).get("taints", [])]


def health(node, pod, container="app"):
    """{resourceID: (health, message)} of a container's
    allocatedResourcesStatus."""
    p = node.pod("default", pod) or {}
    out = {}
    for cs in p.get("status", {}).get("containerStatuses", []):
        if cs["name"] != container:
            continue
        for rs in cs.get("allocatedResourcesStatus", []) or []:
            for r in rs.get("resources", []) or []:
                out[r["resourceID"]] = (r.get("health"), r.get("message", ""))
    return out


def gone(node, name):
    return node.pod("default", name) is None


def passthrough(node, bus, kill):
    """A claim of the twin of the e1000e at bus; with kill, nrm's plugin is
    killed with SIGKILL once the binder journals the move."""
    c = node.cluster
    name = "vfio-" + bus.replace(":", "-").replace(".", "-")
    what = "%s (%s)" % (name, "nrm killed during the move" if kill else "passthrough")
    check(driver_of(node, bus) == "e1000e", "%s: the function starts on e1000e" % what)
    if kill:
        # In the guest, beside the requests: polls for the journal entry the
        # binder writes before it touches the function, then kills the
        # plugin (the e1000e's unbind alone takes seconds under TCG).
        node.guest("""( i=0; while [ ! -e %s/%s.json ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done
  pkill -9 -f '^/usr/bin/nrm-agent plugin '; echo "$? $(basename "$(readlink /sys/bus/pci/devices/%s/driver)")" \
  >%s/killed ) >/dev/null 2>&1 &""" % (VFIO_STATE, bus, bus, node.g))
    t = time.time()
    c.kubectl("apply", "-f", "-", stdin=claim_pod(name, [by_bus("vfio.nrm.io", bus)]))
    if kill:
        killed = wait_for(lambda: os.path.exists(os.path.join(node.g, "killed")), 400, 1)
        text = open(os.path.join(node.g, "killed")).read().strip() if killed else ""
        check(text.startswith("0 "), "%s: nrm's plugin killed with SIGKILL once the binder journaled the move "
              "(%.0f s; the function's driver then: %s)" % (what, time.time() - t, text[2:] or "-"))
    ok = node.wait_running(name, timeout=600)
    cl, results, _ = claim(node, name) if node.pod("default", name) else ({}, {}, None)
    conds = conditions(cl)
    ready = conds.get("pci.nrm.io/vfio-ready", ("",))[0] == "True"
    failed = conds.get("pci.nrm.io/vfio-failed", ("",))
    if kill:
        check(ready or (failed[0] == "True" and failed[2]),
              "%s: after the restart the binding conditions complete or fail with a reason: %s"
              % (what, conds))
        drv = driver_of(node, bus)
        check(drv == ("vfio-pci" if ready else "e1000e"), "%s: the function has one driver, %s" % (what, drv))
        if not ready:
            c.kubectl("delete", "pod", name, "--wait=true", "--timeout=300s", check=False)
            return
    check(ok, "%s: the pod runs once its claim is bound (%.0f s)" % (what, time.time() - t))
    check(ready, "%s: the claim's status has pci.nrm.io/vfio-ready True, set by nrm's binder: %s" % (what, conds))
    check(results.get("dev", {}).get("device", "").endswith("-vfio"),
          "%s: the allocated device is the twin: %s" % (what, results.get("dev", {}).get("device")))
    check(driver_of(node, bus) == "vfio-pci", "%s: the function is bound to vfio-pci" % what)
    rc, group = node.guest("basename \"$(readlink /sys/bus/pci/devices/%s/iommu_group)\"" % bus)
    dev = node.view("default", name, "app").get("dev", "").split()
    check("vfio/vfio" in dev and "vfio/%s" % group.strip() in dev,
          "%s: the container has /dev/vfio/vfio and /dev/vfio/%s: %s" % (what, group.strip(), dev))
    c.kubectl("delete", "pod", name, "--wait=true", "--timeout=300s")
    back = wait_for(lambda: driver_of(node, bus) == "e1000e", 120, 2)
    check(back, "%s: once the pod is deleted the function is back on e1000e (%s)" % (what, driver_of(node, bus)))


EXTRA = """config:
  pci:
    classes: [gpu, nic, nvme]
"""


def main():
    t0 = time.time()
    # NICs and NVMe drives are served only when named (docs/pci.md); the
    # VM's e1000e and NVMe carry nothing of the guest's.
    node, pod = nodelib.start_node(helm=True, pci=True, extra=EXTRA)
    c = node.cluster

    # 1. The GPU example.
    c.kubectl("apply", "-f", "-", stdin=gpu_example())
    ok = node.wait_running("gpu-cpus-memory-one-node")
    if not check(ok, "the example gpu-cpus-memory-one-node runs"):
        node.fail()
    gcl, gres, numa = claim(node, "gpu-cpus-memory-one-node")
    gpu = device_of(node, "pci.nrm.io", gres["gpu"]["device"]) or {}
    gbus = gpu.get("attributes", {}).get("resource.kubernetes.io/pciBusID", {}).get("string")
    gnuma = gpu.get("attributes", {}).get("resource.kubernetes.io/numaNode", {}).get("int")
    v = node.view("default", "gpu-cpus-memory-one-node", "app")
    mine = clusterlib.cpulist(v.get("Cpus_allowed_list", ""))
    check(gnuma == numa and len(mine) == 2 and mine <= node.node_cpus(numa),
          "the GPU %s, the CPUs %s and the memory are on one NUMA node, %s" % (gbus, sorted(mine), numa))
    check(v.get("Mems_allowed_list") == str(numa), "... Mems_allowed_list %s" % v.get("Mems_allowed_list"))
    check(v.get("NRM_PCI_DEVICES") == gbus, "... NRM_PCI_DEVICES %s" % v.get("NRM_PCI_DEVICES"))
    rc, nodes = node.guest("cd /sys/bus/pci/devices/%s && ls -d drm/card* drm/renderD* | sed 's|drm/|dri/|'" % gbus)
    dev = v.get("dev", "").split()
    check(nodes.split() and all(n in dev for n in nodes.split()),
          "... the container has the GPU's DRM nodes %s: %s" % (nodes.split(), dev))

    # 2, 3. Passthrough, then nrm killed during the move.
    passthrough(node, "0000:42:00.0", kill=False)
    passthrough(node, "0000:22:00.0", kill=True)

    # 4. Huge pages on demand.
    hp = "hugepages-on-demand"
    c.kubectl("apply", "-f", "-", stdin=claim_pod(hp, [
        {"name": "dev", "exactly": {"deviceClassName": "hugepages-2mi.memory.nrm.io",
                                    "capacity": {"requests": {"hugepages": "32Mi"}}}}, cpus_request()],
        constraints=[{"requests": ["dev", "cpus"], "matchAttribute": "resource.kubernetes.io/numaNode"}]))
    ok = node.wait_running(hp, timeout=600)
    check(ok, "a claim of 32Mi of 2Mi huge pages on demand runs")
    if ok:
        cl, res, hnuma = claim(node, hp)
        conds = conditions(cl)
        check(conds.get("memory.nrm.io/hugepages-ready", ("",))[0] == "True",
              "... its claim's status has memory.nrm.io/hugepages-ready True: %s" % conds)
        pool = "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages" % hnuma
        rc, n = node.guest("cat " + pool)
        check(n.strip() == "16", "... NUMA node %s's pool raised to 16 pages: %s" % (hnuma, n.strip()))
        v = node.view("default", hp, "app")
        check(v.get("hugetlb.2MB.max") == str(32 << 20), "... the container's hugetlb.2MB.max is 32Mi: %s"
              % v.get("hugetlb.2MB.max"))
        c.kubectl("delete", "pod", hp, "--wait=true", "--timeout=300s")
        back = wait_for(lambda: node.guest("cat " + pool)[1].strip() == "0", 120, 2)
        check(back, "... and the pool is back to 0 once the pod is deleted")

    # 5. Health: a CPU offline (NoSchedule: the pod stays).
    cpu_dev = gres["cpus"]["device"]
    # The kubelet names a device in allocatedResourcesStatus by its first
    # CDI device id when it has one (else driver/pool/device): nrm's is one
    # per claim and driver, <driver>/claim=<claim uid>.
    rid = "cpu.nrm.io/claim=%s" % gcl["metadata"]["uid"]
    free = sorted(node.node_cpus(numa) - mine - {0})
    off = free[-1]
    check(health(node, "gpu-cpus-memory-one-node").get(rid, ("",))[0] == "Healthy",
          "the GPU pod's allocatedResourcesStatus has %s Healthy: %s" % (rid, health(node, "gpu-cpus-memory-one-node")))
    node.guest("echo 0 >/sys/devices/system/cpu/cpu%d/online" % off)
    t = time.time()
    tainted = wait_for(lambda: ("cpu.nrm.io/cpus-offline", "NoSchedule") in taints(node, "cpu.nrm.io", cpu_dev), 120, 2)
    check(tainted, "CPU %d offline: %s carries cpu.nrm.io/cpus-offline NoSchedule on the slice (%.0f s)"
          % (off, cpu_dev, time.time() - t))
    h = wait_for(lambda: health(node, "gpu-cpus-memory-one-node").get(rid, ("",))[0] == "Unhealthy", 120, 2)
    check(h, "... and the pod's allocatedResourcesStatus says %s Unhealthy: %s"
          % (rid, health(node, "gpu-cpus-memory-one-node").get(rid)))
    time.sleep(10)
    check(node.pod_ready("default", "gpu-cpus-memory-one-node"), "... the pod stays (NoSchedule evicts nothing)")
    node.guest("echo 1 >/sys/devices/system/cpu/cpu%d/online" % off)
    t = time.time()
    clean = wait_for(lambda: not taints(node, "cpu.nrm.io", cpu_dev)
                     and health(node, "gpu-cpus-memory-one-node").get(rid, ("",))[0] == "Healthy", 120, 2)
    check(clean, "CPU %d online again: the taint is gone and the device Healthy (%.0f s)" % (off, time.time() - t))

    # A corrected AER error (effect None: the pod stays), on node 0's
    # e1000e under a pod: QEMU's e1000e has the AER capability, its virtio
    # GPU none (aer_inject refuses it).
    nic, nbus = "nic-aer", "0000:22:00.0"
    c.kubectl("apply", "-f", "-", stdin=claim_pod(nic, [by_bus("nic.nrm.io", nbus)]))
    ok = node.wait_running(nic)
    check(ok, "a pod with node 0's e1000e %s runs" % nbus)
    if ok:
        ncl, nres, _ = claim(node, nic)
        nname = nres["dev"]["device"]
        bus, rest = nbus.split(":")[1], nbus.split(":")[2]
        dv, fn = rest.split(".")
        o = "".join("\\%03o" % x for x in (int(bus, 16), int(dv, 16), int(fn)))
        # struct aer_error_inj in one write: bus, dev, fn, a pad byte,
        # uncor_status, cor_status (RxErr), header_log[4], domain.
        rc, out = node.guest("printf '%s\\000\\000\\000\\000\\000\\001%s' >/dev/aer_inject && "
                             "grep TOTAL_ERR_COR /sys/bus/pci/devices/%s/aer_dev_correctable"
                             % (o, "\\000" * 23, nbus))
        check(rc == 0, "a corrected AER error injected on the e1000e %s: %s" % (nbus, out.strip()))
        t = time.time()
        aer = wait_for(lambda: ("pci.nrm.io/aer-correctable", "None") in taints(node, "pci.nrm.io", nname), 120, 2)
        check(aer, "... %s carries pci.nrm.io/aer-correctable None (%.0f s): %s"
              % (nname, time.time() - t, taints(node, "pci.nrm.io", nname)))
        nrid = "pci.nrm.io/claim=%s" % ncl["metadata"]["uid"]
        check(health(node, nic).get(nrid, ("",))[0] == "Healthy",
              "... its pod's allocatedResourcesStatus keeps %s Healthy (docs/pci.md): %s" % (nrid, health(node, nic)))
        time.sleep(10)
        check(node.pod_ready("default", nic), "... and its pod stays (effect None)")
        c.kubectl("delete", "pod", nic, "--wait=true", "--timeout=300s")

    # An NVMe removed from the bus under its pod (NoExecute: evicted).
    nv = "nvme-evicted"
    c.kubectl("apply", "-f", "-", stdin=claim_pod(nv, [by_bus("nvme.nrm.io", "0000:23:00.0")]))
    ok = node.wait_running(nv)
    check(ok, "a pod with node 0's NVMe runs")
    if ok:
        ncl, nres, _ = claim(node, nv)
        nname = nres["dev"]["device"]
        dev = node.view("default", nv, "app").get("dev", "").split()
        check(any(x.startswith("nvme") for x in dev), "... with its device nodes: %s" % dev)
        node.guest("echo 1 >/sys/bus/pci/devices/0000:23:00.0/remove")
        t = time.time()
        rm = wait_for(lambda: ("pci.nrm.io/removed", "NoExecute") in taints(node, "pci.nrm.io", nname), 120, 2)
        check(rm, "the NVMe removed from the bus: %s carries pci.nrm.io/removed NoExecute (%.0f s)"
              % (nname, time.time() - t))
        ev = wait_for(lambda: gone(node, nv), 180, 2)
        check(ev, "... and the device-taint eviction controller deleted its pod (%.0f s)" % (time.time() - t))
        evs = c.kubectl("get", "events", "-n", "default", "--field-selector", "involvedObject.name=" + nv,
                        "-o", "custom-columns=R:.reason,M:.message", check=False).stdout
        print("# the pod's events:\n" + evs)
        node.guest("echo 1 >/sys/bus/pci/rescan")
        back = wait_for(lambda: (device_of(node, "pci.nrm.io", nname) or {}).get("taints") in (None, []), 180, 2)
        check(back, "after a rescan the NVMe is published again without a taint")
    check(node.pod_ready("default", "gpu-cpus-memory-one-node"), "the GPU pod still runs")
    node.finish(t0, "node PCI test")


if __name__ == "__main__":
    main()
