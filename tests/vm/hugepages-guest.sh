#!/bin/sh
# Runs inside the VM that tests/vm/hugepages.vm declares (2 nodes), under
# busybox sh. `nrm plugin` with memory.hugepagesOnDemand on claims from a
# folder (no API server: prepare raises the pool, as for a claim that did
# not bind), every assertion read back from the kernel:
#   1. node 1's 2Mi pool raised for a claim above the administrator's
#      baseline, kept across a kill -9 of the plugin, and given back to the
#      baseline at unprepare, the journal gone;
#   2. a claim node 1 cannot hold (more than its free memory) refused at
#      prepare with a message naming the node, the pool unchanged.
#   hugepages-guest.sh BUILDDIR SRCDIR
set -u
B=$1
NRM=$B/nrm/nrm HOOK=$B/nrm/nrm-hook CLIENT=$B/tests/plugin/dra-client
W=/tmp/nrm-hp
POOL=/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages
JOURNAL=$W/state/memory.nrm.io.hugepages/node1-2048kB.json
mkdir -p $W/claims $W/state $W/k $W/cdi
. "$(dirname "$0")/guest-lib.sh"
pages () { cat $POOL; }

check "node 1 has a 2Mi pool" [ -w $POOL ]
echo 2 >$POOL # the administrator's baseline
same "the baseline" 2 "$(pages)"
printf 'memory:\n  hugepagesOnDemand:\n    2Mi: 64Gi\n' >$W/nrm.yaml

start_plugin () {
  # The sockets of a plugin killed with -9 are still there: wait for the new
  # one to say it serves.
  _served=$(grep -c 'memory.nrm.io: serving' $W/plugin.log 2>/dev/null || true)
  "$NRM" plugin --node-name vm --drivers cpu,memory -c $W/nrm.yaml --kubelet-dir $W/k --cdi-dir $W/cdi \
    --state-dir $W/state --claims-dir $W/claims --hook-path "$HOOK" 2>>$W/plugin.log &
  plugin=$!
  wait_for 150 [ "$(grep -c 'memory.nrm.io: serving' $W/plugin.log 2>/dev/null)" -gt "${_served:-0}" ]
}
sock=$W/k/plugins/memory.nrm.io/dra.sock
claim () { # claim NAME UID AMOUNT
  echo "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",
 \"metadata\":{\"namespace\":\"default\",\"name\":\"$1\",\"uid\":\"$2\"},
 \"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":\"hp\",\"driver\":\"memory.nrm.io\",
 \"pool\":\"vm\",\"device\":\"numa1-hugepages-2mi\",\"consumedCapacity\":{\"hugepages\":\"$3\"}}]}}}}" \
    >$W/claims/default_$1.json
}

"$NRM" slices --node-name vm --drivers memory -c $W/nrm.yaml >$W/slices.json 2>$W/slices.err
check "nrm slices publishes numa1-hugepages-2mi with its binding condition" \
  grep -q 'memory.nrm.io/hugepages-ready' $W/slices.json

# --- 1. raised, kept across a crash, given back ------------------------------
start_plugin
uid1=00000000-0000-4000-8000-0000000000d1
claim hp $uid1 32Mi
"$CLIENT" prepare $sock default hp $uid1 >/dev/null 2>$W/err
check "prepare of 32Mi of node 1's 2Mi pages $(cat $W/err)" [ $? -eq 0 ]
same "node 1's nr_hugepages (16 pages for the claim, 2 of them the baseline's)" 16 "$(pages)"
check "the journal $JOURNAL" [ -f $JOURNAL ]
kill -9 $plugin
wait $plugin 2>/dev/null
same "after a kill -9 the pool stays" 16 "$(pages)"
start_plugin
same "after the restart the pool stays" 16 "$(pages)"
check "unprepare" "$CLIENT" unprepare $sock $uid1
same "node 1's nr_hugepages back at the baseline" 2 "$(pages)"
check "the journal is gone" [ ! -e $JOURNAL ]
rm -f $W/claims/default_hp.json

# --- 2. more than node 1 has free -----------------------------------------
# The whole published capacity (the node's memory, less what its other
# pools hold): within the device, but more than its MemFree.
cap=$(python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["items"]:
    for d in s["spec"].get("devices", []):
        if d["name"] == "numa1-hugepages-2mi":
            print(d["capacity"]["hugepages"]["value"])' $W/slices.json)
check "a capacity for numa1-hugepages-2mi ($cap)" [ -n "$cap" ]
uid2=00000000-0000-4000-8000-0000000000d2
claim big $uid2 "$cap"
"$CLIENT" prepare $sock default big $uid2 >/dev/null 2>$W/err
rc=$?
check "prepare of $cap fails, naming node 1: $(cat $W/err)" sh -c "[ $rc -ne 0 ] && grep -q 'NUMA node 1: 2Mi huge pages' $W/err"
# And past the device: refused by the capacity check, naming the device.
uid3=00000000-0000-4000-8000-0000000000d3
claim huge $uid3 32Gi
"$CLIENT" prepare $sock default huge $uid3 >/dev/null 2>$W/err
rc=$?
check "prepare of 32Gi fails, naming the device: $(cat $W/err)" \
  sh -c "[ $rc -ne 0 ] && grep -q 'numa1-hugepages-2mi: consumedCapacity' $W/err"
same "node 1's nr_hugepages unchanged" 2 "$(pages)"
check "no journal" [ ! -e $JOURNAL ]

kill $plugin
wait $plugin 2>/dev/null
echo 0 >$POOL
if [ "$fail" -ne 0 ]; then
  echo "--- plugin log"
  tail -n 40 $W/plugin.log
fi
finish
