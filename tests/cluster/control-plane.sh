#!/bin/bash
# Starts and stops a real Kubernetes control plane on loopback for nrm's
# cluster tests: etcd, kube-apiserver (TLS, RBAC, the Node authorizer and
# NodeRestriction as in a real cluster, an audit log), kube-scheduler and
# kube-controller-manager, from the binaries of tests/cluster/build.sh.
#
#   control-plane.sh start DIR BINDIR [--feature-gates G] [--runtime-config R]
#                                     [--san IP] [--controllers LIST]
#                                     [--apiserver-arg ARG]... [--controller-manager-arg ARG]...
#                                     [--scheduler-arg ARG]...
#   control-plane.sh restart-apiserver DIR   (the same command again)
#   control-plane.sh stop DIR
#
# DIR is created and holds the certificates, etcd's data, each component's
# log, the audit log (audit.log, level Metadata) and admin.kubeconfig
# (system:masters: the test's own installer rights, never nrm's). DIR/env
# says, as shell assignments, the API server's URL, the ports and the pids.
# The node-lifecycle controller is left out by default: in this layer no
# kubelet heartbeats its Node. Everything listens on 127.0.0.1 only.
# NRM_SCHED_V=N starts the scheduler with -v=N (7: each CEL result and
# constraint decision of the allocator, in scheduler.log).
set -euo pipefail

usage () { sed -n '7,12s/^# \{0,3\}//p' "$0" >&2; exit 2; }
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || usage

# SIGTERM to each pid, then SIGKILL to any still there after 10 s.
end () {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

stop () {
  [ -f "$dir/env" ] || return 0
  # shellcheck disable=SC1091,SC2046
  end $(. "$dir/env"; echo "$SCHEDULER_PID $CONTROLLER_MANAGER_PID $APISERVER_PID $ETCD_PID")
}

# Waits until the API server answers /readyz, or fails.
api_ready () {
  local kubectl=$1 pid=$2 i
  for i in $(seq 600); do
    "$kubectl" --kubeconfig "$dir/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

case $cmd in
stop) stop; exit 0 ;;
restart-apiserver)
  # shellcheck disable=SC1091
  . "$dir/env"
  end "$APISERVER_PID"
  "$dir/apiserver.sh" &
  pid=$!
  sed -i "s/^APISERVER_PID=.*/APISERVER_PID=$pid/" "$dir/env"
  api_ready "$BIN/kubectl" "$pid" || { echo "control-plane.sh: kube-apiserver did not come back" >&2; exit 1; }
  exit 0 ;;
start) ;;
*) usage ;;
esac
bin=${3:-}
[ -x "$bin/kube-apiserver" ] || { echo "control-plane.sh: no kube-apiserver in '$bin'" >&2; exit 2; }
shift 3
gates="" runtime="" controllers="*,-node-lifecycle-controller" extra=() cm_extra=() sched_extra=()
sans="IP:127.0.0.1"
while [ $# -gt 0 ]; do
  case $1 in
  --feature-gates) gates=$2; shift 2 ;;
  --runtime-config) runtime=$2; shift 2 ;;
  --san) sans="$sans,IP:$2"; shift 2 ;;
  --controllers) controllers=$2; shift 2 ;;
  --apiserver-arg) extra+=("$2"); shift 2 ;;
  --controller-manager-arg) cm_extra+=("$2"); shift 2 ;;
  --scheduler-arg) sched_extra+=("$2"); shift 2 ;;
  *) usage ;;
  esac
done
mkdir -p "$dir/pki"
dir=$(cd "$dir" && pwd)
pki=$dir/pki

# Free loopback ports, asked of the kernel: two control planes run side by side.
read -r etcd_port peer_port api_port sched_port cm_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# --- certificates: one CA, the serving certificate, a client for each part ---
ssl () { openssl "$@" 2>/dev/null; }
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=nrm-test-ca -keyout "$pki/ca.key" -out "$pki/ca.crt"
cert () { # NAME SUBJECT [SAN]
  ssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr"
  local ext=$pki/$1.ext
  if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$3" >"$ext"
  else printf 'extendedKeyUsage=clientAuth\n' >"$ext"; fi
  ssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
    -extfile "$ext" -out "$pki/$1.crt"
}
cert apiserver /CN=kube-apiserver \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1,$sans"
cert admin "/O=system:masters/CN=nrm-test-admin"
cert scheduler /CN=system:kube-scheduler
cert controller-manager /CN=system:kube-controller-manager
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
ssl genrsa -out "$pki/sa.key" 2048
ssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

url=https://127.0.0.1:$api_port
kubeconfig () { # NAME
  cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nrm-test
  cluster: {server: "$url", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}
contexts:
- name: nrm-test
  context: {cluster: nrm-test, user: $1}
current-context: nrm-test
EOF
}
kubeconfig admin; kubeconfig scheduler; kubeconfig controller-manager

cat >"$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF

# --- the components ------------------------------------------------------------
"$bin/etcd" --name nrm-test --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "nrm-test=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
  --quota-backend-bytes 4294967296 >"$dir/etcd.log" 2>&1 &
etcd_pid=$!

# No kubernetes Service endpoint is written: it would have to be an address
# that is not loopback, and no pod in this layer dials it.
api_args=(--etcd-servers "http://127.0.0.1:$etcd_port"
  --bind-address 127.0.0.1 --secure-port "$api_port" --advertise-address 127.0.0.1
  --endpoint-reconciler-type none --service-cluster-ip-range 10.0.0.0/24
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
  --client-ca-file "$pki/ca.crt"
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt"
  --kubelet-client-key "$pki/apiserver-kubelet-client.key" --kubelet-certificate-authority "$pki/ca.crt"
  --service-account-issuer https://kubernetes.default.svc
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction
  --allow-privileged=true --anonymous-auth=false
  --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log"
  --audit-log-format json --audit-log-mode batch --audit-log-batch-max-wait 1s
  ${gates:+--feature-gates "$gates"} ${runtime:+--runtime-config "$runtime"} "${extra[@]}")
# Kept as a script: restart-apiserver runs the same command again.
{ echo '#!/bin/sh'; printf 'exec %q' "$bin/kube-apiserver"; printf ' %q' "${api_args[@]}";
  printf ' >>%q 2>&1\n' "$dir/apiserver.log"; } >"$dir/apiserver.sh"
chmod +x "$dir/apiserver.sh"
"$dir/apiserver.sh" &
api_pid=$!

cat >"$dir/env" <<EOF
API_URL=$url
API_PORT=$api_port
ETCD_URL=http://127.0.0.1:$etcd_port
ETCD_PID=$etcd_pid
APISERVER_PID=$api_pid
SCHEDULER_PID=
CONTROLLER_MANAGER_PID=
SCHEDULER_PORT=$sched_port
CONTROLLER_MANAGER_PORT=$cm_port
KUBECONFIG=$dir/admin.kubeconfig
BIN=$bin
EOF

fail () { echo "control-plane.sh: $1; the end of $2:" >&2; tail -n 20 "$dir/$2" >&2; stop; exit 1; }
api_ready "$bin/kubectl" $api_pid || fail "kube-apiserver not ready within 120 s" apiserver.log

"$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
  --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false \
  ${gates:+--feature-gates "$gates"} ${NRM_SCHED_V:+-v=$NRM_SCHED_V} ${sched_extra[@]+"${sched_extra[@]}"} \
  >"$dir/scheduler.log" 2>&1 &
sched_pid=$!
"$bin/kube-controller-manager" --kubeconfig "$dir/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$cm_port" --leader-elect=false \
  --controllers "$controllers" --use-service-account-credentials \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  ${gates:+--feature-gates "$gates"} ${cm_extra[@]+"${cm_extra[@]}"} >"$dir/controller-manager.log" 2>&1 &
cm_pid=$!
sed -i "s/^SCHEDULER_PID=.*/SCHEDULER_PID=$sched_pid/; s/^CONTROLLER_MANAGER_PID=.*/CONTROLLER_MANAGER_PID=$cm_pid/" "$dir/env"

# Ready when both answer their health endpoints and the scheduler has its RBAC.
for _ in $(seq 300); do
  s=$(curl -sk "https://127.0.0.1:$sched_port/healthz" || true)
  c=$(curl -sk "https://127.0.0.1:$cm_port/healthz" || true)
  [ "$s" = ok ] && [ "$c" = ok ] && break
  kill -0 $sched_pid 2>/dev/null || fail "kube-scheduler exited" scheduler.log
  kill -0 $cm_pid 2>/dev/null || fail "kube-controller-manager exited" controller-manager.log
  sleep 0.2
done
[ "$s" = ok ] || fail "kube-scheduler not healthy within 60 s" scheduler.log
[ "$c" = ok ] || fail "kube-controller-manager not healthy within 60 s" controller-manager.log
echo "$dir"
