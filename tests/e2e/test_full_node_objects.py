"""The main gang scenarios again, with kube-scheduler sending whole Node objects.

An extender configured with ``nodeCacheCapable: false`` receives the candidates as a NodeList
(``Nodes.items``) and must answer in the same form; every other test of the suite runs with
``nodeCacheCapable: true`` (names only). Here the suite's own kube-scheduler is restarted with the
flag off for this module, and put back afterwards. ``quorum_candidate_nodes_total`` proves which
form the scenarios were answered in: a Quorum that mishandled Node objects would bind nothing (a
filter that passes no node) or bind members apart (a filter that ignores reservations).
"""

from __future__ import annotations

import ssl
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .cluster import Quorum, wait
from .pairs import PIDS, argv_value
from .process import LocalProcess, with_config
from .scenario import Scenario
from .test_all_or_nothing import (
    test_gang_needing_more_than_is_free_binds_nothing_until_capacity_frees as all_or_nothing,
)
from .test_all_or_nothing import (
    test_two_gangs_that_cannot_both_fit_bind_one_whole_then_the_other as two_gangs,
)
from .test_reservations import test_plain_pods_never_take_reserved_capacity as reservations_kept
from .test_topology import test_required_rack_gang_binds_inside_one_rack as required_rack

pytestmark = pytest.mark.e2e


def _healthy(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _restart(running: LocalProcess, command: LocalProcess) -> None:
    running.kill()
    command.restart()
    port = int(argv_value(command.argv, "--secure-port") or "10259")
    if not wait(lambda: _healthy(port), timeout=60, interval=0.3):
        raise RuntimeError(f"kube-scheduler did not answer /healthz on port {port} after a restart")


def _counts(quorum: Quorum) -> dict[str, float]:
    return {form: sum(quorum.metric("quorum_candidate_nodes_total", verb=verb, form=form)
                      for verb in ("filter", "prioritize"))
            for form in ("names", "objects")}


@pytest.fixture(scope="module")
def whole_node_objects(quorum: Quorum) -> Iterator[None]:
    """The suite's kube-scheduler with ``nodeCacheCapable: false`` for this module."""
    original = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
    if isinstance(original, str):
        pytest.skip(f"needs the local kube-scheduler process: {original}")
    source = argv_value(original.argv, "--config")
    assert source, "the local kube-scheduler names no --config"
    config = yaml.safe_load(Path(source).read_text())
    for extender in config["extenders"]:
        extender["nodeCacheCapable"] = False
    with tempfile.TemporaryDirectory(prefix="quorum-e2e-sched-") as tmp:
        path = Path(tmp) / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        _restart(original, with_config(original, str(path)))
        try:
            yield
        finally:
            now = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
            if isinstance(now, str):
                raise RuntimeError(now)
            _restart(now, LocalProcess(now.pid, original.argv, original.env, original.cwd,
                                       original.log_path, original.pid_file))


@pytest.fixture
def objects_only(whole_node_objects: None, quorum: Quorum) -> Iterator[None]:
    """Asserts that the test's calls all came with Node objects, and that there were some."""
    before = _counts(quorum)
    yield
    after = _counts(quorum)
    assert after["objects"] > before["objects"], f"no call sent Node objects: {before} -> {after}"
    assert after["names"] == before["names"], f"calls sent node names, not objects: {before} -> {after}"


def test_all_or_nothing_with_node_objects(objects_only: None, scenario: Scenario) -> None:
    all_or_nothing(scenario)


def test_two_competing_gangs_with_node_objects(objects_only: None, scenario: Scenario) -> None:
    two_gangs(scenario)


def test_required_rack_with_node_objects(objects_only: None, scenario: Scenario) -> None:
    required_rack(scenario)


def test_reservations_kept_from_plain_pods_with_node_objects(objects_only: None, scenario: Scenario) -> None:
    reservations_kept(scenario)
