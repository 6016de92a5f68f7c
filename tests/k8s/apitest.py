# SPDX-License-Identifier: Apache-2.0
"""What the small API tests share: the paths of make check, a check that
counts, a wait, and the fake API server (the test skips, 77, without it)."""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("NRM_SRCDIR", os.path.abspath(os.path.join(HERE, "..", "..")))
NRM = os.environ.get("NRM", os.path.join(SRCDIR, "nrm", "nrm"))
TOPOLOGIES = os.environ.get("NRM_TOPOLOGIES", os.path.join(SRCDIR, "tests", "topologies"))
passed, failures = [0], []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if cond:
        passed[0] += 1
    else:
        failures.append(what)


def wait_for(pred, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def fake_api_class():
    """FakeAPI, or a skip when the fake API server cannot run here."""
    if shutil.which("openssl") is None:
        print("SKIP: openssl is not installed")
        sys.exit(77)
    sys.path.insert(0, HERE)
    try:
        from fakeapi import FakeAPI
    except Exception as e:  # noqa: BLE001
        print("SKIP: cannot load the fake API server: %s" % e)
        sys.exit(77)
    return FakeAPI


def finish():
    print("%d passed, %d failed" % (passed[0], len(failures)))
    sys.exit(1 if failures else 0)
