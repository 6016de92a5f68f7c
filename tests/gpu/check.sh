#!/bin/sh
# Checks nrm's PCI and NVIDIA drivers on a machine with real GPUs, against
# the machine itself: every GPU is published once with the bus id, PCIe
# root and NUMA node sysfs gives it, the NVIDIA vendor driver's device node
# matches nvidia-smi's minor number, a claim's CDI spec carries the GPU's
# nodes, and the CPUs nrm offers on the GPU's NUMA node are those nvidia-smi
# calls the GPU's CPU affinity. Prints one line per check and a summary.
#
#   tests/gpu/check.sh [BUILD_DIR]      exit 0 pass, 1 fail, 77 no GPU here
#
# Needs a built tree (nrm, nrm-agent, tests/plugin/dra-client,
# driver/nvidia/nrm-driver-nvidia.so) and python3; nvidia-smi when present.
# Writes nothing outside a temporary folder; touches no cgroup and no
# driver binding (the CPU and memory drivers are not served).
set -u
B=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
NRM=$B/nrm/nrm CLIENT=$B/tests/plugin/dra-client NVDIR=$B/driver/nvidia
T=$(mktemp -d /tmp/nrm-gpu.XXXXXX)
trap 'kill $plugin 2>/dev/null; rm -rf "$T"' EXIT
plugin=
pass=0 failed=0
check () { desc=$1; shift; if "$@"; then echo "ok   $desc"; pass=$((pass + 1)); else echo "FAIL $desc"; failed=$((failed + 1)); fi; }

for f in "$NRM" "$CLIENT"; do [ -x "$f" ] || { echo "SKIP: $f is not built"; exit 77; }; done
# The VGA of a server's management controller or an emulated adapter
# (ASPEED, Matrox, Cirrus, qemu) is no GPU: the PCI driver leaves it out.
gpus=$(for d in /sys/bus/pci/devices/*; do
  c=$(cat "$d/class" 2>/dev/null); v=$(cat "$d/vendor" 2>/dev/null)
  case $c:$v in 0x0300*:0x1a03|0x0300*:0x102b|0x0300*:0x1013|0x0300*:0x1234) echo "note ${d##*/}: console VGA $v, not a GPU" >&2 ;;
    0x0302*|0x0300*|0x0380*) basename "$d";; esac; done)
[ -n "$gpus" ] || { echo "SKIP: no display or 3D controller on this machine"; exit 77; }
drivers=pci
[ -f "$NVDIR/nrm-driver-nvidia.so" ] && [ -d /proc/driver/nvidia ] && drivers=pci,nvidia
echo "machine: $(uname -r), $(nproc) CPUs; GPUs: $(echo $gpus); drivers: $drivers"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -m >"$T/topo" 2>&1 && cat "$T/topo"

"$NRM" topology --json >"$T/topology.json" 2>"$T/err" || { echo "FAIL nrm topology: $(cat "$T/err")"; exit 1; }
"$NRM" slices --node-name gpu --drivers cpu,$drivers --driver-dir "$NVDIR" >"$T/slices.json" 2>"$T/err"
check "nrm slices with the cpu, $drivers drivers" [ $? -eq 0 ]

# Everything the machine says, against what nrm published, in one python run.
python3 - "$T" $gpus <<'PYEOF' >"$T/report" 2>&1
import json, os, re, subprocess, sys
t, gpus = sys.argv[1], sys.argv[2:]
def rd(p):
    try: return open(p).read().strip()
    except OSError: return None
devs = {}
for s in json.load(open(t + "/slices.json"))["items"]:
    for d in s["spec"].get("devices", []):
        devs.setdefault(d["name"], []).append((s["spec"]["driver"], d.get("attributes", {})))
def cpulist(text):
    out = set()
    for part in (text or "").split(","):
        if "-" in part: a, b = part.split("-"); out |= set(range(int(a), int(b) + 1))
        elif part: out.add(int(part))
    return out
smi = {}
try:
    q = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60).stdout
    bus = None
    for line in q.splitlines():
        m = re.match(r"GPU ([0-9A-Fa-f:.]+)", line.strip())
        if m: bus = m.group(1).lower()[-12:]; smi[bus] = {}
        m = re.match(r"\s*Minor Number\s*:\s*(\d+)", line)
        if m and bus: smi[bus]["minor"] = int(m.group(1))
except (OSError, subprocess.TimeoutExpired):
    pass
fails = 0
for g in gpus:
    sysd = "/sys/bus/pci/devices/" + g
    name = ("gpu-" + g).replace(":", "-").replace(".", "-")
    got = devs.get(name, [])
    ok = len(got) == 1
    fails += not ok
    print(("ok  " if ok else "FAIL"), g, "published once as", name, [d for d, _ in got])
    if not got: continue
    drv, a = got[0]
    numa = int(rd(sysd + "/numa_node") or -1)
    root = os.path.realpath(sysd).split("/")[3]
    want = [("resource.kubernetes.io/pciBusID", {"string": g}), ("resource.kubernetes.io/pcieRoot", {"string": root})]
    if numa >= 0: want.append(("resource.kubernetes.io/numaNode", {"int": numa}))
    for k, v in want:
        good = a.get(k) == v or (k.endswith("numaNode") and a.get(k, {}).get("ints", [None])[0] == numa)
        fails += not good
        print(("ok  " if good else "FAIL"), g, k, a.get(k), "sysfs:", v)
    if numa < 0: print("note", g, "numa_node is -1: numaNode left out, as the standard says")
    if g in smi and "minor" in smi[g]:
        good = a.get("minor") == {"int": smi[g]["minor"]}
        fails += not good
        print(("ok  " if good else "FAIL"), g, "minor", a.get("minor"), "nvidia-smi:", smi[g]["minor"])
    # The CPUs nrm offers on the GPU's node are the GPU's local CPUs.
    local = cpulist(rd(sysd + "/local_cpulist"))
    node_cpus = set()
    for n, entries in devs.items():
        for d, at in entries:
            if d == "cpu.nrm.io" and at.get("resource.kubernetes.io/numaNode", {}).get("int") == numa:
                node_cpus |= cpulist(rd("/sys/devices/system/node/node%d/cpulist" % numa))
    if numa >= 0:
        good = bool(node_cpus) and node_cpus <= local
        fails += not good
        print(("ok  " if good else "FAIL"), g, "node %d CPUs offered by cpu.nrm.io within local_cpulist" % numa,
              rd(sysd + "/local_cpulist"))
print("FAILS", fails)
PYEOF
cat "$T/report"
check "every GPU published once with sysfs's bus id, root, node (and nvidia-smi's minor)" grep -q "^FAILS 0$" "$T/report"

# A claim of the first GPU through the kubelet protocol: its CDI spec.
g=$(echo $gpus | cut -d' ' -f1)
name=$(echo "gpu-$g" | tr ':.' '--')
owner=$(python3 -c "
import json,sys
for s in json.load(open('$T/slices.json'))['items']:
    for d in s['spec'].get('devices', []):
        if d['name'] == '$name': print(s['spec']['driver'])" | head -1)
uid=00000000-0000-4000-8000-00000000a001
mkdir -p "$T/claims" "$T/k" "$T/state"
cat >"$T/claims/default_gpu.json" <<EOF
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"namespace":"default","name":"gpu","uid":"$uid"},
 "status":{"allocation":{"devices":{"results":[{"request":"gpu","driver":"$owner","pool":"gpu","device":"$name"}]}}}}
EOF
"$NRM" plugin --node-name gpu --drivers $drivers --driver-dir "$NVDIR" --kubelet-dir "$T/k" --cdi-dir "$T/cdi" \
  --state-dir "$T/state" --create-state-dir --claims-dir "$T/claims" --hook-path "" 2>"$T/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$T/k/plugins_registry/$owner-reg.sock" ] && break; sleep 0.1; done
"$CLIENT" prepare "$T/k/plugins/$owner/dra.sock" default gpu $uid >"$T/ids" 2>"$T/err"
check "prepare of $name through $owner" [ $? -eq 0 ]
cat "$T"/cdi/* 2>/dev/null | python3 -c "
import json, sys
spec = json.load(sys.stdin)
nodes = [n['path'] for d in spec['devices'] for n in d['containerEdits'].get('deviceNodes', [])]
print('CDI device nodes:', ' '.join(nodes))
sys.exit(0 if nodes else 1)" >"$T/nodes" 2>&1
ok=$?
cat "$T/nodes"
check "the CDI spec names device nodes of the GPU" [ $ok -eq 0 ]
# The generic driver's are the GPU's own DRM nodes, found through sysfs
# (card numbers follow the order of probing, not of buses).
drm=$(for e in /sys/bus/pci/devices/$g/drm/* /sys/bus/pci/devices/$g/*/drm/*; do
  case ${e##*/} in card[0-9]* | renderD[0-9]*) [ -e "/dev/dri/${e##*/}" ] && echo "/dev/dri/${e##*/}" ;; esac; done | sort | tr '\n' ' ')
if [ "$owner" = pci.nrm.io ] && [ -n "$drm" ]; then
  got=$(sed -n 's/^CDI device nodes: //p' "$T/nodes" | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ')
  check "the CDI spec's nodes are $g's DRM nodes in sysfs ($drm)" [ "$got" = "$drm" ]
fi
if [ "$owner" = nvidia.nrm.io ]; then
  minor=$(awk -F: '/Device Minor/ { gsub(/[ \t]/, "", $2); print $2 }' "/proc/driver/nvidia/gpus/$g/information")
  check "the CDI spec has /dev/nvidia$minor and /dev/nvidiactl" grep -q "/dev/nvidia$minor .*/dev/nvidiactl\|/dev/nvidiactl.*/dev/nvidia$minor " "$T/nodes"
fi
"$CLIENT" unprepare "$T/k/plugins/$owner/dra.sock" $uid >/dev/null 2>&1
check "unprepare" [ $? -eq 0 ]
kill -TERM $plugin; wait $plugin; plugin=
echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
