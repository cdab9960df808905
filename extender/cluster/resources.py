"""Resource quantities and pod requests, counted the way kube-scheduler counts them.

Everything is reduced to integers once, when an object enters the cache, so the request path only
adds and compares ints: cpu in millicores, every other resource in whole base units (bytes for
memory, devices for extended resources), rounded up like ``Quantity.Value()``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

Resources = dict[str, int]

CPU = "cpu"
_POD_LEVEL = ("cpu", "memory")
PODS = "pods"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class QuantityError(ValueError):
    """A resource quantity string that Kubernetes would not accept."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "4Gi", "1e3", 2) into an exact Decimal."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int | float):
        value = Decimal(str(text))
        if not value.is_finite():
            raise QuantityError(f"invalid quantity {text!r}")
        return value
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}")
    s = text.strip()
    if not s:
        raise QuantityError("empty quantity")
    try:
        if s[-2:] in _BINARY:
            value = Decimal(s[:-2]) * _BINARY[s[-2:]]
        elif s[-1:] in _DECIMAL and not s[-1:].isdigit():
            value = Decimal(s[:-1]) * _DECIMAL[s[-1:]]  # "E" alone is exa; "1e3" ends in a digit
        else:
            value = Decimal(s)  # plain number or exponent form such as 1e3 / 1E3
    except InvalidOperation as exc:
        raise QuantityError(f"invalid quantity {text!r}") from exc
    if not value.is_finite():
        raise QuantityError(f"invalid quantity {text!r}")
    return value


def to_units(name: str, quantity: str | int | float) -> int:
    """Canonical integer amount of one resource: millicores for cpu, rounded-up units otherwise."""
    value = parse_quantity(quantity)
    if name == CPU:
        return math.ceil(value * 1000)
    return math.ceil(value)


def parse_resource_list(raw: Mapping[str, Any] | None) -> Resources:
    """Convert a ResourceList (``{"cpu": "4", "memory": "8Gi"}``) into canonical ints."""
    if not raw:
        return {}
    return {name: to_units(name, qty) for name, qty in raw.items()}


def _add_into(total: Resources, extra: Mapping[str, int]) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount


def _max_into(total: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    # The apiserver defaults each missing request to its limit (per resource: a GPU given only
    # under limits is requested too); mirror that so objects seen before defaulting count the same.
    requests = dict(res.get("limits") or {})
    requests.update(res.get("requests") or {})
    return parse_resource_list(requests)


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod spec as kube-scheduler computes them.

    Regular containers are summed; restartable init containers (sidecars) add to the sum and to the
    peak of every later init container; each plain init container counts only as the maximum with
    the running total; pod-level ``spec.resources.requests`` replace cpu, memory and hugepages;
    pod overhead is added last.
    """
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add_into(total, _container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add_into(sidecars, requests)
            _add_into(total, requests)
        else:
            candidate = dict(sidecars)
            _add_into(candidate, requests)
            _max_into(init_peak, candidate)
    _max_into(total, init_peak)
    pod_level = (spec.get("resources") or {}).get("requests")
    if pod_level:
        # Pod-level resources replace the containers' sum only for the resources they may name
        # (cpu, memory, hugepages); extended resources such as GPUs still come from containers.
        for name, amount in parse_resource_list(pod_level).items():
            if name in _POD_LEVEL or name.startswith("hugepages-"):
                total[name] = amount
    overhead = spec.get("overhead")
    if overhead:
        _add_into(total, parse_resource_list(overhead))
    return {name: amount for name, amount in total.items() if amount}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Sum of two resource maps (new dict)."""
    out = dict(a)
    _add_into(out, b)
    return out


def subtract_into(total: Resources, amount: Mapping[str, int]) -> None:
    """Remove ``amount`` from ``total`` in place, dropping entries that reach zero."""
    for name, value in amount.items():
        left = total.get(name, 0) - value
        if left:
            total[name] = left
        else:
            total.pop(name, None)


def add_into(total: Resources, amount: Mapping[str, int]) -> None:
    """Add ``amount`` into ``total`` in place."""
    _add_into(total, amount)


def sum_all(items: Iterable[Mapping[str, int]]) -> Resources:
    total: Resources = {}
    for item in items:
        _add_into(total, item)
    return total
