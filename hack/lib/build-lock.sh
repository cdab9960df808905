# build_lock NAME holds an exclusive lock of that name (under the cache) until the script exits, so
# that one thing is never built twice at once: the test command's background builds
# (hack/prebuild.sh) and a suite that needs the binary now. The second waits, then finds it built.
# shellcheck shell=bash
build_lock() {
  local dir="${QUORUM_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache}/locks"
  mkdir -p "$dir"
  exec 9>"$dir/$1.lock"
  if ! flock -n 9; then
    printf '[build-lock] waiting for another build of %s\n' "$1" >&2
    flock 9
  fi
}
