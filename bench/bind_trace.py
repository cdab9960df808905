"""Where a gang's bind skew comes from: Quorum's sending, or the apiserver's answering.

The benchmark's skew is the spread of the apiserver's completion times of a gang's bindings, and
the audit log also gives when it received each one. What it cannot give is when Quorum sent them.
Run as Quorum's launcher, this traces every binding Quorum makes (aiohttp's request tracing on the
bindings' sessions): when the request was made, whether its connection was opened for it, when
its headers were written. ``report`` sets that beside the audit log, gang by gang.

    QUORUM_LAUNCH="bench/bind_trace.py --" bash hack/cluster-up.sh ...   # Quorum traced
    python bench/cluster_bench.py --workloads W1 --reps 1 --configs Q
    python bench/bind_trace.py report --namespace bench-w1-q-0

The trace is one JSON line per binding, appended to ``--out`` (default
``.cache/cluster/bind-trace.jsonl``). A gang is its pods' name up to the last ``-``, as the
cluster benchmark names them (``g12-3`` is member 3 of gang ``g12``).
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import SimpleNamespace
from typing import IO, Any

import aiohttp
import orjson
from cb_report import percentile  # bench/ is on sys.path when run as a script

DEFAULT_OUT = os.path.join(".cache", "cluster", "bind-trace.jsonl")
Hook = Callable[[aiohttp.ClientSession, SimpleNamespace, Any], Coroutine[Any, Any, None]]


def binding_of(url: str) -> tuple[str, str] | None:
    """(namespace, pod) of a pods/binding URL, else None."""
    parts = url.split("?", 1)[0].rstrip("/").split("/")
    if len(parts) >= 6 and parts[-1] == "binding" and parts[-3] == "pods" and parts[-5] == "namespaces":
        return parts[-4], parts[-2]
    return None


def tracing(sink: IO[str], clock: Callable[[], float] = time.time) -> aiohttp.TraceConfig:
    """A trace config that writes one line per binding request to ``sink`` when it ends."""
    config = aiohttp.TraceConfig()

    def stamp(key: str) -> Hook:
        async def hook(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: Any) -> None:
            if getattr(ctx, "row", None) is not None:
                ctx.row[key] = clock()
        return hook

    async def start(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                    params: aiohttp.TraceRequestStartParams) -> None:
        pod = binding_of(str(params.url))
        ctx.row = None if pod is None else {"namespace": pod[0], "pod": pod[1], "start": clock()}

    async def end(_session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any) -> None:
        row = getattr(ctx, "row", None)
        if row is None:
            return
        row["end"] = clock()
        response = getattr(params, "response", None)
        row["status"] = response.status if response is not None else repr(getattr(params, "exception", None))
        sink.write(orjson.dumps(row).decode() + "\n")

    config.on_request_start.append(start)
    config.on_connection_create_start.append(stamp("opening"))
    config.on_connection_create_end.append(stamp("opened"))
    config.on_request_headers_sent.append(stamp("sent"))
    config.on_request_end.append(end)
    config.on_request_exception.append(end)
    return config


def launch(out: str, command: list[str]) -> None:
    """Run ``-m MODULE ARGS`` with every session Quorum's client makes traced."""
    from extender.adapters import kube

    sink = open(out, "a", buffering=1, encoding="utf-8")  # open for the process's life
    config = tracing(sink)
    config.freeze()
    plain = kube.KubeClient._new_session

    def traced(self: kube.KubeClient, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        session = plain(self, connector)
        session._trace_configs.append(config)  # the bench's hook; aiohttp reads the list per request
        return session

    kube.KubeClient._new_session = traced  # type: ignore[method-assign]
    sys.argv = [command[1], *command[2:]]
    runpy.run_module(command[1], run_name="__main__", alter_sys=True)


@dataclass(frozen=True)
class GangRow:
    gang: str
    bindings: int
    sent_ms: float      # first to last binding's headers written, by Quorum
    received_ms: float  # first to last received, by the apiserver
    completed_ms: float  # first to last completed: the benchmark's skew
    opened: int         # connections opened for the gang's bindings
    in_apiserver_ms: tuple[float, float]  # each binding's received -> completed, least and most


def _spread(values: list[float]) -> float:
    return 1000 * (max(values) - min(values)) if values else 0.0


def gang_rows(trace: list[dict[str, Any]], completed: dict[str, float],
              received: dict[str, float]) -> list[GangRow]:
    """Per gang of the traced bindings that the audit log has, worst completed spread first."""
    gangs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    latest = {row["pod"]: row for row in trace}  # a pod bound again in a later run: its last binding
    for row in latest.values():
        if row["pod"] in completed and row["pod"] in received:
            gangs[row["pod"].rsplit("-", 1)[0]].append(row)
    rows = []
    for gang, members in gangs.items():
        inside = [1000 * (completed[m["pod"]] - received[m["pod"]]) for m in members]
        rows.append(GangRow(gang, len(members), _spread([m["sent"] for m in members if "sent" in m]),
                            _spread([received[m["pod"]] for m in members]),
                            _spread([completed[m["pod"]] for m in members]),
                            sum(1 for m in members if "opened" in m), (min(inside), max(inside))))
    return sorted(rows, key=lambda r: -r.completed_ms)


def _quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{percentile(values, q):.0f}" for q in (50, 90, 99)) + f" / {max(values):.0f}"


def report(rows: list[GangRow], inside: list[float], worst: int = 10) -> str:
    """The spreads' quantiles, the apiserver's time per binding, and the worst gangs."""
    lines = ["| per gang, ms | p50 / p90 / p99 / max |", "|---|--:|",
             f"| Quorum sent its bindings over | {_quantiles([r.sent_ms for r in rows])} |",
             f"| the apiserver received them over | {_quantiles([r.received_ms for r in rows])} |",
             f"| and completed them over (the skew) | {_quantiles([r.completed_ms for r in rows])} |",
             f"| one binding inside the apiserver | {_quantiles(inside)} |", "",
             f"{len(rows)} gangs, {sum(r.bindings for r in rows)} bindings, "
             f"{sum(r.opened for r in rows)} on connections opened for them", "",
             "| gang | sent | received | completed | inside the apiserver, least / most | opened |",
             "|---|--:|--:|--:|--:|--:|"]
    lines += [f"| {r.gang} | {r.sent_ms:.1f} | {r.received_ms:.0f} | {r.completed_ms:.0f} | "
              f"{r.in_apiserver_ms[0]:.0f} / {r.in_apiserver_ms[1]:.0f} | {r.opened} |" for r in rows[:worst]]
    if rows:
        lines.append(f"\nmedian gang: sent {statistics.median(r.sent_ms for r in rows):.1f} ms, received "
                     f"{statistics.median(r.received_ms for r in rows):.0f} ms, completed "
                     f"{statistics.median(r.completed_ms for r in rows):.0f} ms")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["report"]:
        parser = argparse.ArgumentParser(description="the trace beside the audit log, gang by gang")
        parser.add_argument("report")
        parser.add_argument("--namespace", required=True, help="the run's namespace (bench-w1-q-0)")
        parser.add_argument("--trace", default=DEFAULT_OUT)
        args = parser.parse_args()
        import cb_procs  # the benchmark's audit reader; bench/ is on sys.path when run as a script

        _writes, completed, received = cb_procs.audit_since(0, args.namespace)
        with open(args.trace, encoding="utf-8") as fh:
            trace = [row for line in fh if (row := orjson.loads(line))["namespace"] == args.namespace]
        inside = [1000 * (completed[p] - received[p]) for p in completed if p in received]
        print(report(gang_rows(trace, completed, received), inside))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"where the trace is appended ({DEFAULT_OUT})")
    from cpu_sampler import add_command, module_command  # the launchers' shared command line

    add_command(parser)
    args = parser.parse_args()
    launch(os.path.abspath(args.out), module_command(parser, args.command))


if __name__ == "__main__":
    main()
