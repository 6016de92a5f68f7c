#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The claim examples (deploy/kubernetes/examples), the prioritized-list ones
(prioritized-*.yaml) above all, against what nrm publishes: their fields and
names are checked, their selectors, those of the complete claims in docs/,
and the DeviceClasses'
(deploy/kubernetes/nrm.yaml) are evaluated on every device `nrm slices`
publishes for every recorded machine in both CPU modes (a selector that
reads a missing attribute is a CEL error, which fails a claim in
Kubernetes), and for the prioritized lists a small allocator in the scheduler's manner
(requests in order, subrequests in order, devices in slice order, with
backtracking, constraints, counters and consumable capacity) takes the first
subrequest that fits. Its results, request "req/sub" included, are then
prepared by nrm plugin from the fake API server (fakeapi.py), and the
subrequest's name must reach the device metadata files and the claim's
settings. The claim the scheduler makes for an extended resource (KEP-5004)
is built from extended-resource-hugepages.yaml and prepared the same way,
and the KEP-5517 mappings of the memory devices are checked."""

import copy
import functools
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, SRCDIR, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed")
    sys.exit(77)

BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(NRM)))
DRA_CLIENT = os.environ.get("NRM_DRA_CLIENT", os.path.join(BUILDDIR, "tests", "plugin", "dra-client"))
if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    print("SKIP: build nrm and tests/plugin/dra-client first (make check)")
    sys.exit(77)
EXAMPLES = os.path.join(SRCDIR, "deploy", "kubernetes", "examples")
CPU, MEM = "cpu.nrm.io", "memory.nrm.io"
NODE = "node-p"


# --- a tiny CEL: the subset the examples and classes use ----------------------------
class CelError(Exception):
    pass


class Quantity:
    SUFFIX = {"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

    def __init__(self, text):
        m = re.fullmatch(r"(\d+)([a-zA-Z]*)", str(text))
        if not m or m.group(2) not in self.SUFFIX:
            raise CelError("not a quantity: %r" % text)
        self.v = int(m.group(1)) * self.SUFFIX[m.group(2)]

    def compareTo(self, other):  # noqa: N802 (CEL's name)
        return (self.v > other.v) - (self.v < other.v)


class Attrs(dict):
    """One domain's attributes or capacities: a missing one is an error, as in CEL."""

    def __getattr__(self, name):
        name = name.rstrip("_")  # class_: a Python keyword in CEL
        if name not in self:
            raise CelError("no such key: %s" % name)
        return self[name]


class Domains(dict):
    def __missing__(self, key):
        return Attrs()


def attr_value(v):
    (kind, x), = v.items()
    return x


class Device:
    def __init__(self, driver, pool, dev):
        self.driver, self.pool, self.name, self.raw = driver, pool, dev["name"], dev
        self.key = (driver, dev["name"])  # numa0 is the name of a CPU and of a memory device
        self.allowMultipleAllocations = bool(dev.get("allowMultipleAllocations"))
        self.attributes, self.capacity = Domains(), Domains()
        for k, v in dev.get("attributes", {}).items():
            dom, _, n = k.rpartition("/")
            self.attributes.setdefault(dom or driver, Attrs())[n] = attr_value(v)
        for k, v in dev.get("capacity", {}).items():
            dom, _, n = k.rpartition("/")
            self.capacity.setdefault(dom or driver, Attrs())[n] = Quantity(v["value"])

    def qualified(self, name):
        dom, _, n = name.rpartition("/")
        return self.attributes[dom].get(n)


@functools.lru_cache(maxsize=None)
def cel(expr):
    """The expression as Python: strings kept, && || ! true false translated."""
    out = []
    for i, part in enumerate(re.split(r'("(?:[^"\\]|\\.)*")', expr)):
        if i % 2 == 0:
            part = part.replace("&&", " and ").replace("||", " or ")
            part = re.sub(r"!(?!=)", " not ", part)
            part = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", part))
            part = re.sub(r"\.(class|in|is|not|and|or)\b", r".\1_", part)
        out.append(part)
    return compile("".join(out), expr, "eval")


def matches(selectors, dev):
    for s in selectors or []:
        try:
            ok = eval(cel(s["cel"]["expression"]), {"__builtins__": {}}, {"device": dev, "quantity": Quantity})
        except CelError as e:
            raise CelError("device %s: %s: %s" % (dev.name, s["cel"]["expression"], e))
        if ok is not True and ok is not False:
            raise CelError("device %s: %s is not a bool" % (dev.name, s["cel"]["expression"]))
        if not ok:
            return False
    return True


# --- the examples' fields and names ----------------------------------------------------
with open(os.path.join(SRCDIR, "deploy", "kubernetes", "nrm.yaml")) as fh:
    CLASSES = {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(fh)
               if d and d.get("kind") == "DeviceClass"}
EXTERNAL = {"gpu.nvidia.com"}  # the class of NVIDIA's own DRA driver, in gpu-cpu-memory-aligned.yaml
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
EXACT_KEYS = {"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity"}
SUB_KEYS = EXACT_KEYS - {"adminAccess"} | {"name"}


def example(name):
    with open(os.path.join(EXAMPLES, name)) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    tmpl = [d for d in docs if d["kind"] == "ResourceClaimTemplate"][0]
    pod = [d for d in docs if d["kind"] == "Pod"][0]
    devices = tmpl["spec"]["spec"]["devices"]
    names = set()
    errs = []
    for r in devices["requests"]:
        if not DNS_LABEL.match(r["name"]) or (("exactly" in r) == ("firstAvailable" in r)):
            errs.append("request %s" % r["name"])
        names.add(r["name"])
        subs = [dict(s, name=r["name"] + "/" + s["name"]) for s in r.get("firstAvailable", [])]
        for s in r.get("firstAvailable", []):
            if not DNS_LABEL.match(s["name"]) or set(s) - SUB_KEYS:
                errs.append("subrequest %s/%s: %s" % (r["name"], s["name"], sorted(set(s) - SUB_KEYS)))
        if len(r.get("firstAvailable", [])) > 8:
            errs.append("request %s has more than 8 subrequests" % r["name"])
        for s in subs or [r["exactly"]]:
            if s["deviceClassName"] not in CLASSES and s["deviceClassName"] not in EXTERNAL:
                errs.append("unknown class %s" % s["deviceClassName"])
            if s.get("allocationMode", "ExactCount") != "ExactCount" or s.get("count", 1) < 1:
                errs.append("count of %s" % s.get("name", r["name"]))
            names.add(s.get("name", r["name"]))
        if "exactly" in r and set(r["exactly"]) - EXACT_KEYS:
            errs.append("request %s: %s" % (r["name"], sorted(set(r["exactly"]) - EXACT_KEYS)))
    for c in devices.get("constraints", []) + devices.get("config", []):
        errs += ["unknown request %s" % n for n in c.get("requests", []) if n not in names]
    for c in devices.get("constraints", []):
        if len([k for k in ("matchAttribute", "distinctAttribute") if k in c]) != 1:
            errs.append("constraint %s" % c)
    claims = {c["name"] for c in pod["spec"]["resourceClaims"]
              if c.get("resourceClaimTemplateName") == tmpl["metadata"]["name"]}
    used = {c["name"] for ct in pod["spec"]["containers"] for c in ct["resources"].get("claims", [])}
    check(not errs and claims and used == claims,
          "%s: valid v1 fields, every request and constraint name resolves, the pod uses the claim %s"
          % (name, errs or ""))
    return devices


# --- the allocator --------------------------------------------------------------------
def slices(topo, *extra):
    out = subprocess.run([NRM, "slices", "-t", topo, "--node-name", NODE] + list(extra),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["items"]


class Node:
    """One node's devices in slice order, its counters, and what earlier claims hold."""

    def __init__(self, items):
        self.devices, self.counters = [], {}
        for s in items:
            sp = s["spec"]
            for cs in sp.get("sharedCounters", []):
                self.counters[cs["name"]] = {k: Quantity(v["value"]).v for k, v in cs["counters"].items()}
            for d in sp.get("devices", []):
                self.devices.append(Device(sp["driver"], sp["pool"]["name"], d))
        self.taken, self.consumed, self.counted = set(), {}, {}

    def device(self, result):
        return [d for d in self.devices if (d.driver, d.name) == (result["driver"], result["device"])][0]


def amount(dev, request):
    """What a request consumes of a shared device (key, bytes-or-count), or None when it cannot fit."""
    (key, cap), = dev.capacity[dev.driver].items()
    pol = dev.raw["capacity"][key].get("requestPolicy", {})
    want = (request.get("capacity") or {}).get("requests", {}).get(key)
    q = Quantity(want).v if want is not None else Quantity(pol["default"]).v
    vr = pol.get("validRange")
    if vr:
        step, lo = Quantity(vr.get("step", vr["min"])).v, Quantity(vr["min"]).v
        q = max(q, lo)
        q = lo + -(-(q - lo) // step) * step
    elif "validValues" in pol and q not in [Quantity(x).v for x in pol["validValues"]]:
        return None
    return key, q


def fits(node, dev, request, chosen):
    """Whether dev can also go to this request: classes, selectors, room."""
    cls = CLASSES[request["deviceClassName"]]
    if not matches(cls.get("selectors"), dev) or not matches(request.get("selectors"), dev):
        return None
    if dev.allowMultipleAllocations:
        a = amount(dev, request)
        if a is None:
            return None
        key, q = a
        held = node.consumed.get(dev.key, 0) + sum(c[1] for d, c in chosen if d is dev and c)
        return (key, q) if held + q <= dev.capacity[dev.driver][key].v else None
    if dev.key in node.taken or any(d is dev for d, _ in chosen):
        return None
    for k, want in ((request.get("capacity") or {}).get("requests") or {}).items():
        if dev.capacity[dev.driver].get(k) is None or dev.capacity[dev.driver][k].v < Quantity(want).v:
            return None
    use = {}
    for d in [dev] + [d for d, c in chosen if not c]:
        for cc in d.raw.get("consumesCounters", []):
            for k, v in cc["counters"].items():
                use[(cc["counterSet"], k)] = use.get((cc["counterSet"], k), 0) + Quantity(v["value"]).v
    for (cs, k), v in use.items():
        if node.counted.get((cs, k), 0) + v > node.counters[cs][k]:
            return None
    return ()


def constraints_hold(constraints, picks):
    for c in constraints:
        names = c.get("requests") or []
        sel = [d for req, d, _ in picks
               if not names or req in names or req.split("/")[0] in names]
        attr = c.get("matchAttribute") or c.get("distinctAttribute")
        vals = [d.qualified(attr) for d in sel]
        if any(v is None for v in vals):
            return False
        if "matchAttribute" in c and len(set(vals)) > 1:
            return False
        if "distinctAttribute" in c and len(set(vals)) != len(vals):
            return False
    return True


def allocate(node, claim):
    """The first allocation in the scheduler's order, as status.allocation results, or None."""
    reqs = []
    for r in claim["requests"]:
        subs = [(r["name"] + "/" + s["name"], s) for s in r.get("firstAvailable", [])]
        reqs.append(subs or [(r["name"], r["exactly"])])
    cons = claim.get("constraints", [])

    def pick(i, picks):
        if i == len(reqs):
            return picks
        for name, spec in reqs[i]:
            got = take(name, spec, spec.get("count", 1), picks, 0)
            if got is not None:
                return got
        return None

    # As the real allocator: a request goes on from the device after the one
    # it just took, so it takes each device at most once.
    def take(name, spec, left, picks, start):
        if left == 0:
            return pick(len({p[0].split("/")[0] for p in picks}), picks)
        for at, dev in enumerate(node.devices[start:], start):
            c = fits(node, dev, spec, [(d, x) for _, d, x in picks])
            if c is None:
                continue
            nxt = picks + [(name, dev, c)]
            if not constraints_hold(cons, nxt):
                continue
            got = take(name, spec, left - 1, nxt, at + 1)
            if got is not None:
                return got
        return None

    picks = pick(0, [])
    if picks is None:
        return None
    results = []
    for n, (req, d, c) in enumerate(picks):
        r = {"request": req, "driver": d.driver, "pool": d.pool, "device": d.name}
        if c:
            r["consumedCapacity"] = {c[0]: str(c[1])}
            r["shareID"] = "%08x" % (0xa0000000 + n)
        results.append(r)
    return results


def hold(node, results):
    """What an allocated claim holds of the node, for the next claim."""
    for r in results:
        d = node.device(r)
        if "consumedCapacity" in r:
            (k, v), = r["consumedCapacity"].items()
            node.consumed[d.key] = node.consumed.get(d.key, 0) + int(v)
            continue
        node.taken.add(d.key)
        for cc in d.raw.get("consumesCounters", []):
            for k, v in cc["counters"].items():
                node.counted[(cc["counterSet"], k)] = node.counted.get((cc["counterSet"], k), 0) + Quantity(v["value"]).v


def requests_of(results):
    return sorted({r["request"] for r in results or []})


# --- every recorded machine: the selectors are valid on every device ----------------------
cpus_claim = example("prioritized-cpus.yaml")
mem_claim = example("prioritized-memory.yaml")
claims = {f: example(f) for f in sorted(os.listdir(EXAMPLES))
          if f.endswith(".yaml") and not f.startswith("prioritized-") and "ResourceClaimTemplate" in open(
              os.path.join(EXAMPLES, f)).read()}
# The complete claims in the docs' YAML blocks too.
for f in sorted(glob.glob(os.path.join(SRCDIR, "docs", "*.md"))):
    with open(f) as fh:
        for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", fh.read(), re.S)):
            try:
                docs = [d for d in yaml.safe_load_all(block) if isinstance(d, dict)]
            except yaml.YAMLError:
                continue
            for d in docs:
                if d.get("kind") == "ResourceClaim":
                    claims["%s: %s" % (os.path.basename(f), d["metadata"]["name"])] = d["spec"]["devices"]
                elif d.get("kind") == "ResourceClaimTemplate":
                    claims["%s: %s" % (os.path.basename(f), d["metadata"]["name"])] = d["spec"]["spec"]["devices"]
T24 = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")


def selectors_valid(node, devices):
    """Every class and request selector on every device; a CEL error raises."""
    for r in devices["requests"]:
        for spec in r.get("firstAvailable") or [r["exactly"]]:
            for d in node.devices if spec["deviceClassName"] not in EXTERNAL else []:
                if matches(CLASSES[spec["deviceClassName"]].get("selectors"), d):
                    matches(spec.get("selectors"), d)


errors, chosen = [], {}
for topo in sorted(glob.glob(os.path.join(TOPOLOGIES, "*.xml"))):
    base = os.path.basename(topo)
    for mode in ("numa", "partitioned"):
        node = Node(slices(topo, "--cpu-mode", mode))
        for f, devices in claims.items():
            try:
                selectors_valid(node, devices)
            except CelError as e:
                errors.append("%s in %s (%s): %s" % (f, base, mode, e))
        try:
            for claim, what in ((cpus_claim, "cpus"), (mem_claim, "mem")):
                selectors_valid(node, claim)
                chosen[(base, mode, what)] = requests_of(allocate(node, claim))
        except CelError as e:
            errors.append("%s (%s): %s" % (base, mode, e))
n_machines = len({k[0] for k in chosen})
check(not errors and n_machines >= 10,
      "on %d recorded machines, in both CPU modes, no selector of the %d claims of the examples and docs, or of "
      "their classes, fails on any device %s" % (n_machines, len(claims) + 2, errors[:3]))
for (base, mode, what), want in (
        (("24em64t-2n6c2t-pci.xml", "partitioned", "cpus"), ["cpus/l3-group"]),
        (("8em64t-4c2t.xml", "partitioned", "cpus"), ["cpus/l3-group"]),
        (("64amd64-4s2n4ca2co.xml", "partitioned", "cpus"), ["cpus/l3-group"]),
        (("AMD-17h-Zen-2xEpyc-7451.xml", "partitioned", "cpus"), ["cpus/whole-cores"]),
        (("16amd64-8n2c.xml", "partitioned", "cpus"), []),
        (("24em64t-2n6c2t-pci.xml", "numa", "cpus"), ["cpus/any-cpus"]),
        (("16amd64-8n2c.xml", "numa", "cpus"), []),
        (("24em64t-2n6c2t-pci.xml", "numa", "mem"), ["cpus", "mem/cpu-node"])):
    got = chosen.get((base, mode, what))
    check(got == want, "%s, %s mode: the %s example gets %s (%s)" % (base, mode, what, want or "nothing", got))

# --- the fallbacks, and their results ------------------------------------------------------
# Partitioned: a claim holding one core of each L3 group leaves no L3 group
# whole, so the list falls through to 4 whole cores of one node.
part = Node(slices(T24, "--cpu-mode", "partitioned"))
l3 = allocate(part, cpus_claim)
l3_dev = part.device(l3[0]) if l3 else None
check(l3 and len(l3) == 1 and l3[0]["request"] == "cpus/l3-group" and l3_dev.qualified(CPU + "/granularity") == "l3"
      and l3_dev.capacity[CPU]["cpus"].v >= 8, "24em64t, partitioned: one l3 device of 8 CPUs or more (%s)" % l3)
hold(part, [{"device": d, "driver": CPU, "pool": NODE, "request": "x"} for d in ("core0", "core1")])
cores = allocate(part, cpus_claim)
cdevs = [part.device(r) for r in cores or []]
check(cores and requests_of(cores) == ["cpus/whole-cores"] and len(cores) == 4
      and len({d.qualified(CPU + "/numaNode") for d in cdevs}) == 1
      and all(d.qualified(CPU + "/granularity") == "core" and d.capacity[CPU]["cpus"].v == 2 for d in cdevs),
      "...with core0 and core1 held, 4 whole 2-thread cores of one node (%s)" % [d.name for d in cdevs])

# numa mode: 8Gi on the CPUs' node; with 10Gi held on each node (of 18431Mi
# and 18421Mi), no node has 8Gi left: 4Gi on each of two.
numa = Node(slices(T24))
same = allocate(numa, mem_claim)
by_req = {r["request"]: numa.device(r) for r in same or []}
check(requests_of(same) == ["cpus", "mem/cpu-node"]
      and by_req["cpus"].qualified("resource.kubernetes.io/numaNode")
      == by_req["mem/cpu-node"].qualified("resource.kubernetes.io/numaNode"),
      "24em64t, numa: 8Gi of memory on the CPUs' node (%s)" % same)
for d in numa.devices:
    if d.driver == MEM:
        numa.consumed[d.key] = 10 << 30
two = allocate(numa, mem_claim)
mdevs = [numa.device(r) for r in two or [] if r["request"] == "mem/two-nodes"]
check(requests_of(two) == ["cpus", "mem/two-nodes"] and len({d.qualified(MEM + "/numaNode") for d in mdevs}) == 2
      and all(r["consumedCapacity"] == {"memory": str(4 << 30)} for r in two if r["driver"] == MEM),
      "...with 10Gi held on each node, 4Gi on each of two nodes (%s)" % two)

# --- extended resources (KEP-5004): the claim the scheduler makes ----------------------------
def scheduler_claim(pod):
    """One request per container and extended resource that a class maps,
    named container-<i>-request-<index in the sorted resource names>, with a
    count and no capacity (createDeviceRequests in kube-scheduler)."""
    by_name = {c["extendedResourceName"]: n for n, c in CLASSES.items() if c.get("extendedResourceName")}
    by_name.update({"deviceclass.resource.kubernetes.io/" + n: n for n in CLASSES})
    reqs = []
    spec = pod["spec"]
    for ci, ct in enumerate(spec.get("initContainers", []) + spec["containers"]):
        res = dict(ct["resources"].get("limits", {}), **ct["resources"].get("requests", {}))
        for ridx, key in enumerate(sorted(res)):
            if key in by_name:
                reqs.append({"name": "container-%d-request-%d" % (ci, ridx),
                             "exactly": {"deviceClassName": by_name[key], "allocationMode": "ExactCount",
                                         "count": int(res[key])}})
    return {"requests": reqs}


with open(os.path.join(EXAMPLES, "extended-resource-hugepages.yaml")) as fh:
    hp_pod = [d for d in yaml.safe_load_all(fh) if d and d["kind"] == "Pod"][0]
hp_claim = scheduler_claim(hp_pod)
check([r["exactly"]["deviceClassName"] for r in hp_claim["requests"]] == ["hugepages-1gi.memory.nrm.io"]
      and hp_claim["requests"][0]["exactly"]["count"] == 2,
      "extended-resource-hugepages.yaml: memory.nrm.io/1gi-pages: 2 is a request for 2 devices of "
      "hugepages-1gi.memory.nrm.io (%s)" % hp_claim)
# 24em64t with two 1 GiB pages on each node.
work = tempfile.mkdtemp(prefix="nrm-prioritized-")
T_HP = os.path.join(work, "hugepages.xml")
with open(T24) as fh:
    xml = fh.read()
with open(T_HP, "w") as fh:
    fh.write(xml.replace('<page_type size="2097152" count="0"/>',
                         '<page_type size="2097152" count="0"/>\n<page_type size="1073741824" count="2"/>'))
hp = Node(slices(T_HP, "--drivers", "memory"))
pages = allocate(hp, hp_claim)
check(pages and len(pages) == 2 and all(r["consumedCapacity"] == {"hugepages": str(1 << 30)} for r in pages)
      and len({r["device"] for r in pages}) == 2,
      "2 of memory.nrm.io/1gi-pages are one page on each of two devices (%s)" % [r["device"] for r in pages or []])
hp_claim["requests"][0]["exactly"]["count"] = 3
check(allocate(hp, hp_claim) is None,
      "...and 3 need three devices: not allocatable on two NUMA nodes, as with the real scheduler")
hp_claim["requests"][0]["exactly"]["count"] = 2

# KEP-5517 (DRANodeAllocatableResources, 1.36 field): what a claim gets of a
# memory device counts against the node's memory, of a huge-page device
# against hugepages-<size> in the kubelet's spelling (the canonical quantity
# of the page size: hugepages-2Mi, hugepages-1Gi), by the bytes consumed.
bad = []
for topo in [T_HP, T24, os.path.join(TOPOLOGIES, "fakeheteromemtiers.xml")]:
    for d in Node(slices(topo, "--drivers", "cpu,memory", "--feature-gates", "DRANodeAllocatableResources=true")).devices:
        m = d.raw.get("nodeAllocatableResourceMappings")
        ps = d.attributes[d.driver].get("pageSize")
        if d.driver == MEM and d.attributes[MEM]["hugeTLB"]:
            canon = Quantity(ps).v == Quantity(d.raw["capacity"]["hugepages"]["requestPolicy"]["default"]).v and ps
            want = {"hugepages-" + canon: {"capacityKey": "hugepages", "allocationMultiplier": "1"}} if canon else None
        elif d.driver == MEM:
            want = {"memory": {"capacityKey": "memory", "allocationMultiplier": "1"}}
        else:
            want = {"cpu": {"capacityKey": "cpus", "allocationMultiplier": "1"}}
        if m != want or not re.fullmatch(r"(cpu|memory|hugepages-\d+[KMG]i)", list(m)[0]):
            bad.append("%s %s: %s" % (os.path.basename(topo), d.name, m))
check(not bad, "with DRANodeAllocatableResources, memory devices map memory, huge-page devices hugepages-<size> "
      "(hugepages-1Gi), by the bytes consumed %s" % bad[:3])

# --- nrm plugin prepares them: the subrequest reaches the metadata and the settings ---------
FakeAPI = __import__("apitest").fake_api_class()
api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE)
with open(os.path.join(work, "token"), "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=os.path.join(work, "token"))
kubelet = os.path.join(work, "kubelet")


def start_plugin(tag, *extra, topo=T24):
    log = os.path.join(work, "plugin-%s.log" % tag)
    p = subprocess.Popen([NRM, "plugin", "-t", topo, "--node-name", NODE, "--drivers", "cpu,memory",
                          "--kubelet-dir", kubelet, "--cdi-dir", os.path.join(work, "cdi"),
                          "--state-dir", os.path.join(work, "state-" + tag), "--create-state-dir",
                          "--reconcile-interval", "0", "--device-metadata", "--kubeconfig", kubeconfig,
                          "--log-level", "debug"] + list(extra),
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    socks = [os.path.join(kubelet, "plugins", d, "dra.sock") for d in (CPU, MEM)]
    check(wait_for(lambda: all(os.path.exists(s) for s in socks)), "nrm plugin (%s) serves its sockets" % tag)
    return p, log


def put(name, devices, results):
    """The claim as the scheduler leaves it: its config entries copied into
    the allocation as they are (FromClaim, requests naming "mem" still name
    "mem", whichever subrequest was taken)."""
    spec = copy.deepcopy(devices)
    config = [dict(c, source="FromClaim") for c in spec.get("config", [])]
    api.put_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"namespace": "default", "name": name, "uid": "uid-" + name},
                   "spec": {"devices": spec},
                   "status": {"allocation": {"devices": {"results": results, "config": config}}}})


def prepare(driver, name):
    sock = os.path.join(kubelet, "plugins", driver, "dra.sock")
    return subprocess.run([DRA_CLIENT, "prepare", sock, "default", name, "uid-" + name], capture_output=True, text=True)


def metadata(driver, name, request):
    path = os.path.join(kubelet, "plugins", driver, "dra-device-metadata", "default_" + name, request, "metadata.json")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return (json.load(fh).get("requests") or [{}])[0]


def claim_env(driver, name):
    """The environment the claim's CDI spec gives the container."""
    env = {}
    for f in glob.glob(os.path.join(work, "cdi", "*.json")):
        with open(f) as fh:
            text = fh.read()
        if "uid-" + name in text and "metadata" not in os.path.basename(f) and driver in os.path.basename(f):
            for d in json.loads(text).get("devices", []):
                for e in d.get("containerEdits", {}).get("env", []):
                    k, _, v = e.partition("=")
                    env[re.sub(r"_[0-9A-Fa-f]{8,}$|_UID.*$", "", k)] = v
    return env


p, log = start_plugin("partitioned", "--cpu-mode", "partitioned")
put("l3", cpus_claim, l3)
r = prepare(CPU, "l3")
m = metadata(CPU, "l3", "cpus")
check(r.returncode == 0 and m.get("name") == "cpus/l3-group" and [d["name"] for d in m.get("devices", [])] == [l3_dev.name],
      "partitioned: the claim allocated as cpus/l3-group is prepared; its metadata file names the subrequest and the l3 device (%s %s)" % (r.stderr.strip(), m.get("name")))
# The cores claim was allocated after the L3 group had gone again.
subprocess.run([DRA_CLIENT, "unprepare", os.path.join(kubelet, "plugins", CPU, "dra.sock"), "uid-l3"], check=True)
put("cores", cpus_claim, cores)
r = prepare(CPU, "cores")
m = metadata(CPU, "cores", "cpus")
check(r.returncode == 0 and m.get("name") == "cpus/whole-cores"
      and sorted(d["name"] for d in m.get("devices", [])) == sorted(d.name for d in cdevs),
      "...and the one allocated as cpus/whole-cores, with the 4 cores (%s %s)" % (r.stderr.strip(), m.get("name")))


def cpu_count(cpulist):
    return sum(int(b) - int(a) + 1 for a, _, b in (x.partition("-") if "-" in x else (x, "", x)
                                                    for x in cpulist.split(",") if x))


env = claim_env(CPU, "cores")
check(cpu_count(env.get("NRM_CPUS", "")) == 8 and len(env.get("NRM_CPU_NODES", "")) == 1,
      "...its container gets the 8 threads of those cores, on one node (%s)" % env)
p.terminate()
check(p.wait(15) == 0, "the partitioned plugin stops cleanly")

p, log = start_plugin("numa")
put("two", mem_claim, two)
rc, rm = prepare(CPU, "two"), prepare(MEM, "two")
m = metadata(MEM, "two", "mem")
env = claim_env(MEM, "two")
check(rc.returncode == 0 and rm.returncode == 0 and m.get("name") == "mem/two-nodes"
      and sorted(d["name"] for d in m.get("devices", [])) == sorted(d.name for d in mdevs),
      "numa: the claim allocated as cpus and mem/two-nodes is prepared by both drivers; the memory metadata "
      "names the subrequest and both devices (%s %s %s)" % (rc.stderr.strip(), rm.stderr.strip(), m.get("name")))
mems = sorted(str(d.qualified(MEM + "/numaNode")) for d in mdevs)
check(any(v in (",".join(mems), "-".join(mems)) for k, v in env.items() if k.startswith("NRM_MEMS"))
      and any(v == str(8 << 30) for k, v in env.items() if k.startswith("NRM_MEMORY_MAX")),
      "...the container is bound to both nodes, and the MemoryConfig for `mem` applies to mem/two-nodes: "
      "8Gi limit (%s)" % env)
put("same", mem_claim, same)
rm = prepare(MEM, "same")
m = metadata(MEM, "same", "mem")
check(rm.returncode == 0 and m.get("name") == "mem/cpu-node" and len(m.get("devices", [])) == 1,
      "...and the one allocated as mem/cpu-node, with one device (%s %s)" % (rm.stderr.strip(), m.get("name")))
p.terminate()
check(p.wait(15) == 0, "the numa plugin stops cleanly")

p, log = start_plugin("hugepages", topo=T_HP)
put("pages", hp_claim, pages)
r = prepare(MEM, "pages")
env = claim_env(MEM, "pages")
check(r.returncode == 0 and env.get("NRM_HUGETLB_1GB") == str(2 << 30) and env.get("NRM_MEMS") == "0-1",
      "nrm plugin prepares the 2 one-page allocations as 2 GiB of 1 GiB pages on nodes 0-1 (%s %s)"
      % (r.stderr.strip(), env))
stop_plugin(p, api, log, work)
finish()
