"""Every example a user may apply is accepted by the apiserver of the version it is written for.

``tests/unit/test_examples.py`` checks that each file under ``examples/`` declares the gangs it says
it does, as Quorum reads them; here each one goes through a server-side dry-run apply (the
apiserver validates and defaults every object: a field the API does not have, a wrong apiVersion
or a gate the example needs and does not say is refused). Each file is written for one Kubernetes
minor (``examples/gangs/README.md``): it runs on that version's cluster only (the API-version suite
runs this module on every version); the topology examples and the demo's workloads name no
versioned API beyond what their minor serves.

The objects are applied into the test's own namespace instead of the ``ml`` the files name, so
nothing outside the test is touched; a dry run creates nothing, so the Workloads a 1.36 PodGroup is
checked against at admission are created first (and go with the namespace).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import REPO_ROOT
from .scenario import Scenario
from .test_install import kubeconfig, run, tool

pytestmark = [pytest.mark.e2e, pytest.mark.api_suite]

EXAMPLES = REPO_ROOT / "examples"
# Which minor each directory of examples/gangs is written for (None: every version).
WRITTEN_FOR: dict[str, int | None] = {"v1alpha1": 35, "v1alpha2": 36, "v1beta1": 37, "topology": None}


def example_files() -> list[Any]:
    params = []
    for path in sorted((EXAMPLES / "gangs").glob("*/*.yaml")):
        minor = WRITTEN_FOR[path.parent.name]  # a new directory must say which version it is for
        marks = [pytest.mark.k8s_minor(minor)] if minor is not None else []
        params.append(pytest.param(path, marks=marks, id=f"{path.parent.name}/{path.name}"))
    return params


def demo_workloads() -> str:
    """The demo's workloads as ``python examples/workloads.py`` writes them for applying by hand."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "workloads.py")], capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout


def into_namespace(manifests: str, namespace: str) -> tuple[str, int]:
    """The documents moved into ``namespace`` (cluster-scoped kinds have none to move)."""
    docs = [doc for doc in yaml.safe_load_all(manifests) if doc]
    for doc in docs:
        if doc.get("kind") != "Namespace":
            doc.setdefault("metadata", {})["namespace"] = namespace
    return yaml.safe_dump_all(docs), len(docs)


# Objects others are checked against at admission (a 1.36 PodGroup's Workload must exist): a dry
# run creates nothing, so these are created for real first, in the test's namespace.
PREREQUISITE_KINDS = ("Workload",)


def server_side_dry_run(manifests: str, namespace: str) -> subprocess.CompletedProcess[str]:
    moved, _ = into_namespace(manifests, namespace)
    kubectl = (tool("kubectl", "QUORUM_KUBECTL"), "--kubeconfig", kubeconfig(), "apply")
    first = [doc for doc in yaml.safe_load_all(moved) if doc and doc.get("kind") in PREREQUISITE_KINDS]
    if first:
        made = run(*kubectl, "-f", "-", stdin=yaml.safe_dump_all(first))
        if made.returncode != 0:
            return made
    return run(*kubectl, "--dry-run=server", "-f", "-", stdin=moved)


def assert_accepted(done: subprocess.CompletedProcess[str], manifests: str, what: str) -> None:
    assert done.returncode == 0, f"{what} refused by the apiserver:\n{done.stderr}"
    _, count = into_namespace(manifests, "x")
    accepted = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == count, f"{what}: {count} objects, {len(accepted)} accepted:\n{done.stdout}"


@pytest.mark.parametrize("path", example_files())
def test_example_is_accepted_by_its_apiserver(scenario: Scenario, path: Path) -> None:
    manifests = path.read_text()
    done = server_side_dry_run(manifests, scenario.ns)
    assert_accepted(done, manifests, str(path.relative_to(REPO_ROOT)))


@pytest.mark.k8s_minor(37)
def test_demo_workloads_are_accepted(scenario: Scenario) -> None:
    manifests = demo_workloads()
    done = server_side_dry_run(manifests, scenario.ns)
    assert_accepted(done, manifests, "examples/workloads.py")
