# The upstream versions the project builds and tests against: the one place to change them.
# Source it; do not run it. Each may be overridden from the environment.
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
K8S_VERSION="${K8S_VERSION:-v1.37.1}"   # newest v1.37 patch whose source the Go module proxy serves
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}" # helm, built from its Go module (hack/build-helm.sh)
