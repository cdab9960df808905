"""Whole-system benchmark on the local cluster: Quorum's profile against kube-scheduler's own gang
scheduling (GenericWorkload), from the same binary, on the same nodes, interleaved.

Configurations (all on one cluster, one at a time):
  Q   gangs under Quorum's profile (kube-scheduler + Quorum over HTTP)
  N   the same gangs under a second kube-scheduler with GenericWorkload on ("native" profile)
  Vq  plain pods under Quorum's profile
  Vm  plain pods under Quorum's profile in members-only mode (a third kube-scheduler, profile
      quorum-members, consulting Quorum only about pods that request quorum.dev/member)
  Vz  plain pods under a fourth kube-scheduler whose extender (bench/nullextender, Go) decides
      nothing: filter passes every node, prioritize prefers none, bind binds. The protocol's floor
  V   plain pods under the native scheduler
  Qz  gangs (W1, W4; only when named in --configs) under that fourth kube-scheduler, its extender
      bench/holdextender.py: Python on Quorum's stack, holding each gang's binds until its minCount
      and then binding them together, deciding nothing else. A Python gang extender's floor
  Mq  gangs and plain pods together under Quorum's profile
  Mm  the same under members-only mode (gang members request quorum.dev/member)
Workloads:
  W1  gangs of 16 (``--pods`` pods)          W2  the same, each gang in one rack (required)
  W3  plain pods                             W4  one gang of 256, scheduler running
  W5  mixed gang sizes, whole-node pods that complete after 20 s, 2x the cluster: gangs per minute
  W6  gangs of 16 and as many plain pods between them, half-node pods that complete after 20 s,
      1.5x the cluster: what gangs lose when plain pods no longer see Quorum's reservations

The scheduler under test is paused (SIGSTOP) while the pods are created and resumed once they all
exist, so throughput is timed from that moment, apart from creation (reported on its own). A
scheduling gate would not do: lifting it is one write per pod, and those writes set the pace.
W4 is created with the scheduler running: last created -> all bound. Throughput is timed by the
benchmark's watch; bind skew (first to last bind of a gang) by the apiserver's own binding times,
from its audit log. CPU and memory are read from /proc for every component.

Usage:
  python bench/cluster_bench.py --start-cluster            # the full table, 1,000 nodes, 3 reps
  python bench/cluster_bench.py --workloads W1,W4 --reps 1 # on a cluster that is already up
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cb_procs
from cb_extenders import HoldExtender, NullExtender
from cb_kube import Apiserver, BindWatch
from cb_report import (
    SCHEDULING,
    completed_gangs,
    gang_bound_times,
    gang_skews,
    mixed_table,
    overcommitted_nodes,
    per_pod_ms,
    percentile,
    summarize,
)
from cb_workloads import (
    GANG_LABEL,
    GPU,
    GPUS_PER_NODE,
    PODGROUP_PATH,
    Workload,
    run_objects,
    workloads,
)

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start-cluster", action="store_true",
                   help="start a fresh local cluster of --blocks x --racks x --nodes-per-rack nodes first "
                        "(hack/cluster-up.sh) and stop it at the end")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--racks", type=int, default=10, help="racks per block")
    p.add_argument("--nodes-per-rack", type=int, default=20)
    p.add_argument("--pods", type=int, default=4000, help="pods in W1, W2 and W3 (gangs of 16)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every pair of configurations")
    p.add_argument("--workloads", default="W1,W2,W3,W4,W5,W6", help="comma-separated subset of W1..W6")
    p.add_argument("--native-percentage", type=int, default=100,
                   help="percentageOfNodesToScore of the native scheduler (Quorum's profile uses 100)")
    p.add_argument("--profile-quorum", type=Path, default=None, metavar="DIR",
                   help="sample Quorum with py-spy (pip install py-spy) while kube-scheduler works "
                        "through each Q and Vq run; raw stacks and a summary go to DIR")
    p.add_argument("--profile-cpu", action="store_true",
                   help="with --profile-quorum: count Quorum's CPU time instead of py-spy's wall-clock "
                        "samples (Quorum started under bench/cpu_sampler.py; see its docstring)")
    p.add_argument("--configs", default="", help="comma-separated configurations to run (default: every one "
                                                 "of each workload)")
    p.add_argument("--timeline", type=Path, default=None, metavar="DIR",
                   help="write each run's pods (gang, node, seconds to bound and to finished) to DIR "
                        "as JSON, for bench/cb_timeline.py")
    p.add_argument("--tag", default="", help="added to the runs' namespace names (bench/cluster_ab.py runs "
                                             "this script once per revision and repetition)")
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "cluster_bench.json",
                   help="where every run's figures go (JSON)")
    return p.parse_args(argv)


def k8s_version() -> str:
    out = subprocess.run(["bash", "-c", f"source {ROOT}/hack/lib/versions.sh; echo $K8S_VERSION"],
                         capture_output=True, text=True, check=True, env={**os.environ})
    return out.stdout.strip()


CLEAN_SETTLE_SECONDS = 5.0


async def clean(api: Apiserver, namespace: str) -> None:
    """Remove a run's pods at once (grace 0) and its namespace; wait until the pods are gone."""
    base = f"/api/v1/namespaces/{namespace}"
    await api.delete(f"{base}/pods", {"gracePeriodSeconds": 0, "propagationPolicy": "Background"})
    await api.delete(PODGROUP_PATH.format(ns=namespace))
    for _ in range(600):
        left = await api.get(f"{base}/pods?limit=1")
        if not left["items"]:
            break
        await asyncio.sleep(0.5)
    await api.delete(base)


async def one_run(api: Apiserver, work: Workload, config: str, rep: int, profile_dir: Path | None = None,
                  tag: str = "", timeline: Path | None = None, profile_cpu: bool = False) -> dict[str, Any]:
    namespace = f"bench-{work.name}-{config}-{rep}{'-' + tag if tag else ''}".lower()
    await api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": namespace}})
    groups, pods = run_objects(namespace, config, work, f"{work.name}-{config}-{rep}")
    watch = BindWatch(api, namespace)
    await watch.start()
    await api.each(groups, lambda g: api.create(PODGROUP_PATH.format(ns=namespace), g))
    before_cpu, before_metrics, audit = cb_procs.cpu_by_component(), cb_procs.metrics_snapshot(), 0
    started, pods_path = time.monotonic(), f"/api/v1/namespaces/{namespace}/pods"
    if work.paused:
        with cb_procs.Paused(SCHEDULING[config][-1]):  # the kube-scheduler comes last
            creation = await api.each(pods, lambda p: api.create(pods_path, p))
            await asyncio.sleep(2)  # Quorum's watch has them all
            # (The metrics were read before: a paused scheduler does not answer.)
            before_cpu, audit = cb_procs.cpu_by_component(), cb_procs.audit_offset()
        started = last_created = time.monotonic()
    else:
        audit = cb_procs.audit_offset()
        creation = await api.each(pods, lambda p: api.create(pods_path, p))
        last_created = started + creation
    profiler = cb_procs.start_profiler(profile_dir, f"{work.name}-{config}-{rep}", profile_cpu) \
        if profile_dir is not None and config in ("Q", "Vq") else None
    want = len(pods)
    sizes = {g["metadata"]["name"]: g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups}
    if work.complete_after:
        finished = await watch.until(
            lambda: completed_gangs(watch.finished_at, watch.labels, sizes) == len(sizes)
            and len(watch.finished_at) >= want, work.timeout)
    else:
        finished = await watch.until(lambda: len(watch.bound_at) >= want, work.timeout)
    ended = time.monotonic()
    if profiler is not None:
        profiler.stop()
    await asyncio.sleep(1)  # binds in flight reach the counters
    cpu = {k: v - before_cpu.get(k, 0.0) for k, v in cb_procs.cpu_by_component().items()}
    after_metrics = cb_procs.metrics_snapshot()
    writes, bind_times, received = cb_procs.audit_since(audit, namespace)
    await watch.stop()
    if timeline is not None:
        write_timeline(timeline / f"{namespace}.json", watch, started)
    row = measure(work, config, rep, watch, bind_times, started, last_created, ended, finished, sizes)
    row.update(_received_skews(received, watch.labels))
    bound = len(watch.bound_at) or 1
    quorum_pid = cb_procs.pid_of("quorum")
    # Quorum follows every pod of the cluster: its CPU per watch event, in a native run all it does.
    events = (after_metrics["quorum"].get("watch_events", 0.0)
              - before_metrics["quorum"].get("watch_events", 0.0))
    row.update({
        "creation_seconds": round(creation, 2), "creation_per_second": round(want / creation, 1),
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "scheduling_cpu_ms_per_pod": per_pod_ms(cpu, bound, SCHEDULING[config]),
        "extender_cpu_ms_per_pod": per_pod_ms(cpu, bound, SCHEDULING[config][:1])
        if len(SCHEDULING[config]) > 1 else None,
        "quorum_cpu_ms_per_pod": per_pod_ms(cpu, bound, ("quorum",))
        if "quorum" in SCHEDULING[config] else None,
        "quorum_cpu_us_per_watch_event": round(1e6 * cpu.get("quorum", 0.0) / events, 1) if events else None,
        "system_cpu_ms_per_pod": per_pod_ms(cpu, bound),
        "metrics": {proc: {k: round(v - before_metrics[proc].get(k, 0.0), 3) for k, v in series.items()}
                    for proc, series in after_metrics.items()},
        "quorum_writes": writes,
        "quorum_writes_per_pod": sum(n for k, n in writes.items() if not k.startswith("create pods/binding"))
        / bound if SCHEDULING[config][0] == "quorum" else None,
        "quorum_rss_mib": round(cb_procs.rss_mib(quorum_pid), 1) if quorum_pid else None,
    })
    await clean(api, namespace)
    if quorum_pid and "quorum" in SCHEDULING[config]:
        await asyncio.sleep(CLEAN_SETTLE_SECONDS)  # the deletions' watch events are behind Quorum
        row["quorum_rss_after_clean_mib"] = round(cb_procs.rss_mib(quorum_pid), 1)
    return row


def write_timeline(path: Path, watch: BindWatch, started: float) -> None:
    """Every pod's gang, node and seconds from the scheduler's resume to bound, to running (as the
    fake kubelet reported it) and to finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    def since(at: dict[str, float], name: str) -> float | None:
        return round(at[name] - started, 3) if name in at else None

    pods = {name: {"gang": watch.labels[name].get(GANG_LABEL, ""), "node": watch.node_of.get(name),
                   "bound": since(watch.bound_at, name), "running": since(watch.running_at, name),
                   "finished": since(watch.finished_at, name)}
            for name in watch.labels}
    path.write_bytes(json.dumps(pods).encode())


def measure(work: Workload, config: str, rep: int, watch: BindWatch, bind_times: dict[str, float],
            started: float, last_created: float, ended: float, finished: bool, sizes: dict[str, int]
            ) -> dict[str, Any]:
    """Throughput from the watch; bind skew from the apiserver's own binding times (audit log)."""
    times = sorted(watch.bound_at.values())
    skews = gang_skews(bind_times, watch.labels)
    seen_skews = gang_skews(watch.bound_at, watch.labels)
    span = (times[-1] - started) if times else float("nan")
    row: dict[str, Any] = {
        "workload": work.name, "title": work.title, "config": config, "rep": rep, "pair": work.configs,
        "pods": work.pods, "bound": len(times), "finished": finished,
        "pods_per_second": round(len(times) / span, 1) if times and span > 0 else 0.0,
        "first_bind_s": round(times[0] - started, 3) if times else None,
        "last_to_all_bound_s": round(times[-1] - last_created, 3) if times and not work.paused else None,
        "skew_p50_ms": round(1000 * percentile(skews, 50), 1) if skews else None,
        "skew_p99_ms": round(1000 * percentile(skews, 99), 1) if skews else None,
        "skew_max_ms": round(1000 * max(skews), 1) if skews else None,
        "watch_skew_p50_ms": round(1000 * percentile(seen_skews, 50), 1) if seen_skews else None,
        "audited_binds": len(bind_times),
    }
    if work.complete_after:
        done = completed_gangs(watch.finished_at, watch.labels, sizes)
        row.update(gangs_completed=done, gangs_per_minute=round(60 * done / (ended - started), 1))
    if work.gang_sizes and work.plain_pods:
        gangs = sorted(t - started for t in gang_bound_times(watch.bound_at, watch.labels, sizes))
        plain = sorted(t - started for n, t in watch.bound_at.items() if not watch.labels[n].get(GANG_LABEL))
        row.update(gangs_bound=len(gangs), plain_bound=len(plain),
                   gang_bound_p50_s=round(percentile(gangs, 50), 2) if gangs else None,
                   gang_bound_last_s=round(gangs[-1], 2) if gangs else None,
                   plain_bound_p50_s=round(percentile(plain, 50), 2) if plain else None,
                   plain_bound_last_s=round(plain[-1], 2) if plain else None,
                   overcommitted_nodes=overcommitted_nodes(watch.bound_at, watch.finished_at, watch.node_of,
                                                           int(work.requests.get(GPU, "0")), GPUS_PER_NODE))
    return row


def _received_skews(received: dict[str, float], labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Bind skew as the apiserver received the bindings: what the binder's side adds to the skew."""
    skews = gang_skews(received, labels)
    return {"received_skew_p50_ms": round(1000 * percentile(skews, 50), 1) if skews else None,
            "received_skew_max_ms": round(1000 * max(skews), 1) if skews else None}


async def main_async(args: argparse.Namespace, wanted: list[str]) -> list[dict[str, Any]]:
    nodes = args.blocks * args.racks * args.nodes_per_rack
    chosen = [w for name, w in workloads(nodes, args.pods).items() if name in args.workloads.split(",")]
    rows: list[dict[str, Any]] = []
    async with Apiserver() as api:
        for rep in range(args.reps):
            for work in chosen:
                configs = work.chosen(wanted)
                for config in configs if rep % 2 == 0 else configs[::-1]:  # who goes first alternates
                    row = await one_run(api, work, config, rep, args.profile_quorum, args.tag, args.timeline,
                                        args.profile_cpu)
                    rows.append(row)
                    print(json.dumps({k: row[k] for k in ("workload", "config", "rep", "bound", "pods",
                                                          "pods_per_second", "skew_p50_ms",
                                                          "system_cpu_ms_per_pod")}), flush=True)
                    args.out.write_bytes(json.dumps(rows, indent=1).encode())
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    version = k8s_version()
    if args.start_cluster:
        subprocess.run([str(ROOT / "hack" / "cluster-up.sh"), "--blocks", str(args.blocks), "--racks",
                        str(args.racks), "--nodes", str(args.nodes_per_rack)], check=True,
                       env={**os.environ, "QUORUM_CONFIG": str(cb_procs.quorum_config_file(args.out.parent))})
    binary = ROOT / ".cache" / "bin" / version / "kube-scheduler"
    native_gates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
    wanted = args.configs.split(",") if args.configs else []
    if "Qz" in wanted and "Vz" in wanted:
        raise SystemExit("Qz and Vz share the fourth kube-scheduler's extender: run them apart")
    extender = HoldExtender() if "Qz" in wanted else NullExtender()
    schedulers: list[cb_procs.SecondScheduler | NullExtender | HoldExtender] = [
        cb_procs.native_scheduler(binary, native_gates, args.native_percentage),
        cb_procs.members_scheduler(binary), extender, cb_procs.null_scheduler(binary)]
    try:
        for scheduler in schedulers:
            scheduler.start()
        rows = asyncio.run(main_async(args, wanted))
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        if args.start_cluster:
            subprocess.run([str(ROOT / "hack" / "cluster-down.sh")], check=False)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    nodes = args.blocks * args.racks * args.nodes_per_rack
    print(f"\nKubernetes {version}, commit {commit}, {os.cpu_count()} CPUs, {nodes} nodes, "
          f"{args.reps} reps; figures in {args.out}\n")
    print("\n".join(summarize(rows)))
    print("\n".join(["", *mixed_table(rows)]))
    if args.profile_quorum is not None:
        for path in sorted(args.profile_quorum.glob("*.txt")):
            print("\n" + "\n".join(cb_procs.profile_summary(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
