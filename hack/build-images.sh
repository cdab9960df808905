#!/usr/bin/env bash
# Build the images users install, here, with podman and runc:
#   quorum:dev                            from the unchanged Dockerfile
#   registry.k8s.io/kube-scheduler:<ver>  from the locally built kube-scheduler (hack/build-binaries.sh)
#   localhost/quorum-standin/pause:1      the real node's pod sandbox: a static busybox that sleeps
# No container registry can be reached from the test machines, so the Dockerfile's FROM image
# (docker.io/library/python:3.11-slim) is a local stand-in: a Debian bookworm root filesystem with
# Python 3.11 made by mmdebstrap from Debian's packages and imported under that name. The same
# stand-in is the kube-scheduler image's base (it needs glibc; upstream's is distroless). It trusts
# the certificate authorities of the machine that builds it (its CA bundle is copied in), so the
# Dockerfile's `pip install` works wherever the machine's own pip does.
# Images are reused when present; the stand-in's root filesystem is kept in .cache/images/.
#
# Usage: hack/build-images.sh [--sizes]     (--sizes: print each image's size at the end)
# Environment: K8S_VERSION (hack/lib/versions.sh), QUORUM_CACHE (default <repo>/.cache)
# Run podman yourself with the same settings: source hack/lib/podman.sh; podman_cmd images
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
# shellcheck source=hack/lib/podman.sh
source "$ROOT/hack/lib/podman.sh"
CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
IMAGES="$CACHE/images"
STANDIN=docker.io/library/python:3.11-slim
STANDIN_BASE=localhost/quorum-standin/debian-python:bookworm
SCHEDULER="registry.k8s.io/kube-scheduler:$K8S_VERSION"
PAUSE_IMAGE=localhost/quorum-standin/pause:1   # the same name as hack/lib/cluster-common.sh's
log() { printf '[build-images] %s\n' "$*" >&2; }

ensure_podman
mkdir -p "$IMAGES"

if ! podman_cmd image exists "$STANDIN"; then
  rootfs="$IMAGES/debian-bookworm-python3.11.tar"
  if [[ ! -s "$rootfs" ]]; then
    log "making the stand-in base: Debian bookworm + Python 3.11 (mmdebstrap)"
    mmdebstrap --quiet --variant=minbase --format=tar \
      --include=python3.11,python3.11-venv,python-is-python3,ca-certificates \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1"/etc/ssl/certs/ca-certificates.crt' \
      bookworm "$rootfs.partial" http://deb.debian.org/debian
    mv -f "$rootfs.partial" "$rootfs"
  fi
  podman_cmd import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    "$rootfs" "$STANDIN_BASE" >/dev/null
  podman_cmd tag "$STANDIN_BASE" "$STANDIN"
  log "imported the stand-in base as $STANDIN"
fi

log "building quorum:dev from the Dockerfile"
podman_cmd build --quiet --network host -t localhost/quorum:dev -f "$ROOT/Dockerfile" "$ROOT" >/dev/null

if ! podman_cmd image exists "$SCHEDULER"; then
  bin="$CACHE/bin/$K8S_VERSION/kube-scheduler"
  [[ -x "$bin" ]] || K8S_VERSION="$K8S_VERSION" bash "$ROOT/hack/build-binaries.sh"
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' EXIT
  cp "$bin" "$ctx/kube-scheduler"
  log "building $SCHEDULER from the locally built binary"
  podman_cmd build --quiet --build-arg "BASE=$STANDIN_BASE" -t "$SCHEDULER" \
    -f "$ROOT/hack/images/kube-scheduler.Containerfile" "$ctx" >/dev/null
fi

# The builder stages' dangling layers. Pruning is housekeeping and never fails the build: podman's
# image store is shared by every checkout on the machine, and a build that is running elsewhere, or
# one that was killed midway, keeps working containers on the layers it uses; podman then refuses
# to prune (exit 125, "image is in use by a container"). The layers stay until those are gone.
if ! pruned="$(podman_cmd image prune --force 2>&1 >/dev/null)"; then
  log "left the dangling layers in place: ${pruned##*Error: }"
  log "build containers holding them: podman ps --external; remove a dead one with podman rm --force <id>"
fi

# The pod sandbox image of the real node's containerd (hack/lib/real-node.sh): a static busybox that
# sleeps, standing in for registry.k8s.io/pause.
if ! podman_cmd image exists "$PAUSE_IMAGE"; then
  [[ -x /bin/busybox ]] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  ctx="$(mktemp -d)"
  cp /bin/busybox "$ctx/busybox"
  printf 'FROM scratch\nCOPY busybox /busybox\nUSER 65535:65535\nENTRYPOINT ["/busybox", "sleep", "2147483647"]\n' >"$ctx/Containerfile"
  podman_cmd build --quiet -t "$PAUSE_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "built the pod sandbox stand-in $PAUSE_IMAGE"
fi

if [[ "${1:-}" == --sizes ]]; then
  podman_cmd images --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
    | grep -E '^(localhost/quorum:dev|registry.k8s.io/kube-scheduler:|docker.io/library/python:)'
fi
