#!/bin/sh
# Smoke checks of the container image that scripts/image.sh builds, run with
# podman as root:
#   - `nrm --help` and `nrm version` in the image;
#   - `nrm slices` on a recorded machine (tests/topologies mounted), the same
#     as the host's nrm prints when NRM names one;
#   - the DaemonSet's init container (its script read from
#     deploy/kubernetes/nrm.yaml) copies nrm-hook to the state dir, and the
#     copy is static and runs on the host;
#   - `nrm plugin` with the DaemonSet's arguments, config file and mounts
#     (temporary dirs bound at /var/lib/kubelet, its plugins and
#     plugins_registry, /var/run/cdi, /var/lib/nrm, /etc/nrm) against the real
#     kube-apiserver of tests/cluster on the host's loopback (--network host),
#     as the DaemonSet's ServiceAccount with a token bound to its pod on the
#     node and nrm.yaml's RBAC (tests/image/serve-api.py): it publishes its
#     slices, serves /healthz, and a prepare and an unprepare from the host
#     (tests/plugin/dra-client) on the socket it created work; SIGTERM ends
#     it with 0 and its sockets gone.
#
#   tests/image/smoke.sh [IMAGE]     IMAGE: default nrm:latest
#   NRM_DRA_CLIENT: the dra-client program (default tests/plugin/dra-client)
#   NRM: a host build of nrm to compare `nrm slices` with (optional)
# Exits 77 when podman, root, the image or dra-client is missing, or when the
# upstream binaries cannot be built (no Go).
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$(pwd)
IMAGE=${1:-nrm:latest}
DRA_CLIENT=${NRM_DRA_CLIENT:-$SRC/tests/plugin/dra-client}
TOPO=AMD-19h-Zen4-2xEpyc-9654.xml
NODE=smoke-1

skip () { echo "SKIP: $*"; exit 77; }
command -v podman >/dev/null 2>&1 || skip "podman is not installed (./scripts/deps.sh)"
[ "$(id -u)" -eq 0 ] || skip "needs root (the image is in root's podman storage)"
[ -x "$DRA_CLIENT" ] || skip "no dra-client at $DRA_CLIENT (make tests/plugin/dra-client, or set NRM_DRA_CLIENT)"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing (the control plane's driver, tests/image/serve-api.py)"

TMP=$(mktemp -d /tmp/nrm-image.XXXXXX)
CTR=nrm-smoke-$$
API_PID=
cleanup () {
  podman rm -f -t 0 "$CTR" >/dev/null 2>&1
  [ -n "$API_PID" ] && kill "$API_PID" 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# runc refuses podman's default rlimits on these machines: the same private
# containers.conf as scripts/image.sh.
cat >"$TMP/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
EOF
export CONTAINERS_CONF="$TMP/containers.conf"
podman image exists "$IMAGE" || skip "no image $IMAGE: build it with ./scripts/image.sh"

failures=0
checks=0
fail () { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok () { checks=$((checks + 1)); }
run () { podman run --rm --pull=never --network none "$@"; }

# --- the commands ---------------------------------------------------------------
run "$IMAGE" >"$TMP/help" 2>&1 && grep -q 'nrm plugin' "$TMP/help" && ok \
  || fail "the image's default command (--help): $(head -5 "$TMP/help")"
run "$IMAGE" --help >"$TMP/help" 2>&1 && grep -q -- '--kubelet-dir' "$TMP/help" && ok \
  || fail "nrm --help: $(head -5 "$TMP/help")"
run "$IMAGE" version >"$TMP/version" 2>&1 && grep -qF "$(cat VERSION)" "$TMP/version" && ok \
  || fail "nrm version is not $(cat VERSION): $(cat "$TMP/version")"

run -v "$SRC/tests/topologies:/topologies:ro" "$IMAGE" slices --topology "/topologies/$TOPO" --node-name "$NODE" \
  >"$TMP/slices" 2>"$TMP/err" && ok || fail "nrm slices --topology: $(cat "$TMP/err")"
python3 - "$TMP/slices" <<'EOF' && ok || fail "nrm slices in the image: not a List of the ResourceSlices of cpu.nrm.io (with devices) and memory.nrm.io"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "List" and d["items"], d
assert all(i["kind"] == "ResourceSlice" for i in d["items"])
drivers = {i["spec"]["driver"] for i in d["items"]}
assert {"cpu.nrm.io", "memory.nrm.io"} <= drivers, drivers
assert any(i["spec"].get("devices") for i in d["items"] if i["spec"]["driver"] == "cpu.nrm.io")
EOF
if [ -n "${NRM:-}" ]; then
  "$NRM" slices --topology "tests/topologies/$TOPO" --node-name "$NODE" >"$TMP/slices.host" 2>&1
  cmp -s "$TMP/slices" "$TMP/slices.host" && ok || fail "nrm slices differs from the host's $NRM"
fi

# --- the init container: nrm-hook onto the host -----------------------------------
# The install-hook container's script, as the DaemonSet runs it.
awk '/- name: install-hook/ {f = 1} f && /^        - \|$/ {s = 1; next}
     s && /^          / {sub(/^          /, ""); print; next} s {exit}' deploy/kubernetes/nrm.yaml >"$TMP/install-hook.sh"
grep -q 'nrm-hook' "$TMP/install-hook.sh" && ok || fail "no install-hook script in deploy/kubernetes/nrm.yaml"
mkdir -p "$TMP/state"
run -v "$TMP/state:/var/lib/nrm" -v "$TMP/install-hook.sh:/install-hook.sh:ro" --entrypoint /bin/sh "$IMAGE" \
  /install-hook.sh >"$TMP/init" 2>&1 && ok || fail "the init container: $(cat "$TMP/init")"
hook="$TMP/state/bin/nrm-hook"
if [ -x "$hook" ]; then
  ! readelf -lW "$hook" | grep -q INTERP && ! readelf -dW "$hook" | grep -q '(NEEDED)' && ok \
    || fail "the image's nrm-hook is not static: $(ldd "$hook" 2>&1 | head -5)"
  "$hook" --help >/dev/null 2>&1 && ok || fail "the image's nrm-hook does not run on the host"
else
  fail "the init container left no executable $hook"
fi

# --- nrm plugin in the container, the DaemonSet's way -------------------------------
# Its arguments and config file, from deploy/kubernetes/nrm.yaml.
# (read as YAML: the chart may quote a value)
# $(VAR) in an argument is expanded from the container's env as the kubelet
# does: fieldRefs from this pod's stand-ins, a reference to no env var kept.
POD_UID_=$(cat /proc/sys/kernel/random/uuid)
python3 -c '
import re, sys, yaml
fields = {"metadata.uid": sys.argv[2], "spec.nodeName": sys.argv[3]}
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "DaemonSet" and doc["metadata"]["name"] == "nrm":
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "nrm":
                env = {}
                for e in c.get("env", []):
                    if "value" in e:
                        env[e["name"]] = e["value"]
                    elif "fieldRef" in e.get("valueFrom", {}):
                        env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
                expand = lambda m: env.get(m.group(1), m.group(0))
                print("\n".join(re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", expand, a) for a in c["args"]))' \
  deploy/kubernetes/nrm.yaml "$POD_UID_" "$NODE" >"$TMP/args"
grep -q '\$(' "$TMP/args" && fail "an argument of the DaemonSet names no env var: $(grep '\$(' "$TMP/args")" || ok
mkdir -p "$TMP/config"
awk '/^  config.json: \|$/ {f = 1; next} f && /^    / {sub(/^    /, ""); print; next} f {exit}' \
  deploy/kubernetes/nrm.yaml >"$TMP/config/config.json"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$TMP/config/config.json" 2>/dev/null && ok \
  || fail "no config.json in the ConfigMap of deploy/kubernetes/nrm.yaml"

mkdir -p "$TMP/api" "$TMP/kubelet/plugins" "$TMP/kubelet/plugins_registry" "$TMP/cdi"
# The real control plane of tests/cluster (its binaries built or reused).
python3 tests/image/serve-api.py "$TMP/api" "$NODE" default smoke >"$TMP/api.log" 2>&1 &
API_PID=$!
for _ in $(seq 1800); do [ -s "$TMP/api/kubeconfig" ] && break; kill -0 "$API_PID" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "$API_PID" 2>/dev/null && ! [ -s "$TMP/api/kubeconfig" ]; then
  wait "$API_PID"; [ $? -eq 77 ] && skip "no control plane: $(grep SKIP "$TMP/api.log")"
fi
port=$(cat "$TMP/api/http-port" 2>/dev/null)
[ -s "$TMP/api/kubeconfig" ] && [ -n "$port" ] || { fail "the control plane did not start: $(tail -20 "$TMP/api.log")"; finish_early=1; }

# The DaemonSet's arguments; its --http-address on a free loopback port, as
# the container shares the host's network here.
set --
prev=
while IFS= read -r a; do
  [ "$prev" = --http-address ] && a="127.0.0.1:${port:-0}"
  set -- "$@" "$a"; prev=$a
done <"$TMP/args"
[ "$#" -gt 4 ] && [ "$1" = plugin ] && ok || fail "no nrm plugin arguments in the DaemonSet: $*"

if [ -z "${finish_early:-}" ]; then
  # The recorded machine stands in for the host (the plugin then leaves the
  # host's cgroups alone: no /sys/fs/cgroup, /sys or /dev mounts).
  podman run -d --name "$CTR" --pull=never --network host -e NODE_NAME="$NODE" -e POD_UID="$POD_UID_" \
    -v "$TMP/config:/etc/nrm:ro" \
    -v "$TMP/kubelet:/var/lib/kubelet:ro" \
    -v "$TMP/kubelet/plugins:/var/lib/kubelet/plugins" \
    -v "$TMP/kubelet/plugins_registry:/var/lib/kubelet/plugins_registry" \
    -v "$TMP/cdi:/var/run/cdi" \
    -v "$TMP/state:/var/lib/nrm" \
    -v "$TMP/api:/etc/nrm-api:ro" \
    -v "$SRC/tests/topologies:/topologies:ro" \
    --entrypoint /usr/bin/nrm "$IMAGE" "$@" --kubeconfig /etc/nrm-api/kubeconfig --topology "/topologies/$TOPO" \
    >"$TMP/ctr" 2>&1 && ok || fail "podman run nrm plugin: $(cat "$TMP/ctr")"

  # The DaemonSet runs with --instance-uid (rolling updates): the pod UID is in
  # every socket's name.
  sock="$TMP/kubelet/plugins/cpu.nrm.io/dra-$POD_UID_.sock"
  for _ in $(seq 300); do
    [ -S "$sock" ] && [ -S "$TMP/kubelet/plugins_registry/cpu.nrm.io-$POD_UID_-reg.sock" ] && [ -s "$TMP/api/device" ] && break
    podman container exists "$CTR" || break
    sleep 0.1
  done
  [ -S "$sock" ] && ok || fail "no DRA socket $sock from the container: $(podman logs "$CTR" 2>&1 | tail -5)"
  [ -S "$TMP/kubelet/plugins_registry/cpu.nrm.io-$POD_UID_-reg.sock" ] && [ -S "$TMP/kubelet/plugins_registry/memory.nrm.io-$POD_UID_-reg.sock" ] \
    && ok || fail "no registration sockets: $(ls "$TMP/kubelet/plugins_registry")"
  [ -s "$TMP/api/device" ] && ok || fail "no cpu.nrm.io slices published to the API server: $(tail -5 "$TMP/api.log")"

  UID_=$(cat "$TMP/api/uid" 2>/dev/null)
  python3 - "$port" <<'EOF' && ok || fail "GET /healthz on 127.0.0.1:$port is not 200"
import sys, urllib.request
with urllib.request.urlopen("http://127.0.0.1:%s/healthz" % sys.argv[1], timeout=5) as r:
    assert r.status == 200
EOF

  "$DRA_CLIENT" prepare "$sock" default smoke "$UID_" >"$TMP/prepare" 2>"$TMP/err" \
    && grep -qF "cpu.nrm.io/claim=$UID_" "$TMP/prepare" && ok \
    || fail "prepare from the host: $(cat "$TMP/err" "$TMP/prepare") $(podman logs "$CTR" 2>&1 | tail -5)"
  spec=$(ls "$TMP/cdi/"*"$UID_"*.json 2>/dev/null | head -1)
  [ -n "$spec" ] && grep -qF '/var/lib/nrm/bin/nrm-hook' "$spec" && ok \
    || fail "no CDI spec naming /var/lib/nrm/bin/nrm-hook in $TMP/cdi: $(ls "$TMP/cdi")"
  "$DRA_CLIENT" unprepare "$sock" "$UID_" >/dev/null 2>"$TMP/err" && ok || fail "unprepare: $(cat "$TMP/err")"
  ! ls "$TMP/cdi/"*"$UID_"*.json >/dev/null 2>&1 && ok || fail "the CDI spec is still there after unprepare"

  podman stop -t 30 "$CTR" >/dev/null 2>&1
  rc=$(podman inspect --format '{{.State.ExitCode}}' "$CTR" 2>/dev/null)
  [ "$rc" = 0 ] && ok || fail "nrm plugin exited $rc on SIGTERM: $(podman logs "$CTR" 2>&1 | tail -5)"
  [ ! -e "$sock" ] && [ ! -e "$TMP/kubelet/plugins_registry/cpu.nrm.io-$POD_UID_-reg.sock" ] && ok \
    || fail "sockets left after SIGTERM: $(ls -R "$TMP/kubelet")"
  podman logs "$CTR" 2>&1 | grep -q '"level":"error"' && fail "errors in the plugin's log: $(podman logs "$CTR" 2>&1 | grep '"level":"error"' | head -3)" || ok
fi

kill "$API_PID" 2>/dev/null; wait "$API_PID" 2>/dev/null; API_PID=
python3 - "$TMP/api/summary" <<'EOF' && ok || fail "the API server: $(cat "$TMP/api/summary" 2>/dev/null) $(tail -5 "$TMP/api.log")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["errors"] == 0 and {"cpu.nrm.io", "memory.nrm.io"} <= set(s["drivers"]), s
EOF

echo "$checks passed, $failures failed"
[ "$failures" -eq 0 ]
