#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon's memory in production: nrm plugin with every built-in driver
(cpu, memory, pci), claims read from an API server over TLS (the loopback fake of
tests/k8s, its CA named by the kubeconfig), ResourceSlices published,
/metrics scraped, a health stream open on each driver, 200 claims of one
CPU and 64 MiB prepared (the first ones also with a PCI device each, as many
as the machine publishes), then unprepared. Prints VmHWM and VmRSS after
the claims and after unprepare against the goal (VmHWM <= 20 MiB), and
where the resident memory lies, mapping by mapping.
  bench-memory.py NRM DRA_CLIENT TOPOLOGY [EXTRA-PLUGIN-FLAG...]
With BENCH_MEMORY_DUMP=PREFIX it keeps PREFIX.prepared and PREFIX.after
(the smaps files) and PREFIX.maps."""

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

if len(sys.argv) < 4:
    sys.exit(__doc__)
NRM, CLIENT, TOPO = sys.argv[1:4]
EXTRA = sys.argv[4:]
if shutil.which("openssl") is None:
    print("bench-memory: skipped, openssl is not installed")
    sys.exit(0)
from fakeapi import FakeAPI  # noqa: E402

CLAIMS = 200
GOAL_MIB = 20.0
CPU, MEM, PCI = "cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"
DRIVERS = (CPU, MEM, PCI)

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


work = tempfile.mkdtemp(prefix="nrm-bench-mem-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
api = FakeAPI(work, tokens=["bench"])
api.start()
api.add_node("bench")
kubeconfig = api.write_kubeconfig(os.path.join(work, "kubeconfig"), token="bench")
log = open(os.path.join(work, "plugin.log"), "w")
p = subprocess.Popen([NRM, "plugin", "-t", TOPO, "--node-name", "bench", "--drivers", "cpu,memory,pci",
                      "--kubeconfig", kubeconfig, "--kubelet-dir", os.path.join(work, "k"),
                      "--cdi-dir", os.path.join(work, "cdi"), "--state-dir", os.path.join(work, "state"), "--create-state-dir",
                      "--http-address", "127.0.0.1:0"] + EXTRA, stdout=log, stderr=subprocess.STDOUT)
watchers = []


def fail(why):
    for w in watchers:
        w.kill()
    p.kill()
    api.stop()
    sys.stdout.write(open(log.name).read()[-3000:])
    shutil.rmtree(work, ignore_errors=True)
    sys.exit("bench-memory: " + why)


def metrics():
    m = re.search(r"/metrics on port (\d+)", open(log.name).read())
    if not m:
        return ""
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=5) as r:
        return r.read().decode()


def synced(body, driver):
    return re.search(r'^nrm_slices_synced\{[^}]*driver="%s"[^}]*\} 1$' % re.escape(driver), body, re.M) is not None


t0 = time.time()
while True:
    try:
        body = metrics()
        if all(synced(body, d) for d in DRIVERS):
            break
    except OSError:
        pass
    if time.time() - t0 > 30 or p.poll() is not None:
        fail("the pools were not published")
    time.sleep(0.02)

sock = {d: os.path.join(work, "k", "plugins", d, "dra.sock") for d in DRIVERS}
for d in DRIVERS:
    w = subprocess.Popen([CLIENT, "watch", sock[d]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    watchers.append(w)
    if not w.stdout.readline().strip():
        fail("no health stream on %s" % d)
devs = {d: [x["name"] for s in api.slices() if s["spec"]["driver"] == d for x in s["spec"].get("devices", [])]
        for d in DRIVERS}
if not devs[CPU] or not devs[MEM]:
    fail("%s publishes no CPU or no memory devices: a machine with both is needed" % TOPO)
start = status(p.pid)


def client(*args):
    r = subprocess.run([CLIENT] + list(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("dra-client %s: %s" % (" ".join(args), r.stderr.strip()))


uids = []
claim_drivers = {}
scrapes = 0
for i in range(CLAIMS):
    uid = "00000000-0000-4000-8000-%012d" % i
    uids.append(uid)
    results = [{"request": "cpus", "driver": CPU, "pool": "bench", "device": devs[CPU][i % len(devs[CPU])],
                "consumedCapacity": {"cpus": "1"}},
               {"request": "mem", "driver": MEM, "pool": "bench", "device": devs[MEM][i % len(devs[MEM])],
                "consumedCapacity": {"memory": "64Mi"}}]
    if i < len(devs[PCI]):  # a PCI device is held whole: one claim each
        results.append({"request": "dev", "driver": PCI, "pool": "bench", "device": devs[PCI][i]})
    claim_drivers[uid] = [r["driver"] for r in results]
    api.put_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"namespace": "default", "name": "c%d" % i, "uid": uid},
                   "status": {"allocation": {"devices": {"results": results}}}})
    for d in claim_drivers[uid]:
        client("prepare", sock[d], "default", "c%d" % i, uid)
    if i % 10 == 9:
        metrics()
        scrapes += 1
prepared = status(p.pid)
if os.environ.get("BENCH_MEMORY_DUMP"):
    shutil.copyfile("/proc/%d/smaps" % p.pid, os.environ["BENCH_MEMORY_DUMP"] + ".prepared")
peak_groups = breakdown(p.pid)
for uid in uids:
    for d in claim_drivers[uid]:
        client("unprepare", sock[d], uid)
metrics()
scrapes += 1
time.sleep(0.5)
after = status(p.pid)
if os.environ.get("BENCH_MEMORY_DUMP"):
    shutil.copyfile("/proc/%d/smaps" % p.pid, os.environ["BENCH_MEMORY_DUMP"] + ".after")
    with open(os.environ["BENCH_MEMORY_DUMP"] + ".maps", "w") as f:
        f.write(open("/proc/%d/maps" % p.pid).read())
after_groups = breakdown(p.pid)
body = metrics()
for w in watchers:
    w.stdin.close()
    w.wait(10)
p.send_signal(signal.SIGTERM)
p.wait(30)
api.stop()
shutil.rmtree(work, ignore_errors=True)

# The kernel updates the peak lazily: the larger of the two readings.
hwm = max(mib(prepared["VmHWM"][0]), mib(after["VmHWM"][0]))
files = mib(sum(v for g, v in peak_groups.items() if g != HEAP))
print("plugin memory in production, drivers cpu, memory and pci (%s: %d CPU, %d memory and %d PCI devices, "
      "%d of them held; TLS API, slices published, health streams open, /metrics scraped %d times)"
      % (os.path.basename(TOPO), len(devs[CPU]), len(devs[MEM]), len(devs[PCI]), len(devs[PCI]), scrapes))
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
