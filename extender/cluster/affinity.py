"""Reading, once per pod record, the rules by which a gang's members repel each other.

Only what concerns the gang's own members is read: a required anti-affinity term (or a
DoNotSchedule topology spread constraint) whose label selector matches the pod's own labels. A term
that does not match them is about other pods, and kube-scheduler's own filter enforces it against
running pods, as for any pod. What concerns the members but placement does not model is kept as a
problem, so that the gang is refused with that reason instead of being packed and refused member
after member.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..topology.apart import MembersApart

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def members_apart(spec: Mapping[str, Any], meta: Mapping[str, Any]) -> MembersApart | None:
    """The pod's rule about its gang mates, or None when it has none (the common case: cheap)."""
    affinity = spec.get("affinity")
    spread = spec.get("topologySpreadConstraints")
    if not affinity and not spread:
        return None
    labels = meta.get("labels")
    own = labels if isinstance(labels, Mapping) else {}
    namespace = str(meta.get("namespace") or "")
    keys: list[str] = []
    problems: list[str] = []
    if isinstance(affinity, Mapping):
        _anti_affinity(affinity.get("podAntiAffinity"), own, namespace, keys, problems)
        _affinity(affinity.get("podAffinity"), own, namespace, problems)
    if isinstance(spread, list):
        _spread(spread, own, keys, problems)
    if not keys and not problems:
        return None
    return MembersApart(tuple(sorted(set(keys))), "; ".join(problems))


def _terms(section: Any) -> list[Mapping[str, Any]]:
    terms = section.get(_REQUIRED) if isinstance(section, Mapping) else None
    return [t for t in terms if isinstance(t, Mapping)] if isinstance(terms, list) else []


def _anti_affinity(section: Any, own: Mapping[str, Any], namespace: str, keys: list[str],
                   problems: list[str]) -> None:
    for term in _terms(section):
        if not _concerns_members(term, own, namespace, "required anti-affinity", problems):
            continue
        key = term.get("topologyKey")
        if isinstance(key, str) and key:
            keys.append(key)
        else:
            problems.append("required anti-affinity has no topologyKey")


def _affinity(section: Any, own: Mapping[str, Any], namespace: str, problems: list[str]) -> None:
    """Required affinity among members (all of them together) is not modelled: say so."""
    for term in _terms(section):
        if _concerns_members(term, own, namespace, "required pod affinity", problems):
            problems.append("required pod affinity between members (use a required topology instead)")


def _concerns_members(term: Mapping[str, Any], own: Mapping[str, Any], namespace: str, what: str,
                      problems: list[str]) -> bool:
    """Whether a term selects the pod's own mates: its selector matches the pod's own labels in its
    own namespace. A problem is noted when it does and asks for what placement does not model."""
    matched = selector_matches(term.get("labelSelector"), own)
    if isinstance(matched, str):
        problems.append(f"{what} labelSelector {matched}")
        return False
    namespaces = term.get("namespaces")
    if not matched or (isinstance(namespaces, list) and namespaces and namespace not in namespaces):
        return False
    selector = term.get("namespaceSelector")
    if selector:  # an empty selector is every namespace, this one included
        problems.append(f"{what} with a namespaceSelector")
    for field in ("matchLabelKeys", "mismatchLabelKeys"):
        if term.get(field):
            problems.append(f"{what} with {field}")
    return True


def _spread(constraints: list[Any], own: Mapping[str, Any], keys: list[str], problems: list[str]) -> None:
    """A hard spread of the members with maxSkew 1 is one member per domain (the gang alone in its
    domains); other hard spreads of the members are not modelled. Soft ones are kube-scheduler's."""
    for c in constraints:
        if not isinstance(c, Mapping) or c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        matched = selector_matches(c.get("labelSelector"), own)
        if isinstance(matched, str):
            problems.append(f"topology spread constraint labelSelector {matched}")
            continue
        if not matched:
            continue
        key = c.get("topologyKey")
        if c.get("maxSkew") != 1:
            problems.append(f"topology spread constraint with maxSkew {str(c.get('maxSkew'))[:16]}")
        elif c.get("matchLabelKeys"):
            problems.append("topology spread constraint with matchLabelKeys")
        elif isinstance(key, str) and key:
            keys.append(key)
        else:
            problems.append("topology spread constraint has no topologyKey")


def selector_matches(selector: Any, labels: Mapping[str, Any]) -> bool | str:
    """Whether a label selector matches ``labels``; a string says why the selector is not understood.

    A missing selector matches nothing (as the API defines it for affinity terms); an empty one
    matches everything.
    """
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        return "matchLabels is not a map"
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        verdict = _expression_matches(expression, labels)
        if verdict is not True:
            return verdict
    return True


def _expression_matches(expression: Any, labels: Mapping[str, Any]) -> bool | str:
    if not isinstance(expression, Mapping):
        return "has an expression that is not an object"
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return "has an expression without a key or with values that are not a list"
    if operator in ("In", "NotIn"):
        if not values:
            return f"operator {operator} without values"
        inside = key in labels and bool(labels[key] in values)
        return inside if operator == "In" else not inside
    if operator in ("Exists", "DoesNotExist"):
        return (key in labels) == bool(operator == "Exists")
    return f"operator {str(operator)[:32]!r} is unknown"
