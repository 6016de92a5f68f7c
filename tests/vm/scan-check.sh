#!/bin/sh
# Checks what scan-guest.sh printed in an emulated NUMA machine (a test of
# vmtest.sh --check: scan-2.vm, scan-4.vm): from the guest's output only, the
# NUMA nodes, their CPUs, the cores' threads, the distance matrix given to
# qemu, and the ResourceSlices.
#
#   scan-check.sh OUTPUT   with VMTEST_NODES, VMTEST_CPUS, VMTEST_THREADS,
#                          VMTEST_SOCKETS and VMTEST_DISTANCES as the VM had
# Exit 0: passed, 1: failed.
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
out=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nrm-vmscan.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
. "$here/check-lib.sh"
. "$here/json.sh"

# count_cpus LIST: the number of CPUs in a cpulist like 0-3,8,10-11.
count_cpus () {
  echo "$1" | tr ',' '\n' | awk -F- 'NF == 2 { n += $2 - $1 + 1; next } NF == 1 && $1 != "" { n++ } END { print n + 0 }'
}

nodes=$VMTEST_NODES sockets=${VMTEST_SOCKETS:-$VMTEST_NODES} dists=$VMTEST_DISTANCES
cpus=$VMTEST_CPUS threads=$VMTEST_THREADS name=numa$nodes
per_node=$((cpus / nodes))
echo "--- $name: $nodes NUMA nodes, $cpus CPUs, $threads threads per core, $sockets sockets"
awk '/^@@ topology$/ { f = 1; next } /^@@ / { f = 0 } f' "$out" >"$TMP/$name.topo.json"
awk '/^@@ slices$/ { f = 1; next } /^@@ / { f = 0 } f' "$out" >"$TMP/$name.slices.json"
check "$name: nrm topology --json exit status" "@@ rc 0" "$(grep '^@@ rc' "$out" | sed -n 1p)"
check "$name: nrm slices exit status" "@@ rc 0" "$(grep '^@@ rc' "$out" | sed -n 2p)"
if ! flatten <"$TMP/$name.topo.json" >"$TMP/t" 2>"$TMP/e" || ! flatten <"$TMP/$name.slices.json" >"$TMP/s" 2>>"$TMP/e"; then
  fail "$name: the output is not JSON: $(head -c 300 "$TMP/e")"; echo "$passed passed, $failed failed"; exit 1
fi

# The topology.
check "$name: online CPUs" "0-$((cpus - 1))" "$(get cpus.online "$TMP/t")"
check "$name: source" live "$(get source "$TMP/t")"
check "$name: NUMA nodes" "$nodes" "$(get 'numaNodes#' "$TMP/t")"
check "$name: distances from the OS" true "$(get distancesFromOS "$TMP/t")"
check "$name: packages" "$sockets" "$(get 'packages#' "$TMP/t")"
bad='' k=0
while [ "$k" -lt "$nodes" ]; do
  list=$(get "numaNodes.$k.cpus" "$TMP/t")
  [ "$(get "numaNodes.$k.id" "$TMP/t")" = "$k" ] || bad="$bad node$k:id=$(get "numaNodes.$k.id" "$TMP/t")"
  [ "$(count_cpus "$list")" = "$per_node" ] || bad="$bad node$k:cpus=$list"
  pkg=$(get "numaNodes.$k.package" "$TMP/t")
  [ "$pkg" = $((k * sockets / nodes)) ] || bad="$bad node$k:package=$pkg"
  k=$((k + 1))
done
[ -z "$bad" ] && pass "$name: every node has $per_node CPUs, node k in package k*$sockets/$nodes" \
  || fail "$name: nodes:$bad"
ncores=$(get 'cores#' "$TMP/t")
check "$name: cores" $((cpus / threads)) "$ncores"
bad='' c=0
while [ "$c" -lt "${ncores:-0}" ]; do
  list=$(get "cores.$c.cpus" "$TMP/t")
  [ "$(count_cpus "$list")" = "$threads" ] || bad="$bad core$c:$list"
  c=$((c + 1))
done
[ -z "$bad" ] && pass "$name: every core has $threads CPUs (threads per core $threads)" || fail "$name: cores:$bad"
want='' got='' i=0
for d in $(echo "$dists" | tr ',' ' '); do want="$want $d"; done
while [ "$i" -lt "$nodes" ]; do
  j=0
  while [ "$j" -lt "$nodes" ]; do got="$got $(get "numaNodes.$i.distances.$j" "$TMP/t")"; j=$((j + 1)); done
  i=$((i + 1))
done
check "$name: distance matrix" "${want# }" "${got# }"

# The ResourceSlices: one row per device, "driver node capacity hugeTLB threadsPerCore nodeName".
awk '
  { k = $0; sub(/=.*/, "", k); v = substr($0, length(k) + 2); split(k, a, ".") }
  k ~ /^items\.[0-9]+\.spec\.driver$/ { drv[a[2]] = v }
  k ~ /^items\.[0-9]+\.spec\.nodeName$/ { nn[a[2]] = v }
  k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.name$/ { ids[a[2] "." a[5]] = 1 }
  k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.numaNode\.int$/ { node[a[2] "." a[5]] = v }
  k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.capacity\.[a-z0-9-]+\.value$/ { cap[a[2] "." a[5]] = v }
  k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.hugeTLB\.bool$/ { huge[a[2] "." a[5]] = v }
  k ~ /^items\.[0-9]+\.spec\.devices\.[0-9]+\.attributes\.threadsPerCore\.int$/ { tpc[a[2] "." a[5]] = v }
  END {
    for (id in ids) {
      split(id, b, ".")
      print drv[b[1]], (id in node ? node[id] : "-"), (id in cap ? cap[id] : "-"),
        (id in huge ? huge[id] : "-"), (id in tpc ? tpc[id] : "-"), nn[b[1]]
    }
  }' "$TMP/s" | sort >"$TMP/devices"
check "$name: CPU devices" "$nodes" "$(grep -c '^cpu\.nrm\.io ' "$TMP/devices")"
check "$name: memory devices (not huge pages)" "$nodes" "$(grep -c '^memory\.nrm\.io [^ ]* [^ ]* false ' "$TMP/devices")"
bad='' k=0
while [ "$k" -lt "$nodes" ]; do
  row=$(grep "^cpu\.nrm\.io $k " "$TMP/devices")
  [ "$row" = "cpu.nrm.io $k $per_node - $threads vm-test" ] || bad="$bad node$k:[$row]"
  [ "$(grep -c "^memory\.nrm\.io $k [^ ]* false - vm-test$" "$TMP/devices")" = 1 ] || bad="$bad node$k:no memory device"
  k=$((k + 1))
done
[ -z "$bad" ] && pass "$name: one CPU device per node of capacity $per_node CPUs, threadsPerCore $threads, and one memory device per node" \
  || fail "$name: devices:$bad"
finish
