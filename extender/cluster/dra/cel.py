"""CEL selectors of DRA DeviceClasses and claim requests, evaluated against ResourceSlice devices.

Kubernetes runs ``resource.k8s.io/v1`` selectors on cel-go; cel-cpp (the CEL project's binding
``cel-expr-python``) has the same language, type checker, macros, ``cel.bind`` and string
extension. Each distinct text is compiled once; nothing raises: a failure is a short reason string
and the caller treats the device as not matching (Kubernetes fails the allocation attempt).

Kubernetes' own CEL types are approximated with plain values, which keeps evaluation at a few µs:

* A quantity is an int of milli units, rounded up (Kubernetes keeps nano precision) and clamped
  to int64, so ``==`` and ``<`` work on quantities; the quantity library is declared on ints.
  Ints and quantities look alike, so ``add``/``sub`` take their argument as a quantity
  (``q.add(1)`` adds 1m, not 1) and mixing ints with quantities type-checks here but not there.
* A version is its string; ``semver()`` validates one, and ``compareTo``, ``isGreaterThan``,
  ``isLessThan``, ``major``, ``minor`` and ``patch`` are declared on strings (semver 2.0 order).
* Kubernetes gives an empty map for a domain the device has nothing in (``"x" in
  device.attributes["other.io"]`` is false, not an error); done here for domains written as
  string literals, added as empty maps before evaluation.

Costs are bounded: expressions over ``MAX_EXPRESSION_LENGTH`` are refused unparsed (Kubernetes'
limit), the parser caps nesting at depth 32, and cel-cpp stops an evaluation after 10,000
comprehension iterations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from ..resources import QuantityError, parse_quantity

MAX_EXPRESSION_LENGTH = 10 * 1024  # Kubernetes' CELSelectorExpressionMaxLength
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_REASON_CHARS = 120

# Attribute and capacity domains named by a string literal: added as empty maps when missing.
_DOMAIN_LITERAL = re.compile(
    r"\bdevice\s*\.\s*(attributes|capacity)\s*\[\s*(?:\"([^\"\\\n]*)\"|'([^'\\\n]*)')\s*\]"
)
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"  # a semver 2.0 prerelease identifier
_SEMVER = re.compile(
    rf"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?",
    re.ASCII,
)
# cel-cpp messages read "INVALID_ARGUMENT: ERROR: <input>:1:4: Syntax error: ... [INVALID_ARGUMENT]".
_STATUS = re.compile(r"^(?:[A-Z_]+: )?(?:ERROR: <input>:)?|\s*\[[A-Z_]+\]$| \(in container ''\)")


def device_data(driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL ``device`` variable of one v1 ResourceSlice device.

    Qualified names are split into domain and name, a bare name belonging to the driver's domain.
    Entries the apiserver would have refused (no value, wrong type, bad quantity) are left out:
    one bad entry must not make every selector fail on the device.
    """
    attrs: dict[str, dict[str, Any]] = {}
    for qualified, raw in (attributes if isinstance(attributes, Mapping) else {}).items():
        value = _attribute_value(raw)
        if value is not None and isinstance(qualified, str):
            domain, name = _split(qualified, driver)
            attrs.setdefault(domain, {})[name] = value
    caps: dict[str, dict[str, int]] = {}
    for qualified, raw in (capacity if isinstance(capacity, Mapping) else {}).items():
        amount = raw.get("value") if isinstance(raw, Mapping) else None
        if isinstance(qualified, str) and isinstance(amount, str | int) and not isinstance(amount, bool):
            try:
                milli = _milli(amount)
            except QuantityError:
                continue
            domain, name = _split(qualified, driver)
            caps.setdefault(domain, {})[name] = milli
    return {"driver": driver, "attributes": attrs, "capacity": caps}


def _split(qualified: str, driver: str) -> tuple[str, str]:
    domain, slash, name = qualified.partition("/")
    return (domain, name) if slash else (driver, qualified)


def _attribute_value(raw: Any) -> Any:
    """The one value of a DeviceAttribute (``{"int": 4}``...), or None when it holds no valid one."""
    if not isinstance(raw, Mapping):
        return None
    value = raw.get("int")
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    for key, kind in (("bool", bool), ("string", str), ("version", str)):
        value = raw.get(key)
        if isinstance(value, kind):
            return value
    return None


@lru_cache(maxsize=4096)  # selectors repeat their literals ("40Gi") on every evaluation
def _milli(text: str | int) -> int:
    """A quantity as an int of milli units, rounded up and clamped to int64."""
    return _clamp(math.ceil(parse_quantity(text) * 1000))


def _clamp(value: int) -> int:
    return max(_INT64_MIN, min(_INT64_MAX, value))


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _as_integer(milli: int) -> int:
    if milli % 1000:
        raise ValueError("quantity is not an integer")
    return milli // 1000


def _semver_key(text: str) -> tuple[Any, ...]:
    """Sort key of a semantic version: release after its prereleases, numeric ids before others."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid semantic version {text[:40]!r}")
    pre = match[4]
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else ()
    return int(match[1]), int(match[2]), int(match[3]), 0 if pre else 1, ids


def _compare(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _semver(text: str) -> str:
    _semver_key(text)  # refuses an invalid version
    return text


def _semver_cmp(a: str, b: str) -> int:
    return _compare(_semver_key(a), _semver_key(b))


@cache
def _env() -> Any:
    """The CEL environment: ``device`` plus the Kubernetes quantity and semver libraries."""
    t = cel.Type
    q, v = [t.INT], [t.STRING]

    def one(name: str, ret: Any, args: list[Any], impl: Callable[..., Any], member: bool = True) -> Any:
        return cel.FunctionDecl(name, [cel.Overload(f"dra_{name}", ret, args, is_member=member, impl=impl)])

    def both(name: str, ret: Any, of: Callable[[int], Any]) -> Any:
        """A comparison, declared on quantities (ints) and on versions (strings)."""
        impls = (lambda a, b: of(_compare(a, b)), lambda a, b: of(_semver_cmp(a, b)))
        overloads = zip(("q", "v"), (q + q, v + v), impls, strict=True)
        return cel.FunctionDecl(
            name, [cel.Overload(f"dra_{name}_{k}", ret, a, is_member=True, impl=f) for k, a, f in overloads]
        )

    functions = [
        one("quantity", t.INT, v, _milli, member=False),
        one("isQuantity", t.BOOL, v, _is_quantity, member=False),
        both("compareTo", t.INT, int),
        both("isGreaterThan", t.BOOL, lambda c: c > 0),
        both("isLessThan", t.BOOL, lambda c: c < 0),
        one("add", t.INT, q + q, lambda a, b: _clamp(a + b)),
        one("sub", t.INT, q + q, lambda a, b: _clamp(a - b)),
        one("asInteger", t.INT, q, _as_integer),
        one("isInteger", t.BOOL, q, lambda a: a % 1000 == 0),
        one("asApproximateFloat", t.DOUBLE, q, lambda a: a / 1000),
        one("sign", t.INT, q, lambda a: _compare(a, 0)),
        one("semver", t.STRING, v, _semver, member=False),
        one("isSemver", t.BOOL, v, lambda s: _SEMVER.fullmatch(s) is not None, member=False),
        one("major", t.INT, v, lambda s: _semver_key(s)[0]),
        one("minor", t.INT, v, lambda s: _semver_key(s)[1]),
        one("patch", t.INT, v, lambda s: _semver_key(s)[2]),
    ]
    extensions = [ext_bindings.ExtBindings(), ext_strings.ExtStrings()]
    return cel.NewEnv(variables={"device": t.DYN}, functions=functions, extensions=extensions)


def _reason(error: BaseException | str) -> str:
    """A one-line reason of at most ~120 chars: engine messages may quote whole inputs."""
    first = str(error)[:400].split("\n", 1)[0]
    text = " ".join(_STATUS.sub("", first).split())
    message = f"cannot be evaluated: {text or type(error).__name__}"
    return message if len(message) <= _REASON_CHARS else message[: _REASON_CHARS - 3] + "..."


@dataclass(frozen=True, slots=True)
class Compiled:
    """A type-checked selector and the literal domains it indexes (to add as empty maps)."""

    program: Any
    domains: tuple[tuple[str, str], ...]


class SelectorCache:
    """Selectors compiled once per distinct text; bounded, and cleared when full."""

    def __init__(self, limit: int = 4096, max_chars: int = 4 * 2**20) -> None:
        self._entries: dict[str, Compiled | str] = {}
        self._limit, self._max_chars, self._chars = limit, max_chars, 0

    def __len__(self) -> int:
        return len(self._entries)

    def compile(self, expression: str) -> Compiled | str:
        """The compiled selector, or the reason it cannot be used (refusals are cached too)."""
        if not isinstance(expression, str):
            return _reason(f"expression is {type(expression).__name__}, not a string")
        if len(expression) > MAX_EXPRESSION_LENGTH:
            return _reason(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
        known = self._entries.get(expression)
        if known is not None:
            return known
        result = _compile(expression)
        if len(self._entries) >= self._limit or self._chars + len(expression) > self._max_chars:
            self._entries.clear()
            self._chars = 0
        self._entries[expression] = result
        self._chars += len(expression)
        return result

    def matches(self, expression: str, device: Mapping[str, Any]) -> bool | str:
        """Whether the device satisfies the selector, or the reason it could not be evaluated."""
        compiled = self.compile(expression)
        if isinstance(compiled, str):
            return compiled
        try:
            value = compiled.program.eval(data={"device": _with_domains(device, compiled.domains)})
            kind = value.type().name()
            result = value.value()
        except Exception as error:  # cel-cpp raises for some failures (iteration budget, bad input)
            return _reason(error)
        if kind == "ERROR":
            return _reason(str(result))
        if not isinstance(result, bool):
            return _reason(f"result is {kind.lower()}, not bool")
        return result

    def all_match(self, expressions: Iterable[str], device: Mapping[str, Any]) -> bool | str:
        """DRA semantics: all selectors of a class and of a request must match, checked in order;
        the first that is false or fails decides (False, or its reason)."""
        for expression in expressions:
            result = self.matches(expression, device)
            if result is not True:
                return result
        return True


def _compile(expression: str) -> Compiled | str:
    try:
        program = _env().compile(expression)
        kind = program.return_type().name()
    except TypeError:  # text the binding cannot encode (lone surrogates)
        return _reason("expression is not valid UTF-8 text")
    except Exception as error:  # RuntimeError: syntax, type check or nesting limit
        return _reason(error)
    if kind not in ("BOOL", "DYN"):
        return _reason(f"must evaluate to bool, not {kind.lower()}")
    domains = {(m[1], m[2] if m[2] is not None else m[3]) for m in _DOMAIN_LITERAL.finditer(expression)}
    return Compiled(program, tuple(sorted(domains)))


def _with_domains(device: Mapping[str, Any], domains: tuple[tuple[str, str], ...]) -> Mapping[str, Any]:
    """The device with each literal domain it lacks added as an empty map (Kubernetes' default)."""
    result = device
    for field, domain in domains:
        maps = result.get(field)
        if isinstance(maps, Mapping) and domain not in maps:
            result = {**result, field: {**maps, domain: {}}}
    return result


SELECTORS = SelectorCache()


def all_match(expressions: Sequence[str], device: Mapping[str, Any]) -> bool | str:
    """``SelectorCache.all_match`` on the module's shared cache."""
    return SELECTORS.all_match(expressions, device)


# --- which fields a selector reads ----------------------------------------------------------
Field = tuple[str, str, str]  # ("attributes" | "capacity", domain, name)
_FIELD = re.compile(r'device\.(attributes|capacity)\["([^"\\]+)"\]\.([A-Za-z_][A-Za-z0-9_]*)')


def fields_read(expressions: Iterable[str]) -> tuple[Field, ...] | None:
    """The device fields the expressions read, when they read nothing else of the device.

    Two devices equal in these fields (and their driver) get the same result from the expressions,
    so one evaluation serves both: a thousand nodes of one GPU model cost one evaluation even when
    every device has its own uuid. None when an expression uses the device in any other way (a
    whole attribute map, a loop over it): then each distinct device is evaluated.
    """
    fields: set[Field] = set()
    for text in expressions:
        found = _FIELD.findall(text)
        fields.update((kind, domain, name) for kind, domain, name in found)
        if "device" in _FIELD.sub("_", text).replace("device.driver", "_"):
            return None
    return tuple(sorted(fields))


def project_raw(driver: str, attributes: Any, capacity: Any, fields: tuple[Field, ...]) -> tuple[Any, ...]:
    """The values of ``fields`` of one slice device (None where it has none), with its driver,
    read straight from the slice: cheaper than building the device's CEL variable."""
    out: list[Any] = [driver]
    for kind, domain, name in fields:
        source = attributes if kind == "attributes" else capacity
        raw = None
        if isinstance(source, Mapping):
            raw = source.get(f"{domain}/{name}")
            if raw is None and domain == driver:
                raw = source.get(name)
        if kind == "attributes":
            out.append(_attribute_value(raw))
            continue
        amount = raw.get("value") if isinstance(raw, Mapping) else None
        try:
            valid = isinstance(amount, str | int) and not isinstance(amount, bool)
            out.append(_milli(amount) if valid else None)
        except QuantityError:
            out.append(None)
    return tuple(out)
