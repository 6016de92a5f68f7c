# Sourced by the host-side checks of a guest's output (scan-check.sh,
# pci-check.sh): the counts, the checks and the end. POSIX sh.
passed=0
failed=0
pass () { echo "ok: $*"; passed=$((passed + 1)); }
fail () { echo "FAIL: $*"; failed=$((failed + 1)); }
# check DESCRIPTION EXPECTED ACTUAL
check () {
  if [ "$2" = "$3" ]; then pass "$1 = $2"; else fail "$1: expected '$2', got '$3'"; fi
}
# verdict DESCRIPTION PROBLEMS: passes when PROBLEMS is empty.
verdict () { if [ -z "$2" ]; then pass "$1"; else fail "$1:$2"; fi; }
# finish: the counts, and the exit status (0: all passed)
finish () { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
