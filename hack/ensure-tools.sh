#!/usr/bin/env bash
# Make sure the system tools the local cluster needs are present (Debian packages).
set -euo pipefail
missing=()
command -v go >/dev/null || missing+=(golang-go)
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
if ((${#missing[@]})); then
  echo "ensure-tools: installing ${missing[*]}" >&2
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
