"""The floor of a gang extender written in Python: what the protocol and the watches cost before any
decision is made (configuration Qz of bench/cluster_bench.py).

It stands where Quorum stands, on Quorum's stack (aiohttp, orjson, the event loop Quorum starts,
Quorum's own watch and binding client), and does the least a gang extender must:

- follows pods and nodes through watches, decoding every event and keeping nothing of it, and
  the PodGroups, keeping each one's minCount;
- filter: passes the first candidate only (what Quorum answers a member it has placed);
- prioritize: prefers none;
- bind: holds each call until its PodGroup's minCount of calls are held, then sends the gang's
  bindings together and answers them; a call held for ``--hold-seconds`` is answered with an error.

No capacity is counted, no placement made, nothing written but bindings: on a cluster with room for
every gang this schedules W1's gangs whole, and its CPU per bound pod is what no Python extender
on this protocol can go below. Its bind skew is what the apiserver adds when a gang's bindings are
sent at the same instant.

Usage: python bench/holdextender.py --kubeconfig FILE [--listen 127.0.0.1:17263]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extender.adapters import wire
from extender.adapters.event_loop import chosen_loop, new_event_loop
from extender.adapters.kube import ApiError, KubeClient, load_credentials

PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/podgroups"
FOLLOWED = ("/api/v1/pods", "/api/v1/nodes", PODGROUPS)
FOLLOWING = web.AppKey("following", list)
Bind = Callable[[str, str, str, str], Any]  # (namespace, name, uid, node) -> awaitable


@dataclass
class Held:
    """One bind call waiting for its gang."""

    namespace: str
    name: str
    uid: str
    node: str
    answer: asyncio.Future[str] = field(repr=False)


class Holder:
    """Bind calls held per gang until the gang's minCount are held; then bound together."""

    def __init__(self, bind: Bind, hold_seconds: float) -> None:
        self.bind = bind
        self.hold_seconds = hold_seconds
        self.min_count: dict[tuple[str, str], int] = {}  # (namespace, PodGroup) -> minCount
        self.gang_of: dict[str, tuple[str, str]] = {}  # pod UID -> (namespace, PodGroup), seen in filter
        self.held: dict[tuple[str, str], list[Held]] = defaultdict(list)
        self.events = 0

    def saw_pod(self, pod: dict[str, Any]) -> None:
        """Remember a candidate's gang from the pod filter is asked about."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        group = (spec.get("schedulingGroup") or {}).get("podGroupName")
        if group and meta.get("uid"):
            self.gang_of[meta["uid"]] = (meta.get("namespace", ""), group)

    def on_event(self, path: str, event: dict[str, Any]) -> None:
        """Count every event; keep nothing but the PodGroups' minCount."""
        self.events += 1
        if path != PODGROUPS or event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
            return
        meta = event["object"].get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event["type"] == "DELETED":
            self.min_count.pop(key, None)
            return
        gang = ((event["object"].get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
        self.min_count[key] = int(gang.get("minCount") or 1)

    async def hold(self, namespace: str, name: str, uid: str, node: str) -> str:
        """The bind call's answer: "" once bound, else the error."""
        key = self.gang_of.pop(uid, None)
        if key is None:  # no gang: bound at once
            return await self._bind_one(namespace, name, uid, node)
        waiting = self.held[key]
        waiting.append(Held(namespace, name, uid, node, asyncio.get_running_loop().create_future()))
        mine = waiting[-1]
        if len(waiting) >= self.min_count.get(key, 1):
            del self.held[key]
            results = await asyncio.gather(*(self._bind_one(h.namespace, h.name, h.uid, h.node)
                                             for h in waiting))
            for held, result in zip(waiting, results, strict=True):
                if not held.answer.done():
                    held.answer.set_result(result)
        try:
            return await asyncio.wait_for(asyncio.shield(mine.answer), self.hold_seconds)
        except TimeoutError:
            if mine in self.held.get(key, []):
                self.held[key].remove(mine)
            return f"gang {key[1]} incomplete after {self.hold_seconds:.0f} s"

    async def _bind_one(self, namespace: str, name: str, uid: str, node: str) -> str:
        try:
            await self.bind(namespace, name, uid, node)
        except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as exc:
            return str(exc)
        return ""


def field_of(doc: dict[str, Any], key: str) -> Any:
    """kube-scheduler sends Go's field names ("NodeNames"); Go reads any case, and so does this."""
    if key in doc:
        return doc[key]
    return next((value for name, value in doc.items() if name.lower() == key.lower()), None)


def filter_answer(args: dict[str, Any]) -> dict[str, Any]:
    names = field_of(args, "NodeNames") or []
    return {"nodenames": names[:1], "failedNodes": {}, "failedAndUnresolvableNodes": {}, "error": ""}


def build(holder: Holder) -> web.Application:
    async def filter_(request: web.Request) -> web.Response:
        args = orjson.loads(await request.read())
        holder.saw_pod(field_of(args, "Pod") or {})
        return web.Response(body=orjson.dumps(filter_answer(args)), content_type="application/json")

    async def prioritize(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"[]", content_type="application/json")

    async def bind(request: web.Request) -> web.Response:
        args = wire.parse_binding_args(await request.read())
        error = await holder.hold(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        return web.Response(body=wire.binding_result(error), content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes([web.post("/filter", filter_), web.post("/prioritize", prioritize),
                    web.post("/bind", bind), web.get("/healthz", healthz)])
    return app


async def follow(client: KubeClient, holder: Holder, path: str) -> None:
    """List, then watch for ever (relisting when the watch ends); every event goes to the holder."""
    while True:
        items, version = await client.list_objects(path, lambda obj: None)
        for obj in items:
            holder.on_event(path, {"type": "ADDED", "object": obj})
        try:
            async for event in client.watch(path, version):
                holder.on_event(path, event)
        except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as exc:
            print(f"watch {path}: {exc}; relisting", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--listen", default="127.0.0.1:17263")
    p.add_argument("--hold-seconds", type=float, default=60.0)
    args = p.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    loop = new_event_loop(chosen_loop(os.environ))
    asyncio.set_event_loop(loop)
    client = KubeClient(load_credentials(args.kubeconfig))
    holder = Holder(client.bind_pod, args.hold_seconds)
    app = build(holder)

    async def start_following(app: web.Application) -> None:
        app[FOLLOWING] = [asyncio.ensure_future(follow(client, holder, path)) for path in FOLLOWED]

    app.on_startup.append(start_following)
    web.run_app(app, host=host, port=int(port), access_log=None, print=None, loop=loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
