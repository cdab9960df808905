#!/usr/bin/env python3
"""Keep the apiserver's ``workload-low`` priority level busy, as a cluster's controllers do.

API Priority and Fairness puts every ServiceAccount's requests in ``workload-low`` (FlowSchema
``service-accounts``) unless a FlowSchema says otherwise, as the installation's does for Quorum
(manifests/flowschema.yaml). Whether that matters shows only where the level's seats are all
taken. This script takes them: it creates ``--accounts`` ServiceAccounts allowed to read nodes and
pods, and each lists ``--path`` with ``--workers`` requests in flight, until ``--seconds`` pass or
it is stopped (SIGINT/SIGTERM). On exit it prints one JSON line: requests, rejections (HTTP 429),
errors and latency percentiles, and it deletes what it created.

    python bench/apf_load.py --accounts 24 --workers 2 --seconds 900 &
    python bench/cluster_bench.py --workloads W1 --configs Q --reps 1 ...
    kill -INT %1

Every account is a flow of its own (the schema's distinguisher is the user), so the fair queuing
shares the level between them and Quorum: the more accounts, the smaller Quorum's share there.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cb_kube import APISERVER, CLUSTER_DIR, Apiserver

NAMESPACE = "apf-load"
ROLE = "apf-load-reader"


def setup_objects(accounts: int) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for everything the load needs, in creation order."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    objects: list[tuple[str, dict[str, Any]]] = [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        (f"{rbac}/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]}]}),
        (f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                          "name": f"system:serviceaccounts:{NAMESPACE}"}]}),
    ]
    objects += [(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                 {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"load-{i}"}})
                for i in range(accounts)]
    return objects


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


class Tally:
    """What the load's requests met: served, turned away by APF (429), failed otherwise."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.rejected = 0
        self.errors = 0

    def summary(self, seconds: float) -> dict[str, Any]:
        lat = self.latencies
        return {"requests": len(lat), "per_second": round(len(lat) / seconds, 1) if seconds else 0.0,
                "rejected_429": self.rejected, "errors": self.errors,
                "latency_ms": {"p50": round(percentile(lat, 0.5) * 1e3, 1),
                               "p99": round(percentile(lat, 0.99) * 1e3, 1)}}


async def namespace_gone(admin: Apiserver, seconds: float = 300) -> None:
    """Wait out a namespace still terminating from the run before (nothing can be created in it)."""
    path, deadline = f"/api/v1/namespaces/{NAMESPACE}", time.monotonic() + seconds
    while (await admin.request("GET", path, ok=(200, 404)))["kind"] == "Namespace":
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {NAMESPACE} still there after {seconds:g}s")
        await asyncio.sleep(1)


async def create_all(admin: Apiserver, accounts: int) -> list[str]:
    """The namespace, the role and its binding, the accounts; a token for each account."""
    await namespace_gone(admin)
    for path, obj in setup_objects(accounts):
        await admin.request("POST", path, obj, ok=(200, 201, 202, 409))
    tokens = []
    for i in range(accounts):
        answer = await admin.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/load-{i}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200}})
        tokens.append(answer["status"]["token"])
    return tokens


async def delete_all(admin: Apiserver) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    await admin.delete(f"{rbac}/clusterrolebindings/{ROLE}")
    await admin.delete(f"{rbac}/clusterroles/{ROLE}")
    await admin.delete(f"/api/v1/namespaces/{NAMESPACE}")


async def worker(session: aiohttp.ClientSession, url: str, token: str, tally: Tally,
                 stop: asyncio.Event) -> None:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    while not stop.is_set():
        started = time.monotonic()
        try:
            async with session.get(url, headers=headers) as resp:
                await resp.read()
                if resp.status == 200:
                    tally.latencies.append(time.monotonic() - started)
                elif resp.status == 429:
                    tally.rejected += 1
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                else:
                    tally.errors += 1
                    await asyncio.sleep(1)
        except aiohttp.ClientError:
            tally.errors += 1
            await asyncio.sleep(1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Apiserver(args.apiserver, args.cluster_dir) as admin:
        tokens = await create_all(admin, args.accounts)
        tally = Tally()
        context = ssl.create_default_context(cafile=str(args.cluster_dir / "pki" / "ca.crt"))
        connector = aiohttp.TCPConnector(ssl=context, limit=0)
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            tasks = [asyncio.create_task(worker(session, args.apiserver + args.path, token, tally, stop))
                     for token in tokens for _ in range(args.workers)]
            print(f"apf_load: {len(tasks)} requests in flight from {args.accounts} accounts", file=sys.stderr)
            try:
                await asyncio.wait_for(stop.wait(), args.seconds)
            except TimeoutError:
                stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.monotonic() - started
        await delete_all(admin)
    return {"accounts": args.accounts, "workers": args.workers, "path": args.path,
            "seconds": round(elapsed, 1), **tally.summary(elapsed)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accounts", type=int, default=24, help="ServiceAccounts, each a flow of its own")
    p.add_argument("--workers", type=int, default=2, help="requests in flight per account")
    p.add_argument("--path", default="/api/v1/nodes?limit=500", help="what each request lists")
    p.add_argument("--seconds", type=float, default=3600, help="stop after this long")
    p.add_argument("--apiserver", default=APISERVER)
    p.add_argument("--cluster-dir", type=Path, default=CLUSTER_DIR)
    args = p.parse_args()
    print(orjson.dumps(asyncio.run(run(args))).decode())


if __name__ == "__main__":
    main()
