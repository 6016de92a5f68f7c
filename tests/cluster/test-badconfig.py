#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nrm's opaque claim settings refused at creation by the real
kube-apiserver (item 6 of the real-Kubernetes control-plane work): the
ValidatingAdmissionPolicy nrm-opaque-config of deploy/kubernetes/nrm.yaml,
applied with kubectl, judges every ResourceClaim and ResourceClaimTemplate
that carries a CPUConfig or MemoryConfig. The cases are those the plugin's
own parser refuses at prepare (tests/plugin/test-plugin.c's opaque-config
cases, and MemoryConfig's): each must be refused at creation with a message
that names the field, leave nothing stored, and the good ones must pass."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusterlib import Cluster, binaries, check, finish, wait_for, workdir  # noqa: E402

CPU = {"apiVersion": "cpu.nrm.io/v1alpha1", "kind": "CPUConfig"}
MEM = {"apiVersion": "memory.nrm.io/v1alpha1", "kind": "MemoryConfig"}
# (driver, parameters, a word the refusal must hold, or None when good)
CASES = [
    ("cpu.nrm.io", dict(CPU, options=["distribute-cpus-across-cores"]), None),
    ("cpu.nrm.io", dict(CPU, options=["full-pcpus-only"], sharedCPUs=True, cpus="0-3,8", cpuKind="efficiency",
                        partition="isolated"), None),
    ("cpu.nrm.io", dict(CPU, options=["turbo"]), "`options`"),
    ("cpu.nrm.io", dict(CPU, options=["align-by-socket"]), "align-by-socket are not supported"),
    ("cpu.nrm.io", dict(CPU, options="full-pcpus-only"), "`options` must be a list"),
    ("cpu.nrm.io", dict(CPU, colour=1), "unknown field `colour`"),
    ("cpu.nrm.io", dict(CPU, options=["full-pcpus-only", "distribute-cpus-across-cores"]), "exclude each other"),
    ("cpu.nrm.io", {"apiVersion": "v9", "kind": "X"}, "expected apiVersion cpu.nrm.io/v1alpha1"),
    ("cpu.nrm.io", {"apiVersion": "cpu.nrm.io/v1alpha1", "kind": "MemoryConfig"}, "kind CPUConfig"),
    ("cpu.nrm.io", dict(CPU, sharedCPUs="yes"), "`sharedCPUs` must be a boolean"),
    ("cpu.nrm.io", dict(CPU, cpuKind="fast"), "`cpuKind`"),
    ("cpu.nrm.io", dict(CPU, partition="maybe"), "`partition`"),
    ("cpu.nrm.io", dict(CPU, cpus="zero"), "`cpus` must be a CPU list"),
    ("memory.nrm.io", dict(MEM, guarantee=True, limit=True, policy="interleave"), None),
    ("memory.nrm.io", dict(MEM, policy="fast"), "`policy`"),
    ("memory.nrm.io", dict(MEM, limit="yes"), "`limit` and `guarantee` must be booleans"),
    ("memory.nrm.io", dict(MEM, size="1Gi"), "unknown field `size`"),
    ("memory.nrm.io", dict(CPU), "kind MemoryConfig"),
    ("gpu.example.com", {"anything": 1}, None),
]

bindir = binaries()
work = workdir()
cluster = Cluster(work, "badconfig", bindir)
cluster.install_nrm()


def spec(driver, params):
    return {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "cpu.nrm.io"}}],
                        "config": [{"requests": ["r"], "opaque": {"driver": driver, "parameters": params}}]}}


def refused_dry_run():
    """A bad claim sent with dryRun: refused once the API server has loaded
    the policy (its informer takes a moment after kubectl apply)."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "probe", "namespace": "default"}, "spec": spec("cpu.nrm.io", dict(CPU, colour=1))}
    s, _ = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims?dryRun=All", body)
    return s == 422


check(wait_for(refused_dry_run, 60, 0.5), "the policy of nrm.yaml is in force within 60 s of kubectl apply")

for kind, path in (("ResourceClaim", "resourceclaims"), ("ResourceClaimTemplate", "resourceclaimtemplates")):
    for i, (driver, params, want) in enumerate(CASES):
        name = "%s-%d" % (kind.lower(), i)
        body = {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"},
                "spec": spec(driver, params) if kind == "ResourceClaim" else {"spec": spec(driver, params)}}
        s, answer = cluster.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/" + path, body)
        msg = answer.get("message", "") if isinstance(answer, dict) else str(answer)
        stored, _ = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/%s/%s" % (path, name))
        if want is None:
            check(s == 201, "%s with %s %s: accepted (%s)" % (kind, driver, params, s))
        else:
            check(s == 422 and want in msg and "nrm-opaque-config" in msg and stored == 404,
                  "%s with %s %s: refused at creation, nothing stored: %s" % (kind, driver, params, msg[-160:]))

# The policy judges creation only: the spec of both kinds is immutable, as
# the real API server says when asked to change one.
good = "resourceclaimtemplate-0"
s, tmpl = cluster.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/" + good)
tmpl["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["options"] = ["turbo"]
s, answer = cluster.api("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/" + good, tmpl)
check(s == 422 and "field is immutable" in answer.get("message", ""),
      "a ResourceClaimTemplate's spec cannot be changed after creation (%s)" % s)

cluster.stop()
finish()
