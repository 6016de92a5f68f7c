# SPDX-License-Identifier: Apache-2.0
"""What a fleet of nrm instances costs the control plane, read from the real
API server: its audit log (level Metadata) counted per node and driver, its
/metrics (apiserver_request_total, the watch events' sizes, the objects and
the storage it holds), and the shape of nrm's slices per recorded machine.

The audit log names the node of every request made with a token bound to a
pod (user.extra authentication.kubernetes.io/node-name): each simulated
node's nrm has such a token, so no proxy stands between nrm and the server."""

import json
import os
import subprocess
import time

from prometheus_client.parser import text_string_to_metric_families

NODE_KEY = "authentication.kubernetes.io/node-name"
DRIVERS = ("cpu.nrm.io", "memory.nrm.io", "pci.nrm.io")
WRITES = ("create", "update", "patch", "delete", "deletecollection")
AUDIT_BATCH_S = 2.5  # the server writes its audit log in batches at most 1 s apart


def slices_of(nrm, topo, mode, drivers, version, node="node-0000"):
    """The ResourceSlices nrm publishes for a node of the recorded machine topo."""
    p = subprocess.run([nrm, "slices", "-t", topo, "--node-name", node, "--cpu-mode", mode, "--drivers", drivers,
                        "--kubernetes-version", version], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("fleetcost: nrm slices -t %s --cpu-mode %s: %s" % (topo, mode, p.stderr))
    return json.loads(p.stdout)["items"]


def shapes(nrm, topologies, version):
    """[{machine, mode, pci, objects, devices, bytes}] for each machine, CPU mode and with or without the PCI
    driver: the ResourceSlices `nrm slices` makes for a node, bytes as compact JSON (what a watch sends)."""
    rows = []
    for topo in topologies:
        for mode in ("numa", "partitioned"):
            for pci in (False, True):
                items = slices_of(nrm, topo, mode, "cpu,memory,pci" if pci else "cpu,memory", version)
                rows.append({"machine": os.path.basename(topo)[:-4], "mode": mode, "pci": pci,
                             "objects": len(items),
                             "devices": sum(len(s["spec"].get("devices", [])) for s in items),
                             "bytes": sum(len(json.dumps(s, separators=(",", ":"))) for s in items)})
    return rows


class Audit:
    """The audit log read as it grows (the offset kept: a fleet's log is large)."""

    def __init__(self, cluster):
        self.path = os.path.join(cluster.dir, "audit.log")
        self.pos = 0
        self.events = []
        self.seen = set()

    def read(self):
        if not os.path.exists(self.path):
            return self.events
        with open(self.path, "rb") as fh:
            fh.seek(self.pos)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line half written waits for the next read
        self.pos += end
        for line in data[:end].splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            # A watch is logged when it starts and again when it ends: counted once, when it starts.
            if e.get("stage") in ("ResponseStarted", "ResponseComplete") and e.get("auditID") not in self.seen:
                self.seen.add(e.get("auditID"))
                self.events.append(e)
        return self.events

    def mark(self):
        """An index past everything the server has done so far (its batch written)."""
        time.sleep(AUDIT_BATCH_S)
        return len(self.read())

    def since(self, mark, settle=True):
        if settle:
            time.sleep(AUDIT_BATCH_S)
        return self.read()[mark:]


def node_of(e):
    v = e.get("user", {}).get("extra", {}).get(NODE_KEY)
    return v[0] if v else None


def driver_of(e):
    """The nrm driver a request is for: the slice's name, or the driver its field selector names."""
    ref = e.get("objectRef", {})
    text = ref.get("name", "") + " " + e.get("requestURI", "")
    for d in DRIVERS:
        if d in text:
            return d
    return None


def kind_of(e):
    v = e["verb"]
    if v in WRITES:
        return "write"
    return v if v in ("list", "watch", "get") else "other"


def per_node(events, nodes, resource=None):
    """{node: {"all": n, "write": n, "list": n, "watch": n, "get": n, driver: n}} of the requests made with the
    nodes' tokens, every node present (0 where it made none); resource: only those on that resource."""
    out = {n: {"all": 0, "write": 0, "list": 0, "watch": 0, "get": 0, "other": 0, "refused": 0} for n in nodes}
    for e in events:
        n = node_of(e)
        if n not in out:
            continue
        if resource and e.get("objectRef", {}).get("resource") != resource:
            continue
        c = out[n]
        c["all"] += 1
        c[kind_of(e)] += 1
        # The server's priority and fairness turning a request away (it asks the client to wait and retry).
        if e.get("responseStatus", {}).get("code") == 429:
            c["refused"] += 1
        d = driver_of(e)
        if d:
            c[d] = c.get(d, 0) + 1
            if e.get("responseStatus", {}).get("code") == 429:
                c[d + " refused"] = c.get(d + " refused", 0) + 1
    return out


def last_request(events, nodes):
    """The wall-clock time (s) of the last request but a watch the nodes made, or None."""
    ts = [e["requestReceivedTimestamp"] for e in events if node_of(e) in nodes and e["verb"] != "watch"]
    return parse_time(max(ts)) if ts else None


def parse_time(s):
    """An audit timestamp (RFC 3339 with microseconds, UTC) in seconds since the epoch."""
    from datetime import datetime, timezone
    return datetime.strptime(s[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


class Metrics:
    """The API server's /metrics, parsed; deltas between two snapshots."""

    def __init__(self, cluster):
        s, text = cluster.api("GET", "/metrics", content_type="text/plain")
        if s != 200:
            raise SystemExit("fleetcost: GET /metrics answered %s" % s)
        self.samples = []
        for fam in text_string_to_metric_families(text if isinstance(text, str) else text.decode()):
            for smp in fam.samples:
                self.samples.append((smp.name, smp.labels, smp.value))

    def sum(self, name, **labels):
        return sum(v for n, lab, v in self.samples
                   if n == name and all(lab.get(k) == w for k, w in labels.items()))


def api_delta(before, after):
    """The server's own counts between two snapshots, for ResourceSlices."""
    rs = "resourceslices"
    out = {}
    for verb in ("LIST", "WATCH", "GET", "POST", "PUT", "PATCH", "DELETE"):
        out[verb.lower()] = after.sum("apiserver_request_total", resource=rs, verb=verb) \
            - before.sum("apiserver_request_total", resource=rs, verb=verb)
    # Watch events sent for slices, and their bytes (the histogram's sum).
    lab = {"group": "resource.k8s.io", "resource": rs}
    out["watch_events"] = after.sum("apiserver_watch_events_total", **lab) \
        - before.sum("apiserver_watch_events_total", **lab)
    out["watch_event_bytes"] = after.sum("apiserver_watch_events_sizes_sum", **lab) \
        - before.sum("apiserver_watch_events_sizes_sum", **lab)
    return out


def stored(cluster, m):
    """What the server holds: ResourceSlice objects and their bytes as JSON (listed now: the server's own
    object count is updated once a minute), and the storage's (etcd's) size in bytes."""
    items = cluster.slices()
    return {"slices": len(items), "slice_bytes": sum(len(json.dumps(x, separators=(",", ":"))) for x in items),
            "db_bytes": m.sum("apiserver_storage_size_bytes")}


def quiet(audit, nodes, since_mark, t_from, quiet_s=5.0, timeout=600.0, ready=lambda: True):
    """Waits until ready() and the nodes made no request but watches for quiet_s; returns the seconds from t_from
    (wall clock) to their last such request (0 when none), or None at the timeout."""
    nodes = set(nodes)
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(1.0)
        events = audit.since(since_mark, settle=False)
        last = last_request(events, nodes)
        # The audit batch may lag by a second: quiet only once the log has caught up past quiet_s.
        if ready() and time.time() - max(last or t_from, t_from) >= quiet_s + AUDIT_BATCH_S:
            return max(0.0, (last or t_from) - t_from)
    return None


def per_driver_max(counts, drivers, served=False):
    """The most requests any node made for any one driver (served: those the server did not turn away with 429)."""
    return max((c.get(d, 0) - (c.get(d + " refused", 0) if served else 0) for c in counts.values() for d in drivers),
               default=0)


def table(counts, keys):
    """median/max over the nodes of each key."""
    import statistics
    out = {}
    for k in keys:
        v = [c.get(k, 0) for c in counts.values()]
        out[k] = (statistics.median(v), max(v)) if v else (0, 0)
    return out
