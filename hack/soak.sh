#!/usr/bin/env bash
# The long contention soak with faults, against the local cluster (hack/cluster-up.sh first):
# gangs at 3x GPU oversubscription with churn; Quorum SIGKILLs, watch connection cuts (through a
# loopback proxy), kube-scheduler kills and apiserver restarts in turn; a watcher checks for
# partial gangs (> 5 s), deadlocks (> 60 s) and leaked reservations. Bounded in time; prints a JSON
# summary (also written to .cache/e2e/soak.json) and exits non-zero on any violation or leak.
#
# Usage: hack/soak.sh [--duration SECONDS (780)] [--fault-every SECONDS (30)] [--seed N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export KUBECONFIG="${KUBECONFIG:-$ROOT/.cache/cluster/kubeconfig}"
mkdir -p .cache/e2e
exec "${PYTHON:-$ROOT/.venv/bin/python}" -m tests.e2e.soak --json .cache/e2e/soak.json "$@"
