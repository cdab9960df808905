"""The vocabulary of placement: candidate nodes, members, results, and how resources read.

Shared by the packing internals and the placement entry point; pure data and small functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Resources = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """A node that passed kube-scheduler's filters, with capacity left for this gang."""

    name: str
    domains: tuple[str, ...]
    free: Resources
    pods_free: int


@dataclass(frozen=True, slots=True)
class Member:
    """One gang member (a pod uid, or ``placeholder-N`` for members not created yet).

    ``rank``: its place in the workload's rank order (job, completion index), ``()`` when it has none;
    only which member takes which slot of a placement depends on it (``ranks.py``)."""

    key: str
    requests: Resources
    rank: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """Every member assigned to a node; ``domain`` is the path chosen at the constraint level."""

    assignment: dict[str, str]
    domain: tuple[str, ...]
    domains_used: int


@dataclass(frozen=True, slots=True)
class NoFit:
    """The gang cannot be placed; ``reason`` states the exact shortfall for humans."""

    reason: str


# ---------------------------------------------------------------------------------------------------
# Small public helpers


def fits(free: Resources, pods_free: int, requests: Resources) -> bool:
    """Whether one pod with ``requests`` fits into ``free`` with a pod slot to spare (hot path)."""
    if pods_free < 1:
        return False
    for name, amount in requests.items():
        if amount > 0 and free.get(name, 0) < amount:
            return False
    return True


_BYTE_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_FIRST = {"cpu": 0, "memory": 1}


def _is_bytes(name: str) -> bool:
    return name in ("memory", "ephemeral-storage") or name.startswith("hugepages-")


def format_quantity(name: str, amount: int) -> str:
    """Render one canonical amount the way people write it: ``4``/``500m`` cpu, ``8Gi`` memory."""
    if name == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if _is_bytes(name) and amount:
        for suffix, unit in _BYTE_UNITS:
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def format_resources(r: Resources) -> str:
    """Readable ``{cpu: 4, memory: 8Gi, nvidia.com/gpu: 1, 8 gpu.example.com devices}``; zero entries
    are left out."""
    items = sorted(((k, v) for k, v in r.items() if v), key=lambda kv: (_FIRST.get(kv[0], 2), kv[0]))
    return "{" + ", ".join(_format_one(k, v) for k, v in items) + "}"


# DRA device kinds are synthetic resource names (cluster/dra/demand.py): "devices:<class>" counts
# devices, "devices:!<why>" is a request that cannot be counted, other kinds count whole requests.
_DEVICES = "devices:"


def _format_one(name: str, amount: int) -> str:
    if not name.startswith(_DEVICES):
        return f"{name}: {format_quantity(name, amount)}"
    kind = name[len(_DEVICES):]
    if kind.startswith("!"):
        return kind[1:]
    if kind.startswith(("all ", "first of (")):
        return f"{amount} {_TIMES} {kind} devices"
    if " where " in kind:
        return f"{amount} {kind.replace(' where ', ' devices where ', 1)}"
    return f"{amount} {kind} devices"


_TIMES = "\N{MULTIPLICATION SIGN}"
