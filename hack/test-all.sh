#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what it needs, then runs
#   1. ruff and mypy,
#   2. the unit tests,
#   3. the end-to-end suite against a local cluster (real etcd, kube-apiserver,
#      kube-controller-manager, kube-scheduler and kwok nodes, and the real JobSet
#      controller) whose scheduler calls Quorum, and the install checks of the Helm
#      chart and the kustomize manifests against it, and the images built from the Dockerfile run against it (podman),
#      on the default Kubernetes version (K8S_VERSION),
#   4. the Job-workload suite (the Job controller writes the PodGroups: WorkloadWithJob on), the
#      install suite (the chart and the manifests installed on a cluster with one real node),
#      the autoscaler suite and the controllers suite (the real Kueue and JobSet), each on a
#      cluster of its own,
#   5. the API-version suite (tests marked api_suite) on every other version of
#      K8S_VERSIONS (hack/lib/versions.sh), each on a cluster of its own: last, so that those
#      versions' builds (the longest with cold caches) overlap every suite before them.
# Every cluster is started with the CRDs of tests/e2e/crds and stopped afterwards.
# A failing or empty (pytest exit code 5) test run fails the script, with the exit
# code of the first one that failed; the other versions still run, and a summary
# line per version (build and test wall time) closes the output.
# Set E2E=0 to skip steps 3 and 4 (for a quick local run; CI always runs them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n== %s\n' "$*"; }

step "installing Python dependencies into .venv"
bash hack/setup-python.sh
bash hack/ensure-tools.sh

# The suites' binaries are built in the background meanwhile (hack/prebuild.sh; its log is
# .cache/prebuild.log): with cold caches their downloads and compiles overlap everything below.
prebuild_pid=""
stop_prebuild() { [[ -z "$prebuild_pid" ]] || kill -- "-$prebuild_pid" 2>/dev/null || true; }
trap stop_prebuild EXIT
if [[ "${E2E:-1}" != "0" ]]; then
  mkdir -p .cache
  setsid nice -n 19 bash hack/prebuild.sh >.cache/prebuild.log 2>&1 &
  prebuild_pid=$!
fi

step "lint, layers and type checks"
.venv/bin/ruff check extender tests bench hack examples   # includes C901: complexity <= 15
.venv/bin/lint-imports                                      # the import contracts in pyproject.toml
.venv/bin/python hack/check-complexity.py                   # radon complexity <= 15, modules <= 400 lines
.venv/bin/mypy

step "unit tests"
.venv/bin/python -m pytest tests/unit -q -n auto   # one worker per core (pytest-xdist)

if [[ "${E2E:-1}" == "0" ]]; then
  echo "E2E=0: skipping the end-to-end suite"
  exit 0
fi

# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
read -ra versions <<<"$K8S_VERSIONS"

step "building (or reusing) helm"
QUORUM_HELM="$(bash hack/build-helm.sh)"   # the install tests lint and render charts/quorum with it
export QUORUM_HELM

step "building (or reusing) the images: quorum:dev and kube-scheduler $K8S_VERSION (podman)"
K8S_VERSION="$K8S_VERSION" bash hack/build-images.sh --sizes   # tests/e2e/test_image.py runs them

trap 'bash hack/cluster-down.sh >/dev/null 2>&1 || true; stop_prebuild' EXIT
summary=()
notes=()
first_rc=0

# start_cluster VERSION TITLE [CLUSTER-UP ARGS...] starts the local cluster, its output also kept in
# .cache/cluster-up.log. A start that fails (a component that does not come up: the harness, not
# Quorum's behaviour) is tried once more from scratch; either way the failed start's last lines go
# to the notes printed after the summary, where a truncated CI log still shows them.
start_cluster() {
  local version="$1" title="$2" attempt rc=0
  shift 2
  for attempt in 1 2; do
    rc=0
    K8S_VERSION="$version" QUORUM_CONFIG="$ROOT/tests/e2e/quorum-e2e.yaml" PYTHON="$ROOT/.venv/bin/python" \
      bash hack/cluster-up.sh --manifests tests/e2e/crds "$@" 2>&1 | tee .cache/cluster-up.log || rc=$?
    ((rc != 0)) || return 0
    notes+=("$version $title: cluster-up attempt $attempt failed (exit code $rc); its last lines:")
    notes+=("$(tail -n 40 .cache/cluster-up.log | sed 's/^/    /')")
    K8S_VERSION="$version" bash hack/cluster-down.sh >/dev/null 2>&1 || true
  done
  return "$rc"
}

# e2e_on VERSION TITLE MARKER builds (or reuses) VERSION's binaries, starts the local cluster on
# it, runs the end-to-end tests selected by MARKER, stops the cluster and adds a summary line.
# Returns the exit code of the first step that failed (pytest's own code when the tests did).
# e2e_on VERSION TITLE MARKER [CLUSTER-UP ARGS...]
e2e_on() {
  local version="$1" title="$2" marker="$3" rc=0 t build_s test_s="-" stage=build result
  shift 3
  step "$title on Kubernetes $version: building (or reusing) the binaries"
  t=$SECONDS
  K8S_VERSION="$version" bash hack/build-binaries.sh || rc=$?
  if ((rc == 0)) && [[ " $* " == *" --autoscaler "* ]]; then
    bash hack/build-autoscaler.sh >/dev/null || rc=$?
  fi
  build_s=$((SECONDS - t))
  if ((rc == 0)); then
    t=$SECONDS
    stage=cluster-up
    step "$title on Kubernetes $version: starting the local cluster"
    # The end-to-end configuration shortens the requeue backoff so lifecycle scenarios run in seconds.
    if start_cluster "$version" "$title" "$@"; then
      stage=pytest
      step "$title on Kubernetes $version: pytest -m \"$marker\""
      K8S_VERSION="$version" KUBECONFIG="$ROOT/.cache/cluster/kubeconfig" \
        .venv/bin/python -m pytest -m "$marker" tests/e2e -q -rA || rc=$?
    else
      rc=$?
    fi
    K8S_VERSION="$version" bash hack/cluster-down.sh >/dev/null 2>&1 || true
    test_s=$((SECONDS - t))
  fi
  if ((rc == 0)); then
    result=passed
  elif [[ "$stage" == pytest && "$rc" == 5 ]]; then
    result="FAILED: pytest collected no tests (exit code 5)"
  else
    result="FAILED in $stage (exit code $rc)"
  fi
  summary+=("$(printf '%-8s %-18s build %5ss  cluster+tests %5ss  %s' \
    "$version" "$title" "$build_s" "$test_s" "$result")")
  return "$rc"
}

rc=0
e2e_on "$K8S_VERSION" "end-to-end suite" e2e --jobset || rc=$?
((first_rc != 0)) || first_rc=$rc

# Jobs whose PodGroup the Job controller writes, as with WorkloadWithJob (alpha in 1.37) on
# (tests/e2e/test_job_workloads.py).
rc=0
e2e_on "$K8S_VERSION" "Job-workload suite" job_workloads --job-workloads --blocks 1 --racks 2 --nodes 4 \
  || rc=$?
((first_rc != 0)) || first_rc=$rc

# Quorum installed as users install it: the Helm chart and the kustomize manifests on a cluster with
# one real node (kubelet + containerd) and no process-started scheduler (tests/e2e/test_helm_install.py).
rc=0
e2e_on "$K8S_VERSION" "install suite" install --real-node --no-scheduler --blocks 1 --racks 2 --nodes 4 \
  || rc=$?
((first_rc != 0)) || first_rc=$rc

# Gangs on an autoscaled cluster: a real cluster-autoscaler with two rack node groups of at most 6
# nodes, no GPU node at the start (tests/e2e/test_autoscaler.py).
rc=0
AUTOSCALER_MAX=6 AUTOSCALER_BOOTING=1 e2e_on "$K8S_VERSION" "autoscaler suite" autoscaler --autoscaler --nodes 0 --blocks 1 --racks 2 \
  || rc=$?
((first_rc != 0)) || first_rc=$rc

# The controllers that make gangs in users' clusters, for real: Kueue (v0.17.0) admitting Jobs and
# JobSets with topology-aware scheduling and waitForPodsReady (15 s), and JobSet's startup barrier
# (tests/e2e/test_kueue.py, tests/e2e/test_jobset_barrier.py).
rc=0
KUEUE_PODS_READY_TIMEOUT=15s e2e_on "$K8S_VERSION" "controllers suite" controllers --jobset --kueue \
  --blocks 1 --racks 2 --nodes 4 || rc=$?
((first_rc != 0)) || first_rc=$rc

# Each API version's gang vocabulary on a cluster of that version; last, so that the builds of the
# other versions (the longest from cold caches) overlap every suite above.
for version in "${versions[@]}"; do
  [[ "$version" != "$K8S_VERSION" ]] || continue
  rc=0
  e2e_on "$version" "API-version suite" "e2e and api_suite" || rc=$?
  ((first_rc != 0)) || first_rc=$rc
done

step "summary"
printf '%s\n' "${summary[@]}"
((${#notes[@]} == 0)) || printf '%s\n' "${notes[@]}"
grep '^\[prebuild\]' .cache/prebuild.log || true
exit "$first_rc"
