#!/usr/bin/env python3
"""The fake API server (tests/k8s/fakeapi.py) for tests/image/smoke.sh, on the
host's loopback: writes DIR/kubeconfig (CA embedded, so the container needs
only that file) and DIR/http-port (a free port for the plugin's
--http-address); once the plugin in the container has published the CPU
driver's slices, stores an allocated claim on its first device and writes the
device's name to DIR/device. Runs until SIGTERM, then writes DIR/summary."""

import json
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "k8s"))
from fakeapi import FakeAPI  # noqa: E402

CPU = "cpu.nrm.io"


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    directory, node, namespace, name, uid = sys.argv[1:6]
    api = FakeAPI(os.path.join(directory, "server"), tokens=["t0"])
    api.add_node(node)
    api.start()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        write(os.path.join(directory, "http-port"), "%d\n" % s.getsockname()[1])
    api.write_kubeconfig(os.path.join(directory, "kubeconfig"), ca_data=True)
    device = None
    while not done.wait(0.2):
        if device is None:
            mine = [s for s in api.slices() if s["spec"]["driver"] == CPU and s["spec"].get("devices")]
            if mine:
                device = mine[0]["spec"]["devices"][0]["name"]
                api.put_claim({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"namespace": namespace, "name": name, "uid": uid},
                    "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": CPU}}]}},
                    "status": {"allocation": {"devices": {"results": [
                        {"request": "cpus", "driver": CPU, "pool": node, "device": device,
                         "consumedCapacity": {"cpus": "2"}, "shareID": "a1b2c3d4"}]}}}})
                write(os.path.join(directory, "device"), device + "\n")
    drivers = sorted({s["spec"]["driver"] for s in api.slices()})
    write(os.path.join(directory, "summary"), json.dumps({"drivers": drivers, "errors": len(api.internal_errors)}))
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
