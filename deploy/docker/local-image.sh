#!/usr/bin/env bash
# Builds the quorumfence image on a machine whose build containers reach no package registry (CI's, for one):
# instead of running `npm ci` inside the build, it copies in this checkout's own build, and when no Node image
# can be pulled it makes the base image from Debian packages.
#
#   npm ci && npm run build                    # on the host, first
#   deploy/docker/local-image.sh               # tags quorumfence:local (as root when the base has to be made)
#   deploy/docker/local-image.sh --base-only   # only step 1 (needs no build): prints the base's name
#
# Steps:
#  1. The base: $QUORUMFENCE_BASE_IMAGE when set; else the Dockerfile's default Node image when the engine
#     already has it; else quorumfence-base:trixie, made once and kept by the engine (a later run reuses it):
#     `debootstrap --variant=minbase trixie`, then `apt-get install nodejs npm` inside it with chroot (Node 20),
#     and `docker import`. That needs root, debootstrap, and Debian's mirror reachable from the host
#     ($DEBIAN_MIRROR overrides debootstrap's default).
#  2. A build context holding package.json, package-lock.json, this checkout's dist/, and a production
#     node_modules/ made by `npm ci --omit=dev` on the host (from npm's cache when it is warm).
#  3. `docker build --target prebuilt` of nodes/Dockerfile on that base, tagged $QUORUMFENCE_IMAGE
#     (default quorumfence:local, the name docker-compose.yml runs).
#
# Environment: QUORUMFENCE_IMAGE, QUORUMFENCE_BASE_IMAGE, DEBIAN_MIRROR (all optional). Prints the image's name
# as its last line. The host's node_modules must suit the base (Linux, glibc, x86-64 or arm64 like the host):
# the native modules (lmdb, blst) are Node-API builds, so any Node >= 20 runs them.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=${QUORUMFENCE_IMAGE:-quorumfence:local}
LOCAL_BASE=quorumfence-base:trixie
DOCKERFILE="$ROOT/nodes/Dockerfile"

log() { printf '[local-image %s] %s\n' "$(date +%T)" "$*" >&2; }
fail() {
  printf 'local-image.sh: %s\n' "$*" >&2
  exit 1
}

base_only=false
case "${1:-}" in
  '') ;;
  --base-only) base_only=true ;;
  *) fail "unknown argument \"$1\" (the only one is --base-only)" ;;
esac

command -v docker >/dev/null 2>&1 || fail 'docker is not installed (Debian: apt-get install docker.io)'
docker info >/dev/null 2>&1 || fail 'the Docker engine is not running or not reachable (start dockerd)'
$base_only || [ -f "$ROOT/dist/nodes/quorumfence.js" ] \
  || fail "no build in $ROOT/dist: run npm ci && npm run build first"

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The new root, global so that the exit trap still sees it after a failure.
rootfs=""
# Unmounts what debootstrap or this script mounted in the new root, then removes it: rm -rf must never walk
# into the host's /proc, /sys or /dev.
cleanup_rootfs() {
  [ -n "$rootfs" ] || return 0
  local mount
  for mount in dev/pts dev sys proc; do umount "$rootfs/$mount" 2>/dev/null || true; done
  if grep -q " $rootfs/" /proc/mounts; then
    printf 'local-image.sh: %s still has mounts; left in place\n' "$rootfs" >&2
  else
    rm -rf "$rootfs"
  fi
  rootfs=""
}

# Makes quorumfence-base:trixie from Debian packages: a minimal trixie with Node.js and npm from Debian.
make_local_base() {
  [ "$(id -u)" -eq 0 ] || fail "making $LOCAL_BASE needs root (debootstrap and chroot); or set QUORUMFENCE_BASE_IMAGE"
  command -v debootstrap >/dev/null 2>&1 || fail 'debootstrap is not installed (Debian: apt-get install debootstrap)'
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/quorumfence-base.XXXXXX")
  # The root of the new system: apt's unprivileged downloader must be able to enter it.
  chmod 755 "$rootfs"
  trap cleanup_rootfs EXIT
  # Two stages, so that dpkg is configured before it installs anything: the packages are unpacked first,
  # then installed inside the new root without an fsync per file (the root is thrown away once it is
  # imported; a crash means running this again) and without documentation (as Debian's slim images).
  log "debootstrap --variant=minbase trixie, first stage: download and unpack"
  # shellcheck disable=SC2086 # DEBIAN_MIRROR is one word or nothing
  if ! debootstrap --foreign --variant=minbase trixie "$rootfs" ${DEBIAN_MIRROR:-} >/dev/null; then
    tail -n 20 "$rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    fail 'debootstrap (first stage) failed'
  fi
  mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
  echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/quorumfence-unsafe-io"
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/quorumfence-no-docs" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  log 'debootstrap, second stage: install (in the new root)'
  if ! chroot "$rootfs" /debootstrap/debootstrap --second-stage >/dev/null 2>&1; then
    tail -n 20 "$rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    fail 'debootstrap (second stage) failed'
  fi
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  log 'apt-get install nodejs npm (in the new root)'
  if ! chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update && apt-get install -y --no-install-recommends nodejs npm && apt-get clean' \
    >"$rootfs/tmp/apt.log" 2>&1; then
    tail -n 20 "$rootfs/tmp/apt.log" >&2
    fail 'apt-get install nodejs npm failed in the new root'
  fi
  umount "$rootfs/proc"
  rm -rf "$rootfs"/tmp/apt.log "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs/etc/resolv.conf" \
    "$rootfs/etc/dpkg/dpkg.cfg.d/quorumfence-unsafe-io"
  log "docker import as $LOCAL_BASE"
  tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["node"]' \
    --change 'LABEL org.quorumfence.base=debootstrap-trixie' \
    - "$LOCAL_BASE" >/dev/null || fail 'docker import failed'
  cleanup_rootfs
  trap - EXIT
}

# 1. The base.
default_base=$(sed -n 's/^ARG BASE_IMAGE=//p' "$DOCKERFILE")
[ -n "$default_base" ] || fail "$DOCKERFILE has no ARG BASE_IMAGE line"
if [ -n "${QUORUMFENCE_BASE_IMAGE:-}" ]; then
  base=$QUORUMFENCE_BASE_IMAGE
  has_image "$base" || fail "QUORUMFENCE_BASE_IMAGE=$base is not in the engine (docker pull or docker load it)"
elif has_image "$default_base"; then
  base=$default_base
elif has_image "$LOCAL_BASE"; then
  base=$LOCAL_BASE
  log "reusing $LOCAL_BASE"
else
  make_local_base
  base=$LOCAL_BASE
fi
node_version=$(docker run --rm --network none --entrypoint node "$base" --version) || fail "$base has no working node"
case "$node_version" in
  v1[0-9].*) fail "$base has Node $node_version; quorumfence needs Node >= 20" ;;
esac
log "base $base (Node $node_version)"
if $base_only; then
  echo "$base"
  exit 0
fi

# 2. The build context: the host's build and production dependencies.
context=$(mktemp -d "${TMPDIR:-/tmp}/quorumfence-image.XXXXXX")
trap 'rm -rf "$context"' EXIT
cp "$ROOT/package.json" "$ROOT/package-lock.json" "$context/"
cp -R "$ROOT/dist" "$context/dist"
log 'npm ci --omit=dev (production node_modules)'
(cd "$context" && npm ci --omit=dev --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null) \
  || fail 'npm ci --omit=dev failed on the host'

# 3. The image.
log "docker build --target prebuilt -t $IMAGE"
docker build --quiet --force-rm --file "$DOCKERFILE" --target prebuilt --build-arg "BASE_IMAGE=$base" \
  --label org.quorumfence.built-by=local-image.sh --tag "$IMAGE" "$context" >/dev/null \
  || fail 'docker build failed'
echo "$IMAGE"
