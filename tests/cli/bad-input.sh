#!/bin/sh
# Bad input: a clear error naming the problem on stderr, a non-zero exit,
# nothing on stdout.
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"
X="$NRM_TOPOLOGIES/16amd64-8n2c.xml"

printf '<?xml version="1.0"?>\n<topology version="2.0">\n  <object type="Machine"' >"$TMP/bad.xml"
printf 'this is not xml' >"$TMP/junk.xml"
: >"$TMP/empty.xml"
cp "$X" "$TMP/unreadable.xml"; chmod 000 "$TMP/unreadable.xml"

for cmd in topology slices; do
  expect_error "$cmd missing file" "/nonexistent.xml" -- $cmd --topology /nonexistent.xml
  expect_error "$cmd malformed xml" "$TMP/bad.xml" -- $cmd --topology "$TMP/bad.xml"
  expect_error "$cmd junk xml" "$TMP/junk.xml" -- $cmd --topology "$TMP/junk.xml"
  expect_error "$cmd empty xml" "$TMP/empty.xml" -- $cmd --topology "$TMP/empty.xml"
  if [ "$(id -u)" != 0 ]; then
    expect_error "$cmd unreadable xml" "$TMP/unreadable.xml" -- $cmd --topology "$TMP/unreadable.xml"
  fi
  expect_error "$cmd reserved CPUs that do not exist" "reserved CPUs \`16-17\` do not exist" -- \
    $cmd --topology "$X" --reserved-cpus 0,16-17
  expect_error "$cmd reserved CPU list syntax" "invalid CPU list" -- $cmd --topology "$X" --reserved-cpus 0-
  expect_error "$cmd isolated CPUs that do not exist" "isolated CPUs \`99\`" -- $cmd --topology "$X" --isolated-cpus 99
  expect_error "$cmd reserved memory on a missing node" "NUMA node 9" -- \
    $cmd --topology "$X" --reserved-memory 9:memory=1Gi
  expect_error "$cmd reserved memory too large" "exceeds its memory" -- \
    $cmd --topology "$X" --reserved-memory 0:memory=1Ti
  expect_error "$cmd reserved hugepages absent" "hugepages-1Gi" -- \
    $cmd --topology "$X" --reserved-memory 0:hugepages-1Gi=1Gi
  expect_error "$cmd bad node name" "Bad_Name" -- $cmd --topology "$X" --node-name Bad_Name
  expect_error "$cmd unknown option" "--frobnicate" -- $cmd --topology "$X" --frobnicate
  expect_error "$cmd bad cpu mode" "unknown CPU device mode" -- $cmd --topology "$X" --cpu-mode fast
  expect_error "$cmd bad gate" "unknown feature gate" -- $cmd --topology "$X" --feature-gates Foo=true
  for v in 2.0 1.35 1.37x 37; do
    expect_error "$cmd bad Kubernetes version $v" "Kubernetes version \`$v\`" -- \
      $cmd --topology "$X" --kubernetes-version "$v"
  done
  echo '{"kubernetesVersion": 1.37}' >"$TMP/kv.json"
  expect_error "$cmd config Kubernetes version not a string" "kubernetesVersion" -- \
    $cmd --topology "$X" --config "$TMP/kv.json"
  # Options that could never act (a request lies on one NUMA node) are refused by name.
  expect_error "$cmd cpu option across numa" "CPU option \`distribute-cpus-across-numa\` is not supported" -- \
    $cmd --topology "$X" --cpu-options full-pcpus-only,distribute-cpus-across-numa
  echo '{"cpu": {"options": ["align-by-socket"]}}' >"$TMP/socket.json"
  expect_error "$cmd config cpu option by socket" "CPU option \`align-by-socket\` is not supported" -- \
    $cmd --topology "$X" --config "$TMP/socket.json"

  echo '{"reservedCPUs": "0", "colour": "blue"}' >"$TMP/unknown.json"
  expect_error "$cmd config unknown key" "unknown key \`colour\`" -- $cmd --topology "$X" --config "$TMP/unknown.json"
  echo '{"reservedCPUs": 0}' >"$TMP/type.json"
  expect_error "$cmd config wrong type" "must be a CPU list string, not an integer" -- \
    $cmd --topology "$X" --config "$TMP/type.json"
  echo '{"cpu": {"mode": 1}}' >"$TMP/type2.json"
  expect_error "$cmd config nested wrong type" "cpu.mode" -- $cmd --topology "$X" --config "$TMP/type2.json"
  echo '{"reservedCPUs": ' >"$TMP/broken.json"
  expect_error "$cmd config not json" "$TMP/broken.json" -- $cmd --topology "$X" --config "$TMP/broken.json"
  expect_error "$cmd config missing" "/nonexistent.json" -- $cmd --topology "$X" --config /nonexistent.json
done
expect_error "unknown command" "unknown command" -- frobnicate
expect_error "--json on slices" "--json" -- slices --topology "$X" --json

# Flags override the config file wherever they stand.
echo '{"nodeName": "from-config", "reservedCPUs": "0-3"}' >"$TMP/good.json"
"$NRM" slices --node-name from-flag --config "$TMP/good.json" --topology "$X" >"$TMP/out" 2>"$TMP/err" || fail "good config: $(cat "$TMP/err")"
grep -q '"nodeName": "from-flag"' "$TMP/out" && ok || fail "flag did not override the config"
# 16amd64-8n2c has two CPUs per node: reserving 0-3 leaves nodes 0 and 1
# without a CPU device; their memory devices remain.
if [ "$(grep -c '"name": "numa1"' "$TMP/out")" != 1 ] || [ "$(grep -c '"name": "numa2"' "$TMP/out")" != 2 ]; then
  fail "reserved CPUs from the config file were not applied"
else ok; fi
# --reserved-memory replaces the file's reservations: the file's 1Ti would fail.
echo '{"reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Ti"}}]}' >"$TMP/mem.json"
"$NRM" slices --config "$TMP/mem.json" --reserved-memory 0:memory=1Mi --topology "$X" >"$TMP/out" 2>"$TMP/err" \
  && ok || fail "--reserved-memory did not replace the config file's list: $(cat "$TMP/err")"

# Node names are DNS subdomains: long labels are fine, slice names stay valid.
long=node-$(printf 'a%.0s' $(seq 1 80)).example.com
"$NRM" slices --node-name "$long" --topology "$X" >"$TMP/out" 2>"$TMP/err" && ok \
  || fail "a long node name: $(cat "$TMP/err")"
# The kubelet's static CPU and Memory Managers would fight nrm for the same
# cpusets: the plugin refuses to start beside them and says what to change.
mkdir -p "$TMP/kubelet"
echo '{"policyName":"static","defaultCpuSet":"0-3","checksum":1}' >"$TMP/kubelet/cpu_manager_state"
expect_error "static CPU Manager" "cpuManagerPolicy: none" -- plugin --topology "$X" --kubelet-dir "$TMP/kubelet" \
  --claims-dir "$TMP" --state-dir "$TMP/st" --cdi-dir "$TMP/cdi"
echo '{"policyName":"none","defaultCpuSet":"","checksum":1}' >"$TMP/kubelet/cpu_manager_state"
echo '{"policyName":"Static","machineState":{},"checksum":1}' >"$TMP/kubelet/memory_manager_state"
expect_error "static Memory Manager" "memoryManagerPolicy: None" -- plugin --topology "$X" --kubelet-dir "$TMP/kubelet" \
  --claims-dir "$TMP" --state-dir "$TMP/st" --cdi-dir "$TMP/cdi"
# The kubelet's config file (kubeletConfig; <kubelet-dir>/config.yaml by
# default): a static policy there is refused even before the kubelet wrote
# its state file, and reserved CPUs or memory other than nrm's are refused,
# naming both values and the file; where nrm sets none they are adopted.
mkdir -p "$TMP/kc"
KC="$TMP/kc/config.yaml"
P="plugin --topology $X --kubelet-dir $TMP/kc --claims-dir $TMP --state-dir $TMP/st --cdi-dir $TMP/cdi"
printf 'kind: KubeletConfiguration\ncpuManagerPolicy: static\n' >"$KC"
expect_error "static CPU Manager in the kubelet config" "the kubelet's configuration \`$KC\` sets cpuManagerPolicy: static: set cpuManagerPolicy: none there" -- $P
printf 'memoryManagerPolicy: Static\n' >"$KC"
expect_error "static Memory Manager in the kubelet config" "sets memoryManagerPolicy: Static" -- $P
printf 'reservedSystemCPUs: "0-1"\ncpuManagerPolicy: none\n' >"$KC"
expect_error "reserved CPUs that differ" "plugin: the kubelet reserves CPUs 0-1 (reservedSystemCPUs in \`$KC\`) but nrm reserves 0 (flag)" -- $P --reserved-cpus 0
printf 'reservedCPUs: ""\n' >"$TMP/kc/nrm.yaml"
expect_error "reserved CPUs none and some" "but nrm reserves none (top level)" -- $P -c "$TMP/kc/nrm.yaml"
printf 'reservedSystemCPUs: 0\n' >"$KC"
expect_error "an unquoted CPU list" "the kubelet reserves CPUs 0 (" -- $P --reserved-cpus 1
printf 'reservedMemory:\n- numaNode: 0\n  limits: {memory: 1Gi}\n' >"$KC"
expect_error "reserved memory that differs" "the kubelet reserves memory 0:memory=1073741824 (reservedMemory in \`$KC\`) but nrm reserves 0:memory=536870912 (flag)" -- $P --reserved-memory 0:memory=512Mi
printf 'reservedSystemCPUs: [0]\n' >"$KC"
expect_error "a kubelet config of the wrong shape" "reservedSystemCPUs must be a CPU list" -- $P
printf 'kubeletConfig: %s\n' "$TMP/kc/none.yaml" >"$TMP/kc/nrm.yaml"
expect_error "a kubeletConfig that is missing" "$TMP/kc/none.yaml" -- $P -c "$TMP/kc/nrm.yaml"
# Adopted, and shown with where they came from; the same memory written
# another way is no difference.
printf 'reservedSystemCPUs: "0-1"\nreservedMemory:\n- numaNode: 0\n  limits: {memory: 1073741824}\n' >"$KC"
mkdir -p "$TMP/kst"
"$NRM" status --json -t "$X" --kubelet-dir "$TMP/kc" --state-dir "$TMP/kst" --reserved-memory 0:memory=1Gi >"$TMP/out" 2>"$TMP/err"
python3 - "$TMP/out" "$KC" <<'PY' && ok || fail "kubelet settings not adopted: $(cat "$TMP/out" "$TMP/err")"
import json, sys
st = json.load(open(sys.argv[1]))
v = st["settings"]["values"]
assert st["cpus"]["reserved"] == "0-1", st["cpus"]
assert v["reservedCPUs"]["from"] == "kubelet `%s`" % sys.argv[2], v
assert v["reservedMemory"] == {"value": "0:memory=1073741824", "from": "flag"}, v
PY
mkdir -p "$TMP/st"
expect_error "unreadable kubeconfig" "/nonexistent/kubeconfig" -- plugin --topology "$X" --kubeconfig /nonexistent/kubeconfig \
  --kubelet-dir "$TMP/k2" --state-dir "$TMP/st" --cdi-dir "$TMP/cdi"
expect_error "kubeconfig flag outside plugin" "is an option of \`nrm plugin\`" -- slices --kubeconfig /x
expect_error "bad --api-burst" "--api-burst" -- plugin --api-burst 0 --claims-dir "$TMP"
# Every setting is checked before anything is made: no socket, no folder.
mkdir -p "$TMP/st3"
expect_error "bad --http-address" "HTTP address \`nonsense\` is not HOST:PORT" -- plugin --topology "$X" \
  --http-address nonsense --kubelet-dir "$TMP/k3" --claims-dir "$TMP" --state-dir "$TMP/st3" --cdi-dir "$TMP/cdi3"
expect_error "bad --http-address port" "bad port" -- plugin --topology "$X" --http-address 127.0.0.1:70000 \
  --kubelet-dir "$TMP/k3" --claims-dir "$TMP" --state-dir "$TMP/st3" --cdi-dir "$TMP/cdi3"
[ -e "$TMP/k3" ] || [ -e "$TMP/cdi3" ] && fail "a bad --http-address left $(ls -d "$TMP"/k3 "$TMP"/cdi3 2>/dev/null)" || ok
grep -q "serving" "$TMP/err" && fail "a bad --http-address logged serving: $(cat "$TMP/err")" || ok
# A port in use is found as early: the HTTP socket is bound before the rest.
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$TMP/port" &
holder=$!
for _ in $(seq 50); do [ -s "$TMP/port" ] && break; sleep 0.1; done
expect_error "HTTP port in use" "cannot serve HTTP on \`127.0.0.1:$(cat "$TMP/port")\`: Address already in use" -- plugin \
  --topology "$X" --http-address "127.0.0.1:$(cat "$TMP/port")" --kubelet-dir "$TMP/k4" --claims-dir "$TMP" \
  --state-dir "$TMP/st3" --cdi-dir "$TMP/cdi4"
kill "$holder" 2>/dev/null || true
[ -e "$TMP/k4" ] || [ -e "$TMP/cdi4" ] && fail "an --http-address in use left $(ls -d "$TMP"/k4 "$TMP"/cdi4 2>/dev/null)" || ok
# A state directory that does not exist is refused (a typo would split the
# bookkeeping), unless --create-state-dir asks for it.
expect_error "missing --state-dir" "the state directory \`$TMP/typo/dir\` does not exist" -- plugin --topology "$X" \
  --kubelet-dir "$TMP/k4" --claims-dir "$TMP" --state-dir "$TMP/typo/dir" --cdi-dir "$TMP/cdi4"
[ -e "$TMP/typo" ] || [ -e "$TMP/k4" ] && fail "a refused --state-dir was created, or sockets made" || ok
expect_error "missing --state-dir of run" "--create-state-dir" -- run --cpus 1 --state-dir "$TMP/typo/dir" -- true
[ -e "$TMP/typo" ] && fail "nrm run created a missing --state-dir" || ok
: >"$TMP/afile"
expect_error "--state-dir a file" "is not a directory" -- run --cpus 1 --state-dir "$TMP/afile" -- true
expect_error "--create-state-dir outside plugin and run" "is an option of \`nrm plugin\` and \`nrm run\`" -- \
  status --create-state-dir
echo '{"createStateDir": "yes"}' >"$TMP/csd.json"
expect_error "createStateDir not a boolean" "createStateDir" -- run -c "$TMP/csd.json" --cpus 1 -- true
# Where containers are bound (this host, or an --fsroot tree), cgroup v2
# needs its cpuset controller, or the plugin refuses to serve.
mkdir -p "$TMP/v1/sys/fs/cgroup" "$TMP/hybrid/sys/fs/cgroup"
echo "cpu io memory pids" >"$TMP/hybrid/sys/fs/cgroup/cgroup.controllers"
expect_error "no cgroup v2" "no cgroup v2 at $TMP/v1/sys/fs/cgroup" -- plugin --topology "$X" --fsroot "$TMP/v1" \
  --kubelet-dir "$TMP/k5" --claims-dir "$TMP" --state-dir "$TMP/st3" --cdi-dir "$TMP/cdi5"
grep -qF -- "--allow-no-cpuset" "$TMP/err" && ok || fail "the refusal does not name --allow-no-cpuset: $(cat "$TMP/err")"
expect_error "cgroup v2 without cpuset" "has no cpuset controller" -- plugin --topology "$X" --fsroot "$TMP/hybrid" \
  --kubelet-dir "$TMP/k5" --claims-dir "$TMP" --state-dir "$TMP/st3" --cdi-dir "$TMP/cdi5"
[ -e "$TMP/k5" ] && fail "a refused plugin made its sockets" || ok
expect_error "--allow-no-cpuset outside plugin" "is an option of \`nrm plugin\`" -- run --allow-no-cpuset --cpus 1 -- true
# Drivers: an unknown one, an empty list entry, two enabled drivers under
# one name (nothing is printed, nothing crashes), an option of other commands.
expect_error "unknown driver" "unknown driver \`gpu\` (known: cpu, memory" -- slices --topology "$X" --drivers cpu,gpu
expect_error "empty driver list entry" "has an empty entry" -- slices --topology "$X" --drivers cpu,
printf '{"cpu":{"driverName":"memory.nrm.io"}}' >"$TMP/dup.json"
expect_error "two drivers under one name" "need different names (both are \`memory.nrm.io\`)" -- \
  slices --topology "$X" -c "$TMP/dup.json"
expect_error "a controller option elsewhere" "is an option of \`nrm controller\`" -- slices --lease-namespace x
expect_error "a plugin option in topology" "\`--device-metadata\` is an option of \`nrm plugin\`" -- topology --device-metadata
finish
