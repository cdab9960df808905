"""The revisions side of bench/compare.py: resolving the commits, their temporary worktrees, checking
each worktree's microbench, building its command line and running it."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
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
