#!/bin/sh
# The Helm chart deploy/helm/nrm, with the real helm (v4, built from the Go
# module proxy by tests/cluster/build.sh; Debian 12 packages none):
#  - helm lint passes;
#  - deploy/kubernetes/nrm.yaml is what scripts/manifest.sh renders from the
#    chart with helm template, compared object by object as parsed YAML (run
#    `make manifest` after changing the chart);
#  - other values change the fields they should, and only those.
# helm install into a real API server: tests/cluster/test-slices.py.
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is not installed"; exit 77; }
top=${NRM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "${HELM:-}" ]; then
  bin=$("$top/tests/cluster/build.sh" v1.36)
  rc=$?
  [ $rc = 77 ] && { echo "SKIP: no Go to build helm with"; exit 77; }
  [ $rc = 0 ] || { echo "FAIL: tests/cluster/build.sh v1.36: exit $rc"; exit 1; }
  HELM=$bin/helm
fi
export HELM
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$top/scripts/manifest.sh" "$tmp/nrm.yaml" || { echo "FAIL: scripts/manifest.sh"; exit 1; }
exec python3 - "$top" "$tmp" <<'EOF'
import json, os, shutil, subprocess, sys
import yaml

top, tmp = sys.argv[1], sys.argv[2]
chart = os.path.join(top, "deploy/helm/nrm")
helm = os.environ["HELM"]
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def key(d):
    m = d.get("metadata", {})
    return (d.get("apiVersion"), d.get("kind"), m.get("namespace", ""), m.get("name"))


def template(*args):
    return subprocess.run([helm, "template", "nrm", chart, "--kube-version", "1.36.0", *args],
                          capture_output=True, text=True)


def render(*args):
    p = template(*args)
    if p.returncode != 0:
        print(p.stderr)
        raise SystemExit(f"FAIL helm template {' '.join(args)}: exit {p.returncode}")
    return docs_of(p.stdout)


def by(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found[0] if len(found) == 1 else None


# --- helm lint ---------------------------------------------------------------
p = subprocess.run([helm, "lint", "--strict", chart, "--kube-version", "1.36.0"], capture_output=True, text=True)
check(p.returncode == 0 and "0 chart(s) failed" in p.stdout, "helm lint --strict: " + p.stdout.strip().splitlines()[-1])
p = template("--kube-version", "1.35.0")
check(p.returncode != 0 and "kubeVersion" in p.stderr + p.stdout,
      "helm template refuses Kubernetes 1.35 (the chart's kubeVersion >=1.36)")

# --- the chart's metadata ---------------------------------------------------
meta = yaml.safe_load(open(os.path.join(chart, "Chart.yaml")))
version = open(os.path.join(top, "VERSION")).read().strip()
check(meta["apiVersion"] == "v2", "Chart.yaml: apiVersion v2")
check(meta["version"] == version and meta["appVersion"] == version,
      f"Chart.yaml: version and appVersion are VERSION ({version})")

# --- the plain manifest is the chart rendered --------------------------------
manifest = os.path.join(top, "deploy/kubernetes/nrm.yaml")
want = docs_of(open(os.path.join(tmp, "nrm.yaml")).read())
have = docs_of(open(manifest).read())
wk = {key(d): d for d in want}
hk = {key(d): d for d in have}
same = len(wk) == len(want) and len(hk) == len(have) and wk == hk
check(same, f"deploy/kubernetes/nrm.yaml equals the chart rendered ({len(want)} objects)")
if not same:
    for k in sorted(set(wk) | set(hk), key=str):
        if k not in hk:
            print(f"  missing from nrm.yaml: {k}")
        elif k not in wk:
            print(f"  not in the chart: {k}")
        elif wk[k] != hk[k]:
            print(f"  differs: {k}")
    print("  run `make manifest` (scripts/manifest.sh) after changing the chart")

# --- default values ------------------------------------------------------------
d = render("-n", "nrm-system")
check(by(d, "Namespace", "nrm-system") is None and len(d) == len(want) - 1,
      "default values: no Namespace (helm --create-namespace makes it), everything else")
ds = by(d, "DaemonSet", "nrm")
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
args = c["args"]
check(args[args.index("--drivers") + 1] == "cpu,memory,pci", "default drivers: --drivers cpu,memory,pci")
check(c["image"] == "nrm:latest" and c["imagePullPolicy"] == "IfNotPresent", "default image nrm:latest")
env = {e["name"]: e for e in c.get("env", [])}
check(ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
      and args[args.index("--instance-uid") + 1] == "$(POD_UID)"
      and env.get("POD_UID", {}).get("valueFrom") == {"fieldRef": {"fieldPath": "metadata.uid"}},
      "rolling update with the new pod beside the old: maxSurge 1, --instance-uid the pod UID")
cm = by(d, "ConfigMap", "nrm-config")
cfg = json.loads(cm["data"]["config.json"])
check(cfg == yaml.safe_load(open(os.path.join(chart, "values.yaml")))["config"],
      "config.json is values.config, as JSON")

# Extended resources (KEP-5004): the API server takes only an extended
# resource name (IsExtendedResourceName: a "/", not in kubernetes.io, a
# qualified name after "requests."), so never memory or hugepages-<size>.
import re
ext = {x["metadata"]["name"]: x["spec"].get("extendedResourceName") for x in d if x["kind"] == "DeviceClass"}
named = [n for n in ext.values() if n]
qual = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
check(all("/" in n and "kubernetes.io/" not in n and not n.startswith("requests.") and qual.match("requests." + n)
          and len(n.split("/")[0]) <= 253 - len("requests.") for n in named) and len(set(named)) == len(named),
      f"every extendedResourceName is a valid extended resource name, used once ({', '.join(named)})")
check(ext == {**{k: None for k in ext}, "isolated.cpu.nrm.io": "cpu.nrm.io/isolated-cpus", "cpus.cpu.nrm.io": "cpu.nrm.io/cpus",
              "cores.cpu.nrm.io": "cpu.nrm.io/cores", "hugepages-1gi.memory.nrm.io": "memory.nrm.io/1gi-pages"},
      "extended resources on the isolated, cpus, cores and 1 GiB huge-page classes only (docs/install.md says why)")

# --- other values ----------------------------------------------------------------
vals = os.path.join(tmp, "values.yaml")
with open(vals, "w") as f:
    yaml.safe_dump({
        "tolerations": [{"key": "nrm.io/dedicated", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
        "config": {"reservedCPUs": "0,32", "cpu": {"mode": "partitioned"}},
        "resources": {"limits": {"memory": "256Mi"}},
    }, f)
kdir = "/var/lib/k0s/kubelet"
d = render("-n", "nrm-other", "-f", vals,
           "--set", f"kubeletDir={kdir},cdiDir=/etc/cdi",
           "--set", "drivers={cpu}",
           "--set", "image.repository=registry.example.com/nrm,image.tag=0.1.0,image.pullPolicy=Always",
           "--set", "nodeSelector.nrm\\.io/enabled=yes",
           "--set", "priorityClassName=",
           "--set", "controller.replicas=3")
text = template("-n", "nrm-other", "--set", f"kubeletDir={kdir}").stdout
check("/var/lib/kubelet" not in text, f"kubeletDir={kdir}: /var/lib/kubelet appears nowhere")
ds = by(d, "DaemonSet", "nrm")
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
args = c["args"]
check(args[args.index("--kubelet-dir") + 1] == kdir, "kubeletDir: --kubelet-dir")
vols = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
for name, sub in (("kubelet-root", ""), ("kubelet-plugins", "/plugins"), ("kubelet-registry", "/plugins_registry")):
    check(vols[name] == kdir + sub and mounts[name] == kdir + sub,
          f"kubeletDir: volume {name} and its mount at {kdir + sub}")
check(args[args.index("--cdi-dir") + 1] == "/etc/cdi" and vols["cdi"] == "/etc/cdi" and mounts["cdi"] == "/etc/cdi",
      "cdiDir: --cdi-dir, the cdi volume and its mount")
others = {n: p for n, p in vols.items() if not n.startswith("kubelet-") and n != "cdi"}
check(others == {"config": None, "state": "/var/lib/nrm", "sys": "/sys", "cgroup": "/sys/fs/cgroup",
                 "tracing": "/sys/kernel/tracing", "dev": "/dev"},
      "the other volumes stay")
check(args[args.index("--drivers") + 1] == "cpu", "drivers={cpu}: --drivers cpu in the DaemonSet")
ctl = by(d, "Deployment", "nrm-controller")
cc = ctl["spec"]["template"]["spec"]["containers"][0]
check(cc["args"] == ["controller", "--drivers", "cpu"], "drivers={cpu}: --drivers cpu in the controller")
check(ctl["spec"]["replicas"] == 3, "controller.replicas=3")
classes = sorted(x["metadata"]["name"] for x in d if x["kind"] == "DeviceClass")
check(classes == sorted(["cpu.nrm.io", "isolated.cpu.nrm.io", "cpus.cpu.nrm.io", "cores.cpu.nrm.io"]),
      f"drivers={{cpu}}: only the CPU DeviceClasses ({', '.join(classes)})")
check(pod["tolerations"] == [{"key": "nrm.io/dedicated", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
      "tolerations from -f")
check(pod["nodeSelector"] == {"kubernetes.io/os": "linux", "nrm.io/enabled": "yes"}, "nodeSelector: merged")
check("priorityClassName" not in pod, "priorityClassName=\"\": none")
img = "registry.example.com/nrm:0.1.0"
check(all(x["image"] == img and x["imagePullPolicy"] == "Always" for x in [c, pod["initContainers"][0], cc]),
      f"image: {img}, Always, in all three containers")
check(c["resources"] == {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
      "resources: merged over the defaults")
cfg = json.loads(by(d, "ConfigMap", "nrm-config")["data"]["config.json"])
check(cfg["reservedCPUs"] == "0,32" and cfg["cpu"] == {"mode": "partitioned", "minSharedCPUs": 1},
      "config: merged, a CPU list stays a string")
spaced = [x for x in d if x["kind"] not in ("ClusterRole", "ClusterRoleBinding", "DeviceClass", "Namespace",
                                           "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
check(all(x["metadata"]["namespace"] == "nrm-other" for x in spaced), "-n nrm-other: every namespaced object")
subj = [s["namespace"] for x in d if x["kind"] in ("ClusterRoleBinding", "RoleBinding") for s in x["subjects"]]
check(subj and all(s == "nrm-other" for s in subj), "-n nrm-other: every binding's subjects")

d = render("--set", "drivers={cpu,memory,nvidia}")
classes = {x["metadata"]["name"] for x in d if x["kind"] == "DeviceClass"}
check({"gpu.nrm.io", "vfio.nrm.io", "memory.nrm.io"} <= classes and "pci.nrm.io" not in classes
      and "nic.nrm.io" not in classes, "drivers={cpu,memory,nvidia}: gpu and vfio classes, not the pci ones")
check(by(d, "DaemonSet", "nrm")["spec"]["template"]["spec"].get("tolerations") == [{"operator": "Exists"}],
      "tolerations: the default stays")
check(by(d, "ValidatingAdmissionPolicy", "nrm-opaque-config") is not None,
      "the opaque-settings policy with the CPU or memory driver")
check(by(render("--set", "drivers={pci}"), "ValidatingAdmissionPolicy", "nrm-opaque-config") is None,
      "drivers={pci}: no opaque-settings policy (no CPUConfig or MemoryConfig to judge)")
d = render("--set", "tolerations=null")
check("tolerations" not in by(d, "DaemonSet", "nrm")["spec"]["template"]["spec"], "tolerations=null: none")

# --- the PrometheusRule: off by default, the rules file when on -------------------
rules = yaml.safe_load(open(os.path.join(top, "deploy/prometheus/nrm-rules.yaml")))
check(not [x for x in render() if x["kind"] == "PrometheusRule"] and "PrometheusRule" not in open(manifest).read(),
      "default values and nrm.yaml: no PrometheusRule (the Prometheus Operator's CRDs may be missing)")
d = render("-n", "monitoring", "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps")
pr = [x for x in d if x["kind"] == "PrometheusRule"]
check(len(pr) == 1 and pr[0]["apiVersion"] == "monitoring.coreos.com/v1" and pr[0]["metadata"]["name"] == "nrm"
      and pr[0]["metadata"]["namespace"] == "monitoring"
      and pr[0]["metadata"]["labels"] == {"app.kubernetes.io/name": "nrm", "release": "kps"},
      "prometheusRule.enabled=true: one PrometheusRule monitoring.coreos.com/v1 nrm, with prometheusRule.labels")
spec = pr[0]["spec"] if pr else {}
check(spec == {"groups": rules["groups"]},
      f"its spec.groups are deploy/prometheus/nrm-rules.yaml's ({sum(len(g['rules']) for g in rules['groups'])} rules)")
# What the CRD requires of a group and a rule; promtool checks the rest.
dur = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
ok = all(isinstance(g.get("name"), str) and g["name"] and all(
    ("alert" in r) != ("record" in r) and isinstance(r.get("expr"), str) and dur.match(r.get("for", "0"))
    and all(isinstance(v, str) for v in {**r.get("labels", {}), **r.get("annotations", {})}.values())
    for r in g["rules"]) for g in spec.get("groups", []))
check(ok and spec.get("groups"), "every group has a name, every rule alert or record, an expr, a duration, string labels")
promtool = shutil.which("promtool")
if promtool:
    with open(os.path.join(tmp, "rendered-rules.yaml"), "w") as f:
        yaml.safe_dump(spec, f)
    p = subprocess.run([promtool, "check", "rules", os.path.join(tmp, "rendered-rules.yaml")],
                       capture_output=True, text=True)
    check(p.returncode == 0, "promtool check rules on the rendered spec: " + (p.stdout + p.stderr).strip().splitlines()[-1])
else:
    print("skip promtool check rules on the rendered spec: promtool is not installed (Debian package prometheus)")


def sys_mount(d):
    c = by(d, "DaemonSet", "nrm")["spec"]["template"]["spec"]["containers"][0]
    return next(m for m in c["volumeMounts"] if m["mountPath"] == "/sys")


def driver_names(d):
    role = by(d, "ClusterRole", "nrm")
    return next(r.get("resourceNames") for r in role["rules"] if r["resources"] == ["resourceclaims/driver"])


check(driver_names(render()) == ["cpu.nrm.io", "memory.nrm.io", "pci.nrm.io"],
      "resourceclaims/driver: the default drivers' names (the binder writes their status.devices)")
check(driver_names(render("--set", "drivers={cpu,nvidia}")) == ["cpu.nrm.io", "nvidia.nrm.io"],
      "drivers={cpu,nvidia}: resourceclaims/driver for those two only")
check(driver_names(render("--set", "config.cpu.driverName=cpu.example.com", "--set", "drivers={cpu,memory}"))
      == ["cpu.example.com", "memory.nrm.io"],
      "config.cpu.driverName=cpu.example.com: resourceclaims/driver follows the renamed driver")


def node_rules(d):
    """The node agent's ClusterRole as (group, resource, names, verbs), sorted."""
    return sorted((",".join(r["apiGroups"]), ",".join(r["resources"]), ",".join(r.get("resourceNames", [])),
                   ",".join(sorted(r["verbs"]))) for r in by(d, "ClusterRole", "nrm")["rules"])


# Exactly what nrm plugin calls (docs/install.md, permissions): a rule more
# or less fails here.
check(node_rules(render()) == sorted([
    ("resource.k8s.io", "resourceclaims", "", "get,list,watch"),
    ("resource.k8s.io", "resourceclaims/status", "", "patch"),
    ("resource.k8s.io", "resourceclaims/driver", "cpu.nrm.io,memory.nrm.io,pci.nrm.io", "associated-node:patch"),
    ("events.k8s.io", "events", "", "create,patch"),
    ("resource.k8s.io", "resourceslices", "", "create,delete,list,update,watch"),
    ("", "nodes", "", "get"),
]), "the node agent's ClusterRole grants exactly what nrm plugin calls: %s" % node_rules(render()))
check(sys_mount(render()).get("readOnly") is True, "default: /sys read-only")
for v in ("config.pci.passthrough=true", "config.memory.hugepagesOnDemand.2Mi=256Mi"):
    m = sys_mount(render("--set", v))
    check("readOnly" not in m and "recursiveReadOnly" not in m, v + ": /sys read-write (nrm writes sysfs)")
check(sys_mount(render("--set", "config.pci.passthrough=false")).get("readOnly") is True,
      "config.pci.passthrough=false: /sys read-only")

sys.exit(1 if failed else 0)
EOF
