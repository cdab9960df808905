"""extender.adapters.wire: the kube-scheduler extender/v1 wire format, both directions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from extender.adapters import wire
from extender.adapters.wire import WireError

from .fixtures import GANG_POD_UID, VICTIM_UID, load, make_node, make_pod, raw

FILTER_RESULT_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def pod() -> dict[str, Any]:
    return load("pod_gang_member.json")


# --------------------------------------------------------------------------- ExtenderArgs


def test_parse_node_cache_capable_args_as_recorded() -> None:
    args = wire.parse_extender_args(raw("filter_args_node_names.json"))
    assert args.node_names == ["kwok-b0-r0-n0", "kwok-b0-r0-n1", "kwok-b0-r1-n0"]
    assert args.nodes is None
    assert args.candidate_names == ["kwok-b0-r0-n0", "kwok-b0-r0-n1", "kwok-b0-r1-n0"]
    assert args.pod.uid == GANG_POD_UID
    assert args.pod.gang_key == f"{args.pod.namespace}/train-a"
    assert args.pod.requests  # computed once, at the edge


def test_parse_full_node_list_args_as_recorded() -> None:
    args = wire.parse_extender_args(raw("filter_args_nodes.json"))
    assert args.node_names is None
    assert args.nodes is not None
    assert [n["metadata"]["name"] for n in args.nodes] == ["kwok-b0-r0-n0", "kwok-b0-r0-n1", "kwok-b1-r0-n0"]
    assert args.candidate_names == ["kwok-b0-r0-n0", "kwok-b0-r0-n1", "kwok-b1-r0-n0"]
    # The embedded Node keeps its lowerCamel fields untouched.
    assert args.nodes[2]["metadata"]["labels"]["topology.quorum.dev/rack"] == "b1-r0"
    assert args.nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_both_node_fields_null_means_no_candidates() -> None:
    args = wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": None}))
    assert args.candidate_names == []
    # Answered in NodeNames mode: an empty list of survivors.
    result = json.loads(wire.filter_result(args, [], {}, {}))
    assert result["NodeNames"] == []
    assert result["Nodes"] is None


def test_node_list_with_null_items_has_no_candidates() -> None:
    args = wire.parse_extender_args(body({"Pod": pod(), "Nodes": {"metadata": {}, "items": None},
                                          "NodeNames": None}))
    assert args.nodes == []
    assert args.candidate_names == []


def test_empty_node_names_list_is_kept() -> None:
    args = wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": []}))
    assert args.node_names == []


def test_keys_are_matched_case_insensitively_like_go() -> None:
    args = wire.parse_extender_args(body({"pod": pod(), "nodes": None, "nodenames": ["kwok-b0-r0-n0"]}))
    assert args.node_names == ["kwok-b0-r0-n0"]
    assert args.pod.name == "train-a-worker-0"


def test_extra_keys_are_ignored() -> None:
    doc = {"Pod": pod(), "Nodes": None, "NodeNames": ["kwok-b0-r0-n0"], "FutureField": {"x": 1}}
    assert wire.parse_extender_args(body(doc)).node_names == ["kwok-b0-r0-n0"]


# --------------------------------------------------------------------------- filter result


def test_filter_result_in_node_names_mode() -> None:
    args = wire.parse_extender_args(raw("filter_args_node_names.json"))
    out = wire.filter_result(
        args, ["kwok-b0-r0-n1"], {"kwok-b0-r0-n0": "not enough gpu"}, {"kwok-b0-r1-n0": "gang waits"}
    )
    doc = json.loads(out)
    assert set(doc) == FILTER_RESULT_KEYS
    assert doc == {
        "Nodes": None,
        "NodeNames": ["kwok-b0-r0-n1"],
        "FailedNodes": {"kwok-b0-r0-n0": "not enough gpu"},
        "FailedAndUnresolvableNodes": {"kwok-b0-r1-n0": "gang waits"},
        "Error": "",
    }


def test_filter_result_in_node_list_mode_returns_the_input_node_objects() -> None:
    args = wire.parse_extender_args(raw("filter_args_nodes.json"))
    assert args.nodes is not None
    doc = json.loads(wire.filter_result(args, ["kwok-b1-r0-n0", "kwok-b0-r0-n0"], {}, {}))
    assert set(doc) == FILTER_RESULT_KEYS
    assert doc["NodeNames"] is None
    items = doc["Nodes"]["items"]
    # Full objects, unchanged, in the request's order; only the survivors.
    assert items == [args.nodes[0], args.nodes[2]]
    assert doc["FailedNodes"] == {}
    assert doc["FailedAndUnresolvableNodes"] == {}
    assert doc["Error"] == ""


def test_filter_result_in_node_list_mode_drops_names_not_in_the_request() -> None:
    args = wire.parse_extender_args(raw("filter_args_nodes.json"))
    doc = json.loads(wire.filter_result(args, ["kwok-b9-r9-n9"], {}, {}))
    assert doc["Nodes"]["items"] == []


def test_filter_result_carries_an_error() -> None:
    args = wire.parse_extender_args(raw("filter_args_node_names.json"))
    doc = json.loads(wire.filter_result(args, [], {}, {}, error="cache not synced"))
    assert doc["Error"] == "cache not synced"
    assert doc["NodeNames"] == []


# --------------------------------------------------------------------------- prioritize result


def test_host_priority_list_is_a_bare_array() -> None:
    fragments = [wire.host_priority_fragment("kwok-b0-r0-n0", 10),
                 wire.host_priority_fragment("kwok-b1-r0-n0", 0)]
    doc = json.loads(wire.host_priority_list(fragments))
    assert doc == [{"Host": "kwok-b0-r0-n0", "Score": 10}, {"Host": "kwok-b1-r0-n0", "Score": 0}]
    assert all(isinstance(entry["Score"], int) for entry in doc)


def test_empty_host_priority_list() -> None:
    assert json.loads(wire.host_priority_list([])) == []


# --------------------------------------------------------------------------- bind


def test_parse_binding_args_as_recorded() -> None:
    args = wire.parse_binding_args(raw("bind_args.json"))
    assert args == wire.BindingArgs("train-a-worker-0", "ml", GANG_POD_UID, "kwok-b0-r0-n0")


def test_binding_args_accept_an_empty_uid() -> None:
    args = wire.parse_binding_args(body({"PodName": "p", "PodNamespace": "ml", "PodUID": "", "Node": "n"}))
    assert args.pod_uid == ""


def test_binding_result_shape() -> None:
    assert json.loads(wire.binding_result()) == {"Error": ""}
    assert json.loads(wire.binding_result("refused")) == {"Error": "refused"}


# --------------------------------------------------------------------------- preempt


def test_parse_preemption_args_from_meta_victims() -> None:
    args = wire.parse_preemption_args(raw("preempt_args_meta.json"))
    assert args.pod.name == "serve-llm-0"
    assert args.victims == {"kwok-b0-r0-n0": {"Pods": [{"UID": VICTIM_UID}], "NumPDBViolations": 0}}


def test_parse_preemption_args_from_full_victims_reduces_pods_to_uids() -> None:
    args = wire.parse_preemption_args(raw("preempt_args_full.json"))
    assert args.victims == {"kwok-b0-r0-n0": {"Pods": [{"UID": VICTIM_UID}], "NumPDBViolations": 1}}


def test_meta_victims_win_when_both_are_sent() -> None:
    full = load("preempt_args_full.json")
    full["NodeNameToMetaVictims"] = {"kwok-b1-r0-n0": {"Pods": [{"UID": "u9"}], "NumPDBViolations": 2}}
    args = wire.parse_preemption_args(body(full))
    assert args.victims == {"kwok-b1-r0-n0": {"Pods": [{"UID": "u9"}], "NumPDBViolations": 2}}


def test_preemption_args_with_null_pods_and_pdb_count() -> None:
    doc = {"Pod": pod(), "NodeNameToVictims": None,
           "NodeNameToMetaVictims": {"n1": {"Pods": None, "NumPDBViolations": None}}}
    args = wire.parse_preemption_args(body(doc))
    assert args.victims == {"n1": {"Pods": [], "NumPDBViolations": 0}}


def test_preemption_args_without_victims() -> None:
    args = wire.parse_preemption_args(body({"Pod": pod(), "NodeNameToVictims": None,
                                            "NodeNameToMetaVictims": None}))
    assert args.victims == {}


def test_preemption_result_shape() -> None:
    args = wire.parse_preemption_args(raw("preempt_args_meta.json"))
    victims = {"kwok-b0-r0-n0": {"Pods": [{"UID": VICTIM_UID}], "NumPDBViolations": 0}}
    assert json.loads(wire.preemption_result(args, victims)) == {"NodeNameToMetaVictims": victims}


def test_error_body_shape() -> None:
    assert json.loads(wire.error_body("bad")) == {"error": "bad"}


# --------------------------------------------------------------------------- malformed input


def _with_pod(pod_value: Any) -> bytes:
    return body({"Pod": pod_value, "Nodes": None, "NodeNames": ["n1"]})


def _nodes(items: Any) -> bytes:
    return body({"Pod": pod(), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})


MALFORMED_EXTENDER_ARGS = {
    "empty body": b"",
    "invalid json": b'{"Pod": {',
    "not utf-8": b'{"Pod": "\xff"}',
    "array body": b"[]",
    "string body": b'"Pod"',
    "null body": b"null",
    "missing pod": body({"Nodes": None, "NodeNames": ["n1"]}),
    "null pod": _with_pod(None),
    "pod is a string": _with_pod("train-a-worker-0"),
    "pod without metadata": _with_pod({"spec": {}}),
    "pod metadata not an object": _with_pod({"metadata": ["x"]}),
    "pod without name": _with_pod({"metadata": {"namespace": "ml"}}),
    "pod with empty name": _with_pod({"metadata": {"name": ""}}),
    "pod name not a string": _with_pod({"metadata": {"name": 7}}),
    "pod spec not an object": _with_pod({"metadata": {"name": "p"}, "spec": ["c"]}),
    "node names a string": body({"Pod": pod(), "Nodes": None, "NodeNames": "kwok-b0-r0-n0"}),
    "node names with a number": body({"Pod": pod(), "Nodes": None, "NodeNames": ["n1", 2]}),
    "node names with null": body({"Pod": pod(), "Nodes": None, "NodeNames": [None]}),
    "nodes a list": body({"Pod": pod(), "Nodes": [make_node("n1", "b0", "b0-r0")], "NodeNames": None}),
    "nodes items an object": _nodes({"n1": {}}),
    "nodes items with a string": _nodes(["kwok-b0-r0-n0"]),
    "node without name": _nodes([{"metadata": {}}]),
    "node without metadata": _nodes([{"status": {}}]),
    "node name a number": _nodes([{"metadata": {"name": 3}}]),
    # kube-scheduler never sends these, but a 400 (not a crash) is the contract for any client.
    "node metadata a string": _nodes([{"metadata": "kwok-b0-r0-n0"}]),
    "node metadata a list": _nodes([{"metadata": ["kwok-b0-r0-n0"]}]),
    "pod phase an object": _with_pod({"metadata": {"name": "p"}, "status": {"phase": {}}}),
    "pod creation timestamp a list": _with_pod({"metadata": {"name": "p", "creationTimestamp": [1]}}),
    "pod scheduling gates an object": _with_pod({"metadata": {"name": "p"}, "spec": {"schedulingGates": {}}}),
    "pod resources requests a list": _with_pod(
        {"metadata": {"name": "p"}, "spec": {"resources": {"requests": ["cpu"]}}}),
}


@pytest.mark.parametrize("payload", MALFORMED_EXTENDER_ARGS.values(), ids=MALFORMED_EXTENDER_ARGS.keys())
def test_malformed_extender_args_raise_wire_error(payload: bytes) -> None:
    with pytest.raises(WireError):
        wire.parse_extender_args(payload)


def _bind(**fields: Any) -> bytes:
    doc: dict[str, Any] = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u1", "Node": "n1"}
    for key, value in fields.items():
        if value is ...:
            doc.pop(key)
        else:
            doc[key] = value
    return body(doc)


MALFORMED_BINDING_ARGS = {
    "empty body": b"",
    "invalid json": b"{PodName: p}",
    "array body": body([{"PodName": "p"}]),
    "missing node": _bind(Node=...),
    "missing pod name": _bind(PodName=...),
    "missing namespace": _bind(PodNamespace=...),
    "missing uid": _bind(PodUID=...),
    "null node": _bind(Node=None),
    "empty node": _bind(Node=""),
    "empty pod name": _bind(PodName=""),
    "node a number": _bind(Node=1),
    "pod name a list": _bind(PodName=["p"]),
    "uid a number": _bind(PodUID=123),
}


@pytest.mark.parametrize("payload", MALFORMED_BINDING_ARGS.values(), ids=MALFORMED_BINDING_ARGS.keys())
def test_malformed_binding_args_raise_wire_error(payload: bytes) -> None:
    with pytest.raises(WireError):
        wire.parse_binding_args(payload)


def _preempt(meta: Any = None, full: Any = None, pod_value: Any = ...) -> bytes:
    return body({"Pod": pod() if pod_value is ... else pod_value,
                 "NodeNameToVictims": full, "NodeNameToMetaVictims": meta})


MALFORMED_PREEMPTION_ARGS = {
    "empty body": b"",
    "array body": b"[1]",
    "missing pod": body({"NodeNameToMetaVictims": {}}),
    "pod without name": _preempt(pod_value={"metadata": {}}),
    "meta victims a list": _preempt(meta=[{"Pods": []}]),
    "meta victim entry a string": _preempt(meta={"n1": "u1"}),
    "meta victim pods an object": _preempt(meta={"n1": {"Pods": {"UID": "u1"}}}),
    "meta victim pods with a string": _preempt(meta={"n1": {"Pods": ["u1"]}}),
    "full victims a string": _preempt(full="n1"),
    "full victim entry a list": _preempt(full={"n1": []}),
    "full victim pods with a number": _preempt(full={"n1": {"Pods": [1]}}),
    # Wrong scalar types inside otherwise well-formed victims: still a client error, never a crash.
    "pdb violations a word": _preempt(meta={"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": "two"}}),
    "pdb violations an object": _preempt(meta={"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": {}}}),
    "full victim metadata a string": _preempt(full={"n1": {"Pods": [{"metadata": "victim"}]}}),
    "meta victim uid a number": _preempt(meta={"n1": {"Pods": [{"UID": 7}]}}),
    "full victim uid a list": _preempt(full={"n1": {"Pods": [{"metadata": {"uid": ["u1"]}}]}}),
    "meta victim pods false": _preempt(meta={"n1": {"Pods": False}}),
}


@pytest.mark.parametrize("payload", MALFORMED_PREEMPTION_ARGS.values(), ids=MALFORMED_PREEMPTION_ARGS.keys())
def test_malformed_preemption_args_raise_wire_error(payload: bytes) -> None:
    with pytest.raises(WireError):
        wire.parse_preemption_args(payload)


def test_wire_error_message_names_the_field() -> None:
    with pytest.raises(WireError, match="NodeNames"):
        wire.parse_extender_args(body({"Pod": pod(), "Nodes": None, "NodeNames": "n1"}))
    with pytest.raises(WireError, match=r"Pod\.metadata\.name"):
        wire.parse_extender_args(_with_pod({"metadata": {}}))
    with pytest.raises(WireError, match="Node"):
        wire.parse_binding_args(_bind(Node=...))
    with pytest.raises(WireError, match=r"Nodes\.items"):
        wire.parse_extender_args(_nodes([{"metadata": {}}]))


def test_gang_member_pod_from_builder_parses() -> None:
    # Guards the shared builder: the pods other tests send must be valid requests themselves.
    member = make_pod("w-1", "uid-w-1", group="train-a")
    args = wire.parse_extender_args(body({"Pod": member, "Nodes": None, "NodeNames": ["n1"]}))
    assert args.pod.gang_key is not None and args.pod.gang_key.endswith("/train-a")
