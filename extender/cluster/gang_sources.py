"""Quorum's own annotations: the CRD-free way to declare a gang, per-gang lifecycle settings,
and the requeue bookkeeping Quorum writes on a gang's object (or its members).

The other conventions (native APIs, coscheduling, Volcano, Koordinator, Kueue) are in
``conventions.py``; all of them end in the same ``GangSpec``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..config import ANNOTATION_PREFIX
from .records import GangSpec, int32

ANNOTATION_GANG = ANNOTATION_PREFIX + "gang"
ANNOTATION_MIN_COUNT = ANNOTATION_PREFIX + "min-count"
ANNOTATION_REQUIRED = ANNOTATION_PREFIX + "required-topology"
ANNOTATION_PREFERRED = ANNOTATION_PREFIX + "preferred-topology"
ANNOTATION_REQUEUE = ANNOTATION_PREFIX + "requeue"
ANNOTATION_PODS_READY_TIMEOUT = ANNOTATION_PREFIX + "pods-ready-timeout-seconds"
ANNOTATION_RECOVERY_TIMEOUT = ANNOTATION_PREFIX + "recovery-timeout-seconds"
ANNOTATION_REPLACE_OUTSIDE_DOMAIN = ANNOTATION_PREFIX + "replace-outside-domain"
# The ConfigMap Quorum writes once every member started (the startup barrier, gang/started.py).
ANNOTATION_STARTED_CONFIGMAP = ANNOTATION_PREFIX + "started-configmap"
_CONFIGMAP_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# Quorum's bookkeeping on a PodGroup (written by Quorum, read back after a restart).
ANNOTATION_REQUEUES = ANNOTATION_PREFIX + "requeue-count"
ANNOTATION_BACKOFF_UNTIL = ANNOTATION_PREFIX + "requeue-backoff-until"  # wall-clock seconds
ANNOTATION_DEACTIVATED = ANNOTATION_PREFIX + "deactivated"  # the reason; remove it to reactivate

SOURCE_ANNOTATION = "annotations"


def spec_from_annotations(pod: Mapping[str, Any]) -> GangSpec | None:
    """Gang spec carried by a pod's annotations (the CRD-free form); None if absent or invalid.

    An invalid min-count is not guessed at: the gang is reported as misconfigured by the caller.
    """
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = annotations.get(ANNOTATION_GANG)
    if not name:
        return None
    raw_min = annotations.get(ANNOTATION_MIN_COUNT, "")
    problem = ""
    try:
        min_count = int(raw_min)
    except ValueError:
        min_count = 0
    if min_count < 1:
        problem = f"{ANNOTATION_MIN_COUNT} {raw_min!r} is not a positive integer"
    return GangSpec(
        **lifecycle_overrides(annotations),
        **bookkeeping(annotations),
        key=f"{meta.get('namespace', '')}/{name}",
        min_count=min_count,
        required_topology=annotations.get(ANNOTATION_REQUIRED) or None,
        preferred_topology=annotations.get(ANNOTATION_PREFERRED) or None,
        priority=int32((pod.get("spec") or {}).get("priority")),
        created=str(meta.get("creationTimestamp") or ""),
        source=SOURCE_ANNOTATION,
        problem=problem,
    )


def lifecycle_overrides(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """Per-gang lifecycle settings; a value that does not parse is ignored (the default applies)."""
    out: dict[str, Any] = {}
    for key, field in ((ANNOTATION_PODS_READY_TIMEOUT, "pods_ready_timeout"),
                       (ANNOTATION_RECOVERY_TIMEOUT, "recovery_timeout")):
        seconds = _seconds(annotations[key]) if key in annotations else None
        if seconds is not None:
            out[field] = seconds
    flag = str(annotations.get(ANNOTATION_REPLACE_OUTSIDE_DOMAIN, "")).lower()
    if flag in ("true", "false"):
        out["replace_outside_domain"] = flag == "true"
    configmap = annotations.get(ANNOTATION_STARTED_CONFIGMAP)
    if isinstance(configmap, str) and _CONFIGMAP_NAME.fullmatch(configmap):
        out["started_configmap"] = configmap
    return out


def bookkeeping(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """Quorum's requeue count, backoff end and deactivation, as it wrote them on the PodGroup."""
    out: dict[str, Any] = {}
    try:
        out["requeues"] = max(0, int(str(annotations.get(ANNOTATION_REQUEUES, "0"))))
    except ValueError:
        pass
    until = _seconds(annotations.get(ANNOTATION_BACKOFF_UNTIL, ""))
    if until is not None:
        out["backoff_until"] = until
    reason = annotations.get(ANNOTATION_DEACTIVATED)
    if reason:
        out["deactivated"] = str(reason)[:1024]
    return out


def written_condition_type(object_kind: str, condition: str) -> str:
    """The type a condition has on an object of ``object_kind``: upstream names a CompositePodGroup's
    conditions after its kind (``CompositePodGroupInitiallyScheduled``); Quorum's own
    (``quorum.dev/...``) keep their names. ``read_condition_type`` is the inverse."""
    if object_kind == "CompositePodGroup" and condition.startswith("PodGroup"):
        return "Composite" + condition
    return condition


def read_condition_type(written: str) -> str:
    """The PodGroup name Quorum uses for a condition type read from either kind of object."""
    return written.removeprefix("Composite") if written.startswith("CompositePodGroup") else written


def shown_conditions(obj: Mapping[str, Any]) -> tuple[tuple[str, bool, str, str], ...]:
    """The conditions a gang's object shows, as (type, status is "True", reason, message).

    Quorum compares them with what it applied: another writer (kube-scheduler's group cycle, with
    ``GenericWorkload`` on) may have replaced one. Types are read under the PodGroup names Quorum
    uses for both kinds (``read_condition_type``)."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    out: list[tuple[str, bool, str, str]] = []
    for c in conditions if isinstance(conditions, list) else ():
        kind = c.get("type") if isinstance(c, Mapping) else None
        if isinstance(kind, str) and kind:
            kind = read_condition_type(kind)
            reason, message = str(c.get("reason") or ""), str(c.get("message") or "")
            out.append((kind, c.get("status") == "True", reason, message))
    return tuple(out)


def _seconds(raw: Any) -> float | None:
    """A non-negative finite number of seconds, else None."""
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if 0 <= value < 1e12 else None
