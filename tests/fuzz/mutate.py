"""A seeded, structure-aware mutator of extender requests, with byte-level damage on top.

Each input starts from a well-formed request of the verb (``corpus``) and applies one to three
operations: a wrong-typed or hostile value at a random path or at a field Quorum reads, keys
deleted, added, duplicated or re-cased, node-name lists with duplicates, unknown and ever-new
names, hostile quantities and gang annotations, victims naming nodes and pods that do not exist,
values nested up to 5,000 levels deep. Some inputs are then damaged as bytes (truncated, flipped,
huge number literals, raw garbage), or are another verb's body. The same seed gives the same inputs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import orjson

from .corpus import VERBS, bases
from .world import NODE_NAMES

# Values that are wrong for some field somewhere: every JSON type, boundaries, hostile strings.
SCALARS: list[Any] = [
    None, True, False, 0, -1, 1, 7, 10, 11, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1,
    0.5, -0.0, 1e308, -1e308, 5e-324, "", " ", "0", "-1", "1", "x", "null", "true", "NaN", "Infinity",
    "\u0000", "é", "日本語", "🚀🚀", "\u202eevil", "a" * 300, "Pod", "NodeNames", "kwok-b0-r0-n0",
]
CONTAINERS: list[Any] = [[], {}, [None], [1, "a", None], {"a": {"b": []}}, ["kwok-b0-r0-n0"],
                         {"Pods": []}, {"metadata": {"name": "n"}}, [[[[]]]]]
QUANTITIES: list[Any] = [
    "1", "0", "-1", "500m", "1.5", ".5", "5.", "1e3", "1E3", "1e-3", "1Ki", "1Ei", "8Ei", "1e18",
    "1e308", "1e999999999", "1e-999999999", "9" * 400, "0." + "9" * 400, "1" + "0" * 30 + "Ei",
    "NaN", "Infinity", "-Inf", "0x10", "1.2.3", "1 Gi", " 1", "+1", "--1", "1Kib", "", "١٢", "1m1",
    2, 0, -3, 1.5, 1e308, 2**63, True, None, [], {},
]
ANNOTATION_VALUES = ["", "1", "2", "0", "-1", "3", "1000000", "9" * 5000, "1_000", "٣", " 2 ", "two",
                     "rack", "block", "host", "topology.quorum.dev/rack", "nowhere", "train-a", "sweep"]
QUORUM_ANNOTATIONS = ["quorum.dev/gang", "quorum.dev/min-count", "quorum.dev/required-topology",
                      "quorum.dev/preferred-topology",
                      # Every other convention Quorum reads from a pod (cluster/conventions.py).
                      "scheduling.k8s.io/group-name", "gang.scheduling.koordinator.sh/name",
                      "gang.scheduling.koordinator.sh/min-available", "kueue.x-k8s.io/pod-group-total-count",
                      "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology",
                      "kueue.x-k8s.io/podset-unconstrained-topology",
                      "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"]
CONVENTION_LABELS = ["scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name"]
DEPTHS = [2, 64, 254, 255, 256, 300, 1000, 1023, 1024, 1025, 5000]
_DEEP = re.compile(rb'"\\u0000deep:(\d+):([lo])"')
_NUMBER = re.compile(rb"(?<=[:\[,])-?\d+(\.\d+)?([eE][+-]?\d+)?")
_HUGE_LITERALS = [b"1e400", b"-1e400", b"123456789012345678901234567890", b"-0", b"1E+2", b"0.0000001",
                  b"18446744073709551616", b"-9223372036854775809", b"1.7976931348623157e309"]


class Mutator:
    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self._bases = {verb: [orjson.dumps(doc) for doc in docs] for verb, docs in bases().items()}
        self._fresh = 0
        self._ops: list[Callable[[Any], None]] = [
            self._set_anywhere, self._set_anywhere, self._set_field, self._set_field, self._delete,
            self._add_key, self._recase, self._names, self._names, self._quantity, self._quantity,
            self._annotation, self._deep, self._victims, self._victims,
        ]

    # --- helpers -----------------------------------------------------------------------------
    def fresh_name(self) -> str:
        """A name never produced before by this mutator (ever-new unknown nodes and pods)."""
        self._fresh += 1
        return f"ghost-{self.seed}-{self._fresh}"

    def string(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.3:
            return self.fresh_name()
        if kind < 0.6:
            # Any code point but surrogates (which JSON encoders refuse to produce).
            chars = [chr(rng.choice((rng.randrange(0x20, 0x7F), rng.randrange(0x80, 0xD800),
                                     rng.randrange(0xE000, 0x110000), rng.randrange(0, 0x20))))
                     for _ in range(rng.randrange(1, 24))]
            return "".join(chars)
        return str(rng.choice([s for s in SCALARS if isinstance(s, str)]))

    def value(self) -> Any:
        roll = self.rng.random()
        if roll < 0.45:
            return self.rng.choice(SCALARS)
        if roll < 0.65:
            return self.string()
        if roll < 0.8:
            return orjson.loads(orjson.dumps(self.rng.choice(CONTAINERS)))
        if roll < 0.9:
            return self.rng.choice(QUANTITIES)
        return self.rng.choice(NODE_NAMES)

    def _descend(self, doc: Any, stop: float = 0.3) -> tuple[Any, Any] | None:
        """A random (container, key) inside doc, biased towards shallow fields."""
        parent, key = None, None
        node = doc
        while isinstance(node, dict | list) and node:
            key = self.rng.choice(list(node)) if isinstance(node, dict) else self.rng.randrange(len(node))
            parent, node = node, node[key]
            if self.rng.random() < stop:
                break
        return None if parent is None else (parent, key)

    def _at(self, doc: Any, path: tuple[Any, ...]) -> Any:
        node = doc
        for step in path:
            if isinstance(node, dict) and isinstance(step, str) and isinstance(node.get(step), dict | list):
                node = node[step]
            elif isinstance(node, list) and isinstance(step, int) and step < len(node):
                node = node[step]
            else:
                return None
        return node

    def _pod(self, doc: Any) -> dict[str, Any] | None:
        pod = doc.get("Pod") if isinstance(doc, dict) else None
        return pod if isinstance(pod, dict) else None

    # --- structure-aware operations ----------------------------------------------------------
    def _set_anywhere(self, doc: Any) -> None:
        spot = self._descend(doc)
        if spot is not None:
            spot[0][spot[1]] = self.value()

    def _set_field(self, doc: Any) -> None:
        """A field Quorum reads, set to a hostile value."""
        paths = [
            ("Pod", "metadata"), ("Pod", "spec"), ("Pod", "status"), ("Pod", "spec", "schedulingGroup"),
            ("Pod", "spec", "workloadRef"),
            ("Pod", "spec", "containers", 0), ("Pod", "spec", "containers", 0, "resources"),
            ("Pod",), ("Nodes",), ("Nodes", "items", 0, "metadata"), ("Nodes", "items", 0), (),
        ]
        keys = ["name", "namespace", "uid", "annotations", "labels", "creationTimestamp",
                "deletionTimestamp", "podGroupName", "workloadRef", "podGroup", "podGroupReplicaKey",
                "priority", "containers", "initContainers", "overhead",
                "nodeName", "schedulerName", "schedulingGates", "resources", "requests", "limits", "phase",
                "restartPolicy", "metadata", "spec", "status", "items", "Pod", "Nodes", "NodeNames",
                "PodName", "PodNamespace", "PodUID", "Node", "NodeNameToVictims", "NodeNameToMetaVictims"]
        target = self._at(doc, self.rng.choice(paths))
        if isinstance(target, dict):
            target[self.rng.choice(keys)] = self.value()

    def _delete(self, doc: Any) -> None:
        spot = self._descend(doc, stop=0.5)
        if spot is not None and isinstance(spot[0], dict):
            del spot[0][spot[1]]
        elif spot is not None:
            spot[0].pop(spot[1])

    def _add_key(self, doc: Any) -> None:
        spot = self._descend(doc)
        target = spot[0] if spot is not None else doc
        if isinstance(target, dict):
            key = self.rng.choice(["pod", "POD", "nodenames", "NODES", "Error", "extra", self.string()])
            target[key] = self.value()

    def _recase(self, doc: Any) -> None:
        if isinstance(doc, dict) and doc:
            key = self.rng.choice(list(doc))
            doc[self.rng.choice([key.lower(), key.upper(), key.swapcase()])] = doc.pop(key)

    def _names(self, doc: Any) -> None:
        """Node-name lists with duplicates, unknown, ever-new, hostile and very many names."""
        rng = self.rng
        names = doc.get("NodeNames") if isinstance(doc, dict) else None
        if not isinstance(names, list):
            names = list(NODE_NAMES)
            if isinstance(doc, dict) and rng.random() < 0.5:
                doc["Nodes"] = None
        roll = rng.random()
        if roll < 0.25:
            names = names + [rng.choice(names or NODE_NAMES) for _ in range(rng.randrange(1, 6))]
        elif roll < 0.5:
            names = names + [self.fresh_name() for _ in range(rng.randrange(1, 20))]
        elif roll < 0.65:
            names = names + [self.string() for _ in range(rng.randrange(1, 5))]
        elif roll < 0.75:
            names = [self.fresh_name() for _ in range(rng.choice((200, 2000, 8000)))] + names
        elif roll < 0.85:
            rng.shuffle(names)
        else:
            names = [rng.choice(NODE_NAMES)] * rng.randrange(1, 50)
        if isinstance(doc, dict):
            doc["NodeNames"] = names

    def _quantity(self, doc: Any) -> None:
        pod = self._pod(doc)
        spec = pod.get("spec") if pod else None
        if not isinstance(spec, dict):
            return
        containers = spec.get("containers")
        targets: list[Any] = [spec.setdefault("overhead", {}) if self.rng.random() < 0.2 else None]
        if isinstance(containers, list) and containers and isinstance(containers[0], dict):
            resources = containers[0].get("resources")
            if isinstance(resources, dict):
                targets += [resources.get("requests"), resources.get("limits")]
        if isinstance(spec.get("resources"), dict):
            targets.append(spec["resources"].get("requests"))
        maps = [t for t in targets if isinstance(t, dict)]
        if maps:
            names = ["cpu", "memory", "nvidia.com/gpu", "pods", "hugepages-2Mi", self.string()]
            name = self.rng.choice(names)
            self.rng.choice(maps)[name] = self.rng.choice(QUANTITIES)

    def _annotation(self, doc: Any) -> None:
        pod = self._pod(doc)
        meta = pod.get("metadata") if pod else None
        if isinstance(meta, dict):
            annotations = meta.get("annotations")
            if not isinstance(annotations, dict):
                annotations = meta["annotations"] = {}
            annotations[self.rng.choice(QUORUM_ANNOTATIONS)] = self.rng.choice(ANNOTATION_VALUES)
            if self.rng.random() < 0.3:
                labels = meta.get("labels")
                if not isinstance(labels, dict):
                    labels = meta["labels"] = {}
                labels[self.rng.choice(CONVENTION_LABELS)] = self.rng.choice(ANNOTATION_VALUES)
        spec = pod.get("spec") if pod else None
        if isinstance(spec, dict) and self.rng.random() < 0.2:  # a 1.35 member of a v1alpha1 Workload
            ref = {"name": self.rng.choice(ANNOTATION_VALUES), "podGroup": self.rng.choice(ANNOTATION_VALUES)}
            if self.rng.random() < 0.5:
                ref["podGroupReplicaKey"] = self.rng.choice(ANNOTATION_VALUES)
            spec["workloadRef"] = ref

    def _deep(self, doc: Any) -> None:
        spot = self._descend(doc, stop=0.4)
        if spot is not None:
            spot[0][spot[1]] = f"\u0000deep:{self.rng.choice(DEPTHS)}:{self.rng.choice('lo')}"

    def _victims(self, doc: Any) -> None:
        """Victims naming unknown nodes and pods, duplicates, empty lists and wrong counts."""
        if not isinstance(doc, dict):
            return
        rng = self.rng
        key = rng.choice(["NodeNameToMetaVictims", "NodeNameToVictims"])
        victims = doc.get(key)
        if not isinstance(victims, dict):
            victims = doc[key] = {}
        node = rng.choice([*NODE_NAMES, self.fresh_name(), self.string()])
        uid = rng.choice(["uid-serve-0", "uid-serve-1", "uid-plain-0", "uid-train-a-0", self.fresh_name(),
                          ""])
        pod: dict[str, Any] = {"UID": uid} if key.endswith("MetaVictims") else {"metadata": {"uid": uid}}
        pods = rng.choice([[pod], [pod, pod], [], None, [pod] * 30])
        victims[node] = {"Pods": pods, "NumPDBViolations": rng.choice([0, 1, -1, 2**63 - 1, None])}

    # --- whole inputs -------------------------------------------------------------------------
    def body(self, verb: str) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.03:
            return rng.randbytes(rng.randrange(0, 200))
        if roll < 0.05:
            return rng.choice(self._bases[rng.choice(VERBS)])
        text = rng.choice(self._bases[verb])
        if roll >= 0.1:
            doc = orjson.loads(text)
            for _ in range(rng.randint(1, 3)):
                rng.choice(self._ops)(doc)
            text = _DEEP.sub(_nested, orjson.dumps(doc))
        if rng.random() < 0.12:
            text = self._damage(text)
        return text

    def _damage(self, text: bytes) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.25:
            return text[: rng.randrange(len(text) + 1)]
        if roll < 0.45:
            data = bytearray(text)
            for _ in range(rng.randrange(1, 4)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            return bytes(data)
        if roll < 0.65:
            return _NUMBER.sub(lambda m: rng.choice(_HUGE_LITERALS) if rng.random() < 0.3 else m.group(0),
                               text, count=50)
        if roll < 0.75:
            return b'{"Pod": null, "NodeNames": 1, ' + text[1:] if text.startswith(b"{") else text
        if roll < 0.85:
            return rng.choice([b"\xef\xbb\xbf", b" \n\t", b"\x00", b"[" * 2000]) + text
        cut = rng.randrange(len(text) + 1)
        return text[:cut] + rng.randbytes(rng.randrange(1, 16)) + text[cut:]


def _nested(match: re.Match[bytes]) -> bytes:
    depth = int(match.group(1))
    if match.group(2) == b"l":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"null" + b"}" * depth
