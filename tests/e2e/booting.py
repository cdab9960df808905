"""The boot of the autoscaler's nodes, played by the tests.

The kwok provider creates every node of a scale-up at once, Ready within milliseconds. A cloud's
nodes join one by one, minutes apart. With ``AUTOSCALER_BOOTING=1`` (``hack/autoscaler-up.sh``) each
node the autoscaler makes carries a startup taint: kube-scheduler places nothing there, and the
autoscaler counts the node as still coming up, as it does a cloud instance whose kubelet has not
joined yet. The ``Booter`` removes the taint ``delay`` seconds after the node was created: at once
unless a test planned otherwise.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime
from typing import Any

from .cluster import Kube

BOOT_TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/booting"
POLL_SECONDS = 0.2


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def booting(node: dict[str, Any]) -> bool:
    return any(t.get("key") == BOOT_TAINT for t in (node.get("spec") or {}).get("taints") or ())


class Booter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube.fork()
        self.booted: dict[str, float] = {}  # node -> when its taint was removed (epoch seconds)
        self.tainted_seen: set[str] = set()  # nodes that were created booting
        self._delays: deque[float] = deque()
        self._delay_of: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="booter", daemon=True)
        self._thread.start()

    def plan(self, delays: list[float]) -> None:
        """The next nodes seen booting take these many seconds each, in the order they are seen."""
        with self._lock:
            self._delays = deque(delays)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                nodes = self.kube.nodes()
            except Exception:
                continue
            for node in nodes:
                if booting(node):
                    self._maybe_boot(node)

    def _maybe_boot(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if name not in self._delay_of:
                self._delay_of[name] = self._delays.popleft() if self._delays else 0.0
                self.tainted_seen.add(name)
            delay = self._delay_of[name]
        if time.time() < stamp(node["metadata"]["creationTimestamp"]) + delay:
            return
        taints = [t for t in node["spec"].get("taints") or () if t.get("key") != BOOT_TAINT]
        try:
            self.kube.core.patch_node(name, {"spec": {"taints": taints or None}}, _request_timeout=30)
        except Exception:
            return
        self.booted[name] = time.time()
