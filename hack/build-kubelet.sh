#!/usr/bin/env bash
# Build the kubelet of K8S_VERSION into .cache/bin/<K8S_VERSION>/kubelet, for the one real node of
# the install suite (hack/node-up.sh). It comes from the same module set as the control plane
# (hack/tools, or the module hack/build-binaries.sh generated for another version) with the kubelet
# added, in a module of its own under .cache/tools/ so the pinned hack/tools module is unchanged.
# Nothing is rebuilt when the binary exists.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
BIN="$CACHE/bin/$K8S_VERSION/kubelet"
log() { printf '[build-kubelet] %s\n' "$*" >&2; }

# shellcheck source=hack/lib/build-lock.sh
source "$ROOT/hack/lib/build-lock.sh"
build_lock "kubelet-$K8S_VERSION"
[[ -x "$BIN" ]] && { log "kubelet $K8S_VERSION is up to date"; exit 0; }
K8S_VERSION="$K8S_VERSION" bash "$ROOT/hack/build-binaries.sh"   # the control plane's module
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\. ]] || { log "bad K8S_VERSION $K8S_VERSION"; exit 1; }
minor="${BASH_REMATCH[1]}"
src="$ROOT/hack/tools"
grep -q "k8s.io/kubernetes $K8S_VERSION" "$src/go.mod" || src="$CACHE/tools/$K8S_VERSION"
mod="$CACHE/tools/kubelet-$K8S_VERSION"
mkdir -p "$mod"
if [[ ! -s "$mod/go.sum" ]]; then
  log "preparing the kubelet's module from ${src#"$ROOT"/}"
  cp "$src/go.mod" "$src/go.sum" "$mod/"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' >"$mod/tools.go"
  # The kubelet needs staging modules the control plane does not (cri-streaming since 1.37):
  # replace each one upstream lists by its published release of the same version.
  (cd "$mod" && go mod edit -replace "k8s.io/cri-streaming=k8s.io/cri-streaming@v0.$minor.${K8S_VERSION##*.}" \
     && go mod tidy)
fi
pkg=k8s.io/component-base/version
start=$SECONDS
(cd "$mod" && go build -trimpath -o "$BIN.partial" \
   -ldflags "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
   k8s.io/kubernetes/cmd/kubelet)
mv -f "$BIN.partial" "$BIN"
log "built kubelet $K8S_VERSION in $((SECONDS - start))s"
