#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kubectl nrm against the real API server (docs/kubectl.md).

A real control plane (1.36 defaults) with nrm.yaml applied, and two Nodes of
a recorded machine (24em64t-2n6c2t-pci: 2 NUMA nodes of 12 CPUs), each with
an nrm plugin publishing as the DaemonSet's identity: "node-numa" in
cpu.mode numa (cpu and memory drivers) and "node-part" in cpu.mode
partitioned (cpu driver). Pods with claims are created and the real
kube-scheduler allocates the claims and binds them; tests/plugin/dra-client,
standing in for the kubelet, prepares one. Then `kubectl-nrm nodes`, `claim`
and `pods` (the link to nrm that `make install` makes) must show the figures
the slices and claims on the server hold, read here from the API: straight,
and as a plugin of the real kubectl (`kubectl nrm nodes`, the link in
$PATH), with the kubeconfig from --kubeconfig, $KUBECONFIG (a list) and
--context, and through an exec credential plugin."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check, cpulist,  # noqa: E402
                        finish, skip, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
bindir = binaries()
work = workdir()
KUBECTL = os.path.join(bindir, "kubectl")
if not os.access(KUBECTL, os.X_OK):
    skip("no kubectl in %s" % bindir)

# kubectl-nrm as `make install` lays it: a link to nrm, beside nrm-agent.
linkdir = os.path.join(work, "bin")
os.makedirs(linkdir)
for name in ("nrm", "nrm-agent"):
    os.symlink(os.path.join(os.path.dirname(os.path.abspath(NRM)), name), os.path.join(linkdir, name))
os.symlink("nrm", os.path.join(linkdir, "kubectl-nrm"))
KNRM = os.path.join(linkdir, "kubectl-nrm")

T = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
# node-numa has 128 huge pages of 2 MiB on each NUMA node, in a copy of the
# machine's hwloc XML, as a node has them from its boot settings.
with open(T) as fh:
    xml = fh.read()
T_HUGE = os.path.join(work, "huge.xml")
with open(T_HUGE, "w") as fh:
    fh.write(xml.replace('<page_type size="2097152" count="0"/>', '<page_type size="2097152" count="128"/>'))
cluster = Cluster(work, "kubectl", bindir)
cluster.install_nrm()
plugins = {
    "node-numa": NrmPlugin(cluster, "node-numa", work, ["-t", T_HUGE, "--cpu-mode", "numa", "--drivers",
                                                        "cpu,memory"]),
    "node-part": NrmPlugin(cluster, "node-part", work, ["-t", T, "--cpu-mode", "partitioned", "--drivers", "cpu"]),
}
cluster.create_nodes([("node-numa", 24, 128 << 30, {"hugepages-2Mi": "512Mi"}), ("node-part", 24, 128 << 30)])
for p in plugins.values():
    p.start()
check(all(p.register() for p in plugins.values()), "both plugins registered (as the kubelet does)")
check(wait_for(lambda: all(p.settled() for p in plugins.values()), 120, 0.5), "both plugins published their slices")


def request(name, cls, count=1, capacity=None, selector=None):
    r = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if capacity:
        r["capacity"] = {"requests": capacity}
    if selector:
        r["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": r}


def claim_and_pod(ns, name, node, requests, constraints=()):
    """A claim and a pod that uses it, held to node; the real scheduler
    allocates the claim."""
    cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
             "spec": {"devices": {"requests": requests, "constraints": list(constraints)}}}
    s, c = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns, claim)
    if s != 201:
        raise RuntimeError("claim %s: %s %s" % (name, s, c))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                    "resourceClaims": [{"name": "c", "resourceClaimName": name}],
                    "containers": [{"name": "app", "image": "none", "resources": {"claims": [{"name": "c"}]}}]}}
    s, p = cluster.api("POST", "/api/v1/namespaces/%s/pods" % ns, pod)
    if s != 201:
        raise RuntimeError("pod %s: %s %s" % (name, s, p))


claim_and_pod("team-a", "web", "node-numa",
              [request("cpus", "cpu.nrm.io", capacity={"cpus": "4"}),
               request("mem", "memory.nrm.io", capacity={"memory": "1Gi"})],
              [{"requests": ["cpus", "mem"], "matchAttribute": "resource.kubernetes.io/numaNode"}])
claim_and_pod("team-b", "db", "node-numa", [request("cpus", "cpu.nrm.io", capacity={"cpus": "2"}),
                                            request("pages", "hugepages-2mi.memory.nrm.io",
                                                    capacity={"hugepages": "64Mi"})])
claim_and_pod("team-b", "cores", "node-part",
              [request("cores", "cpu.nrm.io", count=2,
                       selector='device.attributes["cpu.nrm.io"].granularity == "core"')])
WANT = [("team-a", "web"), ("team-b", "db"), ("team-b", "cores")]


def bound():
    for ns, name in WANT:
        s, p = cluster.api("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        if s != 200 or not p["spec"].get("nodeName"):
            return False
    return True


check(wait_for(bound, 90, 0.5), "the real scheduler allocates the 3 claims and binds their pods")
claims = {(ns, n): cluster.claim(ns, n) for ns, n in WANT}
check(all(c.get("status", {}).get("allocation") for c in claims.values()), "the 3 claims are allocated")

# web prepared on its node, as the kubelet would; its placement entries in
# status.devices are nrm's to write, and written here as nrm writes them
# where this tree's plugin does not yet (a stand-in for that one step).
web = claims[("team-a", "web")]
plugin = plugins["node-numa"]
for d in ("cpu.nrm.io", "memory.nrm.io"):
    ok, out = plugin.prepare(d, web)
    check(ok, "NodePrepareResources of %s for web: %s" % (d, " ".join(out.split())[:200]))
env = plugin.claim_env(web)
web_cpus = env.get("NRM_CPUS", "")
check(len(cpulist(web_cpus)) == 4, "nrm gives web 4 CPUs (%s)" % web_cpus)
web = cluster.claim("team-a", "web")
if not web.get("status", {}).get("devices"):
    now = "2026-01-01T00:00:00Z"
    entries = []
    for r in web["status"]["allocation"]["devices"]["results"]:
        data = {"request": r["request"], "numaNodes": [int(env.get("NRM_MEMS", "0"))]}
        if r["driver"] == "cpu.nrm.io":
            data["cpus"] = web_cpus
        else:
            data["bytes"] = 1 << 30
        e = {"driver": r["driver"], "pool": r["pool"], "device": r["device"], "data": data,
             "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "message": "",
                             "lastTransitionTime": now}]}
        if r.get("shareID"):
            e["shareID"] = r["shareID"]
        entries.append(e)
    web["status"]["devices"] = entries
    s, web = cluster.api("PUT", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/web/status", web)
    check(s == 200, "web's status.devices written (%s)" % s)
claims[("team-a", "web")] = web


def run(*args, env=None):
    """kubectl-nrm with args; the environment's KUBECONFIG only from env."""
    e = dict(os.environ)
    e.pop("KUBECONFIG", None)
    e.update(env or {})
    return subprocess.run([KNRM, *args], capture_output=True, text=True, env=e)


def qty(v):
    """A quantity of the kinds these objects hold: 12, 1Gi, 18421Mi."""
    for suffix, shift in (("Ki", 10), ("Mi", 20), ("Gi", 30)):
        if v.endswith(suffix):
            return int(v[:-2]) << shift
    return int(v)


ADMIN = ["--kubeconfig", cluster.kubeconfig]


# --- nodes: the figures, from the slices and claims the server holds --------------
def expected():
    """{(node, numa, resource): [published, allocated, prepared]} read here
    from the server's objects: a shared device's capacity, an exclusive
    one's counter set once; consumedCapacity, or the whole device."""
    want, devs = {}, {}
    counters = {}
    for s in cluster.slices():
        sp = s["spec"]
        for cs in sp.get("sharedCounters", []):
            counters[(sp["driver"], cs["name"])] = sum(int(v["value"]) for v in cs["counters"].values())
    seen = set()
    for s in cluster.slices():
        sp = s["spec"]
        for d in sp.get("devices", []):
            attrs = d["attributes"]
            numa = attrs["resource.kubernetes.io/numaNode"]["int"]
            (res, cap), = d["capacity"].items()
            if attrs.get("hugeTLB", {}).get("bool"):
                res = "hugepages-" + attrs["pageSize"]["string"]
            amount = qty(cap["value"])
            key = (sp["nodeName"], numa, res)
            devs[(sp["driver"], sp["pool"]["name"], d["name"])] = (key, amount, d.get("allowMultipleAllocations"))
            w = want.setdefault(key, [0, 0, 0])
            sets = [c["counterSet"] for c in d.get("consumesCounters", [])]
            if not sets:
                w[0] += amount
            for cs in sets:
                if (sp["driver"], cs) not in seen:
                    seen.add((sp["driver"], cs))
                    w[0] += counters[(sp["driver"], cs)]
    for c in claims.values():
        ready = {(e["driver"], e["pool"], e["device"]) for e in c["status"].get("devices", [])
                 if any(x["type"] == "Ready" and x["status"] == "True" for x in e.get("conditions", []))}
        for r in c["status"]["allocation"]["devices"]["results"]:
            key, amount, shared = devs[(r["driver"], r["pool"], r["device"])]
            if shared:
                amount = qty(r["consumedCapacity"][key[2].split("-")[0]])
            want[key][1] += amount
            if (r["driver"], r["pool"], r["device"]) in ready:
                want[key][2] += amount
    return want


want = expected()
p = run("nodes", "-o", "json", *ADMIN)
check(p.returncode == 0, "kubectl-nrm nodes -o json (%s)" % p.stderr.strip()[:300])
got = {}
view = json.loads(p.stdout) if p.returncode == 0 else {"resources": [], "nodes": []}
for r in view["resources"]:
    got[(r["node"], r["numaNode"], r["resource"])] = [r["published"], r["allocated"], r["prepared"]]
    check(r["free"] == r["published"] - r["allocated"], "%s numa %s %s: free = published - allocated"
          % (r["node"], r["numaNode"], r["resource"]))
check(got == want, "nodes: published, allocated and prepared per node, NUMA node and resource are the server's "
      "(%s)" % "; ".join("%s/%s/%s %s" % (k + (v,)) for k, v in sorted(got.items())))
check(sum(v[1] for k, v in got.items() if k[0] == "node-numa" and k[2] == "cpus") == 6
      and sum(v[2] for k, v in got.items() if k[0] == "node-numa" and k[2] == "cpus") == 4,
      "node-numa: 6 CPUs allocated (web 4, db 2), 4 prepared (web)")
check(sum(v[0] for k, v in got.items() if k[0] == "node-numa" and k[2] == "hugepages-2Mi") == 512 << 20
      and sum(v[1] for k, v in got.items() if k[0] == "node-numa" and k[2] == "hugepages-2Mi") == 64 << 20,
      "node-numa: 2 x 256Mi of 2 MiB pages published, 64Mi allocated (db)")
check(sum(v[1] for k, v in got.items() if k[0] == "node-part") == 4,
      "node-part: 2 cores of 2 CPUs allocated whole")
check({n["name"]: (n["claims"], n["preparedClaims"]) for n in view["nodes"]}
      == {"node-numa": (2, 1), "node-part": (1, 0)}, "per node: allocated and prepared claims")

text = run("nodes", *ADMIN)
lines = text.stdout.splitlines()
HEADER = ["NODE", "NUMA", "RESOURCE", "DRIVER", "PUBLISHED", "ALLOCATED", "PREPARED", "FREE"]
check(text.returncode == 0 and lines and lines[0].split() == HEADER,
      "nodes: aligned columns with a header (%s)" % (lines[:1] or text.stderr.strip()[:200]))
check(any(ln.split()[:3] == ["node-numa", "0", "cpus"] for ln in lines), "nodes: a row per NUMA node")
one = run("nodes", "--node", "node-part", "-o", "json", *ADMIN)
check(one.returncode == 0 and {r["node"] for r in json.loads(one.stdout)["resources"]} == {"node-part"},
      "nodes --node node-part: only its rows")
y = run("nodes", "-o", "yaml", *ADMIN)
check(y.returncode == 0 and "resources:" in y.stdout and "published:" in y.stdout, "nodes -o yaml")

# --- the real kubectl runs it as a plugin ------------------------------------------
path_env = {"PATH": linkdir + ":" + os.environ.get("PATH", "/usr/bin:/bin"), "KUBECONFIG": cluster.kubeconfig}
kp = subprocess.run([KUBECTL, "plugin", "list"], capture_output=True, text=True,
                    env=dict(os.environ, **path_env))
check(KNRM in kp.stdout, "kubectl plugin list finds kubectl-nrm (%s)" % kp.stdout.strip()[:200])
kn = subprocess.run([KUBECTL, "nrm", "nodes"], capture_output=True, text=True, env=dict(os.environ, **path_env))
check(kn.returncode == 0 and kn.stdout == text.stdout,
      "`kubectl nrm nodes` (KUBECONFIG) prints what kubectl-nrm nodes --kubeconfig does (%s)"
      % kn.stderr.strip()[:300])
kh = subprocess.run([KUBECTL, "nrm", "claim", "--help"], capture_output=True, text=True,
                    env=dict(os.environ, **path_env))
check(kh.returncode == 0 and "--namespace" in kh.stdout, "`kubectl nrm claim --help`")

# --- kubeconfig: a $KUBECONFIG list, --context, an exec credential ----------------
pki = os.path.join(cluster.dir, "pki")
plugin_sh = os.path.join(work, "credential.sh")
with open(plugin_sh, "w") as fh:
    fh.write("#!/bin/sh\n# An exec credential plugin: the admin's client certificate.\n"
             "case \"$KUBERNETES_EXEC_INFO\" in *client.authentication.k8s.io/v1*) ;; *) exit 9;; esac\n"
             "python3 -c 'import json,sys; print(json.dumps({\"apiVersion\": \"client.authentication.k8s.io/v1\", "
             "\"kind\": \"ExecCredential\", \"status\": {\"clientCertificateData\": open(sys.argv[1]).read(), "
             "\"clientKeyData\": open(sys.argv[2]).read(), \"expirationTimestamp\": \"2099-01-01T00:00:00Z\"}}))' "
             "\"$1\" \"$2\"\necho run >>\"$0.log\"\n")
os.chmod(plugin_sh, 0o700)
cluster_entry = {"server": cluster.env["API_URL"], "certificate-authority": cluster.ca}
second = os.path.join(work, "second.yaml")
with open(second, "w") as fh:
    json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
               "clusters": [{"name": "real", "cluster": cluster_entry},
                            {"name": "dead", "cluster": {"server": "https://127.0.0.1:1",
                                                         "certificate-authority": cluster.ca}}],
               "users": [{"name": "exec", "user": {"exec": {
                   "apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never",
                   "command": "./credential.sh", "args": [os.path.join(pki, "admin.crt"),
                                                          os.path.join(pki, "admin.key")]}}}],
               "contexts": [{"name": "by-exec", "context": {"cluster": "real", "user": "exec", "namespace": "team-a"}},
                            {"name": "nowhere", "context": {"cluster": "dead", "user": "exec"}}]}, fh)
lst = "%s:%s:%s" % (os.path.join(work, "missing.yaml"), cluster.kubeconfig, second)
p = run("nodes", "-o", "json", env={"KUBECONFIG": lst})
check(p.returncode == 0 and json.loads(p.stdout)["resources"] == view["resources"],
      "KUBECONFIG list (missing file skipped, the first current-context wins) (%s)" % p.stderr.strip()[:200])
p = run("claim", "web", "-o", "json", "--context", "by-exec", env={"KUBECONFIG": lst})
check(p.returncode == 0 and json.loads(p.stdout)["name"] == "web",
      "--context by-exec: an exec plugin's client certificate, the context's namespace (%s)" % p.stderr.strip()[:300])
check(os.path.exists(plugin_sh + ".log"), "the exec plugin ran")
p = run("nodes", "--context", "nowhere", env={"KUBECONFIG": second})
check(p.returncode == 1 and "127.0.0.1:1" in p.stderr, "--context nowhere: its dead server is named (%s)"
      % p.stderr.strip()[:200])
p = run("nodes", "--context", "nope", env={"KUBECONFIG": lst})
check(p.returncode == 1 and "context `nope` not found" in p.stderr, "--context nope: refused")

# --- claim ----------------------------------------------------------------------------
p = run("claim", "web", "-n", "team-a", "-o", "json", *ADMIN)
cv = json.loads(p.stdout) if p.returncode == 0 else {}
check(cv.get("node") == "node-numa" and len(cv.get("results", [])) == 2
      and all(r["prepared"] for r in cv["results"]), "claim web: on node-numa, 2 results, both prepared")
cpu_entry = next((d for d in cv.get("devices", []) if d["driver"] == "cpu.nrm.io"), {})
check(cpu_entry.get("data", {}).get("cpus") == web_cpus and list(cpu_entry["data"])[:2] == ["request", "cpus"],
      "claim web: its placement data, request and cpus first (%s)" % cpu_entry.get("data"))
p = run("claim", "-n", "team-a", "web", *ADMIN)
check(p.returncode == 0 and web_cpus in p.stdout and "Ready=True" in p.stdout,
      "claim web (columns): CPUs and conditions shown")
p = run("claim", "db", "-n", "team-b", *ADMIN)
check(p.returncode == 0 and "No device status yet" in p.stdout, "claim db: allocated, not prepared")
p = run("claim", "nosuch", "-n", "team-a", *ADMIN)
check(p.returncode == 1 and "not found" in p.stderr, "claim nosuch: not found, exit 1")
p = run("claim", *ADMIN)
check(p.returncode == 2 and "which claim" in p.stderr, "claim without a name: refused as usage")
p = run("nodes", "-o", "xml", *ADMIN)
check(p.returncode == 2 and "json and yaml" in p.stderr, "-o xml: refused as usage")
p = run("nodes", "--topology", "x", *ADMIN)
check(p.returncode == 2 and "is an option of" in p.stderr, "a node command's flag: refused as usage")

# --- pods ----------------------------------------------------------------------------
p = run("pods", "--node", "node-numa", "-o", "json", *ADMIN)
pv = json.loads(p.stdout) if p.returncode == 0 else []
rows = {(r["namespace"], r["pod"]): r for r in pv}
check(sorted(rows) == [("team-a", "web"), ("team-b", "db")], "pods --node node-numa: web and db (%s)" % sorted(rows))
check(rows.get(("team-a", "web"), {}).get("cpus") == web_cpus and rows[("team-a", "web")]["prepared"],
      "pods: web holds %s" % web_cpus)
check(rows.get(("team-b", "db"), {}).get("prepared") is False, "pods: db is not prepared")
p = run("pods", "-n", "team-b", *ADMIN)
check(p.returncode == 0 and "db" in p.stdout and "cores" in p.stdout and "web" not in p.stdout,
      "pods -n team-b: only that namespace's pods")

for pl in plugins.values():
    check(pl.stop() == 0, "%s: the plugin stops cleanly" % pl.node)
cluster.stop()
finish()
