#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rolling update and rollback on the real control plane (kube-apiserver,
scheduler, controller-manager): two nrm plugin instances (rolling-update
mode, --instance-uid) for one Node, on one state directory and one kubelet
directory, each as the DaemonSet's ServiceAccount with a token bound to its
pod on the node, whose settings differ (cpu.mode numa, then partitioned).
The newer instance takes over the node's slices at its start and the older
stops writing them, so the slices the server holds change once and stay
(nrm's writes counted from the API server's audit log), and the older
leaves the shared pool's cpusets alone; when the newer stops (cleanly, or
killed with -9), the older still running takes both back. A killed
instance's sockets and lock are removed by the next instance to start."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, binaries, check, failures, finish,  # noqa: E402
                        skip, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-r"
DRIVER = "cpu.nrm.io"
SETTLE_S = 5.0
AUDIT_BATCH_S = 2.5  # the audit log is written in batches (at most 1 s apart)
bindir = binaries()
work = workdir()
cluster = Cluster(work, "rolling", bindir)
cluster.install_nrm()
cluster.create_nodes([(NODE, 24, 64 << 30)])
# Both pods of the rolling update are the DaemonSet's on this node: one
# identity, the token bound to its pod, one kubeconfig for every instance.
kubeconfig = cluster.nrm_kubeconfig(NODE, os.path.join(work, "kubeconfig"))
kdir = os.path.join(work, "kubelet")
state = os.path.join(work, "state")

# A fake cgroupfs with one container on the shared pool. Only the first
# instance runs a reconciler: any write to it is the first's.
fsroot = os.path.join(work, "fsroot")
shared = os.path.join(fsroot, "sys/fs/cgroup/kubepods/besteffort/pod88/s2")
os.makedirs(shared)
with open(os.path.join(fsroot, "sys/fs/cgroup", "cgroup.controllers"), "w") as fh:
    fh.write("cpuset cpu memory")
for name in ("cpuset.cpus", "cpuset.mems", "cgroup.procs"):
    open(os.path.join(shared, name), "w").close()


def cpus():
    with open(os.path.join(shared, "cpuset.cpus")) as fh:
        return fh.read().strip()


def start(uid, mode, *extra):
    """One instance of the plugin, as the DaemonSet's pod uid runs it."""
    log = os.path.join(work, "plugin-%s.log" % uid)
    p = subprocess.Popen(
        [NRM, "plugin", "-t", TOPO, "--node-name", NODE, "--drivers", "cpu", "--cpu-mode", mode,
         "--instance-uid", uid, "--kubelet-dir", kdir, "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", state,
         "--create-state-dir", "--kubeconfig", kubeconfig, "--log-level", "debug"] + list(extra),
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    return p, log


def devices():
    """The cpu driver's devices of the node as the API server holds them."""
    return {d["name"] for s in cluster.slices(NODE, DRIVER) for d in s["spec"].get("devices", [])}


def numa():  # the devices of cpu.mode numa: one a NUMA node
    return devices() == {"numa0", "numa1"}


def partitioned():  # those of cpu.mode partitioned: cores, L3s and nodes
    d = devices()
    return "core0" in d and "l3-0" in d


def mark():
    """An index into the audit log once what came before is written."""
    time.sleep(AUDIT_BATCH_S)
    return len(cluster.audit())


def slice_writes(since):
    """nrm's writes to ResourceSlices after the audit log's index since."""
    time.sleep(AUDIT_BATCH_S)
    return ["%s %s %s" % (e["verb"], e["objectRef"].get("name", "(new)"), e["responseStatus"].get("code"))
            for e in cluster.writes(since) if e.get("objectRef", {}).get("resource") == "resourceslices"]


def watch_for(seconds, bad):
    """Samples the slices for `seconds`; the number of samples where bad()."""
    end, seen = time.time() + seconds, 0
    while time.time() < end:
        seen += bad()
        time.sleep(0.05)
    return seen


def settings_mode():
    try:
        with open(os.path.join(state, "settings.json")) as fh:
            return json.load(fh).get("cpuMode")
    except (OSError, ValueError):
        return None


def text(log):
    with open(log) as fh:
        return fh.read()


def standby(log):
    """nrm_slices_standby of the cpu driver on the instance's /metrics."""
    m = re.search(r"/metrics on port (\d+)", text(log))
    if not m:
        return None
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=5) as r:
        m = re.search(r'^nrm_slices_standby\{driver="cpu.nrm.io"\} (\d)$', r.read().decode(), re.M)
    return int(m.group(1)) if m else None


def sockets(uid):
    return [p for p in (os.path.join(kdir, "plugins/cpu.nrm.io/dra-%s.sock" % uid),
                        os.path.join(kdir, "plugins_registry/cpu.nrm.io-%s-reg.sock" % uid),
                        os.path.join(state, "cpu.nrm.io-%s.instance.lock" % uid)) if os.path.exists(p)]


a, log_a = start("pod-a", "numa", "--fsroot", fsroot, "--reconcile-interval", "1", "--http-address", "127.0.0.1:0")
b = log_b = None
try:
    check(wait_for(numa), "the first instance publishes numa devices: %s" % sorted(devices()))
    check(wait_for(lambda: cpus() != ""), "and keeps the shared pool: %s" % cpus())
    pool = cpus()
    check(wait_for(lambda: standby(log_a) == 0), "its /metrics: nrm_slices_standby 0")
    time.sleep(1)
    since = mark()

    # Rolling update: the new pod starts beside the old one, other settings.
    b, log_b = start("pod-b", "partitioned", "--reconcile-interval", "0")
    check(wait_for(partitioned), "the second instance's partitioned devices replace them: %s" % sorted(devices()))
    back = watch_for(SETTLE_S, lambda: not partitioned())
    w = slice_writes(since)
    print("# slice writes during the overlap (start of the second + %.0f s), from the audit log: %d: %s"
          % (SETTLE_S, len(w), w))
    check(back == 0, "for %.0f s the numa devices never come back (%d samples with them)" % (SETTLE_S, back))
    check(w and len(w) <= 6, "the slice writes stay bounded: %d, no back-and-forth" % len(w))
    since = len(cluster.audit())
    time.sleep(2)
    w = slice_writes(since)
    check(not w, "and then stop: %d more writes in 2 s %s" % (len(w), w))
    check("publishes now" in text(log_a), "the first instance says that it stands by")
    check(standby(log_a) == 1, "its /metrics: nrm_slices_standby 1")
    check(settings_mode() == "partitioned", "settings.json (for nrm status) is the second's: %s" % settings_mode())
    with open(os.path.join(shared, "cpuset.cpus"), "w") as fh:
        fh.write("0")
    check(watch_for(3, lambda: cpus() != "0") == 0, "and leaves the shared pool's cpusets alone (drift stays "
          "for 3 s at a 1 s interval): %s" % cpus())

    # The new pod stops (a failed rollout is undone): the old one takes back.
    b.send_signal(signal.SIGTERM)
    check(b.wait(15) == 0, "the second instance stops cleanly")
    b = None
    check(wait_for(numa, 10), "the first instance publishes its numa devices again: %s" % sorted(devices()))
    check("publishes again" in text(log_a), "and says so")
    check(wait_for(lambda: cpus() == pool, 5), "and keeps the shared pool again: %s" % cpus())
    check(settings_mode() == "numa", "and settings.json is the first's again: %s" % settings_mode())
    check(standby(log_a) == 0, "and nrm_slices_standby 0")

    # The newer dies without releasing: the kernel frees its lock.
    b, log_b = start("pod-c", "partitioned", "--reconcile-interval", "0")
    check(wait_for(partitioned), "a third instance takes over: %s" % sorted(devices()))
    check(watch_for(2, lambda: not partitioned()) == 0, "and keeps the slices")
    b.send_signal(signal.SIGKILL)
    b.wait()
    b = None
    t0 = time.time()
    check(wait_for(numa, 10), "killed with -9, the first instance takes back within %.1f s: %s"
          % (time.time() - t0, sorted(devices())))

    # Its sockets stay (a pod UID never comes back): the next instance to
    # start removes them, and leaves those of the live one alone.
    check(len(sockets("pod-c")) == 3, "the killed instance left its sockets: %s" % sockets("pod-c"))
    b, log_b = start("pod-d", "numa", "--reconcile-interval", "0")
    check(wait_for(lambda: text(log_a).count("publishes now") == 3), "a fourth instance takes over")
    check(not sockets("pod-c") and len(sockets("pod-a")) == 3,
          "and removed the dead one's sockets and lock, not the live one's: %s %s"
          % (sockets("pod-c"), sockets("pod-a")))
    check("removed the sockets of instance pod-c, which is gone" in text(log_b), "and says so")
finally:
    if b is not None:
        b.kill()
        b.wait()
    a.send_signal(signal.SIGTERM)
    try:
        rc = a.wait(15)
    except subprocess.TimeoutExpired:
        a.kill()
        rc = a.wait()
    check(rc == 0, "the plugin stops cleanly (exit %s)" % rc)
    if failures:
        for log in (log_a, log_b):
            if log:
                print("--- %s\n%s" % (log, text(log)[-3000:]))
    cluster.stop()

finish()
