"""How DRA devices enter the cache's accounting: a pending pod's requests carry its device demand,
and the cached free capacity of a node is dropped when its devices move.

A mixin of ``ClusterCache`` (which owns the state it touches), kept apart so that the cache module
stays about pods, nodes and gang objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .device_demand import field_of, is_device_key
from .devices import ALL_NODES, Changes, DeviceInventory
from .records import PodRecord
from .resources import Resources, add


class DeviceAccounting:
    pods: dict[str, PodRecord]
    devices: DeviceInventory
    _free: dict[str, Resources]
    capacity_version: int

    def _with_devices(self, record: PodRecord, obj: dict[str, Any]) -> set[str]:
        """Add a pending pod's device demand to its requests; returns the nodes whose free devices
        moved (a pod whose claims changed binding state), told after the pod's own events."""
        spec, status = field_of(obj, "spec"), field_of(obj, "status")
        if not spec.get("resourceClaims") and not self.devices.has_pod(record.uid):
            return set()
        changes = self.devices.set_pod(record.uid, record.namespace, spec, status, bound=not record.pending)
        demand = self.devices.demand(record.uid)
        if demand:
            record.requests = add(record.requests, demand)
        return self._devices_changed(changes)

    def _devices_changed(self, changes: Changes) -> set[str]:
        """Forget the free capacity of the nodes moved and give the pods concerned their demand
        again; returns the nodes, for the caller to tell once its own events are out."""
        for uid in changes.pods:
            self.redemand(uid)
        for node in changes.nodes:
            self.forget_free(None if node == ALL_NODES else node)
        if changes.nodes or changes.pods:
            self.capacity_version += 1
        return changes.nodes

    def redemand(self, uid: str) -> None:
        """A pending pod's requests with its device demand as the inventory sees it now."""
        record = self.pods.get(uid)
        if record is None or not record.pending:
            return
        requests = {k: v for k, v in record.requests.items() if not is_device_key(k)}
        requests.update(self.devices.demand(uid))
        if requests != record.requests:
            self.pods[uid] = dataclasses.replace(record, requests=requests)

    def forget_free(self, node: str | None) -> None:
        """Drop the cached free capacity of one node (of every node for None)."""
        if node is None:
            self._free.clear()
        else:
            self._free.pop(node, None)
