"""How DRA devices enter the cache's accounting: a pending pod's requests carry its device demand,
and the cached free capacity of a node is dropped when its devices move.

A part the cache holds and calls, kept apart so that the cache module stays about pods, nodes and
gang objects. It works on the cache's own tables (the pod records and the memo of free capacity,
shared, never copied) and says whether free capacity can have moved: the cache keeps its version.
"""

from __future__ import annotations

import dataclasses

from ..records import PodRecord
from ..resources import Resources, add
from .demand import is_device_key
from .inventory import ALL_NODES, Changes, DeviceInventory


class DeviceAccounting:
    def __init__(self, inventory: DeviceInventory, pods: dict[str, PodRecord],
                 free: dict[str, Resources]) -> None:
        self.inventory = inventory
        self._pods = pods
        self._free = free

    def with_devices(self, record: PodRecord) -> Changes:
        """Add a pending pod's device demand to its requests; returns what its claims moved, for
        the cache to ``settle``."""
        if not record.claim_refs and not self.inventory.has_pod(record.uid):
            return Changes(set(), set())
        changes = self.inventory.set_pod(record.uid, record.namespace, record.claim_refs,
                                         bound=not record.pending, gang=record.gang_key or "")
        demand = self.inventory.demand(record.uid)
        if demand:
            record.requests = add(record.requests, demand)
        record.shared_claim = self.inventory.shared_claim(record.uid)
        return changes

    def for_request(self, record: PodRecord) -> PodRecord:
        """A pending pod known only from kube-scheduler's request, with the device demand its claims
        would have: placed on its containers' requests alone, it could be given a node whose
        devices are taken (Quorum never guesses that devices fit)."""
        if not record.claim_refs or not record.pending or record.uid in self._pods:
            return record
        demand = self.inventory.demand(record.uid, (record.namespace, record.claim_refs))
        return dataclasses.replace(record, requests=add(record.requests, demand)) if demand else record

    def regang(self, record: PodRecord) -> Changes:
        """A pod filed in another gang without being delivered again (``cache._refile``)."""
        if not self.inventory.has_pod(record.uid):
            return Changes(set(), set())
        return self.inventory.set_gang(record.uid, record.gang_key or "")

    def settle(self, changes: Changes) -> bool:
        """Forget the free capacity of the nodes moved and give the pods concerned their demand
        again; returns whether free capacity can have changed."""
        for uid in changes.pods:
            self.redemand(uid)
        for node in changes.nodes:
            self.forget_free(None if node == ALL_NODES else node)
        return bool(changes.nodes or changes.pods)

    def redemand(self, uid: str) -> None:
        """A pending pod's requests with its device demand as the inventory sees it now."""
        record = self._pods.get(uid)
        if record is None or not record.pending:
            return
        requests = {k: v for k, v in record.requests.items() if not is_device_key(k)}
        requests.update(self.inventory.demand(uid))
        shared = self.inventory.shared_claim(uid)
        if requests != record.requests or shared != record.shared_claim:
            self._pods[uid] = dataclasses.replace(record, requests=requests, shared_claim=shared)

    def forget_free(self, node: str | None) -> None:
        """Drop the cached free capacity of one node (of every node for None)."""
        if node is None:
            self._free.clear()
        else:
            self._free.pop(node, None)
