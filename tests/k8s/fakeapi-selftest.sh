#!/bin/sh
# The fake API server checks itself before the tests trust it.
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
exec python3 "${NRM_SRCDIR:-$(dirname "$0")/../..}/tests/k8s/fakeapi.py" --selftest
