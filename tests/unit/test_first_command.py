"""``pytest`` at the project root is a newcomer's first command: with no cluster it must run the
unit tests and report the end-to-end tests as skipped, saying why, never end in an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_end_to_end_tests_are_skipped_with_the_reason_when_no_cluster_answers(tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "-q", "-rs", "-p", "no:cacheprovider",
         "-k", "test_all_or_nothing or test_examples_applied"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "INTERNALERROR" not in output
    assert " passed" not in output and " failed" not in output, output[-3000:]
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    assert skipped, output[-3000:]
    assert all("no cluster answers at KUBECONFIG=" in line and "hack/cluster-up.sh" in line
               for line in skipped), skipped
