#!/bin/sh
# kubectl nrm without an API server: the kubectl-nrm link, its help, bad
# usage (exit 2) and kubeconfigs it cannot use (exit 1), each with a clear
# message and nothing on stdout. tests/cluster/test-kubectl.py runs it
# against the real API server.
. "${NRM_SRCDIR:-.}/tests/cli/lib.sh"

ln -s "$NRM" "$TMP/kubectl-nrm"
K="$TMP/kubectl-nrm"

# expect_status DESCRIPTION STATUS NEEDLE -- ARGS...: kubectl-nrm ARGS exits
# with STATUS, NEEDLE on stderr, nothing on stdout.
expect_status () {
  desc=$1; want=$2; needle=$3; shift 4
  env -u KUBECONFIG HOME="$TMP/home" "$K" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" -ne "$want" ]; then fail "$desc: exit $rc, not $want: $(cat "$TMP/err")"; return; fi
  if [ -s "$TMP/out" ]; then fail "$desc: wrote to stdout"; return; fi
  if ! grep -qF -- "$needle" "$TMP/err"; then fail "$desc: stderr lacks '$needle': $(cat "$TMP/err")"; return; fi
  ok
}

"$K" --help >"$TMP/help" 2>&1 && grep -q "^Usage: kubectl nrm COMMAND" "$TMP/help" && ok || fail "kubectl-nrm --help"
for c in nodes claim pods; do
  grep -q "^  $c " "$TMP/help" && ok || fail "kubectl-nrm --help lacks $c"
  "$K" $c --help >"$TMP/h" 2>&1 && grep -q -- "--kubeconfig" "$TMP/h" && grep -q -- "--context" "$TMP/h" && ok ||
    fail "kubectl-nrm $c --help"
done
"$NRM" kubectl pods --help | grep -q -- "--all-namespaces" && ok || fail "nrm kubectl pods --help"
"$NRM" kubectl nodes --help | grep -q -- "--all-namespaces" && fail "nodes takes no -A" || ok

expect_status "unknown command" 2 "unknown command \`frob\`" -- frob
expect_status "-o xml" 2 "the outputs are json and yaml" -- nodes -o xml
expect_status "claim without a name" 2 "which claim?" -- claim
expect_status "two claim names" 2 "unexpected argument \`b\`" -- claim a b
expect_status "a bad claim name" 2 "is not a ResourceClaim name" -- claim a/b
expect_status "a bad namespace" 2 "is not a namespace name" -- pods -n Bad_NS
expect_status "-n and -A" 2 "give one" -- pods -n a -A
expect_status "a bad node name" 2 "is not a node name" -- pods --node x/y
expect_status "-A for claim" 2 "is an option of \`nrm kubectl pods\`" -- claim a -A
expect_status "a node command's flag" 2 "is an option of" -- nodes --topology x.xml

# Kubeconfigs: none, missing, a list of missing files, a context not there,
# what nrm refuses.
expect_status "no kubeconfig" 1 "$TMP/home/.kube/config" -- nodes
expect_status "--kubeconfig missing" 1 "/nonexistent/kc" -- nodes --kubeconfig /nonexistent/kc
KUBECONFIG="$TMP/a:$TMP/b" "$K" nodes >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -qF "none of the files" "$TMP/err" && ok || fail "KUBECONFIG of missing files: $(cat "$TMP/err")"
cat >"$TMP/kc" <<YAML
current-context: c
contexts:
- {name: c, context: {cluster: k, user: u}}
- {name: old, context: {cluster: k, user: old}}
clusters:
- {name: k, cluster: {server: "https://127.0.0.1:1"}}
users:
- {name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never,
   command: nrm-no-such-credential-plugin, installHint: "install nrm-no-such-credential-plugin"}}}
- {name: old, user: {auth-provider: {name: gcp}}}
YAML
expect_status "--context not there" 1 "context \`nope\` not found" -- nodes --kubeconfig "$TMP/kc" --context nope
expect_status "an exec plugin not found" 1 "install nrm-no-such-credential-plugin" -- nodes --kubeconfig "$TMP/kc"
expect_status "auth-provider" 1 "uses \`auth-provider\`" -- nodes --kubeconfig "$TMP/kc" --context old
finish
