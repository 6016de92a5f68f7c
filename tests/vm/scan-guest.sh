#!/bin/sh
# In the VM of scan-2.vm and scan-4.vm: nrm's view of the emulated machine,
# in sections that scan-check.sh reads on the host.
#   scan-guest.sh NRM
echo "@@ topology"
"$1" topology --json
echo "@@ rc $?"
echo "@@ slices"
"$1" slices --node-name vm-test
echo "@@ rc $?"
