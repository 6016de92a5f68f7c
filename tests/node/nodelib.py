"""A real Kubernetes node for nrm's node tests: the real control plane of
tests/cluster on the host's loopback and, in the cgroup v2 VM of tests/vm,
containerd 2, runc, the CNI bridge, kube-proxy and the kubelet of the same
release, joined to it through qemu's user network (restrict=on: the guest
reaches the API server's port at 10.0.2.100 and nothing else)."""

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))

import clusterlib  # noqa: E402
from clusterlib import SRCDIR, check, skip, wait_for  # noqa: E402,F401

GUEST_API = "10.0.2.100"
NODE = "nrm-node"
INSTALL = os.path.join(SRCDIR, "docs", "install.md")
WORKLOAD = "localhost/nrm-workload:test"
# The node-lifecycle controller's --node-monitor-grace-period (default 50 s):
# under TCG the kubelet's lease renewals (every 10 s) can lag while the
# emulated guest is busy, and a NotReady Node is tainted and its pods
# evicted. 120 s leaves room; finish() says whether Ready ever changed.
GRACE = 120
VM = os.path.join(SRCDIR, "tests", "vm", "vm.sh")


def install_blocks(section, kinds):
    """The code blocks of a section of docs/install.md, which the tests run
    as written; a section without them, or with blocks of other kinds,
    fails the test."""
    with open(INSTALL) as fh:
        text = fh.read()
    m = re.search(r"^### %s\n(.*?)^##" % re.escape(section), text, re.S | re.M)
    if not m:
        raise SystemExit("FAIL docs/install.md has no section '%s'" % section)
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", m.group(1), re.S | re.M)
    if [b[0] for b in blocks] != kinds:
        raise SystemExit("FAIL docs/install.md, '%s': expected blocks %s, got %s"
                         % (section, kinds, [b[0] for b in blocks]))
    return [b[1] for b in blocks]


def registry_free_steps():
    """The three blocks of docs/install.md's "Without a registry": the
    commands on the machine that built the image, those on each node, and
    containerd's sandbox setting."""
    return install_blocks("Without a registry", ["sh", "sh", "toml"])


def nrm_image():
    """nrm's image built from this tree: scripts/image.sh runs when the
    image's nrm.source label is not this tree's source id (once: the next
    test finds it current); a skip where it cannot be built."""
    image = os.path.join(SRCDIR, "scripts", "image.sh")
    want = run(image, "--source-id", cwd=SRCDIR).stdout.strip()
    p = subprocess.run(["podman", "image", "inspect", "--format", '{{index .Labels "nrm.source"}}', "nrm:latest"],
                       capture_output=True, text=True)
    have = p.stdout.strip() if p.returncode == 0 else ""
    if have == want:
        print("# nrm:latest is current (source %s)" % want)
        return
    if shutil.which("debootstrap") is None:
        skip("nrm:latest is %s and debootstrap, which scripts/image.sh needs to build it, is missing "
             "(./scripts/deps.sh)" % ("stale" if have else "missing"))
    t0 = time.time()
    p = subprocess.run([image], cwd=SRCDIR, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("FAIL scripts/image.sh: exit %d\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:]))
    print("# built nrm:latest with scripts/image.sh in %.0f s" % (time.time() - t0))


def node_writes_steps():
    """The two blocks of docs/install.md's "Passthrough and huge pages on
    demand": the values file (yaml) and the helm command (sh), which the
    PCI node test runs in the folder of the values file, with the chart's
    path made absolute."""
    return install_blocks("Passthrough and huge pages on demand", ["yaml", "sh"])


EXAMPLES = os.path.join(SRCDIR, "deploy", "kubernetes", "examples")
EXAMPLE = os.path.join(EXAMPLES, "cpus-and-memory-same-numa.yaml")


def adapt(path, changes):
    """An example's text with changes (old, new) applied, each checked to
    apply, so that a change to the example fails the test here."""
    with open(path) as fh:
        text = fh.read()
    for old, new in changes:
        if old not in text:
            raise SystemExit("FAIL %s no longer has %r: update tests/node/" % (path, old))
        text = text.replace(old, new)
    return text


def claim_example(name=None, cpus=2, memory="512Mi"):
    """deploy/kubernetes/examples/cpus-and-memory-same-numa.yaml with what
    the VM needs: the test's busybox image, cpus CPUs and memory that fit;
    name renames its template and pod. Each change is checked to apply, so
    that a change to the example fails the test here."""
    changes = [("image: debian:12-slim", "image: %s\n    imagePullPolicy: Never" % WORKLOAD),
               ('cpus: "4"', 'cpus: "%d"' % cpus), ('cpu: "4"', 'cpu: "%d"' % cpus),
               ("memory: 4Gi", "memory: " + memory)]
    if name:
        changes.append(("cpus-and-memory-same-numa", name))
    return adapt(EXAMPLE, changes)


def plain_pod(name):
    """A pod without a claim: the shared pool's."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"containers": [{"name": "c", "image": WORKLOAD, "imagePullPolicy": "Never"}]}})


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def build_images(work, bindir, pause):
    """The pause image (upstream's pause.c, from the k8s.io/kubernetes
    module the binaries were built from) and the test workload (Debian's
    static busybox), built with podman and saved as OCI archives: there is
    no registry."""
    imgs = os.path.join(work, "images")
    os.makedirs(imgs, exist_ok=True)
    ctx = os.path.join(work, "pause")
    os.makedirs(ctx, exist_ok=True)
    gomod = run("go", "env", "GOMODCACHE").stdout.strip()
    ver = json.loads(run(os.path.join(bindir, "kubectl"), "version", "--client", "-o", "json").stdout)
    ver = ver["clientVersion"]["gitVersion"]
    run("gcc", "-Os", "-static", "-o", os.path.join(ctx, "pause"),
        os.path.join(gomod, "k8s.io", "kubernetes@" + ver, "build", "pause", "linux", "pause.c"))
    with open(os.path.join(ctx, "Containerfile"), "w") as fh:
        fh.write('FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n')
    run("podman", "build", "-q", "-t", pause, ctx)
    ctx = os.path.join(work, "workload")
    os.makedirs(os.path.join(ctx, "bin"), exist_ok=True)
    run("cp", "/bin/busybox", os.path.join(ctx, "bin", "busybox"))
    for a in ("sh", "cat", "sleep", "grep", "ls", "echo", "env"):
        if not os.path.lexists(os.path.join(ctx, "bin", a)):
            os.symlink("busybox", os.path.join(ctx, "bin", a))
    with open(os.path.join(ctx, "Containerfile"), "w") as fh:
        fh.write('FROM scratch\nCOPY bin /bin\nCMD ["/bin/sleep", "3600"]\n')
    run("podman", "build", "-q", "-t", WORKLOAD, ctx)
    for name, tar in ((pause, "pause.tar"), (WORKLOAD, "workload.tar")):
        run("podman", "save", "-q", "--format", "oci-archive", "-o", os.path.join(imgs, tar), name)


def start_node(helm=False, extra=None, **kw):
    """The common start of the node tests, each step checked: the Node
    Ready, nrm installed as docs/install.md says (nrm.yaml; with helm, the
    chart with the values of its "Passthrough and huge pages on demand")
    and its pod Ready with the three drivers publishing; extra: more helm
    values (yaml) on top. (node, nrm's pod); a failed step ends the test
    with the logs."""
    if shutil.which("podman") is None:
        skip("podman is not installed (./scripts/deps.sh): it builds the node's images")
    if os.geteuid() != 0:
        skip("needs root: podman's root storage, and the VM shares the work folder as root")
    t0 = time.time()
    node = Node(clusterlib.workdir(), clusterlib.binaries(node=True), **kw)
    ok = check(node.ready(600) is not None, "the Node %s registers and turns Ready" % NODE)
    pod = node.install_nrm(helm=helm, extra=extra) if ok else None
    ok = ok and check(pod is not None, "nrm's DaemonSet pod turns Ready on the node (registered with the "
                      "kubelet, slices in sync) %.0f s after the start" % (time.time() - t0))
    if ok:
        drivers = sorted({sl["spec"]["driver"] for sl in node.cluster.slices(node=NODE)})
        ok = check(drivers == ["cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"],
                   "the node's slices come from nrm's three drivers: %s" % drivers)
    if not ok:
        node.fail()
    return node, pod


CLAIMED = "cpus-and-memory-same-numa"


def start_with_pods(**kw):
    """start_node, then two pods in default: "plain", without a claim, and
    the example (CLAIMED, 2 CPUs, 512 MiB), both checked to run.
    (node, nrm's pod, start time)."""
    t0 = time.time()
    node, pod = start_node(**kw)
    c = node.cluster
    c.kubectl("apply", "-f", "-", stdin=plain_pod("plain"))
    c.kubectl("apply", "-f", "-", stdin=claim_example())
    if not check(node.wait_running(CLAIMED, "plain"), "the example's pod and a pod without a claim run"):
        node.fail()
    return node, pod, t0


def isolate():
    """From here on this process and what it starts (the control plane,
    qemu) live in a network namespace of their own with only loopback: a
    stray dial of a Node, pod or Service address fails there instead of
    leaving the machine."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise SystemExit("FAIL unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno()))
    run("ip", "link", "set", "lo", "up")
    links = run("ip", "-o", "link").stdout.split("\n")
    if [x.split(":")[1].strip() for x in links if x] != ["lo"]:
        raise SystemExit("FAIL the test's network namespace has more than lo: %s" % links)


class Node:
    """The control plane on the host and one node in a VM."""

    def __init__(self, work, bindir, gates="", cpus=8, nodes=2, mem_mb=3072, timeout=1200, pci=False):
        self.work = work
        self.bin = bindir
        self.g = os.path.join(work, "guest")
        os.makedirs(self.g, exist_ok=True)
        # docs/install.md's steps without a registry: the image saved on the
        # host (here), imported on the node (import_nrm), the pause image
        # named in containerd's configuration.
        on_host, self.on_node, sandbox = registry_free_steps()
        with open(os.path.join(self.g, "containerd-sandbox.toml"), "w") as fh:
            fh.write(sandbox)
        pause = re.search(r'sandbox = "([^"]+)"', sandbox).group(1)
        # What needs the network first: the images (a stale nrm image is
        # built from Debian's mirror) and the guest kernel.
        build_images(self.g, bindir, pause)
        nrm_image()
        t0 = time.time()
        subprocess.run(["sh", "-ec", on_host], cwd=os.path.join(self.g, "images"), check=True)
        print("# docs/install.md's steps on the host: %.0f s" % (time.time() - t0))
        p = subprocess.run([VM, "--kernel-only"], capture_output=True, text=True)
        if p.returncode == 77:
            skip(p.stderr.strip())
        if p.returncode != 0:
            raise SystemExit("FAIL vm.sh --kernel-only: %s" % p.stderr.strip())
        isolate()
        # The guest dials the API server at 10.0.2.100:PORT (guestfwd); the
        # kubernetes Service's endpoint is that address, for kube-proxy and
        # nrm's in-cluster config.
        self.cluster = clusterlib.Cluster(
            work, "cp", bindir, gates=gates, sans=[GUEST_API],
            apiserver_args=["--advertise-address=" + GUEST_API, "--endpoint-reconciler-type=lease"],
            controllers="*", controller_manager_args=["--node-monitor-grace-period=%ds" % GRACE])
        c = self.cluster
        pki = os.path.join(c.dir, "pki")
        self.pki = pki
        run("cp", os.path.join(pki, "ca.crt"), os.path.join(self.g, "ca.crt"))
        self.client_cert("kubelet", "/O=system:nodes/CN=system:node:" + NODE)
        self.client_cert("kube-proxy", "/CN=system:kube-proxy")
        with open(os.path.join(self.g, "node-name"), "w") as fh:
            fh.write(NODE)
        self.write_configs(gates)
        self.n = 0
        cmd = [VM, "--nodes", str(nodes), "--cpus", str(cpus), "--mem-mb", str(mem_mb), "--timeout", str(timeout),
               *(["--pci", "--iommu"] if pci else []),
               "--guestfwd", str(c.port), "--share", self.g, "--",
               "sh", os.path.join(HERE, "node-guest.sh"), bindir, self.g]
        self.vm_log = open(os.path.join(work, "vm.log"), "w")
        self.vm = subprocess.Popen(cmd, stdout=self.vm_log, stderr=subprocess.STDOUT)
        atexit.register(self.stop)

    def client_cert(self, name, subject):
        p, g = self.pki, self.g
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
            "-keyout", os.path.join(g, name + ".key"), "-out", os.path.join(p, name + ".csr"))
        ext = os.path.join(p, name + ".ext")
        with open(ext, "w") as fh:
            fh.write("extendedKeyUsage=clientAuth\n")
        run("openssl", "x509", "-req", "-in", os.path.join(p, name + ".csr"), "-CA", os.path.join(p, "ca.crt"),
            "-CAkey", os.path.join(p, "ca.key"), "-CAcreateserial", "-days", "2", "-extfile", ext,
            "-out", os.path.join(g, name + ".crt"))
        with open(os.path.join(g, name + ".kubeconfig"), "w") as fh:
            fh.write("""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s:%d", certificate-authority: "%s/ca.crt"}
users:
- name: u
  user: {client-certificate: "%s/%s.crt", client-key: "%s/%s.key"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
""" % (GUEST_API, self.cluster.port, g, g, name, g, name))

    def write_configs(self, gates):
        g = self.g
        fg = "".join("\n  %s: %s" % (k, v.lower()) for k, _, v in
                     (x.partition("=") for x in gates.split(",") if x))
        with open(os.path.join(g, "kubelet.yaml"), "w") as fh:
            fh.write("""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s/ca.crt}
authorization: {mode: Webhook}
# As docs/install.md tells operators: nrm replaces these.
cpuManagerPolicy: none
memoryManagerPolicy: None
topologyManagerPolicy: none
failSwapOn: false
readOnlyPort: 0
resolvConf: ""
# The VM's root is a tmpfs: no disk-pressure eviction over its size.
evictionHard: {memory.available: 100Mi, nodefs.available: "0%%", imagefs.available: "0%%"}
imageGCHighThresholdPercent: 100
featureGates: {%s}
""" % (g, fg + ("\n" if fg else "")))
        with open(os.path.join(g, "kube-proxy.yaml"), "w") as fh:
            fh.write("""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s/kube-proxy.kubeconfig}
hostnameOverride: %s
mode: iptables
clusterCIDR: 10.244.0.0/16
conntrack: {maxPerCore: 0}
""" % (g, NODE))

    def guest(self, script, timeout=120):
        """Runs script (sh) in the guest: (exit status, output)."""
        n = self.n
        self.n += 1
        req = os.path.join(self.g, "req")
        os.makedirs(req, exist_ok=True)
        with open(os.path.join(req, "%d.tmp" % n), "w") as fh:
            fh.write(script)
        os.rename(os.path.join(req, "%d.tmp" % n), os.path.join(req, "%d.sh" % n))
        rc = os.path.join(req, "%d.rc" % n)
        if not wait_for(lambda: os.path.exists(rc) or self.vm.poll() is not None, timeout, 0.2) \
                or not os.path.exists(rc):
            raise RuntimeError("the guest did not answer request %d" % n)
        with open(os.path.join(req, "%d.out" % n)) as fh:
            out = fh.read()
        with open(rc) as fh:
            return int(fh.read()), out

    def import_nrm(self):
        """docs/install.md's steps on the node, in the folder of nrm.tar."""
        rc, out = self.guest("cd %s/images && set -e\n%s" % (self.g, self.on_node), timeout=600)
        if rc != 0:
            raise SystemExit("FAIL docs/install.md's steps on the node: exit %d\n%s" % (rc, out))

    def node_ready(self):
        """The Node, when its Ready condition is True; else None."""
        s, n = self.cluster.api("GET", "/api/v1/nodes/" + NODE)
        if s != 200:
            return None
        for c in n["status"].get("conditions", []):
            if c["type"] == "Ready" and c["status"] == "True":
                return n
        return None

    def ready(self, timeout=600):
        """Waits for the Node to be Ready: the Node, or None."""
        def f():
            return "vm-exited" if self.vm.poll() is not None else self.node_ready()
        # vm.sh boots one VM at a time (make -j runs VM tests side by side):
        # the wait for the Node counts from the guest's start.
        t0 = time.time()
        wait_for(lambda: os.path.exists(os.path.join(self.g, "guest-up")) or self.vm.poll() is not None,
                 3600, 1)
        print("# the node's parts started %.0f s after the VM was asked for" % (time.time() - t0))
        t0 = time.time()
        r = wait_for(f, timeout, 1)
        print("# node %s after %.0f s" % ("Ready" if isinstance(r, dict) else "not Ready", time.time() - t0))
        if isinstance(r, dict):
            self.ready_since = next(c.get("lastTransitionTime") for c in r["status"]["conditions"]
                                    if c["type"] == "Ready")
        return r if isinstance(r, dict) else None

    def install_nrm(self, timeout=400, helm=False, extra=None):
        """nrm's image imported and nrm.yaml applied (with helm, the chart
        installed with node_writes_steps(), and extra, values in yaml, as a
        second values file), as docs/install.md says; then its pod on the
        node, once Ready (registered with the kubelet, slices in sync), or
        None."""
        self.import_nrm()
        if helm:
            values, command = node_writes_steps()
            with open(os.path.join(self.work, "node-writes.yaml"), "w") as fh:
                fh.write(values)
            env = dict(os.environ, KUBECONFIG=self.cluster.kubeconfig,
                       PATH=self.bin + ":" + os.environ.get("PATH", ""))
            chart = os.path.join(SRCDIR, "deploy", "helm", "nrm")
            command = command.replace(" deploy/helm/nrm ", " %s " % chart)
            if extra:
                with open(os.path.join(self.work, "test-extra.yaml"), "w") as fh:
                    fh.write(extra)
                if " -f node-writes.yaml" not in command:
                    raise SystemExit("FAIL docs/install.md's helm command has no -f node-writes.yaml")
                command = command.replace(" -f node-writes.yaml", " -f node-writes.yaml -f test-extra.yaml")
            p = subprocess.run(["sh", "-ec", command],
                               cwd=self.work, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit("FAIL docs/install.md's helm command: exit %d\n%s"
                                 % (p.returncode, p.stdout + p.stderr))
        else:
            self.cluster.install_nrm()
        pod = self.cluster.nrm_pod(NODE, timeout=300)
        return pod if pod and wait_for(lambda: self.pod_ready(clusterlib.NAMESPACE, pod), timeout, 2) else None

    def pod(self, ns, name):
        s, p = self.cluster.api("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        return p if s == 200 else None

    def pod_ready(self, ns, name):
        p = self.pod(ns, name)
        conds = {x["type"]: x["status"] for x in (p or {}).get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True"

    def container_id(self, ns, pod, container):
        p = self.pod(ns, pod) or {}
        cid = next((c.get("containerID", "") for c in p.get("status", {}).get("containerStatuses", [])
                    if c["name"] == container), "")
        cid = cid.split("//", 1)[-1]
        return cid if re.fullmatch(r"[0-9a-f]{64}", cid) else None

    def view(self, ns, pod, container):
        """What a container sees, read in the guest from /proc and its
        cgroup (not through kubectl): Cpus_allowed_list, Mems_allowed_list,
        its NRM_* variables, memory.max; {} while it has no container."""
        cid = self.container_id(ns, pod, container)
        if not cid:
            return {}
        rc, out = self.guest("""d=$(find /sys/fs/cgroup/kubepods -type d -name %s | head -n 1)
pid=$(head -n 1 "$d/cgroup.procs")
grep -E '^(Cpus|Mems)_allowed_list' /proc/$pid/status | tr -d '\\t'
tr '\\0' '\\n' </proc/$pid/environ | grep '^NRM_' | sed 's/=/:/'
echo "memory.max:$(cat "$d/memory.max")"
echo "hugetlb.2MB.max:$(cat "$d/hugetlb.2MB.max" 2>/dev/null)"
echo "dev:$(cd /proc/$pid/root/dev && ls -d dri/* vfio/* nvme* 2>/dev/null | tr '\n' ' ')"
""" % cid)
        view = {"id": cid}
        for line in out.splitlines():
            k, _, v = line.partition(":")
            view[k] = v.strip()
        return view

    def cpus(self, ns, pod, container):
        return clusterlib.cpulist(self.view(ns, pod, container).get("Cpus_allowed_list", ""))

    def online(self):
        rc, out = self.guest("cat /sys/devices/system/cpu/online")
        return clusterlib.cpulist(out.strip())

    def node_cpus(self, numa):
        rc, out = self.guest("cat /sys/devices/system/node/node%d/cpulist" % int(numa))
        return clusterlib.cpulist(out.strip())

    def restart(self, part):
        """Stops one of the node's parts (containerd, kubelet, kube-proxy)
        and starts it again with the same command; containers keep running
        (their shims do not belong to containerd's process)."""
        rc, out = self.guest("""pkill -x %s || exit 1
for i in $(seq 150); do pgrep -x %s >/dev/null || break; sleep 0.2; done
pgrep -x %s >/dev/null && exit 2
/run/node/start-%s
""" % (part, part, part, part))
        if rc != 0:
            raise SystemExit("FAIL restarting %s in the guest: exit %d %s" % (part, rc, out))

    def logs(self):
        """The end of each part's log, for a failed check."""
        out = []
        for name in ("vm.log", "guest/guest.log", "guest/containerd.log", "guest/kubelet.log",
                     "guest/kube-proxy.log"):
            try:
                with open(os.path.join(self.work, name), errors="replace") as fh:
                    out.append("=== %s (end)\n%s" % (name, "".join(fh.readlines()[-25:])))
            except OSError:
                pass
        if self.vm.poll() is None:
            rc, text = self.guest("tail -n 30 /var/log/pods/nrm-system_*/*/*.log", timeout=60)
            out.append("=== nrm's containers (end)\n" + text)
        return "\n".join(out)

    def finish(self, t0, what):
        """Ends a test: the logs when a check failed, the VM and the control
        plane stopped, the time since t0, the counts."""
        if clusterlib.failures:
            print(self.logs())
        s, n = self.cluster.api("GET", "/api/v1/nodes/" + NODE)
        for c in n.get("status", {}).get("conditions", []) if s == 200 else []:
            if c["type"] == "Ready":
                same = c["status"] == "True" and c.get("lastTransitionTime") == getattr(self, "ready_since", None)
                print("# the Node's Ready condition: %s since %s (%s)%s"
                      % (c["status"], c.get("lastTransitionTime"), c.get("reason"),
                         ", unchanged since it first turned Ready" if same else ""))
        self.stop()
        print("# %s: %.0f s" % (what, time.time() - t0))
        clusterlib.finish()

    def fail(self):
        """Ends the test after a failed check that leaves nothing more to
        check: the events and the logs, then the counts."""
        print(self.cluster.kubectl("get", "events", "-A", check=False).stdout[-4000:])
        print(self.logs())
        self.stop()
        clusterlib.finish()

    def wait_running(self, *names, timeout=400):
        """Waits for pods in default to run with every container ready."""
        def up(name):
            p = self.pod("default", name) or {}
            st = p.get("status", {})
            return st.get("phase") == "Running" and all(cs.get("ready") for cs in st.get("containerStatuses", [{}]))
        return wait_for(lambda: all(up(n) for n in names), timeout, 2)

    def claim_of(self, pod):
        """The allocation of a pod's first claim: {request: result}, and the
        NUMA node of the cpu.nrm.io device of its request "cpus" (None
        without one)."""
        p = self.pod("default", pod)
        name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        s, cl = self.cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + name)
        results = {r["request"]: r for r in cl["status"]["allocation"]["devices"]["results"]}
        numa = None
        for sl in self.cluster.slices(node=NODE, driver="cpu.nrm.io") if "cpus" in results else []:
            for d in sl["spec"].get("devices", []):
                if d["name"] == results["cpus"]["device"]:
                    numa = d.get("attributes", {}).get("resource.kubernetes.io/numaNode", {}).get("int")
        return name, results, numa

    def stop(self):
        if self.vm.poll() is not None:
            self.cluster.stop()
            return
        with open(os.path.join(self.g, "stop"), "w"):
            pass
        try:
            self.vm.wait(60)
        except subprocess.TimeoutExpired:
            self.vm.kill()
        self.cluster.stop()


def nrm_pods(node):
    """The DaemonSet's pods on the node (the controller's Deployment runs
    there too, under the same name label)."""
    s, ps = node.cluster.api("GET", "/api/v1/namespaces/%s/pods" % clusterlib.NAMESPACE)
    return [p for p in ps.get("items", []) if p["spec"].get("nodeName") == NODE
            and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))]


def nrm_ready_again(node, old_uid=None, old_restarts=None, timeout=400):
    """Waits until one nrm pod runs on the node, Ready, and (given old_uid)
    is another pod than old_uid, or (given old_restarts) its container has
    restarted more often."""
    def f():
        pods = nrm_pods(node)
        if len(pods) != 1:
            return None
        p = pods[0]
        if old_uid and p["metadata"]["uid"] == old_uid:
            return None
        st = p.get("status", {})
        restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses", []))
        if old_restarts is not None and restarts <= old_restarts:
            return None
        conds = {x["type"]: x["status"] for x in st.get("conditions", [])}
        return p if conds.get("Ready") == "True" else None
    return wait_for(f, timeout, 2)


def after(node, what, first, online):
    """The checks after one restart. first: the claimed container's view."""
    c = node.cluster
    v = node.view("default", CLAIMED, "app")
    check(v.get("id") == first["id"] and v.get("Cpus_allowed_list") == first["Cpus_allowed_list"],
          "%s: the claimed container runs on, the same one on the same CPUs (%s)" % (what, v.get("Cpus_allowed_list")))
    mine = clusterlib.cpulist(first["Cpus_allowed_list"])
    shared = wait_for(lambda: node.cpus("default", "plain", "c") == online - mine, 120, 3)
    check(shared, "%s: the shared pool still leaves the claim's CPUs out: %s"
          % (what, sorted(node.cpus("default", "plain", "c"))))
    name = "after-" + what.replace(" ", "-").replace("'", "")[:40].strip("-")
    c.kubectl("apply", "-f", "-", stdin=claim_example(name=name))
    ok = node.wait_running(name)
    if not check(ok, "%s: a new pod with a claim is prepared and runs" % what):
        print(c.kubectl("get", "events", "-n", "default", check=False).stdout[-3000:])
        return
    theirs = node.cpus("default", name, "app")
    check(len(theirs) == 2 and not theirs & mine, "%s: ... on 2 other CPUs (%s; the first claim has %s)"
          % (what, sorted(theirs), sorted(mine)))
    both = wait_for(lambda: node.cpus("default", "plain", "c") == online - mine - theirs, 120, 3)
    check(both, "%s: ... and the shared pool leaves both claims out" % what)
    c.kubectl("delete", "pod", name, "--wait=true", "--timeout=300s")
    back = wait_for(lambda: node.cpus("default", "plain", "c") == online - mine, 120, 3)
    check(back, "%s: ... whose CPUs return to the pool once it is deleted" % what)
