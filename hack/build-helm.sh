#!/usr/bin/env bash
# Build helm from its Go module into .cache/bin/helm-<version>/helm (once per machine; nothing is
# rebuilt when it exists) and print its path. The test command lints and renders charts/quorum
# with it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
BIN_DIR="$CACHE/bin/helm-$HELM_VERSION"
# shellcheck source=hack/lib/build-lock.sh
source "$ROOT/hack/lib/build-lock.sh"
build_lock "helm-$HELM_VERSION"
if [[ ! -x "$BIN_DIR/helm" ]]; then
  command -v go >/dev/null || { echo "build-helm: go is not installed" >&2; exit 1; }
  echo "[build-helm] building helm $HELM_VERSION (go install helm.sh/helm/v3/cmd/helm)" >&2
  started=$SECONDS
  mkdir -p "$BIN_DIR.partial"
  GOBIN="$BIN_DIR.partial" GOFLAGS=-trimpath go install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$BIN_DIR" && mv "$BIN_DIR.partial" "$BIN_DIR"
  echo "[build-helm] built in $((SECONDS - started))s" >&2
fi
echo "$BIN_DIR/helm"
