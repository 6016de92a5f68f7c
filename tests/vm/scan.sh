#!/bin/sh
# nrm scans emulated NUMA machines in a real kernel (tests/vm/vm.sh): a 2-node
# and a 4-node VM of 8 CPUs with 2 SMT threads per core, one boot each.  From
# the guest's output only, it checks the NUMA nodes, their CPUs, the cores'
# threads, the distance matrix given to qemu, and the ResourceSlices.
# Exit 0: passed, 1: failed, 77: skipped (no qemu, kernel or modules).
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
srcdir=${NRM_SRCDIR:-$(cd "$here/../.." && pwd -P)}
VM=$here/vm.sh

# The nrm under test: $NRM, or the tree's own, built when missing.
if [ -z "${NRM:-}" ]; then
  NRM=$srcdir/nrm/nrm
  if [ ! -x "$NRM" ]; then
    echo "building $NRM"
    (cd "$srcdir" && { [ -f Makefile ] || { [ -x configure ] || ./autogen.sh; } && ./configure; } && make) >&2 \
      || { echo "FAIL: cannot build $NRM"; echo "0 passed, 1 failed"; exit 1; }
  fi
fi
case $NRM in /*) ;; *) NRM=$(pwd -P)/$NRM ;; esac
[ -x "$NRM" ] || { echo "FAIL: $NRM is not an executable"; echo "0 passed, 1 failed"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/nrm-vmscan.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
pass () { echo "ok: $*"; passed=$((passed + 1)); }
fail () { echo "FAIL: $*"; failed=$((failed + 1)); }
check () { # check DESCRIPTION EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass "$1 = $2"; else fail "$1: expected '$2', got '$3'"; fi
}

. "$here/json.sh"

# count_cpus LIST: the number of CPUs in a cpulist like 0-3,8,10-11.
count_cpus () {
  echo "$1" | tr ',' '\n' | awk -F- 'NF == 2 { n += $2 - $1 + 1; next } NF == 1 && $1 != "" { n++ } END { print n + 0 }'
}

# scan NAME NODES SOCKETS DISTANCES: boot once, run nrm twice, check.
scan () {
  name=$1 nodes=$2 sockets=$3 dists=$4 cpus=8 threads=2
  per_node=$((cpus / nodes))
  echo "--- $name: $nodes NUMA nodes, $cpus CPUs, $threads threads per core, $sockets sockets"
  # An emulated machine can, rarely, fail to boot: one more try then (124:
  # timed out, 125: the VM failed).
  for try in 1 2; do
    start=$(date +%s)
    "$VM" --nodes "$nodes" --cpus "$cpus" --threads "$threads" --sockets "$sockets" --distances "$dists" \
      --timeout "${NRM_VM_TIMEOUT:-120}" -- \
      sh -c 'echo "@@ topology"; "$0" topology --json; echo "@@ rc $?"
             echo "@@ slices"; "$0" slices --node-name vm-test; echo "@@ rc $?"' "$NRM" \
      >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
    [ "$rc" -eq 77 ] && { echo "SKIP: $(cat "$TMP/$name.err")"; exit 77; }
    echo "$name: boot, scan and poweroff took $(($(date +%s) - start)) s"
    case $rc in 124 | 125) [ "$try" = 1 ] && echo "retrying: vm.sh exited $rc: $(tail -n 3 "$TMP/$name.err")" ;; *) break ;; esac
  done
  if [ "$rc" -ne 0 ]; then
    fail "$name: the VM run exited $rc: $(tail -n 20 "$TMP/$name.err")"; return
  fi
  awk '/^@@ topology$/ { f = 1; next } /^@@ / { f = 0 } f' "$TMP/$name.out" >"$TMP/$name.topo.json"
  awk '/^@@ slices$/ { f = 1; next } /^@@ / { f = 0 } f' "$TMP/$name.out" >"$TMP/$name.slices.json"
  check "$name: nrm topology --json exit status" "@@ rc 0" "$(grep '^@@ rc' "$TMP/$name.out" | sed -n 1p)"
  check "$name: nrm slices exit status" "@@ rc 0" "$(grep '^@@ rc' "$TMP/$name.out" | sed -n 2p)"
  if ! flatten <"$TMP/$name.topo.json" >"$TMP/t" 2>"$TMP/e" || ! flatten <"$TMP/$name.slices.json" >"$TMP/s" 2>>"$TMP/e"; then
    fail "$name: the output is not JSON: $(head -c 300 "$TMP/e") $(cat "$TMP/$name.err")"; return
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
}

scan numa2 2 2 "10,20,20,10"
scan numa4 4 2 "10,12,20,22,12,10,22,20,20,22,10,12,22,20,12,10"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
