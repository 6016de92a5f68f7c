#!/bin/sh
# Installs the Debian 12 packages that nrm builds and tests with (podman: a
# real CDI consumer in tests/vm/pci-plugin.vm; procps:
# pkill, pgrep and ps in tests/cli/run.sh; strace: the trust check of
# tests/cluster/test-api.py; a minimal Debian 12 lacks both; python3-yaml:
# tests/helm/chart.sh reads the chart's rendering; curl: the health checks of
# tests/cluster/control-plane.sh). The cluster tests also need Go 1.26,
# which Debian 12 does not package: they build kube-apiserver and the rest
# from the Go module proxy, and skip without it. libclang-rt-14-dev: clang's
# libFuzzer and sanitizer runtimes (make fuzz), which clang only recommends.
# debootstrap: scripts/image.sh's base for the container image, which
# tests/node/test-node-smoke.py runs as the DaemonSet; containernetworking-
# plugins and iptables: that node's pod network and kube-proxy, in the VM.
# prometheus: promtool and the server for tests/prometheus/ (the alerting
# rules and the Grafana dashboard's queries). python3-prometheus-client
# and python3-matplotlib: make bench-fleet reads the API server's and the
# scheduler's /metrics and draws docs/scale.md's plots; where python3 is not
# Debian's (a python3 of its own first on PATH), pip gives it the same two.
# --image (the container image's tools) is accepted and installs the same.
set -eu
PKGS="build-essential autoconf automake pkg-config
 libhwloc-dev hwloc-nox libnuma-dev
 libprotobuf-c-dev protobuf-c-compiler libgrpc-dev
 libcurl4-openssl-dev libssl-dev libjansson-dev libyaml-dev libmicrohttpd-dev libcmocka-dev
 openssl python3 python3-yaml help2man clang libclang-rt-14-dev clang-format
 procps strace curl prometheus python3-prometheus-client python3-matplotlib
 valgrind
 qemu-system-x86 busybox-static cpio runc podman
 debootstrap containernetworking-plugins iptables"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
# Only the benchmarks need them: a failed pip leaves the build and the tests whole.
python3 -c 'import prometheus_client, matplotlib' 2>/dev/null ||
  python3 -m pip install -q prometheus-client matplotlib ||
  echo "deps.sh: no prometheus-client or matplotlib for $(command -v python3): make bench-fleet needs them" >&2
