#!/usr/bin/env bash
# Create .venv (once) and install Quorum with its test tools into it.
# Re-running is cheap: pip only installs what changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON_BIN:-python3}"

if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "setup-python: Python >= 3.11 is required (found $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  if ! "$PYTHON_BIN" -m venv .venv 2>/dev/null; then
    echo "setup-python: installing the venv module (python3-venv)" >&2
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    "$PYTHON_BIN" -m venv .venv
  fi
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip &&
       .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup-python: installing the project into .venv failed (output above)" >&2
  exit 1
fi
