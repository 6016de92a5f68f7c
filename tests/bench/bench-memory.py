#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon's memory in production: nrm plugin with every built-in driver
(cpu, memory, pci) against the real kube-apiserver (tests/cluster's control
plane on loopback: etcd, kube-apiserver, scheduler and controller-manager of
1.36, or of NRM_K8S_LINE, deploy/kubernetes/nrm.yaml applied), with the
DaemonSet's identity (a token of its ServiceAccount bound to its pod on the
node, the server's CA named by the kubeconfig; never the admin): claims read
from the API over TLS, ResourceSlices published, /metrics scraped, each
driver registered as the kubelet does and a health stream open on each, 200
claims of one CPU and 64 MiB prepared (the first ones also with a PCI device
each, as many as the machine publishes), then unprepared. Each claim is
created and given its allocation by the bench's admin through the status
subresource, as the scheduler writes it (a fresh shareID for each result on
a device that allows multiple allocations). Prints VmHWM and VmRSS after the
claims and after unprepare against the goal (VmHWM <= 20 MiB), and where the
resident memory lies, mapping by mapping. Exits 77 where the upstream
binaries cannot be built (tests/cluster/build.sh).
  bench-memory.py NRM DRA_CLIENT TOPOLOGY [EXTRA-PLUGIN-FLAG...]
With BENCH_MEMORY_DUMP=PREFIX it keeps PREFIX.prepared and PREFIX.after
(the smaps files) and PREFIX.maps."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import clusterlib  # noqa: E402
from clusterlib import Cluster, NrmPlugin, binaries, wait_for  # noqa: E402

if len(sys.argv) < 4:
    sys.exit(__doc__)
NRM, CLIENT, TOPO = (os.path.abspath(a) for a in sys.argv[1:4])
EXTRA = sys.argv[4:]
# NrmPlugin runs these, not the tree's defaults.
clusterlib.NRM, clusterlib.DRA_CLIENT = NRM, CLIENT

CLAIMS = 200
GOAL_MIB = 20.0
CPU, MEM, PCI = "cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"
DRIVERS = (CPU, MEM, PCI)
NODE = "bench"

# Mappings by what brought them in, in the order printed.
GROUPS = [
    ("gRPC, abseil, libstdc++", r"lib(grpc|gpr|absl_|stdc\+\+|gcc_s|upb|address_sorting|re2|cares)"),
    ("OpenSSL", r"lib(ssl|crypto)\.so"),
    ("libcurl and its libraries", r"lib(curl|nghttp2|idn2|rtmp|ssh2?|psl|ldap|lber|gssapi|krb5|k5crypto|com_err|"
     r"keyutils|krb5support|gnutls|hogweed|nettle|gmp|p11-kit|tasn1|unistring|sasl2|brotli|zstd|ffi|resolv)"),
    ("hwloc, jansson, yaml, microhttpd, ...", r"lib(hwloc|jansson|yaml|protobuf-c|microhttpd|numa|"
     r"udev|xml2|lzma|icu|z\.so)"),
    ("glibc", r"/(libc|libm|ld-linux|libpthread|libdl|librt)[.-]"),
    ("nrm-agent", r"/nrm-agent$"),
]
OTHER_LIB, HEAP = "other files", "heap, malloc arenas, thread stacks"


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            k, _, v = line.partition(":")
            out[k] = v.split()
    return out


def mib(kib):
    return int(kib) / 1024


def breakdown(pid):
    """Rss in KiB by group, from /proc/PID/smaps."""
    sums = {}
    name = None
    with open("/proc/%d/smaps" % pid) as fh:
        for line in fh:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                f = line.split(None, 5)
                path = f[5].strip() if len(f) > 5 else ""
                name = HEAP
                if path.startswith("/"):
                    name = next((g for g, rx in GROUPS if re.search(rx, path)), OTHER_LIB)
            elif line.startswith("Rss:"):
                sums[name] = sums.get(name, 0) + int(line.split()[1])
    return sums


def capacity(topo):
    """The Node's CPUs and memory, from the recorded machine."""
    with open(topo) as fh:
        text = fh.read()
    return text.count('type="PU"'), sum(int(m) for m in re.findall(r'local_memory="(\d+)"', text)) or 64 << 30


def claim(name, requests):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name},
            "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": c}} for r, c in requests]}}}


bindir = binaries()
# The control plane on disk, as in the cluster tests; nrm's state on tmpfs.
base = tempfile.mkdtemp(prefix="nrm-bench-mem-")
work = tempfile.mkdtemp(prefix="nrm-bench-mem-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
cluster = p = None
watchers = []


def fail(why):
    if p:
        sys.stdout.write(p.text()[-3000:])
    sys.exit("bench-memory: " + why)


try:
    cluster = Cluster(base, "bench", bindir)
    cluster.install_nrm()
    cluster.create_nodes([(NODE, *capacity(TOPO))])
    # The plugin's flags as in production (info log and the default
    # reconcile interval, not NrmPlugin's debug and 0).
    p = NrmPlugin(cluster, NODE, work, ["-t", TOPO, "--drivers", "cpu,memory,pci"] + EXTRA)
    p.start("--log-level", "info", "--reconcile-interval", "5")
    if not wait_for(lambda: all(p.metric("nrm_slices_synced", d) == 1 for d in DRIVERS) or p.proc.poll() is not None,
                    60, 0.02) or p.proc.poll() is not None:
        fail("the pools were not published")
    if not p.register():
        fail("the drivers did not register")
    for d in DRIVERS:
        w = subprocess.Popen([CLIENT, "watch", p.socket(d)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        watchers.append(w)
        if not w.stdout.readline().strip():
            fail("no health stream on %s" % d)
    published = {d: [x for s in cluster.slices(NODE, d) for x in s["spec"].get("devices", [])] for d in DRIVERS}
    devs = {d: [x["name"] for x in published[d]] for d in DRIVERS}
    shared = {x["name"] for d in DRIVERS for x in published[d] if x.get("allowMultipleAllocations")}
    if not devs[CPU] or not devs[MEM]:
        fail("%s publishes no CPU or no memory devices: a machine with both is needed" % TOPO)
    start = status(p.proc.pid)

    claims = []
    scrapes = 0
    for i in range(CLAIMS):
        results = [("cpus", CPU, NODE, devs[CPU][i % len(devs[CPU])], {"consumedCapacity": {"cpus": "1"}}),
                   ("mem", MEM, NODE, devs[MEM][i % len(devs[MEM])], {"consumedCapacity": {"memory": "64Mi"}})]
        if i < len(devs[PCI]):  # a PCI device is held whole: one claim each
            results.append(("dev", PCI, NODE, devs[PCI][i], {}))
        for r in results:
            if r[3] in shared:
                r[4]["shareID"] = str(uuid.uuid4())
        c = cluster.allocate(claim("c%d" % i, [(r[0], r[1]) for r in results]), NODE, results)
        claims.append((c, [r[1] for r in results]))
        for d in claims[-1][1]:
            ok, out = p.prepare(d, c)
            if not ok:
                fail("prepare c%d on %s: %s" % (i, d, out))
        if i % 10 == 9:
            p.http("/metrics")
            scrapes += 1
    prepared = status(p.proc.pid)
    if os.environ.get("BENCH_MEMORY_DUMP"):
        shutil.copyfile("/proc/%d/smaps" % p.proc.pid, os.environ["BENCH_MEMORY_DUMP"] + ".prepared")
    peak_groups = breakdown(p.proc.pid)
    for c, drivers in claims:
        for d in drivers:
            if not p.unprepare(d, c):
                fail("unprepare %s on %s" % (c["metadata"]["name"], d))
    p.http("/metrics")
    scrapes += 1
    time.sleep(0.5)
    after = status(p.proc.pid)
    if os.environ.get("BENCH_MEMORY_DUMP"):
        shutil.copyfile("/proc/%d/smaps" % p.proc.pid, os.environ["BENCH_MEMORY_DUMP"] + ".after")
        shutil.copyfile("/proc/%d/maps" % p.proc.pid, os.environ["BENCH_MEMORY_DUMP"] + ".maps")
    after_groups = breakdown(p.proc.pid)
finally:
    for w in watchers:
        w.stdin.close()
        try:
            w.wait(10)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
    if p:
        p.stop()
    if cluster:
        cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)

# The kernel updates the peak lazily: the larger of the two readings.
hwm = max(mib(prepared["VmHWM"][0]), mib(after["VmHWM"][0]))
files = mib(sum(v for g, v in peak_groups.items() if g != HEAP))
print("plugin memory in production, drivers cpu, memory and pci (%s: %d CPU, %d memory and %d PCI devices, "
      "%d of them held; real kube-apiserver %s over TLS, slices published, health streams open, "
      "/metrics scraped %d times)" % (os.path.basename(TOPO), len(devs[CPU]), len(devs[MEM]), len(devs[PCI]),
                                      len(devs[PCI]), cluster.version, scrapes))
print("  published, before claims    VmRSS %5.1f MiB  VmHWM %5.1f MiB  %s threads" %
      (mib(start["VmRSS"][0]), mib(start["VmHWM"][0]), start["Threads"][0]))
print("  %d claims prepared         VmRSS %5.1f MiB  VmHWM %5.1f MiB  %s threads" %
      (CLAIMS, mib(prepared["VmRSS"][0]), mib(prepared["VmHWM"][0]), prepared["Threads"][0]))
print("  all unprepared              VmRSS %5.1f MiB  VmHWM %5.1f MiB  %s threads" %
      (mib(after["VmRSS"][0]), hwm, after["Threads"][0]))
print("  resident, MiB                          prepared  unprepared")
for g in [g for g, _ in GROUPS] + [OTHER_LIB, HEAP]:
    print("    %-36s %7.1f  %7.1f" % (g, mib(peak_groups.get(g, 0)), mib(after_groups.get(g, 0))))
print("  of it the files mapped (libraries, nrm-agent): %.1f MiB, the floor with no heap at all" % files)
print("  VmHWM %.1f MiB (goal <= %.0f MiB: %s)" % (hwm, GOAL_MIB, "met" if hwm <= GOAL_MIB else "NOT met"))
if files > GOAL_MIB:
    print("  (the mapped files alone, %.1f MiB, are above the goal: it cannot be met with these libraries)" % files)
