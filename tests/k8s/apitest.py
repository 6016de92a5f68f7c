# SPDX-License-Identifier: Apache-2.0
"""What the small API tests share: the paths of make check, a check that
counts, a wait, and the fake API server (the test skips, 77, without it)."""

import os
import shutil
import signal
import subprocess
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


def stop_plugin(plugin, api, log, work):
    """Ends a test: SIGTERM to the plugin (checked to exit 0 within 15 s),
    the fake API server stopped, the end of the plugin's log shown when a
    check failed, the work folder removed."""
    plugin.send_signal(signal.SIGTERM)
    try:
        rc = plugin.wait(15)
    except subprocess.TimeoutExpired:
        plugin.kill()
        rc = plugin.wait()
    check(rc == 0, "the plugin stops cleanly (exit %s)" % rc)
    api.stop()
    if failures:
        with open(log) as fh:
            print(fh.read()[-3000:])
    shutil.rmtree(work, ignore_errors=True)


def finish():
    print("%d passed, %d failed" % (passed[0], len(failures)))
    sys.exit(1 if failures else 0)
