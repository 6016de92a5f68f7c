#!/bin/sh
# `nrm --help` (and so the man page made from it) names every option the
# code accepts, and every command: the help cannot fall behind the code.
. "$(dirname "$0")/lib.sh"
: "${NRM_SRCDIR:?run through make check}"
"$NRM" --help >"$TMP/help" 2>&1 || fail "nrm --help failed"
options=$(sed -n "s/^  { \"\([a-z0-9A-Z-]*\)\", \(0\|'.'\),.*/\1/p" "$NRM_SRCDIR/nrm/options.c")
[ -n "$options" ] && ok || fail "no options found in nrm/options.c"
for o in $options; do
  grep -q -- "--$o\b" "$TMP/help" && ok || fail "--$o is accepted but not in nrm --help"
done
for c in topology slices plugin run status hook kubectl help version; do
  grep -q "^  $c " "$TMP/help" && ok || fail "command $c is not in nrm --help"
done
man=$(dirname "$NRM")/../nrm.1
if [ -f "$man" ]; then
  sed 's/\\-/-/g' "$man" >"$TMP/man"
  missing=""
  for o in $options; do
    grep -q -- "--$o" "$TMP/man" || missing="$missing --$o"
  done
  [ -z "$missing" ] && ok || fail "not in nrm.1:$missing (rebuild it: make nrm.1)"
fi
finish
