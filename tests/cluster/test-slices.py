#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm's ResourceSlices judged by the real kube-apiserver (item 3 of the
real-Kubernetes control-plane work).

Two control planes run side by side, each with its own etcd and API server:
"defaults" (1.36's gates as shipped) and "alpha" (DRAListTypeAttributes and
DRANodeAllocatableResources on). For recorded machines, in both CPU modes,
with every combination of nrm's two gates and with no PCI class or all of
them, one nrm plugin per case publishes for a Node of its own, as the
DaemonSet's ServiceAccount with a token bound to the DaemonSet's pod on that
node. With matching gates the server must accept the slices and read them
back equal to what nrm sent (`nrm slices` with the same settings), apart from
what the server sets (metadata, taints' timeAdded). With a gate on in nrm and
off in the server, the test records what the server does and checks that nrm
says so (log, /readyz, /metrics). Then nothing may be written while nothing
changes: the audit log's writes per node and driver over a quiet window
(NRM_QUIET_SECONDS, 600), long node names included, must be 0.

NRM_CLUSTER_TOPOLOGIES: "all", or a comma list of file names (default: a
sample of six machines, large ones among them)."""

import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, GENERATE_PREFIX_MAX, NRM, SRCDIR, TOPOLOGIES, Cluster, NrmPlugin,  # noqa: E402
                        binaries, check, cpulist, finish, skip, slice_pairs, wait_for, workdir)

ALPHA_GATES = "DRAListTypeAttributes=true,DRANodeAllocatableResources=true"
NRM_GATES = ["", "DRAListTypeAttributes=true", "DRANodeAllocatableResources=true", ALPHA_GATES]
SAMPLE = ["192em64t-24n8c2t.xml", "AMD-19h-Zen4-2xEpyc-9654.xml", "256ppc-8n8s4t.xml",
          "16intel64-manyVFs.xml", "24em64t-2n6c2t-pci.xml", "fakeheteromemtiers.xml"]
QUIET = int(os.environ.get("NRM_QUIET_SECONDS", "600"))
LONG_NAMES = ["ip-10-0-123-45.eu-west-1.compute.internal",
              ".".join(["n" * 63] * 3 + ["n" * 61])]
PCI_ALL = os.path.join(SRCDIR, "tests", "bench", "pci-every-class.yaml")
NRM_USER = "system:serviceaccount:nrm-system:nrm"

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
if len(LONG_NAMES[1]) != 253:
    raise SystemExit("the long node name is %d characters" % len(LONG_NAMES[1]))

wanted = os.environ.get("NRM_CLUSTER_TOPOLOGIES", "")
every = sorted(f for f in os.listdir(TOPOLOGIES) if f.endswith(".xml"))
topologies = every if wanted == "all" else (wanted.split(",") if wanted else SAMPLE)
bindir = binaries()
work = workdir()
pci_none = os.path.join(work, "pci-none.yaml")
with open(pci_none, "w") as fh:
    fh.write("pci:\n  classes: []\n")


class Case(NrmPlugin):
    """One nrm plugin on one Node: a machine, a CPU mode, nrm's gates, PCI."""

    def __init__(self, cluster, node, topo, mode="numa", gates="", pci=False):
        self.topo, self.mode, self.gates, self.pci = topo, mode, gates, pci
        NrmPlugin.__init__(self, cluster, node, work, [
            "-t", os.path.join(TOPOLOGIES, topo), "--cpu-mode", mode, "--drivers", "cpu,memory,pci",
            "--config", PCI_ALL if pci else pci_none] + (["--feature-gates", gates] if gates else []))


def comparable(spec):
    """A slice's spec without what the server or the generation sets."""
    spec = json.loads(json.dumps(spec))
    spec["pool"].pop("generation", None)
    for d in spec.get("devices", []):
        for t in d.get("taints", []):
            t.pop("timeAdded", None)
    return spec


def first_difference(a, b, path="spec"):
    if type(a) is not type(b):
        return "%s: sent %s, read back %s" % (path, json.dumps(a)[:120], json.dumps(b)[:120])
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in b:
                return "%s.%s: sent, not read back" % (path, k)
            if k not in a:
                return "%s.%s: read back %s, not sent" % (path, k, json.dumps(b[k])[:120])
            d = first_difference(a[k], b[k], path + "." + k)
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s: %d items sent, %d read back" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: sent %s, read back %s" % (path, json.dumps(a)[:80], json.dumps(b)[:80])


def node_size(topo):
    t = json.loads(subprocess.run([NRM, "topology", "--json", "-t", os.path.join(TOPOLOGIES, topo)],
                                  capture_output=True, text=True, check=True).stdout)
    mem = sum(n.get("memoryBytes", 0) for n in t.get("numaNodes", []))
    return max(len(cpulist(t["cpus"]["online"])), 1), mem or 64 << 30  # a recorded machine may not say its memory


# --- the control planes, side by side -------------------------------------------
clusters = {}


def up(name, gates):
    clusters[name] = Cluster(work, name, bindir, gates=gates)


threads = [threading.Thread(target=up, args=a) for a in (("defaults", ""), ("alpha", ALPHA_GATES))]
for t in threads:
    t.start()
for t in threads:
    t.join()
if len(clusters) != 2:
    raise SystemExit("FAIL a control plane did not start (see above)")
for name, c in clusters.items():
    c.name = name

# --- the cases --------------------------------------------------------------------
cases = []
alpha, defaults = clusters["alpha"], clusters["defaults"]
for i, topo in enumerate(topologies):
    for mode in ("numa", "partitioned"):
        for g, gates in enumerate(NRM_GATES):
            for pci in (False, True):
                node = "m%d-%s-g%d-%s" % (i, mode[0], g, "pci" if pci else "nopci")
                cases.append(Case(alpha, node, topo, mode, gates, pci))
                if not gates:
                    cases.append(Case(defaults, node, topo, mode, gates, pci))
# A gate on in nrm and off in the server: what the real server does with it.
mismatch = [Case(defaults, "gate-list", "AMD-19h-Zen4-2xEpyc-9654.xml", "numa", "DRAListTypeAttributes=true", True),
            Case(defaults, "gate-alloc", "AMD-19h-Zen4-2xEpyc-9654.xml", "numa",
                 "DRANodeAllocatableResources=true", False)]
# The longest names a Node may have, on both servers.
longs = [Case(c, name, "AMD-19h-Zen4-2xEpyc-9654.xml", "numa", "", True)
         for c in (defaults, alpha) for name in LONG_NAMES]
everything = cases + mismatch + longs
print("# %d cases on %d machines" % (len(everything), len(topologies)))

t0 = time.time()
# One server gets deploy/kubernetes/nrm.yaml with kubectl, the other the chart
# with helm install: both as docs/install.md writes them.
defaults.install_nrm()
out = alpha.install_nrm_helm()
check("STATUS: deployed" in out, "helm install of deploy/helm/nrm into the real API server: deployed")
for c in clusters.values():
    mine = [k for k in everything if k.cluster is c]
    # A kubelet with DRANodeAllocatableResources on declares it (1.37 checks).
    c.create_nodes([(k.node,) + node_size(k.topo) for k in mine],
                   ["DRANodeAllocatableResources"] if c is alpha else [])
check(all(c.nrm_pod(k.node, 180) for c in clusters.values() for k in everything if k.cluster is c),
      "the DaemonSet of deploy/kubernetes/nrm.yaml has a pod on every Node (real kubectl apply, "
      "DaemonSet controller and scheduler)")
for k in everything:
    k.start()
check(all(k.register() for k in everything), "every driver of every plugin registered (as the kubelet does)")
settled = wait_for(lambda: all(k.settled() or k.proc.poll() is not None for k in everything), 300, 1)
print("# %d plugins published in %.0f s" % (len(everything), time.time() - t0))
check(settled, "every plugin has published or said why not within 300 s%s"
      % "".join("; not %s/%s" % (k.cluster.name, k.node) for k in everything if not k.settled()))
for k in everything:
    if k.proc.poll() is not None:
        check(False, "%s/%s: the plugin exited %s: %s" % (k.cluster.name, k.node, k.proc.returncode,
                                                         k.text()[-800:]))

# --- matching gates: accepted, read back as sent ----------------------------------
for k in cases + longs:
    have = k.read_back()
    want = k.sent()
    what = "%s: %s %s gates=%s pci=%s" % (k.cluster.name, k.topo, k.mode, k.gates or "none", k.pci)
    if len(k.node) > 60:
        what = "%s: node name of %d characters" % (k.cluster.name, len(k.node))
    # Each slice sent under its name prefix, which the server completes.
    pairs = slice_pairs(want, have or [])
    if have is None or len(have) != len(want) or any(len(hs) != 1 for _, hs in pairs):
        check(False, "%s: %d slices sent, %s read back; log: %s" % (what, len(want), have and len(have),
                                                                     k.text()[-600:]))
        continue
    diffs = [first_difference(comparable(w["spec"]), comparable(hs[0]["spec"])) for w, hs in pairs]
    diffs = [d for d in diffs if d]
    gens = {h["spec"]["pool"]["generation"] for h in have}
    check(not diffs and all(k.metric("nrm_slices_synced", d) == 1 for d in k.drivers()),
          "%s: %d slices accepted and read back as sent%s" % (what, len(have), ": " + diffs[0] if diffs else ""))
    check(len(gens) == 1, "%s: one pool generation (%s)" % (what, sorted(gens)))

# The names the real server gives: nrm's name and "-" as generateName, which
# the server cuts to 58 characters before appending 5 of its own.
for k in longs:
    names = [h["metadata"]["name"] for h in k.read_back() or []]
    prefixes = [w["metadata"]["name"] + "-" for w in k.sent()]
    print("# slice names for a %d-character node: %s" % (len(k.node), ", ".join(names)))
    check(len(names) == len(prefixes)
          and all(any(re.fullmatch(re.escape(p[:GENERATE_PREFIX_MAX]) + "[a-z0-9]{5}", n) for n in names)
                  for p in prefixes),
          "%s: %d-character node: each slice named its generateName cut to 58 characters + 5 by the server"
          % (k.cluster.name, len(k.node)))

# --- a gate on in nrm, off in the server ---------------------------------------------
lst, alloc = mismatch
s, body = lst.http("/readyz")
refusals = [float(m.group(1)) * 3600 + float(m.group(2)) * 60 + float(m.group(3)) for m in re.finditer(
    r"^\S+T(\d+):(\d+):([\d.]+)Z error +cpu\.nrm\.io: creating ResourceSlice \S+: HTTP 422", lst.text(), re.M)]
check(refusals and not [h for h in lst.read_back() or [] if h["spec"]["driver"] == "cpu.nrm.io"],
      "list attributes, gate off in the API server: cpu.nrm.io's slice refused with 422 (%d times), "
      "none stored" % len(refusals))
check(s == 503 and "cpu.nrm.io" in body and "422" in body,
      "... and nrm's /readyz says why (%s: %s)" % (s, body.strip()[:160]))
have = alloc.read_back() or []
# 1.37 renamed the field (docs/versions.md).
field = '"nodeAllocatableResources"' if defaults.minor >= 37 else '"nodeAllocatableResourceMappings"'
sent_fields = any(field in json.dumps(w) for w in alloc.sent())
kept = any(field in json.dumps(h) for h in have)
check(sent_fields and have and not kept,
      "node-allocatable mappings, gate off in the API server: created (%d slices) with the field dropped" % len(have))
check("dropped" in alloc.text() and "DRANodeAllocatableResources" in alloc.text(),
      "... and nrm logs the dropped field with its gate")
check(any(alloc.metric("nrm_slices_synced", d) == 0 for d in alloc.drivers()),
      "... and /metrics shows nrm_slices_synced 0 for that driver")


def backoff_ok(times):
    """The refusals follow docs/kubernetes-api.md's back-off: the n-th wait
    is 0.5 s doubled n times, at most 60 s, times 0.5 to 1.5. The time
    between two refusals is that wait plus the next request's round trip,
    which on a loaded machine (make -j check, 126 plugins publishing at
    once) can take seconds: the upper bound allows 3 s for it."""
    bad = []
    for i, (a, b) in enumerate(zip(times, times[1:])):
        base = min(0.5 * 2 ** i, 60.0)
        if not 0.5 * base - 0.05 <= b - a <= 1.5 * base + 3.0:
            bad.append("wait %d: %.2f s, not within %.2f-%.2f s" % (i, b - a, 0.5 * base, 1.5 * base))
    return bad


# --- quiet: nothing written while nothing changes ---------------------------------------
def writes(c, since):
    """The audit log's writes by nrm's identity after event index since:
    per (node, driver) from the user's node-name extra and the slice name."""
    out = {}
    for e in c.audit()[since:]:
        if e.get("stage") != "ResponseComplete" or e["user"].get("username") != NRM_USER:
            continue
        if e["verb"] not in ("create", "update", "patch", "delete", "deletecollection"):
            continue
        node = (e["user"].get("extra", {}).get("authentication.kubernetes.io/node-name") or ["?"])[0]
        name = e.get("objectRef", {}).get("name", "") or "(new)"
        driver = next((d for d in ("cpu.nrm.io", "memory.nrm.io", "pci.nrm.io") if d in name), name)
        out.setdefault((node, driver), []).append("%s %s %s" % (e["verb"], e["objectRef"].get("resource"),
                                                                  e["responseStatus"].get("code")))
    return out


marks = {n: len(c.audit()) for n, c in clusters.items()}
print("# quiet window: %d s" % QUIET, flush=True)
time.sleep(QUIET)
time.sleep(2)  # the audit log's batch
for n, c in clusters.items():
    w = writes(c, marks[n])
    accepted = [k for k in everything if k.cluster is c and k not in mismatch]
    check(not any(k.node == node for node, _ in w for k in accepted),
          "%s: 0 writes in %d quiet seconds by %d plugins whose slices were accepted%s"
          % (n, QUIET, len(accepted), "" if not w else ": " + json.dumps({"%s/%s" % k: v[:3]
                                                                         for k, v in list(w.items())[:4]})))
    if c is lst.cluster:
        refused = sum(len(v) for (node, _), v in w.items() if node == lst.node)
        print("# %s: %d refused writes by the list-attribute case in the quiet window" % (n, refused))
        # The back-off's waits reach 30 s (0.5 s doubled 6 times, times at
        # least 0.5) after at most 7 writes; then at most one a 30 s.
        check(refused <= 7 + QUIET / 30, "the refused slice is written at most 7 times and once in 30 s after "
              "(%d writes in %d s)" % (refused, QUIET))

refusals = [float(m.group(1)) * 3600 + float(m.group(2)) * 60 + float(m.group(3)) for m in re.finditer(
    r"^\S+T(\d+):(\d+):([\d.]+)Z error +cpu\.nrm\.io: creating ResourceSlice \S+: HTTP 422", lst.text(), re.M)]
bad = backoff_ok(refusals)
check(len(refusals) >= 5 and not bad, "the %d refusals follow the documented back-off (waits %s)%s"
      % (len(refusals), ", ".join("%.1f" % (b - a) for a, b in zip(refusals, refusals[1:])),
         ": " + "; ".join(bad) if bad else ""))
alive = [k for k in everything if k.proc.poll() is None]
check(len(alive) == len(everything), "every plugin still runs after the window (%d of %d)"
      % (len(alive), len(everything)))
rcs = [k.stop() for k in everything]
check(all(rc == 0 for rc in rcs), "every plugin stops cleanly on SIGTERM (exits %s)" % sorted(set(rcs)))
for c in clusters.values():
    c.stop()
finish()
