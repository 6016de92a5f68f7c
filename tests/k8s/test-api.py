#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin against a Kubernetes API server on loopback (fakeapi.py):
ResourceSlice publishing and repair, claims read from the API, and what
goes wrong on the way (restarts, expired watches, rotated tokens, errors,
timeouts, feature gates that are off). Every check reads back what the
server holds or what nrm answered over its sockets."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SRCDIR = os.environ.get("NRM_SRCDIR", os.path.abspath(os.path.join(HERE, "..", "..")))
NRM = os.environ.get("NRM", os.path.join(SRCDIR, "nrm", "nrm"))
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(NRM)))
DRA_CLIENT = os.path.join(BUILDDIR, "tests", "plugin", "dra-client")
TOPOLOGIES = os.environ.get("NRM_TOPOLOGIES", os.path.join(SRCDIR, "tests", "topologies"))
NODE = "node-a"
CPU, MEM = "cpu.nrm.io", "memory.nrm.io"

passed = 0
failures = []
exits = []


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def check(cond, what):
    global passed
    if cond:
        passed += 1
        print("ok   " + what)
    else:
        failures.append(what)
        print("FAIL " + what)


def wait_for(pred, timeout=15.0, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(step)
    return False


for tool in ("openssl",):
    if shutil.which(tool) is None:
        skip(tool + " is not installed")
if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")

try:
    from fakeapi import FakeAPI
except Exception as e:  # noqa: BLE001
    skip("cannot load the fake API server: %s" % e)

TOPO = os.path.join(TOPOLOGIES, sorted(f for f in os.listdir(TOPOLOGIES) if f.endswith(".xml"))[0])
for f in sorted(os.listdir(TOPOLOGIES)):
    # A machine with 2+ NUMA nodes shows more than one device a pool.
    if f.endswith(".xml") and "numa" not in f and os.path.getsize(os.path.join(TOPOLOGIES, f)) < 200000:
        with open(os.path.join(TOPOLOGIES, f)) as fh:
            if fh.read().count('type="NUMANode"') >= 2:
                TOPO = os.path.join(TOPOLOGIES, f)
                break

work = tempfile.mkdtemp(prefix="nrm-k8s-")
api = FakeAPI(work, tokens=["token-0"])
api.start()
node_uid = api.add_node(NODE)
token_file = os.path.join(work, "token")
with open(token_file, "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=token_file)


class Plugin:
    """One nrm plugin process with its own kubelet directory."""

    def __init__(self, *extra, env=None, kubeconfig_path=kubeconfig):
        self.log = os.path.join(work, "plugin-%d.log" % time.time_ns())
        args = [NRM, "plugin", "-t", TOPO, "--node-name", NODE,
                "--kubelet-dir", os.path.join(work, "kubelet"), "--cdi-dir", os.path.join(work, "cdi"),
                "--state-dir", os.path.join(work, "state"), "--create-state-dir", "--reconcile-interval", "0",
                "--http-address", "127.0.0.1:0", "--log-level", "debug"]
        if kubeconfig_path:
            args += ["--kubeconfig", kubeconfig_path]
        args += list(extra)
        self.p = subprocess.Popen(args, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                  env=env or os.environ.copy())
        self.port = None
        wait_for(self._port, 10)

    def _port(self):
        m = re.search(r"/metrics on port (\d+)", self.text())
        if m:
            self.port = int(m.group(1))
        return self.port is not None

    def text(self):
        with open(self.log) as fh:
            return fh.read()

    def get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name, **labels):
        _, body = self.get("/metrics")
        for line in body.splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return None

    def synced(self):
        return self.metric("nrm_slices_synced", driver=CPU) == 1 and self.metric("nrm_slices_synced", driver=MEM) == 1

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        exits.append((self.p.returncode, self.log))
        return self.p.returncode


def expected(*extra):
    out = subprocess.run([NRM, "slices", "-t", TOPO, "--node-name", NODE] + list(extra),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["items"]


def published(driver):
    return sorted((s for s in api.slices() if s["spec"]["driver"] == driver), key=lambda s: s["metadata"]["name"])


def strip_generation(spec):
    spec = json.loads(json.dumps(spec))
    spec["pool"].pop("generation", None)
    return spec


def matches(want_items, driver):
    """The server holds exactly the desired slices of driver, in order, one generation."""
    want = [s for s in want_items if s["spec"]["driver"] == driver]
    have = published(driver)
    if len(want) != len(have):
        return False
    gens = {s["spec"]["pool"]["generation"] for s in have}
    if len(gens) != 1:
        return False
    for w, h in zip(want, have):
        if not h["metadata"]["name"].startswith(w["metadata"]["name"] + "-"):
            return False
        if strip_generation(w["spec"]) != strip_generation(h["spec"]):
            return False
    return True


def generation(driver):
    gens = {s["spec"]["pool"]["generation"] for s in published(driver)}
    return max(gens) if gens else None


def writes_since(n, driver=None):
    out = api.writes()[n:]
    if driver:
        out = [w for w in out if driver in json.dumps(w)]
    return out


want = expected()

# --- publishing -----------------------------------------------------------------
p = Plugin()
check(wait_for(lambda: matches(want, CPU) and matches(want, MEM)), "the desired CPU and memory slices are published")
s0 = published(CPU)[0]
owner = s0["metadata"].get("ownerReferences", [{}])[0]
check(owner.get("kind") == "Node" and owner.get("name") == NODE and owner.get("uid") == node_uid
      and owner.get("controller") is True, "slices are owned by the Node (kind, name, uid, controller)")
check(all(s["spec"]["nodeName"] == NODE and s["spec"]["pool"]["name"] == NODE for s in api.slices()),
      "spec.nodeName and the pool name are the node's")
check(all(s["spec"]["pool"]["resourceSliceCount"] == len(published(s["spec"]["driver"])) for s in api.slices()),
      "resourceSliceCount counts the pool's slices")
lists = [r for r in api.requests if r["method"] == "GET" and r["path"].endswith("/resourceslices")
         and "watch" not in r["query"]]
check(any("spec.nodeName=" + NODE in r["query"].get("fieldSelector", "") and "spec.driver=" + CPU
          in r["query"].get("fieldSelector", "") for r in lists), "slices are listed with field selectors for node and driver")
check(wait_for(p.synced), "/metrics reports both pools in sync")
check(p.metric("nrm_api_connected") == 1, "/metrics reports the API connected")
status, body = p.get("/healthz")
check(status == 200 and body.strip() == "ok", "/healthz answers ok")
status, body = p.get("/readyz")
check(status == 503 and "not registered" in body, "/readyz says why it is not ready (no kubelet registered it)")

# Every line of /metrics is Prometheus text.
_, body = p.get("/metrics")
bad = [l for l in body.splitlines()
       if l and not re.match(r'^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$', l)
       and not re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? '
                        r'(-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$', l)]
check(not bad and "nrm_claim_operation_duration_seconds_bucket" in body,
      "/metrics parses as Prometheus text%s" % (": " + bad[0] if bad else ""))

# --- restart adopts what is there ---------------------------------------------------
gen0 = generation(CPU)
check(p.stop() == 0, "SIGTERM stops the plugin cleanly")
check(matches(want, CPU), "the slices stay when the plugin stops")
n = len(api.writes())
p = Plugin()
check(wait_for(p.synced), "a restarted plugin is in sync")
time.sleep(0.5)
check(writes_since(n) == [] and generation(CPU) == gen0, "a restart adopts the slices: no write, same generation")

# --- a configuration change -------------------------------------------------------
p.stop()
n = len(api.writes())
want_p = expected("--cpu-mode", "partitioned")
p = Plugin("--cpu-mode", "partitioned")
check(wait_for(lambda: matches(want_p, CPU)), "--cpu-mode partitioned republishes the CPU pool")
check(generation(CPU) > gen0, "the change bumped the pool generation (%s -> %s)" % (gen0, generation(CPU)))
check(writes_since(n, MEM) == [], "the memory pool was left alone")

# nrm status follows the shared counters: an L3 device held makes its NUMA
# node's device unavailable, not the other node's.
part_sock = os.path.join(work, "kubelet", "plugins", CPU, "dra.sock")
devs = {d["name"]: d for s in published(CPU) for d in s["spec"].get("devices", [])}
l3 = sorted(n for n in devs if n.startswith("l3-"))[0]
l3_set = devs[l3]["consumesCounters"][0]["counterSet"]
api.put_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"namespace": "default", "name": "l3", "uid": "uid-l3"},
               "spec": {"devices": {"requests": [{"name": "l3", "exactly": {"deviceClassName": CPU}}]}},
               "status": {"allocation": {"devices": {"results": [
                   {"request": "l3", "driver": CPU, "pool": NODE, "device": l3}]}}}})
r = subprocess.run([DRA_CLIENT, "prepare", part_sock, "default", "l3", "uid-l3"], capture_output=True, text=True)
st = json.loads(subprocess.run([NRM, "status", "--json", "-t", TOPO, "--node-name", NODE, "--cpu-mode", "partitioned",
                                "--state-dir", os.path.join(work, "state")], check=True, capture_output=True,
                               text=True).stdout)
pool = [pl for pl in st["pools"] if pl["driver"] == CPU][0]
avail = {d["name"]: d["available"] for d in pool["devices"]}
same = [n for n, d in devs.items() if n.startswith("numa") and d["consumesCounters"][0]["counterSet"] == l3_set]
other = [n for n, d in devs.items() if n.startswith("numa") and d["consumesCounters"][0]["counterSet"] != l3_set]
check(r.returncode == 0 and pool["allocatedDevices"] == 1 and pool["unavailableDevices"] > 0
      and pool["totalDevices"] == pool["allocatedDevices"] + pool["availableDevices"] + pool["unavailableDevices"]
      and same and not any(avail[n] for n in same) and other and all(avail[n] for n in other),
      "nrm status: %s held makes %s unavailable, %s stay available (%d unavailable)"
      % (l3, same, other, pool["unavailableDevices"]))
subprocess.run([DRA_CLIENT, "unprepare", part_sock, "uid-l3"], check=True)
p.stop()
p = Plugin()
check(wait_for(lambda: matches(want, CPU)), "back to numa mode: surplus slices deleted, the pool matches again")

# --- repair of outside changes ----------------------------------------------------
gen1 = generation(CPU)
victim = published(CPU)[0]["metadata"]["name"]
api.delete_slice(victim)
check(wait_for(lambda: matches(want, CPU)), "a slice deleted by someone else comes back")
check(generation(CPU) > gen1, "...with a new generation")


def tamper(obj):
    obj["spec"]["devices"][0]["attributes"]["numaNode"] = {"int": 999}


api.modify_slice(published(MEM)[0]["metadata"]["name"], tamper)
check(wait_for(lambda: matches(want, MEM)), "a slice changed by someone else is put right")

# --- the API server restarts mid-watch ---------------------------------------------
api.restart()
api.delete_slice(published(CPU)[0]["metadata"]["name"])
check(wait_for(lambda: matches(want, CPU), 30), "after an API server restart the watch resumes and repairs")

# --- an expired watch -----------------------------------------------------------
n_req = len(api.requests)
api.expire()
api.end_watches()
api.delete_slice(published(MEM)[0]["metadata"]["name"])
check(wait_for(lambda: matches(want, MEM), 30), "after an expired watch (410) the plugin lists again and repairs")
relists = [r for r in api.requests[n_req:] if r["method"] == "GET" and "watch" not in r["query"]
           and r["path"].endswith("/resourceslices")]
check(len(relists) >= 1, "the 410 was answered with a relist")

# --- token rotation ---------------------------------------------------------------
with open(token_file + ".new", "w") as fh:
    fh.write("token-1\n")
os.rename(token_file + ".new", token_file)
api.set_tokens(["token-1"])
api.end_watches()
api.delete_slice(published(CPU)[0]["metadata"]["name"])
check(wait_for(lambda: matches(want, CPU), 30), "a rotated token file is read again")
check("token-0" not in p.text() and "token-1" not in p.text(), "tokens never appear in the log")

# --- claims from the API ------------------------------------------------------------
dra_sock = os.path.join(work, "kubelet", "plugins", CPU, "dra.sock")
pool_dev = published(CPU)[0]["spec"]["devices"][0]["name"]


def claim(name, uid, allocated=True):
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"namespace": "default", "name": name, "uid": uid},
           "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": CPU}}]}}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "cpus", "driver": CPU, "pool": NODE, "device": pool_dev,
             "consumedCapacity": {"cpus": "2"}, "shareID": "a1b2c3d4"}]}}}
    return api.put_claim(obj)


def prepare(name, uid):
    return subprocess.run([DRA_CLIENT, "prepare", dra_sock, "default", name, uid], capture_output=True, text=True)


claim("good", "uid-good")
r = prepare("good", "uid-good")
check(r.returncode == 0 and "%s/claim=uid-good" % CPU in r.stdout, "a claim read from the API is prepared")
claim("pending", "uid-pending", allocated=False)
r = prepare("pending", "uid-pending")
check(r.returncode != 0 and "not allocated" in r.stderr, "an unallocated claim is refused: " + r.stderr.strip())
claim("replaced", "uid-new")
r = prepare("replaced", "uid-old")
check(r.returncode != 0 and "replaced" in r.stderr, "a claim whose UID changed is refused: " + r.stderr.strip())
r = prepare("missing", "uid-missing")
check(r.returncode != 0 and "not found" in r.stderr, "a missing claim is named: " + r.stderr.strip())
claim("flaky", "uid-flaky")
api.fail_next(2, code=500, method="GET", path_contains="resourceclaims")
r = prepare("flaky", "uid-flaky")
check(r.returncode == 0, "two 500s in a row are retried with backoff")
claim("slow", "uid-slow")
api.delay_next(1, 12, method="GET", path_contains="resourceclaims")
t0 = time.time()
r = prepare("slow", "uid-slow")
check(r.returncode == 0 and time.time() - t0 < 25, "a request that times out (10 s) is tried again (%.1f s)" % (time.time() - t0))
# One claim holding a shareable device twice counts once, with its CPUs.
twice = claim("twice", "uid-twice")
r0 = twice["status"]["allocation"]["devices"]["results"][0]
twice["status"]["allocation"]["devices"]["results"] = [dict(r0, request="a", consumedCapacity={"cpus": "1"}),
                                                       dict(r0, request="b", consumedCapacity={"cpus": "1"})]
twice["spec"]["devices"]["requests"] = [{"name": n, "exactly": {"deviceClassName": CPU}} for n in ("a", "b")]
api.put_claim(twice)
r = prepare("twice", "uid-twice")
st = json.loads(subprocess.run([NRM, "status", "--json", "-t", TOPO, "--node-name", NODE, "--state-dir",
                                os.path.join(work, "state")], check=True, capture_output=True, text=True).stdout)
dev = [d for pl in st["pools"] if pl["driver"] == CPU for d in pl["devices"] if d["name"] == pool_dev][0]
check(r.returncode == 0 and dev["consumed"] == "8" and sorted(dev["claims"]) == ["uid-flaky", "uid-good", "uid-slow", "uid-twice"],
      "nrm status counts a device held twice by one claim once (%s CPUs, %s)" % (dev["consumed"], dev["claims"]))
errs = p.metric("nrm_claim_errors_total", driver=CPU, operation="prepare", kind="not_found")
check(errs == 1, "/metrics counts the missing claim as not_found (%s)" % errs)
nd = claim("nodevice", "uid-nodevice")
nd["status"]["allocation"]["devices"]["results"][0]["device"] = "numa99"
api.put_claim(nd)
r = prepare("nodevice", "uid-nodevice")
check(r.returncode != 0 and "numa99" in r.stderr
      and p.metric("nrm_claim_errors_total", driver=CPU, operation="prepare", kind="not_found") == 2,
      "a claim on an unknown device is refused, named and counted as not_found: " + r.stderr.strip())


# The scheduler takes the first CPU device with room: the fullest is listed first.
def cpu_order():
    return [d["name"] for s in published(CPU) for d in s["spec"].get("devices", [])
            if d.get("allowMultipleAllocations") and not d["name"].endswith("-isolated")]


order0 = cpu_order()
other = order0[1]
o = claim("other", "uid-other")
o["status"]["allocation"]["devices"]["results"][0].update(device=other, consumedCapacity={"cpus": "10"})
api.put_claim(o)
gen_o = generation(CPU)
r = prepare("other", "uid-other")
check(r.returncode == 0 and wait_for(lambda: cpu_order()[0] == other, 20) and generation(CPU) > gen_o,
      "10 CPUs held on %s, 8 on %s: %s is listed first, in a new generation (%s)" % (other, pool_dev, other, cpu_order()))
subprocess.run([DRA_CLIENT, "unprepare", dra_sock, "uid-other"], check=True)
check(wait_for(lambda: cpu_order() == order0, 20), "...and the first order is back when the claim goes")
n_w = len(api.writes())
time.sleep(6)
check(len(api.writes()) == n_w, "nothing is written while nothing changes")
for uid in ("uid-good", "uid-flaky", "uid-slow", "uid-twice"):
    subprocess.run([DRA_CLIENT, "unprepare", dra_sock, uid], check=True)
p.stop()

# --- a PodGroup's claim, with device metadata ------------------------------------------
# One claim for the pods of a group (KEP-5729): its reservedFor names the
# PodGroup; the kubelet prepares it once on the node, and any later call
# gets the same answer. The container's metadata file (KEP-5304) is there
# for it, and goes with the claim.
p = Plugin("--device-metadata")
check(wait_for(p.synced), "a plugin with --device-metadata is in sync")
mem_sock = os.path.join(work, "kubelet", "plugins", MEM, "dra.sock")
mem_dev = [d["name"] for s in published(MEM) for d in s["spec"].get("devices", []) if "memory" in d.get("capacity", {})][0]
api.put_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"namespace": "default", "name": "group", "uid": "uid-group"},
               "spec": {"devices": {"requests": [{"name": "mem", "exactly": {"deviceClassName": MEM}}]}},
               "status": {"allocation": {"devices": {"results": [
                   {"request": "mem", "driver": MEM, "pool": NODE, "device": mem_dev,
                    "consumedCapacity": {"memory": "64Mi"}, "shareID": "0a1b2c3d"}]}},
                   "reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers",
                                    "uid": "uid-podgroup"}]}})
r1 = subprocess.run([DRA_CLIENT, "prepare", mem_sock, "default", "group", "uid-group"], capture_output=True, text=True)
r2 = subprocess.run([DRA_CLIENT, "prepare", mem_sock, "default", "group", "uid-group"], capture_output=True, text=True)
check(r1.returncode == 0 and r1.stdout == r2.stdout and "%s/metadata=uid-group_mem" % MEM in r1.stdout,
      "a PodGroup claim from the API is prepared once, answered the same again, with its metadata id: "
      + r1.stdout.strip().replace("\n", " "))
meta = os.path.join(work, "kubelet", "plugins", MEM, "dra-device-metadata", "default_group", "mem", "metadata.json")
doc = json.load(open(meta)) if os.path.exists(meta) else {}
mdev = (doc.get("requests") or [{}])[0].get("devices", [{}])[0]
check(doc.get("kind") == "DeviceMetadata" and doc.get("metadata", {}).get("uid") == "uid-group"
      and mdev.get("name") == mem_dev and mdev.get("attributes", {}).get("bytes", {}).get("int") == 64 << 20,
      "...its metadata file names the device and the 64Mi it holds there (%s)" % mdev)
st = json.loads(subprocess.run([NRM, "status", "--json", "-t", TOPO, "--node-name", NODE, "--state-dir",
                                os.path.join(work, "state")], check=True, capture_output=True, text=True).stdout)
check(st["claims"].get("uid-group", {}).get("podGroup") == "trainers", "nrm status names the claim's PodGroup")
subprocess.run([DRA_CLIENT, "unprepare", mem_sock, "uid-group"], check=True)
check(not os.path.exists(meta) and not os.path.exists(os.path.join(work, "cdi", "%s_metadata_uid-group_mem.json" % MEM)),
      "...and its metadata goes with it")
p.stop()

# --- CPUs that go offline taint their device ---------------------------------------
fsroot = os.path.join(work, "fsroot")
online = os.path.join(fsroot, "sys", "devices", "system", "cpu", "online")
os.makedirs(os.path.dirname(online))
with open(online, "w") as fh:
    fh.write("0-127\n")
p = Plugin("--fsroot", fsroot, "--allow-no-cpuset")  # a sysfs-only tree
check(wait_for(p.synced), "a plugin with a CPU online file is in sync")
gen_t = generation(CPU)


def device(name):
    return [d for s in published(CPU) for d in s["spec"].get("devices", []) if d["name"] == name][0]


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
p.stop()

# --- a shared-object driver's health taints its devices too ---------------------------
EXAMPLE = "example.nrm.io"
example_dir = os.environ.get("NRM_EXAMPLE_DRIVER_DIR", os.path.join(BUILDDIR, "driver", "example"))
if os.path.exists(os.path.join(example_dir, "nrm-driver-example.so")):
    ex_root = os.path.join(work, "fsroot-example")
    os.makedirs(ex_root)
    p = Plugin("--drivers", "example", "--driver-dir", example_dir, "--fsroot", ex_root, "--allow-no-cpuset")
    check(wait_for(lambda: p.metric("nrm_slices_synced", driver=EXAMPLE) == 1 and len(published(EXAMPLE)) == 1),
          "the example driver (a shared object) publishes its slice")

    def ex_device(name):
        return [d for s in published(EXAMPLE) for d in s["spec"].get("devices", []) if d["name"] == name][0]

    check([d["name"] for d in published(EXAMPLE)[0]["spec"]["devices"]] == ["dev0", "dev1", "dev2", "dev3"],
          "...with its four devices")
    with open(os.path.join(ex_root, "example-unhealthy"), "w") as fh:
        fh.write("dev1\n")
    check(wait_for(lambda: ex_device("dev1").get("taints"), 20), "dev1 listed unhealthy: it gets a taint")
    t = ex_device("dev1").get("taints", [{}])[0]
    check(t.get("key") == EXAMPLE + "/unhealthy" and t.get("effect") == "NoExecute"
          and not any(ex_device(n).get("taints") for n in ("dev0", "dev2", "dev3")),
          "...%s:%s on dev1 only" % (t.get("key"), t.get("effect")))
    os.unlink(os.path.join(ex_root, "example-unhealthy"))
    check(wait_for(lambda: not ex_device("dev1").get("taints"), 20), "healthy again: the taint goes")
    p.stop()
else:
    print("SKIP: no example driver in %s (make check builds it)" % example_dir)

# --- a feature gate that is off on the API server ------------------------------------
for s in api.slices():
    api.delete_slice(s["metadata"]["name"])
api.set_gates({"DRAConsumableCapacity": False})
n = len(api.writes())
p = Plugin()
check(wait_for(lambda: "DRAConsumableCapacity" in p.text()), "a dropped field names its feature gate")
m = re.search(r"dropped (spec\.\S+);", p.text())
check(m is not None and ("requestPolicy" in m.group(1) or "allowMultipleAllocations" in m.group(1)),
      "...and the field: %s" % (m.group(1) if m else "?"))
check(wait_for(lambda: p.metric("nrm_slices_synced", driver=CPU) == 0), "/metrics shows the pool out of sync")


def settled(quiet=1.5, timeout=20):
    """Waits until no write has come for `quiet` seconds (both publishers
    are past their first writes, however slow the build)."""
    end = time.time() + timeout
    last, since = len(api.writes()), time.time()
    while time.time() < end:
        time.sleep(0.1)
        if len(api.writes()) != last:
            last, since = len(api.writes()), time.time()
        elif time.time() - since >= quiet:
            return True
    return False


check(settled(), "the publishers stop writing (%d writes)" % (len(api.writes()) - n))
count = len(api.writes())
time.sleep(3)
check(len(api.writes()) == count, "no endless rewriting of what the server drops (%d writes)" % (len(api.writes()) - n))
p.stop()
api.set_gates({"DRAConsumableCapacity": True})

# --- in-cluster settings -----------------------------------------------------------
sa = os.path.join(work, "serviceaccount")
os.makedirs(sa, exist_ok=True)
shutil.copy(api.ca_path, os.path.join(sa, "ca.crt"))
with open(os.path.join(sa, "token"), "w") as fh:
    fh.write("token-1")
env = os.environ.copy()
env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=api.url.rsplit(":", 1)[1],
           NRM_SERVICE_ACCOUNT_DIR=sa)
p = Plugin("--http-address", ":0", env=env, kubeconfig_path=None)
check(wait_for(lambda: matches(want, CPU) and matches(want, MEM)), "in a pod (service account settings) it publishes too")
# ":PORT" listens on every address: IPv4 and, where the machine has it, IPv6.
check(p.get("/healthz")[0] == 200, "--http-address :PORT answers on 127.0.0.1")
try:
    six = socket.create_connection(("::1", p.port), timeout=2)
    six.close()
    have6 = True
except OSError:
    have6 = os.path.exists("/proc/net/if_inet6") and "00000000000000000000000000000001" in open("/proc/net/if_inet6").read()
    check(not have6, "--http-address :PORT answers on [::1] too")
if have6:
    with urllib.request.urlopen("http://[::1]:%d/healthz" % p.port, timeout=5) as resp:
        check(resp.status == 200, "--http-address :PORT answers on [::1] too")
p.stop()

# --- binding conditions: nrm controller labels, the node's binder writes -------------------
# The example driver's dev3 binds to its node with the condition
# example.nrm.io/ready. Tokens as in a cluster: the node agent's pod-bound
# service-account token names its node and may write the status of its own
# driver's devices on claims allocated to that node (associated-node); the
# controller's may list, watch and label claims and hold its lease.
from fakeapi import NODE_NAME_KEY  # noqa: E402

if os.path.exists(os.path.join(example_dir, "nrm-driver-example.so")):
    AGENT = "system:serviceaccount:nrm-system:nrm"
    slice_rules = [{"resource": "resourceslices", "verbs": ["list", "watch", "create", "update", "delete"]},
                   {"resource": "nodes", "verbs": ["get"]}]
    claim_rules = [{"resource": "resourceclaims", "verbs": ["get", "list", "watch"]},
                   {"resource": "resourceclaims/status", "verbs": ["get", "patch"]}]
    own = [{"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"], "resourceNames": [EXAMPLE]}]
    api.set_tokens({
        "token-1": None,
        "agent-a": {"user": AGENT, "extra": {NODE_NAME_KEY: [NODE]}, "rules": slice_rules + claim_rules + own},
        "agent-a-other": {"user": AGENT, "extra": {NODE_NAME_KEY: [NODE]}, "rules": slice_rules + claim_rules + [
            {"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"], "resourceNames": [CPU]}]},
        "ctrl": {"user": "system:serviceaccount:nrm-system:nrm-controller", "rules": [
            {"resource": "resourceclaims", "verbs": ["get", "list", "watch", "patch"]},
            {"resource": "leases", "verbs": ["get", "create", "update"], "namespace": "nrm-system"}]}})
    kc = {}
    for tok in ("agent-a", "agent-a-other", "ctrl"):
        kc[tok] = os.path.join(work, "kubeconfig-" + tok)
        api.write_kubeconfig(kc[tok], token=tok)
    bind_root = os.path.join(work, "bind-root")
    os.makedirs(bind_root, exist_ok=True)

    def node_selector(*nodes):
        return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                                      for n in nodes]}

    def binding_claim(name, node, selector=None):
        return api.put_claim({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name, "uid": "uid-" + name},
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": EXAMPLE}}]}},
            "status": {"allocation": {
                "devices": {"results": [{"request": "dev", "driver": EXAMPLE, "pool": node, "device": "dev3",
                                         "bindingConditions": [EXAMPLE + "/ready"],
                                         "bindingFailureConditions": [EXAMPLE + "/failed"]}]},
                "nodeSelector": selector or node_selector(node),
                "allocationTimestamp": "2026-12-01T10:00:00Z"}}})

    def label(name):
        return (api.get_claim("default", name) or {}).get("metadata", {}).get("labels", {}).get("nrm.io/node")

    def conditions(name):
        for d in (api.get_claim("default", name) or {}).get("status", {}).get("devices", []):
            if d.get("driver") == EXAMPLE and d.get("device") == "dev3":
                return {c["type"]: c for c in d.get("conditions", [])}
        return {}

    class Controller:
        def __init__(self, pod):
            self.log = os.path.join(work, "controller-%s.log" % pod)
            self.p = subprocess.Popen([NRM, "controller", "--kubeconfig", kc["ctrl"], "--drivers", "example",
                                       "--driver-dir", example_dir, "--lease-namespace", "nrm-system",
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
    check(wait_for(lambda: (api.get_lease("nrm-system", "nrm-controller") or {}).get("spec", {}).get("holderIdentity")
                   == "ctrl-1", 15), "nrm controller takes the lease nrm-system/nrm-controller")
    c2 = Controller("ctrl-2")
    p = Plugin("--drivers", "example", "--driver-dir", example_dir, "--fsroot", bind_root, "--allow-no-cpuset",
               kubeconfig_path=kc["agent-a"])
    check(wait_for(lambda: p.metric("nrm_slices_synced", driver=EXAMPLE) == 1, 20),
          "the node agent with a pod-bound token publishes the example pool")
    dev3 = [d for s in published(EXAMPLE) for d in s["spec"].get("devices", []) if d["name"] == "dev3"]
    check(dev3 and dev3[0].get("bindsToNode") is True and dev3[0].get("bindingConditions") == [EXAMPLE + "/ready"],
          "dev3 is published with bindsToNode and its binding condition")

    binding_claim("bind-a", NODE)
    check(wait_for(lambda: label("bind-a") == NODE, 15), "the controller labels a claim waiting on node-a's device")
    check(wait_for(lambda: conditions("bind-a").get(EXAMPLE + "/ready", {}).get("status") == "True", 15),
          "the node's binder makes the device ready: %s" % conditions("bind-a"))
    ready = conditions("bind-a").get(EXAMPLE + "/ready", {})
    check(ready.get("reason") == "Ready" and ready.get("lastTransitionTime"),
          "...with a reason and a transition time (%s)" % ready)
    check("ctrl-2" not in api.get_claim("default", "bind-a").get("metadata", {}).get("managedFields", [{}])[0]
          .get("manager", "") and "labelled" not in c2.text(), "the standby controller labels nothing")
    n = len(api.writes())
    time.sleep(3)
    check([w for w in writes_since(n) if "bind-a" in w["path"]] == [],
          "a settled claim is not written again")

    binding_claim("bind-b", "node-b")
    check(wait_for(lambda: label("bind-b") == "node-b", 15), "a claim of node-b gets node-b's label")
    binding_claim("bind-two", NODE, node_selector(NODE, "node-b"))
    time.sleep(3)
    check(conditions("bind-b") == {} and label("bind-two") is None and conditions("bind-two") == {},
          "node-a's binder leaves node-b's claim alone, and nobody takes a claim of two nodes")

    with open(os.path.join(bind_root, "example-unhealthy"), "w") as fh:
        fh.write("dev3\n")
    binding_claim("bind-bad", NODE)
    check(wait_for(lambda: conditions("bind-bad").get(EXAMPLE + "/failed", {}).get("status") == "True", 15),
          "a device that cannot be made ready reports its failure condition: %s" % conditions("bind-bad"))
    os.unlink(os.path.join(bind_root, "example-unhealthy"))
    p.stop()

    # A token without the driver's permission: the server refuses, nothing is written.
    p = Plugin("--drivers", "example", "--driver-dir", example_dir, "--fsroot", bind_root, "--allow-no-cpuset",
               kubeconfig_path=kc["agent-a-other"])
    binding_claim("bind-denied", NODE)
    check(wait_for(lambda: "changing status.devices requires" in p.text(), 20)
          and conditions("bind-denied") == {}, "without resourceclaims/driver for its driver the write is refused "
          "(422), named in the log, and nothing is written")
    p.stop()

    # Leadership moves: the leader gives the lease up at SIGTERM, the standby
    # takes it and labels the next claim.
    check(c1.stop() == 0, "the leader stops with status 0 at SIGTERM")
    check(wait_for(lambda: (api.get_lease("nrm-system", "nrm-controller") or {}).get("spec", {}).get("holderIdentity")
                   == "ctrl-2", 20), "the standby takes the lease over")
    binding_claim("bind-later", NODE)
    check(wait_for(lambda: label("bind-later") == NODE, 15), "...and labels the next claim")
    check(c2.stop() == 0, "the second controller stops with status 0")
    check("Callback aborted" not in c1.text() + c2.text(), "the controllers stop without spurious errors")
else:
    check(False, "the example driver is built (%s)" % example_dir)

# --- bad settings --------------------------------------------------------------------
bad = os.path.join(work, "bad-kubeconfig")
with open(bad, "w") as fh:
    fh.write("apiVersion: v1\nkind: Config\ncurrent-context: x\n")
r = subprocess.run([NRM, "plugin", "-t", TOPO, "--kubeconfig", bad, "--state-dir", os.path.join(work, "s2"), "--create-state-dir",
                    "--kubelet-dir", os.path.join(work, "k2"), "--cdi-dir", os.path.join(work, "c2")],
                   capture_output=True, text=True, timeout=30)
check(r.returncode == 1 and bad in r.stderr and "context `x` not found" in r.stderr,
      "a broken kubeconfig is named: " + r.stderr.strip())
untrusted = os.path.join(work, "untrusted-kubeconfig")
api.write_kubeconfig(untrusted, token="token-1")
with open(untrusted) as fh:
    text = fh.read()
other_ca = os.path.join(work, "other-ca.pem")
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", os.path.join(work, "o.key"),
                "-out", other_ca, "-days", "1", "-subj", "/CN=other"], check=True, capture_output=True)
with open(untrusted, "w") as fh:
    fh.write(re.sub(r"certificate-authority: .*", "certificate-authority: " + other_ca, text))
n = len(api.writes())
p = Plugin(kubeconfig_path=untrusted)
check(wait_for(lambda: "certificate" in p.text().lower() and "error" in p.text().lower(), 20),
      "a server certificate from another CA is refused")
check(writes_since(n) == [], "...and nothing was written")
p.stop()

# The named CA is the only one trusted: a certificate it did not sign is
# never looked up in the system store's directory as well.
if shutil.which("strace") is None:
    print("skipped: strace is not installed, the system store's directory is not checked")
else:
    trace, slog = os.path.join(work, "untrusted.trace"), os.path.join(work, "untrusted-strace.log")
    s = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=%file", "-o", trace, NRM, "plugin", "-t", TOPO,
                          "--node-name", NODE, "--kubeconfig", untrusted, "--kubelet-dir", os.path.join(work, "k3"),
                          "--cdi-dir", os.path.join(work, "c3"), "--state-dir", os.path.join(work, "s3"), "--create-state-dir",
                          "--reconcile-interval", "0"], stdout=open(slog, "w"), stderr=subprocess.STDOUT)
    refused = wait_for(lambda: "certificate" in open(slog).read().lower(), 30)
    for child in open("/proc/%d/task/%d/children" % (s.pid, s.pid)).read().split():
        os.kill(int(child), signal.SIGTERM)
    s.wait(30)
    check(refused, "traced, the server certificate is refused too: " + open(slog).read()[-300:])
    looked = sorted(set(re.findall(r'"(/etc/ssl/certs[^"]*)"', open(trace).read())))
    check(looked == [], "...and nothing in /etc/ssl/certs was looked at: %s" % looked[:3])

bad_exits = [(rc, log) for rc, log in exits if rc != 0]
check(not bad_exits, "every plugin stopped with status 0 (a sanitizer's finding would show here)%s"
      % ("" if not bad_exits else ": %d in %s: %s" % (bad_exits[0][0], bad_exits[0][1],
                                                        open(bad_exits[0][1]).read()[-2000:])))
api.stop()
shutil.rmtree(work, ignore_errors=True)
print("%d passed, %d failed" % (passed, len(failures)))
for f in failures:
    print("failed: " + f)
sys.exit(1 if failures else 0)
