#!/usr/bin/env bash
# Runs the black-box regression tests of issue 11 against another revision of Quorum:
#   bash hack/regressions-on-old-code.sh [REV]      (default e49b204, the last commit before the
#                                                   gang core's redesign)
# Checks REV out into a temporary git worktree, copies in this tree's black-box tests and their
# harness (tests/unit/test_defects_blackbox*.py, blackbox.py, payloads.py, fake_apiserver.py), runs
# them there, prints one line per test (PASS, FAIL (assertion), or ERROR (<exception>) when a test
# broke for any other reason) and removes the worktree.
#
# Every test must FAIL BY ASSERTION on the old code: that is what shows it guards its defect. Exit
# status 0 means they all did. EXPECT=pass checks the opposite (every test passes), for a revision
# that has the fixes. PYTHON names the interpreter (default .venv/bin/python of this tree).
#
# The harness builds the app with extender.cli.build, which both layouts share, so the same harness
# file runs on both; if a revision needs another, put it at hack/lib/blackbox_<REV>.py and it is
# installed as tests/unit/blackbox.py instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

REV="${1:-e49b204}"
EXPECT="${EXPECT:-fail}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PYTHON" ]] || { echo "no Python at $PYTHON (run hack/setup-python.sh or set PYTHON)" >&2; exit 2; }

WORK="$(mktemp -d)"
TREE="$WORK/tree"
cleanup() {
  git -C "$ROOT" worktree remove --force "$TREE" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

git worktree add --quiet --detach "$TREE" "$REV"
TESTS=(tests/unit/test_defects_blackbox*.py)
cp "${TESTS[@]}" tests/unit/blackbox.py tests/unit/payloads.py tests/unit/fake_apiserver.py "$TREE/tests/unit/"
HARNESS="hack/lib/blackbox_${REV}.py"
if [[ -f "$HARNESS" ]]; then
  cp "$HARNESS" "$TREE/tests/unit/blackbox.py"
fi

echo "== black-box regression tests on $(git -C "$TREE" log -1 --format='%h %s' | cut -c1-100)"
(cd "$TREE" && PYTHONPATH="$TREE" "$PYTHON" -m pytest "${TESTS[@]}" -q -p no:cacheprovider \
  --junitxml="$WORK/report.xml" >"$WORK/pytest.log" 2>&1) || true
if [[ ! -s "$WORK/report.xml" ]]; then
  cat "$WORK/pytest.log" >&2
  exit 2
fi
"$PYTHON" hack/lib/junit_table.py "$WORK/report.xml" --expect "$EXPECT"
