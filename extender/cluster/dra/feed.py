"""The DRA objects' way into the cache: informer events for the four resource.k8s.io kinds.

Each update goes to the device inventory, and the cache applies what it moved: the cached free
capacity of the nodes concerned is dropped, pending pods whose claims changed get their demand
again, and the coordinator hears of devices that came or went (as for pods and nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..relist import Rejected, relist
from .demand import key_of
from .inventory import Changes, DeviceInventory

if TYPE_CHECKING:
    from ..cache import ClusterCache

Update = Callable[[DeviceInventory, Mapping[str, Any]], Changes]


@dataclass(frozen=True, slots=True)
class DeviceKindSource:
    """One resource.k8s.io kind: its informer name, list path and inventory updates."""

    name: str
    path: str
    upsert: Update
    delete: Update


_API = "/apis/resource.k8s.io/v1"
DEVICE_SOURCES = (
    DeviceKindSource("deviceclasses", f"{_API}/deviceclasses", DeviceInventory.upsert_class,
                     DeviceInventory.delete_class),
    DeviceKindSource("resourceslices", f"{_API}/resourceslices", DeviceInventory.upsert_slice,
                     DeviceInventory.delete_slice),
    DeviceKindSource("resourceclaimtemplates", f"{_API}/resourceclaimtemplates",
                     DeviceInventory.upsert_template, DeviceInventory.delete_template),
    DeviceKindSource("resourceclaims", f"{_API}/resourceclaims", DeviceInventory.upsert_claim,
                     DeviceInventory.delete_claim),
)


class DeviceFeed:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.inventory = cache.devices
        self._known: dict[str, dict[str, Mapping[str, Any]]] = {s.name: {} for s in DEVICE_SOURCES}

    def upsert(self, source: DeviceKindSource, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj, Mapping):
            raise ValueError(f"{source.name}: object expected")
        self._known[source.name][key_of(obj)] = _stub(obj)
        self.apply(source.upsert(self.inventory, obj))

    def delete(self, source: DeviceKindSource, obj: Mapping[str, Any]) -> None:
        self._known[source.name].pop(key_of(obj), None)
        self.apply(source.delete(self.inventory, obj))

    def replace(self, source: DeviceKindSource, objs: Iterable[Mapping[str, Any]]) -> list[Rejected]:
        """Load a full list (``relist.py``)."""
        known = self._known[source.name]
        rejected = relist(objs, key_of, known, lambda ident: self.delete(source, known[ident]),
                          lambda obj: self.upsert(source, obj))
        self.cache.set_synced(source.name, True)
        return rejected

    def apply(self, changes: Changes) -> None:
        self.cache.apply_device_changes(changes)


def _stub(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Enough of an object to delete it later (the inventory keeps its own compact records)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {"metadata": {"namespace": meta.get("namespace") or "", "name": meta.get("name") or ""}}
