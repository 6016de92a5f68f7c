#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Faults on the real control plane (item 5 of the real-Kubernetes
control-plane work), with nrm plugin publishing for a recorded machine as
the DaemonSet's identity:

- the API server restarted under nrm's watches: nrm lists again and the
  slices stay as they were, not one written;
- a watch resumed from a resourceVersion the new API server no longer has
  (its watch cache starts at the restart; writes in between move the
  cluster's resourceVersion past nrm's): 410 Gone, and nrm lists again;
- nrm killed with SIGKILL while it publishes, and started again: the node
  has exactly the desired slices, one pool generation, none twice;
- the Node deleted (the garbage collector takes its slices, which the Node
  owns) and created again: nrm publishes again, owned by the new Node;
- a claim prepared on the node and then deleted from the API: the kubelet's
  unprepare (dra-client here) still releases its CPUs, which a new claim
  then gets, with no CPU in two claims.

Each step says what nrm's log showed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, HERE, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, slice_pairs, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
bindir = binaries()
work = workdir()
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-f"
cluster = Cluster(work, "faults", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 24, 64 << 30)])
plugin = NrmPlugin(cluster, NODE, work, ["-t", TOPO, "--cpu-mode", "numa", "--drivers", "cpu,memory"])
plugin.start()
check(plugin.register() and wait_for(plugin.settled, 60), "nrm publishes for %s" % NODE)


def in_sync(p=plugin):
    """The server holds exactly nrm's desired slices: each once, one
    generation a driver, owned by the Node as it is now."""
    have = p.read_back() or []
    want = p.sent()
    _, node = cluster.api("GET", "/api/v1/nodes/" + NODE)
    uid = node.get("metadata", {}).get("uid") if isinstance(node, dict) else None
    if len(have) != len(want):
        return False
    for w, hs in slice_pairs(want, have):
        if len(hs) != 1:
            return False
        s = dict(hs[0]["spec"], pool=dict(hs[0]["spec"]["pool"], generation=0))
        ws = dict(w["spec"], pool=dict(w["spec"]["pool"], generation=0))
        if s != ws or [o.get("uid") for o in hs[0]["metadata"].get("ownerReferences", [])] != [uid]:
            return False
    gens = {}
    for h in have:
        gens.setdefault(h["spec"]["driver"], set()).add(h["spec"]["pool"]["generation"])
    return all(len(g) == 1 for g in gens.values())


def restart_apiserver():
    subprocess.run([os.path.join(HERE, "control-plane.sh"), "restart-apiserver", cluster.dir], check=True)


check(wait_for(in_sync, 30), "the slices are in sync before the faults")

# --- the API server restarted under the watches ---------------------------------
mark = len(cluster.audit())
log0 = len(plugin.text())
restart_apiserver()
# Every watch of the plugin ends (its publishers', the binder's and the node
# view's); each says so and starts again.
ended = re.compile(r"watch (of \S+ )?ended; watching again|watch: .*(again|not closed cleanly)")
relisted = wait_for(lambda: len(ended.findall(plugin.text()[log0:])) >= 4, 90, 0.5)
check(relisted, "API server restarted: nrm's 4 watches ended and started again (%s)"
      % " | ".join(ln[24:150] for ln in plugin.text()[log0:].splitlines() if ended.search(ln))[:500])
time.sleep(3)
check(wait_for(in_sync, 30) and not cluster.writes(mark),
      "... and the slices are as they were, with no write (%d writes)" % len(cluster.writes(mark)))

mark2 = len(cluster.audit())


# --- etcd compacted past nrm's versions, the API server restarted -----------------
def etcd(path, body):
    req = urllib.request.Request(cluster.env["ETCD_URL"] + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


log0 = len(plugin.text())
# nrm frozen (SIGSTOP) while the cluster's revision moves on, etcd compacts
# and the API server restarts; on SIGCONT nrm reads the end of each watch
# and resumes it. Whether the new server answers the resumed watch with 410
# depends on where its watch cache starts: this single frozen plugin has
# not seen one, while bench-fleet.py saw every resumed watch of 100 plugins
# get one after a plain restart. The 410 path itself is
# tests/cluster/test-expiry.py's, a fault injected between nrm and this
# server. Either way nrm must converge with no write.
plugin.proc.send_signal(signal.SIGSTOP)
for i in range(5):
    cluster.api("POST", "/api/v1/namespaces/default/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "age-%d" % i}})
rev = int(etcd("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
etcd("/v3/kv/compaction", {"revision": rev, "physical": True})
restart_apiserver()
plugin.proc.send_signal(signal.SIGCONT)
resumed = wait_for(lambda: len(ended.findall(plugin.text()[log0:])) >= 4, 60, 0.5)
how = [ln[24:170] for ln in plugin.text()[log0:].splitlines() if ended.search(ln) or "too old" in ln or "410" in ln]
check(resumed, "etcd compacted at revision %d, the API server restarted under a frozen nrm: its 4 watches "
      "resumed (%s)" % (rev, " | ".join(how)[:600]))
check(wait_for(in_sync, 30) and not cluster.writes(mark2),
      "... and the slices are still exactly the desired ones, with no write")

# --- nrm killed while it publishes -------------------------------------------------
for p in list(cluster.api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D"
                          + NODE)[1]["items"]):
    cluster.api("DELETE", "/apis/resource.k8s.io/v1/resourceslices/" + p["metadata"]["name"])
plugin.stop()
killed = 0
for delay in (0.05, 0.15, 0.3):
    plugin.start()
    time.sleep(delay)
    plugin.proc.send_signal(signal.SIGKILL)
    plugin.proc.wait()
    killed += 1
plugin.start()
check(plugin.register() and wait_for(in_sync, 60),
      "nrm killed %d times early in its publishing, then started: exactly the desired slices, none twice" % killed)

# --- the Node deleted and created again ----------------------------------------------
_, old = cluster.api("GET", "/api/v1/nodes/" + NODE)
cluster.api("DELETE", "/api/v1/nodes/" + NODE)
gc = wait_for(lambda: not plugin.read_back(), 60, 0.5)
check(gc, "the Node deleted: the garbage collector deleted its slices (owned by it)")
cluster.create_nodes([(NODE, 24, 64 << 30)])
_, new = cluster.api("GET", "/api/v1/nodes/" + NODE)
check(new["metadata"]["uid"] != old["metadata"]["uid"] and wait_for(in_sync, 120, 0.5),
      "the Node created again: nrm published again, owned by the new Node (%s)"
      % " | ".join(ln[24:150] for ln in plugin.text().splitlines()[-40:] if "ResourceSlice" in ln)[-300:])

# --- a claim deleted from the API while prepared ------------------------------------
claim_body = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "held", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
        "deviceClassName": "cpu.nrm.io", "capacity": {"requests": {"cpus": "4"}}}}]}}}


def allocated_claim(name):
    """A claim allocated by the real scheduler for a pod on the node."""
    body = dict(claim_body, metadata={"name": name, "namespace": "default"})
    cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", body)
    cluster.api("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": name}],
                 "containers": [{"name": "a", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}})

    def got():
        s, c = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + name)
        return c if s == 200 and c.get("status", {}).get("allocation") else None
    return wait_for(got, 60, 0.5)


a = allocated_claim("held")
ok, out = plugin.prepare("cpu.nrm.io", a) if a else (False, "not allocated")
cpus_a = plugin.claim_env(a).get("NRM_CPUS") if ok else None
check(ok and cpus_a, "a claim allocated by the scheduler and prepared: NRM_CPUS=%s (%s)" % (cpus_a, out[:100]))
cluster.api("DELETE", "/api/v1/namespaces/default/pods/held?gracePeriodSeconds=0")
cluster.api("DELETE", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/held")
gone = wait_for(lambda: cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/held")[0]
                == 404, 60, 0.5)
check(gone and plugin.unprepare("cpu.nrm.io", a),
      "the claim deleted from the API while prepared: the kubelet's unprepare still succeeds")
b = allocated_claim("next")
ok, out = plugin.prepare("cpu.nrm.io", b) if b else (False, "not allocated")
cpus_b = plugin.claim_env(b).get("NRM_CPUS") if ok else None
dev = [c["status"]["allocation"]["devices"]["results"][0]["device"] if c else None for c in (a, b)]
check(ok and (cpus_b == cpus_a if dev[0] == dev[1] else bool(cpus_b)),
      "its CPUs are free again: the next claim on %s gets %s (the deleted one had %s on %s)"
      % (dev[1], cpus_b, cpus_a, dev[0]))
check(plugin.unprepare("cpu.nrm.io", b) and plugin.stop() == 0, "the plugin unprepares and stops cleanly")
cluster.stop()
finish()
