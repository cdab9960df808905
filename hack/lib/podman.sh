# podman as these machines run it (source it; do not run it): runc, not crun (crun cannot set up
# containers under cgroups v1 in hybrid mode), and no default ulimits (raising the open-file limit
# is refused here). CONTAINERS_CONF points at the project's own containers.conf under .cache/.
# shellcheck shell=bash
PODMAN_CONF="${QUORUM_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache}/containers.conf"

# ensure_podman installs podman, runc and mmdebstrap from Debian's packages when missing.
ensure_podman() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  if ((${#missing[@]})); then
    echo "podman.sh: installing ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  mkdir -p "$(dirname "$PODMAN_CONF")"
  printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' >"$PODMAN_CONF"
}

podman_cmd() { CONTAINERS_CONF="$PODMAN_CONF" podman --runtime "$(command -v runc)" "$@"; }
