"""Measurement helpers for bench/microbench.py: percentiles, cProfile summaries, getrusage deltas,
and running a function in a spawned child process."""

from __future__ import annotations

import cProfile
import gc
import math
import multiprocessing as mp
import pstats
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------------------- stats


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summary_ms(samples_ns: Iterable[int]) -> dict[str, float]:
    values = sorted(s / 1e6 for s in samples_ns)
    return {
        "n": len(values),
        "mean": sum(values) / len(values) if values else float("nan"),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": values[-1] if values else float("nan"),
    }


class Profiled:
    """cProfile around a block, summarised per request."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def rows(self, requests: int, top: int = 14) -> list[dict[str, Any]]:
        stats = pstats.Stats(self.profile)
        out = []
        for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            where = func if filename == "~" else f"{Path(filename).name}:{line}({func})"
            out.append({"function": where, "calls_per_request": ncalls / requests,
                        "self_us_per_request": tottime / requests * 1e6,
                        "cum_us_per_request": cumtime / requests * 1e6})
        out.sort(key=lambda r: r["self_us_per_request"], reverse=True)
        return out[:top]



# ----------------------------------------------------------------------------------------- resources


def rusage() -> dict[str, float]:
    import resource

    import psutil

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"minflt": r.ru_minflt, "nvcsw": r.ru_nvcsw, "nivcsw": r.ru_nivcsw,
            "cpu": r.ru_utime + r.ru_stime, "gc": sum(g["collections"] for g in gc.get_stats()),
            "gc_full": gc.get_stats()[-1]["collections"], "rss": psutil.Process().memory_info().rss}


def per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Per-request averages; garbage collections are totals over the series; RSS at its end."""
    out = {k: (after[k] - before[k]) / requests for k in ("minflt", "nvcsw", "nivcsw")}
    out["cpu_ms"] = (after["cpu"] - before["cpu"]) / requests * 1e3
    out["gc_total"] = after["gc"] - before["gc"]
    out["gc_full_total"] = after["gc_full"] - before["gc_full"]
    out["rss_mib"] = after["rss"] / 2**20
    return out


def stop_child(proc: Any, timeout: float) -> None:
    """Wait for a measured child process to finish; terminate it if it does not in time."""
    proc.join(timeout=timeout)
    if proc.is_alive():
        proc.terminate()
        proc.join()


def in_child(target: Callable[..., None], *args: Any) -> Any:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    try:
        result = parent.recv()
    finally:
        stop_child(proc, 60)
    return result

