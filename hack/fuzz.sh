#!/usr/bin/env bash
# The long fuzz run of the four extender verbs through the real app:
#   bash hack/fuzz.sh [COUNT]        (default 1000000 inputs; WORKERS=n, SEED=s to vary)
# Prints the totals (inputs, crashes, 5xx, protocol violations, hangs, max request wall time,
# memory growth) and exits non-zero on any failure. The unit run has a bounded version of it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

[[ -x .venv/bin/python ]] || bash hack/setup-python.sh
COUNT="${1:-1000000}"
exec .venv/bin/python -m tests.fuzz.run --count "$COUNT" --workers "${WORKERS:-$(nproc)}" \
  --seed "${SEED:-quorum}"
