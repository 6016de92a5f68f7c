# Sourced by the scripts that run inside the test VM (tests/vm/*-guest.sh,
# run by vmtest.sh): the counts of checks, the waits and the readers they
# share. POSIX sh: bash and busybox sh both run it.

pass=0 fail=0
ok () { pass=$((pass + 1)); echo "ok: $*"; }
bad () { fail=$((fail + 1)); echo "FAIL: $*"; }
# check WHAT COMMAND...: ok when COMMAND succeeds
check () { _what=$1; shift; if "$@"; then ok "$_what"; else bad "$_what"; fi; }
# same WHAT EXPECTED ACTUAL
same () { if [ "$2" = "$3" ]; then ok "$1: $2"; else bad "$1: expected '$2', got '$3'"; fi; }
# finish: the counts, and the exit status of the guest script (0: all passed)
finish () { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

# ms: the uptime in milliseconds, in MS
ms () { read -r _u _ </proc/uptime; MS=$((${_u%.*}${_u#*.} * 10)); }
# wait_for TENTHS COMMAND...: until COMMAND succeeds, up to TENTHS tenths of
# a second by the clock (a fork costs 0.1-0.2 s under emulation)
wait_for () {
  ms; _end=$((MS + $1 * 100)); shift
  while :; do "$@" && return 0; ms; [ "$MS" -lt "$_end" ] || return 1; sleep 0.1; done
}

# status_list PID FIELD: a list field of /proc/PID/status (Cpus_allowed_list, ...)
status_list () { sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status"; }
# target LINK: the last component of where LINK points, in T ('-' if none)
target () { T=-; [ -e "$1" ] && cd -P "$1" && T=${PWD##*/} && cd /; }
# attr FILE: the first line of a sysfs attribute, in A ('-' if none)
attr () { A=-; [ -r "$1" ] && read -r A <"$1" 2>/dev/null; [ -n "$A" ] || A=-; }
