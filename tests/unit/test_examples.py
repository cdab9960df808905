"""The manifests under examples/gangs/ declare the gangs they say they do, as Quorum reads them.

What each file should declare is written out below as data (gang key -> size and topology, Job or
Pod name -> gang key), never derived from the YAML: a wrong minCount, a pod pointing at the wrong
group or a lost topology annotation in an example fails here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cluster.conventions import (
    declared_by_pod,
    gang_key_of_pod,
    spec_from_native_podgroup,
    spec_from_pod,
    specs_from_workload_v1alpha1,
    topology_of_pod,
)
from extender.cluster.declarations import Declarations
from extender.cluster.object_sources import GANG_OBJECT_KINDS, OBJECT_PRECEDENCE, GangObjectSource
from extender.cluster.records import GangSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "gangs"
NATIVE_APIS = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2")
WORKLOAD_V1ALPHA1 = "scheduling.k8s.io/v1alpha1"
RACK = "topology.quorum.dev/rack"
BLOCK = "topology.quorum.dev/block"
GPU = "nvidia.com/gpu"
IMAGE = "registry.example/trainer:latest"


@dataclass(frozen=True)
class Gang:
    """What Quorum should make of one gang."""

    min_count: int
    is_gang: bool = True
    required: str | None = None
    preferred: str | None = None
    slice_topology: str | None = None
    slice_size: int = 0


BASIC = Gang(1, is_gang=False)  # a group with the basic policy: scheduled pod by pod


@dataclass(frozen=True)
class Topology:
    """What ``topology_of_pod`` should read from a member's annotations."""

    required: str | None = None
    preferred: str | None = None
    slice_topology: str | None = None
    slice_size: int = 0


@dataclass(frozen=True)
class Member:
    """A Job's pod template (or a Pod): the gang its pods name, how many pods, their annotations."""

    gang: str | None
    pods: int
    topology: Topology | None = None


@dataclass(frozen=True)
class Example:
    objects: dict[str, Gang]  # what the file's gang objects declare, read by Quorum's object adapters
    members: dict[str, Member]  # by Job or Pod name
    gangs: dict[str, Gang]  # every gang the members form, objects and annotations merged


# --- what each file should declare ---------------------------------------------------------
# The v1beta1 (1.37) and v1alpha2 (1.36) files hold the same PodGroups and Jobs.
NATIVE_WHOLE = Example(
    objects={"ml/whole": Gang(5)},
    members={"whole-driver-0": Member("ml/whole", 1), "whole-workers-0": Member("ml/whole", 4)},
    gangs={"ml/whole": Gang(5)},
)
NATIVE_PER_REPLICATED_JOB = Example(
    objects={"ml/per-rjob-driver": BASIC, "ml/per-rjob-workers": Gang(8, required=BLOCK)},
    members={
        "per-rjob-driver-0": Member("ml/per-rjob-driver", 1),
        "per-rjob-workers-0": Member("ml/per-rjob-workers", 4),
        "per-rjob-workers-1": Member("ml/per-rjob-workers", 4),
    },
    gangs={"ml/per-rjob-driver": BASIC, "ml/per-rjob-workers": Gang(8, required=BLOCK)},
)
NATIVE_PER_JOB_REPLICA = Example(
    objects={"ml/per-replica-workers-0": Gang(4, required=RACK),
             "ml/per-replica-workers-1": Gang(4, required=RACK)},
    members={
        "per-replica-workers-0": Member("ml/per-replica-workers-0", 4),
        "per-replica-workers-1": Member("ml/per-replica-workers-1", 4),
    },
    gangs={"ml/per-replica-workers-0": Gang(4, required=RACK),
           "ml/per-replica-workers-1": Gang(4, required=RACK)},
)

EXPECTED: dict[str, Example] = {
    "v1beta1/whole-jobset.yaml": NATIVE_WHOLE,
    "v1beta1/startup-barrier.yaml": Example(
        objects={"ml/barrier": Gang(3)},
        members={"barrier-driver": Member("ml/barrier", 1), "barrier-worker-0": Member("ml/barrier", 1),
                 "barrier-worker-1": Member("ml/barrier", 1)},
        gangs={"ml/barrier": Gang(3)},
    ),
    "v1beta1/per-replicated-job.yaml": NATIVE_PER_REPLICATED_JOB,
    "v1beta1/per-job-replica.yaml": NATIVE_PER_JOB_REPLICA,
    "v1alpha2/whole-jobset.yaml": NATIVE_WHOLE,
    "v1alpha2/per-replicated-job.yaml": NATIVE_PER_REPLICATED_JOB,
    "v1alpha2/per-job-replica.yaml": NATIVE_PER_JOB_REPLICA,
    # 1.35: gangs are podGroups of the Workload ("ns/workload/podGroup"), one per replica key.
    "v1alpha1/whole-jobset.yaml": Example(
        objects={"ml/whole/jobset": Gang(5)},
        members={"whole-driver-0": Member("ml/whole/jobset", 1),
                 "whole-workers-0": Member("ml/whole/jobset", 4)},
        gangs={"ml/whole/jobset": Gang(5)},
    ),
    "v1alpha1/per-replicated-job.yaml": Example(
        objects={"ml/per-rjob/driver": BASIC, "ml/per-rjob/workers": Gang(8)},
        members={
            "per-rjob-driver-0": Member("ml/per-rjob/driver", 1),
            "per-rjob-workers-0": Member("ml/per-rjob/workers", 4, Topology(required=BLOCK)),
            "per-rjob-workers-1": Member("ml/per-rjob/workers", 4, Topology(required=BLOCK)),
        },
        gangs={"ml/per-rjob/driver": BASIC, "ml/per-rjob/workers": Gang(8, required=BLOCK)},
    ),
    "v1alpha1/per-job-replica.yaml": Example(
        objects={"ml/per-replica/workers": Gang(4)},
        members={
            "per-replica-workers-0": Member("ml/per-replica/workers/0", 4, Topology(required=RACK)),
            "per-replica-workers-1": Member("ml/per-replica/workers/1", 4, Topology(required=RACK)),
        },
        gangs={"ml/per-replica/workers/0": Gang(4, required=RACK),
               "ml/per-replica/workers/1": Gang(4, required=RACK)},
    ),
    # Kueue's vocabulary: the members declare the gang themselves (no gang object).
    "topology/required-rack.yaml": Example(
        objects={},
        members={"rack-strict": Member("ml/rack-strict", 8, Topology(required=RACK))},
        gangs={"ml/rack-strict": Gang(8, required=RACK)},
    ),
    "topology/preferred-rack.yaml": Example(
        objects={},
        members={"rack-preferred": Member("ml/rack-preferred", 8, Topology(preferred=RACK))},
        gangs={"ml/rack-preferred": Gang(8, preferred=RACK)},
    ),
    "topology/slices.yaml": Example(
        objects={},
        members={"sliced": Member("ml/sliced", 8, Topology(required=BLOCK, slice_topology=RACK,
                                                           slice_size=4))},
        gangs={"ml/sliced": Gang(8, required=BLOCK, slice_topology=RACK, slice_size=4)},
    ),
    "topology/require-block-prefer-rack.yaml": Example(
        objects={},
        members={f"tight-{i}": Member("ml/tight", 1, Topology(required=BLOCK, preferred=RACK))
                 for i in range(4)},
        gangs={"ml/tight": Gang(4, required=BLOCK, preferred=RACK)},
    ),
}
FILES = sorted(EXPECTED)


# --- reading the files -----------------------------------------------------------------------
def documents(rel: str) -> list[dict[str, Any]]:
    with (EXAMPLES / rel).open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def workloads(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], int]]:
    """(name, the pod as Quorum sees it, how many such pods) for every Job and Pod."""
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] == "Job":
            template = doc["spec"]["template"]
            pod = {"metadata": {"namespace": meta["namespace"], **(template.get("metadata") or {})},
                   "spec": template["spec"]}
            yield meta["name"], pod, doc["spec"]["parallelism"]
        elif doc["kind"] == "Pod":
            yield meta["name"], doc, 1


def gang_objects(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The objects Quorum reads gangs from (a v1beta1 / v1alpha2 Workload only holds templates)."""
    for doc in docs:
        native = doc["kind"] == "PodGroup" and doc["apiVersion"] in NATIVE_APIS
        if native or (doc["kind"] == "Workload" and doc["apiVersion"] == WORKLOAD_V1ALPHA1):
            yield doc


def read_object(doc: Mapping[str, Any]) -> dict[str, GangSpec]:
    """One gang object through Quorum's adapter for its API version."""
    if doc["kind"] == "PodGroup":
        spec = spec_from_native_podgroup(doc, doc["apiVersion"])
        return {spec.key: spec}
    return specs_from_workload_v1alpha1(doc)


def as_gang(spec: GangSpec) -> Gang:
    assert spec.problem == "", spec.problem
    return Gang(spec.min_count, spec.is_gang, spec.required_topology, spec.preferred_topology,
                spec.slice_topology, spec.slice_size)


def as_topology(pod: Mapping[str, Any]) -> Topology | None:
    found = topology_of_pod(pod)
    if found is None:
        return None
    assert found.problem == "", found.problem
    return Topology(found.required, found.preferred, found.slice_topology, found.slice_size)


# The informer's source for each (apiVersion, kind) of gang object.
_KIND = {"podgroups": "PodGroup", "workloads": "Workload", "coscheduling": "PodGroup", "volcano": "PodGroup",
         "jobsets": "JobSet", "compositepodgroups": "CompositePodGroup"}
SOURCES: dict[tuple[str, str], GangObjectSource] = {
    (version, _KIND[kind.name]): kind.source(version)
    for kind in GANG_OBJECT_KINDS for version in kind.versions
}


# --- the checks ------------------------------------------------------------------------------
def test_every_example_file_has_expectations() -> None:
    on_disk = {path.relative_to(EXAMPLES).as_posix() for path in EXAMPLES.rglob("*.yaml")}
    assert on_disk == set(EXPECTED)


def test_the_readme_lists_every_file() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for rel in FILES:
        name = rel if rel.startswith(("v1beta1/", "v1alpha1/", "topology/")) else rel.split("/")[1]
        assert name in readme, rel


@pytest.mark.parametrize("rel", FILES)
def test_workloads_follow_the_example_conventions(rel: str) -> None:
    docs = documents(rel)
    assert all(doc["metadata"]["namespace"] == "ml" for doc in docs)
    for doc in docs:
        if doc["kind"] == "Job":
            spec = doc["spec"]
            assert spec["completionMode"] == "Indexed", doc["metadata"]["name"]
            assert spec["parallelism"] == spec["completions"], doc["metadata"]["name"]
    for name, pod, _ in workloads(docs):
        spec = pod["spec"]
        assert (spec["schedulerName"], spec["restartPolicy"]) == ("quorum", "Never"), name
        for container in spec["containers"]:
            resources = container["resources"]
            assert container["image"] == IMAGE, name
            assert resources["limits"][GPU] == resources["requests"][GPU], name


@pytest.mark.parametrize("rel", FILES)
def test_each_job_or_pod_names_its_gang(rel: str) -> None:
    found = {name: (gang_key_of_pod(pod), count) for name, pod, count in workloads(documents(rel))}
    assert found == {name: (m.gang, m.pods) for name, m in EXPECTED[rel].members.items()}


@pytest.mark.parametrize("rel", FILES)
def test_gang_objects_read_as_intended(rel: str) -> None:
    declared: dict[str, Gang] = {}
    for doc in gang_objects(documents(rel)):
        specs = read_object(doc)
        assert not set(specs) & set(declared), f"{rel}: a gang declared twice"
        declared.update({key: as_gang(spec) for key, spec in specs.items()})
    assert declared == EXPECTED[rel].objects


@pytest.mark.parametrize("rel", FILES)
def test_member_annotations_give_the_intended_topology(rel: str) -> None:
    found = {name: as_topology(pod) for name, pod, _ in workloads(documents(rel))}
    assert found == {name: m.topology for name, m in EXPECTED[rel].members.items()}


@pytest.mark.parametrize("rel", FILES)
def test_gangs_resolve_as_intended_with_exactly_min_count_members(rel: str) -> None:
    """Objects and members merged the way the cache merges them (Declarations), and every gang
    has as many pods as it waits for."""
    docs = documents(rel)
    declarations = Declarations(OBJECT_PRECEDENCE)
    for doc in gang_objects(docs):
        declarations.put_object(SOURCES[doc["apiVersion"], doc["kind"]], doc)
    pods: Counter[str] = Counter()
    for _, pod, count in workloads(docs):
        key = gang_key_of_pod(pod)
        assert key is not None
        declarations.put_member(key, spec_from_pod(pod), topology_of_pod(pod))
        pods[key] += count
    expected = EXPECTED[rel].gangs
    resolved = {key: declarations.spec(key) for key in pods}
    assert {key: as_gang(spec) if spec else None for key, spec in resolved.items()} == expected
    assert dict(pods) == {key: gang.min_count for key, gang in expected.items()}


@pytest.mark.parametrize("rel", FILES)
def test_what_one_member_declares_alone(rel: str) -> None:
    """A pod seen before its gang object (or with none): Kueue's members carry the whole gang,
    members of an object-declared gang carry no size of their own."""
    example = EXPECTED[rel]
    for name, pod, _ in workloads(documents(rel)):
        member = example.members[name]
        alone = declared_by_pod(pod)
        if example.objects:
            assert alone is None, name
        else:
            assert alone is not None and alone.key == member.gang, name
            assert as_gang(alone) == example.gangs[alone.key], name


def _template_refs(rel: str, doc: Mapping[str, Any]) -> tuple[str, str]:
    """(workload, template) a native PodGroup was made from, in its API version's field."""
    spec = doc["spec"]
    if doc["apiVersion"] == "scheduling.k8s.io/v1beta1":
        assert "podGroupTemplateRef" not in spec, rel
        return spec["workloadRef"]["workloadName"], spec["workloadRef"]["templateName"]
    assert "workloadRef" not in spec, rel
    ref = spec["podGroupTemplateRef"]["workload"]
    return ref["workloadName"], ref["podGroupTemplateName"]


@pytest.mark.parametrize("rel", [rel for rel in FILES if rel.startswith(("v1beta1/", "v1alpha2/"))])
def test_podgroups_copy_their_template_and_pods_name_a_podgroup(rel: str) -> None:
    docs = documents(rel)
    api = rel.split("/")[0]
    assert {doc["apiVersion"] for doc in docs if doc["kind"] in ("PodGroup", "Workload")} == {
        f"scheduling.k8s.io/{api}"}
    templates = {(doc["metadata"]["name"], t["name"]): t
                 for doc in docs if doc["kind"] == "Workload" for t in doc["spec"]["podGroupTemplates"]}
    groups = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "PodGroup"}
    for name, group in groups.items():
        template = templates[_template_refs(rel, group)]
        assert group["spec"]["schedulingPolicy"] == template["schedulingPolicy"], name
        assert group["spec"].get("schedulingConstraints") == template.get("schedulingConstraints"), name
    for name, pod, _ in workloads(docs):
        assert pod["spec"]["schedulingGroup"]["podGroupName"] in groups, name


@pytest.mark.parametrize("rel", [rel for rel in FILES if rel.startswith("v1alpha1/")])
def test_workload_refs_name_a_podgroup_of_the_workload(rel: str) -> None:
    docs = documents(rel)
    groups = {(doc["metadata"]["name"], g["name"])
              for doc in docs if doc["kind"] == "Workload" for g in doc["spec"]["podGroups"]}
    for name, pod, _ in workloads(docs):
        ref = pod["spec"]["workloadRef"]
        assert (ref["name"], ref["podGroup"]) in groups, name
        assert "schedulingGroup" not in pod["spec"], name  # 1.35 pods have no schedulingGroup
