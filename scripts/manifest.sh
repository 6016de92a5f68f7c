#!/bin/sh
# Writes deploy/kubernetes/nrm.yaml (or the file given) from the Helm chart
# deploy/helm/nrm with helm template: its default values, the namespace
# nrm-system, and the Namespace object (namespace.create=true), which helm
# --create-namespace makes otherwise. `make manifest` runs it;
# tests/helm/chart.sh checks that the committed manifest is what it writes.
# helm: $HELM, else helm on the PATH, else the one tests/cluster/build.sh
# builds from the Go module proxy (Debian 12 packages none).
#   scripts/manifest.sh [OUT]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
helm=${HELM:-$(command -v helm || true)}
if [ -z "$helm" ]; then
  helm=$("$top/tests/cluster/build.sh" v1.36)/helm || { echo "manifest.sh: no helm, and none could be built" >&2; exit 1; }
fi
out=${1:-$top/deploy/kubernetes/nrm.yaml}
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
  cat <<'HEADER'
# nrm: NUMA-aware CPU, memory and PCI device DRA drivers (cpu.nrm.io,
# memory.nrm.io, pci.nrm.io; docs/pci.md for the PCI devices).
#
#   kubectl apply -f deploy/kubernetes/nrm.yaml
#
# Generated from the Helm chart deploy/helm/nrm by `make manifest` (its
# default values, namespace nrm-system): change the chart, not this file;
# make check fails when the two differ.
#
# Before applying, read docs/install.md. In short:
#   - Kubernetes 1.36, cgroup v2, containerd >= 1.7 with CDI enabled (2.0 enables it by default) or CRI-O with CDI;
#   - the kubelet of every node this DaemonSet runs on has
#     cpuManagerPolicy: none, memoryManagerPolicy: None,
#     topologyManagerPolicy: none (nrm and the static CPU Manager policy both
#     write cpuset.cpus and would undo each other);
#   - replace the image nrm:latest below by the image you built from
#     deploy/Containerfile and pushed to a registry the nodes can pull from.
#
# Objects: Namespace, ResourceQuota, ServiceAccounts, ClusterRoles,
# ClusterRoleBindings, the controller's Role and RoleBinding, ConfigMap (node
# settings), DaemonSet, the controller's Deployment, DeviceClasses, and the
# ValidatingAdmissionPolicy that refuses bad CPUConfig and MemoryConfig
# settings when a claim or claim template is created.
HEADER
  "$helm" template nrm "$top/deploy/helm/nrm" --namespace nrm-system --set namespace.create=true \
    --kube-version 1.36.0
} >"$tmp"
mv -f "$tmp" "$out"
trap - EXIT
