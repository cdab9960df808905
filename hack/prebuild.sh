#!/usr/bin/env bash
# The binaries the test command's suites need, built ahead: hack/test-all.sh starts this in the
# background at low priority, so that module downloads (network) and compiles overlap the checks,
# the unit tests, the image builds and the first suites. That matters with cold caches: CI may start
# with none, and the Go builds are most of a cold run. Each build takes its lock
# (hack/lib/build-lock.sh): a suite that needs a binary sooner waits for the build under way instead
# of starting a second one. A failure here is only logged: the suite that needs the binary builds it
# again, and fails there, where the failure is reported.
#   bash hack/prebuild.sh      (K8S_VERSION, K8S_VERSIONS as hack/lib/versions.sh)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
read -ra versions <<<"$K8S_VERSIONS"

built() { printf '[prebuild] %s: %s at %ss\n' "$1" "$([[ $2 == 0 ]] && echo built || echo "FAILED ($2)")" "$SECONDS" >&2; }

# In the order the suites need them (hack/test-all.sh): helm, the default version's binaries and the
# JobSet controller (the end-to-end suite), the kubelet (the install suite; quick once the default
# version's modules are built), the autoscaler, Kueue (the controllers suite), and last the other
# versions (the API-version suites, which run last so that their builds, the longest from cold
# caches, overlap every suite before them).
bash hack/build-helm.sh >/dev/null; built helm $?
K8S_VERSION="$K8S_VERSION" bash hack/build-binaries.sh; built "$K8S_VERSION" $?
bash hack/build-jobset.sh >/dev/null; built "jobset $JOBSET_VERSION" $?
K8S_VERSION="$K8S_VERSION" bash hack/build-kubelet.sh; built "kubelet $K8S_VERSION" $?
bash hack/build-autoscaler.sh >/dev/null; built cluster-autoscaler $?
bash hack/build-kueue.sh >/dev/null; built "kueue $KUEUE_VERSION" $?
for version in "${versions[@]}"; do
  [[ "$version" != "$K8S_VERSION" ]] || continue
  K8S_VERSION="$version" bash hack/build-binaries.sh; built "$version" $?
done
