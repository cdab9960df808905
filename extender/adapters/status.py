"""``quorum-extender status``: why each gang waits, read from a running Quorum's /debug/gangs.

An operator asking "why is my job pending?" wants one line per gang: its phase, where it stands in
the queue, what it asks for, the claim it holds or the claim it is kept off, and the reason Quorum
gives kube-scheduler. The document is the one /debug/gangs serves; this module only formats it, so
what it prints is what the filter answers say.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from . import status_cluster

COLUMNS = ("GANG", "PHASE", "QUEUE", "PRIO", "WAIT", "MEMBERS", "DOMAIN", "CLAIM", "REASON")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quorum-extender status",
                                     description="why each gang waits, from a running Quorum")
    parser.add_argument("--url", default="http://127.0.0.1:8888", help="Quorum's address")
    parser.add_argument("-n", "--namespace", help="only gangs of this namespace")
    parser.add_argument("--waiting", action="store_true", help="only gangs in the queue")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.add_argument("--json", action="store_const", const="json", dest="output", help="same as -o json")
    parser.add_argument("-w", "--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                        help="print again every SECONDS (default 2) until interrupted")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for an answer")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""),
                        help="when Quorum does not answer, read PodGroups and Events with these credentials "
                             "(default $KUBECONFIG, else in-cluster)")
    parser.add_argument("--no-fallback", action="store_true", help="fail when Quorum does not answer")
    return parser.parse_args(argv)


def fetch(url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url.rstrip('/')}/debug/gangs", timeout=timeout) as resp:
        doc = json.loads(resp.read())
    if not isinstance(doc, dict) or not isinstance(doc.get("gangs"), list):
        raise ValueError("the answer is not a /debug/gangs document")
    return doc


def selected(doc: Mapping[str, Any], namespace: str | None, waiting: bool) -> list[dict[str, Any]]:
    gangs = [g for g in doc.get("gangs") or [] if isinstance(g, dict)]
    if namespace:
        gangs = [g for g in gangs if str(g.get("gang", "")).split("/", 1)[0] == namespace]
    if waiting:
        gangs = [g for g in gangs if g.get("queuePosition") is not None]
    # The queue first, in its order; then everything else by name.
    return sorted(gangs, key=lambda g: (g.get("queuePosition") is None, g.get("queuePosition") or 0,
                                        str(g.get("gang"))))


def claim_cell(gang: Mapping[str, Any]) -> str:
    claim = gang.get("claim")
    if isinstance(claim, Mapping):
        return f"holds {claim.get('level')} {claim.get('domain')}"
    if gang.get("blockedBy"):
        return f"kept off ({gang['blockedBy']})"
    return "-"


def row(gang: Mapping[str, Any]) -> tuple[str, ...]:
    position = gang.get("queuePosition")
    waiting = gang.get("waitingSeconds")
    bound = len(gang.get("bound") or [])
    return (str(gang.get("gang")), str(gang.get("phase")), "-" if position is None else str(position),
            str(gang.get("priority", 0)), "-" if waiting is None else f"{waiting:.0f}s",
            f"{bound}/{gang.get('members', 0)} min {gang.get('minCount')}", str(gang.get("domain") or "-"),
            claim_cell(gang),
            str(gang.get("reason") or ""))


def part_rows(gang: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """A composite's PodGroups, one line each under the composite."""
    out: list[tuple[str, ...]] = []
    for part in gang.get("parts") or ():
        if isinstance(part, Mapping):
            count = f"{part.get('bound', 0)}/{part.get('members', 0)} min {part.get('minCount')}"
            within = f"one {part['requiredTopology']}" if part.get("requiredTopology") else "-"
            out.append((f"  - {part.get('podGroup')}", "", "", "", "", count, within, "", ""))
    return out


def render(doc: Mapping[str, Any], gangs: Sequence[Mapping[str, Any]], out: TextIO) -> None:
    rows = [COLUMNS, *(r for g in gangs for r in (row(g), *part_rows(g)))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    for r in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[-1] + "\n")
    claim = doc.get("claim")
    if isinstance(claim, Mapping):
        out.write(f"\nclaim: {claim.get('reason')} ({len(claim.get('nodes') or [])} nodes)\n")
    else:
        out.write("\nclaim: none\n")


def show(args: argparse.Namespace, out: TextIO) -> int:
    try:
        doc = fetch(args.url, args.timeout)
    except (OSError, ValueError) as exc:  # URLError is an OSError
        problem = f"cannot read {args.url}/debug/gangs: {exc}"
        if args.no_fallback:
            print(f"quorum-extender status: {problem}", file=sys.stderr)
            return 1
        try:
            doc = status_cluster.document(args.kubeconfig, args.namespace, args.timeout)
        except Exception as fallback:  # credentials, network, API: say both and stop
            print(f"quorum-extender status: {problem}; and from the apiserver: {fallback}", file=sys.stderr)
            return 1
        out.write(f"# {problem}; from PodGroups and Quorum's Events instead (no queue or claims)\n")
    gangs = selected(doc, args.namespace, args.waiting)
    if args.output == "json":
        out.write(json.dumps({"gangs": gangs, "claim": doc.get("claim")}, indent=2) + "\n")
    else:
        render(doc, gangs, out)
    out.flush()
    return 0


def main(argv: Sequence[str], out: TextIO = sys.stdout, rounds: int | None = None) -> int:
    """``rounds`` bounds ``--watch`` (tests); without it a watch runs until interrupted."""
    args = parse_args(argv)
    if args.watch is None:
        return show(args, out)
    done = 0
    try:
        while rounds is None or done < rounds:
            out.write(f"--- {time.strftime('%H:%M:%S')}\n")
            show(args, out)
            done += 1
            if rounds is None or done < rounds:
                time.sleep(max(0.1, args.watch))
    except KeyboardInterrupt:
        pass
    return 0
