#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm plugin as it runs in a cluster, against the real kube-apiserver
(tests/cluster's control plane on loopback: etcd, kube-apiserver, scheduler
and controller-manager of 1.36, or of NRM_K8S_LINE, deploy/kubernetes/nrm.yaml
applied) with the DaemonSet's identity (a token of its ServiceAccount bound
to its pod on the node, as the kubelet gives it; never the admin): claims
read from the API over TLS, ResourceSlices published, each driver
registered as the kubelet does, /metrics served. Each claim is created
and given its allocation (one CPU of the first CPU device, a fresh shareID)
by the bench's admin through the status subresource, as the scheduler
writes it; only then is the prepare timed. Prints the time to publish, the
prepare latency with the claim's GET (the plugin's own histogram, and the
kubelet-side round trip), and the daemon's memory. The control plane's
start is not timed. Exits 77 where the upstream binaries cannot be built
(tests/cluster/build.sh).
  bench-api.py NRM DRA_CLIENT TOPOLOGY [EXTRA-PLUGIN-FLAG]"""

import os
import re
import shutil
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import Cluster, NrmPlugin, binaries, wait_for  # noqa: E402

if len(sys.argv) not in (4, 5):
    sys.exit(__doc__)
NRM, CLIENT, TOPO = (os.path.abspath(a) for a in sys.argv[1:4])
# NrmPlugin runs these, not the tree's defaults.
clusterlib.NRM, clusterlib.DRA_CLIENT = NRM, CLIENT

CLAIMS = 200
CPU, MEM = "cpu.nrm.io", "memory.nrm.io"
NODE = "bench"


def capacity(topo):
    """The Node's CPUs and memory, from the recorded machine."""
    with open(topo) as fh:
        text = fh.read()
    return text.count('type="PU"'), sum(int(m) for m in re.findall(r'local_memory="(\d+)"', text)) or 64 << 30


def claim(name):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name},
            "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": CPU}}]}}}


bindir = binaries()
# The control plane on disk, as in the cluster tests; nrm's state on tmpfs.
base = tempfile.mkdtemp(prefix="nrm-bench-api-")
work = tempfile.mkdtemp(prefix="nrm-bench-api-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
cluster = p = None
try:
    cluster = Cluster(base, "bench", bindir)
    cluster.install_nrm()
    cluster.create_nodes([(NODE, *capacity(TOPO))])
    kubeconfig = cluster.nrm_kubeconfig(NODE, os.path.join(work, "kubeconfig"))
    # The plugin's flags as in production (info log, not NrmPlugin's debug);
    # its identity made above, so the time to publish starts at the exec.
    p = NrmPlugin(cluster, NODE, work, ["-t", TOPO] + sys.argv[4:5])
    t0 = time.time()
    p.start("--kubeconfig", kubeconfig, "--log-level", "info", kubeconfig=False)
    synced = wait_for(lambda: p.metric("nrm_slices_synced", CPU) == 1 and p.metric("nrm_slices_synced", MEM) == 1
                      and time.time() - t0, 30, 0.01)
    devs = [d["name"] for s in cluster.slices(NODE, CPU) for d in s["spec"].get("devices", [])]
    if not synced or not devs:
        sys.stdout.write(p.text()[-3000:])
        sys.exit("bench-api: the pools were not published")
    if not p.register():
        sys.stdout.write(p.text()[-3000:])
        sys.exit("bench-api: the drivers did not register")
    rtt = []
    for i in range(CLAIMS):
        c = cluster.allocate(claim("c%d" % i), NODE, [
            ("cpus", CPU, NODE, devs[0], {"consumedCapacity": {"cpus": "1"}, "shareID": str(uuid.uuid4())})])
        a = time.time()
        ok, out = p.prepare(CPU, c)
        rtt.append((time.time() - a) * 1000)
        if not ok or not p.unprepare(CPU, c):
            sys.stdout.write(p.text()[-3000:])
            sys.exit("bench-api: claim c%d: %s" % (i, out))
    count = p.metric("nrm_claim_operation_duration_seconds_count", CPU, operation="prepare")
    total = p.metric("nrm_claim_operation_duration_seconds_sum", CPU, operation="prepare")
    rss = hwm = None
    with open("/proc/%d/status" % p.proc.pid) as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
finally:
    if p:
        p.stop()
    if cluster:
        cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
rtt.sort()
print("plugin with the Kubernetes API (real kube-apiserver %s on loopback TLS, the DaemonSet's token, "
      "%d claims read with GET, state on tmpfs)" % (cluster.version, CLAIMS))
print("  start to both pools published   %7.0f ms" % (synced * 1000))
print("  prepare incl. claim GET, mean   %7.3f ms (the plugin's histogram, %d calls)" %
      (total / count * 1000 if count else float("nan"), count or 0))
print("  kubelet-side round trip         p50 %6.2f ms  p99 %6.2f ms (includes starting the client)" %
      (rtt[len(rtt) // 2], rtt[int(len(rtt) * 0.99)]))
print("  daemon RSS %.1f MiB, peak %.1f MiB (publishing over TLS, serving /metrics)" % (rss, hwm))
