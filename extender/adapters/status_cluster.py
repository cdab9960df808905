"""What ``quorum-extender status`` can say when Quorum itself does not answer: PodGroups, their
members and Quorum's Events, read from the apiserver.

Quorum writes its decisions where they outlive it: conditions on PodGroups and Events (reported by
``quorum.dev/extender``) with the same reason text as its filter answers. Read back, they give the
same table without the queue's live view (queue position, claims), for PodGroup gangs. Gangs
declared by annotations have no object of their own; their Events are on their first member.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections import defaultdict
from typing import Any

from ..cluster.object_sources import NATIVE_PODGROUPS
from ..gang.effects import CONDITION_DEACTIVATED, CONDITION_INITIALLY_SCHEDULED, CONDITION_RECOVERING
from .events import REPORTING_CONTROLLER
from .kube import load_credentials, read_json

PODGROUPS = f"/apis/{NATIVE_PODGROUPS.api_version}"  # the fallback reads the 1.37 API only
CONDITION_PHASES = ((CONDITION_DEACTIVATED, "Deactivated"), (CONDITION_RECOVERING, "Recovering"),
                    (CONDITION_INITIALLY_SCHEDULED, "Scheduled"))


def _scoped(prefix: str, namespace: str | None, resource: str) -> str:
    return f"{prefix}/namespaces/{namespace}/{resource}" if namespace else f"{prefix}/{resource}"


def phase_of(podgroup: dict[str, Any]) -> str:
    listed = (podgroup.get("status") or {}).get("conditions") or []
    conditions = {c.get("type"): c.get("status") for c in listed}
    for kind, phase in CONDITION_PHASES:
        if conditions.get(kind) == "True":
            return phase
    return "Waiting"


def document(kubeconfig: str, namespace: str | None, timeout: float) -> dict[str, Any]:
    """A /debug/gangs-shaped document of PodGroup gangs, from the apiserver."""
    creds = load_credentials(kubeconfig)

    def get(path: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = read_json(creds, path, timeout).get("items") or []
        return items

    groups = get(_scoped(PODGROUPS, namespace, "podgroups"))
    pods = get(_scoped("/api/v1", namespace, "pods"))
    selector = urllib.parse.quote(f"reportingComponent={REPORTING_CONTROLLER}")
    events = get(_scoped("/api/v1", namespace, "events") + f"?fieldSelector={selector}")
    members = _live_members(pods)
    reasons = _latest_reasons(events)
    gangs = [_gang_row(group, members, reasons) for group in groups]
    return {"gangs": gangs, "claim": None, "source": "apiserver (Quorum did not answer)"}


def _live_members(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The pods of each PodGroup ("namespace/name") that have not finished."""
    members: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        phase = (pod.get("status") or {}).get("phase")
        if group and phase not in ("Succeeded", "Failed"):
            members[f"{pod['metadata']['namespace']}/{group}"].append(pod)
    return members


def _latest_reasons(events: list[dict[str, Any]]) -> dict[str, str]:
    """The newest of Quorum's Events on each PodGroup, as "Reason: note"."""
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        ref = event.get("involvedObject") or event.get("regarding") or {}
        if ref.get("kind") != "PodGroup":
            continue
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        stamp = str(event.get("eventTime") or event.get("lastTimestamp") or "")
        note = str(event.get("note") or event.get("message") or "")
        if key not in latest or stamp >= latest[key][0]:
            latest[key] = (stamp, f"{event.get('reason')}: {note}")
    return {key: reason for key, (_, reason) in latest.items()}


def _gang_row(group: dict[str, Any], members: dict[str, list[dict[str, Any]]],
              reasons: dict[str, str]) -> dict[str, Any]:
    """One PodGroup as a row of the /debug/gangs document."""
    meta = group.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    mine = members.get(key, [])
    priority = (group.get("spec") or {}).get("priority", 0)
    return {"gang": key, "phase": phase_of(group), "minCount": gang.get("minCount"),
            "members": len(mine), "queuePosition": None, "priority": priority,
            "bound": [p["metadata"]["name"] for p in mine if (p.get("spec") or {}).get("nodeName")],
            "reason": reasons.get(key, "")}
