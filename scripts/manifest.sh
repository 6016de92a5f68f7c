#!/bin/sh
# Writes deploy/kubernetes/nrm.yaml (or the file given) from the Helm chart
# deploy/helm/nrm: its default values, the namespace nrm-system, and the
# Namespace object (namespace.create=true), which helm --create-namespace
# makes otherwise. `make manifest` runs it; tests/helm/chart.sh checks that
# the committed manifest is what it writes.
#   scripts/manifest.sh [OUT]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
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
# settings), DaemonSet, the controller's Deployment, DeviceClasses.
HEADER
  python3 "$top/tests/helm/render.py" "$top/deploy/helm/nrm" --namespace nrm-system --set namespace.create=true
} >"$tmp"
mv -f "$tmp" "$out"
trap - EXIT
