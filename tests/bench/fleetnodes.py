# SPDX-License-Identifier: Apache-2.0
"""Simulated nodes on a real control plane, publishing with nrm's real
ResourceSlice publisher.

Given a clusterlib.Cluster with nrm installed: N Nodes created Ready with
the capacity of recorded machines (tests/topologies, those with at least
16 CPUs, in turn), the DaemonSet's pod on each (made by the real DaemonSet
controller and bound by the real scheduler), and per node a token of nrm's
ServiceAccount bound to that pod, as the kubelet gives it: each node's
requests carry its own identity, pass nrm's RBAC and the Node authorizer,
and count apart in the audit log. Then either

  - one fleet-publish process (tests/bench/fleet-publish.c) publishing every
    node's slices of `nrm slices` with a publisher per node and driver, or
  - one real `nrm plugin` per node (clusterlib.NrmPlugin), for the N that
    memory allows.

    import clusterlib, fleetnodes
    cluster = clusterlib.Cluster(work, "fleet", clusterlib.binaries())
    cluster.install_nrm()
    fleet = fleetnodes.FleetNodes(cluster, work, 100)
    fleet.create()                      # Nodes, pods, tokens, slice files, manifest
    secs = fleet.start(fleet_publish, state_dir=state)  # until every publisher is synced
    fleet.status()                      # {"synced": ..., "writes": ..., "rss_kib": ..., "fds": ...}
    fleet.restart(fleet_publish, state_dir=state)  # a second process takes over, the first stops
    fleet.stop()
    fleet.start_sharded(fleet_publish, 4)           # the nodes split among 4 processes
    fleet.stop_all()
    plugins = fleet.start_plugins(10)   # or: real nrm plugin processes
    fleetnodes.stop_plugins(plugins)
"""

import atexit
import csv
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import NAMESPACE, NrmPlugin, wait_for  # noqa: E402

# The name `nrm slices` is run with; each node's copy names the node instead.
TEMPLATE_NODE = "nrm-fleet-template-node"
# CPUID-only recordings carry no memory size: a Node needs one, and 4 GiB a
# CPU is a server's usual ratio (the slices, not the Node, come from the recording).
MEM_PER_CPU_FALLBACK = 4 << 30
STATUS_RE = re.compile(r"(\w+) (-?[\d.]+)")


class Machine:
    def __init__(self, name, path, cpus, memory):
        self.name, self.path, self.cpus, self.memory = name, path, cpus, memory

    def __repr__(self):
        return "%s (%d CPUs)" % (self.name, self.cpus)


def machines(min_cpus=16, topologies=None):
    """The recorded machines with at least min_cpus CPUs (the large ones
    included), from the topologies' MANIFEST.tsv, by name."""
    topologies = topologies or clusterlib.TOPOLOGIES
    out = []
    with open(os.path.join(topologies, "MANIFEST.tsv")) as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            cpus, mem = int(row["pus"]), int(row["memory_total_bytes"] or 0)
            if cpus >= min_cpus:
                out.append(Machine(row["file"][:-4], os.path.join(topologies, row["file"]), cpus,
                                   mem or cpus * MEM_PER_CPU_FALLBACK))
    return out


def node_name(i, prefix="fleet"):
    return "%s-%04d" % (prefix, i)


def renamed(obj, name):
    """A copy of obj with every string that names the template node naming name."""
    if isinstance(obj, dict):
        return {k: renamed(v, name) for k, v in obj.items()}
    if isinstance(obj, list):
        return [renamed(v, name) for v in obj]
    if isinstance(obj, str) and TEMPLATE_NODE in obj:
        return obj.replace(TEMPLATE_NODE, name)
    return obj


def proc_kib(pid, field="VmRSS"):
    """A /proc/PID/status field in KiB (VmRSS, VmHWM, Threads: a count), or
    from smaps_rollup Pss (shared pages counted by share) or Private (the
    pages no other process has: what one more process costs), or None."""
    try:
        if field in ("Pss", "Private"):
            with open("/proc/%d/smaps_rollup" % pid) as fh:
                text = fh.read()
            if field == "Private":
                return sum(int(x) for x in re.findall(r"^Private_(?:Clean|Dirty):\s+(\d+) kB", text, re.M))
            m = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
        elif field == "Threads":
            with open("/proc/%d/status" % pid) as fh:
                m = re.search(r"^Threads:\s+(\d+)", fh.read(), re.M)
        else:
            with open("/proc/%d/status" % pid) as fh:
                m = re.search(r"^%s:\s+(\d+) kB" % field, fh.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


class FleetNodes:
    """N simulated nodes of one cluster; see the module's text."""

    def __init__(self, cluster, work, n, machine_list=None, cpu_mode=None, drivers="cpu,memory", prefix="fleet"):
        self.cluster, self.n, self.prefix = cluster, n, prefix
        self.dir = os.path.join(work, prefix)
        self.machines = machine_list or machines()
        self.cpu_mode, self.drivers = cpu_mode, drivers
        self.names = [node_name(i, prefix) for i in range(n)]
        self.procs = []  # fleet-publish processes, the newest last
        self.manifest = os.path.join(self.dir, "manifest.json")
        self.pods = {}
        # A run that dies of an exception still stops its fleet-publish processes.
        atexit.register(self.stop_all)

    def machine(self, i):
        return self.machines[i % len(self.machines)]

    # -- setting up -------------------------------------------------------

    def create(self, timeout=None):
        """The Nodes, the DaemonSet's pod on each, a pod-bound token and a
        kubeconfig per node, the slice files and the manifest. Returns the
        seconds each step took: {"nodes", "pods", "tokens", "slices"}."""
        os.makedirs(self.dir, exist_ok=True)
        took = {}
        t = time.monotonic()
        for at in range(0, self.n, 200):  # one kubectl a batch: its argument list stays small
            self.cluster.create_nodes([(self.names[i], self.machine(i).cpus, self.machine(i).memory)
                                       for i in range(at, min(self.n, at + 200))])
        took["nodes"] = time.monotonic() - t
        t = time.monotonic()
        timeout = timeout or 120 + self.n
        if not wait_for(lambda: len(self.daemon_pods()) >= self.n, timeout, 1.0):
            raise RuntimeError("fleetnodes: the DaemonSet controller made %d of %d pods in %d s"
                               % (len(self.daemon_pods()), self.n, timeout))
        took["pods"] = time.monotonic() - t
        t = time.monotonic()
        kdir = os.path.join(self.dir, "kubeconfigs")
        os.makedirs(kdir, exist_ok=True)
        self.kubeconfigs = [self.cluster.nrm_kubeconfig(name, os.path.join(kdir, name), pod=self.pods[name])
                            for name in self.names]
        took["tokens"] = time.monotonic() - t
        t = time.monotonic()
        self.slice_files = self.write_slices()
        self.write_manifest()
        took["slices"] = time.monotonic() - t
        return took

    def write_manifest(self, count=None, first=0, path=None):
        """fleet-publish's manifest of count nodes from the first-th (all by
        default), at path (self.manifest by default)."""
        count = self.n - first if count is None else count
        path = path or self.manifest
        with open(path, "w") as fh:
            json.dump({"nodes": [{"name": self.names[i], "kubeconfig": self.kubeconfigs[i],
                                  "slices": self.slice_files[i]} for i in range(first, first + count)]}, fh)
        return path

    def daemon_pods(self):
        """{node: the DaemonSet's pod on it} of this fleet's nodes, once bound."""
        s, pods = self.cluster.api("GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io%%2Fname%%3Dnrm"
                                   % NAMESPACE)
        mine = set(self.names)
        self.pods = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in (pods.get("items", []) if s == 200 else [])
                     if p["spec"].get("nodeName") in mine
                     and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}
        return self.pods

    def settings(self, machine):
        mode = ["--cpu-mode", self.cpu_mode] if self.cpu_mode else []
        return ["-t", machine.path, "--drivers", self.drivers] + mode

    def template(self, machine):
        """`nrm slices` of one machine, for the API server's release, split by driver."""
        p = subprocess.run([clusterlib.NRM, "slices", "--kubernetes-version", "1.%d" % self.cluster.minor,
                            "--node-name", TEMPLATE_NODE] + self.settings(machine),
                           capture_output=True, text=True, check=True)
        by = {}
        for item in json.loads(p.stdout)["items"]:
            by.setdefault(item["spec"]["driver"], []).append(item)
        return by

    def write_slices(self):
        """Per node, a List file per driver: its machine's slices, renamed."""
        sdir = os.path.join(self.dir, "slices")
        os.makedirs(sdir, exist_ok=True)
        templates, out = {}, []
        for i, name in enumerate(self.names):
            m = self.machine(i)
            if m.name not in templates:
                templates[m.name] = self.template(m)
            files = []
            for driver, items in sorted(templates[m.name].items()):
                path = os.path.join(sdir, "%s.%s.json" % (name, driver))
                with open(path, "w") as fh:
                    json.dump({"apiVersion": "v1", "kind": "List", "items": renamed(items, name)}, fh)
                files.append(path)
            out.append(files)
        return out

    # -- fleet-publish ----------------------------------------------------

    def start(self, program, *args, timeout=None, state_dir=None, instance_uid=None, log=None, manifest=None):
        """Starts fleet-publish on the manifest and waits for its "synced"
        line: its seconds to sync (as it measured them). With state_dir
        (and instance_uid), nrm's handover: a later start on the same
        state_dir takes every node over."""
        proc = self.spawn(program, *args, state_dir=state_dir, instance_uid=instance_uid, log=log,
                          manifest=manifest)
        line = self.read_line(proc, "synced", timeout or 120 + self.n)
        return line["after"]

    def spawn(self, program, *args, state_dir=None, instance_uid=None, log=None, manifest=None):
        cmd = [program] + list(args)
        if state_dir:
            cmd += ["--state-dir", state_dir] + (["--instance-uid", instance_uid] if instance_uid else [])
        log = log or os.path.join(self.dir, "fleet-publish.%d.log" % len(self.procs))
        proc = subprocess.Popen(cmd + [manifest or self.manifest], stdout=subprocess.PIPE, stderr=open(log, "a"),
                                text=True)
        proc.log = log
        # A thread reads its lines: select() on a buffered pipe misses lines already read into the buffer.
        proc.lines = queue.Queue()
        threading.Thread(target=lambda: [proc.lines.put(x) for x in iter(proc.stdout.readline, "")] + [
            proc.lines.put(None)], daemon=True).start()
        self.procs.append(proc)
        return proc

    def start_sharded(self, program, shards, *args, count=None, timeout=None):
        """count nodes (all by default) published by shards fleet-publish
        processes at once, each its share of the nodes (one process holds
        about hard-limit-of-open-files / 8 nodes: 2,500 at 20,000). Returns
        the seconds until the last one synced."""
        count = self.n if count is None else count
        procs = []
        for k in range(shards):
            lo, hi = count * k // shards, count * (k + 1) // shards
            path = self.write_manifest(hi - lo, lo, os.path.join(self.dir, "manifest.%d.json" % k))
            procs.append(self.spawn(program, *args, manifest=path))
        return max(self.read_line(p, "synced", timeout or 120 + count)["after"] for p in procs)

    def read_line(self, proc, what, timeout):
        """The next "what: ..." line of proc's output, parsed."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                text = proc.lines.get(timeout=max(0.01, min(1.0, end - time.monotonic())))
            except queue.Empty:
                continue
            if text is None:
                break
            if text.startswith(what + ":"):
                parsed = {k: float(v) for k, v in STATUS_RE.findall(text.split(" last_error ")[0])}
                parsed["line"] = text.strip()
                return parsed
        with open(proc.log) as fh:
            tail = fh.read()[-3000:]
        raise RuntimeError("fleet-publish: no %s line within %d s (exit %s):\n%s"
                           % (what, timeout, proc.poll(), tail))

    def status(self, proc=None, timeout=30):
        """Its status (SIGUSR1): nodes, publishers, synced, standby, writes,
        errors, api_errors, rss_kib, threads, after; and pss_kib and
        private_kib measured here."""
        proc = proc or self.procs[-1]
        proc.send_signal(signal.SIGUSR1)
        st = self.read_line(proc, "status", timeout)
        st["pss_kib"] = proc_kib(proc.pid, "Pss")
        st["private_kib"] = proc_kib(proc.pid, "Private")
        return st

    def stop(self, proc=None, timeout=60):
        """SIGTERM; its exit status (0: every publisher stopped cleanly)."""
        proc = proc or (self.procs[-1] if self.procs else None)
        if proc is None:
            return None
        rc = clusterlib.terminate(proc, timeout)
        if proc in self.procs:
            self.procs.remove(proc)
        return rc

    def stop_all(self):
        return [self.stop(p) for p in list(self.procs)]

    def restart(self, program, *args, state_dir, timeout=None):
        """The DaemonSet's rolling update, for every node (at once, or over
        --spread S in args): a second fleet-publish on the same state_dir
        takes the role, the first is stopped. Returns (seconds until the
        new one synced, whether the old one stood by, exit status of the
        old one)."""
        return self.restart_end(*self.restart_begin(program, *args, state_dir=state_dir), timeout=timeout)

    def restart_begin(self, program, *args, state_dir):
        """restart()'s first half: the new fleet-publish started; returns (old, new) for restart_end."""
        old = self.procs[-1]
        return old, self.spawn(program, *args, state_dir=state_dir, instance_uid="gen%d" % (len(self.procs) + 1))

    def restart_end(self, old, new, timeout=None):
        secs = self.read_line(new, "synced", timeout or 120 + self.n)["after"]
        # The old one reads the handover record before each pass and every second.
        standby = wait_for(lambda: self.status(old)["standby"] == self.status(old)["publishers"], 30, 0.5)
        return secs, standby, self.stop(old)

    # -- real nrm plugin processes ------------------------------------------

    def start_plugins(self, count=None, timeout=None, more=()):
        """One real `nrm plugin` per node (the first count nodes) with the
        node's pod-bound token, as bench-fleet.py runs them; waits until each
        has published every driver. Returns the NrmPlugin objects."""
        count = self.n if count is None else count
        plugins = []
        for i in range(count):
            p = NrmPlugin(self.cluster, self.names[i], self.dir, self.settings(self.machine(i)))
            p.start(*more)
            plugins.append(p)
        timeout = timeout or 60 + 3 * count
        if not wait_for(lambda: all(p.settled() or p.proc.poll() is not None for p in plugins), timeout, 0.5):
            raise RuntimeError("fleetnodes: %d of %d plugins published within %d s"
                               % (sum(p.settled() for p in plugins), count, timeout))
        dead = [p for p in plugins if p.proc.poll() is not None]
        if dead:
            raise RuntimeError("fleetnodes: the plugin of %s exited (%s):\n%s"
                               % (dead[0].node, dead[0].proc.returncode, dead[0].text()[-2000:]))
        return plugins


def stop_plugins(plugins):
    """Their exit statuses (SIGTERM)."""
    return [p.stop() for p in plugins]
