#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin against the real kube-apiserver (1.36 defaults), with the
DaemonSet's identity (a token bound to its pod on the node) and the RBAC of
deploy/kubernetes/nrm.yaml: ResourceSlice publishing and repair, claims read
from the API, and what goes wrong on the way (an API-server restart, expired
watches, a token that stops being valid, errors, timeouts, a feature gate off
in the server, a CA that is not the server's). Every check reads back what
the real server holds, its audit log, or what nrm answered over its sockets.

nrm reaches the server through faultproxy.py, which passes everything
through and injects, when told, what a real server cannot be made to do at
a chosen moment: two HTTP 500s, one answer held past nrm's 10 s timeout, a
410 Expired on every open watch. The claims nrm prepares are given their
allocation by the test's admin through the status subresource (the real
server validates it), where a precise device is needed; the scheduler's own
allocations are test-claims.py's."""

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (BUILDDIR, DRA_CLIENT, HERE, MANIFEST, NAMESPACE, NRM, TOPOLOGIES, Cluster,  # noqa: E402
                        NrmPlugin, binaries, check, finish, skip, slice_pairs, wait_for, workdir)
from faultproxy import FaultProxy, lists  # noqa: E402

CPU, MEM, EXAMPLE = "cpu.nrm.io", "memory.nrm.io", "example.nrm.io"
NODE, OTHER = "node-a", "node-b"
if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
EXAMPLE_DIR = os.environ.get("NRM_EXAMPLE_DRIVER_DIR", os.path.join(BUILDDIR, "driver", "example"))
if not os.path.exists(os.path.join(EXAMPLE_DIR, "nrm-driver-example.so")):
    skip("no example driver in %s (make check builds it)" % EXAMPLE_DIR)

# A machine with 2+ NUMA nodes and 10+ CPUs a node: more than one device a pool.
TOPO = None
for f in sorted(os.listdir(TOPOLOGIES)):
    path = os.path.join(TOPOLOGIES, f)
    if f.endswith(".xml") and "numa" not in f and os.path.getsize(path) < 200000:
        with open(path) as fh:
            text = fh.read()
        if text.count('type="NUMANode"') >= 2 and text.count('type="PU"') >= 24:
            TOPO = path
            break

bindir = binaries()
work = workdir()
cluster = Cluster(work, "api", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 64, 128 << 30), (OTHER, 64, 128 << 30)])
proxy = FaultProxy(cluster)
PDIR = os.path.join(work, "plugin")
exits = []


def plugin(*settings, more=(), env=None, kubeconfig=True, via_proxy=True):
    """nrm plugin for node-a in one folder (its state, kubelet and CDI
    folders kept from run to run), through the proxy unless told not."""
    p = NrmPlugin(cluster, NODE, work, ["-t", TOPO] + list(settings), proxy=proxy if via_proxy else None)
    p.dir = PDIR
    p.start(*more, env=env, kubeconfig=kubeconfig)
    wait_for(lambda: p.http("/healthz")[0], 15)
    return p


def stop(p):
    rc = p.stop()
    exits.append((rc, p.log))
    return rc


def published(driver):
    return cluster.slices(NODE, driver)


def matches(p, driver):
    """The server holds exactly p's desired slices of driver, one generation."""
    want = [w for w in p.sent() if w["spec"]["driver"] == driver]
    have = published(driver)
    if len(want) != len(have) or len({h["spec"]["pool"]["generation"] for h in have}) != 1:
        return False
    for w, hs in slice_pairs(want, have):
        if len(hs) != 1:
            return False
        a, b = json.loads(json.dumps(w["spec"])), json.loads(json.dumps(hs[0]["spec"]))
        a["pool"].pop("generation", None)
        b["pool"].pop("generation", None)
        if a != b:
            return False
    return True


def generation(driver):
    gens = {s["spec"]["pool"]["generation"] for s in published(driver)}
    return max(gens) if gens else None


def synced(p, *drivers):
    return all(p.metric("nrm_slices_synced", d) == 1 for d in drivers or (CPU, MEM))


def writes(mark, what=""):
    """nrm's writes in the audit log since mark (whose path has what)."""
    time.sleep(2)  # the audit log's batch
    return [e for e in cluster.writes(mark) if what in e.get("requestURI", "")]


def delete_slice(name):
    s, _ = cluster.api("DELETE", "/apis/resource.k8s.io/v1/resourceslices/" + name)
    return s == 200


def status_json(*settings):
    return json.loads(subprocess.run([NRM, "status", "--json", "-t", TOPO, "--node-name", NODE, "--state-dir",
                                      os.path.join(PDIR, "state")] + list(settings), check=True,
                                     capture_output=True, text=True).stdout)


def claim_obj(name, requests):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name},
            "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": c}} for r, c in requests]}}}


def share():
    return str(uuid.uuid4())


# --- publishing ------------------------------------------------------------------
p = plugin()
check(wait_for(lambda: matches(p, CPU) and matches(p, MEM), 60),
      "the desired CPU and memory slices are published and read back as sent")
node_uid = cluster.api("GET", "/api/v1/nodes/" + NODE)[1]["metadata"]["uid"]
owner = published(CPU)[0]["metadata"].get("ownerReferences", [{}])[0]
check(owner.get("kind") == "Node" and owner.get("name") == NODE and owner.get("uid") == node_uid
      and owner.get("controller") is True, "slices are owned by the Node (kind, name, uid, controller)")
mine = cluster.slices(NODE)
check(all(s["spec"]["nodeName"] == NODE and s["spec"]["pool"]["name"] == NODE for s in mine),
      "spec.nodeName and the pool name are the node's")
check(all(s["spec"]["pool"]["resourceSliceCount"] == len(published(s["spec"]["driver"])) for s in mine),
      "resourceSliceCount counts the pool's slices")
check(any("spec.nodeName=" + NODE in r["query"].get("fieldSelector", "")
          and "spec.driver=" + CPU in r["query"].get("fieldSelector", "")
          for r in lists(proxy.requests, "resourceslices")),
      "slices are listed with field selectors for node and driver")
check(wait_for(lambda: synced(p), 30), "/metrics reports both pools in sync")
check(p.metric("nrm_api_connected") == 1, "/metrics reports the API connected")
status, body = p.http("/healthz")
check(status == 200 and body.strip() == "ok", "/healthz answers ok")
status, body = p.http("/readyz")
check(status == 503 and "not registered" in body, "/readyz says why it is not ready (no kubelet registered it)")
_, body = p.http("/metrics")
bad = [ln for ln in body.splitlines()
       if ln and not re.match(r'^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$', ln)
       and not re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? '
                        r'(-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$', ln)]
check(not bad and "nrm_claim_operation_duration_seconds_bucket" in body,
      "/metrics parses as Prometheus text%s" % (": " + bad[0] if bad else ""))

# --- a restart adopts what is there ------------------------------------------------
gen0 = generation(CPU)
check(stop(p) == 0, "SIGTERM stops the plugin cleanly")
check(matches(p, CPU), "the slices stay when the plugin stops")
mark = len(cluster.audit())
p = plugin()
check(wait_for(lambda: synced(p), 30), "a restarted plugin is in sync")
w = writes(mark)
check(not w and generation(CPU) == gen0, "a restart adopts the slices: no write in the audit log (%d), same "
      "generation" % len(w))

# --- a quiet watch stays open ------------------------------------------------------------------
# Where nothing changes the server's bookmarks stop, and a watch sends
# nothing until its timeoutSeconds (300 s or more): it must not be taken
# for dead before that (nrm once cut such watches after 120 s, logged an
# error and listed again).
n_req = len(proxy.requests)
quiet_from = len(p.text())
proxy.quiet = True
time.sleep(135)
proxy.quiet = False
check(not lists(proxy.requests[n_req:], "resourceslices") and "Operation too slow" not in p.text()[quiet_from:],
      "135 s with nothing changing: no watch ended as dead, no new list (%d lists)"
      % len(lists(proxy.requests[n_req:], "resourceslices")))

# --- a watch turned away (429, injected) is opened again, with no list --------------------------
# The server's priority and fairness answers part of a fleet's restart
# with 429: the history is not gone, so the watch resumes where it was.
stop(p)
n_req = len(proxy.requests)
proxy.fail_next(2, code=429, method="GET", path_contains="&watch=true")


def after_refused():
    """For each watch answered 429: whether the next request of its stream was a watch from the same
    resourceVersion (None while there is none)."""
    reqs = proxy.requests[n_req:]
    out = []
    for k, r in enumerate(reqs):
        if r["watch"] and r["status"] == 429:
            key = (r["path"], r["query"].get("fieldSelector"), r["query"].get("labelSelector"))
            nxt = [x for x in reqs[k + 1:]
                   if (x["path"], x["query"].get("fieldSelector"), x["query"].get("labelSelector")) == key]
            out.append(nxt[0]["watch"] and nxt[0]["query"].get("resourceVersion") == r["query"].get("resourceVersion")
                       if nxt else None)
    return out


p = plugin()
check(wait_for(lambda: synced(p), 30) and wait_for(lambda: len(after_refused()) == 2 and None not in after_refused(),
                                                   30),
      "two watches answered 429 at start")
check(all(after_refused()), "each is opened again from its resourceVersion, with no list in between (%s)"
      % after_refused())

# --- a configuration change ---------------------------------------------------------
stop(p)
mem_before = [(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in published(MEM)]
p = plugin("--cpu-mode", "partitioned")
check(wait_for(lambda: matches(p, CPU), 60), "--cpu-mode partitioned republishes the CPU pool")
warned = "cpu.mode partitioned and the API server is 1.36" in p.text()
check(warned == (cluster.minor <= 36), "partitioned mode on a 1.%d server: %s its scheduler's cost with nodes (%s)"
      % (cluster.minor, "warns of" if cluster.minor <= 36 else "no warning of", "warned" if warned else "no warning"))
check(generation(CPU) > gen0, "the change bumped the pool generation (%s -> %s)" % (gen0, generation(CPU)))
check([(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in published(MEM)] == mem_before,
      "the memory pool was left alone (same names and resourceVersions)")

# nrm status follows the shared counters: an L3 device held makes its NUMA
# node's device unavailable, not the other node's.
devs = {d["name"]: d for s in published(CPU) for d in s["spec"].get("devices", [])}
l3 = sorted(n for n in devs if n.startswith("l3-"))[0]
l3_set = devs[l3]["consumesCounters"][0]["counterSet"]
c = cluster.allocate(claim_obj("l3", [("l3", CPU)]), NODE, [("l3", CPU, NODE, l3)])
ok, out = p.prepare(CPU, c)
st = status_json("--cpu-mode", "partitioned")
pool = [pl for pl in st["pools"] if pl["driver"] == CPU][0]
avail = {d["name"]: d["available"] for d in pool["devices"]}
same = [n for n, d in devs.items() if n.startswith("numa") and d["consumesCounters"][0]["counterSet"] == l3_set]
other = [n for n, d in devs.items() if n.startswith("numa") and d["consumesCounters"][0]["counterSet"] != l3_set]
check(ok and pool["allocatedDevices"] == 1 and pool["unavailableDevices"] > 0
      and pool["totalDevices"] == pool["allocatedDevices"] + pool["availableDevices"] + pool["unavailableDevices"]
      and same and not any(avail[n] for n in same) and other and all(avail[n] for n in other),
      "nrm status: %s held makes %s unavailable, %s stay available (%d unavailable; %s)"
      % (l3, same, other, pool["unavailableDevices"], out[:100]))
check(p.unprepare(CPU, c), "the L3 claim is unprepared")
stop(p)
p = plugin()
check(wait_for(lambda: matches(p, CPU), 60), "back to numa mode: surplus slices deleted, the pool matches again")

# --- repair of outside changes --------------------------------------------------------
gen1 = generation(CPU)
check(delete_slice(published(CPU)[0]["metadata"]["name"]) and wait_for(lambda: matches(p, CPU), 30),
      "a slice deleted by someone else comes back")
check(generation(CPU) > gen1, "...with a new generation")
s_mem = published(MEM)[0]
s_mem["spec"]["devices"][0]["attributes"]["numaNode"] = {"int": 999}
code, _ = cluster.api("PUT", "/apis/resource.k8s.io/v1/resourceslices/" + s_mem["metadata"]["name"], s_mem)
check(code == 200 and wait_for(lambda: matches(p, MEM), 30), "a slice changed by someone else is put right")

# --- the real API server restarts under the watches ---------------------------------------
subprocess.run([os.path.join(HERE, "control-plane.sh"), "restart-apiserver", cluster.dir], check=True,
               stdout=subprocess.DEVNULL)
check(delete_slice(published(CPU)[0]["metadata"]["name"]) and wait_for(lambda: matches(p, CPU), 60),
      "after an API-server restart the watch resumes and repairs")

# --- expired watches (410, injected) ----------------------------------------------------------
n_req = len(proxy.requests)
ended = proxy.expire_watches()
check(ended >= 2 and delete_slice(published(MEM)[0]["metadata"]["name"]) and wait_for(lambda: matches(p, MEM), 30),
      "after an expired watch (410 on %d watches) the plugin lists again and repairs" % ended)
# The watch may carry the deletion before the 410 reaches it: the relist
# comes after the repair then.
check(wait_for(lambda: lists(proxy.requests[n_req:], "resourceslices"), 10), "the 410 was answered with a relist")

# --- a list that fails past the client's 5 tries -----------------------------------------------
# The CPU publisher's relist gets 500 five times: one failed request, one
# problem logged, both counted in /metrics; the next attempt repairs.
api_errs = p.metric("nrm_api_request_errors_total", CPU)
pub_errs = p.metric("nrm_slices_publish_errors_total", CPU)
proxy.fail_next(5, code=500, method="GET", path_contains="spec.driver%3D" + CPU)
proxy.expire_watches()
counted = wait_for(lambda: p.metric("nrm_api_request_errors_total", CPU) > api_errs
                   and p.metric("nrm_slices_publish_errors_total", CPU) > pub_errs, 60, 0.5)
check(counted and delete_slice(published(CPU)[0]["metadata"]["name"]) and wait_for(lambda: matches(p, CPU), 30),
      "a list failed 5 times: nrm_api_request_errors_total %s -> %s, nrm_slices_publish_errors_total %s -> %s; "
      "the slices are repaired" % (api_errs, p.metric("nrm_api_request_errors_total", CPU), pub_errs,
                                   p.metric("nrm_slices_publish_errors_total", CPU)))

# --- the token stops being valid, the kubelet writes a new one ------------------------------
# The token is bound to the DaemonSet's pod: the pod replaced, the old token
# is refused (401) and the kubelet writes the new pod's token to the file.
token_file = os.path.join(PDIR, "kubeconfig.token")
old_token = open(token_file).read().strip()
old_pod = cluster.nrm_pod(NODE)
cluster.delete_pods(NAMESPACE, old_pod)
new_pod = wait_for(lambda: (lambda n: n if n and n != old_pod else None)(cluster.nrm_pod(NODE, 1)), 60, 0.5)
cluster.nrm_kubeconfig(NODE, os.path.join(work, "rotated"), pod=new_pod)
new_token = open(os.path.join(work, "rotated.token")).read().strip()


def old_token_answer():
    req = urllib.request.Request(cluster.env["API_URL"] + "/api/v1/nodes/" + NODE,
                                 headers={"Authorization": "Bearer " + old_token})
    try:
        # The CA only: the admin's client certificate would authenticate it.
        urllib.request.urlopen(req, context=ssl.create_default_context(cafile=cluster.ca), timeout=10)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


# The server caches a token's review for a few seconds.
refused = wait_for(lambda: old_token_answer() == 401, 60, 1) and 401
os.rename(os.path.join(work, "rotated.token"), token_file)
proxy.expire_watches()  # the watches opened with the old token end
check(refused == 401 and delete_slice(published(CPU)[0]["metadata"]["name"])
      and wait_for(lambda: matches(p, CPU), 30),
      "the old pod's token refused (%s), the new one read from the rotated file: the slice is repaired" % refused)
check(old_token not in p.text() and new_token not in p.text(), "tokens never appear in the log")

# --- claims from the API ---------------------------------------------------------------------
pool_dev = published(CPU)[0]["spec"]["devices"][0]["name"]


def cpu_claim(name, device=pool_dev, cpus="2"):
    return cluster.allocate(claim_obj(name, [("cpus", CPU)]), NODE, [
        ("cpus", CPU, NODE, device, {"consumedCapacity": {"cpus": cpus}, "shareID": share()})])


def dra(name, uid):
    return subprocess.run([DRA_CLIENT, "prepare", p.socket(CPU), "default", name, uid], capture_output=True,
                          text=True)


good = cpu_claim("good")
r = dra("good", good["metadata"]["uid"])
check(r.returncode == 0 and "%s/claim=%s" % (CPU, good["metadata"]["uid"]) in r.stdout,
      "a claim read from the API is prepared")
_, pending = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                         claim_obj("pending", [("cpus", CPU)]))
r = dra("pending", pending["metadata"]["uid"])
check(r.returncode != 0 and "not allocated" in r.stderr, "an unallocated claim is refused: " + r.stderr.strip())
replaced = cpu_claim("replaced")
r = dra("replaced", str(uuid.uuid4()))
check(r.returncode != 0 and "replaced" in r.stderr, "a claim whose UID changed is refused: " + r.stderr.strip())
r = dra("missing", str(uuid.uuid4()))
check(r.returncode != 0 and "not found" in r.stderr, "a missing claim is named: " + r.stderr.strip())
flaky = cpu_claim("flaky")
proxy.fail_next(2, code=500, method="GET", path_contains="resourceclaims")
r = dra("flaky", flaky["metadata"]["uid"])
check(r.returncode == 0, "two 500s in a row are retried with backoff")
slow = cpu_claim("slow")
proxy.delay_next(1, 12, method="GET", path_contains="resourceclaims")
t0 = time.time()
r = dra("slow", slow["metadata"]["uid"])
check(r.returncode == 0 and time.time() - t0 < 25, "a request that times out (10 s) is tried again (%.1f s)"
      % (time.time() - t0))
# One claim holding a shareable device twice counts once, with its CPUs.
twice = cluster.allocate(claim_obj("twice", [("a", CPU), ("b", CPU)]), NODE, [
    (n, CPU, NODE, pool_dev, {"consumedCapacity": {"cpus": "1"}, "shareID": share()}) for n in ("a", "b")])
r = dra("twice", twice["metadata"]["uid"])
dev = [d for pl in status_json()["pools"] if pl["driver"] == CPU for d in pl["devices"] if d["name"] == pool_dev][0]
held = sorted(c["metadata"]["uid"] for c in (good, flaky, slow, twice))
check(r.returncode == 0 and dev["consumed"] == "8" and sorted(dev["claims"]) == held,
      "nrm status counts a device held twice by one claim once (%s CPUs, %d claims)"
      % (dev["consumed"], len(dev["claims"])))
errs = p.metric("nrm_claim_errors_total", CPU, operation="prepare", kind="not_found")
check(errs == 1, "/metrics counts the missing claim as not_found (%s)" % errs)
# A device the pool does not have: the server does not check, nrm does.
nd = cpu_claim("nodevice", device="numa99")
r = dra("nodevice", nd["metadata"]["uid"])
check(r.returncode != 0 and "numa99" in r.stderr
      and p.metric("nrm_claim_errors_total", CPU, operation="prepare", kind="not_found") == 2,
      "a claim on an unknown device is refused, named and counted as not_found: " + r.stderr.strip())


# The scheduler takes the first CPU device with room: the fullest is listed first.
def cpu_order():
    return [d["name"] for s in published(CPU) for d in s["spec"].get("devices", [])
            if d.get("allowMultipleAllocations") and not d["name"].endswith("-isolated")]


order0 = cpu_order()
other = order0[1]
gen_o = generation(CPU)
o = cpu_claim("other", device=other, cpus="10")
r = dra("other", o["metadata"]["uid"])
check(r.returncode == 0 and wait_for(lambda: cpu_order()[0] == other, 20) and generation(CPU) > gen_o,
      "10 CPUs held on %s, 8 on %s: %s is listed first, in a new generation (%s)"
      % (other, pool_dev, other, cpu_order()))
check(p.unprepare(CPU, o) and wait_for(lambda: cpu_order() == order0, 20),
      "...and the first order is back when the claim goes")
mark = len(cluster.audit())
time.sleep(6)
check(not writes(mark), "nothing is written while nothing changes (the audit log, 6 s)")
for c in (good, flaky, slow, twice):
    p.unprepare(CPU, c)
stop(p)

# --- a PodGroup's claim, with device metadata ------------------------------------------------
# One claim for the pods of a group (KEP-5729): its reservedFor names the
# PodGroup; the kubelet prepares it once on the node, and any later call gets
# the same answer. The container's metadata file (KEP-5304) is there for it,
# and goes with the claim.
p = plugin("--device-metadata")
check(wait_for(lambda: synced(p), 30), "a plugin with --device-metadata is in sync")
mem_dev = [d["name"] for s in published(MEM) for d in s["spec"].get("devices", [])
           if "memory" in d.get("capacity", {})][0]
group = cluster.allocate(claim_obj("group", [("mem", MEM)]), NODE, [
    ("mem", MEM, NODE, mem_dev, {"consumedCapacity": {"memory": "64Mi"}, "shareID": share()})],
    status={"reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers",
                             "uid": str(uuid.uuid4())}]})
gid = group["metadata"]["uid"]
check([x.get("resource") for x in group["status"].get("reservedFor", [])] == ["podgroups"],
      "the real server keeps a PodGroup in reservedFor")
r1 = subprocess.run([DRA_CLIENT, "prepare", p.socket(MEM), "default", "group", gid], capture_output=True, text=True)
r2 = subprocess.run([DRA_CLIENT, "prepare", p.socket(MEM), "default", "group", gid], capture_output=True, text=True)
check(r1.returncode == 0 and r1.stdout == r2.stdout and "%s/metadata=%s_mem" % (MEM, gid) in r1.stdout,
      "a PodGroup claim from the API is prepared once, answered the same again, with its metadata id: "
      + r1.stdout.strip().replace("\n", " "))
meta = os.path.join(PDIR, "kubelet", "plugins", MEM, "dra-device-metadata", "default_group", "mem", "metadata.json")
doc = json.load(open(meta)) if os.path.exists(meta) else {}
mdev = (doc.get("requests") or [{}])[0].get("devices", [{}])[0]
check(doc.get("kind") == "DeviceMetadata" and doc.get("metadata", {}).get("uid") == gid
      and mdev.get("name") == mem_dev and mdev.get("attributes", {}).get("bytes", {}).get("int") == 64 << 20,
      "...its metadata file names the device and the 64Mi it holds there (%s)" % mdev)
check(status_json()["claims"].get(gid, {}).get("podGroup") == "trainers", "nrm status names the claim's PodGroup")
check(p.unprepare(MEM, group), "the PodGroup claim is unprepared")
check(not os.path.exists(meta) and not os.path.exists(os.path.join(p.cdi_dir(), "%s_metadata_%s_mem.json"
                                                                    % (MEM, gid))),
      "...and its metadata goes with it")
stop(p)

# --- CPUs that go offline taint their device -------------------------------------------
fsroot = os.path.join(work, "fsroot")
online = os.path.join(fsroot, "sys", "devices", "system", "cpu", "online")
os.makedirs(os.path.dirname(online))
with open(online, "w") as fh:
    fh.write("0-127\n")
p = plugin("--fsroot", fsroot, more=["--allow-no-cpuset"])  # a sysfs-only tree
check(wait_for(lambda: synced(p), 30), "a plugin with a CPU online file is in sync")
gen_t = generation(CPU)


def device(name, driver=CPU):
    return [d for s in published(driver) for d in s["spec"].get("devices", []) if d["name"] == name][0]


with open(online + ".new", "w") as fh:
    fh.write("0-4,6-127\n")
os.rename(online + ".new", online)
check(wait_for(lambda: device("numa0").get("taints"), 20), "CPU 5 offline: its device gets a taint")
t = device("numa0").get("taints", [{}])[0]
check(t.get("key") == CPU + "/cpus-offline" and t.get("effect") == "NoSchedule" and not device("numa1").get("taints")
      and generation(CPU) > gen_t, "...%s:%s on numa0 only, in a new generation" % (t.get("key"), t.get("effect")))
check("went offline; tainted" in p.text(), "...and the log says why")
with open(online + ".new", "w") as fh:
    fh.write("0-127\n")
os.rename(online + ".new", online)
check(wait_for(lambda: not device("numa0").get("taints"), 20), "back online: the taint goes")
stop(p)

# --- a shared-object driver's health taints its devices too -------------------------------
ex_root = os.path.join(work, "fsroot-example")
os.makedirs(ex_root)
p = plugin("--drivers", "example", "--driver-dir", EXAMPLE_DIR, "--fsroot", ex_root, more=["--allow-no-cpuset"])
check(wait_for(lambda: synced(p, EXAMPLE) and len(published(EXAMPLE)) == 1, 30),
      "the example driver (a shared object) publishes its slice")
check([d["name"] for d in published(EXAMPLE)[0]["spec"]["devices"]] == ["dev0", "dev1", "dev2", "dev3"],
      "...with its four devices")
with open(os.path.join(ex_root, "example-unhealthy"), "w") as fh:
    fh.write("dev1\n")
check(wait_for(lambda: device("dev1", EXAMPLE).get("taints"), 20), "dev1 listed unhealthy: it gets a taint")
t = device("dev1", EXAMPLE).get("taints", [{}])[0]
check(t.get("key") == EXAMPLE + "/unhealthy" and t.get("effect") == "NoExecute"
      and not any(device(n, EXAMPLE).get("taints") for n in ("dev0", "dev2", "dev3")),
      "...%s:%s on dev1 only" % (t.get("key"), t.get("effect")))
os.unlink(os.path.join(ex_root, "example-unhealthy"))
check(wait_for(lambda: not device("dev1", EXAMPLE).get("taints"), 20), "healthy again: the taint goes")
stop(p)

# --- binding conditions: nrm controller labels, the node's binder writes -------------------
# The example driver's dev3 binds to its node with the condition
# example.nrm.io/ready. nrm.yaml grants the binder's driver permission for
# cpu.nrm.io and memory.nrm.io only: first the write is refused, then the
# test adds example.nrm.io as docs/kubernetes-api.md tells an operator to.
bind_root = os.path.join(work, "bind-root")
os.makedirs(bind_root)
ctl_pod = wait_for(lambda: next((x["metadata"]["name"] for x in cluster.api(
    "GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io/component%%3Dcontroller" % NAMESPACE)[1]
    .get("items", []) if x["spec"].get("nodeName")), None), 120, 0.5)
ctl_kc = cluster.nrm_kubeconfig(None, os.path.join(work, "controller.kubeconfig"), account="nrm-controller",
                                pod=ctl_pod)


def node_selector(*nodes):
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                                  for n in nodes]}


def binding_claim(name, node, selector=None):
    return cluster.allocate(claim_obj(name, [("dev", EXAMPLE)]), node, [
        ("dev", EXAMPLE, node, "dev3", {"bindingConditions": [EXAMPLE + "/ready"],
                                        "bindingFailureConditions": [EXAMPLE + "/failed"]})], selector=selector)


def label(name):
    return (cluster.claim("default", name) or {}).get("metadata", {}).get("labels", {}).get("nrm.io/node")


def conditions(name):
    for d in (cluster.claim("default", name) or {}).get("status", {}).get("devices", []):
        if d.get("driver") == EXAMPLE and d.get("device") == "dev3":
            return {c["type"]: c for c in d.get("conditions", [])}
    return {}


def lease_holder():
    s, lease = cluster.api("GET", "/apis/coordination.k8s.io/v1/namespaces/%s/leases/nrm-controller" % NAMESPACE)
    return lease.get("spec", {}).get("holderIdentity") if s == 200 else None


class Controller:
    def __init__(self, pod):
        self.log = os.path.join(work, "controller-%s.log" % pod)
        self.p = subprocess.Popen([NRM, "controller", "--kubeconfig", ctl_kc, "--drivers", "example",
                                   "--driver-dir", EXAMPLE_DIR, "--lease-namespace", NAMESPACE,
                                   "--log-level", "debug"], stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                  env=dict(os.environ, POD_NAME=pod))

    def text(self):
        with open(self.log) as fh:
            return fh.read()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


c1 = Controller("ctrl-1")
check(wait_for(lambda: lease_holder() == "ctrl-1", 30), "nrm controller takes the lease %s/nrm-controller"
      % NAMESPACE)
c2 = Controller("ctrl-2")
ex_args = ("--drivers", "example", "--driver-dir", EXAMPLE_DIR, "--fsroot", bind_root)
p = plugin(*ex_args, more=["--allow-no-cpuset"])
check(wait_for(lambda: synced(p, EXAMPLE), 30), "the node agent publishes the example pool")
dev3 = device("dev3", EXAMPLE)
check(dev3.get("bindsToNode") is True and dev3.get("bindingConditions") == [EXAMPLE + "/ready"],
      "dev3 is published with bindsToNode and its binding condition, kept by the real server")
# Without the driver's permission: the server refuses, nothing is written.
binding_claim("bind-denied", NODE)
check(wait_for(lambda: "changing status.devices requires" in p.text(), 30) and conditions("bind-denied") == {},
      "nrm.yaml's RBAC has no resourceclaims/driver for example.nrm.io: the write is refused, named in the log "
      "(%s), and nothing is written" % next((ln[24:200] for ln in p.text().splitlines()
                                             if "status.devices" in ln), "?"))
stop(p)
cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "nrm-example"},
     "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
                "resourceNames": [EXAMPLE], "verbs": ["associated-node:patch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "nrm-example"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nrm-example"},
     "subjects": [{"kind": "ServiceAccount", "name": "nrm", "namespace": NAMESPACE}]}]}))
p = plugin(*ex_args, more=["--allow-no-cpuset"])
binding_claim("bind-a", NODE)
check(wait_for(lambda: label("bind-a") == NODE, 30), "the controller labels a claim waiting on node-a's device")
check(wait_for(lambda: conditions("bind-a").get(EXAMPLE + "/ready", {}).get("status") == "True", 30),
      "with the driver's permission, the node's binder makes the device ready: %s" % conditions("bind-a"))
ready = conditions("bind-a").get(EXAMPLE + "/ready", {})
check(ready.get("reason") == "Ready" and ready.get("lastTransitionTime"),
      "...with a reason and a transition time (%s)" % ready)
check("labelled" not in c2.text(), "the standby controller labels nothing")
mark = len(cluster.audit())
time.sleep(3)
check(not writes(mark, "bind-a") and not [e for e in cluster.writes(mark, user="system:serviceaccount:%s:nrm-"
                                                                             "controller" % NAMESPACE)
                                           if "bind-a" in e.get("requestURI", "")],
      "a settled claim is not written again")
binding_claim("bind-b", OTHER)
check(wait_for(lambda: label("bind-b") == OTHER, 30), "a claim of node-b gets node-b's label")
binding_claim("bind-two", NODE, node_selector(NODE, OTHER))
time.sleep(3)
check(conditions("bind-b") == {} and label("bind-two") is None and conditions("bind-two") == {},
      "node-a's binder leaves node-b's claim alone, and nobody takes a claim of two nodes")
with open(os.path.join(bind_root, "example-unhealthy"), "w") as fh:
    fh.write("dev3\n")
binding_claim("bind-bad", NODE)
check(wait_for(lambda: conditions("bind-bad").get(EXAMPLE + "/failed", {}).get("status") == "True", 30),
      "a device that cannot be made ready reports its failure condition: %s" % conditions("bind-bad"))
os.unlink(os.path.join(bind_root, "example-unhealthy"))
stop(p)
# Leadership moves: the leader gives the lease up at SIGTERM, the standby
# takes it and labels the next claim.
check(c1.stop() == 0, "the leader stops with status 0 at SIGTERM")
check(wait_for(lambda: lease_holder() == "ctrl-2", 30), "the standby takes the lease over")
binding_claim("bind-later", NODE)
check(wait_for(lambda: label("bind-later") == NODE, 30), "...and labels the next claim")
check(c2.stop() == 0, "the second controller stops with status 0")
check("Callback aborted" not in c1.text() + c2.text(), "the controllers stop without spurious errors")

# --- in-cluster settings ------------------------------------------------------------------------
sa = os.path.join(work, "serviceaccount")
os.makedirs(sa)
shutil.copy(cluster.ca, os.path.join(sa, "ca.crt"))
cluster.nrm_kubeconfig(NODE, os.path.join(work, "incluster"))
shutil.copy(os.path.join(work, "incluster.token"), os.path.join(sa, "token"))
env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(cluster.port),
           NRM_SERVICE_ACCOUNT_DIR=sa)
for s in cluster.slices(NODE):
    delete_slice(s["metadata"]["name"])
p = plugin(more=["--http-address", ":0"], env=env, kubeconfig=False, via_proxy=False)
check(wait_for(lambda: matches(p, CPU) and matches(p, MEM), 60),
      "in a pod (service account settings, no kubeconfig) it publishes too")
# ":PORT" listens on every address: IPv4 and, where the machine has it, IPv6.
check(p.http("/healthz")[0] == 200, "--http-address :PORT answers on 127.0.0.1")
try:
    socket.create_connection(("::1", p.port), timeout=2).close()
    have6 = True
except OSError:
    have6 = os.path.exists("/proc/net/if_inet6") and "00000000000000000000000000000001" in open(
        "/proc/net/if_inet6").read()
    check(not have6, "--http-address :PORT answers on [::1] too")
if have6:
    with urllib.request.urlopen("http://[::1]:%d/healthz" % p.port, timeout=5) as resp:
        check(resp.status == 200, "--http-address :PORT answers on [::1] too")
stop(p)

# --- bad settings --------------------------------------------------------------------------------
bad = os.path.join(work, "bad-kubeconfig")
with open(bad, "w") as fh:
    fh.write("apiVersion: v1\nkind: Config\ncurrent-context: x\n")
r = subprocess.run([NRM, "plugin", "-t", TOPO, "--kubeconfig", bad, "--state-dir", os.path.join(work, "s2"),
                    "--create-state-dir", "--kubelet-dir", os.path.join(work, "k2"), "--cdi-dir",
                    os.path.join(work, "c2")], capture_output=True, text=True, timeout=30)
check(r.returncode == 1 and bad in r.stderr and "context `x` not found" in r.stderr,
      "a broken kubeconfig is named: " + r.stderr.strip())
untrusted = os.path.join(work, "untrusted-kubeconfig")
kc = json.load(open(cluster.nrm_kubeconfig(NODE, os.path.join(work, "trusted"))))
other_ca = os.path.join(work, "other-ca.pem")
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", os.path.join(work, "o.key"),
                "-out", other_ca, "-days", "1", "-subj", "/CN=other"], check=True, capture_output=True)
kc["clusters"][0]["cluster"]["certificate-authority"] = other_ca
with open(untrusted, "w") as fh:
    json.dump(kc, fh)
mark = len(cluster.audit())
log = os.path.join(work, "untrusted.log")
u = subprocess.Popen([NRM, "plugin", "-t", TOPO, "--node-name", NODE, "--kubeconfig", untrusted, "--kubelet-dir",
                      os.path.join(work, "k3"), "--cdi-dir", os.path.join(work, "c3"), "--state-dir",
                      os.path.join(work, "s3"), "--create-state-dir", "--reconcile-interval", "0"],
                     stdout=open(log, "w"), stderr=subprocess.STDOUT)
check(wait_for(lambda: "certificate" in open(log).read().lower() and "error" in open(log).read().lower(), 30),
      "a server certificate from another CA is refused: " + open(log).read()[-200:].strip())
u.terminate()
exits.append((u.wait(20), log))
check(not writes(mark), "...and nothing was written (the audit log)")

# The named CA is the only one trusted: a certificate it did not sign is
# never looked up in the system store's directory as well.
if shutil.which("strace") is None:
    print("skipped: strace is not installed, the system store's directory is not checked")
else:
    trace, slog = os.path.join(work, "untrusted.trace"), os.path.join(work, "untrusted-strace.log")
    s = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=%file", "-o", trace, NRM, "plugin", "-t", TOPO,
                          "--node-name", NODE, "--kubeconfig", untrusted, "--kubelet-dir", os.path.join(work, "k4"),
                          "--cdi-dir", os.path.join(work, "c4"), "--state-dir", os.path.join(work, "s4"),
                          "--create-state-dir", "--reconcile-interval", "0"], stdout=open(slog, "w"),
                         stderr=subprocess.STDOUT)
    refused = wait_for(lambda: "certificate" in open(slog).read().lower(), 30)
    for child in open("/proc/%d/task/%d/children" % (s.pid, s.pid)).read().split():
        os.kill(int(child), signal.SIGTERM)
    s.wait(30)
    check(refused, "traced, the server certificate is refused too: " + open(slog).read()[-300:])
    looked = sorted(set(re.findall(r'"(/etc/ssl/certs[^"]*)"', open(trace).read())))
    check(looked == [], "...and nothing in /etc/ssl/certs was looked at: %s" % looked[:3])

# --- a feature gate that is off in the API server ------------------------------------------------
# A control plane of its own with DRAConsumableCapacity off: the server drops
# the fields of that gate and answers 201.
off = Cluster(work, "gate-off", bindir, gates="DRAConsumableCapacity=false")
# Its selector reads device.allowMultipleAllocations, which does not compile
# without the gate: the server refuses the cpus.cpu.nrm.io class, as
# docs/install.md says; the rest of nrm.yaml goes in.
r = off.kubectl("apply", "-f", MANIFEST, check=False)
check(r.returncode != 0 and 'DeviceClass "cpus.cpu.nrm.io" is invalid' in r.stderr
      and "undefined field 'allowMultipleAllocations'" in r.stderr,
      "with DRAConsumableCapacity off the real server refuses the cpus.cpu.nrm.io DeviceClass: %s"
      % " ".join(r.stderr.split())[:200])
off.create_nodes([(NODE, 64, 128 << 30)])
q = NrmPlugin(off, NODE, work, ["-t", TOPO])
q.start()
check(wait_for(lambda: "DRAConsumableCapacity" in q.text(), 60), "a dropped field names its feature gate")
m = re.search(r"dropped (spec\.\S+);", q.text())
check(m is not None and ("requestPolicy" in m.group(1) or "allowMultipleAllocations" in m.group(1)),
      "...and the field: %s" % (m.group(1) if m else "?"))
check(wait_for(lambda: q.metric("nrm_slices_synced", CPU) == 0, 30), "/metrics shows the pool out of sync")
errs = q.metric("nrm_slices_publish_errors_total", CPU)
check(errs is not None and errs >= 1, "...and nrm_slices_publish_errors_total counts the problem (%s)" % errs)
time.sleep(5)
mark = len(off.audit())
time.sleep(10)
time.sleep(2)
check(not off.writes(mark), "no endless rewriting of what the server drops (%d writes in 10 s)"
      % len(off.writes(mark)))
exits.append((q.stop(), q.log))
off.stop()

bad_exits = [(rc, lg) for rc, lg in exits if rc != 0]
check(not bad_exits, "every plugin stopped with status 0 (a sanitizer's finding would show here)%s"
      % ("" if not bad_exits else ": %d in %s: %s" % (bad_exits[0][0], bad_exits[0][1],
                                                        open(bad_exits[0][1]).read()[-2000:])))
proxy.stop()
cluster.stop()
finish()
