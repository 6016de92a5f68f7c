# Shared by the command-line tests. NRM and NRM_TOPOLOGIES come from make check.
set -u
: "${NRM:?run through make check}"
: "${NRM_TOPOLOGIES:?run through make check}"
TMP=$(mktemp -d /tmp/nrm-cli.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
failures=0
checks=0

fail () { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok () { checks=$((checks + 1)); }

# expect_error DESCRIPTION NEEDLE -- nrm ARGS...: non-zero exit, the needle on
# stderr, nothing on stdout.
expect_error () {
  desc=$1; needle=$2; shift 3
  "$NRM" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" -eq 0 ]; then fail "$desc: exit 0"; return; fi
  if [ -s "$TMP/out" ]; then fail "$desc: wrote to stdout"; return; fi
  if ! grep -qF -- "$needle" "$TMP/err"; then fail "$desc: stderr lacks '$needle': $(cat "$TMP/err")"; return; fi
  ok
}

finish () {
  echo "$checks passed, $failures failed"
  [ "$failures" -eq 0 ]
}
