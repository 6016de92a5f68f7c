#!/usr/bin/env python3
"""A real control plane (tests/cluster: kube-apiserver, scheduler and
controller-manager of 1.36, with deploy/kubernetes/nrm.yaml applied) for
tests/image/smoke.sh, on the host's loopback: writes DIR/kubeconfig (the CA
and a token of the DaemonSet's ServiceAccount bound to its pod on NODE,
embedded, so the container needs only that file) and DIR/http-port (a free
port for the plugin's --http-address); once the plugin in the container has
published the CPU driver's slices, creates a claim NAMESPACE/NAME allocated
on its first device and writes the device's name to DIR/device and the
claim's UID to DIR/uid. Runs until SIGTERM, then writes DIR/summary: the
drivers the server holds slices of, and its answers of 500 and more to nrm
(from its audit log). Exits 77 where the upstream binaries cannot be built."""

import base64
import json
import os
import signal
import socket
import sys
import threading
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from clusterlib import Cluster, binaries  # noqa: E402

CPU = "cpu.nrm.io"
NRM_USER = "system:serviceaccount:nrm-system:nrm"


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    directory, node, namespace, name = sys.argv[1:5]
    cluster = Cluster(os.path.join(directory, "server"), "smoke", binaries())
    cluster.install_nrm()
    cluster.create_nodes([(node, 24, 64 << 30)])
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        write(os.path.join(directory, "http-port"), "%d\n" % s.getsockname()[1])
    kc = cluster.nrm_kubeconfig(node, os.path.join(directory, "server", "kubeconfig"))
    with open(kc + ".token") as f:
        token = f.read().strip()
    with open(cluster.ca, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    write(os.path.join(directory, "kubeconfig"), json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": cluster.env["API_URL"], "certificate-authority-data": ca}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    device = None
    while not done.wait(0.2):
        if device is None:
            mine = [s for s in cluster.slices(node, CPU) if s["spec"].get("devices")]
            if mine:
                device = mine[0]["spec"]["devices"][0]["name"]
                claim = cluster.allocate({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"namespace": namespace, "name": name},
                    "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": CPU}}]}}},
                    node, [("cpus", CPU, node, device, {"consumedCapacity": {"cpus": "2"},
                                                        "shareID": str(uuid.uuid4())})])
                write(os.path.join(directory, "uid"), claim["metadata"]["uid"] + "\n")
                write(os.path.join(directory, "device"), device + "\n")
    drivers = sorted({s["spec"]["driver"] for s in cluster.slices(node)})
    errors = [e for e in cluster.audit() if e.get("stage") == "ResponseComplete"
              and e["user"].get("username") == NRM_USER and e.get("responseStatus", {}).get("code", 0) >= 500]
    write(os.path.join(directory, "summary"), json.dumps({"drivers": drivers, "errors": len(errors)}))
    cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
