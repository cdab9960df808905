"""Generated sequences around one claim a gang shares: it is counted once, and never twice.

Members of gang ``trainer`` come and go naming ResourceClaim ``shared``; the claim is made, resized,
allocated on a node for the PodGroup (as kube-scheduler does in the first member's cycle) or freed;
members are bound to the claim's node; a pod of another gang may name the claim too; the device
class' devices come and go on nodes. After every step:

* the gang's device demand is the claim's devices exactly once (carried by one member) while the
  claim is shared by the gang alone and none of them is bound, and nothing once one is;
* each node's free devices are its devices minus those of the claim when a user of it is bound
  there, or when it is shared beyond the gang (devices of a claim only pending members share
  stay the carrier's demand, so a held gang is not counted twice);
* a placement of the pending members puts them all on one node, the claim's node once a member is
  bound, and that node holds the carrier's devices.

QUORUM_STATEFUL_EXAMPLES raises the number of scenarios for a longer run.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from extender.topology.model import Placement

from .dra_objects import claim, exactly, resource_slice, with_claim
from .fixtures import bound, gang_pod
from .test_devices import KIND, SOURCES, dra_world

GANG, KEY = "trainer", "ml/trainer"
MEMBERS = [f"m{i}" for i in range(4)]
DEVICE_NODES = 4


class SharedClaimMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world, self.feed = dra_world(device_nodes=DEVICE_NODES, devices=8)
        self.devices = {n: 8 for n in self.world.names[:DEVICE_NODES]}
        self.count = 0  # the claim's devices (0: no claim)
        self.claim_on = ""  # the node the claim is allocated on ("" when it is not)
        self.members: dict[str, str] = {}  # member -> node it is bound to ("" pending)
        self.outsider = False  # a pod of another gang names the claim

    # --- the world
    def _put_claim(self) -> None:
        if not self.count:
            self.feed.delete(SOURCES["resourceclaims"], claim("shared", exactly(1)))
            return
        made = claim("shared", exactly(self.count), allocated_on=self.claim_on,
                     devices=range(self.count) if self.claim_on else range(0))
        if self.claim_on:
            made["status"]["reservedFor"] = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                              "name": GANG, "uid": "pg-uid"}]
        self.feed.upsert(SOURCES["resourceclaims"], made)

    def _pod(self, name: str, node: str = "", gang: str = GANG, cpu: str = "1") -> None:
        obj = with_claim(gang_pod(name, gang=gang, min_count=2, gpus=0, cpu=cpu), "shared")
        self.world.add(bound(obj, node) if node else obj)

    @rule(count=st.integers(0, 8))
    def claim_changes(self, count: int) -> None:
        """The claim made, resized (as a new claim of the same name) or deleted; never allocated anew."""
        if any(self.members.values()):
            return  # kube-scheduler allocated it for bound members: it stays
        self.count, self.claim_on = count, ""
        self._put_claim()

    @precondition(lambda self: self.count > 0 and not self.claim_on)
    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        """kube-scheduler allocates the claim in a member's cycle, on a node with enough devices."""
        fitting = sorted(n for n, d in self.devices.items() if d >= self.count)
        if fitting:
            self.claim_on = data.draw(st.sampled_from(fitting))
            self._put_claim()

    @precondition(lambda self: bool(self.claim_on) and not any(self.members.values()))
    @rule()
    def deallocate(self) -> None:
        """PostFilter freed the allocation (no member bound yet)."""
        self.claim_on = ""
        self._put_claim()

    @rule(name=st.sampled_from(MEMBERS), cpu=st.sampled_from(["1", "40"]))
    def member_comes(self, name: str, cpu: str) -> None:
        """A member of 1 or 40 cpu (two of 40 do not fit one node of 64)."""
        if name not in self.members:
            self.members[name] = ""
            self._pod(name, cpu=cpu)

    @rule(name=st.sampled_from(MEMBERS))
    def member_goes(self, name: str) -> None:
        if name in self.members:
            del self.members[name]
            self.world.cache.delete_pod(self.world.pods[name])

    @precondition(lambda self: bool(self.claim_on))
    @rule(name=st.sampled_from(MEMBERS))
    def member_binds(self, name: str) -> None:
        if self.members.get(name) == "":
            self.members[name] = self.claim_on
            self.world.bind_in_cache(name, self.claim_on)

    @rule(present=st.booleans())
    def outsider_changes(self, present: bool) -> None:
        if present and not self.outsider:
            self._pod("outsider", gang="other")
        elif not present and self.outsider:
            self.world.cache.delete_pod(self.world.pods["outsider"])
        self.outsider = present

    @rule(node=st.sampled_from(range(DEVICE_NODES)), devices=st.integers(0, 8))
    def slice_changes(self, node: int, devices: int) -> None:
        name = self.world.names[node]
        if name == self.claim_on:
            devices = max(devices, self.count)  # a driver keeps allocated devices
        self.devices[name] = devices
        self.feed.upsert(SOURCES["resourceslices"], resource_slice(name, devices))

    # --- what must hold
    def _shared_by_gang_alone(self) -> bool:
        return self.count > 0 and len(self.members) >= 2 and not self.outsider

    @invariant()
    def demand_counts_the_claim_once(self) -> None:
        if not self._shared_by_gang_alone():
            return
        pods = self.world.cache.pods
        demand = sum(pods[f"uid-{m}"].requests.get(KIND, 0) for m, node in self.members.items() if not node)
        expected = 0 if any(self.members.values()) else self.count
        assert demand == expected, f"gang demand {demand} devices, expected {expected}: {self.members}"

    @invariant()
    def free_devices_add_up(self) -> None:
        users = len(self.members) + self.outsider
        any_bound = any(self.members.values())
        # Allocated devices are taken unless every user of the claim is pending and one of them
        # carries them: a single pending user, or pending members of one gang alone.
        held = bool(self.claim_on) and (users == 0 or any_bound or (users > 1 and self.outsider))
        for name, devices in self.devices.items():
            taken = self.count if held and name == self.claim_on else 0
            counted = self.world.cache.free_on(self.world.cache.nodes[name])[0].get(KIND, 0)
            assert counted == devices - taken, f"{name}: {counted} free devices, expected {devices - taken}"

    @invariant()
    def pending_members_are_placed_on_one_node(self) -> None:
        if not self._shared_by_gang_alone():
            return
        cache, planner = self.world.cache, self.world.coordinator.planner
        spec = cache.gang_spec(KEY)
        pending = {m.uid: m for m in cache.members(KEY) if m.pending}
        if spec is None or not pending:
            return
        bound_nodes = [node for node in self.members.values() if node]
        result = planner.plan(spec, pending, list(cache.nodes), bound_nodes, None)
        if not isinstance(result, Placement):
            return
        nodes = set(result.assignment.values())
        assert len(nodes) == 1, f"members sharing a claim placed on {nodes}"
        if bound_nodes:
            assert nodes == set(bound_nodes), f"placed on {nodes}, the claim's members are on {bound_nodes}"
        elif len(result.assignment) == len(pending):
            assert self.devices.get(nodes.pop(), 0) >= self.count, "placed off the claim's devices"


SharedClaimMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("QUORUM_STATEFUL_EXAMPLES", "150")), stateful_step_count=30,
    deadline=None, database=None)
TestSharedClaimsStateful = SharedClaimMachine.TestCase
