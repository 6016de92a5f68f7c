#!/bin/sh
# Quick start: install what is missing, build, and show what nrm publishes
# for this machine.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure
make -j"$(nproc)"
./nrm/nrm topology
./nrm/nrm slices
