#!/usr/bin/env bash
# Build Kueue's controller manager (sigs.k8s.io/kueue at KUEUE_VERSION) into
# .cache/bin/kueue-<version>/kueue, keeping its source, whose CRDs and webhook manifests the local
# cluster applies (cluster-up --kueue, hack/lib/kueue.sh), in .cache/tools/kueue-<version>/
# (hack/lib/build-module.sh). Prints the binary's path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
# shellcheck source=hack/lib/build-module.sh
source "$ROOT/hack/lib/build-module.sh"
build_module kueue sigs.k8s.io/kueue "$KUEUE_VERSION" ./cmd/kueue \
  "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
