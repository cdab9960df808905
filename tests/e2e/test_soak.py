"""The short contention soak with faults (tests/e2e/soak.py): about 2 minutes, every fault at
least once, in the test command. It runs last (conftest.py): it restarts the apiserver.

QUORUM_SOAK_SECONDS changes its length; hack/soak.sh runs the long one on its own.
"""

from __future__ import annotations

import os

import pytest

from .scenario import Scenario
from .soak import FAULTS, Soak, SoakConfig

pytestmark = [pytest.mark.e2e, pytest.mark.soak]


def test_a_contention_soak_with_faults_keeps_every_gang_whole_and_leaks_nothing(scenario: Scenario) -> None:
    sc = scenario
    config = SoakConfig(duration=float(os.environ.get("QUORUM_SOAK_SECONDS", "100")), fault_every=20.0)
    sc.watcher.grace = config.partial_grace
    summary = Soak(sc, config).run()
    sc.record("soak", {k: v for k, v in summary.items() if k != "fault_log"})
    assert summary["violations"] == [], summary["violations"]
    assert summary["leaks"] == [], summary["leaks"]
    assert set(summary["faults"]) == set(FAULTS), f"every kind of fault injected: {summary['faults']}"
    assert summary["gangs"]["bound_whole"] >= 10, f"gangs kept binding through the faults: {summary['gangs']}"
    sc.finish()
