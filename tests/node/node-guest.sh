#!/bin/sh
# The node inside the VM (run by tests/vm/vm.sh --net from nodelib.py):
# containerd 2 with CDI and the CNI bridge, runc, kube-proxy and the kubelet,
# joined to the control plane on the host through qemu's guestfwd at
# 10.0.2.100. Then it runs the host's requests until told to stop.
#
#   node-guest.sh BINDIR WORK
#
# BINDIR holds the upstream binaries (tests/cluster/build.sh --node); WORK is
# shared with the host and holds what nodelib.py wrote: kubelet.kubeconfig,
# kube-proxy.kubeconfig, ca.crt, kubelet.yaml (the kubelet reads it as
# /var/lib/kubelet/config.yaml, where nrm looks), kube-proxy.yaml,
# containerd-sandbox.toml (docs/install.md's sandbox setting), and the pause
# and workload images (images/pause.tar, images/workload.tar).
# The guest writes its logs there (*.log) and answers requests: the host
# writes req/N.sh, the guest runs it and writes req/N.out, then req/N.rc.
# WORK/stop ends it. Everything else in the guest is a tmpfs or the host's
# read-only root under the VM's overlay.
set -eu
bin=$1 work=$2
log () { echo "node-guest: $*" >>"$work/guest.log"; }
die () { log "$*"; echo "node-guest: $*" >&2; exit 1; }

# containerd's overlay snapshotter cannot sit on the guest's overlay root.
for d in /var/lib/containerd /var/lib/kubelet /run/containerd /var/log/pods /var/log/containers \
  /etc/cni/net.d /etc/containerd /var/lib/nrm /var/run/cdi /etc/cdi /opt/cni; do
  mkdir -p "$d" && mount -t tmpfs -o mode=0755 tmpfs "$d" || die "tmpfs on $d"
done
# The kubelet enforces pid limits and I/O weights: their controllers too.
echo "+pids +io" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || log "no pids/io controllers"
echo 1 >/proc/sys/net/ipv4/ip_forward
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
mkdir -p /opt/cni/bin
for p in bridge host-local loopback portmap; do ln -s "/usr/lib/cni/$p" "/opt/cni/bin/$p"; done

cat >/etc/cni/net.d/10-nrm-test.conflist <<'EOF'
{"cniVersion": "1.0.0", "name": "nrm-test",
 "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
cat >/etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
$(cat "$work/containerd-sandbox.toml")
[plugins.'io.containerd.cri.v1.runtime']
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"
EOF
PATH=$bin:$PATH
export PATH
# Each part is started by a script of its own, which a request can run again
# to restart it (the restart tests): /run/node/start-PART, appending to
# WORK/PART.log.
mkdir -p /run/node
cat >/run/node/start-containerd <<EOF
#!/bin/sh
PATH=$PATH
containerd --config /etc/containerd/config.toml >>"$work/containerd.log" 2>&1 </dev/null &
EOF
cat >/run/node/start-kube-proxy <<EOF
#!/bin/sh
PATH=$PATH
kube-proxy --config "$work/kube-proxy.yaml" >>"$work/kube-proxy.log" 2>&1 </dev/null &
EOF
cat >/run/node/start-kubelet <<EOF
#!/bin/sh
PATH=$PATH
kubelet --config /var/lib/kubelet/config.yaml --kubeconfig "$work/kubelet.kubeconfig" \\
  --hostname-override "$(cat "$work/node-name")" --node-ip 10.0.2.15 -v=2 >>"$work/kubelet.log" 2>&1 </dev/null &
EOF
chmod +x /run/node/start-*
log "starting containerd"
/run/node/start-containerd
for _ in $(seq 300); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done
[ -S /run/containerd/containerd.sock ] || die "containerd did not start (containerd.log)"
for t in "$work/images/pause.tar" "$work/images/workload.tar"; do
  ctr -n k8s.io images import --no-unpack=false "$t" >>"$work/guest.log" 2>&1 || die "ctr import $t"
done
log "images: $(ctr -n k8s.io images ls -q | tr '\n' ' ')"

log "starting kube-proxy and the kubelet"
/run/node/start-kube-proxy
cp "$work/kubelet.yaml" /var/lib/kubelet/config.yaml
/run/node/start-kubelet
echo up >"$work/guest-up"

# The host's requests, one at a time, in the order of their numbers.
mkdir -p "$work/req"
n=0
while [ ! -e "$work/stop" ]; do
  if [ -e "$work/req/$n.sh" ]; then
    set +e
    sh "$work/req/$n.sh" >"$work/req/$n.out" 2>&1
    echo $? >"$work/req/$n.rc.tmp" && mv "$work/req/$n.rc.tmp" "$work/req/$n.rc"
    set -e
    n=$((n + 1))
  else
    sleep 0.2
  fi
done
log "stopping"
