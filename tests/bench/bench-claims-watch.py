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

The API server is tests/k8s/fakeapi.py in this process (TLS, the real
list/watch, SSA and authorization code); the agents and the controller run
in a child process, one TLS connection per watch, every event decoded.
Counted per watcher: events and bytes received (the watch stream as it
arrives, framing included), requests made (list, watch, patches).

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
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "k8s"))

DRIVER = "cpu.nrm.io"
CONDITION = "nrm.io/ready"
LABEL = "nrm.io/node"
AGENT_USER = "system:serviceaccount:nrm:nrm-agent"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
NAMESPACES = 10


def node_name(i):
    return "node-%03d" % i


# -- the server side (this process) -------------------------------------------------

def tokens(nodes):
    agent_rules = [{"resource": "resourceclaims", "verbs": ["get", "list", "watch"]},
                   {"resource": "resourceclaims/status", "verbs": ["get", "patch"]},
                   {"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"],
                    "resourceNames": [DRIVER]}]
    from fakeapi import NODE_NAME_KEY
    table = {"agent-%d" % i: {"user": AGENT_USER, "extra": {NODE_NAME_KEY: [node_name(i)]}, "rules": agent_rules}
             for i in range(nodes)}
    table["controller"] = {"user": "system:serviceaccount:nrm:nrm-controller", "rules": [
        {"resource": "resourceclaims", "verbs": ["get", "list", "watch", "patch"]}]}
    return table


def claim(i, nodes, binding):
    node = node_name(i % nodes)
    pod = "pod-%05d" % i
    uid = "%08x-0000-4000-8000-%012x" % (i, i)
    result = {"request": "cpus", "driver": DRIVER, "pool": node, "device": "cpu-%d" % (i % 8),
              "consumedCapacity": {"cpus": "4"}}
    if binding:
        result["bindingConditions"] = [CONDITION]
        result["bindingFailureConditions"] = ["nrm.io/failed"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "%s-cpus-%05d" % (pod, i), "namespace": "ns-%d" % (i % NAMESPACES),
                         "annotations": {"resource.kubernetes.io/pod-claim-name": "cpus"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
                "capacity": {"requests": {"cpus": "4"}}}}]}},
            "status": {"allocation": {"devices": {"results": [result]},
                                      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                          {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                                      "allocationTimestamp": "2026-05-01T10:00:00Z"},
                       "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}}


def ready(c):
    return any(cond.get("type") == CONDITION and cond.get("status") == "True"
               for d in (c.get("status") or {}).get("devices") or [] for cond in d.get("conditions") or [])


def run(design, args, needing):
    from fakeapi import FakeAPI
    work = tempfile.mkdtemp(prefix="nrm-bench-claims-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    api = FakeAPI(work, tokens=tokens(args.nodes))
    api.start()
    try:
        params = {"url_port": api.port, "ca": api.ca_path, "nodes": args.nodes, "design": design}
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(params)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = child.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit("bench-claims-watch: the watchers did not start: %r" % line)
        store = api._store
        cpu0, t0 = time.process_time(), time.monotonic()
        for i in range(args.claims):
            api.put_claim(claim(i, args.nodes, i in needing))
        t_created = time.monotonic()
        deadline = t_created + 120

        def count_ready():
            with store.lock:
                return sum(1 for c in store.claims.values() if ready(c))
        while count_ready() < len(needing):
            if time.monotonic() > deadline or child.poll() is not None:
                raise SystemExit("bench-claims-watch: %s: only %d of %d claims got their condition"
                                 % (design, count_ready(), len(needing)))
            time.sleep(0.02)
        t_ready = time.monotonic()
        with store.lock:
            keys = sorted(store.claims)
        for ns, name in keys:
            api.delete_claim(ns, name)
        child.stdin.write("done\n")
        child.stdin.flush()
        out = json.loads(child.stdout.readline())
        child.wait(30)
        t_end = time.monotonic() - out["quiet"]
        out.update(design=design, created_s=t_created - t0, ready_s=t_ready - t0, total_s=t_end - t0,
                   server_cpu_s=time.process_time() - cpu0,
                   server_requests=len([r for r in api.requests if r["user_agent"].startswith("bench-")]))
        if api.internal_errors:
            raise SystemExit("bench-claims-watch: the fake failed: %s" % api.internal_errors[0])
        return out
    finally:
        api.stop()
        shutil.rmtree(work, ignore_errors=True)


# -- the watchers (the child process) ------------------------------------------------

class Watcher:
    """One watch stream read without blocking: HTTP headers, then chunks of one event each."""

    def __init__(self, name, token, query, node=None, controller=False):
        self.name, self.token, self.query, self.node, self.controller = name, token, query, node, controller
        self.events = self.bytes = self.requests = 0
        self.done = set()  # claims this watcher already wrote
        self.buf, self.pos, self.headers = bytearray(), 0, False

    def open(self, ctx, port, sel):
        # An informer lists, then watches from the list's resourceVersion.
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        conn.request("GET", CLAIMS + "?" + self.query, headers=self.hdrs())
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 200:
            raise SystemExit("bench-claims-watch: list %s: %d %s" % (self.name, r.status, body[:200]))
        self.requests += 1
        self.bytes += len(body)
        rv = json.loads(body)["metadata"]["resourceVersion"]
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        q = "%s&watch=1&allowWatchBookmarks=true&resourceVersion=%s" % (self.query, rv)
        req = "GET %s?%s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (CLAIMS, q)
        req += "".join("%s: %s\r\n" % kv for kv in self.hdrs().items())
        self.sock.sendall((req + "\r\n").encode())
        self.requests += 1
        self.sock.setblocking(False)
        sel.register(self.sock, selectors.EVENT_READ, self)

    def hdrs(self):
        return {"Authorization": "Bearer " + self.token, "Accept": "application/json",
                "User-Agent": "bench-%s/1.0" % self.name}

    def readable(self, on_event):
        got = False
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except (ssl.SSLWantReadError, BlockingIOError):
                return got
            if not data:
                raise SystemExit("bench-claims-watch: %s: the server closed the watch" % self.name)
            got = True
            self.bytes += len(data)
            self.feed(data, on_event)

    def feed(self, data, on_event):
        self.buf += data
        buf, pos = self.buf, self.pos
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
            size = int(buf[pos:nl], 16)
            if len(buf) < nl + 2 + size + 2:
                break
            if size:
                self.events += 1
                on_event(self, json.loads(buf[nl + 2:nl + 2 + size]))
            pos = nl + 4 + size
        del buf[:pos]
        self.pos = 0


def needs_condition(obj):
    results = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [r for r in results if r.get("driver") == DRIVER and CONDITION in (r.get("bindingConditions") or [])]


def child(p):
    ctx = ssl.create_default_context(cafile=p["ca"])
    port, nodes = p["url_port"], p["nodes"]
    patcher = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)

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

    sel = selectors.DefaultSelector()
    watchers = []
    for i in range(nodes):
        q = "" if p["design"] == "all" else "labelSelector=" + urllib.parse.quote("%s=%s" % (LABEL, node_name(i)))
        watchers.append(Watcher("agent-%d" % i, "agent-%d" % i, q, node=node_name(i)))
    if p["design"] == "labelled":
        watchers.append(Watcher("controller", "controller", "", controller=True))
    for w in watchers:
        w.open(ctx, port, sel)
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
            if key.data.readable(on_event):
                last = time.monotonic()
        if done_at is not None and time.monotonic() - max(last, done_at) > 1.0:
            break
    agents = [w for w in watchers if not w.controller]
    ctrl = [w for w in watchers if w.controller]
    out = {"agents": [{"events": w.events, "bytes": w.bytes, "requests": w.requests} for w in agents],
           "controller": [{"events": w.events, "bytes": w.bytes, "requests": w.requests} for w in ctrl],
           "client_cpu_s": time.process_time() - cpu0, "quiet": time.monotonic() - last}
    print(json.dumps(out), flush=True)
    return 0


# -- the report -----------------------------------------------------------------------

def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


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
            "requests, total": "%d" % r["server_requests"],
            "wall: create M claims (s)": "%.2f" % r["created_s"],
            "wall: all conditions set (s)": "%.2f" % r["ready_s"],
            "wall: until the streams are quiet (s)": "%.2f" % r["total_s"],
            "CPU: server + workload / watchers (s)": "%.1f / %.1f" % (r["server_cpu_s"], r["client_cpu_s"]),
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
    elif key == "requests, total":
        x, y = a["server_requests"], b["server_requests"]
    elif key.startswith("wall: until"):
        x, y = a["total_s"], b["total_s"]
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
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    if shutil.which("openssl") is None:
        print("bench-claims-watch: skipped, openssl is not installed")
        return 0
    rng = random.Random(5007)
    needing = {i for i in range(args.claims) if rng.random() < args.binding_fraction}
    print("bench-claims-watch: %d nodes (one agent each), %d claims over %d namespaces, %d (%.1f%%) with binding "
          "conditions; each claim ADDED allocated, conditioned if it needs it, then DELETED"
          % (args.nodes, args.claims, NAMESPACES, len(needing), 100.0 * len(needing) / max(args.claims, 1)))
    results = []
    for design in args.designs.split(","):
        started = time.monotonic()
        results.append(run(design, args, needing))
        print("  %s: %.1f s" % (design, time.monotonic() - started), flush=True)
    report(results)
    m, n, f = args.claims, args.nodes, len(needing) / max(args.claims, 1)
    print("(all: each agent gets every event, about M*(2+f) = %.0f; labelled: an agent gets ADDED, MODIFIED and "
          "DELETED of its own claims with binding conditions, about 3*f*M/N = %.1f, and the controller gets every "
          "event once. Creating the claims is slower under 'all' because the server fans each event out to every "
          "watch.)" % (m * (2 + f), 3 * f * m / n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
