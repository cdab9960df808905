# The upstream versions the project builds and tests against: the one place to change them.
# Source it; do not run it. Each may be overridden from the environment.
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
K8S_VERSION="${K8S_VERSION:-v1.37.2}"   # newest v1.37 patch whose source the Go module proxy serves
# Every Kubernetes version the test command runs against, one patch per minor (space separated):
# the full end-to-end suite on K8S_VERSION, the API-version suite on each of the others.
K8S_VERSIONS="${K8S_VERSIONS:-v1.35.4 v1.36.3 v1.37.2}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}" # helm, built from its Go module (hack/build-helm.sh)
JOBSET_VERSION="${JOBSET_VERSION:-v0.11.0}" # the JobSet controller, built from its Go module (hack/build-jobset.sh)
KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}" # Kueue, built from its Go module (hack/build-kueue.sh)
