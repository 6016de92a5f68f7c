# SPDX-License-Identifier: Apache-2.0
"""Real `nrm plugin` processes for simulated Nodes, as the DaemonSet runs
them: one per Node, its identity a token bound to the DaemonSet's pod on the
Node, in rolling-update mode (--instance-uid) so that a second instance can
take over as the DaemonSet's rolling update does. The kubelet is not there:
nothing prepares, and the plugins publish, watch and hand over."""

import os
import re
import subprocess
import time
import uuid

import clusterlib


class Plugin:
    def __init__(self, cluster, node, topo, mode, work, drivers="cpu,memory"):
        self.cluster, self.node, self.topo, self.mode, self.drivers = cluster, node, topo, mode, drivers
        self.dir = os.path.join(work, node[-4:])  # short: socket paths must fit 107 characters
        self.procs = []  # (uid, Popen), oldest first
        self.kubeconfig = None

    def start(self, extra=()):
        os.makedirs(self.dir, exist_ok=True)
        if self.kubeconfig is None:
            self.kubeconfig = self.cluster.nrm_kubeconfig(self.node, os.path.join(self.dir, "kubeconfig"))
        uid = uuid.uuid4().hex[:12]  # the pod UID in a DaemonSet; short here for the socket paths
        log = open(os.path.join(self.dir, "plugin-%s.log" % uid[:8]), "w")
        p = subprocess.Popen(
            [clusterlib.NRM, "plugin", "-t", self.topo, "--node-name", self.node, "--drivers", self.drivers,
             "--cpu-mode", self.mode, "--instance-uid", uid, "--kubeconfig", self.kubeconfig,
             "--kubelet-dir", os.path.join(self.dir, "kubelet"), "--cdi-dir", os.path.join(self.dir, "cdi"),
             "--state-dir", os.path.join(self.dir, "state"), "--create-state-dir", "--reconcile-interval", "0"]
            + list(extra),
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append((uid, p))
        return p

    def newest(self):
        return self.procs[-1][1] if self.procs else None

    def stop_oldest(self):
        uid, p = self.procs.pop(0)
        clusterlib.terminate(p)

    def stop(self):
        while self.procs:
            self.stop_oldest()

    def alive(self):
        return all(p.poll() is None for _, p in self.procs)

    def rss_kib(self):
        p = self.newest()
        try:
            with open("/proc/%d/status" % p.pid) as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def synced(self):
        """The newest instance logged each of its drivers' slices in sync on the server (the publisher checks them
        against what it reads back), so that no one need list them to know."""
        uid = self.procs[-1][0] if self.procs else ""
        try:
            with open(os.path.join(self.dir, "plugin-%s.log" % uid[:8])) as fh:
                text = fh.read()
        except OSError:
            return False
        return all(re.search(r"ResourceSlices of %s\.nrm\.io pool %s (are in sync|published without)"
                             % (re.escape(d), re.escape(self.node)), text) for d in self.drivers.split(","))

    def log_tail(self):
        uid = self.procs[-1][0] if self.procs else ""
        try:
            with open(os.path.join(self.dir, "plugin-%s.log" % uid[:8])) as fh:
                return fh.read()[-2000:]
        except OSError:
            return ""


def restart_storm(plugins, spread_s=10.0):
    """Every plugin stopped (SIGTERM) and started again, spread evenly over spread_s: a DaemonSet's pods all
    replaced at once, or a node-wide restart of nrm."""
    t0 = time.monotonic()
    for i, pl in enumerate(plugins):
        due = t0 + spread_s * i / max(1, len(plugins))
        time.sleep(max(0.0, due - time.monotonic()))
        pl.stop()
        pl.start()


def rolling_update(plugins, spread_s=10.0, settle=lambda pl: True):
    """A second instance with a new --instance-uid next to each running one, then the old one stopped once the
    new one is up (settle), as the DaemonSet's rolling update with maxSurge does, spread over spread_s."""
    t0 = time.monotonic()
    for i, pl in enumerate(plugins):
        due = t0 + spread_s * i / max(1, len(plugins))
        time.sleep(max(0.0, due - time.monotonic()))
        pl.start()
    for pl in plugins:
        clusterlib.wait_for(lambda: settle(pl), 60, 0.2)
        pl.stop_oldest()
