"""kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1).

The Go structs carry no json tags, so keys arrive capitalised and unset fields arrive as ``null``;
embedded Kubernetes objects keep their usual lowerCamel keys. Parsing is strict about shape (a
malformed request is answered with HTTP 400 by the server) and lenient about extra keys.

Answers are checked against the protocol here too, as a last line of defence: kube-scheduler
fails the whole scheduling attempt on a node name it did not send, so such an answer from the core
is trimmed to the request and logged as a warning instead. Prioritize answers are encoded in
``score_encoding`` (re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ..cluster.conventions import declared_by_pod, gang_key_of_pod, yielding_gang_key
from ..cluster.jobsets import jobset_member
from ..cluster.records import GangSpec, PodRecord, pod_record
from ..cluster.resources import QuantityError
from ..gang.gates import FilterDecision
from .score_encoding import ScoreEncoder as ScoreEncoder
from .score_encoding import host_priority_fragment as host_priority_fragment
from .score_encoding import host_priority_list as host_priority_list
from .shapes import WireError as WireError  # raised by every parse_* function
from .shapes import (
    check_metadata,
    check_spec,
    integer_or_null,
    list_or_null,
    object_or_null,
    string_or_null,
    strings,
)

log = logging.getLogger(__name__)

# Error messages echo parts of the request; a client must not get its 30 MiB name back.
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter / prioritize input. Exactly one of node_names / nodes is set.

    The pod arrives as a typed record (requests computed once, here) plus the gang its annotations
    declare, for a pod the informer has not delivered yet; the core never sees the raw object.
    In node-list mode each Node is encoded once while parsing (``encoded_nodes``), so a Node that
    cannot be sent back is refused before the core acts on the request.
    """

    pod: PodRecord
    declared_gang: GangSpec | None
    node_names: list[str] | None  # nodeCacheCapable: true
    nodes: list[dict[str, Any]] | None  # nodeCacheCapable: false (full Node objects)
    encoded_nodes: list[bytes] | None = None  # nodes, each already encoded for the answer
    node_list_names: list[str] | None = None  # metadata.name of each of nodes

    @property
    def candidate_names(self) -> list[str]:
        if self.node_names is not None:
            return self.node_names
        return self.node_list_names or []


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: PodRecord
    victims: dict[str, dict[str, Any]]  # node -> {"Pods": [{"UID": ...}], "NumPDBViolations": n}


def decode(body: bytes) -> dict[str, Any]:
    if not body:
        raise WireError("empty request body")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError("request body must be a JSON object")
    return doc


def _get(doc: dict[str, Any], key: str) -> Any:
    """Go decodes keys case-insensitively; accept the same so hand-written clients work too."""
    if key in doc:
        return doc[key]
    lower = key.lower()
    for k, v in doc.items():
        if k.lower() == lower:
            return v
    return None


def _pod(doc: dict[str, Any]) -> tuple[PodRecord, GangSpec | None]:
    """The embedded Pod as a typed record plus what it declares of its gang by itself."""
    pod = _get(doc, "Pod")
    if not isinstance(pod, dict):
        raise WireError("Pod: required object missing")
    check_metadata(pod.get("metadata"))
    check_spec(object_or_null(pod.get("spec"), "Pod.spec"))
    strings(object_or_null(pod.get("status"), "Pod.status"), ("phase",), "Pod.status")
    try:
        named = gang_key_of_pod(pod)
        record = pod_record(pod, named, yielding_gang_key(pod), jobset_member(pod) if named is None else None)
    except (QuantityError, ValueError, ArithmeticError) as exc:
        # ArithmeticError: a quantity whose exponent overflows the decimal context or an int.
        raise WireError(f"Pod.spec: invalid resource quantity: {exc}") from None
    return record, declared_by_pod(pod)


def _node_names(names: Any) -> list[str]:
    if not isinstance(names, list):
        raise WireError("NodeNames: must be a list of strings")
    try:
        "".join(names)  # a C-speed type check: raises TypeError on any non-string
    except TypeError:
        raise WireError("NodeNames: must be a list of strings") from None
    return names


def _node_list(nodes: Any) -> tuple[list[dict[str, Any]], list[str], list[bytes]]:
    """Items, their names and each item encoded for the answer (refused here if it cannot be)."""
    if not isinstance(nodes, dict):
        raise WireError("Nodes: must be a NodeList object")
    items = list_or_null(nodes.get("items"), "Nodes.items")
    if not all(
        isinstance(n, dict) and isinstance(n.get("metadata"), dict)
        and isinstance(n["metadata"].get("name"), str)
        for n in items
    ):
        raise WireError("Nodes.items: must be a list of Node objects with metadata.name")
    try:
        encoded = [orjson.dumps(n) for n in items]
    except orjson.JSONEncodeError as exc:  # nested deeper than the encoder allows (255 levels)
        raise WireError(f"Nodes.items: a Node cannot be returned: {exc}") from None
    return items, [n["metadata"]["name"] for n in items], encoded


def parse_extender_args(body: bytes) -> ExtenderArgs:
    doc = decode(body)
    pod, declared = _pod(doc)
    names = _get(doc, "NodeNames")
    if names is not None:
        return ExtenderArgs(pod, declared, _node_names(names), None)
    nodes = _get(doc, "Nodes")
    if nodes is not None:
        items, item_names, encoded = _node_list(nodes)
        return ExtenderArgs(pod, declared, None, items, encoded, item_names)
    # Both null: the scheduler has no candidates for this pod; answer with none.
    return ExtenderArgs(pod, declared, [], None)


def parse_binding_args(body: bytes) -> BindingArgs:
    doc = decode(body)
    values = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = _get(doc, key)
        if not isinstance(value, str) or (key != "PodUID" and not value):
            raise WireError(f"{key}: required string")
        values[key] = value
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def parse_preemption_args(body: bytes) -> PreemptionArgs:
    doc = decode(body)
    pod, _ = _pod(doc)
    if _get(doc, "NodeNameToMetaVictims") is not None:
        victims = _victims(doc, "NodeNameToMetaVictims", _meta_victim_uid)
    else:
        victims = _victims(doc, "NodeNameToVictims", _full_victim_uid)
    return PreemptionArgs(pod, victims)


def _meta_victim_uid(pod: dict[str, Any], where: str) -> str:
    return string_or_null(_get(pod, "UID"), f"{where}.UID")


def _full_victim_uid(pod: dict[str, Any], where: str) -> str:
    meta = object_or_null(pod.get("metadata"), f"{where}.metadata")
    return string_or_null(meta.get("uid"), f"{where}.metadata.uid")


def _victims(
    doc: dict[str, Any], key: str, uid_of: Callable[[dict[str, Any], str], str]
) -> dict[str, dict[str, Any]]:
    """Victims per node, reduced to UIDs (the meta form the scheduler accepts back)."""
    raw = _get(doc, key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WireError(f"{key}: must be an object")
    victims: dict[str, dict[str, Any]] = {}
    for node, entry in raw.items():
        where = f"{key}.{node}"
        if not isinstance(entry, dict):
            raise WireError(f"{where}: must be an object")
        pods = list_or_null(_get(entry, "Pods"), f"{where}.Pods")
        if not all(isinstance(p, dict) for p in pods):
            raise WireError(f"{where}.Pods: must be a list of objects")
        victims[node] = {
            "Pods": [{"UID": uid_of(p, f"{where}.Pods[{i}]")} for i, p in enumerate(pods)],
            "NumPDBViolations": integer_or_null(_get(entry, "NumPDBViolations"), f"{where}.NumPDBViolations"),
        }
    return victims


# --- answers --------------------------------------------------------------------------------
# A name kube-scheduler did not send makes it fail the pod's whole scheduling attempt. The checks
# below cost nothing in the common shapes (every candidate passes, every candidate is rejected,
# a handful of names answered) and one set of the candidates otherwise.

_SCAN_LIMIT = 4  # answers naming at most this many nodes are checked by scanning the candidates


def _within(candidates: list[str], passing: list[str], failed: dict[str, str],
            unresolvable: dict[str, str]) -> bool:
    named = () if passing is candidates else passing
    if not named and not failed and len(unresolvable) == len(candidates):
        if list(unresolvable) == candidates:  # every candidate rejected, in order (a gang rejection)
            return True
    if len(named) + len(failed) + len(unresolvable) <= _SCAN_LIMIT:
        return all(name in candidates for group in (named, failed, unresolvable) for name in group)
    allowed = set(candidates)
    return allowed.issuperset(named) and allowed.issuperset(failed) and allowed.issuperset(unresolvable)


def _trimmed(candidates: list[str], passing: list[str], failed: dict[str, str],
             unresolvable: dict[str, str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The filter answer limited to the request's candidates, logging what had to be dropped."""
    if _within(candidates, passing, failed, unresolvable):
        return passing, failed, unresolvable
    allowed = set(candidates)
    foreign = sorted({n for group in (passing, failed, unresolvable) for n in group if n not in allowed})
    log.warning("filter answer named nodes outside the request; dropped them",
                extra={"nodes": [n[:100] for n in foreign[:5]], "count": len(foreign)})
    return (
        [n for n in passing if n in allowed],
        {n: r for n, r in failed.items() if n in allowed},
        {n: r for n, r in unresolvable.items() if n in allowed},
    )


def filter_result(
    args: ExtenderArgs,
    passing: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
    exact: bool = False,
) -> bytes:
    """ExtenderFilterResult in the same mode the request used, naming only requested nodes.

    ``exact``: the answer was derived from the candidates themselves (the core's compact forms),
    so it cannot name another node and is not checked again name by name.
    """
    if not exact:
        passing, failed, unresolvable = _trimmed(args.candidate_names, passing, failed, unresolvable)
    if args.node_names is not None:
        return orjson.dumps({"Nodes": None, "NodeNames": passing, "FailedNodes": failed,
                             "FailedAndUnresolvableNodes": unresolvable, "Error": error})
    maps = orjson.dumps({"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": error})
    keep = set(passing)
    items = [raw for raw, name in zip(args.encoded_nodes or (), args.candidate_names, strict=True)
             if name in keep]
    return b'{"Nodes":{"metadata":{},"items":[' + b",".join(items) + b']},"NodeNames":null,' + maps[1:]


def filter_answer(args: ExtenderArgs, decision: FilterDecision) -> bytes:
    """The encoded answer to a filter call, in the form the decision allows: one rejection reason
    for every candidate needs no dict of them."""
    if decision.reason:
        return rejection_result(args, decision.reason)
    return filter_result(args, decision.passing, decision.failed, decision.unresolvable,
                         exact=decision.exact)


def rejection_result(args: ExtenderArgs, reason: str) -> bytes:
    """ExtenderFilterResult rejecting every candidate, unresolvably, for one reason (a gang that
    waits or does not fit), encoded from the candidate list in two C-level passes: no dict of
    thousands of fresh names is hashed (a name sent twice appears twice; Go keeps the last)."""
    names = args.candidate_names
    if names:
        value = b'":' + orjson.dumps(reason)
        # "a","b": in orjson's encoding of a list of strings '","' occurs only between names (inside
        # a string every quote is escaped).
        inner = orjson.dumps(names)[1:-1]
        rejected = b"{" + inner.replace(b'","', value + b',"') + value[1:] + b"}"
    else:
        rejected = b"{}"
    if args.node_names is not None:
        nodes = b'null,"NodeNames":[]'
    else:
        nodes = b'{"metadata":{},"items":[]},"NodeNames":null'
    return (b'{"Nodes":' + nodes + b',"FailedNodes":{},"FailedAndUnresolvableNodes":' + rejected
            + b',"Error":""}')


def binding_result(error: str = "") -> bytes:
    return orjson.dumps({"Error": error if isinstance(error, str) else str(error)})


def _victims_within(offered: dict[str, Any] | None, entry: Any) -> dict[str, Any] | None:
    """One node's answer limited to the victims the request named there; None if none remain."""
    if offered is None or not isinstance(entry, dict):
        return None
    if entry is offered:
        return entry if offered["Pods"] else None
    sent = {p["UID"] for p in offered["Pods"]}
    pods = [{"UID": p["UID"]} for p in entry.get("Pods") or ()
            if isinstance(p, dict) and isinstance(p.get("UID"), str) and p["UID"] in sent]
    return {"Pods": pods, "NumPDBViolations": offered["NumPDBViolations"]} if pods else None


def preemption_result(args: PreemptionArgs, victims: dict[str, dict[str, Any]]) -> bytes:
    """NodeNameToMetaVictims naming only nodes and victims from the request, none left empty
    (kube-scheduler treats a node returned without victims as an error)."""
    answer: dict[str, dict[str, Any]] = {}
    for node, entry in victims.items():
        kept = _victims_within(args.victims.get(node), entry)
        if kept is not None:
            answer[node] = kept
    if answer != victims:
        dropped = [n[:100] for n in victims if n not in answer][:5]
        log.warning("preempt answer outside the request; trimmed it", extra={"nodes": dropped})
    return orjson.dumps({"NodeNameToMetaVictims": answer})


def error_body(message: str) -> bytes:
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "..."
    return orjson.dumps({"error": message})
