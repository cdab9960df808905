#!/usr/bin/env bash
# Build the Kubernetes cluster-autoscaler with its kwok cloud provider, once per machine, into
# .cache/bin/cluster-autoscaler-<version>/ (like the Kubernetes binaries). The source is the
# pruned release tarball in ../shared/vendor (the Go module proxy does not serve the autoscaler);
# every dependency comes from the module proxy. It builds only with the "kwok" build tag.
#
# Usage: hack/build-autoscaler.sh [--force]
# Environment:
#   AUTOSCALER_VERSION  release to build (default 1.36.1, the last with the kwok provider in tree)
#   AUTOSCALER_SOURCE   the source tarball (default ../shared/vendor/cluster-autoscaler-<v>-kwok-src.tar.gz)
#   QUORUM_CACHE        cache root (default <repo>/.cache)
# Prints the binary's path on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
VERSION="${AUTOSCALER_VERSION:-1.36.1}"
SOURCE="${AUTOSCALER_SOURCE:-$ROOT/../shared/vendor/cluster-autoscaler-$VERSION-kwok-src.tar.gz}"
SHA256_1_36_1="57ed23e6a28af60fd0e01edae890677370ec5ca686555cca56c9acac2d4bf4e9"
BIN_DIR="$CACHE/bin/cluster-autoscaler-$VERSION"
BIN="$BIN_DIR/cluster-autoscaler"

log() { printf '[build-autoscaler] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $arg" ;;
  esac
done

# shellcheck source=hack/lib/build-lock.sh
source "$ROOT/hack/lib/build-lock.sh"
build_lock "autoscaler-$VERSION"
if [[ -x "$BIN" && "$force" != 1 ]]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || die "go is not installed"
[[ -f "$SOURCE" ]] || die "no autoscaler source at $SOURCE (see ../shared/vendor/README.md)"
if [[ "$VERSION" == 1.36.1 ]]; then
  echo "$SHA256_1_36_1  $SOURCE" | sha256sum -c --quiet - || die "$SOURCE: checksum mismatch"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$SOURCE" -C "$work"
started=$SECONDS
log "building cluster-autoscaler $VERSION (kwok provider); a cold build takes a few minutes"
mkdir -p "$BIN_DIR.partial"
(cd "$work/cluster-autoscaler" && go build -tags kwok -trimpath -ldflags "-s -w" \
  -o "$BIN_DIR.partial/cluster-autoscaler" .)
rm -rf "$BIN_DIR"
mv "$BIN_DIR.partial" "$BIN_DIR"
log "built in $((SECONDS - started))s: $BIN"
echo "$BIN"
