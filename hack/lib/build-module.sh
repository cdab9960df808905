# build_module NAME MODULE VERSION PACKAGE LDFLAGS: build a Go module's command at an exact version
# into $CACHE/bin/NAME-VERSION/NAME, keeping the module's source (its CRDs and webhook manifests
# are what the local cluster applies) in $CACHE/tools/NAME-VERSION/. Prints the binary's path.
# The Go module proxy serves these modules' exact versions but refuses their version listing,
# which `go install module@version` asks for: so the module is downloaded by its exact version and
# built in a copy of its source, with its own go.mod and go.sum. Nothing is rebuilt when the binary
# exists; a lock keeps two builds of one thing from running at once (hack/lib/build-lock.sh).
# shellcheck shell=bash
build_module() {
  local name="$1" module="$2" version="$3" package="$4" ldflags="$5"
  local cache="${QUORUM_CACHE:-$ROOT/.cache}"
  local bin_dir="$cache/bin/$name-$version" src="$cache/tools/$name-$version" dir started
  # shellcheck source=hack/lib/build-lock.sh
  source "$ROOT/hack/lib/build-lock.sh"
  build_lock "$name-$version"
  if [[ ! -x "$bin_dir/$name" ]]; then
    command -v go >/dev/null || { printf '[build-%s] go is not installed\n' "$name" >&2; return 1; }
    started=$SECONDS
    if [[ ! -f "$src/go.mod" ]]; then
      printf '[build-%s] downloading %s %s\n' "$name" "$module" "$version" >&2
      dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$module@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
      [[ -f "$dir/go.mod" ]] || { printf "[build-%s] the module's source was not downloaded\n" "$name" >&2; return 1; }
      mkdir -p "$(dirname "$src")"
      rm -rf "$src.partial" && cp -r "$dir" "$src.partial" && chmod -R u+w "$src.partial"
      mv "$src.partial" "$src"
    fi
    printf '[build-%s] building %s %s\n' "$name" "$module" "$version" >&2
    mkdir -p "$bin_dir.partial"
    (cd "$src" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin_dir.partial/$name" "$package")
    rm -rf "$bin_dir" && mv "$bin_dir.partial" "$bin_dir"
    printf '[build-%s] built in %ss\n' "$name" "$((SECONDS - started))" >&2
  fi
  echo "$bin_dir/$name"
}
