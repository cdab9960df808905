"""The writes to a gang's own objects, a part of the one Kubernetes client (``kube.py``): PodGroup
conditions and bookkeeping annotations, and the gang-started ConfigMap.

Conditions are applied server-side with field manager ``quorum``, one write at a time per gang; the
transition times Quorum wrote are remembered (for a bounded number of gangs) so that a condition
whose status does not change keeps its time. Each write carries the whole set, so sets asked for
while one of the gang's writes is in flight fold into one: only the newest is sent after it. A
write also waits ``settle_seconds`` before it goes: a gang that fits binds within a second of
being found waiting, and its pods are often Ready a moment after the bind, and each of those
steps would otherwise be a write of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson

from ..cluster.gang_sources import written_condition_type
from ..cluster.records import GangHome
from ..gang.effects import CONDITION_MESSAGE_LIMIT, GangCondition
from ..gang.serial import InOrder

log = logging.getLogger(__name__)

FIELD_MANAGER = "quorum"
_MAX_GANGS_REMEMBERED = 4096  # gangs whose condition transition times are kept
CONDITION_SETTLE_SECONDS = 1.0  # sets asked for this soon after one fold into it


# One write request of the client: (method, path, body, content type) -> (status, body).
Write = Callable[[str, str, bytes, str], Awaitable[tuple[int, bytes]]]


class GangWrites:
    """Held by ``KubeClient``, which offers these writes to the gang core and sends them."""

    def __init__(self, write: Write, wall: Callable[[], float],
                 settle_seconds: float = CONDITION_SETTLE_SECONDS) -> None:
        self.write = write
        self._wall = wall
        self.settle_seconds = settle_seconds
        # gang key -> condition type -> (status, lastTransitionTime), least recently applied first
        self._conditions: OrderedDict[str, dict[str, tuple[bool, str]]] = OrderedDict()
        self._condition_order = InOrder()  # a gang's condition writes, one at a time
        # gang key -> the newest set asked for and not yet sent (a run waiting for its turn sends it)
        self._condition_next: dict[str, tuple[GangHome, list[GangCondition]]] = {}

    async def set_gang_conditions(self, home: GangHome, conditions: list[GangCondition]) -> None:
        """Server-side apply Quorum's conditions to a PodGroup's status.

        Apply with field manager ``quorum`` owns exactly the conditions in the list, so other
        controllers' conditions are kept (and one Quorum stops listing is removed). The transition
        time stays what it was while a condition's status does not change. Errors are logged only.
        """
        gang = _object_key(home)
        waiting = gang in self._condition_next
        self._condition_next[gang] = (home, conditions)
        if waiting:
            return  # a write of this gang is waiting for its turn and will send this newer set
        # One write at a time per gang, in the order they were asked for: each sends the whole set,
        # so an older set landing after a newer one would take back what the newer one added. A
        # member bound or finished at a time changes the set once per member; under load these
        # bursts would otherwise be as many writes.
        taken = False

        async def apply_newest() -> None:
            nonlocal taken
            taken = True
            newest_home, newest = self._condition_next.pop(gang)
            await self._apply_conditions(newest_home, gang, newest)
        try:
            if self.settle_seconds > 0:
                await asyncio.sleep(self.settle_seconds)  # what the gang does next folds into this
            await self._condition_order.run(gang, apply_newest)
        finally:
            if not taken:  # cancelled while waiting: later sets must not wait for this run
                self._condition_next.pop(gang, None)

    async def _apply_conditions(self, home: GangHome, gang: str, conditions: list[GangCondition]) -> None:
        now = datetime.fromtimestamp(self._wall(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        known = self._conditions.pop(gang, {})
        entries = []
        for condition in conditions:
            previous = known.get(condition.type)
            since = previous[1] if previous is not None and previous[0] == condition.status else now
            known[condition.type] = (condition.status, since)
            entries.append({"type": written_condition_type(home.kind, condition.type),
                            "status": "True" if condition.status else "False",
                            "reason": condition.reason,
                            "message": condition.message[:CONDITION_MESSAGE_LIMIT],
                            "lastTransitionTime": since})
        self._conditions[gang] = known
        while len(self._conditions) > _MAX_GANGS_REMEMBERED:
            self._conditions.popitem(last=False)
        body = {"apiVersion": home.api_version, "kind": home.kind,
                "metadata": {"name": home.name, "namespace": home.namespace},
                "status": {"conditions": entries}}
        path = home.path + f"/status?fieldManager={FIELD_MANAGER}&force=true"
        if await self._patch_podgroup(gang, "conditions", path, body, "application/apply-patch+yaml") == 404:
            self._conditions.pop(gang, None)

    async def annotate_gang(self, home: GangHome, annotations: dict[str, str | None]) -> bool:
        """Merge-patch bookkeeping annotations on a gang's object, a PodGroup of any API (None
        removes one); True when written.

        An object that is gone is not an error; other failures are logged, and the caller, which
        keeps the same values in memory, writes them again next time.
        """
        gang = _object_key(home)
        body = {"metadata": {"annotations": annotations}}
        status = await self._patch_podgroup(gang, "annotations", home.path, body,
                                            "application/merge-patch+json")
        return status == 200

    async def write_started_configmap(self, namespace: str, name: str, owner: GangHome | None,
                                      data: dict[str, str]) -> bool:
        """Server-side apply the gang-started ConfigMap (owned by the gang's object, so it goes with
        it); True when written. Failures are logged: the Event and condition still tell the start."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": {"app.kubernetes.io/managed-by": "quorum"}}
        if owner is not None and owner.uid:
            meta["ownerReferences"] = [{"apiVersion": owner.api_version, "kind": owner.kind,
                                        "name": owner.name, "uid": owner.uid}]
        body = orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}?fieldManager=quorum&force=true"
        status = await self._configmap_write("PATCH", path, body, "application/apply-patch+yaml", name)
        return status in (200, 201)

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        status = await self._configmap_write("DELETE", path, b"", "application/json", name)
        return status in (200, 202, 404)

    async def _configmap_write(self, method: str, path: str, body: bytes, content_type: str,
                               name: str) -> int:
        try:
            status, text = await self.write(method, path, body, content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("writing the gang-started ConfigMap failed",
                        extra={"configmap": name, "error": str(exc)})
            return 0
        if status not in (200, 201, 202, 404):
            log.warning("writing the gang-started ConfigMap failed",
                        extra={"configmap": name, "error": api_message(status, text)})
        return status

    async def _patch_podgroup(self, gang: str, what: str, path: str, body: dict[str, Any],
                              content_type: str) -> int:
        """PATCH a PodGroup; 0 when the apiserver was not reached. Failures other than 404 (the
        PodGroup is gone: nothing to write) are logged at warning."""
        try:
            status, text = await self.write("PATCH", path, orjson.dumps(body), content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning(f"writing PodGroup {what} failed", extra={"gang": gang, "error": str(exc)})
            return 0
        if status not in (200, 201, 404):
            log.warning(f"writing PodGroup {what} failed",
                        extra={"gang": gang, "error": api_message(status, text)})
        return status


def api_message(status: int, body: bytes) -> str:
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict) and doc.get("message"):
            return f"HTTP {status}: {doc['message']}"
    except orjson.JSONDecodeError:
        pass
    return f"HTTP {status}: {body[:200].decode(errors='replace')}"


def refusal_causes(body: bytes) -> str:
    """What the causes of a refused eviction say (the budget is named there when the apiserver
    names it); empty when the answer carries none or is not a Status document."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    details = doc.get("details") if isinstance(doc, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ""
    said = [str(c.get("message") or c.get("reason") or "") for c in causes if isinstance(c, dict)]
    return "; ".join(s for s in said if s)


def _object_key(home: GangHome) -> str:
    """Which object, in logs and in the per-object write order: a CompositePodGroup may share its
    name with a PodGroup."""
    if home.kind == "PodGroup":
        return f"{home.namespace}/{home.name}"
    return f"{home.namespace}/{home.kind}:{home.name}"
