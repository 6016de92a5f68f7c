#!/usr/bin/env python3
"""A real Prometheus (Debian's prometheus, on loopback) scrapes a real `nrm
plugin` and evaluates deploy/prometheus/nrm-rules.yaml; real faults make
the alerts fire, read back through Prometheus's HTTP API:

  - no kubelet runs here: NrmPluginNotRegistered, for both drivers;
  - a prepare of a claim that does not exist: NrmClaimPrepareErrors;
  - the state directory made read-only while a claim is prepared (the
    plugin runs as nobody when the test runs as root, so that the mode
    binds it): NrmCheckpointWriteErrors;
  - three CPUs taken offline in the fake sysfs tree (--fsroot) after a claim
    took 4 CPUs: the CPU driver's device is unhealthy (NrmDevicesUnhealthy)
    and the shared pool drops below cpu.minSharedCPUs
    (NrmSharedPoolBelowMinimum), which stays quiet before and clears once
    the CPUs are back.

The alerts' `for` durations are cut to 1 s in the copy Prometheus loads
(minutes are too long for a test); the expressions are the file's own.
Every rule evaluates without error, and every query of the Grafana
dashboard deploy/grafana/nrm-dashboard.json answers, non-empty where its
metrics have data. Skips (77) without prometheus."""
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
import urllib.parse
import urllib.request

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed")
    sys.exit(77)

PROMETHEUS = shutil.which("prometheus")
if PROMETHEUS is None:
    print("SKIP: prometheus is not installed (Debian package prometheus)")
    sys.exit(77)
TOP = os.environ.get("NRM_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NRM = os.environ.get("NRM") or os.path.join(TOP, "nrm", "nrm")
DRA_CLIENT = os.environ.get("NRM_DRA_CLIENT") or os.path.join(TOP, "tests", "plugin", "dra-client")
for exe in (NRM, DRA_CLIENT):
    if not os.access(exe, os.X_OK):
        print(f"FAIL: {exe} is not built")
        sys.exit(1)
TOPOLOGY = os.path.join(TOP, "tests", "topologies", "24em64t-2n6c2t-pci.xml")  # NUMA node 0: even CPUs
RULES = os.path.join(TOP, "deploy", "prometheus", "nrm-rules.yaml")
DASHBOARD = os.path.join(TOP, "deploy", "grafana", "nrm-dashboard.json")
MIN_SHARED = 18

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    failed += not ok
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout=30):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(0.25)


work = tempfile.mkdtemp(prefix="nrm-prom.")
procs = []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    shutil.rmtree(work, ignore_errors=True)


def fail_out(msg):
    print("FAIL " + msg)
    for name in ("nrm.log", "prometheus.log"):
        path = os.path.join(work, name)
        if os.path.exists(path):
            print(f"--- {name} (last 30 lines)")
            print("".join(open(path).readlines()[-30:]))
    cleanup()
    sys.exit(1)


# --- nrm plugin: a recorded machine, a fake sysfs tree, claims from a folder --
fsroot = os.path.join(work, "fsroot")
online = os.path.join(fsroot, "sys", "devices", "system", "cpu", "online")
os.makedirs(os.path.dirname(online))
with open(online, "w") as fh:
    fh.write("0-23\n")
claims = os.path.join(work, "claims")
state = os.path.join(work, "state")
kubelet = os.path.join(work, "kubelet")
for d in (claims, state, kubelet, os.path.join(work, "cdi")):
    os.makedirs(d)


def claim(name, uid, cpus):
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": name, "namespace": "default", "uid": uid},
           "status": {"allocation": {"devices": {"results": [
               {"request": "cpus", "driver": "cpu.nrm.io", "pool": "node-1", "device": "numa1",
                "shareID": uid, "consumedCapacity": {"cpus": str(cpus)}}]}}}}
    with open(os.path.join(claims, f"default_{name}.json"), "w") as fh:
        json.dump(doc, fh)


claim("four", "11111111-0000-4000-8000-000000000001", 4)
claim("two", "11111111-0000-4000-8000-000000000002", 2)
# As root the plugin runs as nobody: a read-only folder then stops its writes.
# nobody may not reach the build tree (a checkout under /root): it runs
# copies of nrm-agent (what `nrm plugin` runs) and of the machine.
as_user = []
cmd = [NRM, "plugin", "-t", TOPOLOGY]
if os.geteuid() == 0:
    if shutil.which("setpriv") is None:
        print("SKIP: running as root without setpriv (util-linux) to run the plugin as nobody")
        cleanup()
        sys.exit(77)
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    cmd = [shutil.copy2(os.path.join(os.path.dirname(NRM), "nrm-agent"), work), "plugin",
           "-t", shutil.copy2(TOPOLOGY, work)]
    os.chmod(work, 0o755)
    for root, dirs, _ in os.walk(work):
        for d in dirs:
            os.chown(os.path.join(root, d), 65534, 65534)
nrm_log = open(os.path.join(work, "nrm.log"), "w")
procs.append(subprocess.Popen(
    as_user + cmd + ["--drivers", "cpu,memory", "--fsroot", fsroot, "--allow-no-cpuset",
                     "--node-name", "node-1", "--claims-dir", claims, "--kubelet-dir", kubelet,
                     "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", state, "--reconcile-interval", "0",
                     "--min-shared-cpus", str(MIN_SHARED), "--http-address", "127.0.0.1:0"],
    stdout=nrm_log, stderr=subprocess.STDOUT))


def nrm_port():
    m = re.search(r"on port (\d+)", open(os.path.join(work, "nrm.log")).read())
    return m and int(m.group(1))


port = wait_for("nrm's port", nrm_port, 20)
if not port:
    fail_out("nrm plugin did not serve /metrics")

# --- Prometheus: the rules with short `for`, 1 s scrapes and evaluations ------
rules = yaml.safe_load(open(RULES))
n_rules = 0
for g in rules["groups"]:
    for r in g["rules"]:
        n_rules += 1
        if "for" in r:
            r["for"] = "1s"
with open(os.path.join(work, "rules.yaml"), "w") as fh:
    yaml.safe_dump(rules, fh)
with open(os.path.join(work, "prometheus.yml"), "w") as fh:
    yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [os.path.join(work, "rules.yaml")],
                    "scrape_configs": [{"job_name": "nrm", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]},
                   fh)
prom_port = free_port()
prom = f"http://127.0.0.1:{prom_port}"
procs.append(subprocess.Popen(
    [PROMETHEUS, "--config.file", os.path.join(work, "prometheus.yml"),
     "--storage.tsdb.path", os.path.join(work, "tsdb"), "--web.listen-address", f"127.0.0.1:{prom_port}"],
    stdout=open(os.path.join(work, "prometheus.log"), "w"), stderr=subprocess.STDOUT))


# Loopback only: no proxy from the environment.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def api(path, **params):
    url = prom + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with opener.open(url, timeout=5) as r:
            return json.load(r)
    except Exception as e:  # not up yet, or a bad query (an HTTP 400 with a JSON error)
        body = getattr(e, "read", lambda: b"")()
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "error", "error": str(e)}


def query(expr):
    return api("/api/v1/query", query=expr)


def alerts(name, state="firing"):
    a = api("/api/v1/alerts")
    return [x for x in a.get("data", {}).get("alerts", []) if x["labels"]["alertname"] == name and x["state"] == state]


def rule_states():
    r = api("/api/v1/rules")
    return {x["name"]: x for g in r.get("data", {}).get("groups", []) for x in g["rules"]}


def up():
    r = api("/api/v1/targets")
    t = r.get("data", {}).get("activeTargets", [])
    return t and t[0]["health"] == "up"


if not wait_for("Prometheus scrapes nrm", up, 30):
    fail_out("Prometheus does not scrape nrm's /metrics: " + json.dumps(api("/api/v1/targets"))[:400])
print(f"ok   Prometheus (port {prom_port}) scrapes nrm plugin's /metrics (port {port})")


def evaluated():
    s = rule_states()
    done = len(s) == n_rules and all(x.get("lastEvaluation", "").startswith("2") and x["health"] != "unknown"
                                     for x in s.values())
    return s if done else None


states = wait_for("the rules are evaluated", evaluated, 20)
check(states and all(x["health"] == "ok" for x in states.values()),
      f"all {n_rules} rules load and evaluate without error"
      + "".join(f"; {n}: {x.get('lastError')}" for n, x in (states or {}).items() if x["health"] != "ok"))

# No kubelet answers the registration.
fired = wait_for("NrmPluginNotRegistered", lambda: alerts("NrmPluginNotRegistered"), 20) or []
check(sorted(a["labels"]["driver"] for a in fired) == ["cpu.nrm.io", "memory.nrm.io"],
      "NrmPluginNotRegistered fires for both drivers (no kubelet): "
      + ", ".join(f"{a['labels']['driver']} {float(a['value']):g}" for a in fired))


def value(expr):
    r = query(expr).get("data", {}).get("result", [])
    return float(r[0]["value"][1]) if len(r) == 1 else None


def prepare(name, uid):
    sock = os.path.join(kubelet, "plugins", "cpu.nrm.io", "dra.sock")
    return subprocess.run([DRA_CLIENT, "prepare", sock, "default", name, uid], capture_output=True, text=True)


# A claim takes 4 CPUs while the minimum holds: 20 shared CPUs stay, 18 needed.
p = prepare("four", "11111111-0000-4000-8000-000000000001")
check(p.returncode == 0, "claim `four` (4 CPUs of numa1) is prepared: " + (p.stdout + p.stderr).strip())
check(wait_for("20 shared CPUs", lambda: value("nrm_shared_pool_cpus") == 20, 10),
      f"nrm_shared_pool_cpus 20 beside nrm_shared_pool_min_cpus {value('nrm_shared_pool_min_cpus'):.0f}")
time.sleep(3)  # three evaluations with the data in place
quiet = ["NrmSharedPoolBelowMinimum", "NrmDevicesUnhealthy", "NrmCheckpointWriteErrors", "NrmClaimPrepareErrors"]
s = rule_states()
check(all(s[n]["state"] == "inactive" for n in quiet),
      "before any fault these are quiet: " + ", ".join(f"{n} {s[n]['state']}" for n in quiet))

# A claim that does not exist.
p = prepare("missing", "11111111-0000-4000-8000-00000000000f")
check(p.returncode != 0 and "not found" in p.stderr, "a missing claim fails to prepare: " + p.stderr.strip())
fired = wait_for("NrmClaimPrepareErrors", lambda: alerts("NrmClaimPrepareErrors"), 15) or []
check([(a["labels"]["driver"], a["labels"]["kind"]) for a in fired] == [("cpu.nrm.io", "not_found")],
      "NrmClaimPrepareErrors fires: " + ", ".join(f"{a['labels']['driver']} {a['labels']['kind']}" for a in fired))

# The state directory turns read-only: the checkpoint write of the next prepare fails.
os.chmod(state, 0o555)
p = prepare("two", "11111111-0000-4000-8000-000000000002")
os.chmod(state, 0o755)
check(p.returncode != 0, "with the state directory read-only, claim `two` fails: " + p.stderr.strip())
fired = wait_for("NrmCheckpointWriteErrors", lambda: alerts("NrmCheckpointWriteErrors"), 15) or []
check([a["labels"]["driver"] for a in fired] == ["cpu.nrm.io"],
      "NrmCheckpointWriteErrors fires: " + ", ".join(f"{a['labels']['driver']} {float(a['value']):g}" for a in fired))
check(not alerts("NrmSharedPoolBelowMinimum", "pending") and not alerts("NrmSharedPoolBelowMinimum"),
      "NrmSharedPoolBelowMinimum is still quiet (20 of 18 CPUs)")

# CPUs 18, 20 and 22 (NUMA node 0, shared) go offline: 17 shared CPUs, fewer than 18.
with open(online, "w") as fh:
    fh.write("0-17,19,21,23\n")
fired = wait_for("NrmSharedPoolBelowMinimum", lambda: alerts("NrmSharedPoolBelowMinimum"), 15) or []
check(len(fired) == 1 and float(fired[0]["value"]) == 17,
      "CPUs 18,20,22 offline: NrmSharedPoolBelowMinimum fires with "
      + ", ".join(f"{float(a['value']):g} CPUs" for a in fired))
fired = wait_for("NrmDevicesUnhealthy", lambda: alerts("NrmDevicesUnhealthy"), 15) or []
check([(a["labels"]["driver"], float(a["value"])) for a in fired] == [("cpu.nrm.io", 1.0)],
      "NrmDevicesUnhealthy fires for the CPU driver's numa0: "
      + ", ".join(f"{a['labels']['driver']} {float(a['value']):g}" for a in fired))

# --- the Grafana dashboard's queries -------------------------------------------
dash = json.load(open(DASHBOARD))
exprs = [(panel.get("title"), t["expr"]) for panel in dash["panels"] for t in panel.get("targets", []) if "expr" in t]
check(len(exprs) > 0, f"the dashboard has {len(exprs)} queries")
have_data = {}


def has_data(name):
    if name not in have_data:
        have_data[name] = bool(query(f'group({{__name__="{name}"}})').get("data", {}).get("result"))
    return have_data[name]


for title, expr in exprs:
    # What Grafana puts for its variables: every instance, its rate interval.
    q = expr.replace("$instance", ".*").replace("$__rate_interval", "1m")
    r = query(q)
    names = set(re.findall(r"\b(nrm_[a-z_]+|ALERTS)\b", q))
    want = all(has_data(n) for n in names)
    got = r.get("status") == "success" and len(r["data"]["result"]) > 0
    check(r.get("status") == "success" and (got or not want),
          f"dashboard `{title}`: {expr} -> {r.get('status')}, {len(r.get('data', {}).get('result', []))} series"
          + (f" ({r.get('error')})" if r.get("status") != "success" else "")
          + ("" if want else " (no data for " + ", ".join(sorted(n for n in names if not has_data(n))) + " here)"))

# The CPUs come back: the shared pool's alert clears.
with open(online, "w") as fh:
    fh.write("0-23\n")
check(wait_for("cleared", lambda: rule_states()["NrmSharedPoolBelowMinimum"]["state"] == "inactive", 15),
      "CPUs back online: NrmSharedPoolBelowMinimum is inactive again")

nrm = procs[0]
nrm.send_signal(signal.SIGTERM)
try:
    rc = nrm.wait(30)
except subprocess.TimeoutExpired:
    rc = "still running after 30 s"
check(rc == 0, f"nrm plugin stops on SIGTERM with status 0 (a sanitizer's finding would show here): {rc}")
if failed:
    fail_out(f"{failed} checks failed")
cleanup()
