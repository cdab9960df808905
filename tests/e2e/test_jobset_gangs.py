"""JobSets that ask for gangs themselves (``quorum.dev/jobset-gang``), with the real JobSet
controller (``hack/cluster-up.sh --jobset``): no PodGroup and no ``minCount`` written by hand; the
pod templates carry no gang annotation at all. Quorum reads the JobSet, derives each gang's size from
its replicated jobs, and binds the pods whole (``extender/cluster/jobsets.py``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from .lifecycle_support import fail_pod
from .scenario import E2E_GANG_LABEL, E2E_MIN_COUNT, Scenario
from .test_jobset import GROUP, VERSION, create, require_jobset

pytestmark = pytest.mark.e2e

JOB_INDEX = "jobset.sigs.k8s.io/job-index"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def replicated_job(sc: Scenario, name: str, replicas: int, pods: int, gpus: int,
                   watched_as: str | None = None, size: int = 0) -> dict[str, Any]:
    """One replicated job of ``replicas`` Jobs of ``pods`` pods; ``watched_as`` lets the suite's
    all-or-nothing watcher check the whole gang of ``size`` (the pods name no gang themselves)."""
    pod = sc.pod("unused", gpus=gpus)
    labels = dict(pod["metadata"].get("labels") or {})
    annotations = dict(pod["metadata"].get("annotations") or {})
    if watched_as:
        labels[E2E_GANG_LABEL] = watched_as
        annotations[E2E_MIN_COUNT] = str(size)
    job = {"parallelism": pods, "completions": pods, "backoffLimit": 0,
           "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod["spec"]}}
    return {"name": name, "replicas": replicas, "template": {"spec": job}}


def jobset(name: str, replicated: list[dict[str, Any]], **annotations: str) -> dict[str, Any]:
    notes = {f"quorum.dev/{key.replace('_', '-')}": value for key, value in annotations.items()}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet",
            "metadata": {"name": name, "annotations": notes}, "spec": {"replicatedJobs": replicated}}


def jobset_pods(sc: Scenario, name: str, count: int, timeout: float = 60) -> list[str]:
    def created() -> list[str] | None:
        names = sorted(n for n, p in sc.pods().items()
                       if (p["metadata"].get("labels") or {}).get(JOBSET_NAME) == name)
        return names if len(names) >= count else None
    return list(sc.wait_for(f"JobSet {name}: {count} pods created", created, timeout=timeout))


def test_a_jobset_of_three_replicated_jobs_binds_whole_in_one_rack(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    why = topo.shortfall(nodes_per_rack=3)
    if why:
        pytest.skip(why)
    gpus = topo.gpus_per_node
    size = topo.nodes_per_rack  # whole nodes: exactly one rack holds the JobSet
    workers = size - 2
    parts = [replicated_job(sc, "driver", 1, 1, gpus, "js-whole", size),
             replicated_job(sc, "ps", 1, 1, gpus, "js-whole", size),
             replicated_job(sc, "workers", 1, workers, gpus, "js-whole", size)]
    create(sc, jobset("whole", parts, jobset_gang="jobset", required_topology=settings.rack_label))
    names = jobset_pods(sc, "whole", size)
    placement = sc.wait_bound(names, timeout=90, what=f"all {size} pods of the JobSet bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"the JobSet asks for one rack: {placement}"
    debug = sc.gang_debug("whole/attempt.0") or {}
    assert debug.get("minCount") == size, f"the size comes from the JobSet's spec: {debug}"
    sc.finish()


def test_a_jobset_that_no_rack_holds_binds_none_of_its_pods_and_says_why(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    gpus = topo.gpus_per_node
    size = topo.nodes_per_rack + 1  # whole nodes, one rack: never fits
    parts = [replicated_job(sc, "driver", 1, 1, gpus, "js-toobig", size),
             replicated_job(sc, "workers", 1, size - 1, gpus, "js-toobig", size)]
    create(sc, jobset("toobig", parts, jobset_gang="jobset", required_topology=settings.rack_label))
    names = jobset_pods(sc, "toobig", size)
    sc.wait_for("Quorum to say why the JobSet's gang waits",
                lambda: "rack" in str((sc.gang_debug("toobig/attempt.0") or {}).get("reason", "")),
                timeout=60)
    sc.assert_unbound_for(names, 5, what="pods of a JobSet that fits no rack")
    sc.finish()


def test_only_the_targeted_replicated_job_waits_for_its_whole_gang(scenario: Scenario) -> None:
    """The driver is outside the gang (``jobset-gang-replicated-jobs: workers``): it starts at once,
    while the workers, too many to fit one rack, bind only together, so never here."""
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    gpus = topo.gpus_per_node
    workers = topo.nodes_per_rack + 1
    parts = [replicated_job(sc, "driver", 1, 1, 1),
             replicated_job(sc, "workers", 1, workers, gpus, "js-targeted", workers)]
    create(sc, jobset("targeted", parts, jobset_gang="jobset", jobset_gang_replicated_jobs="workers",
                      required_topology=settings.rack_label))
    names = jobset_pods(sc, "targeted", workers + 1)
    pods = sc.pods_named(names)
    driver = [n for n in names if pods[n]["metadata"]["labels"].get(REPLICATED_JOB) == "driver"]
    sc.wait_bound(driver, timeout=60, what="the driver, which is in no gang, bound at once")
    sc.assert_unbound_for([n for n in names if n not in driver], 5, what="workers that fit no rack")
    debug = sc.gang_debug("targeted/attempt.0") or {}
    assert debug.get("minCount") == workers, f"only the workers are in the gang: {debug}"
    sc.finish()


def test_one_gang_per_job_each_in_one_rack(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    why = topo.shortfall(racks_per_block=2, nodes_per_rack=2)
    if why:
        pytest.skip(why)
    pods = topo.nodes_per_rack  # whole nodes: each Job fills one rack
    create(sc, jobset("perjob", [replicated_job(sc, "workers", 2, pods, topo.gpus_per_node)],
                      jobset_gang="job", required_topology=settings.rack_label))
    names = jobset_pods(sc, "perjob", 2 * pods)
    placement = sc.wait_bound(names, timeout=90, what=f"both Jobs' {2 * pods} pods bound")
    made = sc.pods_named(names)
    racks_of_job: dict[str, set[str]] = defaultdict(set)
    for name, node in placement.items():
        racks_of_job[made[name]["metadata"]["labels"][JOB_INDEX]].add(topo.nodes[node].rack)
    assert all(len(racks) == 1 for racks in racks_of_job.values()), f"each Job in one rack: {racks_of_job}"
    for index in ("0", "1"):
        debug = sc.gang_debug(f"perjob/workers.{index}/attempt.0") or {}
        assert debug.get("minCount") == pods, f"one gang per Job: {debug}"
    sc.finish()


def test_a_restarted_jobset_binds_its_new_attempt_whole(scenario: Scenario) -> None:
    """A member fails, the JobSet's failure policy recreates every Job (restart attempt 1): the new
    attempt is a fresh gang of its own size, and the old attempt's pods never count toward it."""
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    why = topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    size = topo.nodes_per_rack
    body = jobset("restarts", [replicated_job(sc, "workers", 1, size, topo.gpus_per_node)],
                  jobset_gang="jobset", required_topology=settings.rack_label)
    body["spec"]["failurePolicy"] = {"maxRestarts": 1}
    create(sc, body)
    first = jobset_pods(sc, "restarts", size)
    sc.wait_bound(first, timeout=90, what=f"attempt 0: {size} pods bound")
    fail_pod(sc.kube, sc.ns, first[0])

    def second_attempt() -> list[str] | None:
        pods = sc.pods()
        names = sorted(n for n, p in pods.items()
                       if (p["metadata"].get("labels") or {}).get(RESTART_ATTEMPT) == "1")
        return names if len(names) >= size else None

    again = list(sc.wait_for(f"attempt 1: {size} pods created", second_attempt, timeout=120))
    placement = sc.wait_bound(again, timeout=90, what=f"attempt 1: all {size} pods bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"the new attempt is in one rack too: {placement}"
    debug = sc.gang_debug("restarts/attempt.1") or {}
    assert debug.get("minCount") == size, f"a fresh gang for the new attempt: {debug}"
    sc.finish()
