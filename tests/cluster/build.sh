#!/bin/bash
# Builds the upstream binaries nrm's cluster tests run (kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl, etcd, helm; with --node
# also kubelet, kube-proxy, and containerd 2 with ctr and its runc shim) from the Go module proxy, through the wrapper
# modules beside this script, into a cache outside the tree keyed by version,
# and prints the folder that holds them. A folder already built is reused.
#
#   build.sh [--node] v1.36|v1.37
#
# NRM_K8S_CACHE: the cache (default /var/cache/nrm-k8s, or ~/.cache/nrm-k8s
# where that cannot be written). Exit 77 without Go.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=0
if [ "${1:-}" = --node ]; then node=1; shift; fi
line=${1:?usage: build.sh [--node] v1.36|v1.37}
[ -f "$here/$line/go.mod" ] || { echo "build.sh: no wrapper module $here/$line" >&2; exit 2; }
command -v go >/dev/null || { echo "build.sh: go is not installed (Go 1.26 builds the upstream binaries)" >&2; exit 77; }
cache=${NRM_K8S_CACHE:-/var/cache/nrm-k8s}
if [ -z "${NRM_K8S_CACHE:-}" ] && { ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; }; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/nrm-k8s
fi

# The version a wrapper requires, from its go.mod: a bump is an edit there.
required () { awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' "$here/$1/go.mod" | head -n 1; }
kver=$(required "$line" k8s.io/kubernetes)
ever=$(required etcd go.etcd.io/etcd/server/v3)
hver=$(required helm helm.sh/helm/v4)
cver=$(required containerd github.com/containerd/containerd/v2)
out=$cache/kubernetes-$kver
mkdir -p "$cache"
# One build at a time: the tests of make -j ask together, the later ones
# wait and reuse what the first built.
exec 9>"$cache/.lock"
flock 9

# go build -ldflags $flags from the wrapper module $mod into $dir, once. The
# binaries land in a temporary folder renamed when all are built, so a stopped
# build leaves no half of one. One go build for several commands: the
# packages they share compile once (each is named after its last element).
build () {
  local dir=$1 mod=$2 name=$3 flags=$4; shift 4
  local pkg missing=()
  for pkg in "$@"; do [ -x "$dir/${name:-${pkg##*/}}" ] || missing+=("$pkg"); done
  [ ${#missing[@]} = 0 ] && return 0
  local tmp=$dir.tmp.$$ t0=$SECONDS
  rm -rf "$tmp" && mkdir -p "$tmp"
  if [ -d "$dir" ]; then cp -a "$dir"/. "$tmp"/; fi
  echo "build.sh: building $dir" >&2
  (cd "$here/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$tmp/$name" "${missing[@]}")
  rm -rf "$dir" && mv "$tmp" "$dir"
  echo "build.sh: $(basename "$dir") built in $((SECONDS - t0)) s" >&2
}

minor=${kver#v1.}; minor=${minor%%.*}
kflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
cmds="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
 k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl"
[ "$node" = 1 ] && cmds="$cmds k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy"
# shellcheck disable=SC2086
build "$out" "$line" "" "$kflags" $cmds
build "$cache/etcd-$ever" etcd etcd "-s -w" go.etcd.io/etcd/server/v3
build "$cache/helm-$hver" helm helm "-s -w -X helm.sh/helm/v4/internal/version.version=$hver" helm.sh/helm/v4/cmd/helm
if [ "$node" = 1 ]; then
  # Without cgo the btrfs snapshotter is left out; the node uses overlayfs.
  build "$cache/containerd-$cver" containerd "" "-s -w -X github.com/containerd/containerd/v2/version.Version=$cver" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
  for f in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$cache/containerd-$cver/$f" "$out/$f"; done
fi
ln -sfn "$cache/etcd-$ever/etcd" "$out/etcd"
ln -sfn "$cache/helm-$hver/helm" "$out/helm"
echo "$out"
