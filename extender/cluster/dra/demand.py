"""What a pod's DRA claims ask for, as resource names the placement code already counts.

A claim request becomes one *device kind*, a synthetic resource name under ``devices:`` (with a
colon, which no Kubernetes resource name has):

* ``exactly`` with ``ExactCount``: ``devices:<class>`` (plus ``where <selectors>`` when the request
  narrows the class), counted in devices. Requests of one class share the name, so members asking
  for 4 and 8 devices of it are weighed against the same free count on a node.
* ``exactly`` with ``All`` and ``firstAvailable`` lists: counted in whole requests (``1 × ...``),
  since how many devices they take depends on the node.
* A request Quorum cannot count (a class or template not seen, a claim shared by several pods
  before it is allocated, a selector that does not compile) becomes ``devices:!<why>``: a name no
  node has, so the pod fits nowhere and the reason says why. Quorum never guesses that devices fit.

Pure parsing: the inventory (``inventory.py``) decides which objects a pod's claims resolve to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..resources import Resources

PREFIX = "devices:"
PROBLEM = PREFIX + "!"
_MAX_COUNT = 1 << 20  # the apiserver caps a request at 128 devices; anything huge is hostile
_MAX_REQUESTS = 32


@dataclass(frozen=True, slots=True)
class Choice:
    """One way to satisfy a request: ``count`` devices of a class (or all of them) matching selectors."""

    class_name: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    # What a device is matched against (class and selectors, not the count): a plain string, so
    # the per-device memo of matches hashes it for free.
    selects: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selects", "\0".join((self.class_name, *self.selectors)))

    def label(self) -> str:
        where = f" where {' && '.join(self.selectors)}" if self.selectors else ""
        return f"{'all' if self.all_devices else self.count} {self.class_name}{where}"


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """A synthetic resource: its name, and the choices a node's free devices are measured against.

    ``per_device`` kinds (one ExactCount choice) count devices; the others count whole requests.
    """

    key: str
    choices: tuple[Choice, ...]
    per_device: bool


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a claim: the kind it asks for and how much of it."""

    kind: DeviceKind | None  # None: the request cannot be counted (``problem`` says why)
    amount: int
    problem: str = ""


def problem_key(why: str) -> str:
    """A resource name no node has, carrying the reason (kept short: it is a dict key)."""
    return PROBLEM + why[:200]


def parse_requests(spec: Any) -> tuple[Request, ...]:
    """The requests of a ResourceClaim spec (or a template's ``spec.spec``); never raises."""
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    raw = devices.get("requests") if isinstance(devices, Mapping) else None
    if not isinstance(raw, list):
        return ()
    if len(raw) > _MAX_REQUESTS:
        return (Request(None, 1, f"a claim with {len(raw)} requests (more than {_MAX_REQUESTS})"),)
    return tuple(_request(item) for item in raw)


def _request(item: Any) -> Request:
    if not isinstance(item, Mapping):
        return Request(None, 1, "a claim request that is not an object")
    exactly = item.get("exactly")
    if isinstance(exactly, Mapping):
        choice = _choice(exactly)
        if isinstance(choice, str):
            return Request(None, 1, choice)
        if not choice.all_devices:
            where = f" where {' && '.join(choice.selectors)}" if choice.selectors else ""
            kind = DeviceKind(f"{PREFIX}{choice.class_name}{where}", (choice,), per_device=True)
            return Request(kind, choice.count)
        return Request(DeviceKind(f"{PREFIX}{choice.label()}", (choice,), per_device=False), 1)
    first = item.get("firstAvailable")
    if isinstance(first, list) and first:
        choices = [_choice(sub) for sub in first[:8]]
        bad = next((c for c in choices if isinstance(c, str)), None)
        if bad is not None:
            return Request(None, 1, bad)
        ok = tuple(c for c in choices if isinstance(c, Choice))
        label = " | ".join(c.label() for c in ok)
        return Request(DeviceKind(f"{PREFIX}first of ({label})", ok, per_device=False), 1)
    name = str(item.get("name", ""))[:63]
    return Request(None, 1, f"request {name!r} has neither exactly nor firstAvailable")


def _choice(raw: Any) -> Choice | str:
    """One ``exactly`` or ``firstAvailable`` entry; a string says why it cannot be counted."""
    if not isinstance(raw, Mapping):
        return "a device request that is not an object"
    class_name = raw.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        return "a device request without a deviceClassName"
    mode = raw.get("allocationMode") or "ExactCount"
    count = raw.get("count", 1)
    if mode not in ("ExactCount", "All"):
        return f"allocationMode {str(mode)[:32]!r} of class {class_name[:63]}"
    if mode == "ExactCount" and (isinstance(count, bool) or not isinstance(count, int)
                                 or not 0 < count <= _MAX_COUNT):
        return f"a count of {str(count)[:32]} devices of class {class_name[:63]}"
    return Choice(class_name[:253], selectors_of(raw.get("selectors")), mode == "All",
                  1 if mode == "All" else count)


def selectors_of(raw: Any) -> tuple[str, ...]:
    """The CEL expressions of a ``selectors`` list (DeviceClass or request); others are skipped."""
    if not isinstance(raw, list):
        return ()
    out = []
    for selector in raw:
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if isinstance(expression, str):
            out.append(expression)
    return tuple(out)


def add_demand(total: Resources, requests: Sequence[Request]) -> None:
    """Add a claim's requests into a pod's device demand."""
    for request in requests:
        key = request.kind.key if request.kind is not None else problem_key(request.problem)
        total[key] = total.get(key, 0) + request.amount


def is_device_key(name: str) -> bool:
    return name.startswith(PREFIX)


# --- reading the objects ---------------------------------------------------------------
Ident = tuple[str, str, str]  # driver, pool, device name


def field_of(obj: Any, name: str) -> Mapping[str, Any]:
    """A nested object, or an empty one when it is missing or not an object: these objects come
    from anyone with create rights, and one odd field must not stop the rest from being read."""
    value = obj.get(name) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def items_of(obj: Any, name: str) -> list[Any]:
    """A nested list, or an empty one when it is missing or not a list."""
    value = obj.get(name) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return field_of(obj, "metadata")


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("name") or "")


def key_of(obj: Mapping[str, Any]) -> str:
    meta = meta_of(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def allocated_devices(obj: Mapping[str, Any]) -> tuple[Ident, ...]:
    devices = field_of(field_of(field_of(obj, "status"), "allocation"), "devices")
    out = []
    for result in items_of(devices, "results"):
        if isinstance(result, Mapping):
            ident = (result.get("driver"), result.get("pool"), result.get("device"))
            if all(isinstance(part, str) for part in ident):
                out.append((str(ident[0]), str(ident[1]), str(ident[2])))
    return tuple(out)


def claim_users(obj: Mapping[str, Any]) -> frozenset[str]:
    """The pods a claim belongs to: its owner (a claim made from a template) and its reservedFor."""
    owners = [ref for ref in items_of(meta_of(obj), "ownerReferences")
              if isinstance(ref, Mapping) and ref.get("kind") == "Pod"]
    reserved = [ref for ref in items_of(field_of(obj, "status"), "reservedFor")
                if isinstance(ref, Mapping) and ref.get("resource", "pods") == "pods"]
    uids = (ref.get("uid") for ref in owners + reserved)
    return frozenset(uid for uid in uids if isinstance(uid, str) and uid)


def pod_claim_refs(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Per pod claim: the claim it names or was given (from status), and its template."""
    made: dict[str, Any] = {}
    for entry in items_of(status, "resourceClaimStatuses"):
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            made[entry["name"]] = entry.get("resourceClaimName")
    refs = []
    for ref in items_of(spec, "resourceClaims"):
        if not isinstance(ref, Mapping):
            continue
        claim, template = ref.get("resourceClaimName"), ref.get("resourceClaimTemplateName")
        if isinstance(template, str) and template:
            name = ref.get("name")
            given = made.get(name) if isinstance(name, str) else None
            refs.append((given if isinstance(given, str) else "", template))
        elif isinstance(claim, str) and claim:
            refs.append((claim, ""))
    return tuple(refs)
