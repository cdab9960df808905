"""kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1).

The Go structs carry no json tags, so keys arrive capitalised and unset fields arrive as ``null``;
embedded Kubernetes objects keep their usual lowerCamel keys. Parsing is strict about shape (a
malformed request is answered with HTTP 400 by the server) and lenient about extra keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from ..cluster.gang_sources import gang_key_of_pod, spec_from_annotations
from ..cluster.records import GangSpec, PodRecord, pod_record
from ..cluster.resources import QuantityError
from ..topology.scoring import MAX_SCORE, ScoreTable


class WireError(ValueError):
    """A request that does not match the extender protocol; answered with HTTP 400."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter / prioritize input. Exactly one of node_names / nodes is set.

    The pod arrives as a typed record (requests computed once, here) plus the gang its annotations
    declare, for a pod the informer has not delivered yet; the core never sees the raw object.
    """

    pod: PodRecord
    declared_gang: GangSpec | None
    node_names: list[str] | None  # nodeCacheCapable: true
    nodes: list[dict[str, Any]] | None  # nodeCacheCapable: false (full Node objects)

    @property
    def candidate_names(self) -> list[str]:
        if self.node_names is not None:
            return self.node_names
        return [str((n.get("metadata") or {}).get("name", "")) for n in self.nodes or ()]


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


def _object_or_null(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"{where}: must be an object")
    return value


def _string_map(value: Any, where: str) -> None:
    mapping = _object_or_null(value, where)
    if not all(isinstance(v, str) for v in mapping.values()):
        raise WireError(f"{where}: values must be strings")


def _containers(containers: Any, where: str) -> None:
    """Containers (or init containers): a list of objects whose resources are objects."""
    if containers is None:
        return
    if not isinstance(containers, list):
        raise WireError(f"{where}: must be a list")
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            raise WireError(f"{where}[{i}]: must be an object")
        resources = _object_or_null(container.get("resources"), f"{where}[{i}].resources")
        for part in ("requests", "limits"):
            _object_or_null(resources.get(part), f"{where}[{i}].resources.{part}")


def _pod(doc: dict[str, Any]) -> tuple[PodRecord, GangSpec | None]:
    """The embedded Pod as a typed record, with every field Quorum reads checked for shape.

    Checking here (rather than trusting the scheduler) keeps any hand-made or corrupted request
    from reaching the coordinator, where a wrong type would surface as a 500.
    """
    pod = _get(doc, "Pod")
    if not isinstance(pod, dict):
        raise WireError("Pod: required object missing")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise WireError("Pod.metadata.name: required")
    for key in ("namespace", "uid"):
        if meta.get(key) is not None and not isinstance(meta.get(key), str):
            raise WireError(f"Pod.metadata.{key}: must be a string")
    _string_map(meta.get("annotations"), "Pod.metadata.annotations")
    _string_map(meta.get("labels"), "Pod.metadata.labels")
    spec = _object_or_null(pod.get("spec"), "Pod.spec")
    group = _object_or_null(spec.get("schedulingGroup"), "Pod.spec.schedulingGroup")
    if group.get("podGroupName") is not None and not isinstance(group.get("podGroupName"), str):
        raise WireError("Pod.spec.schedulingGroup.podGroupName: must be a string")
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise WireError("Pod.spec.priority: must be an integer")
    for key in ("containers", "initContainers"):
        _containers(spec.get(key), f"Pod.spec.{key}")
    _object_or_null(spec.get("overhead"), "Pod.spec.overhead")
    _object_or_null(pod.get("status"), "Pod.status")
    for key in ("nodeName", "schedulerName"):
        if spec.get(key) is not None and not isinstance(spec.get(key), str):
            raise WireError(f"Pod.spec.{key}: must be a string")
    if spec.get("schedulingGates") is not None and not isinstance(spec.get("schedulingGates"), list):
        raise WireError("Pod.spec.schedulingGates: must be a list")
    pod_resources = _object_or_null(spec.get("resources"), "Pod.spec.resources")
    _object_or_null(pod_resources.get("requests"), "Pod.spec.resources.requests")
    try:
        record = pod_record(pod, gang_key_of_pod(pod))
    except QuantityError as exc:
        raise WireError(f"Pod.spec: {exc}") from None
    return record, spec_from_annotations(pod)


def _count(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{where}: must be an integer")
    return value


def parse_extender_args(body: bytes) -> ExtenderArgs:
    doc = decode(body)
    pod, declared = _pod(doc)
    names = _get(doc, "NodeNames")
    nodes = _get(doc, "Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise WireError("NodeNames: must be a list of strings")
        try:
            "".join(names)  # a C-speed type check: raises TypeError on any non-string
        except TypeError:
            raise WireError("NodeNames: must be a list of strings") from None
        return ExtenderArgs(pod, declared, names, None)
    if nodes is not None:
        if not isinstance(nodes, dict):
            raise WireError("Nodes: must be a NodeList object")
        items = nodes.get("items")
        if items is None:
            items = []
        if not isinstance(items, list) or not all(
            isinstance(n, dict)
            and isinstance(n.get("metadata"), dict)
            and isinstance(n["metadata"].get("name"), str)
            for n in items
        ):
            raise WireError("Nodes.items: must be a list of Node objects with metadata.name")
        return ExtenderArgs(pod, declared, None, items)
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


def _meta_victim_uid(pod: dict[str, Any]) -> str:
    return str(_get(pod, "UID") or "")


def _full_victim_uid(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    if not isinstance(meta, dict):
        raise WireError("victim Pod.metadata: must be an object")
    return str(meta.get("uid", ""))


def _victims(
    doc: dict[str, Any], key: str, uid_of: Callable[[dict[str, Any]], str]
) -> dict[str, dict[str, Any]]:
    """Victims per node, reduced to UIDs (the meta form the scheduler accepts back)."""
    raw = _get(doc, key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WireError(f"{key}: must be an object")
    victims: dict[str, dict[str, Any]] = {}
    for node, entry in raw.items():
        if not isinstance(entry, dict):
            raise WireError(f"{key}.{node}: must be an object")
        pods = _get(entry, "Pods") or []
        if not isinstance(pods, list) or not all(isinstance(p, dict) for p in pods):
            raise WireError(f"{key}.{node}.Pods: must be a list of objects")
        victims[node] = {
            "Pods": [{"UID": uid_of(p)} for p in pods],
            "NumPDBViolations": _count(_get(entry, "NumPDBViolations"), f"{key}.{node}.NumPDBViolations"),
        }
    return victims


# --- responses ------------------------------------------------------------------------------


def filter_result(
    args: ExtenderArgs,
    passing: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> bytes:
    """ExtenderFilterResult in the same mode the request used."""
    if args.node_names is not None:
        names: list[str] | None = passing
        nodes: dict[str, Any] | None = None
    else:
        keep = set(passing)
        names = None
        nodes = {"metadata": {}, "items": [n for n in args.nodes or () if n["metadata"]["name"] in keep]}
    return orjson.dumps(
        {
            "Nodes": nodes,
            "NodeNames": names,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": error,
        }
    )


_SCORE_SUFFIX = [f',"Score":{score}}}'.encode() for score in range(11)]


def host_priority_fragment(host: str, score: int) -> bytes:
    """One pre-encoded HostPriority entry; the server joins cached fragments into the list.

    Built by concatenation: small exact-size bytes (orjson.dumps buffers are KiBs each, which adds
    up to tens of MiB when one is cached per node).
    """
    suffix = _SCORE_SUFFIX[score] if 0 <= score <= 10 else f',"Score":{score}}}'.encode()
    return b'{"Host":' + orjson.dumps(host) + suffix


def host_priority_list(fragments: list[bytes]) -> bytes:
    return b"[" + b",".join(fragments) + b"]"


class ScoreEncoder:
    """Encodes a ``ScoreTable`` as a HostPriorityList, reusing per-node fragments.

    Fragments are cached only for nodes in the cluster cache (``is_node``), and the caches are
    dropped when they grow past ``limit()`` entries (node churn), so a client that sends unknown or
    ever-new names leaves nothing behind.
    """

    def __init__(self, is_node: Callable[[str], bool], limit: Callable[[], int]) -> None:
        self._is_node = is_node
        self._limit = limit
        self._by_score: list[dict[str, bytes]] = [{} for _ in range(MAX_SCORE + 1)]
        self._epoch: Hashable | None = None
        self._by_epoch: dict[str, bytes] = {}

    def _fragment(self, name: str, score: int) -> bytes:
        cache = self._by_score[score]
        fragment = cache.get(name)
        if fragment is None:
            fragment = host_priority_fragment(name, score)
            if self._is_node(name):
                if len(cache) >= self._limit():
                    cache.clear()
                cache[name] = fragment
        return fragment

    def encode(self, candidates: list[str], table: ScoreTable) -> bytes:
        if table.epoch is None:
            known, by_score = table.known, self._by_score
            out: list[bytes] = []
            for name in candidates:
                score = known.get(name, 0)
                fragment = by_score[score].get(name)
                out.append(fragment if fragment is not None else self._fragment(name, score))
            return host_priority_list(out)
        if table.epoch != self._epoch or len(self._by_epoch) > self._limit():
            self._epoch, self._by_epoch = table.epoch, {}
        cached = self._by_epoch
        fragments = list(map(cached.get, candidates))
        if None in fragments:
            for i, fragment in enumerate(fragments):
                if fragment is None:
                    name = candidates[i]
                    known_score = table.score_of(name)
                    if known_score is None:
                        fragments[i] = host_priority_fragment(name, 0)
                    else:
                        fragments[i] = cached[name] = self._fragment(name, known_score)
        return host_priority_list(fragments)  # type: ignore[arg-type]  # every None was replaced


def binding_result(error: str = "") -> bytes:
    return orjson.dumps({"Error": error})


def preemption_result(victims: dict[str, dict[str, Any]]) -> bytes:
    return orjson.dumps({"NodeNameToMetaVictims": victims})


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
