#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-node settings by label selector: nrm plugin reads its Node's labels
from a Kubernetes API server on loopback (fakeapi.py) and applies the first
nodes[] entry whose matchLabels they satisfy; nrm status, without the API,
takes the plugin's choice from its record and says where each setting came
from."""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import NRM, TOPOLOGIES, check, finish, stop_plugin, wait_for  # noqa: E402

FakeAPI = __import__("apitest").fake_api_class()
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-l"

work = tempfile.mkdtemp(prefix="nrm-node-settings-")
state = os.path.join(work, "state")
conf = os.path.join(work, "nrm.yaml")
with open(conf, "w") as fh:
    fh.write("""reservedCPUs: "0"
nodes:
- names: [node-other]
  settings: {reservedCPUs: "0-7"}
- selector: {matchLabels: {nrm.io/pool: big}}
  settings:
    reservedCPUs: "0-3"
    cpu: {mode: partitioned}
""")

api = FakeAPI(work, tokens=["token-0"])
api.start()
api.add_node(NODE, labels={"nrm.io/pool": "big"})
token = os.path.join(work, "token")
with open(token, "w") as fh:
    fh.write("token-0\n")
kubeconfig = os.path.join(work, "kubeconfig")
api.write_kubeconfig(kubeconfig, token_file=token)
log = os.path.join(work, "plugin.log")
plugin = subprocess.Popen(
    [NRM, "plugin", "-c", conf, "-t", TOPO, "--node-name", NODE, "--drivers", "cpu",
     "--kubelet-dir", os.path.join(work, "kubelet"), "--cdi-dir", os.path.join(work, "cdi"),
     "--state-dir", state, "--create-state-dir", "--reconcile-interval", "0",
     "--kubeconfig", kubeconfig, "--log-level", "debug"],
    stdout=open(log, "w"), stderr=subprocess.STDOUT)


def cpu_devices():
    return {d["name"] for s in api.slices() if s["spec"]["driver"] == "cpu.nrm.io"
            for d in s["spec"].get("devices", [])}


try:
    # Partitioned mode (nodes[1]) publishes core devices; with CPUs 0-3
    # reserved, cores 0 to 3 (one thread of each is reserved) are left out.
    check(wait_for(lambda: "core4" in cpu_devices()) and not {"core1", "core2", "core3"} & cpu_devices(),
          "the plugin publishes partitioned devices without cores 0-3, as nodes[1] says: %s"
          % sorted(cpu_devices()))
    with open(log) as fh:
        text = fh.read()
    check("nodes[1] applies to node node-l (by labels)" in text, "the log says which entry applies, and why")
    r = subprocess.run([NRM, "status", "--json", "-c", conf, "-t", TOPO, "--node-name", NODE, "--drivers", "cpu",
                        "--state-dir", state], capture_output=True, text=True, timeout=30)
    st = json.loads(r.stdout) if r.returncode == 0 else {}
    vals = st.get("settings", {}).get("values", {})
    check(r.returncode == 0 and st["cpus"]["reserved"] == "0-3", "nrm status, without the API, has nodes[1]'s "
          "reserved CPUs: %s %s" % (r.stderr.strip(), st.get("cpus")))
    check(st.get("settings", {}).get("nodeEntry") == "nodes[1]"
          and vals.get("reservedCPUs") == {"value": "0-3", "from": "nodes[1]"}
          and vals.get("cpu.mode") == {"value": "partitioned", "from": "nodes[1]"}
          and vals.get("memory.granularity", {}).get("from") == "default",
          "and says where each setting came from: %s" % json.dumps(st.get("settings")))
finally:
    stop_plugin(plugin, api, log, work)

finish()
