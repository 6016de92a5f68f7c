#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What does each node agent receive when it watches ResourceClaims?

A cluster of N nodes (one node agent each) runs M claims, spread over the
nodes; a fraction of them has devices with binding conditions (KEP-5007),
which the node agent of the claim's node must set (server-side apply of
status.devices, with its own pod-bound ServiceAccount token) before the
scheduler binds the pod. Each claim is created allocated (ADDED), gets its
condition if it needs one (MODIFIED) and is deleted (DELETED). Two designs:

  all       every agent watches all ResourceClaims cluster-wide and picks
            the claims of its node that need binding conditions;
  labelled  one controller watches all claims and labels those that need
            binding conditions with nrm.io/node=<node> (one merge patch
            each); every agent watches with labelSelector=nrm.io/node=<node>.

The API server is the real kube-apiserver (tests/cluster: the upstream
control plane on loopback, nrm.yaml applied, N Nodes). Each agent is nrm's
DaemonSet ServiceAccount with a token bound to the DaemonSet's pod on its
node, and writes the condition with nrm.yaml's associated-node permission
on resourceclaims/driver; the controller is nrm.yaml's nrm-controller
ServiceAccount, its token bound to the Deployment's pod. The test's admin
creates each claim allocated (Cluster.allocate: created, then its
allocation written through the status subresource, as the scheduler does)
and deletes them (a deletecollection per namespace). The agents and the
controller run in a child process, one TLS connection per watch, every
event decoded; a watch the server ends (it drops a watcher that reads too
slowly) is opened again from its last resourceVersion, as an informer
does, and counted. Counted per watcher: events (bookmarks apart) and bytes
received (the watch stream as it arrives, framing included), requests made
(list, watch, patches); the server's requests from its audit log, its CPU
(kube-apiserver and etcd) from /proc.

Exits 77 where the upstream binaries cannot be built (tests/cluster/build.sh).

  bench-claims-watch.py [--nodes N] [--claims M] [--binding-fraction F]
                        [--designs all,labelled]"""

import argparse
import http.client
import json
import os
import random
import selectors
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
from clusterlib import human  # noqa: E402

DRIVER = "cpu.nrm.io"
CONDITION = "nrm.io/ready"
LABEL = "nrm.io/node"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
NAMESPACES = 10
CREATORS = 4  # the admin's claims are created by this many threads, each waiting on the server in turn


def node_name(i):
    return "node-%03d" % i


# -- the server side (this process) -------------------------------------------------

def claim(i, nodes, binding):
    """A claim as the scheduler allocated it: (the object to create, its node, its results for
    Cluster.allocate). No owner Pod and no reservedFor, which the garbage collector and the
    resourceclaim controller would act on: no pod exists."""
    node = node_name(i % nodes)
    pod = "pod-%05d" % i
    more = {"consumedCapacity": {"cpus": "4"}}
    if binding:
        more["bindingConditions"] = [CONDITION]
        more["bindingFailureConditions"] = ["nrm.io/failed"]
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": "%s-cpus-%05d" % (pod, i), "namespace": "ns-%d" % (i % NAMESPACES),
                        "annotations": {"resource.kubernetes.io/pod-claim-name": "cpus"}},
           "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
               "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
               "capacity": {"requests": {"cpus": "4"}}}}]}}}
    return obj, node, [("cpus", DRIVER, node, "cpu-%d" % (i % 8), more)]


def ready(c):
    return any(cond.get("type") == CONDITION and cond.get("status") == "True"
               for d in (c.get("status") or {}).get("devices") or [] for cond in d.get("conditions") or [])


def cpu_s(pid):
    """The CPU seconds (user and system) of a process so far."""
    with open("/proc/%d/stat" % pid) as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / float(os.sysconf("SC_CLK_TCK"))


class Bench:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.cluster = None

    def up(self, bindir):
        """The control plane, nrm.yaml, the Nodes; a token for each node's agent and for the controller."""
        from clusterlib import NAMESPACE, Cluster, wait_for
        n = self.args.nodes
        self.cluster = c = Cluster(self.work, "claims", bindir)
        c.install_nrm()
        c.create_nodes([(node_name(i), 64, 256 << 30) for i in range(n)])
        t0 = time.monotonic()

        def pods(selector, daemon):
            s, lst = c.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=%s"
                           % (NAMESPACE, urllib.parse.quote(selector)))
            return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in (lst.get("items", []) if s == 200 else [])
                    if p["spec"].get("nodeName") and daemon == any(
                        o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}
        if not wait_for(lambda: len(pods("app.kubernetes.io/name=nrm", True)) == n, 120 + n, 0.5):
            raise SystemExit("bench-claims-watch: the DaemonSet controller made %d of %d pods"
                             % (len(pods("app.kubernetes.io/name=nrm", True)), n))
        ds = pods("app.kubernetes.io/name=nrm", True)
        ctl = wait_for(lambda: pods("app.kubernetes.io/component=controller", False), 120, 0.5)
        if not ctl:
            raise SystemExit("bench-claims-watch: the controller Deployment's pod was not scheduled")
        self.pods_s = time.monotonic() - t0

        def token(node, account="nrm", pod=None):
            path = os.path.join(self.work, "kc-%s" % (node or account))
            c.nrm_kubeconfig(node, path, account=account, pod=pod)
            with open(path + ".token") as fh:
                return fh.read().strip()
        self.tokens = [token(node_name(i), pod=ds[node_name(i)]) for i in range(n)]
        self.ctl_token = token(None, "nrm-controller", sorted(ctl.values())[0])
        for k in range(NAMESPACES):
            c.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "ns-%d" % k}})

    def list_claims(self):
        s, lst = self.cluster.api("GET", CLAIMS)
        if s != 200:
            raise SystemExit("bench-claims-watch: listing the claims: %s %s" % (s, str(lst)[:300]))
        return lst["items"]

    def server_cpu(self):
        env = {}
        with open(os.path.join(self.cluster.dir, "env")) as fh:
            for line in fh:
                k, _, v = line.strip().partition("=")
                env[k] = v
        return cpu_s(int(env["APISERVER_PID"])) + cpu_s(int(env["ETCD_PID"]))

    def run(self, design, needing):
        args, c = self.args, self.cluster
        params = {"port": c.port, "ca": c.ca, "design": design, "tokens": self.tokens, "controller": self.ctl_token,
                  "needing": len(needing)}
        mark = len(c.audit())
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        child.stdin.write(json.dumps(params) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit("bench-claims-watch: the watchers did not start: %r" % line)
        cpu0, srv0, t0 = time.process_time(), self.server_cpu(), time.monotonic()
        todo = list(range(args.claims))
        errors = []

        def create():
            while todo and not errors:
                try:
                    i = todo.pop(0)
                except IndexError:
                    return
                obj, node, results = claim(i, args.nodes, i in needing)
                try:
                    c.allocate(obj, node, results)
                except RuntimeError as e:
                    errors.append(str(e))
        threads = [threading.Thread(target=create) for _ in range(CREATORS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit("bench-claims-watch: %s: %s" % (design, errors[0]))
        t_created = time.monotonic()
        # The child says when the last condition was written (its agent's patch answered 200).
        sel = selectors.DefaultSelector()
        sel.register(child.stdout, selectors.EVENT_READ)
        t_ready = None
        if needing and sel.select(300):
            said = child.stdout.readline().split()
            # The same clock in both processes (CLOCK_MONOTONIC).
            t_ready = float(said[2]) if said[:1] == ["conditions"] else None
        have = sum(1 for x in self.list_claims() if ready(x))
        if have < len(needing):
            raise SystemExit("bench-claims-watch: %s: only %d of %d claims got their condition"
                             % (design, have, len(needing)))
        t_ready = t_ready or time.monotonic()
        for k in range(NAMESPACES):
            s, body = c.api("DELETE", "/apis/resource.k8s.io/v1/namespaces/ns-%d/resourceclaims" % k)
            if s != 200:
                raise SystemExit("bench-claims-watch: deleting the claims of ns-%d: %s %s" % (k, s, str(body)[:300]))
        child.stdin.write("done\n")
        child.stdin.flush()
        out = json.loads(child.stdout.readline())
        child.wait(30)
        t_end = time.monotonic() - out["quiet"]
        out.update(design=design, created_s=t_created - t0, ready_s=t_ready - t0, total_s=t_end - t0,
                   server_cpu_s=self.server_cpu() - srv0, admin_cpu_s=time.process_time() - cpu0)
        time.sleep(2.5)  # the audit log's batch (at most 1 s)
        out["server_requests"] = len({e["auditID"] for e in c.audit()[mark:]
                                      if e.get("userAgent", "").startswith("bench-")})
        if self.list_claims():
            raise SystemExit("bench-claims-watch: %s: claims left after the deletion" % design)
        return out

    def stop(self):
        if self.cluster:
            self.cluster.stop()


# -- the watchers (the child process) ------------------------------------------------

class Watcher:
    """One watch stream read without blocking: HTTP headers, then chunks holding JSON lines
    (the server flushes when it has no more events queued: a chunk may hold several events,
    an event may span chunks)."""

    def __init__(self, name, token, query, node=None, controller=False):
        self.name, self.token, self.query, self.node, self.controller = name, token, query, node, controller
        self.events = self.bytes = self.requests = self.bookmarks = self.reopened = self.relisted = 0
        self.done = set()  # claims this watcher already wrote
        self.rv = None
        self.sock = None

    def hdrs(self):
        return {"Authorization": "Bearer " + self.token, "Accept": "application/json",
                "User-Agent": "bench-%s/1.0" % self.name}

    def list(self, ctx, port):
        # An informer lists, then watches from the list's resourceVersion.
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
        conn.request("GET", CLAIMS + ("?" + self.query if self.query else ""), headers=self.hdrs())
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 200:
            raise SystemExit("bench-claims-watch: list %s: %d %s" % (self.name, r.status, body[:200]))
        self.requests += 1
        self.bytes += len(body)
        self.rv = json.loads(body)["metadata"]["resourceVersion"]

    def watch(self, ctx, port, sel):
        raw = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        q = "%swatch=1&allowWatchBookmarks=true&resourceVersion=%s" % (self.query + "&" if self.query else "", self.rv)
        req = "GET %s?%s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (CLAIMS, q)
        req += "".join("%s: %s\r\n" % kv for kv in self.hdrs().items())
        self.sock.sendall((req + "\r\n").encode())
        self.requests += 1
        self.sock.setblocking(False)
        self.raw, self.data, self.headers, self.ended = bytearray(), bytearray(), False, False
        sel.register(self.sock, selectors.EVENT_READ, self)

    def readable(self, on_event):
        """Reads what there is; False when the stream ended (the caller opens it again)."""
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except (ssl.SSLWantReadError, BlockingIOError):
                return True
            except OSError:
                return False
            if not data:
                return False
            self.bytes += len(data)
            self.feed(data, on_event)
            if self.ended:
                return False

    def feed(self, data, on_event):
        buf = self.raw
        buf += data
        pos = 0
        if not self.headers:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buf[:buf.find(b"\r\n")])
            if b" 200 " not in status:
                raise SystemExit("bench-claims-watch: watch %s: %s" % (self.name, status.decode()))
            self.headers, pos = True, end + 4
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            size = int(bytes(buf[pos:nl]).split(b";")[0], 16)
            if len(buf) < nl + 2 + size + 2:
                break
            if not size:
                self.ended = True
            self.data += buf[nl + 2:nl + 2 + size]
            pos = nl + 4 + size
        del buf[:pos]
        while True:
            nl = self.data.find(b"\n")
            if nl < 0:
                break
            line = bytes(self.data[:nl])
            del self.data[:nl + 1]
            if line.strip():
                self.event(json.loads(line), on_event)

    def event(self, e, on_event):
        if e["type"] == "ERROR":
            # 410: the version is gone; list again (the caller sees the stream end).
            self.rv, self.ended = None, True
            return
        self.rv = e["object"]["metadata"].get("resourceVersion") or self.rv
        if e["type"] == "BOOKMARK":
            self.bookmarks += 1
            return
        self.events += 1
        on_event(self, e)

    def reopen(self, ctx, port, sel):
        sel.unregister(self.sock)
        try:
            self.sock.close()
        except OSError:
            pass
        self.reopened += 1
        if self.rv is None:
            self.relisted += 1
            self.list(ctx, port)
        self.watch(ctx, port, sel)


def needs_condition(obj):
    results = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [r for r in results if r.get("driver") == DRIVER and CONDITION in (r.get("bindingConditions") or [])]


def child():
    p = json.loads(sys.stdin.readline())
    ctx = ssl.create_default_context(cafile=p["ca"])
    port = p["port"]
    patcher = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
    written = [0]

    def request(w, method, path, body, ctype):
        patcher.request(method, path, body=json.dumps(body), headers=dict(w.hdrs(), **{"Content-Type": ctype}))
        r = patcher.getresponse()
        data = r.read()
        w.requests += 1
        if r.status != 200:
            raise SystemExit("bench-claims-watch: %s %s by %s: %d %s" % (method, path, w.name, r.status, data[:300]))

    def on_event(w, e):
        obj = e["object"]
        if e["type"] not in ("ADDED", "MODIFIED"):
            return
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in w.done or ready(obj):
            return
        results = needs_condition(obj)
        if not results:
            return
        path = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % key
        node = results[0]["pool"]
        if w.controller:
            if (meta.get("labels") or {}).get(LABEL) != node:
                w.done.add(key)
                request(w, "PATCH", path, {"metadata": {"labels": {LABEL: node}}}, "application/merge-patch+json")
            return
        sel = obj["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"]
        if sel != [w.node]:
            return
        w.done.add(key)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        devices = [{"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                    "conditions": [{"type": CONDITION, "status": "True", "reason": "Ready", "message": "",
                                    "lastTransitionTime": now}]} for r in results]
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": key[1], "namespace": key[0]}, "status": {"devices": devices}}
        request(w, "PATCH", path + "/status?fieldManager=%s&force=true" % DRIVER, body,
                "application/apply-patch+yaml")
        written[0] += 1
        if written[0] == p["needing"]:
            print("conditions %d %.6f" % (written[0], time.monotonic()), flush=True)

    sel = selectors.DefaultSelector()
    watchers = []
    for i, token in enumerate(p["tokens"]):
        q = "" if p["design"] == "all" else "labelSelector=" + urllib.parse.quote("%s=%s" % (LABEL, node_name(i)))
        watchers.append(Watcher("agent-%d" % i, token, q, node=node_name(i)))
    if p["design"] == "labelled":
        watchers.append(Watcher("controller", p["controller"], "", controller=True))
    for w in watchers:
        w.list(ctx, port)
        w.watch(ctx, port, sel)
    os.set_blocking(sys.stdin.fileno(), False)
    sel.register(sys.stdin, selectors.EVENT_READ, None)
    print("ready", flush=True)
    cpu0 = time.process_time()
    done_at, last = None, time.monotonic()
    while True:
        for key, _ in sel.select(0.1):
            if key.data is None:
                if "done" in (sys.stdin.read() or "done"):
                    done_at = time.monotonic()
                    sel.unregister(sys.stdin)
                continue
            w = key.data
            n0 = w.events
            if not w.readable(on_event):
                w.reopen(ctx, port, sel)
            if w.events != n0:
                last = time.monotonic()
        if done_at is not None and time.monotonic() - max(last, done_at) > 1.0:
            break
    agents = [w for w in watchers if not w.controller]
    ctrl = [w for w in watchers if w.controller]

    def stats(w):
        return {"events": w.events, "bytes": w.bytes, "requests": w.requests, "bookmarks": w.bookmarks,
                "reopened": w.reopened, "relisted": w.relisted}
    out = {"agents": [stats(w) for w in agents], "controller": [stats(w) for w in ctrl],
           "client_cpu_s": time.process_time() - cpu0, "quiet": time.monotonic() - last}
    print(json.dumps(out), flush=True)
    return 0


# -- the report -----------------------------------------------------------------------

def report(results):
    rows = []
    for r in results:
        a, c = r["agents"], r["controller"]
        ev = [x["events"] for x in a]
        by = [x["bytes"] for x in a]
        rq = [x["requests"] for x in a]
        rows.append((r["design"], {
            "events per agent (mean / max)": "%.1f / %d" % (statistics.mean(ev), max(ev)),
            "bytes per agent (mean / max)": "%s / %s" % (human(statistics.mean(by)), human(max(by))),
            "requests per agent (mean / max)": "%.2f / %d" % (statistics.mean(rq), max(rq)),
            "events, all agents": "%d" % sum(ev),
            "bytes, all agents": human(sum(by)),
            "controller events / bytes / requests": "%d / %s / %d" % (
                c[0]["events"], human(c[0]["bytes"]), c[0]["requests"]) if c else "-",
            "events, total delivered": "%d" % (sum(ev) + sum(x["events"] for x in c)),
            "bytes, total delivered": human(sum(by) + sum(x["bytes"] for x in c)),
            "requests, total (audit log)": "%d" % r["server_requests"],
            "watches ended by the server / relisted": "%d / %d" % (
                sum(x["reopened"] for x in a + c), sum(x["relisted"] for x in a + c)),
            "wall: create M claims (s)": "%.2f" % r["created_s"],
            "wall: all conditions set (s)": "%.2f" % r["ready_s"],
            "wall: until the streams are quiet (s)": "%.2f" % r["total_s"],
            "CPU: apiserver+etcd / admin / watchers (s)": "%.1f / %.1f / %.1f" % (
                r["server_cpu_s"], r["admin_cpu_s"], r["client_cpu_s"]),
        }, r))
    keys = list(rows[0][1])
    width = max(len(k) for k in keys) + 2
    head = "%-*s" % (width, "") + "".join("%-26s" % name for name, _, _ in rows)
    if len(rows) == 2:
        head += "ratio all/labelled"
    print(head)
    for k in keys:
        line = "%-*s" % (width, k) + "".join("%-26s" % vals[k] for _, vals, _ in rows)
        print(line + (ratio(k, rows) if len(rows) == 2 else ""))


def ratio(key, rows):
    (_, _, a), (_, _, b) = rows

    def tot(r, f):
        return sum(x[f] for x in r["agents"]) + sum(x[f] for x in r["controller"])
    if key.startswith("events per agent"):
        x, y = statistics.mean(w["events"] for w in a["agents"]), statistics.mean(w["events"] for w in b["agents"])
    elif key.startswith("bytes per agent"):
        x, y = statistics.mean(w["bytes"] for w in a["agents"]), statistics.mean(w["bytes"] for w in b["agents"])
    elif key == "events, all agents":
        x, y = sum(w["events"] for w in a["agents"]), sum(w["events"] for w in b["agents"])
    elif key == "bytes, all agents":
        x, y = sum(w["bytes"] for w in a["agents"]), sum(w["bytes"] for w in b["agents"])
    elif key == "events, total delivered":
        x, y = tot(a, "events"), tot(b, "events")
    elif key == "bytes, total delivered":
        x, y = tot(a, "bytes"), tot(b, "bytes")
    elif key.startswith("requests, total"):
        x, y = a["server_requests"], b["server_requests"]
    elif key.startswith("wall: until"):
        x, y = a["total_s"], b["total_s"]
    elif key.startswith("CPU:"):
        x, y = a["server_cpu_s"], b["server_cpu_s"]
    else:
        return ""
    return "%.1fx" % (x / y) if y else "-"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=200, help="node agents (default 200)")
    p.add_argument("--claims", type=int, default=2000, help="claims (default 2000)")
    p.add_argument("--binding-fraction", type=float, default=0.05,
                   help="fraction of the claims with binding conditions (default 0.05)")
    p.add_argument("--designs", default="all,labelled", help="which designs to run (default all,labelled)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child()
    from clusterlib import binaries
    bindir = binaries()
    rng = random.Random(5007)
    needing = {i for i in range(args.claims) if rng.random() < args.binding_fraction}
    work = tempfile.mkdtemp(prefix="nrm-claims-")
    bench = Bench(args, work)
    try:
        t0 = time.monotonic()
        bench.up(bindir)
        print("bench-claims-watch: %d nodes (one agent each), %d claims over %d namespaces, %d (%.1f%%) with binding "
              "conditions; each claim ADDED allocated, conditioned if it needs it, then DELETED; the real "
              "kube-apiserver %s (%d DaemonSet pods and the tokens in %.1f s, ready in %.1f s), %d CPUs here"
              % (args.nodes, args.claims, NAMESPACES, len(needing), 100.0 * len(needing) / max(args.claims, 1),
                 bench.cluster.version, args.nodes, bench.pods_s, time.monotonic() - t0, os.cpu_count()),
              flush=True)
        results = []
        for design in args.designs.split(","):
            started = time.monotonic()
            results.append(bench.run(design, needing))
            print("  %s: %.1f s" % (design, time.monotonic() - started), flush=True)
        report(results)
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    m, n, f = args.claims, args.nodes, len(needing) / max(args.claims, 1)
    # The allocation is a second write (Cluster.allocate, as the scheduler does): ADDED, then MODIFIED.
    print("(all: each agent gets every event, about M*(3+f) = %.0f; labelled: an agent gets ADDED, MODIFIED and "
          "DELETED of its own claims with binding conditions, about 3*f*M/N = %.1f, and the controller gets every "
          "event once, about M*(3+2f) = %.0f with its labels. Creating the claims is slower under 'all' because the "
          "server fans each event out to every watch. Bytes are the real server's objects, managedFields included.)"
          % (m * (3 + f), 3 * f * m / n, m * (3 + 2 * f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
