"""Protocol checks on one answer, independent of the code under test.

The request is read here on its own (keys matched case-insensitively, like Go's decoder), and the
answer must stay within it: filter returns and fails only requested nodes, prioritize scores only
requested hosts with ints 0..10, bind answers ``{"Error": str}``, preempt answers only requested
nodes and victims. Refusals are 400 (or 405 / 408) with ``{"error": str}``. Any 5xx is reported
separately by the harness.
"""

from __future__ import annotations

from typing import Any

import orjson

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
REFUSALS = {400, 405, 408}


def _get(doc: dict[str, Any], key: str) -> Any:
    if key in doc:
        return doc[key]
    for k, v in doc.items():
        if k.lower() == key.lower():
            return v
    return None


def _request(body: bytes) -> dict[str, Any]:
    doc = orjson.loads(body)  # it was answered 200, so it decodes
    assert isinstance(doc, dict)
    return doc


def candidates(doc: dict[str, Any]) -> list[str]:
    """The node names a filter / prioritize request offers (NodeNames, else Nodes.items)."""
    names = _get(doc, "NodeNames")
    nodes = _get(doc, "Nodes")
    if names is None and isinstance(nodes, dict):
        names = [item["metadata"]["name"] for item in nodes.get("items") or ()]
    return list(names or ())


def _string_map(value: Any, allowed: set[str], what: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{what} is {type(value).__name__}, not an object"]
    problems = [f"{what} names {k!r}, not in the request" for k in value if k not in allowed]
    problems += [f"{what}[{k!r}] is not a string" for k, v in value.items() if not isinstance(v, str)]
    return problems[:3]


def check_filter(request: bytes, answer: Any) -> list[str]:
    if not isinstance(answer, dict) or set(answer) != FILTER_KEYS:
        return [f"filter answer keys {sorted(answer) if isinstance(answer, dict) else type(answer)}"]
    doc = _request(request)
    names, nodes = _get(doc, "NodeNames"), _get(doc, "Nodes")
    problems: list[str] = []
    if names is not None or nodes is None:
        allowed = set(names or ())
        returned = answer["NodeNames"]
        if answer["Nodes"] is not None or not isinstance(returned, list):
            problems.append("names mode: Nodes not null or NodeNames not a list")
        else:
            problems += [f"NodeNames returns {n!r}, not in the request" for n in returned if n not in allowed]
    else:
        items = nodes.get("items") or []
        sent = {orjson.dumps(item) for item in items}
        allowed = {item["metadata"]["name"] for item in items}
        returned = (answer["Nodes"] or {}).get("items") if isinstance(answer["Nodes"], dict) else None
        if answer["NodeNames"] is not None or not isinstance(returned, list):
            problems.append("node-list mode: NodeNames not null or Nodes.items not a list")
        else:
            problems += ["Nodes.items returns a Node not in the request"
                         for item in returned if orjson.dumps(item) not in sent]
    problems += _string_map(answer["FailedNodes"], allowed, "FailedNodes")
    problems += _string_map(answer["FailedAndUnresolvableNodes"], allowed, "FailedAndUnresolvableNodes")
    if not isinstance(answer["Error"], str):
        problems.append("Error is not a string")
    return problems[:5]


def check_prioritize(request: bytes, answer: Any) -> list[str]:
    if not isinstance(answer, list):
        return [f"prioritize answer is {type(answer).__name__}, not a list"]
    allowed = set(candidates(_request(request)))
    problems = []
    for entry in answer:
        if not isinstance(entry, dict) or set(entry) != {"Host", "Score"}:
            problems.append(f"entry {entry!r:.80} is not a HostPriority")
        elif entry["Host"] not in allowed:
            problems.append(f"host {entry['Host']!r:.80} not in the request")
        elif type(entry["Score"]) is not int or not 0 <= entry["Score"] <= 10:
            problems.append(f"score {entry['Score']!r} outside 0..10")
    return problems[:5]


def check_bind(request: bytes, answer: Any) -> list[str]:
    if not isinstance(answer, dict) or set(answer) != {"Error"} or not isinstance(answer["Error"], str):
        return [f"bind answer {answer!r:.120} is not {{'Error': str}}"]
    return []


def _offered(doc: dict[str, Any]) -> dict[str, set[str]]:
    meta = _get(doc, "NodeNameToMetaVictims")
    if meta is not None:
        return {node: {str(_get(p, "UID") or "") for p in _get(entry, "Pods") or ()}
                for node, entry in meta.items()}
    full = _get(doc, "NodeNameToVictims") or {}
    return {node: {str((p.get("metadata") or {}).get("uid") or "") for p in _get(entry, "Pods") or ()}
            for node, entry in full.items()}


def check_preempt(request: bytes, answer: Any) -> list[str]:
    if not isinstance(answer, dict) or set(answer) != {"NodeNameToMetaVictims"}:
        return [f"preempt answer {answer!r:.120} is not {{'NodeNameToMetaVictims': ...}}"]
    victims = answer["NodeNameToMetaVictims"]
    if not isinstance(victims, dict):
        return ["NodeNameToMetaVictims is not an object"]
    offered = _offered(_request(request))
    problems = []
    for node, entry in victims.items():
        pods = entry.get("Pods") if isinstance(entry, dict) else None
        if node not in offered:
            problems.append(f"node {node!r:.80} not in the request")
        elif not isinstance(pods, list) or not pods:
            problems.append(f"node {node!r:.80} returned without victims")
        elif any(not isinstance(p, dict) or p.get("UID") not in offered[node] for p in pods):
            problems.append(f"node {node!r:.80}: a victim not offered there")
        elif type(entry.get("NumPDBViolations")) is not int:
            problems.append(f"node {node!r:.80}: NumPDBViolations not an int")
    return problems[:5]


CHECKS = {"filter": check_filter, "prioritize": check_prioritize, "bind": check_bind,
          "preempt": check_preempt}


def check(verb: str, request: bytes, status: int, body: bytes) -> list[str]:
    """Protocol violations in one answer (an empty list when it is within the protocol)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return [f"HTTP {status} answer is not JSON: {body[:80]!r}"]
    if status in REFUSALS:
        ok = isinstance(answer, dict) and set(answer) == {"error"} and isinstance(answer["error"], str)
        return [] if ok else [f"HTTP {status} answer is not {{'error': str}}: {body[:80]!r}"]
    if status != 200:
        return [f"HTTP {status}"]
    return CHECKS[verb](request, answer)
