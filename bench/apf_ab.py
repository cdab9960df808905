#!/usr/bin/env python3
"""Quorum's FlowSchema on and off, interleaved, while ``workload-low`` is kept full.

Each repetition runs one workload under Quorum's profile twice (``bench/cluster_bench.py
--configs Q``): once with the installation's FlowSchema (manifests/flowschema.yaml: Quorum's
requests at ``workload-high``) and once without it (Quorum's requests in ``workload-low`` with
every ServiceAccount's); the order alternates. During both, ``bench/apf_load.py`` keeps
``workload-low`` busy. The schema is put back at the end.

    python bench/apf_ab.py --reps 2 --out DIR [--workload W1] [--accounts 24 --workers 2]

With ``--revisions A,B`` each arm is also run for each revision of Quorum, restarted from its
checkout as ``bench/cluster_ab.py`` does (and from this checkout at the end); ``--schema off``
(or ``on``) runs only that side of the schema:

    python bench/apf_ab.py --revisions fa5deba,d3deefd --schema off --reps 2 --out DIR

The cluster must be up (hack/cluster-up.sh). Start it with fewer apiserver seats to make them, not
the CPU, what runs out first, as on a busy production apiserver:
``APISERVER_EXTRA_ARGS="--max-requests-inflight=40 --max-mutating-requests-inflight=20"``.
Prints one line per run and writes every run's figures to DIR/apf_ab.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_ab
from cb_kube import Apiserver

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "manifests" / "flowschema.yaml"
SCHEMAS = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
ARMS = ("schema", "no-schema")
SCHEMA_CHOICES = {"both": ARMS, "on": ARMS[:1], "off": ARMS[1:]}
# The FlowSchemas whose queue wait bench/cb_procs.py records, by its short names.
WAITED = ("quorum", "service_accounts", "kube_scheduler", "kube_system_accounts")


async def set_schema(present: bool) -> None:
    """Create or delete Quorum's FlowSchema, then give the apiserver's APF controller time to see it."""
    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    async with Apiserver() as api:
        if present:
            await api.request("POST", SCHEMAS, schema, ok=(200, 201, 409))
        else:
            await api.delete(f"{SCHEMAS}/{schema['metadata']['name']}")
    await asyncio.sleep(5)


def mean_wait_ms(apiserver: dict[str, float], schema: str) -> tuple[int, float]:
    """(requests, mean APF queue wait in ms) of one FlowSchema, from a run's counter deltas."""
    count = apiserver.get(f"apf_wait_{schema}_count", 0.0)
    total = apiserver.get(f"apf_wait_{schema}_sum", 0.0)
    return int(count), round(total / count * 1e3, 2) if count else 0.0


def summarize(arm: str, rep: int, run: dict[str, Any], load: dict[str, Any]) -> dict[str, Any]:
    apiserver = run.get("metrics", {}).get("kube-apiserver", {})
    quorum = run.get("metrics", {}).get("quorum", {})
    copied = ("workload", "pods_per_second", "skew_p50_ms", "skew_p99_ms", "skew_max_ms",
              "quorum_cpu_ms_per_pod")
    return {"arm": arm, "rep": rep, **{k: run[k] for k in copied},
            **{f"wait_{schema}": list(mean_wait_ms(apiserver, schema)) for schema in WAITED},
            "pods_bound": run.get("bound", 0), "binds_failed": int(quorum.get("binds_failed", 0)),
            "gang_binds": int(quorum.get("gang_binds", 0)), "load": load}


def one_run(args: argparse.Namespace, arm: str, rep: int, side: cluster_ab.Variant | None) -> dict[str, Any]:
    if side is not None:
        cluster_ab.restart_quorum(side.directory, side.env)
    asyncio.run(set_schema(arm == "schema"))
    load = None
    if args.accounts:
        load = subprocess.Popen([sys.executable, str(ROOT / "bench" / "apf_load.py"),
                                 "--accounts", str(args.accounts), "--workers", str(args.workers)],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)
    label = arm if side is None else f"{side.tag}-{arm}"
    out = args.out / f"{label}-{rep}.json"
    try:
        subprocess.run([sys.executable, str(ROOT / "bench" / "cluster_bench.py"),
                        "--workloads", args.workload, "--configs", "Q", "--reps", "1",
                        "--tag", f"apf{rep}{side.tag[:7] if side else ''}{arm[0]}", "--out", str(out)],
                       check=True)
    finally:
        load_figures: dict[str, Any] = {}
        if load is not None:
            load.send_signal(signal.SIGINT)
            stdout, _ = load.communicate(timeout=180)
            load_figures = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    run = json.loads(out.read_text())[0]
    return {"revision": side.label if side is not None else "", **summarize(arm, rep, run, load_figures)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--workload", default="W1")
    p.add_argument("--accounts", type=int, default=24, help="bench/apf_load.py's accounts (0: no load)")
    p.add_argument("--workers", type=int, default=2,
                   help="bench/apf_load.py's requests in flight per account")
    p.add_argument("--warmup", type=float, default=15, help="seconds of load before each run starts")
    p.add_argument("--revisions", default="", help="revisions of Quorum to run each arm with (default: "
                   "the running Quorum), as bench/cluster_ab.py takes them")
    p.add_argument("--schema", choices=sorted(SCHEMA_CHOICES), default="both")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sides: list[cluster_ab.Variant | None] = [None]
    if args.revisions:
        sides = list(cluster_ab.variants(args.revisions))
    arms = [(side, schema) for side in sides for schema in SCHEMA_CHOICES[args.schema]]
    rows = []
    try:
        for rep in range(args.reps):
            for side, arm in (arms if rep % 2 == 0 else arms[::-1]):
                row = one_run(args, arm, rep, side)
                print(json.dumps(row), flush=True)
                rows.append(row)
                (args.out / "apf_ab.json").write_text(json.dumps(rows, indent=1))
    finally:
        asyncio.run(set_schema(True))
        if args.revisions:
            cluster_ab.restart_quorum(cluster_ab.ROOT)


if __name__ == "__main__":
    main()
