#!/usr/bin/env bash
# The main job, from a fresh clone: install what is needed, build (or reuse) the
# Kubernetes binaries, start a local cluster whose kube-scheduler calls Quorum,
# submit the example workloads and print where every gang landed.
#
# The cluster keeps running afterwards (stop it with hack/cluster-down.sh);
# pass --down to stop it at the end instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

teardown=0
for arg in "$@"; do
  case "$arg" in
    --down) teardown=1 ;;
    -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $arg" >&2; exit 2 ;;
  esac
done

bash hack/setup-python.sh
bash hack/ensure-tools.sh
bash hack/build-binaries.sh
if ((teardown)); then trap 'bash hack/cluster-down.sh' EXIT; fi
PYTHON="$ROOT/.venv/bin/python" bash hack/cluster-up.sh

export KUBECONFIG="$ROOT/.cache/cluster/kubeconfig"
.venv/bin/python hack/demo.py

if ((teardown)); then
  echo; echo "stopping the cluster (--down)"
else
  echo
  echo "The cluster is still running. Try:"
  echo "  export KUBECONFIG=$ROOT/.cache/cluster/kubeconfig"
  echo "  curl -s http://127.0.0.1:8888/debug/gangs"
  echo "Stop it with: bash hack/cluster-down.sh"
fi
