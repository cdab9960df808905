"""Resource quantities and pod requests, counted the way kube-scheduler counts them.

Everything is reduced to integers once, when an object enters the cache, so the request path only
adds and compares ints: cpu in millicores, every other resource in whole base units (bytes for
memory, devices for extended resources), rounded up like ``Quantity.Value()``.

Quantities come from objects anyone with create rights can write, so parsing is bounded in time
and size: the exponent and the number of digits are checked before any arithmetic, so no huge
power of ten or million-digit integer is ever built. A value beyond any plausible capacity is
clamped to ``MAX_UNITS`` (int64 max, Kubernetes' own cap) and so never fits anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

Resources = dict[str, int]

CPU = "cpu"
_POD_LEVEL = ("cpu", "memory")
PODS = "pods"
# Opt-in mode (docs/install.md): gang members request this so that kube-scheduler, told to manage it
# with ``ignoredByScheduler``, consults Quorum about them and about no other pod. No node offers it
# and no scheduler counts it, so neither does Quorum.
MEMBER_RESOURCE = "quorum.dev/member"

MAX_UNITS = 2**63 - 1  # the cap in canonical units: a request this large fits nowhere
_NANO = 10**9
_MAX_NANO = MAX_UNITS * _NANO  # the cap of any quantity in nano base units
_INT64 = 2**63

# Kubernetes' quantity grammar: sign, digits with an optional fraction, then a binary-SI suffix,
# a decimal exponent or a decimal-SI suffix ("E" alone is exa, "1E3" is an exponent).
_QUANTITY = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+)|([numkMGTPE]?))",
    re.ASCII,
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of two
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    """A resource quantity string that Kubernetes would not accept."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "4Gi", "1e3", 2) into an exact Decimal.

    Like Kubernetes, the value is rounded away from zero to a multiple of 1e-9; unlike it, every
    magnitude is capped at ``MAX_UNITS`` so the result always has at most 28 digits.
    """
    return Decimal(f"{_nano_units(text)}E-9")


# Parsed quantity strings, by (is cpu, text). Pods repeat a handful of values ("8", "64Gi"), and
# every pod is parsed at least twice (its filter request and its watch events). Bounded: cleared
# when full, so a stream of distinct values costs only the parse itself.
_PARSED: dict[tuple[bool, str], int] = {}
_PARSED_LIMIT = 4096


def to_units(name: str, quantity: str | int | float) -> int:
    """Canonical integer amount of one resource: millicores for cpu, rounded-up units otherwise.

    Negative amounts are refused (the apiserver refuses them in requests and capacities alike).
    """
    key = (name == CPU, quantity) if type(quantity) is str else None
    if key is not None:
        known = _PARSED.get(key)
        if known is not None:
            return known
    nano = _nano_units(quantity)
    if nano < 0:
        raise QuantityError(f"negative quantity {_shown(quantity)}")
    per_unit = 10**6 if name == CPU else _NANO
    units = min(-(-nano // per_unit), MAX_UNITS)
    if key is not None:
        if len(_PARSED) >= _PARSED_LIMIT:
            _PARSED.clear()
        _PARSED[key] = units
    return units


def beyond_capacity(resources: Mapping[str, int]) -> list[str]:
    """Names of the resources clamped at the cap: a pod asking for them can never be placed."""
    return sorted(name for name, amount in resources.items() if amount >= MAX_UNITS)


def _nano_units(text: Any) -> int:
    """The quantity in nano base units, rounded away from zero, magnitude capped at the cap."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise QuantityError(f"invalid quantity {_shown(text)}")
    if isinstance(text, int) and abs(text).bit_length() > 63:
        return _MAX_NANO if text > 0 else -_MAX_NANO  # no str() of a huge int
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None or not (match[2] or match[3]):
        raise QuantityError(f"invalid quantity {_shown(text)}")
    sign, whole, fraction, binary, exponent, decimal = match.groups()
    fraction = fraction or ""
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    exp10 = _exponent(exponent, text) if exponent is not None else _DECIMAL[decimal or ""]
    nano = _ceil_scaled(digits, exp10 - len(fraction) + 9, _BINARY.get(binary or "", 0))
    return -nano if sign == "-" else nano


def _shown(value: Any) -> str:
    """A short rendering for error messages: hostile values may be megabytes long."""
    if isinstance(value, int) and abs(value).bit_length() > 64:
        return f"<{abs(value).bit_length()}-bit integer>"
    if not isinstance(value, str | int | float):
        return f"<{type(value).__name__}>"  # never repr a container: it may nest beyond recursion
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:32]}...({len(text)} chars)"


def _exponent(text: str, quantity: Any) -> int:
    """A decimal exponent; Kubernetes refuses one outside int64, so do we (before int())."""
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 19:
        raise QuantityError(f"exponent out of range in {_shown(quantity)}")
    value = -int(digits) if text.startswith("-") else int(digits)
    if not -_INT64 <= value < _INT64:
        raise QuantityError(f"exponent out of range in {_shown(quantity)}")
    return value


def _ceil_scaled(digits: str, exp10: int, exp2: int) -> int:
    """ceil(int(digits) * 10**exp10 * 2**exp2), capped at the cap; ``digits`` has no leading 0.

    The magnitude is judged from the digit count first. Digits far below the units place are
    folded into one "something was there" flag: keeping ``exp2 + 1`` decimal places is enough
    for the flag to give the exact ceiling, since 2**exp2 divides every kept value's distance
    to the next integer.
    """
    magnitude = len(digits) + exp10  # the value is below 10**magnitude * 2**exp2
    if magnitude > 48:  # at least 10**47 > the cap
        return _MAX_NANO
    if magnitude < -20:  # below 10**-20 * 2**60 < 1: rounds up to the smallest unit
        return 1
    places = exp2 + 1
    sticky = False
    if -exp10 > places:
        cut = -exp10 - places
        kept, dropped = digits[:-cut] if cut < len(digits) else "", digits[-cut:]
        digits, exp10, sticky = kept or "0", -places, bool(dropped.strip("0"))
    value = int(digits) << exp2
    scale: int = 10 ** abs(exp10)  # |exp10| <= 61 here
    if exp10 >= 0:
        return min(value * scale, _MAX_NANO)
    quotient, remainder = divmod(value, scale)
    return min(quotient + (1 if remainder or sticky else 0), _MAX_NANO)


def parse_resource_list(raw: Mapping[str, Any] | None) -> Resources:
    """Convert a ResourceList (``{"cpu": "4", "memory": "8Gi"}``) into canonical ints."""
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(f"resource list must be an object, not {type(raw).__name__}")
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
    return {name: amount for name, amount in total.items() if amount and name != MEMBER_RESOURCE}


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
