#!/bin/sh
# The PCI driver and the NVIDIA vendor driver over a fake sysfs, /proc and
# /dev tree (--fsroot): what they publish, and a claim prepared through the
# kubelet protocol (real gRPC on a unix socket) into a CDI spec with the
# GPU's device nodes; the generic driver leaves the NVIDIA GPU to the
# vendor driver while it is loaded.
. "$(dirname "$0")/lib.sh"
: "${NRM_NVIDIA_DRIVER_DIR:?run through make check}"
: "${NRM_DRA_CLIENT:?run through make check}"
X="$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml"
R="$TMP/root"

# fn BDF HOSTBRIDGE VENDOR CLASS NUMA DRIVER: a function and its bus link.
fn () {
  d="$R/sys/devices/$2/${2#pci}:01.0/$1"
  mkdir -p "$d" "$R/sys/bus/pci/devices" "$R/sys/bus/pci/drivers/$6"
  echo "$3" >"$d/vendor"; echo 0x1234 >"$d/device"; echo "$4" >"$d/class"; echo "$5" >"$d/numa_node"
  ln -s "../../../devices/$2/${2#pci}:01.0/$1" "$R/sys/bus/pci/devices/$1"
  ln -s "../../../../bus/pci/drivers/$6" "$d/driver"
}
fn 0000:41:00.0 pci0000:40 0x10de 0x030200 1 nvidia
fn 0000:00:02.0 pci0000:00 0x1af4 0x030000 -1 virtio-pci
mkdir -p "$R/sys/devices/pci0000:00/0000:00:01.0/0000:00:02.0/virtio0/drm/card0" "$R/dev/dri"
: >"$R/dev/dri/card0"
mkdir -p "$R/proc/driver/nvidia/gpus/0000:41:00.0"
printf 'Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-5e2f0000-0000-0000-0000-000000000001\nDevice Minor: \t 3\n' \
  >"$R/proc/driver/nvidia/gpus/0000:41:00.0/information"
: >"$R/dev/nvidia3"; : >"$R/dev/nvidiactl"; : >"$R/dev/nvidia-uvm"

slices () { "$NRM" slices --node-name n1 --topology "$X" --fsroot "$R" "$@" >"$TMP/out" 2>"$TMP/err"; }
has () { python3 -c "
import json, sys
devs = {d['name']: (s['spec']['driver'], d.get('attributes', {}))
        for s in json.load(open(sys.argv[1]))['items'] for d in s['spec'].get('devices', [])}
sys.exit(0 if eval('(' + sys.argv[2] + ')') else 1)" "$TMP/out" "$1"; }

# The generic driver alone publishes both GPUs.
slices --drivers pci && ok || fail "nrm slices --drivers pci: $(cat "$TMP/err")"
has "devs['gpu-0000-41-00-0'][0] == 'pci.nrm.io' and 'gpu-0000-00-02-0' in devs" && ok \
  || fail "the generic driver does not publish both GPUs: $(cat "$TMP/out")"
has "devs['gpu-0000-41-00-0'][1]['resource.kubernetes.io/numaNode'] == {'int': 1}
     and devs['gpu-0000-41-00-0'][1]['resource.kubernetes.io/pcieRoot'] == {'string': 'pci0000:40'}
     and devs['gpu-0000-41-00-0'][1]['driver'] == {'string': 'nvidia'}
     and 'resource.kubernetes.io/numaNode' not in devs['gpu-0000-00-02-0'][1]" && ok \
  || fail "wrong standard attributes: $(cat "$TMP/out")"

# With the vendor driver loaded, the NVIDIA GPU is its own, once.
slices --drivers pci,nvidia --driver-dir "$NRM_NVIDIA_DRIVER_DIR" && ok \
  || fail "nrm slices with the nvidia driver: $(cat "$TMP/err")"
has "devs['gpu-0000-41-00-0'][0] == 'nvidia.nrm.io' and devs['gpu-0000-00-02-0'][0] == 'pci.nrm.io'" && ok \
  || fail "the NVIDIA GPU is not the vendor driver's alone: $(cat "$TMP/out")"
has "devs['gpu-0000-41-00-0'][1]['model'] == {'string': 'NVIDIA H200'} and devs['gpu-0000-41-00-0'][1]['minor'] == {'int': 3}" \
  && ok || fail "no model and minor from /proc/driver/nvidia: $(cat "$TMP/out")"

# A claim of both GPUs through the kubelet protocol.
K="$TMP/k"; mkdir -p "$TMP/claims" "$TMP/state"
uid=00000000-0000-4000-8000-0000000000c1
cat >"$TMP/claims/default_gpus.json" <<EOF
{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
 "metadata":{"namespace":"default","name":"gpus","uid":"$uid"},
 "status":{"allocation":{"devices":{"results":[
  {"request":"a","driver":"nvidia.nrm.io","pool":"n1","device":"gpu-0000-41-00-0"},
  {"request":"b","driver":"pci.nrm.io","pool":"n1","device":"gpu-0000-00-02-0"}]}}}}
EOF
"$NRM" plugin --node-name n1 --topology "$X" --fsroot "$R" --drivers pci,nvidia --driver-dir "$NRM_NVIDIA_DRIVER_DIR" \
  --kubelet-dir "$K" --cdi-dir "$TMP/cdi" --state-dir "$TMP/state" --create-state-dir --claims-dir "$TMP/claims" \
  --hook-path "" 2>"$TMP/plugin.log" &
plugin=$!
for _ in $(seq 100); do [ -S "$K/plugins_registry/nvidia.nrm.io-reg.sock" ] && [ -S "$K/plugins_registry/pci.nrm.io-reg.sock" ] && break; sleep 0.1; done
"$NRM_DRA_CLIENT" prepare "$K/plugins/nvidia.nrm.io/dra.sock" default gpus $uid >"$TMP/ids" 2>"$TMP/err" && ok \
  || fail "prepare through nvidia.nrm.io: $(cat "$TMP/err") $(tail -5 "$TMP/plugin.log")"
"$NRM_DRA_CLIENT" prepare "$K/plugins/pci.nrm.io/dra.sock" default gpus $uid >>"$TMP/ids" 2>"$TMP/err" && ok \
  || fail "prepare through pci.nrm.io: $(cat "$TMP/err") $(tail -5 "$TMP/plugin.log")"
spec_has () { python3 -c "
import glob, json, sys
specs = [json.load(open(f)) for f in glob.glob(sys.argv[1] + '/*')]
nodes = {n['path']: n.get('hostPath') for s in specs for d in s.get('devices', []) for n in d['containerEdits'].get('deviceNodes', [])}
env = [e for s in specs for d in s.get('devices', []) for e in d['containerEdits'].get('env', [])]
sys.exit(0 if eval('(' + sys.argv[2] + ')') else 1)" "$TMP/cdi" "$1"; }
spec_has "nodes.get('/dev/nvidia3') == '$R/dev/nvidia3' and '/dev/nvidiactl' in nodes and '/dev/nvidia-uvm' in nodes
          and '/dev/nvidia-uvm-tools' not in nodes and nodes.get('/dev/dri/card0') == '$R/dev/dri/card0'" && ok \
  || fail "the CDI specs lack the GPUs' device nodes: $(cat "$TMP"/cdi/* 2>&1)"
spec_has "'NVIDIA_VISIBLE_DEVICES=void' in env and 'NRM_PCI_DEVICES=0000:41:00.0' in env and 'NRM_PCI_DEVICES=0000:00:02.0' in env" \
  && ok || fail "the CDI specs lack the environment: $(cat "$TMP"/cdi/* 2>&1)"
# A second claim of the same GPU waits its turn.
uid2=00000000-0000-4000-8000-0000000000c2
sed "s/$uid/$uid2/; s/\"gpus\"/\"gpus2\"/" "$TMP/claims/default_gpus.json" >"$TMP/claims/default_gpus2.json"
"$NRM_DRA_CLIENT" prepare "$K/plugins/nvidia.nrm.io/dra.sock" default gpus2 $uid2 >"$TMP/out" 2>"$TMP/err" \
  && fail "a held GPU was prepared for a second claim" || ok
grep -q "held by claim $uid" "$TMP/err" "$TMP/out" && ok || fail "no 'held by' error: $(cat "$TMP/err" "$TMP/out")"
"$NRM_DRA_CLIENT" unprepare "$K/plugins/nvidia.nrm.io/dra.sock" $uid >/dev/null 2>&1 && ok || fail "unprepare"
"$NRM_DRA_CLIENT" prepare "$K/plugins/nvidia.nrm.io/dra.sock" default gpus2 $uid2 >/dev/null 2>"$TMP/err" && ok \
  || fail "the released GPU cannot be prepared again: $(cat "$TMP/err")"
kill -TERM $plugin
wait $plugin && ok || fail "the plugin did not stop cleanly: $(tail -5 "$TMP/plugin.log")"

# nrm status: each PCI function with its bus id, class, NUMA node and holder.
status () { "$NRM" status --node-name n1 --topology "$X" --fsroot "$R" --state-dir "$TMP/state" "$@" >"$TMP/out" 2>"$TMP/err"; }
status --drivers pci,nvidia --driver-dir "$NRM_NVIDIA_DRIVER_DIR" && ok || fail "nrm status: $(cat "$TMP/err")"
grep -q "^  gpu-0000-41-00-0 *0000:41:00.0, gpu, NUMA node 1, held by default/gpus2 ($uid2)$" "$TMP/out" && ok \
  || fail "status does not show the NVIDIA GPU held by its claim: $(cat "$TMP/out")"
grep -q "^  gpu-0000-00-02-0 *0000:00:02.0, gpu, NUMA node unknown, held by default/gpus ($uid)$" "$TMP/out" && ok \
  || fail "status does not show the virtio GPU held by its claim: $(cat "$TMP/out")"
grep -q "^  default/gpus ($uid).* pci.nrm.io gpu-0000-00-02-0" "$TMP/out" && ok \
  || fail "status does not list the claim's PCI device: $(cat "$TMP/out")"
# A function that another DRA driver serves (its registration socket in the
# kubelet's registry) is left out, and said so.
KD=$TMP/kubelet2
mkdir -p "$KD/plugins_registry"
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" \
  "$KD/plugins_registry/gpu.nvidia.com-reg.sock" || fail "cannot bind a unix socket"
status --drivers pci --kubelet-dir "$KD" && ok || fail "nrm status beside gpu.nvidia.com: $(cat "$TMP/err")"
grep -q "^  left out: 0000:41:00.0: served by gpu.nvidia.com (DRA driver registered with the kubelet)$" "$TMP/out" && ok \
  || fail "status does not say who serves the NVIDIA GPU: $(cat "$TMP/out")"
grep -q "gpu-0000-41-00-0" "$TMP/out" && fail "status shows a left-out function as published: $(cat "$TMP/out")" || ok
grep -q "^  gpu-0000-00-02-0 .*held by default/gpus ($uid)$" "$TMP/out" && ok \
  || fail "status beside gpu.nvidia.com lost the virtio GPU's claim: $(cat "$TMP/out")"
status --drivers pci --kubelet-dir "$KD" --json && ok || fail "nrm status --json: $(cat "$TMP/err")"
python3 -c "
import json, sys
pools = {p['driver']: p for p in json.load(open(sys.argv[1]))['pools']}
p = pools['pci.nrm.io']
dev = {d['name']: d for d in p['devices']}['gpu-0000-00-02-0']
assert dev['claims'] == [sys.argv[2]], dev
assert dev['pci'] == {'busID': '0000:00:02.0', 'class': 'gpu', 'vendorID': '1af4', 'deviceID': '1234',
                      'driver': 'virtio-pci'}, dev['pci']
assert p['leftOut'] == [{'busID': '0000:41:00.0',
                         'servedBy': 'gpu.nvidia.com (DRA driver registered with the kubelet)'}], p['leftOut']
" "$TMP/out" "$uid" && ok || fail "status --json lacks the PCI view: $(cat "$TMP/out")"
# The slices never carry what status alone shows.
"$NRM" slices --node-name n1 --topology "$X" --fsroot "$R" --drivers pci --kubelet-dir "$KD" >"$TMP/out" 2>"$TMP/err" \
  && ok || fail "nrm slices beside gpu.nvidia.com: $(cat "$TMP/err")"
grep -q "leftOut\|0000:41:00.0" "$TMP/out" && fail "the slices name the left-out function: $(cat "$TMP/out")" || ok

# On a recorded machine (a state dir of its own: the plugin above served another): hwloc's names beside each function.
mkdir -p "$TMP/empty"
"$NRM" status --node-name n1 --topology "$NRM_TOPOLOGIES/32em64t-2n8c2t-pci-normalio.xml" --drivers pci \
  --state-dir "$TMP/empty" >"$TMP/out" 2>"$TMP/err" && ok || fail "nrm status on a recorded machine: $(cat "$TMP/err")"
grep -q "^  gpu-0000-03-00-0 *0000:03:00.0, gpu, NUMA node 0, NVIDIA Corporation .*, free$" "$TMP/out" && ok \
  || fail "status lacks hwloc's names of the recorded GPU: $(cat "$TMP/out")"
# That machine records two functions at 0000:04:00.0: the names are the published one's.
grep -q "^  ib-0000-04-00-0 *0000:04:00.0, ib, NUMA node 1, Mellanox Technologies MT27700 Family \[ConnectX-4\], free$" \
  "$TMP/out" && ok || fail "status names the HCA after another function: $(cat "$TMP/out")"
finish
