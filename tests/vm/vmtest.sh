#!/bin/bash
# The one launcher of the real-kernel tests: boots the VM of tests/vm/vm.sh
# and runs a guest script in it, as a test declares (make check runs it on
# each tests/vm/*.vm file).
#
#   vmtest.sh FILE.vm          the test FILE declares: its lines, less '#'
#                              comments, are the arguments below
#   vmtest.sh [OPTIONS] [VM.SH OPTIONS] -- GUEST [ARGS...]
#
#   --busybox        run GUEST with busybox sh (skipped without busybox)
#   --each-nodes L   boot once per value of L (a comma-separated list), as --nodes
#   --tries N        boot up to N times while the VM fails to boot or runs past
#                    its timeout (vm.sh's 125 and 124); default 1
#   --check SCRIPT   keep the guest's stdout and have SCRIPT (beside vmtest.sh,
#                    run on the host) check it: SCRIPT OUTPUT; its exit status
#                    is the test's. VMTEST_NODES, VMTEST_CPUS, VMTEST_THREADS,
#                    VMTEST_SOCKETS and VMTEST_DISTANCES hold the VM's options.
#   --timeout S      as vm.sh's; NRM_VM_TIMEOUT, when set, wins
#
# In GUEST and ARGS: @BUILD@ is the build tree (of $NRM), @SRC@ the source
# tree, @NRM@ the nrm under test, @NODES@ the boot's number of NUMA nodes; a
# GUEST without a slash is a script beside vmtest.sh. The build tree is
# shared with the guest at the same path.
#
# NRM (BUILDDIR/nrm/nrm; make check sets it) names the build under test.
# Exit 0: passed, 1: failed, 77: skipped (no qemu, kernel, busybox).
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
src=${NRM_SRCDIR:-$(cd "$here/../.." && pwd -P)}
die () { echo "vmtest.sh: $*" >&2; exit 2; }

if [ $# -eq 1 ] && [ -f "$1" ]; then
  decl=$1
  args=$(grep -v '^[[:space:]]*#' "$decl" | tr '\n' ' ')
  eval "set -- $args" || die "$decl: cannot read its arguments"
  echo "--- $decl: $*"
fi

: "${NRM:?run through make check, or give NRM=BUILDDIR/nrm/nrm}"
case $NRM in /*) ;; *) NRM=$(pwd -P)/$NRM ;; esac
build=$(cd "$(dirname "$NRM")/.." && pwd -P) || exit 1
for f in "$build/nrm/nrm" "$build/nrm/nrm-hook" "$build/tests/plugin/dra-client"; do
  [ -x "$f" ] || { echo "FAIL: $f is not built (make check builds it)"; exit 1; }
done

busybox='' each='' tries=1 check='' timeout=600 vmopts=()
VMTEST_NODES=1 VMTEST_CPUS=8 VMTEST_THREADS=2 VMTEST_SOCKETS='' VMTEST_DISTANCES=''
while [ $# -gt 0 ]; do
  case $1 in
    --busybox) busybox=1; shift ;;
    --each-nodes) each=${2:-}; shift 2 || die "--each-nodes needs a list" ;;
    --tries) tries=${2:-}; shift 2 || die "--tries needs a number" ;;
    --check) check=${2:-}; shift 2 || die "--check needs a script" ;;
    --timeout) timeout=${2:-}; shift 2 || die "--timeout needs seconds" ;;
    --) shift; break ;;
    --pci | --iommu | --net) vmopts+=("$1"); shift ;;
    --*)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --nodes) VMTEST_NODES=$2 ;;
        --cpus) VMTEST_CPUS=$2 ;;
        --threads) VMTEST_THREADS=$2 ;;
        --sockets) VMTEST_SOCKETS=$2 ;;
        --distances) VMTEST_DISTANCES=$2 ;;
      esac
      vmopts+=("$1" "$2"); shift 2 ;;
    *) die "unknown argument $1 (the guest comes after --)" ;;
  esac
done
[ $# -ge 1 ] || die "no guest script (after --)"
timeout=${NRM_VM_TIMEOUT:-$timeout}
case $1 in */*) ;; *) set -- "$here/$1" "${@:2}" ;; esac
if [ -n "$busybox" ]; then
  command -v busybox >/dev/null 2>&1 || { echo "SKIP: busybox not found (apt-get install busybox-static)"; exit 77; }
  set -- busybox sh "$@"
fi
[ -z "$check" ] || case $check in */*) ;; *) check=$here/$check ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nrm-vmtest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
list=${each:-$VMTEST_NODES}
for nodes in ${list//,/ }; do
  [ -z "$each" ] || echo "=== $nodes NUMA nodes"
  guest=()
  for a in "$@"; do
    a=${a//@BUILD@/$build} a=${a//@SRC@/$src} a=${a//@NRM@/$NRM}
    guest+=("${a//@NODES@/$nodes}")
  done
  nodeopt=()
  [ -z "$each" ] || nodeopt=(--nodes "$nodes")
  for try in $(seq "$tries"); do
    start=$(date +%s)
    if [ -n "$check" ]; then
      "$here/vm.sh" "${vmopts[@]}" "${nodeopt[@]}" --share "$build" --timeout "$timeout" -- "${guest[@]}" \
        >"$tmp/out" 2>"$tmp/err"
    else
      "$here/vm.sh" "${vmopts[@]}" "${nodeopt[@]}" --share "$build" --timeout "$timeout" -- "${guest[@]}" \
        2>"$tmp/err"
    fi
    r=$?
    [ -z "$check" ] && cat "$tmp/err" >&2
    [ $r -eq 77 ] && { echo "SKIP: $(tail -n 1 "$tmp/err")"; exit 77; }
    echo "boot, guest and poweroff took $(($(date +%s) - start)) s"
    case $r in 124 | 125) [ "$try" -lt "$tries" ] && echo "retrying: vm.sh exited $r: $(tail -n 3 "$tmp/err")" ;; *) break ;; esac
  done
  if [ -n "$check" ]; then
    if [ $r -ne 0 ]; then
      echo "FAIL: the VM run exited $r: $(tail -n 20 "$tmp/err")"
      r=1
    else
      VMTEST_NODES=$nodes VMTEST_CPUS=$VMTEST_CPUS VMTEST_THREADS=$VMTEST_THREADS VMTEST_SOCKETS=$VMTEST_SOCKETS \
        VMTEST_DISTANCES=$VMTEST_DISTANCES "$check" "$tmp/out"
      r=$?
    fi
  fi
  [ $r -eq 0 ] || rc=1
done
exit $rc
