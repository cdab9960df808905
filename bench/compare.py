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

It measures and prints; it never passes or fails on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = "bench/microbench.py"
SIDES = ("before", "after")
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

# Runs in a revision's worktree: where `extender` comes from, in this process and in a spawned
# child (microbench serves and measures in spawned children), and the interpreter's versions.
PROBE = """
import json, multiprocessing as mp, platform, extender
def where(queue):
    import extender
    queue.put(extender.__file__)
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=where, args=(queue,))
    child.start()
    child.join(120)
    child_file = queue.get(timeout=10)
    versions = {}
    for name in ("aiohttp", "orjson"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:
            versions[name] = "?"
    print(json.dumps({"extender": extender.__file__, "child_extender": child_file,
                      "python": platform.python_implementation() + " " + platform.python_version(),
                      **versions}))
"""


class Failed(Exception):
    """A step failed; the message says which and why."""


@dataclass
class Revision:
    """One side of the comparison: the commit, its worktree, and what its microbench accepts."""

    side: str
    rev: str
    sha: str = ""
    short: str = ""
    subject: str = ""
    tree: Path = Path()
    flags: set[str] = field(default_factory=set)
    probe: dict[str, str] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- git


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Failed(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve(repo: Path, revision: Revision) -> None:
    revision.sha = git(repo, "rev-parse", "--verify", f"{revision.rev}^{{commit}}")
    line = git(repo, "log", "-1", "--format=%h%x00%s", revision.sha)
    revision.short, revision.subject = line.split("\0", 1)


@contextmanager
def worktrees(repo: Path, revisions: list[Revision]) -> Iterator[Path]:
    """Detached worktrees for the revisions under a temporary directory; always removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="quorum-compare-"))
    added: list[Path] = []
    try:
        for revision in revisions:
            revision.tree = base / revision.side
            git(repo, "worktree", "add", "--detach", "--quiet", str(revision.tree), revision.sha)
            added.append(revision.tree)
        yield base
    finally:
        for tree in added:
            try:
                git(repo, "worktree", "remove", "--force", str(tree))
            except Failed as err:
                print(f"warning: {err}", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)
        try:
            git(repo, "worktree", "prune")
        except Failed as err:
            print(f"warning: {err}", file=sys.stderr)


# ----------------------------------------------------------------------------------------- running


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a run: PYTHONPATH is the worktree alone, so its `extender` wins over any
    editable install (which setuptools appends after the path finder)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONSTARTUP", None)
    return env


def check_tree(python: str, revision: Revision, work: Path) -> None:
    """Fail unless the worktree has a microbench that writes JSON and `extender` resolves to it."""
    script = revision.tree / BENCH
    if not script.is_file():
        raise Failed(f"{revision.side} ({revision.short}) has no {BENCH}")
    env = tree_env(revision.tree)
    probe = work / "probe.py"  # a file, not -c: the spawned child imports its target from it
    probe.write_text(PROBE, encoding="utf-8")
    done = subprocess.run([python, str(probe)], cwd=revision.tree, env=env, capture_output=True,
                          text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise Failed(f"{revision.side} ({revision.short}): importing extender failed:\n{done.stderr}")
    revision.probe = json.loads(done.stdout.strip().splitlines()[-1])
    root = revision.tree.resolve()
    for key in ("extender", "child_extender"):
        if root not in Path(revision.probe[key]).resolve().parents:
            raise Failed(f"{revision.side}: extender resolves to {revision.probe[key]}, not to its worktree")
    done = subprocess.run([python, BENCH, "--help"], cwd=revision.tree, env=env, capture_output=True,
                          text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise Failed(f"{revision.side} ({revision.short}): {BENCH} --help failed:\n{done.stderr}")
    revision.flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))
    if "--json" not in revision.flags:
        raise Failed(f"{revision.side} ({revision.short}): its {BENCH} cannot write --json")


def bench_command(python: str, revision: Revision, args: argparse.Namespace, out: Path) -> list[str]:
    """The microbench command line for one run; options the revision lacks are left out (and reported)."""
    wanted: list[tuple[str, str | None]] = [("--nodes", str(args.nodes)), ("--no-memory", None),
                                            ("--json", str(out))]
    if args.requests is not None:
        wanted.append(("--requests", str(args.requests)))
    if args.warmup is not None:
        wanted.append(("--warmup", str(args.warmup)))
    command = [python, BENCH]
    for flag, value in wanted:
        if flag in revision.flags:
            command += [flag] if value is None else [flag, value]
    return command + list(args.bench_arg)


def missing_flags(revision: Revision, args: argparse.Namespace) -> list[str]:
    wanted = ["--nodes", "--no-memory"]
    wanted += ["--requests"] if args.requests is not None else []
    wanted += ["--warmup"] if args.warmup is not None else []
    return [flag for flag in wanted if flag not in revision.flags]


def run_once(command: list[str], revision: Revision, log: Path, timeout: float) -> dict[str, Any]:
    """One microbench run in its own session, so that it and its spawned children can be stopped
    together if this script is interrupted."""
    out = Path(command[command.index("--json") + 1])
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(command, cwd=revision.tree, env=tree_env(revision.tree), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            stop_group(proc)
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-30:])
        raise Failed(f"{revision.side} ({revision.short}) exited with {code}:\n{tail}")
    revision.seconds.append(time.monotonic() - started)
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def plan(rounds: int, shuffle: bool, seed: int) -> list[tuple[str, str]]:
    """The order of each round's pair: before first, unless shuffled."""
    rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        pair = list(SIDES)
        if shuffle:
            rng.shuffle(pair)
        orders.append((pair[0], pair[1]))
    return orders


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
