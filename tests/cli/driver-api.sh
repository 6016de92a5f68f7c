#!/bin/sh
# The driver API as a driver outside the tree sees it: the public headers
# (what make install puts under include/nrm) compile on their own, the
# example driver builds from them alone and nrm loads it, and nrm and
# nrm-agent export every function those headers declare.
. "$(dirname "$0")/lib.sh"
: "${NRM_SRCDIR:?run through make check}"
: "${NRM_PUBLIC_HEADERS:?run through make check}"
: "${CC:?run through make check}"
X="$NRM_TOPOLOGIES/24em64t-2n6c2t-pci.xml"
inc="$TMP/include/nrm"
cflags="-Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Werror -I$inc ${NRM_DRIVER_DEPS_CFLAGS:-}"

# Only the public headers, where make install puts them.
for h in $NRM_PUBLIC_HEADERS; do
  mkdir -p "$inc/$(dirname "$h")" && cp "$NRM_SRCDIR/$h" "$inc/$h" || fail "cannot stage $h"
done
for h in $NRM_PUBLIC_HEADERS; do
  printf '#include "%s"\n' "$h" >"$TMP/one.c"
  $CC $cflags -fsyntax-only "$TMP/one.c" 2>"$TMP/err" && ok || fail "$h does not compile on its own: $(cat "$TMP/err")"
done

# No built-in driver's settings: each driver gets its own in nrm_driver_host.settings.
for h in $NRM_PUBLIC_HEADERS; do
  grep -nE 'cpu_mode|cpu_options|min_shared_cpus|cpu_partition|memory_granularity' "$NRM_SRCDIR/$h" >"$TMP/err" \
    && fail "$h carries a built-in driver's settings: $(cat "$TMP/err")" || ok
done

# The example, built as outside the tree, then loaded by nrm.
mkdir "$TMP/drivers"
# shellcheck disable=SC2086
if $CC $cflags -shared -fPIC -o "$TMP/drivers/nrm-driver-example.so" "$NRM_SRCDIR/driver/example/example.c" \
     ${NRM_DRIVER_DEPS_LIBS:-} 2>"$TMP/err"; then
  ok
  "$NRM" slices --topology "$X" --drivers example --driver-dir "$TMP/drivers" >"$TMP/out" 2>"$TMP/err" \
    && ok || fail "nrm slices with the example built from the public headers: $(cat "$TMP/err")"
  grep -q '"driver": "example.nrm.io"' "$TMP/out" && ok || fail "no example.nrm.io slice"
else
  fail "the example does not build from the public headers alone: $(cat "$TMP/err")"
fi

# Every function of the public headers, exported by both executables.
names=$(for h in $NRM_PUBLIC_HEADERS; do grep -o 'nrm_[a-z0-9_]* (' "$NRM_SRCDIR/$h"; done | sed 's/ ($//' | LC_ALL=C sort -u)
[ "$(echo "$names" | wc -l)" -gt 30 ] && ok || fail "too few functions found in the public headers: $names"
echo "$names" >"$TMP/names"
nm=${NM:-nm}
if command -v "$nm" >/dev/null 2>&1; then
  for exe in "$NRM" "$NRM-agent"; do
    "$nm" -D --defined-only "$exe" | awk '{ print $NF }' | sed 's/@.*//' | LC_ALL=C sort -u >"$TMP/exported"
    missing=$(LC_ALL=C comm -23 "$TMP/names" "$TMP/exported" | tr '\n' ' ')
    [ -z "$missing" ] && ok || fail "$(basename "$exe") does not export: $missing"
    # ...and nothing else of nrm: internals stay internal.
    extra=$(grep '^nrm_' "$TMP/exported" | LC_ALL=C comm -23 - "$TMP/names" | tr '\n' ' ')
    [ -z "$extra" ] && ok || fail "$(basename "$exe") exports more than the public headers: $extra"
  done
else
  echo "SKIP: no $nm: the exported symbols are not checked"
fi
finish
