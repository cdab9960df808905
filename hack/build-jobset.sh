#!/usr/bin/env bash
# Build the JobSet controller (sigs.k8s.io/jobset at JOBSET_VERSION) into
# .cache/bin/jobset-<version>/jobset and keep its module's source, whose CRD and webhook manifests
# the local cluster applies (cluster-up --jobset, hack/lib/jobset.sh), in .cache/tools/jobset-<version>/.
# The Go module proxy serves the module's exact versions but refuses its version listing, which
# `go install module@version` asks for: so the module is downloaded by its exact version and built
# in a copy of its source, with its own go.mod and go.sum. Nothing is rebuilt when the binary exists.
# Prints the binary's path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
BIN_DIR="$CACHE/bin/jobset-$JOBSET_VERSION"
SRC="$CACHE/tools/jobset-$JOBSET_VERSION"
log() { printf '[build-jobset] %s\n' "$*" >&2; }
# shellcheck source=hack/lib/build-lock.sh
source "$ROOT/hack/lib/build-lock.sh"
build_lock "jobset-$JOBSET_VERSION"

if [[ ! -x "$BIN_DIR/jobset" ]]; then
  command -v go >/dev/null || { log "go is not installed"; exit 1; }
  started=$SECONDS
  if [[ ! -f "$SRC/go.mod" ]]; then
    log "downloading sigs.k8s.io/jobset $JOBSET_VERSION"
    dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -f "$dir/go.mod" ]] || { log "the module's source was not downloaded"; exit 1; }
    mkdir -p "$(dirname "$SRC")"
    rm -rf "$SRC.partial" && cp -r "$dir" "$SRC.partial" && chmod -R u+w "$SRC.partial"
    mv "$SRC.partial" "$SRC"
  fi
  log "building the JobSet controller $JOBSET_VERSION"
  mkdir -p "$BIN_DIR.partial"
  (cd "$SRC" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
     -o "$BIN_DIR.partial/jobset" .)
  rm -rf "$BIN_DIR" && mv "$BIN_DIR.partial" "$BIN_DIR"
  log "built in $((SECONDS - started))s"
fi
echo "$BIN_DIR/jobset"
