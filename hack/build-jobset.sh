#!/usr/bin/env bash
# Build the JobSet controller (sigs.k8s.io/jobset at JOBSET_VERSION) into
# .cache/bin/jobset-<version>/jobset, keeping its source, whose CRD and webhook manifests the local
# cluster applies (cluster-up --jobset, hack/lib/jobset.sh), in .cache/tools/jobset-<version>/
# (hack/lib/build-module.sh). Prints the binary's path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
# shellcheck source=hack/lib/build-module.sh
source "$ROOT/hack/lib/build-module.sh"
build_module jobset sigs.k8s.io/jobset "$JOBSET_VERSION" . \
  "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
