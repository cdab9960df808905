"""DRA devices for the end-to-end tests: a DeviceClass and ResourceSlices on chosen kwok nodes, claim
templates, pods that use them, and a monitor of claims held for pods that are not bound.

kwok nodes have no DRA driver, so a test publishes the devices itself: one ResourceSlice per chosen
node (pool named after the node), all of one driver that is unique to the test, and a DeviceClass
selecting that driver by CEL. DRA devices therefore exist only on the nodes a test chose, and only
for its own pods; the extended GPUs of the nodes are untouched (the pods here ask ``gpus=0``).

Objects go through ``CustomObjectsApi``: it is a plain REST client for any ``/apis/<group>/<version>``
path, built-in groups included, and it returns the API's own camelCase JSON.

``ClaimMonitor`` polls the namespace's ResourceClaims and pods and measures, per claim, how long it
stays allocated while the pod it belongs to is not bound: kube-scheduler allocates a claim in Reserve
and writes it in PreBind, before the extender's bind, and a failed bind leaves it allocated (see
``/work/shared/reference/dra.md``); devices held that way are lost to everyone else.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from .cluster import E2E_LABEL, Kube
from .scenario import Scenario, is_deleting, node_of

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
DRA_API_VERSION = f"{DRA_GROUP}/{DRA_VERSION}"
DRA_NAMESPACE_LABEL = "e2e.quorum.dev/dra-namespace"  # on cluster-scoped objects: the test that made them
CLAIM = "gpu"  # the claim's name in the pod (spec.resourceClaims[].name) and the request's name
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEVICES_PER_NODE = 8


def names(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    return [m["metadata"]["name"] for m in manifests]


def _ignore(status: int, call: Any, *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, _request_timeout=30, **kwargs)
    except ApiException as exc:
        if exc.status != status:
            raise


# ------------------------------------------------------------------------------ claims, read back
def claim_pods(claim: Mapping[str, Any]) -> set[str]:
    """The pods a claim belongs to: those in ``status.reservedFor`` and its owner pod (a claim made
    from a template is owned by its pod)."""
    out = {str(ref.get("name")) for ref in ((claim.get("status") or {}).get("reservedFor") or [])
           if ref.get("resource") == "pods" and ref.get("name")}
    out |= {str(ref.get("name")) for ref in ((claim.get("metadata") or {}).get("ownerReferences") or [])
            if ref.get("kind") == "Pod" and ref.get("name")}
    return out


def owner_pod(claim: Mapping[str, Any]) -> str | None:
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("name"):
            return str(ref["name"])
    return None


def is_allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def allocated_devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every device allocated to the claim."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results]


def list_claims(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    doc = kube.custom.list_namespaced_custom_object(DRA_GROUP, DRA_VERSION, namespace, "resourceclaims",
                                                    _request_timeout=30)
    return list((doc.get("items") if isinstance(doc, dict) else None) or [])


def with_claim(manifest: Mapping[str, Any], template: str, claim: str = CLAIM) -> dict[str, Any]:
    """A copy of a pod manifest (``Scenario.pod``/``Scenario.gang``) that uses a claim made from
    ``template``: ``spec.resourceClaims`` names it and the first container's ``resources.claims``."""
    pod = copy.deepcopy(dict(manifest))
    spec = pod["spec"]
    spec.setdefault("resourceClaims", []).append({"name": claim, "resourceClaimTemplateName": template})
    resources = spec["containers"][0].setdefault("resources", {})
    resources.setdefault("claims", []).append({"name": claim})
    return pod


def remove_leftovers(kube: Kube) -> None:
    """Delete the slices and classes an earlier run of the suite failed to remove (tests run one at a
    time, so whatever carries the suite's label now is a leftover)."""
    selector = f"{E2E_LABEL}=true"
    _ignore(404, kube.custom.delete_collection_cluster_custom_object, DRA_GROUP, DRA_VERSION,
            "resourceslices", label_selector=selector)
    _ignore(404, kube.custom.delete_collection_cluster_custom_object, DRA_GROUP, DRA_VERSION,
            "deviceclasses", label_selector=selector)


# ------------------------------------------------------------------------------ one test's devices
class DraDevices:
    """One test's DRA objects: its DeviceClass, ResourceSlices on chosen nodes, claim templates, and
    pods using them. ``cleanup`` removes all of it (the fixture calls it whatever the outcome)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.kube = sc.kube
        self.ns = sc.ns
        self.device_class = f"gpu-{sc.ns}"
        digest = hashlib.sha1(sc.ns.encode()).hexdigest()[:10]
        self.driver = f"gpu-{digest}.e2e.quorum.dev"  # a driver name is at most 63 characters
        self.slices: dict[str, str] = {}  # node -> ResourceSlice name
        self.devices: dict[str, int] = {}  # node -> devices published there
        self.templates: dict[tuple[int, str], str] = {}  # (count, mode) -> ResourceClaimTemplate name
        self.class_created = False

    def _labels(self) -> dict[str, str]:
        return {E2E_LABEL: "true", DRA_NAMESPACE_LABEL: self.ns}

    def unavailable(self) -> str | None:
        """Why DRA cannot be used on this cluster, or None."""
        try:
            resources = self.kube.custom.get_api_resources(DRA_GROUP, DRA_VERSION, _request_timeout=30)
        except ApiException as exc:
            return f"{DRA_API_VERSION} is not served by the apiserver (HTTP {exc.status})"
        served = {r.name for r in resources.resources or []}
        missing = {"deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"} - served
        return f"{DRA_API_VERSION} lacks {sorted(missing)}" if missing else None

    # -- cluster-scoped objects
    def create_class(self) -> str:
        """The test's DeviceClass: every device of the test's driver."""
        remove_leftovers(self.kube)
        body = {"apiVersion": DRA_API_VERSION, "kind": "DeviceClass",
                "metadata": {"name": self.device_class, "labels": self._labels()},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]}}
        self.kube.custom.create_cluster_custom_object(DRA_GROUP, DRA_VERSION, "deviceclasses", body,
                                                      _request_timeout=30)
        self.class_created = True
        return self.device_class

    def add_nodes(self, nodes: Iterable[str], devices: int = DEVICES_PER_NODE,
                  settle: float = 1.0) -> list[str]:
        """One ResourceSlice per node with ``devices`` devices ``gpu-0`` .. ``gpu-<n-1>``; returns the
        slice names. ``settle``: a pause for kube-scheduler's and Quorum's informers to see them."""
        created = []
        for node in nodes:
            name = f"{self.ns}-{node}"
            body = {"apiVersion": DRA_API_VERSION, "kind": "ResourceSlice",
                    "metadata": {"name": name, "labels": self._labels()},
                    "spec": {"driver": self.driver, "nodeName": node,
                             "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                             "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "e2e"}},
                                          "capacity": {"memory": {"value": "80Gi"}}}
                                         for i in range(devices)]}}
            self.kube.custom.create_cluster_custom_object(DRA_GROUP, DRA_VERSION, "resourceslices", body,
                                                          _request_timeout=30)
            self.slices[node] = name
            self.devices[node] = devices
            created.append(name)
        if settle:
            time.sleep(settle)
        return created

    # -- namespaced objects
    def template(self, count: int, mode: str = "ExactCount") -> str:
        """A ResourceClaimTemplate asking ``count`` devices of the test's class (made once per shape)."""
        key = (count, mode)
        if key in self.templates:
            return self.templates[key]
        name = f"gpu-{count}" if mode == "ExactCount" else f"gpu-{mode.lower()}"
        exactly: dict[str, Any] = {"deviceClassName": self.device_class, "allocationMode": mode}
        if mode == "ExactCount":
            exactly["count"] = count
        body = {"apiVersion": DRA_API_VERSION, "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}}}
        self.kube.custom.create_namespaced_custom_object(DRA_GROUP, DRA_VERSION, self.ns,
                                                         "resourceclaimtemplates", body, _request_timeout=30)
        self.templates[key] = name
        return name

    # -- pods
    def pod(self, name: str, *, devices: int, **kwargs: Any) -> dict[str, Any]:
        """A plain pod (``Scenario.pod``'s options; no extended GPUs) with a claim of ``devices``."""
        return with_claim(self.sc.pod(name, gpus=kwargs.pop("gpus", 0), **kwargs), self.template(devices))

    def pinned(self, name: str, node: str, *, devices: int, role: str = "holder") -> dict[str, Any]:
        """A plain pod for one node that goes through kube-scheduler (a ``nodeSelector``, not
        ``spec.nodeName``: a pod bound directly would never get its claim allocated)."""
        return self.pod(name, devices=devices, node_selector={HOSTNAME_LABEL: node}, role=role)

    def gang(self, name: str, size: int, *, devices: int, gpus: int = 0, create: bool = True,
             **kwargs: Any) -> list[dict[str, Any]]:
        """``Scenario.gang`` members (annotations, label, schedulerName) each with a claim of
        ``devices`` devices; ``kwargs``: min_count, required, preferred, first."""
        template = self.template(devices)
        manifests = [with_claim(m, template)
                     for m in self.sc.gang(name, size, gpus=gpus, create=False, **kwargs)]
        if create:
            self.sc.create(manifests)
        return manifests

    # -- reads
    def claims(self) -> list[dict[str, Any]]:
        return list_claims(self.kube, self.ns)

    def claims_of(self, pods: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """pod -> the claims made for it from a template (by owner reference)."""
        out: dict[str, list[dict[str, Any]]] = {p: [] for p in pods}
        for claim in self.claims():
            owner = owner_pod(claim)
            if owner in out:
                out[owner].append(claim)
        return out

    def wait_claims(self, pods: Sequence[str], timeout: float = 30) -> dict[str, list[dict[str, Any]]]:
        """Wait until kube-controller-manager made a claim for every pod."""
        def made() -> dict[str, list[dict[str, Any]]] | None:
            claims = self.claims_of(pods)
            return claims if all(claims.values()) else None

        return dict(self.sc.wait_for(f"claims made for {len(pods)} pods", made, timeout=timeout))

    def wait_allocated(self, pods: Sequence[str], timeout: float = 30) -> dict[str, list[dict[str, Any]]]:
        def allocated() -> dict[str, list[dict[str, Any]]] | None:
            claims = self.claims_of(pods)
            ok = all(claims[p] and all(is_allocated(c) for c in claims[p]) for p in pods)
            return claims if ok else None

        return dict(self.sc.wait_for(f"claims of {len(pods)} pods allocated", allocated, timeout=timeout))

    def check_allocations(self, placement: Mapping[str, str], devices: int) -> dict[str, list[str]]:
        """Each pod's claim is allocated ``devices`` devices of the test's driver on the pod's node, and
        no device of the namespace is allocated twice. Returns pod -> devices (``pool/device``)."""
        problems: list[str] = []
        out: dict[str, list[str]] = {}
        claims = self.claims_of(placement)
        for pod, node in sorted(placement.items()):
            own = claims.get(pod) or []
            if len(own) != 1:
                problems.append(f"{pod}: {len(own)} claims, expected 1")
                continue
            got = allocated_devices(own[0])
            out[pod] = [f"{pool}/{device}" for _, pool, device in got]
            if len(got) != devices:
                problems.append(f"{pod}: {len(got)} devices allocated, expected {devices}: {out[pod]}")
            if any(driver != self.driver or pool != node for driver, pool, _ in got):
                problems.append(f"{pod} on {node}: devices of another driver or node: {got}")
        every = Counter((pool, device) for claim in self.claims()
                        for _, pool, device in allocated_devices(claim))
        twice = sorted(f"{pool}/{device}" for (pool, device), n in every.items() if n > 1)
        if twice:
            problems.append(f"devices allocated to more than one claim: {twice}")
        if problems:
            self.sc.fail("DRA allocations read back from the apiserver are wrong:\n  "
                         + "\n  ".join(problems))
        return out

    # -- teardown
    def cleanup(self, timeout: float = 60) -> list[str]:
        """Delete the namespace's pods (their claims are then deallocated), then the slices and the
        class. Every step is tried; returns what went wrong."""
        problems: list[str] = []
        try:
            for gang in self.sc.watcher.gang_counts():
                self.sc.watcher.retire(gang)
            pods = [p["metadata"]["name"] for p in self.kube.pods(self.ns)]
            for pod in pods:
                self.kube.delete_pod(self.ns, pod)
            deadline = time.monotonic() + timeout
            while self.kube.pods(self.ns) and time.monotonic() < deadline:
                time.sleep(0.3)
        except Exception as exc:  # the namespace cleanup after this one deletes pods again
            problems.append(f"deleting pods: {type(exc).__name__}: {exc}"[:300])
        for node, name in list(self.slices.items()):
            try:
                _ignore(404, self.kube.custom.delete_cluster_custom_object, DRA_GROUP, DRA_VERSION,
                        "resourceslices", name)
                del self.slices[node]
            except Exception as exc:
                problems.append(f"deleting ResourceSlice {name}: {type(exc).__name__}: {exc}"[:300])
        try:  # anything of this test's the loop above did not know about
            _ignore(404, self.kube.custom.delete_collection_cluster_custom_object, DRA_GROUP, DRA_VERSION,
                    "resourceslices", label_selector=f"{DRA_NAMESPACE_LABEL}={self.ns}")
            if self.class_created:
                _ignore(404, self.kube.custom.delete_cluster_custom_object, DRA_GROUP, DRA_VERSION,
                        "deviceclasses", self.device_class)
                self.class_created = False
        except Exception as exc:
            problems.append(f"deleting DRA objects of {self.ns}: {type(exc).__name__}: {exc}"[:300])
        return problems


# ------------------------------------------------------------------------------ the claim monitor
@dataclass
class ClaimMonitor:
    """Polls the namespace's ResourceClaims and pods every ``interval`` seconds and measures, per
    claim, each stretch during which it is allocated while a pod it belongs to exists, is not being
    deleted and is not bound. A stretch is timed from the first poll that saw it to the first that
    did not (or to the last poll, while it lasts): precise to about one ``interval`` plus a list."""

    kube: Kube
    namespace: str
    interval: float = 0.2
    polls: int = 0
    errors: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # names of every claim seen
    ever_allocated: set[str] = field(default_factory=set)
    stretches: dict[str, list[float]] = field(default_factory=dict)  # claim -> finished stretches (s)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._open: dict[str, tuple[str, float]] = {}  # claim uid -> (name, start)
        self._last_poll = 0.0
        self._thread = threading.Thread(target=self._loop, name=f"claims-{self.namespace}", daemon=True)

    def start(self) -> ClaimMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # keep polling; the errors are part of the report
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            self._stop.wait(self.interval)

    def poll(self) -> None:
        claims = list_claims(self.kube, self.namespace)
        pods = {p["metadata"]["name"]: p for p in self.kube.pods(self.namespace)}
        now = time.monotonic()
        with self._lock:
            current = set()
            for claim in claims:
                meta = claim["metadata"]
                uid, name = meta["uid"], meta["name"]
                self.seen.add(name)
                if is_allocated(claim):
                    self.ever_allocated.add(name)
                if not self._held(claim, pods):
                    continue
                current.add(uid)
                self._open.setdefault(uid, (name, now))
            for uid in [u for u in self._open if u not in current]:
                name, start = self._open.pop(uid)
                self.stretches.setdefault(name, []).append(now - start)
            self._last_poll = now
            self.polls += 1

    @staticmethod
    def _held(claim: Mapping[str, Any], pods: Mapping[str, Mapping[str, Any]]) -> bool:
        if not is_allocated(claim):
            return False
        owners = [pods[p] for p in claim_pods(claim) if p in pods]
        return any(not node_of(p) and not is_deleting(p) for p in owners)

    def held_seconds(self) -> dict[str, float]:
        """claim -> its longest stretch so far (an open stretch counted up to the last poll)."""
        with self._lock:
            out = {name: max(times) for name, times in self.stretches.items() if times}
            for name, start in self._open.values():
                out[name] = max(out.get(name, 0.0), self._last_poll - start)
        return out

    def total_seconds(self) -> float:
        with self._lock:
            done = sum(sum(times) for times in self.stretches.values())
            return done + sum(self._last_poll - start for _, start in self._open.values())

    def longest(self) -> tuple[str | None, float]:
        held = self.held_seconds()
        if not held:
            return None, 0.0
        name = max(held, key=lambda n: held[n])
        return name, held[name]

    def report(self) -> dict[str, Any]:
        name, longest = self.longest()
        return {"longest_seconds": round(longest, 2), "longest_claim": name,
                "total_seconds": round(self.total_seconds(), 2), "claims_seen": len(self.seen),
                "claims_ever_allocated": len(self.ever_allocated), "polls": self.polls,
                "errors": self.errors[-3:]}
