#!/usr/bin/env bash
# Stop the local cluster started by hack/cluster-up.sh and delete its state
# (.cache/cluster). Safe to run when nothing is running.
set -euo pipefail

# shellcheck source=hack/lib/cluster-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster-common.sh"

stop_all
if [[ -d "$CLUSTER_DIR" ]]; then
  rm -rf "$CLUSTER_DIR"
  log "removed ${CLUSTER_DIR#"$ROOT"/}"
fi
log "local cluster is down"
