#!/usr/bin/env python3
"""An upgrade from nrm 0.1.0 to this tree and a rollback, on a real node
with pods running (make check-cluster).

The node of tests/node/nodelib.py. nrm 0.1.0 (the tag v0.1.0; its image
built from that tag with its own scripts/image.sh) is installed with its
own deploy/kubernetes/nrm.yaml; a pod with a CPU and memory claim and a
pod without one run. Then:
  - the upgrade as docs/install.md says: this tree's nrm.yaml applied over
    it; the DaemonSet rolls to this tree's image (the new pod starts beside
    the old one and takes the node over);
  - the rollback: `kubectl rollout undo daemonset/nrm`, back to 0.1.0.
After each: nothing released (the claimed container is the same one, on the
same CPUs, which the shared pool still leaves out), nothing doubled (a new
claimed pod gets 2 other CPUs, and the pool leaves out both claims; its
CPUs return when it is deleted), and the claim prepared by one version is
unprepared by the other once its pod is deleted.

Exit 77 where the smoke test skips, or where this clone holds neither the
tag nor its commit (a shallow clone)."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodelib  # noqa: E402
from nodelib import check, clusterlib, skip, wait_for, SRCDIR  # noqa: E402

OLD = "v0.1.0"
# The tag's commit, for a clone that has the history but not the tags.
OLD_COMMIT = "de967f4b0ada6361e0d2820ce1f0c7d4abe1a923"
OLD_VERSION = "0.1.0"
# The name containerd gives the manifest's `nrm:0.1.0` (docs/install.md,
# "Without a registry").
OLD_REF = "docker.io/library/nrm:" + OLD_VERSION


def git(*args, cwd=SRCDIR):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def old_tree(work):
    """A clone of this repository at 0.1.0, sharing its objects."""
    rev = None
    for r in (OLD + "^{commit}", OLD_COMMIT + "^{commit}"):
        p = git("rev-parse", "--verify", "-q", r)
        if p.returncode == 0:
            rev = p.stdout.strip()
            break
    if rev is None:
        skip("this clone has neither the tag %s nor its commit %s (a shallow clone?)" % (OLD, OLD_COMMIT))
    d = os.path.join(work, "nrm-" + OLD_VERSION)
    if not os.path.isdir(d):
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", SRCDIR, d], check=True)
        subprocess.run(["git", "-c", "advice.detachedHead=false", "checkout", "-q", rev], cwd=d, check=True)
    return d


def old_image(work):
    """0.1.0's image, built by its own scripts/image.sh under another name
    (this tree's nrm:latest stays), saved for the node as OLD_REF; the
    build is skipped when the image's nrm.source label says it is current."""
    d = old_tree(work)
    name = "nrm-" + OLD_VERSION
    want = subprocess.run([os.path.join(d, "scripts", "image.sh"), "--source-id"], cwd=d,
                          capture_output=True, text=True, check=True).stdout.strip()
    p = subprocess.run(["podman", "image", "inspect", "--format", '{{index .Labels "nrm.source"}}',
                        "localhost/%s:%s" % (name, OLD_VERSION)], capture_output=True, text=True)
    if p.returncode != 0 or p.stdout.strip() != want:
        t0 = time.time()
        p = subprocess.run([os.path.join(d, "scripts", "image.sh")], cwd=d, capture_output=True, text=True,
                           env=dict(os.environ, NRM_IMAGE_NAME=name))
        if p.returncode != 0:
            raise SystemExit("FAIL %s's scripts/image.sh: exit %d\n%s" % (OLD, p.returncode,
                                                                          (p.stdout + p.stderr)[-3000:]))
        print("# built %s's image with its scripts/image.sh in %.0f s" % (OLD, time.time() - t0))
    return d, "localhost/%s:%s" % (name, OLD_VERSION)


def main():
    if subprocess.run(["sh", "-c", "command -v podman"], capture_output=True).returncode != 0:
        skip("podman is not installed (./scripts/deps.sh): it builds the node's images")
    work = clusterlib.workdir()
    t0 = time.time()
    old_dir, built = old_image(work)
    node = nodelib.Node(work, clusterlib.binaries(node=True), timeout=2400)
    c = node.cluster
    imgs = os.path.join(node.g, "images")
    subprocess.run(["podman", "tag", built, OLD_REF], check=True)
    subprocess.run(["podman", "save", "-q", "-o", os.path.join(imgs, "nrm-old.tar"), OLD_REF], check=True)
    ok = check(node.ready(600) is not None, "the Node %s registers and turns Ready" % nodelib.NODE)
    if not ok:
        node.fail()
    node.import_nrm()
    rc, out = node.guest("cd %s && ctr -n k8s.io images import nrm-old.tar" % imgs, timeout=600)
    check(rc == 0, "%s's image imported on the node: %s" % (OLD, out.strip()[-200:]))

    # 0.1.0 as its own docs said: its manifest, naming its image.
    with open(os.path.join(old_dir, "deploy", "kubernetes", "nrm.yaml")) as fh:
        manifest = fh.read()
    if "image: nrm:latest" not in manifest:
        raise SystemExit("FAIL %s's nrm.yaml names no image nrm:latest" % OLD)
    c.kubectl("apply", "-f", "-", stdin=manifest.replace("image: nrm:latest", "image: nrm:" + OLD_VERSION))
    pod = c.nrm_pod(nodelib.NODE, timeout=300)
    ok = pod and wait_for(lambda: node.pod_ready(clusterlib.NAMESPACE, pod), 400, 2)
    check(ok, "nrm %s's DaemonSet pod turns Ready on the node (%.0f s after the start)" % (OLD_VERSION,
                                                                                           time.time() - t0))
    if not ok:
        node.fail()
    c.kubectl("apply", "-f", "-", stdin=nodelib.plain_pod("plain"))
    c.kubectl("apply", "-f", "-", stdin=nodelib.claim_example())
    if not check(node.wait_running(nodelib.CLAIMED, "plain"), "the example's pod and a pod without a claim run"):
        node.fail()
    online = node.online()
    first = node.view("default", nodelib.CLAIMED, "app")
    check(len(clusterlib.cpulist(first.get("Cpus_allowed_list", ""))) == 2,
          "the claimed container has 2 CPUs under %s: %s" % (OLD_VERSION, first.get("Cpus_allowed_list")))
    # A second claimed pod prepared by 0.1.0 and unprepared by this tree.
    c.kubectl("apply", "-f", "-", stdin=nodelib.claim_example(name="prepared-by-old"))
    check(node.wait_running("prepared-by-old"), "a second claimed pod runs under %s" % OLD_VERSION)
    second = node.cpus("default", "prepared-by-old", "app")

    def image():
        pods = nodelib.nrm_pods(node)
        return pods[0]["spec"]["containers"][0]["image"] if len(pods) == 1 else None

    # The upgrade: this tree's manifest applied over 0.1.0's.
    t = time.time()
    old = nodelib.nrm_pods(node)[0]["metadata"]["uid"]
    clusterlib.Cluster.install_nrm(c)
    new = nodelib.nrm_ready_again(node, old_uid=old, timeout=600)
    check(new and image() == "nrm:latest", "upgraded: this tree's pod (image %s) took the node over from %s's "
          "and the old one is gone (%.0f s)" % (image(), OLD_VERSION, time.time() - t))
    if not new:
        node.fail()
    # Deleted first: after() counts the first claim alone in the pool.
    c.kubectl("delete", "pod", "prepared-by-old", "--wait=true", "--timeout=300s")
    mine = clusterlib.cpulist(first["Cpus_allowed_list"])
    back = wait_for(lambda: node.cpus("default", "plain", "c") == online - mine, 120, 3)
    check(back, "the claim %s prepared (CPUs %s) is unprepared by this tree: its CPUs are back in the pool"
          % (OLD_VERSION, sorted(second)))
    nodelib.after(node, "upgrade from " + OLD_VERSION, first, online)
    # This tree's claim, prepared before the rollback, unprepared by 0.1.0.
    c.kubectl("apply", "-f", "-", stdin=nodelib.claim_example(name="prepared-by-new"))
    check(node.wait_running("prepared-by-new"), "a claimed pod runs under this tree")

    # The rollback, as docs/install.md says.
    t = time.time()
    old = nodelib.nrm_pods(node)[0]["metadata"]["uid"]
    c.kubectl("-n", clusterlib.NAMESPACE, "rollout", "undo", "daemonset/nrm")
    new = nodelib.nrm_ready_again(node, old_uid=old, timeout=600)
    check(new and image() == "nrm:" + OLD_VERSION, "rolled back: %s's pod (image %s) took the node over again "
          "(%.0f s)" % (OLD_VERSION, image(), time.time() - t))
    if not new:
        node.fail()
    c.kubectl("delete", "pod", "prepared-by-new", "--wait=true", "--timeout=300s")
    back = wait_for(lambda: node.cpus("default", "plain", "c") == online - mine, 120, 3)
    check(back, "the claim this tree prepared is unprepared by %s: its CPUs are back in the pool" % OLD_VERSION)
    nodelib.after(node, "rollback to " + OLD_VERSION, first, online)

    node.finish(t0, "upgrade test")


if __name__ == "__main__":
    main()
