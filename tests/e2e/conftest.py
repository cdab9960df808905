"""Fixtures for the end-to-end suite.

Runs against the cluster in ``KUBECONFIG`` (default: the local one from hack/cluster-up.sh,
``.cache/cluster/kubeconfig``) whose kube-scheduler profile ``quorum`` calls Quorum at ``QUORUM_URL``
(default http://127.0.0.1:8888). Every test gets its own namespace and a ``GangWatcher``; the
namespace's pods are deleted (grace period 0) and gone before the next test starts.

    python -m pytest -m e2e tests/e2e -q -x -s

Per-test durations and the measurements tests record (bind skew, ...) are printed at the end of the
session and written to ``.cache/e2e/results.json`` (``QUORUM_E2E_RESULTS`` to move it).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from .cluster import E2E_LABEL, JOBSET_API, PODGROUP_API, Kube, Quorum, Settings, Topology, gpu_usage, wait
from .dra import DraDevices
from .lifecycle_support import NodeFaults, ensure_priority_classes
from .process import LocalProcess
from .reconfigure import Reconfigurer
from .scenario import GangWatcher, Scenario

RESULTS: dict[str, dict[str, Any]] = {}


# ------------------------------------------------------------------------------------ session
@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def kube(settings: Settings) -> Kube:
    try:
        kube = Kube(settings.kubeconfig)
        kube.core.list_namespace(limit=1, _request_timeout=10)
    except Exception as exc:
        pytest.fail(f"cannot reach the cluster from KUBECONFIG={settings.kubeconfig}: {exc}\n"
                    "(start the local one with hack/cluster-up.sh or point KUBECONFIG elsewhere)",
                    pytrace=False)
    return kube


@pytest.fixture(scope="session")
def quorum(settings: Settings) -> Quorum:
    quorum = Quorum(settings.quorum_url)
    if not wait(quorum.ready, timeout=30, interval=0.5):
        pytest.fail(f"Quorum at QUORUM_URL={settings.quorum_url} is not ready (/readyz)", pytrace=False)
    return quorum


@pytest.fixture(scope="session")
def topology(kube: Kube, quorum: Quorum, settings: Settings) -> Topology:
    leftovers = [ns["metadata"]["name"] for ns in
                 Kube.raw(kube.core.list_namespace, label_selector=f"{E2E_LABEL}=true")["items"]]
    for namespace in leftovers:
        cleanup_namespace(kube, namespace)
    try:
        topo = Topology.discover(kube, settings)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    if not topo.nodes:
        pytest.fail(f"no Ready nodes with {settings.gpu_resource} allocatable", pytrace=False)
    busy = wait_idle(kube, quorum, settings, topo, timeout=30)
    if busy:
        pytest.fail(f"the cluster is not idle, the scenarios need every GPU free: {busy}", pytrace=False)
    return topo


def wait_idle(kube: Kube, quorum: Quorum, settings: Settings, topo: Topology, timeout: float) -> str:
    """Wait until no GPU is in use on the topology nodes and Quorum holds no reservation; else say why."""
    state = {"why": ""}

    def idle() -> bool:
        used = gpu_usage(kube.all_pods(), settings.gpu_resource, topo.nodes)
        reserved = quorum.debug().get("reservedPods", 0)
        state["why"] = f"GPUs in use {used}, Quorum reservedPods={reserved}" if used or reserved else ""
        return not state["why"]

    wait(idle, timeout=timeout, interval=0.5)
    return state["why"]


def cleanup_namespace(kube: Kube, namespace: str, timeout: float = 90) -> str:
    """Delete everything the test created (pods with grace period 0) and wait for the pods to be gone.

    JobSets go first (where the API is served): while one exists, its controller recreates the Jobs
    deleted below. Pods go in one collection call per round rather than one call each."""
    group, version, plural = JOBSET_API
    try:
        kube.custom.delete_collection_namespaced_custom_object(group, version, namespace, plural,
                                                               propagation_policy="Background",
                                                               _request_timeout=30)
    except ApiException as exc:
        if exc.status != 404:
            raise
    try:
        kube.batch.delete_collection_namespaced_job(namespace, propagation_policy="Background",
                                                    _request_timeout=30)
    except ApiException as exc:
        if exc.status != 404:
            raise
    started = time.monotonic()
    last_delete = 0.0
    while True:
        pods = kube.pods(namespace)
        if not pods:
            break
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            return f"pods still present {timeout:g}s after deletion: {[p['metadata']['name'] for p in pods]}"
        if time.monotonic() - last_delete > 5:
            last_delete = time.monotonic()
            for pod in pods:
                meta = pod["metadata"]
                if elapsed > 20 and meta.get("finalizers"):
                    # Job pods keep a tracking finalizer until the Job controller drops it.
                    try:
                        unfinalize = {"metadata": {"finalizers": None}}
                        kube.core.patch_namespaced_pod(meta["name"], namespace, unfinalize,
                                                       _request_timeout=30)
                    except ApiException:
                        pass
            kube.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _request_timeout=30)
        time.sleep(0.3)
    group, version, plural = PODGROUP_API
    try:
        kube.custom.delete_collection_namespaced_custom_object(group, version, namespace, plural,
                                                               _request_timeout=30)
    except ApiException:
        pass
    try:
        kube.core.delete_namespace(namespace, _request_timeout=30)
    except ApiException as exc:
        if exc.status != 404:
            raise
    return ""


# ------------------------------------------------------------------------------------ per test
@pytest.fixture
def scenario(request: pytest.FixtureRequest, kube: Kube, quorum: Quorum, settings: Settings,
             topology: Topology) -> Iterator[Scenario]:
    busy = wait_idle(kube, quorum, settings, topology, timeout=60)
    if busy:
        pytest.fail(f"cluster not idle before {request.node.name}: {busy}", pytrace=False)
    yield from scenario_in(request, kube, quorum, settings, topology)


def scenario_in(request: pytest.FixtureRequest, kube: Kube, quorum: Quorum, settings: Settings,
                topology: Topology) -> Iterator[Scenario]:
    """A test's own namespace and partial-gang watcher; everything it made is deleted after it."""
    short = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:40].strip("-")
    namespace = f"e2e-{short}-{secrets.token_hex(2)}"
    kube.create_namespace(namespace, {E2E_LABEL: "true"})
    watcher = GangWatcher(kube.fork(), quorum, namespace)
    record = RESULTS.setdefault(request.node.nodeid, {}).setdefault("measurements", {}).__setitem__
    sc = Scenario(settings, kube, quorum, topology, namespace, watcher, record)
    try:
        watcher.start()
        yield sc
    finally:
        watcher.stop()
        problem = cleanup_namespace(kube, namespace)
        kube.close_admission()
    if problem:
        pytest.fail(f"cleanup of {namespace}: {problem}", pytrace=False)
    if not sc.finished and not watcher.raised:
        watcher.check()  # a violation the test body never got to report


@pytest.fixture
def priorities(kube: Kube) -> dict[str, int]:
    """The suite's PriorityClasses (low 100, mid 500, high 1000, high-never 1000), created once."""
    return ensure_priority_classes(kube)


@pytest.fixture
def node_faults(kube: Kube) -> Iterator[NodeFaults]:
    """Delete nodes or make them NotReady during a test; all are back and Ready after it (the
    session's ``topology`` assumes the full node set). Request it after ``scenario`` so the nodes
    are restored before the namespace is cleaned up."""
    faults = NodeFaults(kube)
    try:
        yield faults
    finally:
        faults.restore()


@pytest.fixture
def reconfigure(settings: Settings, quorum: Quorum) -> Iterator[Reconfigurer]:
    """Restart the local Quorum with configuration overrides (``reconfigure.apply({...})``); the
    suite's configuration is back after the test. Request it before ``scenario``, so the namespace
    is cleaned up by the Quorum the test ran with."""
    probe = LocalProcess.from_pid_file(settings.quorum_pid_file, must_contain="extender")
    if isinstance(probe, str):
        pytest.skip(f"needs the local Quorum process: {probe}")
    reconfigurer = Reconfigurer(settings.quorum_pid_file, quorum)
    try:
        yield reconfigurer
    finally:
        reconfigurer.restore()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run that selects no suite (``pytest`` at the root) runs the unit tests and skips these,
    saying why. Tests of one Kubernetes version's API leave the run on other versions (deselected,
    not skipped); the soak restarts the apiserver and kills processes: it runs after everything else."""
    here = Path(__file__).parent
    end_to_end = [item for item in items if here in item.path.parents]
    if not end_to_end:
        return
    if not config.getoption("markexpr"):
        skip = pytest.mark.skip(reason=unselected_reason(Settings.from_env()))
        for item in end_to_end:
            item.add_marker(skip)
        return
    pinned = [item for item in items if item.get_closest_marker("k8s_minor") is not None]
    if pinned:
        minor = server_minor(Settings.from_env())
        other = [item for item in pinned if item.get_closest_marker("k8s_minor").args[0] != minor]  # type: ignore[union-attr]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item not in other]
    items.sort(key=lambda item: item.get_closest_marker("soak") is not None)


def unselected_reason(settings: Settings) -> str:
    """Why the end-to-end tests were not run: no cluster answers, or none of them was selected."""
    try:
        Kube(settings.kubeconfig).core.list_namespace(limit=1, _request_timeout=5)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (f"end-to-end: no cluster answers at KUBECONFIG={settings.kubeconfig} ({first_line[:160]}); "
                "start one with 'bash hack/cluster-up.sh', or run everything with 'bash hack/test-all.sh'")
    return ("end-to-end: a cluster answers, but these run only when selected: "
            "-m e2e, -m api_suite, -m autoscaler, -m install, -m job_workloads or -m controllers "
            "(bash hack/test-all.sh runs each on its cluster)")


def server_minor(settings: Settings) -> int:
    """The minor version of the cluster the suite runs against (1.35 -> 35)."""
    info = Kube(settings.kubeconfig).version()
    return int(str(info.get("minor", "0")).rstrip("+"))


# ------------------------------------------------------------------------------------ reporting
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "/e2e/" not in report.nodeid.replace("\\", "/"):
        return
    entry = RESULTS.setdefault(report.nodeid, {})
    entry.setdefault("seconds", {})[report.when] = round(report.duration, 2)
    phases = entry.setdefault("phases", {})
    phases[report.when] = report.outcome
    if phases.get("call") == "failed":
        entry["outcome"] = "failed"
    elif "failed" in phases.values():
        entry["outcome"] = "error"
    elif "skipped" in phases.values():
        entry["outcome"] = "skipped"
    else:
        entry["outcome"] = "passed"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    ran = {k: v for k, v in RESULTS.items() if "seconds" in v}
    if not ran:
        return
    settings = Settings.from_env()
    tr = terminalreporter
    tr.section("Quorum e2e summary")
    total = 0.0
    for nodeid, entry in ran.items():
        seconds = sum(entry["seconds"].values())
        total += seconds
        tr.write_line(f"{entry.get('outcome', '?'):<8} {seconds:7.1f}s  {nodeid.split('::')[-1]}")
        for key, value in (entry.get("measurements") or {}).items():
            tr.write_line(f"{'':18}{key}: {json.dumps(value, sort_keys=True)}")
    tr.write_line(f"{'total':<8} {total:7.1f}s")
    try:
        settings.results_dir.mkdir(parents=True, exist_ok=True)
        path = settings.results_dir / "results.json"
        doc = {"total_seconds": round(total, 1), "tests": ran}
        path.write_text(json.dumps(doc, indent=2, sort_keys=True))
        tr.write_line(f"results written to {path}")
    except OSError as exc:
        tr.write_line(f"(could not write results: {exc})")


@pytest.fixture
def dra(scenario: Scenario) -> Iterator[DraDevices]:
    """The test's DeviceClass (created here), slices and templates; all removed afterwards, the
    namespace's pods first (before the scenario's own cleanup, which runs after this one)."""
    devices = DraDevices(scenario)
    why = devices.unavailable()
    if why:
        pytest.skip(why)
    try:
        devices.create_class()
        yield devices
    finally:
        problems = devices.cleanup()
    if problems:
        pytest.fail(f"DRA cleanup of {scenario.ns}: {problems}", pytrace=False)
