"""What cluster-autoscaler answered to the ProvisioningRequests Quorum made (autoscaling.x-k8s.io/v1).

The informer feeds this small table (only when ``autoscaling.provisioningRequests`` is on); the
gang core reads it when a gang waits for capacity it asked for (``gang/provisioning.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .dra.demand import field_of, items_of, key_of
from .relist import Rejected, relist

KIND = "provisioningrequests"
PATH = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass(frozen=True, slots=True)
class ScaleUpStatus:
    """The request's outcome so far: "" (not answered yet), Provisioned, Failed, or gone."""

    state: str
    message: str = ""
    ours: bool = False  # labelled as Quorum's


# Provisioned=False with these reasons is a refusal: the autoscaler found no node group that can
# take the request whole (it tries again later on its own backoff; Quorum asks elsewhere meanwhile).
REFUSALS = ("CapacityIsNotFound",)


def status_of(obj: Mapping[str, Any]) -> ScaleUpStatus:
    """Failed (also BookingExpired, CapacityRevoked, a refusal) wins over Provisioned, which wins
    over nothing."""
    conditions = {c.get("type"): c for c in items_of(field_of(obj, "status"), "conditions")
                  if isinstance(c, Mapping)}
    held = {kind: c for kind, c in conditions.items() if c.get("status") == "True"}
    ours = field_of(field_of(obj, "metadata"), "labels").get(MANAGED_BY) == "quorum"
    for failed in ("Failed", "BookingExpired", "CapacityRevoked"):
        if failed in held:
            return ScaleUpStatus("Failed", _why(held[failed], failed), ours)
    if "Provisioned" in held:
        return ScaleUpStatus("Provisioned", "", ours)
    provisioned = conditions.get("Provisioned") or {}
    if provisioned.get("status") == "False" and provisioned.get("reason") in REFUSALS:
        return ScaleUpStatus("Failed", _why(provisioned, "refused"), ours)
    return ScaleUpStatus("", "", ours)


def _why(condition: Mapping[str, Any], default: str) -> str:
    reason, message = condition.get("reason"), condition.get("message")
    return str(": ".join(str(p) for p in (reason, message) if p) or default)[:300]


class ScaleUpTable:
    """ProvisioningRequests by "namespace/name"; ``on_change`` hears of each key that moved."""

    def __init__(self) -> None:
        self.requests: dict[str, ScaleUpStatus] = {}
        self.on_change: Callable[[str], None] | None = None

    def upsert(self, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj, Mapping):
            raise ValueError(f"{KIND}: object expected")
        key = key_of(obj)
        status = status_of(obj)
        if self.requests.get(key) != status:
            self.requests[key] = status
            self._tell(key)

    def delete(self, obj: Mapping[str, Any]) -> None:
        key = key_of(obj)
        if self.requests.pop(key, None) is not None:
            self._tell(key)

    def replace(self, objs: Iterable[Mapping[str, Any]]) -> list[Rejected]:
        """Load a full list (``relist.py``)."""
        def delete(key: str) -> None:
            namespace, name = key.split("/", 1)
            self.delete({"metadata": {"namespace": namespace, "name": name}})
        return relist(objs, key_of, self.requests, delete, self.upsert)

    def _tell(self, key: str) -> None:
        if self.on_change is not None:
            self.on_change(key)
