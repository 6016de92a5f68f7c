#!/bin/sh
# Builds nrm's container image (deploy/Containerfile) with podman and no
# registry: a Debian 12 base made with debootstrap (cached), imported with
# `podman import`, then `podman build --pull=never`. Tags nrm:<VERSION> and
# nrm:latest in root's podman storage. Needs root, podman and debootstrap
# (`./scripts/deps.sh`) and Debian's mirror.
#
#   NRM_IMAGE_CACHE   where the base tarball is kept (default /var/cache/nrm-image)
#   NRM_IMAGE_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
#   NRM_IMAGE_NAME    the image name (default nrm)
#
#   scripts/image.sh --source-id   prints the id of the build context (a
#   hash of its files) that the image carries as its label nrm.source: an
#   image whose label matches was built from this tree.
set -eu
cd "$(dirname "$0")/.."

# The build context: the files git tracks and the untracked ones it does not
# ignore; never a tree configured in place or its build folders.
context_files () {
  git ls-files -z --cached --others --exclude-standard \
    | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh
}
source_id () {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    context_files | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  else
    echo none
  fi
}
if [ "${1:-}" = --source-id ]; then source_id; exit 0; fi

CACHE=${NRM_IMAGE_CACHE:-/var/cache/nrm-image}
MIRROR=${NRM_IMAGE_MIRROR:-http://deb.debian.org/debian}
NAME=${NRM_IMAGE_NAME:-nrm}
VERSION=$(cat VERSION)
ARCH=$(dpkg --print-architecture)
# The name changes with the recipe below, so that a stale cache is not used.
BASE_TAR="$CACHE/debian-12-$ARCH-r2.tar"
BASE=localhost/nrm-base:debian-12

for tool in podman debootstrap git tar; do
  command -v "$tool" >/dev/null 2>&1 || { echo "image.sh: $tool is missing: run ./scripts/deps.sh" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "image.sh: run as root (debootstrap and podman's root storage)" >&2; exit 1; }

TMP=$(mktemp -d)
# debootstrap mounts /proc in the new root: unmount before removing it.
cleanup () {
  findmnt -rno TARGET | grep "^$TMP/" | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# runc refuses podman's default rlimits on these machines ("error setting
# rlimit type 7"): lower them in a containers.conf of our own, leaving the
# host's configuration alone.
cat >"$TMP/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
EOF
export CONTAINERS_CONF="$TMP/containers.conf"

# --- the base: Debian 12 minbase, without docs, man pages and locales --------
if [ ! -s "$BASE_TAR" ]; then
  t0=$(date +%s)
  root="$TMP/rootfs"
  echo "image.sh: debootstrap Debian 12 ($ARCH) from $MIRROR"
  debootstrap --variant=minbase --arch="$ARCH" bookworm "$root" "$MIRROR" >"$TMP/debootstrap.log" 2>&1 \
    || { tail -20 "$TMP/debootstrap.log" >&2; [ -f "$root/debootstrap/debootstrap.log" ] && tail -20 "$root/debootstrap/debootstrap.log" >&2; exit 1; }
  cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  # As in Debian's own images: apt keeps no downloaded packages, caches or
  # translations in the layers built on this base.
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
EOF
  # What Debian's -slim images leave out, for packages installed later too.
  cat >"$root/etc/dpkg/dpkg.cfg.d/nrm-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
  find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root/usr/share/man/"* "$root/usr/share/info/"* "$root/usr/share/lintian/"*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin "$root/var/cache/apt/archives/"*.deb \
    "$root/var/log/"*.log "$root/var/log/apt/"* "$root/debootstrap"
  : >"$root/etc/machine-id"
  mkdir -p "$CACHE"
  tar -C "$root" --numeric-owner -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$root"
  echo "image.sh: base $BASE_TAR ($(du -m "$BASE_TAR" | cut -f1) MB) in $(($(date +%s) - t0)) s"
fi

t0=$(date +%s)
podman import --quiet "$BASE_TAR" "$BASE" >/dev/null
echo "image.sh: imported $BASE in $(($(date +%s) - t0)) s"

# --- the build context (context_files). Outside git (an unpacked release),
# the whole tree: the Containerfile refuses one configured in place.
ctx="$TMP/context"
mkdir "$ctx"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  context_files | tar --null -T - -cf - | tar -C "$ctx" -xf -
else
  tar -cf - . | tar -C "$ctx" -xf -
fi

t0=$(date +%s)
podman build --pull=never --network host --label "nrm.source=$(source_id)" \
  --build-arg BASE="$BASE" --build-arg BASE_SLIM="$BASE" \
  -f "$ctx/deploy/Containerfile" -t "$NAME:$VERSION" -t "$NAME:latest" "$ctx"
echo "image.sh: built $NAME:$VERSION in $(($(date +%s) - t0)) s," \
  "$(podman image inspect --format '{{.Size}}' "$NAME:$VERSION" | awk '{printf "%.0f MB", $1 / 1e6}')"
