"""Figures of the cluster benchmark: one run's measures, and the table over all runs."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from cb_workloads import GANG_LABEL

# The processes that schedule each configuration's pods, the kube-scheduler last (the one paused
# while a run's pods are created).
SCHEDULING = {"Q": ("quorum", "kube-scheduler"), "Vq": ("quorum", "kube-scheduler"),
              "Vm": ("quorum", "members-scheduler"), "N": ("native-scheduler",), "V": ("native-scheduler",),
              "Vz": ("null-extender", "null-scheduler"), "Qz": ("null-extender", "null-scheduler"),
              "Mq": ("quorum", "kube-scheduler"),
              "Mm": ("quorum", "members-scheduler")}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def times_by_gang(times: dict[str, float], labels: dict[str, dict[str, str]]) -> dict[str, list[float]]:
    """Each gang's members' times (pods of no gang left out)."""
    by_gang: dict[str, list[float]] = defaultdict(list)
    for name, at in times.items():
        gang = labels.get(name, {}).get(GANG_LABEL, "")
        if gang:
            by_gang[gang].append(at)
    return by_gang


def gang_skews(bound_at: dict[str, float], labels: dict[str, dict[str, str]]) -> list[float]:
    """First to last bind within each gang whose members all bound (seconds)."""
    return [max(times) - min(times) for times in times_by_gang(bound_at, labels).values() if len(times) > 1]


def completed_gangs(finished_at: dict[str, float], labels: dict[str, dict[str, str]],
                    sizes: dict[str, int]) -> int:
    done: dict[str, int] = defaultdict(int)
    for name in finished_at:
        done[labels.get(name, {}).get(GANG_LABEL, "")] += 1
    return sum(1 for gang, size in sizes.items() if done.get(gang, 0) >= size)


def gang_bound_times(bound_at: dict[str, float], labels: dict[str, dict[str, str]],
                     sizes: dict[str, int]) -> list[float]:
    """When each gang had all its members bound (its last bind), for the gangs that did."""
    by_gang = times_by_gang(bound_at, labels)
    return [max(by_gang[gang]) for gang, size in sizes.items() if len(by_gang.get(gang, ())) >= size]


def overcommitted_nodes(bound_at: dict[str, float], finished_at: dict[str, float], node_of: dict[str, str],
                        per_pod: int, capacity: int) -> int:
    """Nodes that at some moment ran pods asking for more than ``capacity`` of a resource each pod
    asks ``per_pod`` of. The watch delivers events in the apiserver's order, so a pod that finished
    before another was bound in its place is seen finishing first (ties: finishes first)."""
    events = sorted([(at, 1, name) for name, at in bound_at.items()]
                    + [(at, 0, name) for name, at in finished_at.items() if name in bound_at])
    used: dict[str, int] = defaultdict(int)
    over: set[str] = set()
    for _, is_bind, name in events:
        node = node_of[name]
        used[node] += per_pod if is_bind else -per_pod
        if used[node] > capacity:
            over.add(node)
    return len(over)


def per_pod_ms(cpu: dict[str, float], pods: int, names: tuple[str, ...] | None = None) -> float:
    if not pods:
        return float("nan")
    return 1000 * sum(v for k, v in cpu.items() if names is None or k in names) / pods


COLUMNS = (("last_to_all_bound_s", "{:.2f}"), ("gangs_per_minute", "{:.1f}"),
           ("scheduling_cpu_ms_per_pod", "{:.2f}"), ("quorum_cpu_ms_per_pod", "{:.2f}"),
           ("system_cpu_ms_per_pod", "{:.2f}"), ("quorum_writes_per_pod", "{:.2f}"),
           ("creation_per_second", "{:.0f}"))


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """A markdown table: per workload and configuration, medians with min..max, and per repetition
    the ratio of each configuration to the workload's last one, the native scheduler (gangs per
    minute for W5, pods per second otherwise)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by[(row["workload"], row["config"])].append(row)
    out = ["| workload | config | runs | pods/s | ratio per rep | skew p50 / p99 ms | last created -> all "
           "bound s | gangs/min | sched CPU ms/pod | Quorum ms/pod | system ms/pod | Quorum writes/pod "
           "| created/s |",
           "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for (workload, config), runs in by.items():
        pair = runs[0]["pair"]
        other = by.get((workload, pair[-1]), []) if config != pair[-1] else []
        key = "gangs_per_minute" if runs[0].get("gangs_per_minute") is not None else "pods_per_second"
        ratios = [a[key] / b[key] for a, b in zip(runs, other, strict=False) if b[key]]
        cells = [f"{workload} {runs[0]['title']}", config, str(len(runs)),
                 _spread(runs, "pods_per_second", "{:.0f}"), _ratios(ratios),
                 _pair(runs, "skew_p50_ms", "skew_p99_ms")]
        cells += [_spread(runs, key, fmt) for key, fmt in COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _ratios(ratios: list[float]) -> str:
    if not ratios:
        return ""
    return ", ".join(f"{r:.2f}" for r in ratios) + f" (median **{statistics.median(ratios):.2f}**)"


def _values(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in runs if r.get(key) is not None and r[key] == r[key]]  # drop None, NaN


def _spread(runs: list[dict[str, Any]], key: str, fmt: str) -> str:
    values = _values(runs, key)
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    return median if len(values) == 1 else f"{median} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def _pair(runs: list[dict[str, Any]], first: str, second: str) -> str:
    a, b = _values(runs, first), _values(runs, second)
    if not a:
        return "-"
    return f"{statistics.median(a):.0f} / {statistics.median(b):.0f}"


MIXED_COLUMNS = (("gangs_bound", "{:.0f}"), ("gang_bound_p50_s", "{:.1f}"), ("gang_bound_last_s", "{:.1f}"),
                 ("plain_bound_p50_s", "{:.1f}"), ("plain_bound_last_s", "{:.1f}"),
                 ("gangs_per_minute", "{:.1f}"),
                 ("overcommitted_nodes", "{:.0f}"), ("releases", "{:.0f}"), ("releases_replan", "{:.0f}"),
                 ("releases_node_changed", "{:.0f}"))


def mixed_table(rows: list[dict[str, Any]]) -> list[str]:
    """Gangs and plain pods on one cluster (W6): when the gangs and the plain pods were bound
    (seconds from the start, median and last), and how often Quorum had to drop a reservation."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("gang_bound_p50_s") is not None:
            quorum = row.get("metrics", {}).get("quorum", {})
            by[row["config"]].append({**row, **{k: quorum.get(k) for k in
                                                ("releases", "releases_replan", "releases_node_changed")}})
    if not by:
        return []
    out = ["| config | runs | gangs bound | gang bound p50 s | last gang s | plain p50 s | last plain s | "
           "gangs/min | overcommitted nodes | releases | of which replan | node changed |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for config, runs in by.items():
        cells = [config, str(len(runs))] + [_spread(runs, key, fmt) for key, fmt in MIXED_COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return out
