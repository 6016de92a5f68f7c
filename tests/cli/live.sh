#!/bin/sh
# A scan of the machine the tests run on.
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"
if ! "$NRM" topology >"$TMP/s" 2>"$TMP/err"; then
  if grep -q "cannot load topology" "$TMP/err"; then
    echo "SKIP: hwloc cannot scan this machine: $(cat "$TMP/err")"; exit 77
  fi
  fail "live topology: $(cat "$TMP/err")"
fi
online=$(cat /sys/devices/system/cpu/online 2>/dev/null)
grep -q "^CPUs: online $online;" "$TMP/s" && ok || fail "live topology does not show online CPUs $online: $(head -2 "$TMP/s")"
"$NRM" topology --json >"$TMP/j" 2>"$TMP/err" && ok || fail "live topology --json: $(cat "$TMP/err")"
"$NRM" slices --node-name live-node >"$TMP/l" 2>"$TMP/err" && ok || fail "live slices: $(cat "$TMP/err")"
grep -q '"nodeName": "live-node"' "$TMP/l" && ok || fail "live slices lack the node name"
# isolated CPUs come from sysfs through the fsroot prefix
mkdir -p "$TMP/root/sys/devices/system/cpu"
echo 0 >"$TMP/root/sys/devices/system/cpu/isolated"
"$NRM" topology --fsroot "$TMP/root" >"$TMP/s" 2>"$TMP/err" && grep -q "isolated 0$" "$TMP/s" && ok \
  || fail "isolated CPUs not read through --fsroot: $(grep '^CPUs' "$TMP/s") $(cat "$TMP/err")"
echo 'x' >"$TMP/root/sys/devices/system/cpu/isolated"
expect_error "bad isolated file" "$TMP/root/sys/devices/system/cpu/isolated" -- topology --fsroot "$TMP/root"
finish
