#!/bin/sh
# Quick start: install what is missing, build, show what nrm publishes for
# this machine, and run a small command pinned by nrm.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure
make -j"$(nproc)"
./nrm/nrm topology
./nrm/nrm slices
# nrm's main job on its own: a command on an exclusive CPU picked by the
# placement engine, released when it ends.
./nrm/nrm run --cpus 1 --min-shared-cpus 0 --state-dir "/tmp/nrm-quickstart-$(id -u)" --create-state-dir -- sh -c 'echo "ran on CPU $NRM_CPUS, memory node $NRM_MEMS"; grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status'
