#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real kube-scheduler's speed with nrm's devices (issue #28): one real
control plane on loopback (tests/cluster, 1.36), N Nodes of recorded
machines (rotating through the 2-thread machines of tests/topologies with
24 CPUs or more), and for each case P = pods-per-node * N pods that each
want 2 CPUs, created at one fixed rate R:

  a            resources.requests.cpu "2" only (the CPU Manager's path)
  a1           + a claim for a trivial device: a test driver publishing one
               shared device per node with no attributes (DRA's own floor)
  b            + nrm's CPU claim, numa mode (a numa<N> device, capacity cpus 2)
  c            + nrm's CPU claim, partitioned mode (one core<cpu> device of
               2 threads, the request docs/devices.md gives for whole cores)
  d-individual + dra-driver-cpu's individual shape (a device per CPU), count 2
  d-grouped    + dra-driver-cpu's grouped shape (a consumable device per NUMA
               node, capacity dra.cpu/cpu 2)
  e            + nrm's CPUs, memory and an emulated GPU on one NUMA node
               (matchAttribute resource.kubernetes.io/numaNode: a scalar,
               DRAListTypeAttributes is off in nrm on 1.36, docs/versions.md)

Every pod also asks resources.requests.cpu "2" (as nrm's examples do), so
(a) is the same pod without a claim. R is what the scheduler sustains in
case (a) with pods created as fast as a few client threads can (measured
first unless --rate is given). Per case it reads the scheduler's own
/metrics before and after: scheduler_pod_scheduling_sli_duration_seconds
(p50/p99 interpolated in its buckets, which double from 10 ms: the figure
is only as fine as the bucket it falls in), scheduler_schedule_attempts_total
by result, and pods/s from the first create to the last bind seen on a
watch. Between cases the pods are force-deleted (no kubelet), their claims
removed, and the next case starts when the server holds none.

The slices come from a publisher function (publish(cluster, nodes, shape));
the default one posts them as the admin (`nrm slices` for nrm's shapes, the
test's own objects for the others), so that "make nodes and slices" and
"run a case" stay apart: run_case(cluster, case, nodes, rate, ...) -> dict.

Both the scheduler's and the controller-manager's API client limits are
raised (--api-qps, default 500; 0 keeps the components' defaults of 50 and
20 requests/s): with the defaults, the client limiter, not the scheduler's
work, sets every case's pods/s (a DRA pod costs a claim write and a bind).

Goals (printed met/NOT MET): (b) within 1.5x of (a1) on pods/s and p99;
(b) 3x better than (d-individual) on pods/s; (b) within 1.1x of
(d-grouped) on pods/s; (e) within 2x of (b) on pods/s. A missed goal
takes a CPU profile of the scheduler (pprof) during a rerun of the
missing case and prints its top functions.

  fleet-sched.py NRM --nodes N [--pods-per-node 10] [--runs 3]
                 [--cases a,a1,b,c,d-individual,d-grouped,e] [--rate R] [--json OUT]
                 [--api-qps Q] [--case-timeout S] [--profile-dir DIR] [--profile CASES]"""

import argparse
import datetime
import http.client
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import Cluster, binaries, cpulist, skip, wait_for, workdir  # noqa: E402

TOPOLOGIES = os.path.join(HERE, "..", "topologies")
# 2 threads per core and 24 CPUs or more: case (c) takes one whole core for
# 2 CPUs, which a 4-thread (256ppc-8n8s4t) or 1-thread machine cannot give.
# And memory sizes per NUMA node: the CPUID dumps (AMD-19h-Zen4-2xEpyc-9654,
# Intel-Skylake-2xXeon6140, Hygon, ...) have none, so nrm publishes no memory
# devices for them and case (e) finds no node there.
MACHINES = ["192em64t-24n8c2t.xml", "memorysidecaches.xml", "32em64t-2n8c2t-pci-normalio.xml",
            "24em64t-2n6c2t-pci.xml"]
CASES = ["a", "a1", "b", "c", "d-individual", "d-grouped", "e"]
# The slices each case needs (a publisher's "shape").
SHAPE = {"a": "none", "a1": "trivial", "b": "nrm-numa", "c": "nrm-partitioned", "d-individual": "dracpu-individual",
         "d-grouped": "dracpu-grouped", "e": "nrm-numa-pci"}
NS = "bench"
RES = "/apis/resource.k8s.io/v1"
TRIVIAL = "trivial.bench.nrm.io"
# dra-driver-cpu's driver name and attribute prefix (docs/user/configuration.md
# as summarized in the peers' sheet); the DeviceClass is the test's, named
# as the driver and selecting its devices only.
DRACPU = "dra.cpu"
TWO = {"cpu": "2"}


# --- nodes and slices ------------------------------------------------------------------------
def topology(nrm, machine):
    """nrm's view of a recorded machine (`nrm topology --json`)."""
    return json.loads(subprocess.run([nrm, "topology", "--json", "-t", os.path.join(TOPOLOGIES, machine)],
                                     capture_output=True, text=True, check=True).stdout)


def make_nodes(cluster, nrm, count, machines=MACHINES):
    """count Nodes Ready, rotating through machines: [(name, machine, topo)]."""
    topos = {m: topology(nrm, m) for m in machines[:count]}
    nodes = []
    for i in range(count):
        m = machines[i % len(machines)]
        nodes.append(("node-%04d" % i, m, topos[m]))
    items = []
    for name, m, t in nodes:
        cpus = len(cpulist(t["cpus"]["online"]))
        mem = sum(n.get("memoryBytes", 0) for n in t.get("numaNodes", [])) or 64 << 30
        items.append((name, cpus, mem))
    for i in range(0, len(items), 200):
        cluster.create_nodes(items[i:i + 200])
    return nodes


def gpu_root(work, nrm, machine, topo, gpus):
    """A fake sysfs tree with gpus GPUs spread over the machine's NUMA nodes
    (no recorded machine has ten GPUs a node; nrm reads PCI functions under
    --fsroot, tests/cluster/test-pci-api.py)."""
    root = os.path.join(work, "gpus-" + machine)
    if os.path.isdir(root):
        return root
    numa = [n["id"] for n in topo.get("numaNodes", [])] or [0]
    links = os.path.join(root, "sys/bus/pci/devices")
    os.makedirs(links)
    for i in range(gpus):
        bdf = "0000:%02x:00.0" % (0x41 + i)
        d = os.path.join(root, "sys/devices/pci0000:40/0000:40:01.0", bdf)
        os.makedirs(d)
        for f, v in (("vendor", "0x10de"), ("device", "0x1234"), ("class", "0x030200"),
                     ("numa_node", str(numa[i % len(numa)]))):
            with open(os.path.join(d, f), "w") as fh:
                fh.write(v + "\n")
        os.symlink(os.path.relpath(d, links), os.path.join(links, bdf))
    return root


def nrm_slices(nrm, node, machine, mode, drivers, fsroot=None):
    args = [nrm, "slices", "--node-name", node, "-t", os.path.join(TOPOLOGIES, machine), "--drivers", drivers,
            "--cpu-mode", mode]
    if fsroot:
        args += ["--fsroot", fsroot]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["items"]


def pool_slices(driver, node, devices, per_slice=128):
    """devices as one pool of slices of at most per_slice devices."""
    chunks = [devices[i:i + per_slice] for i in range(0, len(devices), per_slice)] or [[]]
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": "%s-%s-%d" % (node, driver.replace(".", "-"), i)},
             "spec": {"driver": driver, "nodeName": node,
                      "pool": {"name": node, "generation": 1, "resourceSliceCount": len(chunks)},
                      "devices": c}} for i, c in enumerate(chunks)]


def dracpu_slices(node, topo, mode):
    """dra-driver-cpu's slices for a machine, from its documented format
    (peers' sheet: individual = a device per CPU with cpuID, coreID, coreType,
    cacheL3ID, socketID, numaNode, smtEnabled; grouped = a device per NUMA
    node, allowMultipleAllocations, capacity dra.cpu/cpu), not its code."""
    def a(k, v):
        return {DRACPU + "/" + k: {"int" if isinstance(v, int) and not isinstance(v, bool) else
                                   "bool" if isinstance(v, bool) else "string": v}}
    devs = []
    if mode == "individual":
        for core in topo.get("cores", []):
            for cpu in sorted(cpulist(core["cpus"])):
                attrs = {}
                for k, v in (("cpuID", cpu), ("coreID", core["id"]), ("coreType", "standard"),
                             ("cacheL3ID", core.get("l3Cache") or 0), ("socketID", core.get("package") or 0),
                             ("numaNodeID", core.get("numaNode") or 0), ("smtEnabled", len(cpulist(core["cpus"])) > 1)):
                    attrs.update(a(k, v))
                attrs["resource.kubernetes.io/numaNode"] = {"int": core.get("numaNode") or 0}
                devs.append({"name": "cpudev%03d" % cpu, "attributes": attrs})
    else:
        for n in topo.get("numaNodes", []):
            cpus = len(cpulist(n.get("cpus", "")))
            attrs = a("numaNodeID", n["id"])
            attrs["resource.kubernetes.io/numaNode"] = {"int": n["id"]}
            devs.append({"name": "cpudevnuma%03d" % n["id"], "attributes": attrs, "allowMultipleAllocations": True,
                         "capacity": {DRACPU + "/cpu": {"value": str(cpus)}}})
    return pool_slices(DRACPU, node, devs)


def admin_publish(cluster, nodes, shape, nrm=None, work=None, gpus=10):
    """The default publisher: the node's slices become shape's, posted by the
    test's admin (every slice of the drivers it knows deleted first)."""
    for driver in ("cpu.nrm.io", "memory.nrm.io", "pci.nrm.io", TRIVIAL, DRACPU):
        cluster.api("DELETE", RES + "/resourceslices?fieldSelector=" + urllib.parse.quote("spec.driver=" + driver))
    wait_for(lambda: not cluster.slices(), 60, 0.5)
    posts = []
    for name, machine, topo in nodes:
        if shape == "none":
            break
        if shape == "trivial":
            posts += pool_slices(TRIVIAL, name, [{"name": "dev", "allowMultipleAllocations": True}])
        elif shape.startswith("dracpu-"):
            posts += dracpu_slices(name, topo, shape[len("dracpu-"):])
        elif shape == "nrm-numa":
            posts += nrm_slices(nrm, name, machine, "numa", "cpu,memory")
        elif shape == "nrm-partitioned":
            posts += nrm_slices(nrm, name, machine, "partitioned", "cpu,memory")
        elif shape == "nrm-numa-pci":
            posts += nrm_slices(nrm, name, machine, "numa", "cpu,memory,pci",
                                gpu_root(work, nrm, machine, topo, gpus))
        else:
            raise ValueError(shape)
    parallel(lambda s: expect(cluster.api("POST", RES + "/resourceslices", s), 201, s["metadata"]["name"]), posts)
    return len(posts)


def expect(result, code, what):
    if result[0] != code:
        raise RuntimeError("%s: %s %s" % (what, result[0], str(result[1])[:300]))
    return result[1]


def parallel(fn, items, threads=4):
    items = list(items)
    errs = []

    def work(k):
        for it in items[k::threads]:
            try:
                fn(it)
            except Exception as e:  # noqa: BLE001 -- reported after the join
                errs.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]


def install_classes(cluster):
    """nrm's manifest (its DeviceClasses) and the test drivers' classes."""
    cluster.install_nrm()
    for name, driver in ((TRIVIAL, TRIVIAL), (DRACPU, DRACPU)):
        cluster.api("POST", RES + "/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "%s"' % driver}}]}})
    cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # The ServiceAccount admission plugin refuses pods until the controller
    # has made the namespace's default ServiceAccount.
    if not wait_for(lambda: cluster.api("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % NS)[0] == 200, 60):
        raise RuntimeError("no default ServiceAccount in namespace %s" % NS)


# --- the claims ------------------------------------------------------------------------------
def claim_devices(case):
    """The devices part of the case's ResourceClaimTemplate, or None."""
    def req(name, cls, **more):
        return {"name": name, "exactly": dict({"deviceClassName": cls, "allocationMode": "ExactCount",
                                               "count": 1}, **more)}
    cap2 = {"requests": {"cpus": "2"}}
    if case == "a1":
        return {"requests": [req("dev", TRIVIAL)]}
    if case == "b":
        return {"requests": [req("cpus", "cpu.nrm.io", capacity=cap2)]}
    if case == "c":
        # docs/devices.md (e): whole cores by granularity; one core of 2 threads.
        core2 = ('"granularity" in device.attributes["cpu.nrm.io"] && '
                 'device.attributes["cpu.nrm.io"].granularity == "core" && '
                 'device.capacity["cpu.nrm.io"].cpus.compareTo(quantity("2")) == 0')
        return {"requests": [req("cpus", "cpu.nrm.io", selectors=[{"cel": {"expression": core2}}])]}
    if case == "d-individual":
        return {"requests": [req("cpus", DRACPU, count=2)]}
    if case == "d-grouped":
        return {"requests": [req("cpus", DRACPU, capacity={"requests": {DRACPU + "/cpu": "2"}})]}
    if case == "e":
        return {"requests": [req("gpu", "gpu.nrm.io"), req("cpus", "cpu.nrm.io", capacity=cap2),
                             req("mem", "memory.nrm.io", capacity={"requests": {"memory": "1Gi"}})],
                "constraints": [{"requests": ["gpu", "cpus", "mem"],
                                 "matchAttribute": "resource.kubernetes.io/numaNode"}]}
    return None


def pod(case, i):
    spec = {"containers": [{"name": "c", "image": "none", "resources": {"requests": TWO, "limits": TWO}}],
            "terminationGracePeriodSeconds": 0}
    if claim_devices(case):
        spec["resourceClaims"] = [{"name": "c", "resourceClaimTemplateName": "t-" + case}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "c"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%s-%05d" % (case, i), "namespace": NS,
                                                            "labels": {"bench": case}}, "spec": spec}


# --- the scheduler's metrics -----------------------------------------------------------------
class Scheduler:
    """The scheduler's secure port, reached with the admin's certificate
    (system:masters passes its delegated authorization)."""

    def __init__(self, cluster):
        self.port = int(cluster.env["SCHEDULER_PORT"])
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # Its serving certificate is self-signed, made at start.
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE
        pki = os.path.join(cluster.dir, "pki")
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def get(self, path, timeout=60):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        if r.status != 200:
            raise RuntimeError("scheduler %s: %s %s" % (path, r.status, body[:200]))
        return body

    def metrics(self):
        """{(name, frozenset(labels without le)) or le...: value} summed:
        histograms as {name: {le: count}}, counters as {(name, label): v}."""
        hist, count = {}, {}
        for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", self.get("/metrics").decode(), re.M):
            name, labels, v = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")), float(m.group(3))
            if name.endswith("_bucket"):
                h = hist.setdefault(name[:-len("_bucket")], {})
                le = float(labels["le"])
                h[le] = h.get(le, 0) + v
            elif name == "scheduler_schedule_attempts_total":
                count[labels.get("result")] = count.get(labels.get("result"), 0) + v
        return hist, count


def quantile(before, after, q):
    """q of the histogram's increase, interpolated linearly in its bucket."""
    les = sorted(after)
    delta = [after[le] - before.get(le, 0) for le in les]
    total = delta[-1] if delta else 0
    if total <= 0:
        return None
    want, lo, prev = q * total, 0.0, 0.0
    for le, c in zip(les, delta):
        if c >= want:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((want - prev) / (c - prev) if c > prev else 1.0)
        lo, prev = le, c
    return lo


def bucket_of(hist, v):
    les = sorted(hist)
    for lo, hi in zip([0.0] + les, les):
        if v is not None and v <= hi:
            return "%g-%g s" % (lo, hi)
    return "?"


# --- creating, watching, deleting ------------------------------------------------------------
class Conn:
    """One kept-alive HTTPS connection as the admin."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.c = None

    def request(self, method, path, body=None):
        for attempt in range(3):
            try:
                if self.c is None:
                    self.c = http.client.HTTPSConnection("127.0.0.1", self.cluster.port, context=self.cluster.ssl,
                                                         timeout=60)
                data = json.dumps(body) if body is not None else None
                self.c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
                r = self.c.getresponse()
                raw = r.read()
                return r.status, raw
            except (OSError, http.client.HTTPException):
                self.c = None
                if attempt == 2:
                    raise


class Watch(threading.Thread):
    """The time each pod of the case was first seen bound (spec.nodeName set)
    on a watch of the namespace's pods."""

    def __init__(self, cluster, case, rv):
        super().__init__(daemon=True)
        self.cluster, self.case, self.rv = cluster, case, rv
        self.bound = {}
        self.stop = False

    def run(self):
        rv = self.rv
        while not self.stop:
            c = http.client.HTTPSConnection("127.0.0.1", self.cluster.port, context=self.cluster.ssl, timeout=5)
            try:
                c.request("GET", "/api/v1/namespaces/%s/pods?watch=1&labelSelector=bench%%3D%s&resourceVersion=%s"
                          "&allowWatchBookmarks=true&timeoutSeconds=600" % (NS, self.case, rv))
                r = c.getresponse()
                while not self.stop:
                    line = r.readline()
                    if not line:
                        break
                    now = time.time()
                    ev = json.loads(line)
                    o = ev["object"]
                    rv = o["metadata"].get("resourceVersion", rv)
                    if ev["type"] in ("ADDED", "MODIFIED") and o.get("spec", {}).get("nodeName"):
                        self.bound.setdefault(o["metadata"]["name"], now)
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                c.close()


def create_pods(cluster, pods, rate, threads=4):
    """pods created at rate per second (0: as fast as threads can); returns
    (first create's start, last create's end, errors)."""
    t0 = time.time()
    errors = []
    ends = []

    def work(k):
        conn = Conn(cluster)
        for i in range(k, len(pods), threads):
            if rate:
                delay = t0 + i / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
            s, body = conn.request("POST", "/api/v1/namespaces/%s/pods" % NS, pods[i])
            if s != 201:
                errors.append("%s: %s" % (s, body[:200]))
        ends.append(time.time())
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return t0, max(ends), errors


def count(cluster, path):
    s, body = cluster.api("GET", path + ("&" if "?" in path else "?") + "limit=500")
    return len(body.get("items", [])) if s == 200 else -1


def clean(cluster, timeout=300):
    """Pods force-deleted (twice: with no kubelet the first DELETE of a bound
    pod only marks it), then the claims; until the server holds none."""
    t0 = time.time()
    pods = "/api/v1/namespaces/%s/pods" % NS
    claims = RES + "/namespaces/%s/resourceclaims" % NS
    while time.time() - t0 < timeout:
        cluster.api("DELETE", pods + "?gracePeriodSeconds=0")
        if count(cluster, pods) == 0:
            break
        time.sleep(0.5)
    while time.time() - t0 < timeout:
        if count(cluster, claims) == 0:
            return time.time() - t0
        # The resourceclaim controller drops the reservation and the
        # finalizer once the pods are gone; a claim it has not reached yet
        # stays marked for deletion.
        cluster.api("DELETE", claims)
        time.sleep(0.5)
    raise RuntimeError("pods or claims still on the server after %d s: pods %d, claims %d"
                       % (timeout, count(cluster, pods), count(cluster, claims)))


def audit_ts(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def audit_stages(cluster, offset, t0, case):
    """Where the pods' time went, from the API server's audit log (written
    from offset on): per stage its count, its span's rate and the median
    per pod from the pod's create, for the case's pods: the admin creates
    the pod, the resourceclaim controller creates its claim and writes the
    pod's resourceClaimStatuses (the scheduler waits for both), the
    scheduler writes the claim's allocation and binds the pod."""
    stages = {"pod create": [], "claim create": [], "pod claim status": {}, "claim allocation": {}, "bind": {}}
    prefix = "p-%s-" % case
    with open(os.path.join(cluster.dir, "audit.log")) as fh:
        fh.seek(offset)
        for line in fh:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            o = e.get("objectRef", {})
            if e.get("stage") != "ResponseComplete" or o.get("namespace") != NS or e["responseStatus"]["code"] >= 300:
                continue
            res, sub, name, verb = o.get("resource"), o.get("subresource"), o.get("name", ""), e["verb"]
            t = audit_ts(e["stageTimestamp"])
            if res == "pods" and verb == "create" and not sub:
                stages["pod create"].append(t)
            elif res == "resourceclaims" and verb == "create":
                stages["claim create"].append(t)
            elif not name.startswith(prefix):
                continue
            elif res == "pods" and sub == "status" and "resource-claim" in e["user"]["username"]:
                stages["pod claim status"].setdefault(name, t)
            elif res == "resourceclaims" and sub == "status" and e["user"]["username"] == "system:kube-scheduler":
                stages["claim allocation"].setdefault(name[:len(prefix) + 5], t)
            elif res == "pods" and sub == "binding":
                stages["bind"].setdefault(name, t)
    # A pod's create names it in the body only: the n-th create is taken
    # for pod n (4 threads create them in turn: near enough).
    created = sorted(stages["pod create"])
    stages["pod create"] = {prefix + "%05d" % i: t for i, t in enumerate(created)}
    out = {}
    for k, v in stages.items():
        ts = sorted(v if isinstance(v, list) else v.values())
        if not ts:
            continue
        st = {"count": len(ts), "first_s": ts[0] - t0, "last_s": ts[-1] - t0,
              "rate": (len(ts) - 1) / (ts[-1] - ts[0]) if ts[-1] > ts[0] else None}
        if isinstance(v, dict) and k != "pod create":
            lag = sorted(t - stages["pod create"][n] for n, t in v.items() if n in stages["pod create"])
            if lag:
                st["from_create_p50_s"] = lag[len(lag) // 2]
                st["from_create_p99_s"] = lag[min(len(lag) - 1, int(len(lag) * 0.99))]
        out[k] = st
    return out


def cpu_s(pid):
    """User and system CPU seconds of a process so far (/proc), or None."""
    try:
        with open("/proc/%s/stat" % pid) as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, TypeError, IndexError):
        return None


def run_case(cluster, case, nodes, rate, pods_per_node=10, timeout=600, stall=30, profile=None, profile_s=10):
    """One case: its template, P pods created at rate (0: as fast as the
    client can), until every pod is bound, or none was for stall seconds
    after the last create, or timeout; the scheduler's figures. profile: a
    path for a CPU profile of the scheduler over profile_s seconds from the
    first create (pprof), or None. Leaves the server clean."""
    sched = Scheduler(cluster)
    p = pods_per_node * len(nodes)
    devices = claim_devices(case)
    if devices:
        cluster.api("DELETE", RES + "/namespaces/%s/resourceclaimtemplates/t-%s" % (NS, case))
        expect(cluster.api("POST", RES + "/namespaces/%s/resourceclaimtemplates" % NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t-" + case, "namespace": NS}, "spec": {"spec": {"devices": devices}}}), 201,
            "template " + case)
    pods = [pod(case, i) for i in range(p)]
    s, lst = cluster.api("GET", "/api/v1/namespaces/%s/pods?limit=1" % NS)
    watch = Watch(cluster, case, lst["metadata"]["resourceVersion"])
    watch.start()
    hist0, att0 = sched.metrics()
    cpu0 = cpu_s(cluster.env.get("SCHEDULER_PID"))
    audit_at = os.path.getsize(os.path.join(cluster.dir, "audit.log"))
    prof = None
    if profile:
        secs = max(5, int(profile_s))

        def take():
            with open(profile, "wb") as fh:
                fh.write(sched.get("/debug/pprof/profile?seconds=%d" % secs, timeout=secs + 60))
        prof = threading.Thread(target=take)
        prof.start()
    t0, t_created, errors = create_pods(cluster, pods, rate)
    last = [len(watch.bound), time.time()]

    def over():
        n = len(watch.bound)
        if n != last[0]:
            last[:] = [n, time.time()]
        return n >= p or time.time() - last[1] > stall
    wait_for(over, timeout, 0.2)
    done = len(watch.bound) >= p
    t_end = time.time()
    hist1, att1 = sched.metrics()
    cpu1 = cpu_s(cluster.env.get("SCHEDULER_PID"))
    watch.stop = True
    if prof:
        prof.join()
    bound = sorted(watch.bound.values())
    sli = "scheduler_pod_scheduling_sli_duration_seconds"
    att = "scheduler_scheduling_attempt_duration_seconds"
    out = {"case": case, "pods": p, "rate": rate, "bound": len(bound), "all_bound": bool(done),
           "create_errors": len(errors), "first_error": errors[0] if errors else None,
           "create_s": t_created - t0, "span_s": (bound[-1] - t0) if bound else None,
           "pods_per_s": len(bound) / (bound[-1] - t0) if bound else 0.0,
           "sli_p50_s": quantile(hist0.get(sli, {}), hist1.get(sli, {}), 0.5),
           "sli_p99_s": quantile(hist0.get(sli, {}), hist1.get(sli, {}), 0.99),
           "attempt_p50_s": quantile(hist0.get(att, {}), hist1.get(att, {}), 0.5),
           "attempt_p99_s": quantile(hist0.get(att, {}), hist1.get(att, {}), 0.99),
           "attempts": {k: att1.get(k, 0) - att0.get(k, 0) for k in att1},
           "case_s": t_end - t0,
           # The scheduler's own work per pod, which the shared claim pipeline does not hide.
           "sched_cpu_ms_per_pod": (cpu1 - cpu0) * 1e3 / max(1, len(bound)) if cpu0 is not None else None}
    out["sli_p99_bucket"] = bucket_of(hist1.get(sli, {}), out["sli_p99_s"])
    # The audit log is written in batches at least every second.
    time.sleep(2)
    out["stages"] = audit_stages(cluster, audit_at, t0, case)
    if not done:
        s, lst = cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=bench%%3D%s&limit=1&fieldSelector=%s"
                             % (NS, case, urllib.parse.quote("spec.nodeName=")))
        for it in lst.get("items", []):
            cond = [c for c in it.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
            out["pending_reason"] = cond[0].get("message") if cond else "no PodScheduled condition"
    out["clean_s"] = clean(cluster)
    return out


# --- the bench -------------------------------------------------------------------------------
def spread(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}


def fmt(s, scale=1.0, unit=""):
    if not s:
        return "-"
    return "%.3g/%.3g/%.3g%s" % (s["min"] * scale, s["median"] * scale, s["max"] * scale, unit)


# (case, against, factor, what): "within" f: pods/s at least 1/f of the
# other's and SLI p99 at most f times it; "better" f: pods/s f times the
# other's and p99 1/f of it. Each judged on both figures, runs' medians.
GOALS = [("b", "a1", 1.5, "within"), ("b", "d-individual", 3.0, "better"), ("b", "d-grouped", 1.1, "within"),
         ("e", "b", 2.0, "within")]


def goals(summary):
    """(text, met) for each goal whose cases ran."""
    def med(case, key):
        s = summary.get(case, {}).get(key)
        return s["median"] if s else None
    out = []
    for case, other, f, what in GOALS:
        if case not in summary or other not in summary:
            continue
        for key, name, higher in (("pods_per_s", "pods/s", True), ("sli_p99_s", "SLI p99", False)):
            x, y = med(case, key), med(other, key)
            limit = (1 / f if what == "within" else f) if higher else (f if what == "within" else 1 / f)
            text = "(%s) %s %s %gx of (%s)" % (case, name, what, f, other)
            if not x or not y:
                out.append((text + ": not measured", False))
                continue
            r = x / y
            out.append(("%s: %.2fx (goal %s %.2fx)" % (text, r, ">=" if higher else "<=", limit),
                        r >= limit if higher else r <= limit))
    return out


def pprof_top(path, count=20):
    """go tool pprof -top: by own time, then by cumulative time (which
    names the plugin and the allocator's step that the time is spent in)."""
    out = ""
    for more in ([], ["-cum"]):
        p = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=%d" % count] + more + [path],
                           capture_output=True, text=True)
        out += (p.stdout if p.returncode == 0 else p.stderr) + "\n"
    return out


def main(argv=None, publish=None):
    """The bench. publish(cluster, nodes, shape, nrm, work, gpus) puts
    shape's slices (SHAPE's values) on nodes ([(name, machine, topology)])
    and returns how many it made; admin_publish unless given (a publisher
    that runs nrm's own plugins plugs in here)."""
    publish = publish or admin_publish
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nrm")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rate", type=float, default=0, help="pods/s to create at (0: measure case (a) first)")
    ap.add_argument("--api-qps", type=int, default=500,
                    help="the scheduler's and controller-manager's client QPS (0: their defaults)")
    ap.add_argument("--json")
    ap.add_argument("--case-timeout", type=float, default=600,
                    help="seconds a run of a case may take before its unbound pods count as failed")
    ap.add_argument("--profile-dir", help="where the pprof profiles go (default: the work folder)")
    ap.add_argument("--profile-max", type=float, default=30,
                    help="seconds of the scheduler's profile at most, the case stopped after it (0: no profiles)")
    ap.add_argument("--profile", default="", help="cases to profile even where no goal is missed (comma-separated)")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error("unknown case %s" % c)
    clusterlib.NRM = a.nrm = os.path.abspath(a.nrm)
    if not os.access(a.nrm, os.X_OK):
        skip("build nrm first")
    bindir = binaries()
    work = workdir()
    t_start = time.time()
    qps = (["--kube-api-qps=%d" % a.api_qps, "--kube-api-burst=%d" % (2 * a.api_qps)] if a.api_qps else [])
    t = time.time()
    cluster = Cluster(work, "sched", bindir, scheduler_args=qps, controller_manager_args=qps)
    install_classes(cluster)
    nodes = make_nodes(cluster, a.nrm, a.nodes)
    print("# %d nodes (%s), %d pods a case, set up in %.1f s" % (
        len(nodes), ", ".join(sorted({m[:-4] for _, m, _ in nodes})), a.nodes * a.pods_per_node, time.time() - t))
    published = [None]
    results = {c: [] for c in cases}
    durations = {}

    def prepare(case):
        if published[0] != SHAPE[case]:
            t = time.time()
            n = publish(cluster, nodes, SHAPE[case], a.nrm, work, a.pods_per_node)
            published[0] = SHAPE[case]
            print("# slices for %s: %d, posted in %.1f s" % (SHAPE[case], n, time.time() - t), flush=True)

    rate = a.rate
    if not rate:
        prepare("a")
        r = run_case(cluster, "a", nodes, 0, a.pods_per_node)
        rate = r["pods_per_s"]
        print("# R: case (a) with pods created as fast as 4 threads can (%.1f s to create %d): %.1f pods/s bound; "
              "SLI p99 %s" % (r["create_s"], r["pods"], rate, r["sli_p99_s"]), flush=True)
    for case in cases:
        t = time.time()
        prepare(case)
        for run in range(a.runs):
            r = run_case(cluster, case, nodes, rate, a.pods_per_node, timeout=a.case_timeout)
            results[case].append(r)
            print("%-13s run %d: %4d/%d bound, created at %.0f/s, %6.1f pods/s, SLI p50 %s p99 %s (p99 in %s), "
                  "attempt p50 %s, scheduler CPU %s a pod, attempts %s, %.1f s + clean %.1f s%s%s" % (
                      case, run + 1, r["bound"], r["pods"], r["pods"] / max(r["create_s"], 1e-3), r["pods_per_s"],
                      ms(r["sli_p50_s"]), ms(r["sli_p99_s"]), r["sli_p99_bucket"], ms(r["attempt_p50_s"]),
                      "-" if r["sched_cpu_ms_per_pod"] is None else "%.1f ms" % r["sched_cpu_ms_per_pod"],
                      ",".join("%s=%d" % kv for kv in sorted(r["attempts"].items())), r["case_s"], r["clean_s"],
                      ", %d create errors: %s" % (r["create_errors"], r["first_error"]) if r["create_errors"] else "",
                      ", pending: %s" % r.get("pending_reason") if not r["all_bound"] else ""), flush=True)
            print("              " + "; ".join(
                "%s %d, %s/s%s" % (k, st["count"], "%.0f" % st["rate"] if st["rate"] else "-",
                                   ", %s after create (p50)" % ms(st["from_create_p50_s"])
                                   if "from_create_p50_s" in st else "")
                for k, st in r["stages"].items()), flush=True)
        durations[case] = time.time() - t
    summary = {c: {k: spread([r.get(k) for r in rs])
                   for k in ("pods_per_s", "sli_p50_s", "sli_p99_s", "sched_cpu_ms_per_pod")}
               for c, rs in results.items() if rs}
    print("\n# R = %.1f pods/s; min/median/max over %d runs; SLI buckets double from 10 ms (p50/p99 interpolated "
          "within one)" % (rate, a.runs))
    print("%-13s %-22s %-26s %-26s %-9s %s" % ("case", "pods/s", "SLI p50 ms", "SLI p99 ms", "vs (a)", "case s"))
    base = summary.get("a", {}).get("pods_per_s")
    for c, s in summary.items():
        rel = "%.2fx" % (s["pods_per_s"]["median"] / base["median"]) if base and s["pods_per_s"] else "-"
        print("%-13s %-22s %-26s %-26s %-9s %.0f" % (
            c, fmt(s["pods_per_s"]), fmt(s["sli_p50_s"], 1e3), fmt(s["sli_p99_s"], 1e3), rel, durations[c]))
    cpu = {c: v["sched_cpu_ms_per_pod"]["median"] for c, v in summary.items() if v.get("sched_cpu_ms_per_pod")}
    print("# the scheduler's CPU per pod bound (ms, /proc): " + ", ".join("%s %.1f" % kv for kv in cpu.items()))
    if cpu.get("b") and cpu.get("d-individual"):
        print("# (d-individual) costs the scheduler %.2fx the CPU of (b) per pod (reported, no goal)"
              % (cpu["d-individual"] / cpu["b"]))
    print("# whole bench %.0f s; load average %s (the control plane, the client and whatever else runs share "
          "this machine's %d CPUs)" % (time.time() - t_start, " ".join(open("/proc/loadavg").read().split()[:3]),
                                       os.cpu_count()))
    gl = goals(summary)
    unbound = [c for c, rs in results.items() if any(not r["all_bound"] or r["create_errors"] for r in rs)]
    for text, met in gl:
        print("%-60s %s" % (text, "met" if met else "NOT MET"))
    if unbound:
        print("cases with pods left unbound or refused: %s NOT MET" % ",".join(unbound))
    prof = {}
    missed = {re.match(r"\((\S+)\)", text).group(1) for text, met in gl if not met}
    missed |= {c for c in a.profile.split(",") if c}
    if a.profile_dir:
        os.makedirs(a.profile_dir, exist_ok=True)
    for case in sorted(missed & set(cases)) if a.profile_max > 0 else ():
        prepare(case)
        path = os.path.join(a.profile_dir or work, "sched-%s.pprof" % case)
        secs = min(a.profile_max, a.nodes * a.pods_per_node / max(summary[case]["pods_per_s"]["median"], 1.0) + 2)
        run_case(cluster, case, nodes, rate, a.pods_per_node, timeout=secs + 30, profile=path, profile_s=secs)
        prof[case] = pprof_top(path)
        print("\n# scheduler CPU profile during case (%s) (%s):\n%s" % (case, path, prof[case]))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"nodes": a.nodes, "pods_per_node": a.pods_per_node, "rate": rate, "version": cluster.version,
                       "api_qps": a.api_qps, "machines": sorted({m for _, m, _ in nodes}), "runs": results,
                       "summary": summary, "durations_s": durations,
                       "goals": [{"goal": t, "met": m} for t, m in gl], "profiles": prof}, fh, indent=1)
    cluster.stop()
    if a.profile_dir or not prof:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if unbound or not all(m for _, m in gl) else 0


def ms(v):
    return "-" if v is None else "%.0f ms" % (v * 1e3)


if __name__ == "__main__":
    sys.exit(main())
