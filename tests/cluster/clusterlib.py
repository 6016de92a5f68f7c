# SPDX-License-Identifier: Apache-2.0
"""What the cluster tests share: the upstream binaries (build.sh), a real
control plane on loopback (control-plane.sh), the test's own admin client,
Nodes created Ready for recorded machines, nrm's objects applied with the
real kubectl, and nrm's identity: a token of the DaemonSet's ServiceAccount
bound to the DaemonSet's pod on the node, as the kubelet gives it."""

import atexit
import glob
import http.client
import itertools
import json
import os
import re
import signal
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("NRM_SRCDIR", os.path.abspath(os.path.join(HERE, "..", "..")))
NRM = os.environ.get("NRM", os.path.join(SRCDIR, "nrm", "nrm"))
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(NRM)))
# The kubelet's gRPC calls in this layer, which has no kubelet.
DRA_CLIENT = os.path.join(BUILDDIR, "tests", "plugin", "dra-client")
TOPOLOGIES = os.environ.get("NRM_TOPOLOGIES", os.path.join(SRCDIR, "tests", "topologies"))
MANIFEST = os.path.join(SRCDIR, "deploy", "kubernetes", "nrm.yaml")
NAMESPACE = "nrm-system"
# The API server cuts a generateName to 58 characters before it appends 5
# (its SimpleNameGenerator keeps generated names within 63).
GENERATE_PREFIX_MAX = 58
passed, failures = [0], []


def skip(why):
    """Exit 77, or 1 where NRM_REQUIRE_CLUSTER is set (.ci/run): there a
    cluster test that cannot run is a failure."""
    print("SKIP: " + why)
    sys.exit(1 if os.environ.get("NRM_REQUIRE_CLUSTER") else 77)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if cond:
        passed[0] += 1
    else:
        failures.append(what)
    return cond


def finish():
    """The counts, then exit 1 on a failure; a passing test's work folders
    go (a failing one's stay, to be read)."""
    print("%d passed, %d failed" % (passed[0], len(failures)))
    for f in failures:
        print("failed: " + f)
    if not failures:
        for d in _workdirs:
            shutil.rmtree(d, ignore_errors=True)
    sys.exit(1 if failures else 0)


def cpulist(text):
    """The CPUs of a Linux CPU list such as 0-3,8, as a set."""
    out = set()
    for r in filter(None, (text or "").split(",")):
        a, _, b = r.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def slice_pairs(sent, have):
    """Each slice nrm sent (`nrm slices`, named as nrm names it) with the
    read-back slices the server named from it: its name and "-" as
    generateName, cut to GENERATE_PREFIX_MAX, and 5 characters more."""
    return [(w, [h for h in have if h["metadata"]["name"].startswith(
        (w["metadata"]["name"] + "-")[:GENERATE_PREFIX_MAX])]) for w in sent]


def wait_for(pred, timeout=60.0, step=0.2):
    end = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() > end:
            return v
        time.sleep(step)


def binaries(line=None, node=False):
    """The folder of the upstream binaries of one release line (v1.36 unless
    NRM_K8S_LINE says otherwise), built or reused by build.sh (with node,
    build.sh --node: also the kubelet, kube-proxy and containerd); a skip
    without Go. NRM_K8S_BIN names a folder built already; one without the
    node's binaries names the release line for build.sh --node."""
    line = line or os.environ.get("NRM_K8S_LINE", "v1.36")
    given = os.environ.get("NRM_K8S_BIN")
    if given and (not node or all(os.path.exists(os.path.join(given, b)) for b in ("kubelet", "containerd"))):
        return given
    if given:
        m = re.search(r"kubernetes-(v1\.\d+)\.", os.path.realpath(given))
        line = m.group(1) if m else line
    if shutil.which("go") is None:
        skip("Go is not installed: the cluster tests build kube-apiserver and the rest with Go 1.26 "
             "(tests/cluster/README.md), which Debian 12 does not package")
    p = subprocess.run([os.path.join(HERE, "build.sh"), *(["--node"] if node else []), line],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode == 77:
        skip("build.sh could not build the upstream binaries")
    if p.returncode != 0:
        raise SystemExit("FAIL tests/cluster/build.sh %s%s: exit %d" % ("--node " if node else "", line, p.returncode))
    return p.stdout.strip().splitlines()[-1]


class Cluster:
    """A control plane of its own: etcd, kube-apiserver, kube-scheduler,
    kube-controller-manager, on free loopback ports, in DIR."""

    def __init__(self, work, name, bindir, gates="", runtime_config="", apiserver_args=(), sans=(),
                 controllers=None, controller_manager_args=(), scheduler_args=()):
        self.dir = os.path.join(work, name)
        self.bin = bindir
        args = [os.path.join(HERE, "control-plane.sh"), "start", self.dir, bindir]
        if gates:
            args += ["--feature-gates", gates]
        if runtime_config:
            args += ["--runtime-config", runtime_config]
        for a in apiserver_args:
            args += ["--apiserver-arg", a]
        for a in sans:
            args += ["--san", a]
        if controllers:
            args += ["--controllers", controllers]
        for a in controller_manager_args:
            args += ["--controller-manager-arg", a]
        for a in scheduler_args:
            args += ["--scheduler-arg", a]
        t0 = time.time()
        # A test that dies of an exception still stops what it started.
        atexit.register(self.stop)
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        self.env = {}
        with open(os.path.join(self.dir, "env")) as fh:
            for line in fh:
                k, _, v = line.strip().partition("=")
                self.env[k] = v
        self.kubeconfig = self.env["KUBECONFIG"]
        self.port = int(self.env["API_PORT"])
        pki = os.path.join(self.dir, "pki")
        self.ca = os.path.join(pki, "ca.crt")
        self.ssl = ssl.create_default_context(cafile=self.ca)
        self.ssl.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        _, v = self.api("GET", "/version")
        self.version = v["gitVersion"]
        self.minor = int(re.match(r"\d+", v["minor"]).group(0))
        print("# %s: %s control plane up in %.1f s (gates %s)" % (name, self.version, time.time() - t0,
                                                                  gates or "defaults"))

    def stop(self):
        if getattr(self, "stopped", False):
            return
        self.stopped = True
        subprocess.run([os.path.join(HERE, "control-plane.sh"), "stop", self.dir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def kubectl(self, *args, stdin=None, check=True):
        p = subprocess.run([os.path.join(self.bin, "kubectl"), "--kubeconfig", self.kubeconfig, *args],
                           input=stdin, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError("kubectl %s: %s" % (" ".join(args), p.stderr.strip()))
        return p

    def api(self, method, path, body=None, content_type="application/json"):
        """One request as the test's admin: (status, decoded body)."""
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl, timeout=60)
        data = json.dumps(body) if body is not None and not isinstance(body, str) else body
        c.request(method, path, body=data, headers={"Content-Type": content_type} if data else {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def create_nodes(self, nodes, declared_features=()):
        """Nodes Ready with their capacity, created once: nodes is a list of
        (name, cpus, memory_bytes[, {other resource: quantity}]). With no
        kubelet and no node-lifecycle controller nothing writes them again.
        declared_features: what a kubelet with those gates on declares in
        status.declaredFeatures (1.37 refuses node-allocatable mappings on a
        Node that does not declare DRANodeAllocatableResources)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        items = []
        for name, cpus, mem, *more in nodes:
            res = {"cpu": str(cpus), "memory": str(mem), "pods": "110", **(more[0] if more else {})}
            items.append({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux",
                                                      "kubernetes.io/hostname": name[:63]}},
                "status": {"capacity": res, "allocatable": res, "declaredFeatures": list(declared_features),
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "created by the test, no kubelet",
                                           "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        self.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        # The TaintNodesByCondition admission plugin gives a new Node the
        # not-ready taint, which the node-lifecycle controller (left out)
        # would take off once it reads the Ready condition.
        for name, *_ in nodes:
            s, body = self.api("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": None}},
                               content_type="application/merge-patch+json")
            if s != 200:
                raise RuntimeError("Node %s: taints: %s %s" % (name, s, body))

    def install_nrm(self):
        """deploy/kubernetes/nrm.yaml, applied as docs/install.md says."""
        self.kubectl("apply", "-f", MANIFEST)

    def install_nrm_helm(self):
        """The chart, installed with the real helm as docs/install.md says."""
        chart = os.path.join(SRCDIR, "deploy", "helm", "nrm")
        p = subprocess.run([os.path.join(self.bin, "helm"), "install", "nrm", chart, "--kubeconfig", self.kubeconfig,
                            "--namespace", NAMESPACE, "--create-namespace"], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("helm install: %s" % p.stderr.strip())
        return p.stdout

    def nrm_pod(self, node, timeout=120):
        """The DaemonSet's pod on node, once the DaemonSet controller made it."""
        def find():
            s, pods = self.api("GET", "/api/v1/namespaces/%s/pods?fieldSelector=spec.nodeName%%3D%s"
                               % (NAMESPACE, node))
            for p in pods.get("items", []) if s == 200 else []:
                if any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", [])):
                    return p["metadata"]["name"]
            return None
        return wait_for(find, timeout, 0.5)

    def nrm_kubeconfig(self, node, path, account="nrm", pod=None):
        """A kubeconfig with a token of nrm's ServiceAccount bound to its pod
        on node (the kubelet's projected token: the node's name and uid are
        in it, which the associated-node rules of 1.36 read)."""
        pod = pod or self.nrm_pod(node)
        if not pod:
            raise RuntimeError("no pod of the DaemonSet on node %s" % node)
        s, pod_obj = self.api("GET", "/api/v1/namespaces/%s/pods/%s" % (NAMESPACE, pod))
        s, tr = self.api("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (NAMESPACE, account), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod,
                                        "uid": pod_obj["metadata"]["uid"]}}})
        if s != 201:
            raise RuntimeError("token for %s: %s %s" % (node, s, tr))
        token = os.path.join(os.path.dirname(path), os.path.basename(path) + ".token")
        with open(token, "w") as fh:
            fh.write(tr["status"]["token"])
        os.chmod(token, 0o600)
        with open(path, "w") as fh:
            json.dump({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "c", "cluster": {"server": self.env["API_URL"],
                                                              "certificate-authority": self.ca}}],
                       "users": [{"name": "u", "user": {"tokenFile": token}}],
                       "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                       "current-context": "c"}, fh)
        return path

    def delete_pods(self, namespace, *names):
        """Pods deleted at once. With no kubelet a pod on a node is only
        marked deleted by the first DELETE (and its bound tokens stay valid
        a minute more); the second, the kubelet's own last call, removes it."""
        for _ in range(2):
            for n in names:
                self.api("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0" % (namespace, n))

    def slices(self, node=None, driver=None):
        """The ResourceSlices the server holds (of one node, one driver)."""
        sel = ",".join(f for f in ("spec.nodeName=" + node if node else "",
                                   "spec.driver=" + driver if driver else "") if f)
        s, lst = self.api("GET", "/apis/resource.k8s.io/v1/resourceslices"
                          + ("?fieldSelector=" + urllib.parse.quote(sel) if sel else ""))
        if s != 200:
            raise RuntimeError("listing ResourceSlices: %s %s" % (s, lst))
        return sorted(lst["items"], key=lambda x: x["metadata"]["name"])

    def claim(self, namespace, name):
        """A ResourceClaim as the server holds it, or None."""
        s, c = self.api("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % (namespace, name))
        return c if s == 200 else None

    def allocate(self, claim, node, results, config=(), selector=None, status=None):
        """A ResourceClaim created and given an allocation by the test's
        admin, through the status subresource as the scheduler writes it:
        results are (request, driver, pool, device[, {more}]) and the
        allocation is for node. For a precise allocation that no scheduler
        decision is needed for; the server's validation still judges it.
        Returns the claim as the server holds it."""
        ns = claim["metadata"].get("namespace", "default")
        if ns != "default":
            self.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        s, c = self.api("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % ns, claim)
        if s != 201:
            raise RuntimeError("creating claim %s: %s %s" % (claim["metadata"]["name"], s, c))
        res = []
        for request, driver, pool, device, *more in results:
            res.append(dict({"request": request, "driver": driver, "pool": pool, "device": device},
                            **(more[0] if more else {})))
        c["status"] = {"allocation": {
            "devices": {"results": res, "config": list(config)},
            "nodeSelector": selector or {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}, **(status or {})}
        s, c = self.api("PUT", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s/status"
                        % (ns, claim["metadata"]["name"]), c)
        if s != 200:
            raise RuntimeError("allocating claim %s: %s %s" % (claim["metadata"]["name"], s, c))
        return c

    def writes(self, since=0, user="system:serviceaccount:nrm-system:nrm"):
        """The audit log's completed writes by user after event index since."""
        return [e for e in self.audit()[since:] if e.get("stage") == "ResponseComplete"
                and e["user"].get("username") == user
                and e["verb"] in ("create", "update", "patch", "delete", "deletecollection")]

    def audit(self):
        """The audit log's events so far (level Metadata, json lines)."""
        out = []
        with open(os.path.join(self.dir, "audit.log")) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


_serial = itertools.count()


class NrmPlugin:
    """One nrm plugin process for one Node, as the DaemonSet's pod runs it:
    its identity is a token bound to that pod; settings are nrm's flags (a
    recorded machine, a CPU mode, ...), the same for `nrm slices`."""

    def __init__(self, cluster, node, work, settings, proxy=None):
        self.cluster, self.node, self.extra = cluster, node, list(settings)
        # A faultproxy.FaultProxy to reach the server through, or None.
        self.proxy = proxy
        # Short: the kubelet directory's socket paths must fit 107 characters.
        self.dir = os.path.join(work, "p%d" % next(_serial))
        self.proc = None
        self.port = None
        self.since = 0

    def settings(self):
        return ["--node-name", self.node] + self.extra

    def sent(self):
        """What nrm publishes with these settings: `nrm slices` for the API
        server's release (the plugin asks the server for it)."""
        if not hasattr(self, "_sent"):
            p = subprocess.run([NRM, "slices", "--kubernetes-version", "1.%d" % self.cluster.minor] + self.settings(),
                               capture_output=True, text=True, check=True)
            self._sent = json.loads(p.stdout)["items"]
        return self._sent

    def drivers(self):
        return sorted({s["spec"]["driver"] for s in self.sent()})

    def start(self, *more, env=None, kubeconfig=True):
        """Starts nrm plugin with the node's identity; kubeconfig=False
        leaves --kubeconfig out (in-cluster settings from env instead)."""
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(self.dir, "plugin.log")
        # A restart in the same folder appends to the log: what this run
        # says (its port, its first publish) starts here.
        self.since = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        self.port = None
        kc = []
        if kubeconfig:
            path = self.cluster.nrm_kubeconfig(self.node, os.path.join(self.dir, "kubeconfig"))
            if self.proxy:
                path = self.proxy.kubeconfig(path, os.path.join(self.dir, "kubeconfig-proxy"))
            kc = ["--kubeconfig", path]
        atexit.register(self.stop)
        self.proc = subprocess.Popen(
            [NRM, "plugin"] + self.settings() + kc + [
                "--kubelet-dir", os.path.join(self.dir, "kubelet"),
                "--cdi-dir", self.cdi_dir(), "--state-dir", os.path.join(self.dir, "state"),
                "--create-state-dir", "--reconcile-interval", "0", "--http-address", "127.0.0.1:0",
                "--log-level", "debug"] + list(more),
            stdout=open(self.log, "a"), stderr=subprocess.STDOUT, env=env)

    def cdi_dir(self):
        return os.path.join(self.dir, "cdi")

    def socket(self, driver):
        return os.path.join(self.dir, "kubelet", "plugins", driver, "dra.sock")

    def register(self):
        """Each driver registered as the kubelet would: the plugin is Ready
        only then, and /readyz says what else is wrong."""
        reg = os.path.join(self.dir, "kubelet", "plugins_registry")
        socks = [os.path.join(reg, d + "-reg.sock") for d in self.drivers()]
        # A socket a killed instance left may be there before the new one
        # serves: tried until it answers.
        return all(wait_for(lambda: os.path.exists(s) and subprocess.run(
            [DRA_CLIENT, "register", s], capture_output=True).returncode == 0, 30, 0.2) for s in socks)

    def text(self):
        with open(self.log) as fh:
            return fh.read()

    def http(self, path):
        if self.port is None:
            m = re.search(r"/metrics on port (\d+)", self.text()[self.since:])
            if not m:
                return None, ""
            self.port = int(m.group(1))
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return None, ""

    def metric(self, name, driver=None, **labels):
        """The value of the first sample of name whose labels include
        driver and labels, or None."""
        if driver:
            labels["driver"] = driver
        _, body = self.http("/metrics")
        for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", body or "", re.M):
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if m.group(1) == name and all(got.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return None

    def settled(self):
        """Every driver has published once: in sync, or said why not."""
        t = self.text()[self.since:]
        return all(re.search(r"(info +%s: ResourceSlices of \S+ pool \S+ (are in sync|published without)"
                             r"|error +%s: )" % (re.escape(d), re.escape(d)), t) for d in self.drivers())

    def read_back(self):
        s, lst = self.cluster.api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D"
                                  + self.node)
        return sorted(lst["items"], key=lambda x: x["metadata"]["name"]) if s == 200 else None

    def prepare(self, driver, claim):
        """NodePrepareResources for one claim, as the kubelet calls it: the
        CDI ids, or the error."""
        m = claim["metadata"]
        p = subprocess.run([DRA_CLIENT, "prepare", self.socket(driver), m["namespace"], m["name"], m["uid"]],
                           capture_output=True, text=True)
        return p.returncode == 0, (p.stdout if p.returncode == 0 else p.stderr).strip()

    def claim_env(self, claim):
        """The NRM_* variables the claim's CDI specs give the container (a
        variable's per-claim twin, suffixed with the claim's UID, kept too)."""
        env = {}
        for f in os.listdir(self.cdi_dir()):
            with open(os.path.join(self.cdi_dir(), f)) as fh:
                text = fh.read()
            if not f.endswith(".json") or claim["metadata"]["uid"] not in text:
                continue
            for d in json.loads(text).get("devices", []):
                for e in d.get("containerEdits", {}).get("env", []):
                    k, _, v = e.partition("=")
                    if k.startswith("NRM_"):
                        env[re.sub(r"(_[0-9A-Fa-f]{4,})+$", "", k)] = v
        return env

    def unprepare(self, driver, claim):
        p = subprocess.run([DRA_CLIENT, "unprepare", self.socket(driver), claim["metadata"]["uid"]],
                           capture_output=True, text=True)
        return p.returncode == 0

    def stop(self):
        return terminate(self.proc) if self.proc else None


def claim_docs():
    """Every complete claim of docs/: (file:line, the block's objects) for
    each YAML block that holds a ResourceClaim or ResourceClaimTemplate."""
    import yaml
    out = []
    for f in sorted(glob.glob(os.path.join(SRCDIR, "docs", "*.md"))):
        with open(f) as fh:
            text = fh.read()
        for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            if re.search(r"^kind: (ResourceClaim|ResourceClaimTemplate)\b", m.group(1), re.M):
                where = "%s:%d" % (os.path.basename(f), text[:m.start()].count("\n") + 1)
                out.append((where, [d for d in yaml.safe_load_all(m.group(1)) if d]))
    return out


def stop_all(cluster, *plugins):
    """Ends a test: each plugin stopped with SIGTERM and checked to exit 0
    (the end of its log shown when a check failed), then the cluster."""
    for p in plugins:
        if p and p.proc:
            rc = p.stop()
            check(rc == 0, "%s: the plugin stops cleanly (exit %s)" % (p.node[:40], rc))
            if failures:
                print(p.text()[-3000:])
    cluster.stop()


_workdirs = []


def put_file(root, rel, text):
    """A file of a fake tree under --fsroot (root), its folders made, text
    written as given."""
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def terminate(proc, timeout=20):
    """SIGTERM, and SIGKILL after timeout seconds; the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def on_demand_tree(root):
    """A fake sysfs for huge pages on demand (--fsroot root): an empty 2 MiB
    pool and 1 GiB free on each of two NUMA nodes."""
    for n in (0, 1):
        put_file(root, "sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages" % n, "0\n")
        put_file(root, "sys/devices/system/node/node%d/meminfo" % n,
                 "Node %d MemTotal: 18874368 kB\nNode %d MemFree: 1048576 kB\n" % (n, n))


def human(n):
    """A byte count with its binary unit."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def edac_mc(root, i, name, ce, ue):
    """EDAC memory controller mc<i> of a fake tree: its name and counts."""
    for f, v in (("mc_name", name), ("ce_count", ce), ("ue_count", ue)):
        put_file(root, "sys/devices/system/edac/mc/mc%d/%s" % (i, f), "%s\n" % v)


def workdir():
    _workdirs.append(tempfile.mkdtemp(prefix="nrm-cluster-"))
    return _workdirs[-1]
