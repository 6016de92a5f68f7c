#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rolling update and rollback with two plugin instances (rolling-update
mode, --instance-uid) on one state directory and one API server (fakeapi.py)
whose settings differ (cpu.mode numa, then partitioned): the newer instance
takes over the node's slices at its start and the older stops writing them,
so the slices change once and stay; when the newer stops (cleanly, or
killed with -9), the older still running takes them back."""

import os
import signal
import subprocess
import sys
import tempfile
import time

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


def start(uid, mode):
    log = os.path.join(work, "plugin-%s.log" % uid)
    p = subprocess.Popen(
        [NRM, "plugin", "-t", TOPO, "--node-name", NODE, "--drivers", "cpu", "--cpu-mode", mode,
         "--instance-uid", uid, "--kubelet-dir", os.path.join(work, "kubelet"),
         "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"),
         "--create-state-dir", "--reconcile-interval", "0", "--kubeconfig", kubeconfig, "--log-level", "debug"],
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


def text(log):
    with open(log) as fh:
        return fh.read()


a, log_a = start("pod-a", "numa")
b = None
try:
    check(wait_for(numa), "the first instance publishes numa devices: %s" % sorted(devices()))
    time.sleep(1)
    api.clear_requests()

    # Rolling update: the new pod starts beside the old one, other settings.
    b, log_b = start("pod-b", "partitioned")
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

    # The new pod stops (a failed rollout is undone): the old one takes back.
    b.send_signal(signal.SIGTERM)
    check(b.wait(15) == 0, "the second instance stops cleanly")
    b = None
    check(wait_for(numa, 10), "the first instance publishes its numa devices again: %s" % sorted(devices()))
    check("publishes again" in text(log_a), "and says so")

    # The newer dies without releasing: the kernel frees its lock.
    b, log_b = start("pod-c", "partitioned")
    check(wait_for(partitioned), "a third instance takes over: %s" % sorted(devices()))
    check(watch_for(2, lambda: not partitioned()) == 0, "and keeps the slices")
    b.send_signal(signal.SIGKILL)
    b.wait()
    b = None
    t0 = time.time()
    check(wait_for(numa, 10), "killed with -9, the first instance takes back within %.1f s: %s"
          % (time.time() - t0, sorted(devices())))
finally:
    if b is not None:
        b.kill()
        b.wait()
    stop_plugin(a, api, log_a, work)

finish()
