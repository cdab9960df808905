#!/usr/bin/env python3
"""Compare bench/microbench.py between two git revisions, interleaved on one machine.

    python bench/compare.py --before REV --after REV [--nodes 5000] [--rounds 5] [--requests N] [--warmup N]

Two benchmark runs taken minutes apart on a shared machine differ by more than most code changes
do, so figures from separate runs cannot show a regression. This script instead:

1. checks both revisions out as detached git worktrees in a temporary directory (removed at the end,
   also on failure or Ctrl-C);
2. runs each revision's **own** ``bench/microbench.py`` (module paths differ between revisions) as a
   subprocess with that worktree as the working directory and ``PYTHONPATH``, so ``import extender``
   resolves to that worktree and not to an editable install of another checkout (checked once per
   worktree, in a process and in a spawned child, and printed);
3. alternates the runs, before / after / before / after ..., for ``--rounds`` rounds (``--shuffle``
   randomises the order within each pair), so a slow phase of the machine hits both sides alike;
4. prints, per case and verb, the median over rounds of p50 / p99 (HTTP wall time, server handler
   time, in-process decode + coordinator + encode), CPU milliseconds per request, the ratio
   after / before, and the spread of the per-round ratios, so the noise sits next to each
   difference. The whole-gang placement times are compared the same way.

It measures and prints; it never passes or fails on speed. The worktrees and runs live in
``compare_revisions``, the figures and tables in ``compare_report``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path

from compare_report import report
from compare_revisions import (
    SIDES,
    Failed,
    Revision,
    bench_command,
    check_tree,
    git,
    plan,
    resolve,
    run_once,
    worktrees,
)

# ----------------------------------------------------------------------------------------- main


def measure(python: str, revisions: list[Revision], args: argparse.Namespace, work: Path,
            orders: list[tuple[str, str]]) -> None:
    by_side = {r.side: r for r in revisions}
    for revision in revisions:
        check_tree(python, revision, work)
        print(f"{revision.side} {revision.short}: extender from {revision.probe['extender']} "
              f"(spawned child: {revision.probe['child_extender']})", file=sys.stderr, flush=True)
    for number, order in enumerate(orders, start=1):
        for side in order:
            revision = by_side[side]
            out = work / f"round-{number}-{side}.json"
            command = bench_command(python, revision, args, out)
            print(f"round {number}/{len(orders)} {side} ({revision.short}) ...", file=sys.stderr, flush=True)
            revision.runs.append(run_once(command, revision, out.with_suffix(".log"), args.timeout))
            load = revision.runs[-1].get("runs", [{}])[0].get("loadavg_1m_after", float("nan"))
            print(f"  {revision.seconds[-1]:.0f} s, 1-minute load {load:.1f}", file=sys.stderr, flush=True)
        if args.save:
            for side in SIDES:
                shutil.copy(work / f"round-{number}-{side}.json", args.save / f"round-{number}-{side}.json")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git revision of the baseline")
    parser.add_argument("--after", required=True, help="git revision to compare with it")
    parser.add_argument("--nodes", type=int, default=5000, help="node count (one)")
    parser.add_argument("--rounds", type=int, default=5, help="before/after pairs")
    parser.add_argument("--requests", type=int, help="measured requests per series (microbench default)")
    parser.add_argument("--warmup", type=int, help="warm-up requests per series (microbench default)")
    parser.add_argument("--shuffle", action="store_true", help="random order within each pair")
    parser.add_argument("--seed", type=int, default=0, help="seed for --shuffle")
    parser.add_argument("--bench-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for both microbench runs, repeatable "
                             "(e.g. --bench-arg=--pods-per-node=8)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the runs")
    parser.add_argument("--save", type=Path, help="directory for each run's JSON and the comparison JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def on_sigterm(signum: int, frame: object) -> None:
    print("terminated (SIGTERM); removing the worktrees", file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repo = Path(git(Path(__file__).resolve().parent, "rev-parse", "--show-toplevel"))
    revisions = [Revision("before", args.before), Revision("after", args.after)]
    orders = plan(args.rounds, args.shuffle, args.seed)
    # SIGTERM unwinds like Ctrl-C, so the worktrees and the running benchmark are cleaned up.
    signal.signal(signal.SIGTERM, on_sigterm)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    try:
        for revision in revisions:
            resolve(repo, revision)
        load_start = os.getloadavg()[0]
        with worktrees(repo, revisions) as work:
            measure(args.python, revisions, args, work, orders)
        summary = report(revisions, args, orders, (load_start, os.getloadavg()[0]))
    except Failed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; worktrees removed", file=sys.stderr)
        return 130
    if args.save:
        (args.save / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
