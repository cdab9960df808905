"""Wire hardening: inputs found by fuzzing and hostile requests, each answered with a clear 400."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.adapters import wire
from extender.adapters.wire import WireError

from .fixtures import make_node, make_pod, raw
from .test_wire import _nodes, _preempt, body, pod

# --------------------------------------------------------------------------- hardening regressions


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


DEEP = "<deep>"


def _deepened(payload: bytes, depth: int) -> bytes:
    """The payload with the string ``DEEP`` replaced by lists nested ``depth`` levels (as JSON text:
    the json module itself cannot encode that deep)."""
    return payload.replace(json.dumps(DEEP).encode(), b"[" * depth + b"]" * depth)


def test_node_nested_too_deep_to_return_is_a_wire_error() -> None:
    # orjson decodes 1,024 levels but encodes only 255: such a Node used to fail while encoding
    # the answer (a TypeError, HTTP 500) after the core had already acted on the request.
    node = make_node("n1", "b0", "b0-r0")
    node["status"]["deep"] = _nested(300)
    with pytest.raises(WireError, match=r"Nodes\.items"):
        wire.parse_extender_args(_nodes([node]))


def test_deeply_nested_creation_timestamp_of_a_gang_pod_is_a_wire_error() -> None:
    # Read with str() for annotation gangs: a 1,000-deep list raised RecursionError (HTTP 500).
    member = make_pod("w-0", "uid-w0", gang_annotation="train-b", min_count=2)
    member["metadata"]["creationTimestamp"] = DEEP
    payload = _deepened(body({"Pod": member, "Nodes": None, "NodeNames": ["n1"]}), 1000)
    with pytest.raises(WireError, match="creationTimestamp"):
        wire.parse_extender_args(payload)


def test_deeply_nested_victim_uid_is_a_wire_error() -> None:
    # Victim UIDs were read with str(): RecursionError on a deeply nested value.
    with pytest.raises(WireError, match="UID"):
        wire.parse_preemption_args(_deepened(_preempt(meta={"n1": {"Pods": [{"UID": DEEP}]}}), 1018))
    with pytest.raises(WireError, match="uid"):
        wire.parse_preemption_args(
            _deepened(_preempt(full={"n1": {"Pods": [{"metadata": {"uid": DEEP}}]}}), 1016))


@pytest.mark.parametrize("error", [OverflowError("int too large"), ArithmeticError("overflow")])
def test_arithmetic_errors_while_reading_pod_requests_are_wire_errors(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    # Quantities are bounded where they are parsed; the edge still turns any arithmetic failure on
    # request data into a 400 instead of a 500.
    def fail(*_: Any) -> Any:
        raise error

    monkeypatch.setattr(wire, "pod_record", fail)
    with pytest.raises(WireError, match="quantity"):
        wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": ["n1"]}))


def test_error_body_is_bounded() -> None:
    doc = json.loads(wire.error_body("x" * 100_000))
    assert len(doc["error"]) < 1000


def test_filter_result_drops_names_the_request_did_not_send(caplog: pytest.LogCaptureFixture) -> None:
    args = wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": ["a", "b", "c"]}))
    doc = json.loads(wire.filter_result(
        args, ["a", "x"], {"b": "full", "y": "full"}, {"c": "reserved", "z": "reserved"}))
    assert doc["NodeNames"] == ["a"]
    assert doc["FailedNodes"] == {"b": "full"}
    assert doc["FailedAndUnresolvableNodes"] == {"c": "reserved"}
    assert any("outside the request" in r.getMessage() for r in caplog.records)


def test_filter_result_in_node_list_mode_drops_failed_names_not_sent() -> None:
    args = wire.parse_extender_args(raw("filter_args_nodes.json"))
    doc = json.loads(wire.filter_result(args, [], {"kwok-b9-r9-n9": "x"}, {"kwok-b0-r0-n0": "y", "n7": "z"}))
    assert doc["FailedNodes"] == {}
    assert doc["FailedAndUnresolvableNodes"] == {"kwok-b0-r0-n0": "y"}


def test_filter_result_keeps_answers_within_the_request_untouched(caplog: pytest.LogCaptureFixture) -> None:
    names = [f"n{i}" for i in range(50)]
    args = wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": names}))
    for passing, unresolvable in ((names, {}), ([], dict.fromkeys(names, "gang")),
                                  (names[:40], dict.fromkeys(names[40:], "reserved")), (["n3"], {})):
        doc = json.loads(wire.filter_result(args, passing, {}, unresolvable))
        assert doc["NodeNames"] == passing
        assert doc["FailedAndUnresolvableNodes"] == unresolvable
    assert not caplog.records


class _Table:
    """A ScoreTable stand-in that answers whatever scores it is given (in or out of range)."""

    def __init__(self, scores: dict[str, Any], epoch: Any = None) -> None:
        self.known = scores
        self.epoch = epoch
        self.score_of = scores.get


@pytest.mark.parametrize("epoch", [None, "e1"])
def test_scores_outside_0_to_10_are_clamped_to_ints(epoch: Any) -> None:
    # A score of 11 used to raise IndexError (HTTP 500); -1 picked the cache of score 10.
    encoder = wire.ScoreEncoder(lambda name: True, lambda: 100)
    scores = {"a": 11, "b": -1, "c": 5.6, "d": float("nan"), "e": 7, "f": 10**30, "g": 5.0}
    table: Any = _Table(scores, epoch)
    doc = json.loads(encoder.encode(list(scores), table))
    # Clamped to 10, 0, 6, 0, 7, 10, 5; the lowest (0) is left out and taken off the others.
    assert [e["Host"] for e in doc] == ["a", "c", "e", "f", "g"]
    assert {e["Host"]: e["Score"] for e in doc} == {"a": 10, "c": 6, "e": 7, "f": 10, "g": 5}
    assert all(type(e["Score"]) is int for e in doc)


def test_host_priority_fragment_clamps_its_score() -> None:
    assert json.loads(wire.host_priority_fragment("n1", 12)) == {"Host": "n1", "Score": 10}


def test_preemption_result_names_only_requested_nodes_and_victims(caplog: pytest.LogCaptureFixture) -> None:
    args = wire.parse_preemption_args(_preempt(meta={
        "n1": {"Pods": [{"UID": "u1"}, {"UID": "u2"}], "NumPDBViolations": 1},
        "n2": {"Pods": [{"UID": "u3"}], "NumPDBViolations": 0},
    }))
    answer = {
        "n1": {"Pods": [{"UID": "u1"}, {"UID": "u9"}], "NumPDBViolations": 1},  # u9 was not offered
        "n2": {"Pods": [], "NumPDBViolations": 0},  # a node without victims is an error upstream
        "n3": {"Pods": [{"UID": "u3"}], "NumPDBViolations": 0},  # a node that was not offered
    }
    doc = json.loads(wire.preemption_result(args, answer))
    assert doc == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}}
    assert any("preempt answer" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("epoch", [None, "e1"])
def test_names_the_cluster_does_not_know_score_0_whatever_they_contain(epoch: Any) -> None:
    # They score 0, the lowest, so they are left out (kube-scheduler adds nothing for them): a
    # 30 MiB list of unknown names costs no entry at all. Nothing is kept for them.
    known_nodes = {"n1": 7, "n2": 3}
    encoder = wire.ScoreEncoder(known_nodes.__contains__, lambda: 100)
    odd = ['b"c', "d\\", "é", 'x\\"y', "", ',","', "\u2028", "\x00\n"]
    candidates = ["n1", *odd, "n2", "n1"]
    table: Any = _Table(dict(known_nodes), epoch)
    for _ in range(2):  # the second time from cached fragments
        doc = json.loads(encoder.encode(candidates, table))
        assert [(e["Host"], e["Score"]) for e in doc] == [("n1", 7), ("n2", 3), ("n1", 7)]
    assert all(name in known_nodes for cache in encoder._by_score for name in cache)


@pytest.mark.parametrize("mode", ["names", "nodes", "none"])
def test_rejection_result_is_the_filter_result_rejecting_every_candidate(mode: str) -> None:
    odd = ["n1", 'b"c', "d\\", "é", 'x\\"y', ',","', '":"', "\u2028"]
    if mode == "names":
        payload = body({"Pod": pod(), "Nodes": None, "NodeNames": odd})
    elif mode == "nodes":
        payload = _nodes([make_node(name, "b0", "b0-r0") for name in odd])
    else:
        payload = body({"Pod": pod(), "Nodes": None, "NodeNames": None})
    args = wire.parse_extender_args(payload)
    reason = 'gang ml/g: 1/2 pods exist, "waiting" for 1 \\ é'
    expected = json.loads(wire.filter_result(args, [], {}, dict.fromkeys(args.candidate_names, reason)))
    assert json.loads(wire.rejection_result(args, reason)) == expected


@pytest.mark.parametrize("epoch", [None, "e1"])
def test_only_candidates_above_the_lowest_are_written_with_the_lowest_taken_off(epoch: Any) -> None:
    nodes = {"n1": 7, "n2": 3, "n3": 3}

    def encode(candidates: list[str], scores: dict[str, Any]) -> list[tuple[str, int]]:
        table: Any = _Table(scores, epoch)
        doc = json.loads(wire.ScoreEncoder(nodes.__contains__, lambda: 100).encode(candidates, table))
        return [(e["Host"], e["Score"]) for e in doc]

    assert encode(["n1", "n2", "n3"], nodes) == [("n1", 4)]
    assert encode(["n2", "n3"], nodes) == []  # every candidate the same: no entries
    assert encode(["n1", "gone", "n2"], nodes) == [("n1", 7), ("n2", 3)]  # a name it does not know: 0
    assert encode(["n2", "gone"], nodes | {"gone": 9}) == [("n2", 3)]  # even if the table scores it
    assert encode(["n1", "n2"], {"n1": 11, "n2": 4}) == [("n1", 6)]  # 11 clamped to 10 first
    assert encode(["n1", "n2"], {"n1": 12, "n2": 10}) == []  # both 10 once clamped


def test_kept_scores_follow_the_table_epoch() -> None:
    encoder = wire.ScoreEncoder(lambda name: True, lambda: 100)
    assert encoder.encode(["n1", "n2"], _Table({"n1": 4, "n2": 4}, "e1")) == b"[]"  # type: ignore[arg-type]
    doc = json.loads(encoder.encode(["n1", "n2"], _Table({"n1": 4, "n2": 9}, "e2")))  # type: ignore[arg-type]
    assert [(e["Host"], e["Score"]) for e in doc] == [("n2", 5)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 400)), min_size=1, max_size=12),
       st.sampled_from([None, "e1"]))
def test_the_answer_ranks_every_candidate_as_the_full_list_would(
        nodes: list[tuple[int, int]], epoch: Any) -> None:
    # kube-scheduler's total for a node: its plugins' total plus weight x 10 x the extender's score
    # (0 for a host the answer leaves out). The answer must move every total by the same amount.
    names = [f"n{i}" for i in range(len(nodes))]
    scores = {name: score for name, (score, _) in zip(names, nodes, strict=True)}
    table: Any = _Table(scores, epoch)
    answered = {e["Host"]: e["Score"] for e in json.loads(
        wire.ScoreEncoder(scores.__contains__, lambda: 100).encode(names, table))}
    weight = 5
    full = [plugins + weight * 10 * score for score, plugins in nodes]
    short = [plugins + weight * 10 * answered.get(name, 0)
             for name, (_, plugins) in zip(names, nodes, strict=True)]
    assert len({f - s for f, s in zip(full, short, strict=True)}) == 1
    assert all(1 <= score <= 10 for score in answered.values())
