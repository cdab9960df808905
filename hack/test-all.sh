#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what it needs, then runs
#   1. ruff and mypy,
#   2. the unit tests,
#   3. the end-to-end suite against a local cluster (real etcd, kube-apiserver,
#      kube-controller-manager, kube-scheduler and kwok nodes) whose scheduler
#      calls Quorum, and the install checks of the Helm chart and the kustomize
#      manifests against it. The cluster is stopped afterwards.
# Set E2E=0 to skip step 3 (for a quick local run; CI always runs it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n== %s\n' "$*"; }

step "installing Python dependencies into .venv"
bash hack/setup-python.sh
bash hack/ensure-tools.sh

step "lint, layers and type checks"
.venv/bin/ruff check extender tests bench hack examples   # includes C901: complexity <= 15
.venv/bin/lint-imports                                      # the layer contract in pyproject.toml
.venv/bin/mypy

step "unit tests"
.venv/bin/python -m pytest tests/unit -q

if [[ "${E2E:-1}" == "0" ]]; then
  echo "E2E=0: skipping the end-to-end suite"
  exit 0
fi

step "building (or reusing) the Kubernetes binaries and helm"
bash hack/build-binaries.sh
QUORUM_HELM="$(bash hack/build-helm.sh)"   # the install tests lint and render charts/quorum with it
export QUORUM_HELM

step "starting the local cluster"
trap 'bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
# The end-to-end configuration shortens the requeue backoff so lifecycle scenarios run in seconds.
QUORUM_CONFIG="$ROOT/tests/e2e/quorum-e2e.yaml" PYTHON="$ROOT/.venv/bin/python" bash hack/cluster-up.sh

step "end-to-end tests"
KUBECONFIG="$ROOT/.cache/cluster/kubeconfig" .venv/bin/python -m pytest -m e2e tests/e2e -q -rA
