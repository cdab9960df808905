"""Reading how a pod repels its gang mates, once, when its record is built."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.affinity import members_apart, selector_matches
from extender.cluster.records import pod_record
from extender.topology.apart import HOSTNAME_LABEL, MembersApart

from .fixtures import gang_pod

OWN = {"app": "train", "job": "j1"}
RACK = "topology.quorum.dev/rack"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def term(selector: dict[str, Any] | None, key: str = HOSTNAME_LABEL, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": key, **extra}
    if selector is not None:
        out["labelSelector"] = selector
    return out


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAntiAffinity": {REQUIRED: list(terms)}}}


def read(spec: dict[str, Any], labels: dict[str, str] = OWN, namespace: str = "ml") -> MembersApart | None:
    return members_apart(spec, {"labels": labels, "namespace": namespace})


@pytest.mark.parametrize(("selector", "matches"), [
    ({"matchLabels": {"app": "train"}}, True),
    ({"matchLabels": {"app": "serve"}}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["train", "x"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, False),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["train"]}]}, False),
    ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["x"]}]}, True),
    ({"matchExpressions": [{"key": "job", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": "job", "operator": "DoesNotExist"}]}, False),
    ({"matchLabels": {"app": "train"},
      "matchExpressions": [{"key": "job", "operator": "In", "values": ["j2"]}]}, False),
    ({}, True),  # an empty selector selects every pod
    (None, False),  # no selector selects none
])
def test_each_selector_operator_against_the_pods_own_labels(selector: Any, matches: bool) -> None:
    assert selector_matches(selector, OWN) is matches
    assert read(anti(term(selector))) == (MembersApart((HOSTNAME_LABEL,)) if matches else None)


@pytest.mark.parametrize(("selector", "problem"), [
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, "operator 'Gt' is unknown"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}, "operator In without values"),
    ({"matchLabels": ["app"]}, "matchLabels is not a map"),
])
def test_a_selector_that_is_not_understood_is_a_problem(selector: Any, problem: str) -> None:
    rule = read(anti(term(selector)))
    assert rule is not None and rule.problem == f"required anti-affinity labelSelector {problem}"


def test_a_pod_without_affinity_has_no_rule_and_terms_about_other_pods_are_not_read() -> None:
    assert read({}) is None
    assert read({"affinity": {"nodeAffinity": {REQUIRED: {}}}}) is None
    assert read(anti(term({"matchLabels": {"app": "db"}}, key="example.com/unknown"))) is None
    other_namespace = term({"matchLabels": OWN}, namespaces=["serving"])
    assert read(anti(other_namespace)) is None
    assert read(anti(term({"matchLabels": OWN}, namespaces=["ml"]))) == MembersApart((HOSTNAME_LABEL,))
    preferred = {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": term({"matchLabels": OWN})}]}}}
    assert read(preferred) is None


def test_several_terms_give_every_key_once() -> None:
    rule = read(anti(term({"matchLabels": {"app": "train"}}, key=RACK), term({}), term({"matchLabels": OWN})))
    assert rule == MembersApart((HOSTNAME_LABEL, RACK))


@pytest.mark.parametrize(("extra", "problem"), [
    ({"namespaceSelector": {"matchLabels": {"t": "a"}}}, "required anti-affinity with a namespaceSelector"),
    ({"matchLabelKeys": ["pod-template-hash"]}, "required anti-affinity with matchLabelKeys"),
    ({"mismatchLabelKeys": ["tenant"]}, "required anti-affinity with mismatchLabelKeys"),
    ({"topologyKey": ""}, "required anti-affinity has no topologyKey"),
])
def test_what_placement_does_not_model_about_the_members_is_a_problem(extra: dict[str, Any],
                                                                      problem: str) -> None:
    rule = read(anti(term({"matchLabels": OWN}, **extra)))
    assert rule is not None and problem in rule.problem
    assert read(anti(term({"matchLabels": OWN}, namespaceSelector={}))) == MembersApart((HOSTNAME_LABEL,))


def test_required_affinity_among_members_is_a_problem_but_towards_others_is_not() -> None:
    together = {"affinity": {"podAffinity": {REQUIRED: [term({"matchLabels": OWN}, key=RACK)]}}}
    rule = read(together)
    assert rule is not None and rule.problem.startswith("required pod affinity between members")
    together["affinity"]["podAffinity"][REQUIRED][0]["labelSelector"] = {"matchLabels": {"app": "cache"}}
    assert read(together) is None


def spread(**constraint: Any) -> dict[str, Any]:
    base = {"maxSkew": 1, "topologyKey": HOSTNAME_LABEL, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "train"}}}
    return {"topologySpreadConstraints": [{**base, **constraint}]}


def test_a_hard_spread_with_skew_one_over_the_members_is_one_per_domain() -> None:
    assert read(spread()) == MembersApart((HOSTNAME_LABEL,))
    assert read(spread(topologyKey=RACK)) == MembersApart((RACK,))
    assert read(spread(whenUnsatisfiable="ScheduleAnyway", maxSkew=3)) is None
    assert read(spread(labelSelector={"matchLabels": {"app": "other"}}, maxSkew=3)) is None
    skewed = read(spread(maxSkew=2))
    assert skewed is not None and skewed.problem == "topology spread constraint with maxSkew 2"
    keyed = read(spread(matchLabelKeys=["pod-template-hash"]))
    assert keyed is not None and keyed.problem == "topology spread constraint with matchLabelKeys"


def test_the_pod_record_carries_the_rule_read_once() -> None:
    pod = gang_pod("w0", gang="w", min_count=2)
    assert pod_record(pod, "ml/w").apart is None
    labels = pod["metadata"]["labels"]
    pod["spec"].update(anti(term({"matchLabels": labels})))
    assert pod_record(pod, "ml/w").apart == MembersApart((HOSTNAME_LABEL,))
