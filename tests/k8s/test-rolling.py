#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rolling update and rollback with two plugin instances (rolling-update
mode, --instance-uid) on one state directory and one API server (fakeapi.py)
whose settings differ (cpu.mode numa, then partitioned): the newer instance
takes over the node's slices at its start and the older stops writing them,
so the slices change once and stay, and the older leaves the shared pool's
cpusets alone; when the newer stops (cleanly, or killed with -9), the older
still running takes both back."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-r"
SETTLE_S = 5.0

work = tempfile.mkdtemp(prefix="nrm-rolling-")
api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE)
token = os.path.join(work, "token")
with open(token, "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=token)


# A fake cgroupfs with one container on the shared pool. Only the first
# instance runs a reconciler: any write to it is the first's.
fsroot = os.path.join(work, "fsroot")
shared = os.path.join(fsroot, "sys/fs/cgroup/kubepods/besteffort/pod88/s2")
os.makedirs(shared)
for name, text in (("cgroup.controllers", "cpuset cpu memory"),):
    with open(os.path.join(fsroot, "sys/fs/cgroup", name), "w") as fh:
        fh.write(text)
for name in ("cpuset.cpus", "cpuset.mems", "cgroup.procs"):
    open(os.path.join(shared, name), "w").close()


def cpus():
    with open(os.path.join(shared, "cpuset.cpus")) as fh:
        return fh.read().strip()


def start(uid, mode, *extra):
    log = os.path.join(work, "plugin-%s.log" % uid)
    p = subprocess.Popen(
        [NRM, "plugin", "-t", TOPO, "--node-name", NODE, "--drivers", "cpu", "--cpu-mode", mode,
         "--instance-uid", uid, "--kubelet-dir", os.path.join(work, "kubelet"),
         "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"),
         "--create-state-dir", "--kubeconfig", kubeconfig, "--log-level", "debug"] + list(extra),
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    return p, log


def devices():
    return {d["name"] for s in api.slices() if s["spec"]["driver"] == "cpu.nrm.io"
            for d in s["spec"].get("devices", [])}


def numa():  # the devices of cpu.mode numa: one a NUMA node
    return devices() == {"numa0", "numa1"}


def partitioned():  # those of cpu.mode partitioned: cores, L3s and nodes
    return "core0" in devices() and "l3-0" in devices()


def slice_writes():
    return [r for r in api.writes() if "resourceslices" in r["path"]]


def watch_for(seconds, bad):
    """Samples the slices for `seconds`; the number of samples where bad()."""
    end, seen = time.time() + seconds, 0
    while time.time() < end:
        seen += bad()
        time.sleep(0.05)
    return seen


def settings_mode():
    try:
        with open(os.path.join(work, "state", "settings.json")) as fh:
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


a, log_a = start("pod-a", "numa", "--fsroot", fsroot, "--reconcile-interval", "1", "--http-address", "127.0.0.1:0")
b = None
try:
    check(wait_for(numa), "the first instance publishes numa devices: %s" % sorted(devices()))
    check(wait_for(lambda: cpus() != ""), "and keeps the shared pool: %s" % cpus())
    pool = cpus()
    check(wait_for(lambda: standby(log_a) == 0), "its /metrics: nrm_slices_standby 0")
    time.sleep(1)
    api.clear_requests()

    # Rolling update: the new pod starts beside the old one, other settings.
    b, log_b = start("pod-b", "partitioned", "--reconcile-interval", "0")
    check(wait_for(partitioned), "the second instance's partitioned devices replace them: %s" % sorted(devices()))
    back = watch_for(SETTLE_S, lambda: not partitioned())
    n = len(slice_writes())
    print("slice writes during the overlap (start of the second + %.0f s): %d" % (SETTLE_S, n))
    check(back == 0, "for %.0f s the numa devices never come back (%d samples with them)" % (SETTLE_S, back))
    check(n <= 6, "the slice writes stay bounded: %d, no back-and-forth" % n)
    api.clear_requests()
    time.sleep(2)
    check(not slice_writes(), "and then stop: %d more writes in 2 s" % len(slice_writes()))
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
    kdir = os.path.join(work, "kubelet")

    def sockets(uid):
        return [p for p in (os.path.join(kdir, "plugins/cpu.nrm.io/dra-%s.sock" % uid),
                            os.path.join(kdir, "plugins_registry/cpu.nrm.io-%s-reg.sock" % uid),
                            os.path.join(work, "state/cpu.nrm.io-%s.instance.lock" % uid)) if os.path.exists(p)]
    check(len(sockets("pod-c")) == 3, "the killed instance left its sockets: %s" % sockets("pod-c"))
    b, log_b = start("pod-d", "numa", "--reconcile-interval", "0")
    check(wait_for(lambda: "publishes now" in text(log_a) and text(log_a).count("publishes now") == 3),
          "a fourth instance takes over")
    check(not sockets("pod-c") and len(sockets("pod-a")) == 3,
          "and removed the dead one's sockets and lock, not the live one's: %s %s"
          % (sockets("pod-c"), sockets("pod-a")))
    check("removed the sockets of instance pod-c, which is gone" in text(log_b), "and says so")
finally:
    if b is not None:
        b.kill()
        b.wait()
    stop_plugin(a, api, log_a, work)

finish()
