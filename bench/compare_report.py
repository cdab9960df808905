"""The figures and printed tables of bench/compare.py: flattening each run's microbench JSON,
pairing the rounds, and the Markdown report."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compare_revisions import SIDES, Failed, Revision, bench_command, missing_flags

DASH = "\u2013"  # en dash, for ranges in the printed tables

# (metric label, path inside one microbench series). Missing paths (older revisions) print as "-".
HTTP_METRICS = [
    ("wall p50", ("http", "p50")),
    ("wall p99", ("http", "p99")),
    ("handler p50", ("handler", "p50")),
    ("handler p99", ("handler", "p99")),
    ("server CPU ms/req", ("server_rusage", "cpu_ms")),
]
INPROCESS_METRICS = [
    ("total p50", ("total", "p50")),
    ("total p99", ("total", "p99")),
    ("decode p50", ("parse", "p50")),
    ("coordinator p50", ("coordinator", "p50")),
    ("coordinator p99", ("coordinator", "p99")),
    ("encode p50", ("encode", "p50")),
    ("CPU ms/req", ("rusage", "cpu_ms")),
]

# The columns of the at-a-glance table: (section, metric).
GLANCE = [("http", "wall p50"), ("http", "handler p50"), ("http", "server CPU ms/req"),
          ("inprocess", "total p50")]


# ----------------------------------------------------------------------------------------- figures


def dig(tree: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return float(tree) if isinstance(tree, int | float) else None


def flatten(report: dict[str, Any], nodes: int) -> dict[tuple[str, str, str, str], float]:
    """Every compared figure of one run at ``nodes``, keyed (section, case, verb, metric)."""
    runs = [run for run in report.get("runs", []) if run.get("nodes") == nodes]
    if not runs:
        raise Failed(f"the benchmark JSON has no run at {nodes} nodes")
    run = runs[0]
    figures: dict[tuple[str, str, str, str], float] = {}
    for section, metrics in (("http", HTTP_METRICS), ("inprocess", INPROCESS_METRICS)):
        for series in run.get(section, {}).get("series", []):
            for label, path in metrics:
                value = dig(series, path)
                if value is not None:
                    figures[(section, series["case"], series["verb"], label)] = value
        for i, value in enumerate(run.get(section, {}).get("placements_ms", [])):
            figures[("placement", section, f"gang {i + 1}", "ms")] = float(value)
    return figures


@dataclass
class Row:
    """One compared figure: medians over rounds, their ratio, and the per-round ratios."""

    before: float | None
    after: float | None
    ratios: list[float]

    @property
    def ratio(self) -> float | None:
        if self.before is None or self.after is None or self.before <= 0:
            return None
        return self.after / self.before


def compare(before: list[dict[tuple[str, str, str, str], float]],
            after: list[dict[tuple[str, str, str, str], float]]) -> dict[tuple[str, str, str, str], Row]:
    """Rounds are paired in order: round i's ratio is after_i / before_i."""
    keys = list(dict.fromkeys([k for run in before + after for k in run]))
    rows = {}
    for key in keys:
        b = [run[key] for run in before if key in run]
        a = [run[key] for run in after if key in run]
        ratios = [ra[key] / rb[key] for rb, ra in zip(before, after, strict=True)
                  if key in rb and key in ra and rb[key] > 0]
        rows[key] = Row(statistics.median(b) if b else None, statistics.median(a) if a else None, ratios)
    return rows


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def ratio_cells(row: Row) -> str:
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
    if not row.ratios:
        return f"{ratio} | - | -"
    spread = f"{min(row.ratios):.2f}{DASH}{max(row.ratios):.2f}"
    slower = sum(1 for r in row.ratios if r > 1)
    return f"{ratio} | {spread} | {slower}/{len(row.ratios)}"


def glance(row: Row | None) -> str:
    if row is None or row.ratio is None:
        return "-"
    if not row.ratios:
        return f"{row.ratio:.2f}"
    return f"{row.ratio:.2f} ({min(row.ratios):.2f}{DASH}{max(row.ratios):.2f})"


def print_glance(rows: dict[tuple[str, str, str, str], Row]) -> None:
    """One line per case and verb: the ratios that decide whether anything moved."""
    pairs = dict.fromkeys((k[1], k[2]) for k in rows if k[0] in ("http", "inprocess"))
    print("\n### At a glance: after/before (min" + DASH + "max of the per-round ratios)\n")
    print("| case | verb | HTTP wall p50 | handler p50 | server CPU/req | in-process total p50 |")
    print("|:-:|:--|:-:|:-:|:-:|:-:|")
    for case, verb in pairs:
        cells = " | ".join(glance(rows.get((section, case, verb, metric))) for section, metric in GLANCE)
        print(f"| {case} | {verb} | {cells} |")


def print_table(rows: dict[tuple[str, str, str, str], Row], section: str, title: str) -> None:
    keys = [k for k in rows if k[0] == section]
    if not keys:
        return
    first, second = ("where", "gang") if section == "placement" else ("case", "verb")
    print(f"\n### {title}\n")
    print(f"| {first} | {second} | metric | before | after | after/before | per-round ratios "
          "| after slower |")
    print("|:-:|:--|:--|--:|--:|--:|:-:|:-:|")
    for key in keys:
        row = rows[key]
        print(f"| {key[1]} | {key[2]} | {key[3]} | {fmt(row.before)} | {fmt(row.after)} | "
              f"{ratio_cells(row)} |")


# ----------------------------------------------------------------------------------------- report


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def nproc() -> str:
    online = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else online
    return f"{usable}" if usable == online else f"{usable} usable of {online}"


def shown_command() -> str:
    """This script's command line, with the script path relative to the working directory."""
    script = Path(sys.argv[0])
    try:
        script = script.resolve().relative_to(Path.cwd())
    except ValueError:
        pass
    return "python " + shlex.join([str(script), *sys.argv[1:]])


def print_header(revisions: list[Revision], args: argparse.Namespace, orders: list[tuple[str, str]],
                 loads: tuple[float, float]) -> None:
    first = revisions[0]
    probe = first.probe
    print(f"## Interleaved comparison at {args.nodes} nodes\n")
    print(f"- Command: `{shown_command()}`")
    print(f"- Machine: {nproc()} CPUs (nproc), {cpu_model()}, {probe.get('python', '?')}, aiohttp "
          f"{probe.get('aiohttp', '?')}, orjson {probe.get('orjson', '?')}, {platform.system()} "
          f"{platform.release()}; 1-minute load average {loads[0]:.1f} at start, {loads[1]:.1f} at end")
    for revision in revisions:
        print(f"- {revision.side}: `{revision.short}` {revision.subject}")
    runs = " ".join(shlex.quote(part) for part in bench_command("python", first, args, Path("RUN.json")))
    print(f"- Each run: `{runs}`, the revision's own script, with its worktree as working directory "
          "and PYTHONPATH")
    for revision in revisions:
        lacking = missing_flags(revision, args)
        if lacking:
            print(f"- {revision.side}'s microbench lacks {', '.join(lacking)}; left out of its runs")
    order_text = "; ".join(f"{i + 1}: {a} → {b}" for i, (a, b) in enumerate(orders))
    print(f"- Rounds: {len(orders)} ({order_text})")
    seconds = ", ".join(f"{side} {statistics.median(r.seconds):.0f} s"
                        for side, r in zip(SIDES, revisions, strict=True) if r.seconds)
    print(f"- Median run time: {seconds}")
    print("\nTimes in ms. before / after: median over rounds. after/before: ratio of those medians. "
          f"per-round ratios: min{DASH}max of after_i / before_i over the rounds. after slower: rounds "
          "in which after took longer. CPU ms/req: process CPU time (user + system) per request.")


def report(revisions: list[Revision], args: argparse.Namespace, orders: list[tuple[str, str]],
           loads: tuple[float, float]) -> dict[str, Any]:
    before, after = ([flatten(run, args.nodes) for run in r.runs] for r in revisions)
    rows = compare(before, after)
    print_header(revisions, args, orders, loads)
    print_glance(rows)
    print_table(rows, "http", "Over HTTP (wall = client time per request; handler = inside the aiohttp "
                "handler; CPU = server process)")
    print_table(rows, "inprocess", "In process, no HTTP (total = decode + coordinator + encode)")
    print_table(rows, "placement", "Whole-gang placement (the filter call that places each gang), ms")
    return {"nodes": args.nodes, "command": shown_command(), "orders": orders,
            "revisions": {r.side: {"rev": r.rev, "commit": r.sha, "subject": r.subject} for r in revisions},
            "rows": [{"key": list(k), "before": v.before, "after": v.after, "ratio": v.ratio,
                      "round_ratios": v.ratios} for k, v in rows.items()]}
