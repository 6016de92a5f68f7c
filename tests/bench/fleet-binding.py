#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Binding conditions at fleet scale: what nrm costs the real control plane.

N Nodes, each with a real `nrm plugin` (the CPU and memory drivers, its
identity a token of nrm's DaemonSet ServiceAccount bound to the DaemonSet's
pod on its Node); one real `nrm controller` (nrm.yaml's nrm-controller
ServiceAccount, its token bound to the Deployment's pod); the real
kube-scheduler and kube-controller-manager (tests/cluster/control-plane.sh).
M pods are created, each with a claim from a ResourceClaimTemplate (the
real resourceclaim controller makes the claims, the real scheduler
allocates them):

  plain    (1 - F of them) a CPU and a memory request: no binding condition,
           so nrm should write nothing for them;
  binding  (F of them) 2 MiB huge pages on demand, whose device carries the
           binding condition memory.nrm.io/hugepages-ready: the scheduler holds
           the pod in PreBind, nrm controller labels the claim with its node,
           the node's binder raises the pool and writes the condition
           (resourceclaims/status), and the scheduler binds the pod.

Huge pages on demand need a sysfs to raise them in, which a recorded machine
has not: the F*N nodes that take the binding pods (a node label and the
pods' nodeSelector) run their plugin over a fake --fsroot tree (nr_hugepages
and meminfo files on a 2-NUMA-node recorded machine, as
tests/cluster/test-binding.py builds it; the one stand-in here). The other
nodes rotate through the recorded machines of tests/topologies. There is no
kubelet: nothing prepares a claim, bound pods stay Pending, and the deletion
at the end is a DELETE with gracePeriodSeconds=0, twice (the second stands
for the kubelet's last call).

Measured: the time until every pod is bound; for each binding pod, from its
creation (the create's answer) to its binding (the scheduler's pods/binding
in the audit log), p50 and p99, beside the plain pods'; every request of nrm
from the audit log (users nrm-controller and nrm; a binder's node is the
node-name its pod-bound token carries), writes per claim of each kind; the
ResourceClaim watch events and bytes the API server sent (its /metrics),
the binders' share derived from them (below), and the bytes each plugin
read (/proc/PID/io); the CPU seconds of kube-apiserver, etcd, the scheduler,
the controller-manager and nrm (/proc); the plugins' RSS. Then the same for
the deletion of the pods and their claims.

Exits 77 where the upstream binaries cannot be built (tests/cluster/build.sh).

  fleet-binding.py [--nodes N] [--claims M] [--binding-fraction F] [--json]"""

import argparse
import glob
import http.client
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import NAMESPACE, Cluster, NrmPlugin, binaries, human, on_demand_tree, skip, wait_for  # noqa: E402

TOPOLOGIES = os.path.join(HERE, "..", "topologies")
# The binding nodes' machine: two NUMA nodes, which the fake tree gives huge page pools and meminfo.
BINDING_TOPOLOGY = "24em64t-2n6c2t-pci.xml"
DRIVER = "memory.nrm.io"
READY = DRIVER + "/hugepages-ready"
ON_DEMAND_LABEL = "nrm-bench/hugepages-on-demand"
CONTROLLER_USER = "system:serviceaccount:%s:nrm-controller" % NAMESPACE
BINDER_USER = "system:serviceaccount:%s:nrm" % NAMESPACE
NODE_EXTRA = "authentication.kubernetes.io/node-name"
BIND_NS = "fb-bind"
PLAIN_NS = ["fb-plain-%d" % i for i in range(4)]
WRITES = ("create", "update", "patch", "delete", "deletecollection")
CREATORS = 4  # threads creating the pods, one connection each
EMPTY_WATCHES = 10
PAGES_MI = 16  # each binding claim's huge pages
ON_DEMAND_MI = 512  # per NUMA node of a binding node: room for 32 claims each


def node_name(i):
    return "fb-node-%03d" % i


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / float(os.sysconf("SC_CLK_TCK"))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def socket_bytes(port):
    """{(pid, local port): bytes received} of every TCP connection to the API server's port, from the kernel's
    tcp_info (ss): TLS bytes as they came over the wire."""
    p = subprocess.run(["ss", "-tinpH", "state", "established", "( dport = :%d )" % port], capture_output=True,
                       text=True)
    out, key = {}, None
    for line in p.stdout.splitlines():
        m = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:%d\b.*pid=(\d+)" % port, line)
        if m:
            key = (int(m.group(2)), int(m.group(1)))
            continue
        m = re.search(r"bytes_received:(\d+)", line)
        if key and m:
            out[key] = int(m.group(1))
        key = None
    return out


def pct(xs, p):
    """Nearest-rank percentile; None for no values."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1))]


def utc(ts):
    """An audit timestamp (RFC 3339, microseconds) as seconds since the epoch."""
    import calendar
    base, _, frac = ts.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + (float("0." + frac) if frac else 0.0)


class Conn:
    """The admin's own keep-alive connection (Cluster.api opens one per request, which at 2000 pods
    would be the server's busiest work)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.c = None

    def api(self, method, path, body=None, ctype="application/json"):
        for attempt in range(3):
            try:
                if self.c is None:
                    self.c = http.client.HTTPSConnection("127.0.0.1", self.cluster.port, context=self.cluster.ssl,
                                                         timeout=120)
                data = json.dumps(body) if body is not None else None
                self.c.request(method, path, body=data, headers={"Content-Type": ctype} if data else {})
                r = self.c.getresponse()
                raw = r.read()
                try:
                    return r.status, json.loads(raw)
                except ValueError:
                    return r.status, raw.decode(errors="replace")
            except (OSError, http.client.HTTPException):
                self.c = None
                if attempt == 2:
                    raise
        return None, None


class AuditTail:
    """The audit log read as it grows: the completed requests, each kept small."""

    def __init__(self, path):
        self.path, self.pos, self.events, self.partial = path, 0, [], b""

    def poll(self):
        with open(self.path, "rb") as fh:
            fh.seek(self.pos)
            data = fh.read()
        self.pos += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("stage") != "ResponseComplete":
                continue
            o = e.get("objectRef") or {}
            u = e.get("user") or {}
            self.events.append({
                "user": u.get("username", ""), "node": ((u.get("extra") or {}).get(NODE_EXTRA) or [None])[0],
                "verb": e.get("verb"), "resource": o.get("resource"), "sub": o.get("subresource"),
                "ns": o.get("namespace"), "name": o.get("name"), "code": (e.get("responseStatus") or {}).get("code"),
                "t": utc(e["stageTimestamp"]), "t0": utc(e["requestReceivedTimestamp"]),
                "uri": e.get("requestURI", "")})
        return self.events

    def between(self, t0, t1):
        return [e for e in self.events if t0 <= e["t0"] < t1]


class ClaimWatch:
    """One cluster-wide ResourceClaim watch of the admin, counted: the events one watcher of every claim
    receives, which the API server's own counters (all watchers together) are divided by. With a selector
    that matches no claim: the bookmarks alone that a binder's watch gets."""

    def __init__(self, cluster, selector=None):
        self.cluster, self.events, self.bytes, self.bookmarks = cluster, 0, 0, 0
        self.stop_ = False
        s, lst = cluster.api("GET", "/apis/resource.k8s.io/v1/resourceclaims?limit=1")
        self.conn = http.client.HTTPSConnection("127.0.0.1", cluster.port, context=cluster.ssl, timeout=None)
        self.conn.request("GET", "/apis/resource.k8s.io/v1/resourceclaims?watch=1&allowWatchBookmarks=true&"
                          "timeoutSeconds=3600&resourceVersion=" + lst["metadata"]["resourceVersion"]
                          + ("&labelSelector=" + urllib.parse.quote(selector) if selector else ""))
        self.resp = self.conn.getresponse()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        try:
            while not self.stop_:
                line = self.resp.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                if json.loads(line).get("type") == "BOOKMARK":
                    self.bookmarks += 1
                else:
                    self.events += 1
                    self.bytes += len(line)
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            return  # closed by close()

    def close(self):
        self.stop_ = True
        try:
            self.conn.sock.shutdown(2)
        except (OSError, AttributeError):
            pass
        self.thread.join(5)
        self.conn.close()


def watch_metrics(cluster):
    """The API server's ResourceClaim watch counters, all watchers together: (events sent, bytes sent)."""
    s, text = cluster.api("GET", "/metrics")
    ev = by = 0.0
    for line in (text if isinstance(text, str) else "").splitlines():
        name, _, val = line.rpartition(" ")
        if 'resource="resourceclaims"' not in name:
            continue
        if name.startswith("apiserver_watch_events_total{"):
            ev += float(val)
        elif name.startswith("apiserver_watch_events_sizes_sum{"):
            by += float(val)
    return ev, by


def templates(ns, binding):
    if binding:
        reqs = [{"name": "hp", "exactly": {"deviceClassName": "hugepages-2mi.memory.nrm.io",
                                           "capacity": {"requests": {"hugepages": "%dMi" % PAGES_MI}}}}]
    else:
        reqs = [{"name": "cpus", "exactly": {"deviceClassName": "cpu.nrm.io", "allocationMode": "ExactCount",
                                             "count": 1, "capacity": {"requests": {"cpus": "1"}}}},
                {"name": "mem", "exactly": {"deviceClassName": "memory.nrm.io", "allocationMode": "ExactCount",
                                            "count": 1, "capacity": {"requests": {"memory": "64Mi"}}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "claim", "namespace": ns}, "spec": {"spec": {"devices": {"requests": reqs}}}}


def pod(ns, name, binding):
    spec = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "claim"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}
    if binding:
        spec["nodeSelector"] = {ON_DEMAND_LABEL: "true"}
        q = {"hugepages-2Mi": "%dMi" % PAGES_MI, "memory": "16Mi"}
        spec["containers"][0]["resources"].update(requests=q, limits=q)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def classify(e):
    if e["verb"] in WRITES:
        return "write"
    if e["verb"] == "watch":
        return "watch"
    if e["verb"] == "list":
        return "list"
    return "get" if e["verb"] == "get" else e["verb"]


def nrm_requests(events, node_set):
    """nrm's requests among audit events: {"controller": {kind: n}, "binders": {node: {kind: n}},
    "writes": [events]}."""
    ctl, binders, writes = {}, {}, []
    for e in events:
        if e["user"] == CONTROLLER_USER:
            k = classify(e)
            ctl[k] = ctl.get(k, 0) + 1
        elif e["user"] == BINDER_USER and e["node"] in node_set:
            k = classify(e)
            binders.setdefault(e["node"], {})
            binders[e["node"]][k] = binders[e["node"]].get(k, 0) + 1
        else:
            continue
        if e["verb"] in WRITES:
            writes.append(e)
    return {"controller": ctl, "binders": binders, "writes": writes}


def write_kinds(writes):
    out = {}
    for e in writes:
        who = "controller" if e["user"] == CONTROLLER_USER else "binder"
        k = "%s %s %s%s" % (who, e["verb"], e["resource"], "/" + e["sub"] if e["sub"] else "")
        out[k] = out.get(k, 0) + 1
    return out


def run(cluster=None, nodes=200, claims=2000, binding_fraction=0.06, rest_s=20.0, timeout=None, work=None,
        log=None):
    """Runs the bench on cluster (a clusterlib.Cluster with nrm.yaml applied), or on a control plane of its own
    when None (stopped at the end). Returns a dict of figures; "goals" lists (what, met, figure)."""
    log = log or (lambda text: print(text, flush=True))
    own = cluster is None
    work = work or tempfile.mkdtemp(prefix="nrm-fb-")
    plugins, ctl, cw, empty = [], None, None, []
    n_bind_nodes = max(1, int(round(nodes * binding_fraction))) if binding_fraction > 0 else 0
    n_bind = int(round(claims * binding_fraction))
    timeout = timeout or 300 + claims * 0.5
    out = {"nodes": nodes, "claims": claims, "binding_fraction": binding_fraction, "binding_claims": n_bind,
           "binding_nodes": n_bind_nodes, "cpus_here": os.cpu_count()}
    try:
        t_up = time.monotonic()
        if own:
            cluster = Cluster(work, "fleetbind", binaries())
            cluster.install_nrm()
        out["kubernetes"] = cluster.version
        env = {}
        with open(os.path.join(cluster.dir, "env")) as fh:
            for line in fh:
                k, _, v = line.strip().partition("=")
                env[k] = v
        pids = {k: int(env[k.upper() + "_PID"]) for k in ("apiserver", "etcd", "scheduler", "controller_manager")}
        names = [node_name(i) for i in range(nodes)]
        bind_nodes = names[:n_bind_nodes]
        cluster.create_nodes([(n, 64, 256 << 30, {"hugepages-2Mi": "1Gi"} if n in bind_nodes else {})
                              for n in names])
        for n in bind_nodes:
            cluster.api("PATCH", "/api/v1/nodes/" + n, {"metadata": {"labels": {ON_DEMAND_LABEL: "true"}}},
                        content_type="application/merge-patch+json")

        def ds_pods():
            s, lst = cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=%s"
                                 % (NAMESPACE, urllib.parse.quote("app.kubernetes.io/name=nrm")))
            return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in (lst.get("items", []) if s == 200 else [])
                    if p["spec"].get("nodeName") in set(names)
                    and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}
        if not wait_for(lambda: len(ds_pods()) == nodes, 120 + nodes, 1.0):
            raise RuntimeError("the DaemonSet controller made %d of %d pods" % (len(ds_pods()), nodes))
        for ns in [BIND_NS] + PLAIN_NS:
            cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": ns}})
            s, body = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % ns,
                                  templates(ns, ns == BIND_NS))
            if s != 201:
                raise RuntimeError("template in %s: %s %s" % (ns, s, body))

        # Calibration: how many watchers of every claim the control plane has (the scheduler, the
        # controller-manager's informers, this bench's own watch), from one claim made and deleted.
        cw = ClaimWatch(cluster)
        # The server sends each watch a bookmark about once a minute, its own moment: the mean of several
        # watches that see no claim stands for a binder's bookmarks.
        empty = [ClaimWatch(cluster, "nrm.io/node=fb-none-%d" % i) for i in range(EMPTY_WATCHES)]
        time.sleep(1)
        m0 = watch_metrics(cluster)
        e0, b0 = cw.events, cw.bytes
        s, _ = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % BIND_NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "calibration"},
            "spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "cpu.nrm.io"}}]}}})
        cluster.api("DELETE", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/calibration" % BIND_NS)
        wait_for(lambda: cw.events - e0 >= 2, 10, 0.1)
        time.sleep(1.5)
        m1 = watch_metrics(cluster)
        full_watchers = (m1[0] - m0[0]) / max(1, cw.events - e0)
        # Some watch metadata only (the garbage collector's): in bytes they weigh less than a whole watcher.
        full_bytes = (m1[1] - m0[1]) / max(1, cw.bytes - b0)
        out["claim_watchers_before_nrm"] = full_watchers
        out["claim_watchers_before_nrm_bytes"] = full_bytes

        topos = sorted(glob.glob(os.path.join(TOPOLOGIES, "*.xml")))
        t_start = time.monotonic()
        for i, n in enumerate(names):
            if n in bind_nodes:
                root = os.path.join(work, "root%d" % i)
                on_demand_tree(root)
                cfg = os.path.join(work, "nrm%d.yaml" % i)
                with open(cfg, "w") as fh:
                    fh.write("memory:\n  hugepagesOnDemand:\n    2Mi: %dMi\n" % ON_DEMAND_MI)
                p = NrmPlugin(cluster, n, work, ["-c", cfg, "-t", os.path.join(TOPOLOGIES, BINDING_TOPOLOGY),
                                                 "--fsroot", root, "--drivers", "cpu,memory"])
                p.start("--allow-no-cpuset")  # the fake tree has no cgroup: nothing is bound here
            else:
                p = NrmPlugin(cluster, n, work, ["-t", topos[i % len(topos)], "--drivers", "cpu,memory"])
                p.start()
            plugins.append(p)
        ctl_pod = wait_for(lambda: next((p["metadata"]["name"] for p in cluster.api(
            "GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io/component%%3Dcontroller"
            % NAMESPACE)[1].get("items", []) if p["spec"].get("nodeName")), None), 120, 0.5)
        if not ctl_pod:
            raise RuntimeError("the controller Deployment's pod was not scheduled")
        kc = cluster.nrm_kubeconfig(None, os.path.join(work, "controller.kubeconfig"), account="nrm-controller",
                                    pod=ctl_pod)
        ctl_log = os.path.join(work, "controller.log")
        ctl = subprocess.Popen([clusterlib.NRM, "controller", "--kubeconfig", kc, "--drivers", "cpu,memory",
                                "--lease-namespace", NAMESPACE, "--log-level", "info"],
                               stdout=open(ctl_log, "w"), stderr=subprocess.STDOUT)

        def alive():
            for p in plugins:
                if p.proc.poll() is not None:
                    raise RuntimeError("the plugin of %s exited (%s):\n%s"
                                       % (p.node, p.proc.returncode, p.text()[-2000:]))
            if ctl.poll() is not None:
                with open(ctl_log) as fh:
                    raise RuntimeError("nrm controller exited (%s):\n%s" % (ctl.returncode, fh.read()[-2000:]))
            return True
        if not wait_for(lambda: alive() and all(p.settled() for p in plugins), 120 + 2 * nodes, 1.0):
            raise RuntimeError("%d of %d plugins published" % (sum(p.settled() for p in plugins), nodes))
        if not wait_for(lambda: "leading; watching ResourceClaims" in open(ctl_log).read(), 60, 0.5):
            raise RuntimeError("nrm controller does not lead")
        out["fleet_start_s"] = time.monotonic() - t_start
        out["setup_s"] = time.monotonic() - t_up
        time.sleep(3)  # the publishers' last writes and the audit log's batch
        log("fleet-binding: %d nodes with a real nrm plugin each (%d with huge pages on demand over a fake tree, the "
            "others %d recorded machines in turn), nrm controller, %s; fleet up in %.1f s, set up in %.1f s"
            % (nodes, n_bind_nodes, len(topos), cluster.version, out["fleet_start_s"], out["setup_s"]))

        audit = AuditTail(os.path.join(cluster.dir, "audit.log"))
        audit.poll()
        node_set = set(names)
        procs = {"nrm-plugins": [p.proc.pid for p in plugins], "nrm-controller": [ctl.pid]}
        procs.update({k: [v] for k, v in pids.items()})

        def cpu():
            return {k: sum(cpu_s(p) for p in v) for k, v in procs.items()}

        def reads():
            return socket_bytes(cluster.port)

        def begin():
            """What a phase's figures start from."""
            return {"cpu": cpu(), "reads": reads(), "met": watch_metrics(cluster), "ev": cw.events,
                    "bm": cw.bookmarks, "by": cw.bytes, "wall": time.time(), "ebm": [w.bookmarks for w in empty],
                    "logs": [len(p.text()) for p in plugins]}

        def end(b):
            """A phase's figures, from begin()'s b to now."""
            wall1 = time.time()
            audit.poll()
            f = phase(audit.between(b["wall"], wall1), node_set, b["cpu"], cpu(), b["reads"], reads(), b["met"],
                      watch_metrics(cluster), (cw.events - b["ev"], cw.bookmarks - b["bm"],
                                               [w.bookmarks - x for w, x in zip(empty, b["ebm"])]), cw.bytes - b["by"],
                      (full_watchers + 1, full_bytes + 1), bind_nodes, {p.node: p.proc.pid for p in plugins})
            f["wall_s"] = wall1 - b["wall"]
            # Why a binder listed again (its informer's lines, docs/kubernetes-api.md#the-informer).
            why = {}
            for p, at in zip(plugins, b["logs"]):
                for line in p.text()[at:].splitlines():
                    if "ResourceClaims of this node" in line and ("listing again" in line or "again in" in line):
                        k = re.sub(r".*ResourceClaims of this node( watch)?: ", "", line)
                        k = re.sub(r"\d+", "N", k)[:100]
                        why[k] = why.get(k, 0) + 1
            f["binder_relists_why"] = why
            return f

        # -- rest: the fleet and the controller with no claim coming, for the cost of being there
        b = begin()
        time.sleep(rest_s)
        out["rest"] = end(b)

        # -- create: every pod, its claim from the template, allocated and bound
        want = [(BIND_NS, "b-%05d" % i, True) for i in range(n_bind)]
        want += [(PLAIN_NS[i % len(PLAIN_NS)], "p-%05d" % i, False) for i in range(claims - n_bind)]
        # Interleaved, as a fleet's pods arrive: the binding pods spread over the whole creation.
        want.sort(key=lambda w: (int(w[1][2:]) / (n_bind if w[2] else max(1, claims - n_bind)), w[2]))
        created, errors, lock = {}, [], threading.Lock()
        todo = list(want)
        b = begin()
        wall0 = b["wall"]
        t0 = time.monotonic()

        def creator():
            c = Conn(cluster)
            while True:
                with lock:
                    if not todo or errors:
                        return
                    ns, name, binding = todo.pop(0)
                s, body = c.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod(ns, name, binding))
                with lock:
                    if s != 201:
                        errors.append("pod %s/%s: %s %s" % (ns, name, s, str(body)[:300]))
                    created[(ns, name)] = time.time()
        threads = [threading.Thread(target=creator) for _ in range(CREATORS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(errors[0])
        out["create_pods_s"] = time.monotonic() - t0
        bound = {}

        def all_bound():
            alive()
            for e in audit.poll()[len(audit_seen):]:
                audit_seen.append(e)
                if e["resource"] == "pods" and e["sub"] == "binding" and e["verb"] == "create" \
                        and e["code"] == 201 and (e["ns"], e["name"]) in created:
                    bound.setdefault((e["ns"], e["name"]), e["t"])
            return len(bound) == len(want)
        audit_seen = []
        ok = wait_for(all_bound, timeout, 1.0)
        t_bound = max(bound.values()) if bound else time.time()
        out["all_bound"] = ok
        out["bound"] = len(bound)
        out["bind_all_s"] = t_bound - wall0
        lat = {True: [], False: []}
        for (ns, name), t in bound.items():
            lat[ns == BIND_NS].append(t - created[(ns, name)])
        for k, v in ((True, "binding"), (False, "plain")):
            out["%s_bound_s" % v] = {"n": len(lat[k]), "p50": pct(lat[k], 50), "p99": pct(lat[k], 99),
                                     "max": max(lat[k]) if lat[k] else None}
        time.sleep(3)  # quiet after the last binding: late writes, the audit batch, the watch counters
        out["create"] = end(b)
        rss = [rss_kib(p.proc.pid) for p in plugins]
        out["plugin_rss_kib"] = {"mean": statistics.mean(rss), "max": max(rss), "sum": sum(rss)}
        out["controller_rss_kib"] = rss_kib(ctl.pid)
        out["apiserver_rss_kib"] = rss_kib(pids["apiserver"])
        out["etcd_rss_kib"] = rss_kib(pids["etcd"])

        # Each binding claim: labelled once, its condition True; the pools raised.
        s, lst = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % BIND_NS)
        items = lst.get("items", []) if s == 200 else []
        out["binding_claims_labelled"] = sum(1 for c in items if (c["metadata"].get("labels") or {}).get("nrm.io/node"))
        out["binding_claims_ready"] = sum(1 for c in items if any(
            x.get("type") == READY and x.get("status") == "True"
            for d in (c.get("status") or {}).get("devices") or [] for x in d.get("conditions") or []))
        pages = 0
        for p in plugins:
            if p.node in bind_nodes:
                for n in (0, 1):
                    with open(os.path.join(work, "root%d" % names.index(p.node),
                                           "sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages"
                                           % n)) as fh:
                        pages += int(fh.read())
        out["pages_raised"] = pages
        plain = []
        for ns in PLAIN_NS:
            s, lst = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns)
            plain += lst.get("items", []) if s == 200 else []
        out["plain_claims_labelled"] = sum(1 for c in plain if (c["metadata"].get("labels") or {}).get("nrm.io/node"))

        # -- delete: the pods (twice, gracePeriodSeconds=0), then the claims go with them
        b = begin()
        t0 = time.monotonic()
        conn = Conn(cluster)
        for _ in range(2):
            for ns in [BIND_NS] + PLAIN_NS:
                s, body = conn.api("DELETE", "/api/v1/namespaces/%s/pods?gracePeriodSeconds=0" % ns)
                if s != 200:
                    raise RuntimeError("deleting the pods of %s: %s %s" % (ns, s, str(body)[:300]))

        def gone():
            alive()
            for ns in [BIND_NS] + PLAIN_NS:
                for what in ("/api/v1/namespaces/%s/pods", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims"):
                    s, lst = conn.api("GET", (what % ns) + "?limit=1")
                    if s != 200 or lst.get("items"):
                        return False
            return True
        out["deleted"] = wait_for(gone, timeout, 1.0)
        out["delete_s"] = time.monotonic() - t0
        time.sleep(3)
        out["delete"] = end(b)

        # Writes per claim, by kind (the create phase).
        w = out["create"]["writes"]
        per = {}
        for e in w:
            if e["resource"] == "resourceclaims":
                per.setdefault((e["ns"], e["name"]), []).append(e)
        bind_w = [len(v) for (ns, _), v in per.items() if ns == BIND_NS]
        plain_w = sum(len(v) for (ns, _), v in per.items() if ns != BIND_NS)
        labels = [sum(1 for e in v if e["user"] == CONTROLLER_USER and not e["sub"]) for (ns, _), v in per.items()
                  if ns == BIND_NS]
        status = [sum(1 for e in v if e["user"] == BINDER_USER and e["sub"] == "status") for (ns, _), v in per.items()
                  if ns == BIND_NS]
        out["writes_per_binding_claim"] = {"mean": sum(bind_w) / max(1, n_bind), "max": max(bind_w or [0]),
                                           "label_patches": sum(labels), "status_writes": sum(status),
                                           "claims_with_one_of_each": sum(1 for a, b in zip(labels, status)
                                                                          if a == 1 and b == 1)}
        out["writes_per_plain_claim"] = plain_w / max(1, claims - n_bind)
        # A binding claim written more than twice: its writes and what the binder said of it.
        out["binding_claims_written_more"] = {}
        for (ns, name), v in per.items():
            if ns == BIND_NS and len(v) != 2:
                said = [line for p in plugins for line in p.text().splitlines() if name in line]
                out["binding_claims_written_more"][name] = {
                    "writes": ["%.3f %s %s %s%s %s" % (e["t"] - v[0]["t"], e["user"].rsplit(":", 1)[-1], e["verb"],
                                                       e["resource"], "/" + e["sub"] if e["sub"] else "", e["code"])
                               for e in v], "binder": said[-12:]}
        out["binding_path_s"] = binding_path(audit.events, created, bound)
        out["goals"] = goals(out)
        return out
    finally:
        for w in ([cw] if cw else []) + empty:
            w.close()
        if ctl:
            clusterlib.terminate(ctl)
        for p in plugins:
            if p.proc and p.proc.poll() is None:
                p.proc.terminate()
        for p in plugins:
            p.stop()
        if own and cluster:
            cluster.stop()
            shutil.rmtree(work, ignore_errors=True)


def binding_path(events, created, bound):
    """Each binding claim's way, from the audit log: the scheduler's allocation (its status write), nrm
    controller's label, the binder's condition, the pod's binding. {step: {p50, p99, max}} in seconds."""
    steps = {}
    for e in events:
        if e["ns"] != BIND_NS or e["resource"] != "resourceclaims" or e["verb"] not in ("update", "patch") \
                or e["code"] not in (200, 201):
            continue
        pod_name = e["name"].rsplit("-", 2)[0]
        if e["user"] == "system:kube-scheduler" and e["sub"] == "status":
            steps.setdefault(pod_name, {}).setdefault("alloc", e["t"])
        elif e["user"] == CONTROLLER_USER and not e["sub"]:
            steps.setdefault(pod_name, {}).setdefault("label", e["t"])
        elif e["user"] == BINDER_USER and e["sub"] == "status":
            steps.setdefault(pod_name, {}).setdefault("cond", e["t"])
    out = {}
    for what, a, b in (("created_to_allocated", "created", "alloc"), ("allocated_to_labelled", "alloc", "label"),
                       ("labelled_to_condition", "label", "cond"), ("allocated_to_condition", "alloc", "cond"),
                       ("condition_to_bound", "cond", "bound")):
        xs = []
        for (ns, name), t in created.items():
            st = dict(steps.get(name, {}), created=t)
            if (ns, name) in bound:
                st["bound"] = bound[(ns, name)]
            if ns == BIND_NS and a in st and b in st:
                xs.append(st[b] - st[a])
        out[what] = {"n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99), "max": max(xs) if xs else None}
    return out


def phase(events, node_set, cpu0, cpu1, reads0, reads1, met0, met1, own_events, own_bytes, full_watchers, bind_nodes,
          plugin_pids):
    """One phase's figures: nrm's requests, the server's watch counters, CPU, the plugins' reads."""
    r = nrm_requests(events, node_set)
    per_node = r["binders"]
    kinds = sorted({k for v in per_node.values() for k in v})
    f = {"requests_all": len(events), "controller": r["controller"],
         # A resumed watch the server answers 410 (its watch cache is past the binder's resourceVersion):
         # the informer lists again, which it does not log.
         "binder_watches_410": sum(1 for e in events if e["user"] == BINDER_USER and e["verb"] == "watch"
                                   and e["code"] == 410),
         "binders_total": {k: sum(v.get(k, 0) for v in per_node.values()) for k in kinds},
         "binders_max": {k: max(v.get(k, 0) for v in per_node.values()) for k in kinds},
         "binders_with_requests": len(per_node),
         "writes": r["writes"], "write_kinds": write_kinds(r["writes"]),
         "cpu_s": {k: cpu1[k] - cpu0[k] for k in cpu0}}
    # Every watcher of all claims got the events this bench's own watch got, and every watch about as many
    # bookmarks (the server counts them as events); what the server sent beyond that went to the labelled
    # watches, the binders'. The bookmarks make it an estimate, within about one per binder.
    ev, by = met1[0] - met0[0], met1[1] - met0[1]
    own_events, own_bm, empty_bm = own_events
    bm = statistics.mean(empty_bm)
    f["claim_watch_events_sent"] = ev
    f["claim_watch_bytes_sent"] = by
    f["one_full_watcher_events"] = own_events
    f["bookmarks_per_watch"] = bm
    f["full_watchers"] = full_watchers[0]
    f["binders_events_derived"] = ev - full_watchers[0] * (own_events + own_bm) - sum(empty_bm) \
        - len(plugin_pids) * bm
    # Bytes cannot be split as well (the metadata-only watchers send less per event, by how much depends on
    # the object): the binders' events at the mean size of an event of a whole watcher, an estimate.
    f["binders_bytes_derived"] = f["binders_events_derived"] * own_bytes / max(1, own_events)
    # Each plugin's bytes received from the server over the phase: a connection opened in it counts from 0,
    # one closed in it is lost (its watches are long-lived).
    got = {}
    for (pid, lport), b in reads1.items():
        got[pid] = got.get(pid, 0) + b - reads0.get((pid, lport), 0)
    for k, on in (("plugin_read_bytes_binding_nodes", True), ("plugin_read_bytes_other_nodes", False)):
        group = [p for n, p in plugin_pids.items() if (n in bind_nodes) == on]
        d = sorted(got.get(pid, 0) for pid in group)
        f[k] = {"sum": sum(d), "median": statistics.median(d), "max": d[-1]} if d else None
    return f


def goals(o):
    c, d, r = o["create"], o["delete"], o["rest"]
    wb = o["writes_per_binding_claim"]
    g = []
    rw = {k: v for k, v in r["write_kinds"].items() if k != "controller update leases"}
    rl = r["binders_total"].get("list", 0) + r["controller"].get("list", 0)
    g.append(("at rest (%.0f s): no nrm writes but the Lease, no lists" % r["wall_s"], not rw and not rl,
              "%s; %d lists; plugins' CPU %.2f s in all" % (", ".join("%s %d" % kv for kv in rw.items()) or
                                                            "no writes", rl, r["cpu_s"]["nrm-plugins"])))
    g.append(("every pod bound", o["all_bound"], "%d of %d in %.1f s" % (o["bound"], o["claims"], o["bind_all_s"])))
    g.append(("every binding claim labelled and True", o["binding_claims_labelled"] == o["binding_claims"]
              and o["binding_claims_ready"] == o["binding_claims"],
              "%d labelled, %d True of %d" % (o["binding_claims_labelled"], o["binding_claims_ready"],
                                              o["binding_claims"])))
    g.append(("pools raised for every binding claim", o["pages_raised"] == o["binding_claims"] * PAGES_MI // 2,
              "%d pages of 2 MiB, %d expected" % (o["pages_raised"], o["binding_claims"] * PAGES_MI // 2)))
    g.append(("nrm writes per plain claim: 0", o["writes_per_plain_claim"] == 0 and o["plain_claims_labelled"] == 0,
              "%.3f; %d plain claims labelled" % (o["writes_per_plain_claim"], o["plain_claims_labelled"])))
    g.append(("per binding claim: 1 label patch + 1 status write",
              wb["claims_with_one_of_each"] == o["binding_claims"] and wb["max"] == 2,
              "%d of %d claims; %d label patches, %d status writes, mean %.2f writes (max %d)"
              % (wb["claims_with_one_of_each"], o["binding_claims"], wb["label_patches"], wb["status_writes"],
                 wb["mean"], wb["max"])))
    # The controller renews its Lease every 2 s (client-go's default retry period), claims or not.
    leases = {name: o[name]["write_kinds"].get("controller update leases", 0) for name in ("rest", "create", "delete")}
    g.append(("nrm controller: its Lease renewed every 2 s, nothing more", all(
        leases[k] <= o[k]["wall_s"] / 2 + 1 for k in leases), "; ".join(
        "%s %d renewals in %.0f s" % (k, v, o[k]["wall_s"]) for k, v in leases.items())))
    # A raised pool shrinks the memory device's capacity: the node's memory slice is published again,
    # at most once per binding claim (the refresher coalesces).
    slices = c["write_kinds"].get("binder update resourceslices", 0)
    g.append(("ResourceSlice updates after raising pools: at most 1 per binding claim", slices <= o["binding_claims"],
              "%d updates for %d binding claims on %d nodes" % (slices, o["binding_claims"], o["binding_nodes"])))
    other = {k: v for k, v in c["write_kinds"].items() if "resourceclaims" not in k
             and k not in ("controller update leases", "binder update resourceslices")}
    g.append(("no other nrm writes while claims come", not other, ", ".join("%s %d" % kv for kv in other.items())
              or "none"))
    lists = c["binders_total"].get("list", 0) + c["controller"].get("list", 0)
    g.append(("no lists by nrm while claims come", lists == 0, "%d" % lists))
    dw = {k: v for k, v in d["write_kinds"].items() if k != "controller update leases"}
    g.append(("nrm writes on delete: 0 (the Lease apart)", not dw, ", ".join("%s %d" % kv for kv in dw.items())
              or "none"))
    # The scheduler's PreBind checks the conditions at once, then every 5 s (wait.PollUntilContextTimeout in
    # its dynamicresources plugin): a condition written within 5 s of the allocation costs the pod no more
    # than one round.
    ac = o["binding_path_s"]["allocated_to_condition"]
    if ac["n"]:
        g.append(("binding condition written within 5 s of the allocation (p99)", ac["p99"] < 5.0,
                  "p50 %.2f s, p99 %.2f s, max %.2f s; creation to bound: binding p50 %.2f s, p99 %.2f s, plain p50 "
                  "%.2f s, p99 %.2f s" % (ac["p50"], ac["p99"], ac["max"], o["binding_bound_s"]["p50"],
                                          o["binding_bound_s"]["p99"], o["plain_bound_s"]["p50"],
                                          o["plain_bound_s"]["p99"])))
    # What a binder should get: the events of its own labelled claims only. Created: ADDED (the label),
    # MODIFIED (its condition); deleted: MODIFIED (reservedFor emptied), MODIFIED (deletionTimestamp),
    # DELETED; and a bookmark a minute on each watch.
    # The events of a claim that a binder gets: created, ADDED (the label) and MODIFIED (its condition);
    # deleted, what every watcher of the claim gets (this bench's own watch: events per claim deleted).
    per_delete = int(math.ceil(d["one_full_watcher_events"] / float(max(1, o["claims"]))))
    for name, per in (("create", 2), ("delete", per_delete)):
        p = o[name]
        bound_ = per * o["binding_claims"] + o["nodes"]
        g.append(("%s: binders' watch events, their own claims' only (%d each; +1 a binder for the bookmarks' "
                  "estimate)" % (name, per), p["binders_events_derived"] <= bound_,
                  "%.0f events (about %s) derived, bound %.0f" % (p["binders_events_derived"], human(
                      p["binders_bytes_derived"] or 0), bound_)))
    return g


def report(o):
    print("fleet-binding: %d nodes (%d on demand), %d claims (%d with binding conditions), %s, %d CPUs here"
          % (o["nodes"], o["binding_nodes"], o["claims"], o["binding_claims"], o["kubernetes"], o["cpus_here"]))
    print("  pods created in %.1f s; all bound %.1f s after the first create" % (o["create_pods_s"], o["bind_all_s"]))
    for k in ("binding", "plain"):
        b = o["%s_bound_s" % k]
        if b["n"]:
            print("  %-8s creation to bound: p50 %.2f s, p99 %.2f s, max %.2f s (%d pods)"
                  % (k, b["p50"], b["p99"], b["max"], b["n"]))
    print("  the binding claims' way (audit log): " + "; ".join(
        "%s p50 %.2f s, p99 %.2f s" % (k.replace("_", " "), v["p50"], v["p99"])
        for k, v in o["binding_path_s"].items() if v["n"]))
    for name in ("rest", "create", "delete"):
        p = o[name]
        print("  %s (%.1f s): %d requests in all; nrm controller %s; binders %s in all (max per node %s, %d nodes "
              "with requests)" % (name, p["wall_s"], p["requests_all"], p["controller"], p["binders_total"],
                                  p["binders_max"], p["binders_with_requests"]))
        print("    nrm writes: %s" % (p["write_kinds"] or "none"))
        if p["binder_watches_410"]:
            print("    binders' watches answered 410 Gone (each lists again): %d" % p["binder_watches_410"])
        if p["binder_relists_why"]:
            print("    binders listing again, why (their logs): %s" % p["binder_relists_why"])
        print("    ResourceClaim watch events sent %.0f (%s); one watcher of all claims got %d; %.1f such watchers; "
              "bookmarks a watch %.1f; binders' share %.0f events, about %s"
              % (p["claim_watch_events_sent"], human(p["claim_watch_bytes_sent"]), p["one_full_watcher_events"],
                 p["full_watchers"], p["bookmarks_per_watch"], p["binders_events_derived"],
                 human(p["binders_bytes_derived"]) if p["binders_bytes_derived"] is not None else "-"))
        for k, what in (("binding_nodes", "on-demand nodes"), ("other_nodes", "other nodes")):
            r = p["plugin_read_bytes_" + k]
            if r:
                print("    bytes each plugin received from the server (TLS, all its streams), %s: median %s, max %s, "
                      "all %s" % (what, human(r["median"]), human(r["max"]), human(r["sum"])))
        print("    CPU s: %s" % ", ".join("%s %.1f" % kv for kv in p["cpu_s"].items()))
    r = o["plugin_rss_kib"]
    print("  RSS: plugins mean %.1f MiB, max %.1f MiB, all %.0f MiB; nrm controller %.1f MiB; kube-apiserver %.0f MiB, "
          "etcd %.0f MiB" % (r["mean"] / 1024, r["max"] / 1024, r["sum"] / 1024, o["controller_rss_kib"] / 1024,
                             o["apiserver_rss_kib"] / 1024, o["etcd_rss_kib"] / 1024))
    for name, v in o.get("binding_claims_written_more", {}).items():
        print("  claim %s written %d times: %s" % (name, len(v["writes"]), "; ".join(v["writes"])))
        for line in v["binder"]:
            print("    " + line[:300])
    print("goals:")
    for what, ok, fig in o["goals"]:
        print("  %-72s %-8s (%s)" % (what, "met" if ok else "NOT MET", fig))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=200, help="nodes, a real nrm plugin each (default 200)")
    p.add_argument("--claims", type=int, default=2000, help="pods, one claim each (default 2000)")
    p.add_argument("--binding-fraction", type=float, default=0.06,
                   help="fraction of the claims (and of the nodes) with binding conditions (default 0.06)")
    p.add_argument("--nrm", default=clusterlib.NRM, help="the nrm program")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = p.parse_args(argv)
    clusterlib.NRM = os.path.abspath(args.nrm)
    if not os.access(clusterlib.NRM, os.X_OK):
        skip("fleet-binding: build nrm first (no %s)" % clusterlib.NRM)
    t0 = time.monotonic()
    o = run(None, args.nodes, args.claims, args.binding_fraction)
    o["total_s"] = time.monotonic() - t0
    report(o)
    print("(%.0f s in all)" % o["total_s"])
    if args.json:
        o2 = dict(o)
        for k in ("rest", "create", "delete"):
            o2[k] = {x: y for x, y in o[k].items() if x != "writes"}
        print(json.dumps(o2, default=str))
    return 0 if all(ok for _, ok, _ in o["goals"]) else 1


if __name__ == "__main__":
    sys.exit(main())
