#!/bin/sh
# nrm run --pid: a running process moved onto a run's CPUs, held until it
# exits. On this host's fallback path (no cgroup v2 cpuset: every thread's
# sched_setaffinity); the cgroup v2 path is in tests/vm/commit-guest.sh.
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) || { echo "SKIP: needs python3"; exit 77; }
ncpu=$(getconf _NPROCESSORS_ONLN)
[ "$ncpu" -ge 2 ] || { echo "SKIP: needs 2 CPUs (one to take, one left shared)"; exit 77; }
if grep -q cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo "SKIP: a cgroup v2 cpuset host: nrm run --pid moves the process into nrm.slice (tests/vm/commit-guest.sh)"
  exit 77
fi
S="$TMP/state"
RUN="$NRM run --state-dir $S --create-state-dir --min-shared-cpus 0"
pids=""
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT

# A process of N threads (the main one sleeping, N-1 started before the
# attach); SIGUSR1 starts one more. Its pid in $p.
threads () {
  "$PY" -c '
import os, signal, sys, threading, time
n = int(sys.argv[1])
if len(sys.argv) > 2:
    os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
def more(*_):
    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
for _ in range(n - 1):
    more()
signal.signal(signal.SIGUSR1, more)
while True:
    time.sleep(1)' "$@" &
  p=$!
  pids="$pids $p"
  for _ in $(seq 100); do [ "$(ls /proc/$p/task 2>/dev/null | wc -l)" -ge "$1" ] && break; sleep 0.05; done
}
# Each thread's Cpus_allowed_list, one a line, sorted and unique.
allowed () { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/"$1"/task/*/status 2>/dev/null | sort -u; }
wait_for () { for _ in $(seq 100); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# Attach with --cpus 1: every thread on the one CPU taken; nrm status shows
# the run; a thread started afterwards inherits it; the process's exit ends
# nrm run (0) and releases the CPU.
threads 3
before=$(allowed $p)
$RUN --pid $p --cpus 1 2>"$TMP/err" &
r=$!
wait_for "held until it exits" "$TMP/err" && ok || fail "attach did not start: $(cat "$TMP/err")"
got=$(allowed $p)
case $got in *,* | *-* | *"
"*) fail "more than one CPU allowed after attach: $got" ;; "") fail "no Cpus_allowed_list" ;; *) ok ;; esac
[ "$(ls /proc/$p/task | wc -l)" = 3 ] && grep -q "process $p ($(cat /proc/$p/comm)): 3 threads moved onto CPUs $got" "$TMP/err" && ok \
  || fail "the log does not say the 3 threads moved: $(cat "$TMP/err")"
grep -q "memory policy for future allocations stays its own" "$TMP/err" && ok || fail "the log does not say what is not done"
"$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
grep -q "^  nrm-run/run-$r-[0-9]*-pid-$p .*CPUs $got" "$TMP/out" && ok || fail "status does not show the attached run: $(cat "$TMP/out")"
grep -q "\"attachedPid\":$p," "$S"/runs/*.json && ok || fail "the run record does not name process $p"
kill -USR1 $p
for _ in $(seq 100); do [ "$(ls /proc/$p/task | wc -l)" = 4 ] && break; sleep 0.05; done
[ "$(ls /proc/$p/task | wc -l)" = 4 ] && [ "$(allowed $p)" = "$got" ] && ok \
  || fail "a thread started after the attach is not on CPU $got: $(allowed $p)"
kill $p
wait $r
rc=$?
[ $rc = 0 ] && ok || fail "nrm run --pid exited $rc when the process ended"
grep -q "process $p exited: its claim is released" "$TMP/err" && ok || fail "no release said: $(cat "$TMP/err")"
"$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
grep -q "^claims: 0" "$TMP/out" && [ -z "$(ls "$S/runs" 2>/dev/null)" ] && ok \
  || fail "the attached run is still held after its process exited: $(cat "$TMP/out")"
[ "$before" != "$got" ] && ok || fail "the affinity did not change ($before)"

# -C LIST, and SIGTERM of nrm run: the process is put back on each thread's
# old CPUs (here the last CPU only), the claim released, 128 + 15.
last=$((ncpu - 1))
threads 3 "$last"
$RUN --pid $p -C 0 2>"$TMP/err" &
r=$!
wait_for "held until it exits" "$TMP/err" || fail "attach -C 0: $(cat "$TMP/err")"
[ "$(allowed $p)" = 0 ] && ok || fail "-C 0 gave $(allowed $p)"
kill -TERM $r
wait $r
rc=$?
[ $rc = 143 ] && ok || fail "SIGTERM of nrm run --pid exited $rc, not 143"
[ "$(allowed $p)" = "$last" ] && ok || fail "the process was not put back on CPU $last: $(allowed $p)"
grep -q "process $p put back on its old CPUs" "$TMP/err" && ok || fail "no put back said: $(cat "$TMP/err")"
"$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
grep -q "^claims: 0" "$TMP/out" && ok || fail "SIGTERM left the claim: $(cat "$TMP/out")"

# --dry-run --pid: what would be taken, for that process; nothing taken,
# nothing moved.
$RUN --dry-run --pid $p --cpus 1 >"$TMP/out" 2>"$TMP/err" || fail "dry run --pid: $(cat "$TMP/err")"
grep -q "^would take CPUs [0-9]* (1) for process $p ($(cat /proc/$p/comm), 3 threads)$" "$TMP/out" && grep -q "nothing was taken" "$TMP/out" \
  && [ "$(allowed $p)" = "$last" ] && [ -z "$(ls "$S/runs" 2>/dev/null)" ] && ok \
  || fail "dry run --pid: $(cat "$TMP/out") $(allowed $p)"
$RUN --dry-run --json --pid $p --cpus 1 >"$TMP/out" 2>&1
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["attach"]; assert a=={"pid":int(sys.argv[2]),"command":sys.argv[3],"threads":3}, a' \
  "$TMP/out" $p "$(cat /proc/$p/comm)" && ok || fail "dry run --json --pid: $(cat "$TMP/out")"

# kill -9 of nrm run: nothing is left to put the process back, and the next
# run releases the claim.
$RUN --pid $p --cpus 1 2>"$TMP/err" &
r=$!
wait_for "held until it exits" "$TMP/err" || fail "attach: $(cat "$TMP/err")"
kill -9 $r
wait $r 2>/dev/null
$RUN --cpus 1 -- true 2>"$TMP/err" || fail "run after a killed attach: $(cat "$TMP/err")"
grep -q "its nrm process is gone" "$TMP/err" && ok || fail "the killed attach's claim was not released: $(cat "$TMP/err")"
# The process gone while nrm run cannot act (stopped): the record names it,
# so the next run releases the claim.
$RUN --pid $p --cpus 1 2>"$TMP/err" &
r=$!
wait_for "held until it exits" "$TMP/err" || fail "attach: $(cat "$TMP/err")"
kill -STOP $r
kill $p
wait $p 2>/dev/null
$RUN --cpus 1 -- true 2>"$TMP/err2" || fail "run beside a stopped attach: $(cat "$TMP/err2")"
grep -q "the process it was attached to is gone" "$TMP/err2" && ok || fail "a gone attached process kept its claim: $(cat "$TMP/err2")"
kill -CONT $r
wait $r
rc=$?
[ $rc = 0 ] && ok || fail "the resumed nrm run --pid exited $rc: $(cat "$TMP/err")"
"$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
grep -q "^claims: 0" "$TMP/out" && [ -z "$(ls "$S/runs" 2>/dev/null)" ] && ok || fail "held after both: $(cat "$TMP/out")"

# Refusals: 125, naming the pid, nothing taken. Through timeout(1): an
# attach that should have been refused would otherwise hold until its
# process exits (and SIGTERM puts that process back).
REAL=$NRM
printf '#!/bin/sh\nexec timeout 20 "%s" "$@"\n' "$REAL" >"$TMP/nrm-t"
chmod +x "$TMP/nrm-t"
NRM=$TMP/nrm-t
RUN="$NRM run --state-dir $S --create-state-dir --min-shared-cpus 0"
exit_of () { "$NRM" "$@" >/dev/null 2>&1; echo $?; }
expect_error "PID 1" "--pid 1: PID 1 (init)" -- run --state-dir "$S" --pid 1 --cpus 1
[ "$(exit_of run --state-dir "$S" --pid 1 --cpus 1)" = 125 ] && ok || fail "--pid 1 is not 125"
# Its own: sh execs nrm under the same pid.
timeout 20 sh -c 'exec "$0" run --state-dir "$1" --pid $$ --cpus 1' "$REAL" "$S" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 125 ] && grep -q "that is this nrm run" "$TMP/err" && ok || fail "nrm's own pid: $rc $(cat "$TMP/err")"
true &
gone=$!
wait $gone
expect_error "no such process" "--pid $gone: no such process" -- run --state-dir "$S" --pid $gone --cpus 1
kt=$(awk '{ if (int($9 / 2097152) % 2) { print FILENAME; exit } }' /proc/[0-9]*/stat 2>/dev/null | cut -d/ -f3)
if [ -n "$kt" ]; then
  expect_error "kernel thread" "--pid $kt (" -- run --state-dir "$S" --pid "$kt" --cpus 1
  grep -q "a kernel thread" "$TMP/err" && ok || fail "kernel thread: $(cat "$TMP/err")"
fi
# A zombie: sh's child, which the sleep sh exec'd never reaps.
sh -c '/bin/true & exec sleep 5' &
zp=$!
pids="$pids $zp"
for _ in $(seq 100); do z=$(pgrep -P $zp true); [ -n "$z" ] && [ "$(cut -d' ' -f3 /proc/$z/stat 2>/dev/null)" = Z ] && break; sleep 0.05; done
if [ -n "$z" ]; then
  expect_error "zombie" "--pid $z (true): it has exited" -- run --state-dir "$S" --pid "$z" --cpus 1
fi
expect_error "bad --pid" "\`--pid\` needs a process id, not \`x\`" -- run --state-dir "$S" --pid x --cpus 1
expect_error "--pid 0" "\`--pid\` needs a process id, not \`0\`" -- run --state-dir "$S" --pid 0 --cpus 1
expect_error "--pid and a command" "give one or the other" -- run --state-dir "$S" --pid 5 --cpus 1 -- true
expect_error "--pid -t" "names a process on this machine" -- run --dry-run -t "$NRM_TOPOLOGIES/2arm-2c.xml" --pid 5 --cpus 1
expect_error "--pid --interleave" "only a process itself can set its memory policy" -- run --state-dir "$S" --pid 5 --cpus 1 -i all
expect_error "--pid elsewhere" "is an option of \`nrm run\`" -- status --pid 5
[ "$(exit_of run --state-dir "$S" --pid x --cpus 1)" = 125 ] && ok || fail "bad --pid is not 125"

# Another user's process without privilege (EPERM): refused by a dry run
# and a real one, which takes nothing.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  threads 1
  mkdir "$TMP/nobody"
  chown 65534 "$TMP/nobody"
  chmod 0711 "$TMP"
  AS="timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups"
  $AS "$REAL" run --dry-run --pid $p --cpus 1 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 125 ] && grep -q "^nrm: --pid $p ($(cat /proc/$p/comm)): not permitted to change its CPUs" "$TMP/err" && ok \
    || fail "EPERM dry run: $rc $(cat "$TMP/err")"
  $AS "$REAL" run --state-dir "$TMP/nobody" --min-shared-cpus 0 --pid $p --cpus 1 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 125 ] && grep -q "not permitted to change its CPUs" "$TMP/err" && [ -z "$(ls "$TMP/nobody/runs" 2>/dev/null)" ] \
    && ! grep -q nrm-run "$TMP/nobody"/*.json 2>/dev/null && ok || fail "EPERM run: $rc $(cat "$TMP/err")"
  chmod 0700 "$TMP"
  kill $p
fi

# A thread that cannot move (a cgroup v1 cpuset holds it to the last CPU):
# the threads moved before it are put back, nothing is taken, 125 names it.
V1=/sys/fs/cgroup/cpuset
if [ "$(id -u)" = 0 ] && [ -w "$V1/tasks" ] && mkdir "$V1/nrm-attach-test.$$" 2>/dev/null; then
  echo "$last" >"$V1/nrm-attach-test.$$/cpuset.cpus"
  cat "$V1/cpuset.mems" >"$V1/nrm-attach-test.$$/cpuset.mems"
  threads 3
  tid=$(ls /proc/$p/task | sort -n | tail -1)
  echo "$tid" >"$V1/nrm-attach-test.$$/tasks"
  before=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$p/task/$p/status)
  $RUN --pid $p -C 0 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 125 ] && grep -q "thread $tid cannot run on CPUs 0" "$TMP/err" && ok || fail "unmovable thread: $rc $(cat "$TMP/err")"
  [ "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$p/task/$p/status)" = "$before" ] && ok \
    || fail "the main thread was left moved after the attach failed"
  "$NRM" status --state-dir "$S" >"$TMP/out" 2>&1
  grep -q "^claims: 0" "$TMP/out" && ok || fail "a failed attach kept its claim: $(cat "$TMP/out")"
  echo "$tid" >"$V1/tasks"
  kill $p
  wait $p 2>/dev/null
  rmdir "$V1/nrm-attach-test.$$"
fi

finish
