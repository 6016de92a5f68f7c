#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-node settings by label selector on the real control plane: the test's
admin labels a Node nrm.io/pool=big on the real API server; nrm plugin, as
the DaemonSet's identity, reads its Node's labels from the server and applies
the first nodes[] entry whose matchLabels they satisfy (the slices read back
from the server show it); nrm status, without the API, takes the plugin's
choice from its record and says where each setting came from."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import (DRA_CLIENT, NRM, TOPOLOGIES, Cluster, NrmPlugin, binaries, check,  # noqa: E402
                        finish, skip, stop_all, wait_for, workdir)

if not os.access(NRM, os.X_OK) or not os.access(DRA_CLIENT, os.X_OK):
    skip("build nrm and tests/plugin/dra-client first (make check)")
TOPO = os.path.join(TOPOLOGIES, "24em64t-2n6c2t-pci.xml")
NODE = "node-l"
DRIVER = "cpu.nrm.io"
bindir = binaries()
work = workdir()
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

cluster = Cluster(work, "nodesettings", bindir)
plugin = None
try:
    cluster.install_nrm()
    cluster.create_nodes([(NODE, 24, 64 << 30)])
    s, body = cluster.api("PATCH", "/api/v1/nodes/" + NODE, {"metadata": {"labels": {"nrm.io/pool": "big"}}},
                          content_type="application/merge-patch+json")
    if s != 200:
        raise RuntimeError("Node %s: labels: %s %s" % (NODE, s, body))
    plugin = NrmPlugin(cluster, NODE, work, ["-c", conf, "-t", TOPO, "--drivers", "cpu"])
    plugin.start()

    def cpu_devices():
        return {d["name"] for s in cluster.slices(NODE, DRIVER) for d in s["spec"].get("devices", [])}

    # Partitioned mode (nodes[1]) publishes core devices; with CPUs 0-3
    # reserved, cores 0 to 3 (one thread of each is reserved) are left out.
    check(plugin.register() and wait_for(lambda: "core4" in cpu_devices())
          and not {"core1", "core2", "core3"} & cpu_devices(),
          "the plugin publishes partitioned devices without cores 0-3, as nodes[1] says: %s"
          % sorted(cpu_devices()))
    check("nodes[1] applies to node node-l (by labels)" in plugin.text(), "the log says which entry applies, and why")
    r = subprocess.run([NRM, "status", "--json", "-c", conf, "-t", TOPO, "--node-name", NODE, "--drivers", "cpu",
                        "--state-dir", os.path.join(plugin.dir, "state")], capture_output=True, text=True, timeout=30)
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
    stop_all(cluster, plugin)

finish()
