#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin as it runs in a cluster: claims read from an API server over
TLS (the loopback fake of tests/k8s), ResourceSlices published, /metrics
served. Prints the time to publish, the prepare latency with the claim's
GET (the plugin's own histogram, and the kubelet-side round trip), and the
daemon's memory.
  bench-api.py NRM DRA_CLIENT TOPOLOGY"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "k8s"))

if len(sys.argv) not in (4, 5):
    sys.exit(__doc__)
NRM, CLIENT, TOPO = sys.argv[1:4]
if shutil.which("openssl") is None:
    print("bench-api: skipped, openssl is not installed")
    sys.exit(0)
from fakeapi import FakeAPI  # noqa: E402

CLAIMS = 200
work = tempfile.mkdtemp(prefix="nrm-bench-api-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
api = FakeAPI(work, tokens=["bench"])
api.start()
api.add_node("bench")
api.write_kubeconfig(os.path.join(work, "kubeconfig"), token="bench")
log = open(os.path.join(work, "plugin.log"), "w")
t0 = time.time()
p = subprocess.Popen([NRM, "plugin", "-t", TOPO, "--node-name", "bench", "--kubeconfig", os.path.join(work, "kubeconfig"),
                      "--kubelet-dir", os.path.join(work, "k"), "--cdi-dir", os.path.join(work, "cdi"),
                      "--state-dir", os.path.join(work, "state"), "--create-state-dir", "--reconcile-interval", "0",
                      "--http-address", "127.0.0.1:0"] + sys.argv[4:5], stdout=log, stderr=subprocess.STDOUT)


def metrics():
    text = open(log.name).read()
    m = re.search(r"/metrics on port (\d+)", text)
    if not m:
        return ""
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=5) as r:
        return r.read().decode()


def value(body, name, **labels):
    for line in body.splitlines():
        m = re.match(r"^(\w+)(\{.*\})? (\S+)$", line)
        if m and m.group(1) == name and all('%s="%s"' % kv in (m.group(2) or "") for kv in labels.items()):
            return float(m.group(3))
    return None


synced = None
while time.time() - t0 < 30:
    try:
        body = metrics()
        if value(body, "nrm_slices_synced", driver="cpu.nrm.io") == 1 and \
                value(body, "nrm_slices_synced", driver="memory.nrm.io") == 1:
            synced = time.time() - t0
            break
    except OSError:
        pass
    time.sleep(0.01)

dev = next(d["name"] for s in api.slices() if s["spec"]["driver"] == "cpu.nrm.io"
           for d in s["spec"].get("devices", []))
sock = os.path.join(work, "k", "plugins", "cpu.nrm.io", "dra.sock")
rtt = []
for i in range(CLAIMS):
    uid = "00000000-0000-4000-8000-%012d" % i
    api.put_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"namespace": "default", "name": "c%d" % i, "uid": uid},
                   "status": {"allocation": {"devices": {"results": [
                       {"request": "cpus", "driver": "cpu.nrm.io", "pool": "bench", "device": dev,
                        "consumedCapacity": {"cpus": "1"}}]}}}})
    a = time.time()
    subprocess.run([CLIENT, "prepare", sock, "default", "c%d" % i, uid], check=True, stdout=subprocess.DEVNULL)
    rtt.append((time.time() - a) * 1000)
    subprocess.run([CLIENT, "unprepare", sock, uid], check=True)
body = metrics()
count = value(body, "nrm_claim_operation_duration_seconds_count", driver="cpu.nrm.io", operation="prepare")
total = value(body, "nrm_claim_operation_duration_seconds_sum", driver="cpu.nrm.io", operation="prepare")
rss = hwm = None
with open("/proc/%d/status" % p.pid) as fh:
    for line in fh:
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
p.send_signal(signal.SIGTERM)
p.wait(30)
api.stop()
shutil.rmtree(work, ignore_errors=True)
rtt.sort()
print("plugin with the Kubernetes API (loopback TLS server, %d claims read with GET, state on tmpfs)" % CLAIMS)
print("  start to both pools published   %7.0f ms" % (synced * 1000 if synced else float("nan")))
print("  prepare incl. claim GET, mean   %7.3f ms (the plugin's histogram, %d calls)" %
      (total / count * 1000 if count else float("nan"), count or 0))
print("  kubelet-side round trip         p50 %6.2f ms  p99 %6.2f ms (includes starting the client)" %
      (rtt[len(rtt) // 2], rtt[int(len(rtt) * 0.99)]))
print("  daemon RSS %.1f MiB, peak %.1f MiB (publishing over TLS, serving /metrics)" % (rss, hwm))
