"""Revisions of Quorum against each other on one running cluster, interleaved.

Each repetition runs the chosen workloads once per revision, with Quorum restarted from that
revision's checkout in between (same arguments, same environment, same port); which revision goes
first alternates between repetitions. The cluster, its kube-schedulers, the workloads and the
native scheduler's runs beside each revision's stay the same, so what differs is Quorum. Every
run is ``bench/cluster_bench.py --reps 1`` (its pair in the same order each time); the checkouts
are git worktrees under ``.cache/bench/revisions/``. Quorum is left running from this checkout.

    python bench/cluster_ab.py --revisions 44f884f,HEAD --workloads W5 --reps 2   # cluster already up

A revision may carry environment variables for Quorum after a ``+``, to compare settings of one
revision side by side: ``--revisions HEAD,HEAD+QUORUM_EVENT_LOOP=asyncio``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cb_procs
from cb_kube import CLUSTER_DIR

ROOT = Path(__file__).resolve().parent.parent
READY_URL = f"{cb_procs.QUORUM_URL}/readyz"
_STARTED: dict[int, subprocess.Popen[bytes]] = {}  # Quorums this process started, to reap when stopped


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--revisions", required=True,
                   help="comma-separated git revisions, two or more, each optionally followed by "
                        "+NAME=VALUE environment variables for Quorum (REV+A=1+B=2)")
    p.add_argument("--workloads", default="W1", help="comma-separated subset of W1..W6")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "ab", help="a JSON file per run")
    p.add_argument("--timeline", type=Path, default=None, metavar="DIR",
                   help="each run's pod timeline to DIR (cluster_bench.py --timeline)")
    return p.parse_args(argv)


def git(*words: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *words], capture_output=True, text=True,
                          check=True).stdout.strip()


@dataclass(frozen=True)
class Variant:
    """One side of the comparison: a revision's checkout, and what Quorum's environment adds."""

    label: str  # the short hash, then the variables: printed and kept in the figures
    tag: str  # the same, safe in a namespace name and a file name
    directory: Path
    env: dict[str, str]


def variants(specs: str) -> list[Variant]:
    out: list[Variant] = []
    for i, spec in enumerate(specs.split(",")):
        revision, *pairs = spec.split("+")
        env = dict(pair.split("=", 1) for pair in pairs)
        short, directory = checkout(revision)
        label = "+".join([short, *(f"{k}={v}" for k, v in env.items())])
        out.append(Variant(label, f"{short}-v{i}" if env else short, directory, env))
    return out


def checkout(revision: str) -> tuple[str, Path]:
    """The revision's short hash and a worktree of it (made on first use)."""
    short = git("rev-parse", "--short", revision)
    path = ROOT / ".cache" / "bench" / "revisions" / short
    if not path.exists():
        git("worktree", "add", "--detach", str(path), short)
    return short, path


def restart_quorum(directory: Path, env_set: dict[str, str] | None = None,
                   env_unset: frozenset[str] = frozenset()) -> None:
    """Stop the cluster's Quorum and start the code in ``directory`` with its arguments (its config
    file taken from ``directory``) and environment (``python -m extender`` imports the package from
    the working directory), less ``env_unset``, plus ``env_set``."""
    pid = cb_procs.pid_of("quorum")
    if pid is None:
        raise RuntimeError("Quorum is not running (start the cluster with hack/cluster-up.sh)")
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    # The checkout's own config file: an older revision refuses a key a newer one added.
    argv = [str(directory / Path(a).relative_to(ROOT)) if a.startswith(f"{ROOT}/scheduler-config/") else a
            for a in argv]
    env = {name: value for name, value in quorum_env(pid).items() if name not in env_unset}
    env |= env_set or {}
    SET_HERE.write_text("\n".join(sorted(env_set or {})))  # for a later run, should this one be stopped
    os.kill(pid, signal.SIGTERM)
    ours = _STARTED.pop(pid, None)
    if ours is not None:  # our child: reaped here, or its zombie would look alive below
        try:
            ours.wait(30)
        except subprocess.TimeoutExpired:
            ours.kill()
            ours.wait()
    for _ in range(300):
        if cb_procs.pid_of("quorum") is None:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    with open(CLUSTER_DIR / "logs" / "quorum.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    _STARTED[proc.pid] = proc
    (CLUSTER_DIR / "pids" / "quorum.pid").write_text(str(proc.pid))
    for _ in range(240):
        try:
            with urllib.request.urlopen(READY_URL, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"Quorum from {directory} did not become ready")


SET_HERE = CLUSTER_DIR / "quorum-ab-env"  # the variables a comparison gave the running Quorum


def quorum_env(pid: int) -> dict[str, str]:
    """The environment Quorum's process ``pid`` was started with."""
    pairs = (e.decode().partition("=") for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e)
    return {name: value for name, _, value in pairs}


def one_revision(variant: Variant, rep: int, args: argparse.Namespace,
                 env_unset: frozenset[str]) -> list[dict[str, Any]]:
    restart_quorum(variant.directory, variant.env, env_unset)
    out = args.out / f"{variant.tag}-{rep}.json"
    timeline = ["--timeline", str(args.timeline)] if args.timeline is not None else []
    subprocess.run([sys.executable, str(ROOT / "bench" / "cluster_bench.py"), "--workloads", args.workloads,
                    "--reps", "1", "--tag", f"{variant.tag}-{rep}", "--out", str(out), *timeline], check=True,
                   stdout=subprocess.DEVNULL)
    rows: list[dict[str, Any]] = json.loads(out.read_bytes())
    for row in rows:
        row.update(revision=variant.label, ab_rep=rep)
    return rows


def _figure(value: Any) -> str:
    """A measured figure as the table shows it: floats to two decimals (3.83, not 3.8281249999999996)."""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per workload and revision: the ratio to the native run beside it, per repetition, and
    Quorum's CPU, writes and memory."""
    by: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by[(row["workload"], row["revision"], row["ab_rep"])][row["config"]] = row
    per: dict[tuple[str, str], list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    for (workload, revision, _), runs in sorted(by.items(), key=lambda item: item[0][2]):
        first, *_, native = (runs[c] for c in next(iter(runs.values()))["pair"] if c in runs)
        key = "gangs_per_minute" if first.get("gangs_per_minute") is not None else "pods_per_second"
        per[(workload, revision)].append((first[key] / native[key] if native[key] else 0.0, first))
    out = ["| workload | revision | ratio to native per rep | median | Quorum CPU ms/pod | Quorum writes/pod "
           "| Quorum RSS MiB | after the cleanup |", "|---|---|---|--:|--:|--:|--:|--:|"]
    for (workload, revision), pairs in per.items():
        ratios = [r for r, _ in pairs]
        cells = [workload, revision, ", ".join(f"{r:.3f}" for r in ratios),
                 f"{statistics.median(ratios):.3f}"]
        cells += [", ".join(_figure(run.get(k)) for _, run in pairs)
                  for k in ("quorum_cpu_ms_per_pod", "quorum_writes_per_pod", "quorum_rss_mib",
                            "quorum_rss_after_clean_mib")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sides = variants(args.revisions)
    # No side inherits another's variables, nor those a comparison stopped half-way left on the
    # running Quorum.
    leftover = set(SET_HERE.read_text().split()) if SET_HERE.exists() else set()
    env_unset = frozenset({name for side in sides for name in side.env} | leftover)
    rows: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            for side in sides if rep % 2 == 0 else sides[::-1]:
                print(f"repetition {rep}: Quorum at {side.label}", flush=True)
                rows += one_revision(side, rep, args, env_unset)
                (args.out / "all.json").write_bytes(json.dumps(rows, indent=1).encode())
    finally:
        restart_quorum(ROOT, env_unset=env_unset)
    print(f"\nKubernetes cluster of this checkout ({git('rev-parse', '--short', 'HEAD')}), "
          f"{os.cpu_count()} CPUs, {args.reps} reps; figures in {args.out}\n")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
