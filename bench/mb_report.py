"""Report of bench/microbench.py: the machine description and the printed Markdown tables."""

from __future__ import annotations

import os
import platform
from typing import Any

import orjson
from mb_cluster import CASES, GANG_SIZE


def machine() -> dict[str, Any]:
    import aiohttp
    import psutil

    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        model = platform.processor()
    return {
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "orjson": orjson.__version__,
        "loadavg_1m_at_start": os.getloadavg()[0],
    }


def fmt(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    p = report["params"]
    print(f"\nMachine: {m['cpus']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB RAM, "
          f"{m['implementation']} {m['python']}, aiohttp {m['aiohttp']}, orjson {m['orjson']}")
    print(f"Requests per series: {p['requests']} after {p['warmup']} warm-up; bound pods per node: "
          f"{p['pods_per_node']}. Times in ms.")
    loads = ", ".join(f"{r['loadavg_1m_after']:.1f} after {r['nodes']}" for r in report["runs"])
    print(f"1-minute load average: {m['loadavg_1m_at_start']:.1f} at start, {loads} "
          "(anything else running on the machine shows up in the tails).")
    if p.get("env"):
        print("Environment of the measured processes: " + " ".join(f"{k}={v}" for k, v in p["env"].items()))
    print()
    for key, text in CASES.items():
        print(f"- ({key}) {text}")
    print()
    print("Over HTTP (client wall time per request; handler = server time inside the aiohttp handler):\n")
    print("| nodes | case | verb | p50 | p90 | p99 | max | handler p50 | handler p99 | req KiB | resp KiB |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            h, srv = s["http"], s["handler"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {fmt(h['p50'])} | {fmt(h['p90'])} | "
                  f"{fmt(h['p99'])} | {fmt(h['max'])} | {fmt(srv['p50'])} | {fmt(srv['p99'])} | "
                  f"{s['request_bytes'] / 1024:.0f} | {s['response_bytes'] / 1024:.0f} |")
    print("\nIn process, no HTTP (decode = wire.parse_extender_args, coordinator = Coordinator.filter / "
          "prioritize, encode = response bytes):\n")
    print("| nodes | case | verb | p50 | p90 | p99 | max | decode p50 | coordinator p50 | coordinator p99 "
          "| encode p50 | page faults/req | RSS MiB |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["inprocess"]["series"]:
            t = s["total"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {fmt(t['p50'])} | {fmt(t['p90'])} | "
                  f"{fmt(t['p99'])} | {fmt(t['max'])} | {fmt(s['parse']['p50'])} | "
                  f"{fmt(s['coordinator']['p50'])} | {fmt(s['coordinator']['p99'])} | "
                  f"{fmt(s['encode']['p50'])} | {s['rusage']['minflt']:.0f} | {s['rusage']['rss_mib']:.0f} |")
    print("\nResource use per HTTP request (getrusage deltas over the measured requests; server CPU includes "
          "aiohttp, client CPU is http.client):\n")
    print("| nodes | case | verb | server CPU ms | server page faults | server ctx switches (vol/invol) "
          "| server GCs (full) in series | server RSS MiB | client CPU ms |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            sr, cr = s["server_rusage"], s["client_rusage"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {sr['cpu_ms']:.3f} | {sr['minflt']:.0f} | "
                  f"{sr['nvcsw']:.1f} / {sr['nivcsw']:.1f} | {sr['gc_total']} ({sr['gc_full_total']}) | "
                  f"{sr['rss_mib']:.0f} | {cr['cpu_ms']:.3f} |")
    print("\nResponses (last request of each series):\n")
    print("| nodes | case | verb | answer |")
    print("|---:|:-:|:--|:--|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            answer = ", ".join(f"{k} {v}" for k, v in s["response"].items())
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {answer} |")
    print("\nWhole-gang placement (the filter call of each gang's first member, "
          f"{GANG_SIZE} x 8 GPUs, required rack), ms:\n")
    print("| nodes | cache pods | HTTP (each gang) | in-process (each gang) |")
    print("|---:|---:|:--|:--|")
    for run in report["runs"]:
        http_ms = ", ".join(fmt(v) for v in run["http"]["placements_ms"])
        ip_ms = ", ".join(fmt(v) for v in run["inprocess"]["placements_ms"])
        print(f"| {run['nodes']} | {run['http']['pods']} | {http_ms} | {ip_ms} |")
    print_memory(report.get("memory"))
    print_profiles(report)


def print_memory(mem: dict[str, Any] | None) -> None:
    if mem:
        rec, full = mem["records"], mem.get("full")
        print("\nMemory (RSS, psutil, after gc.collect()):\n")
        print("| what | nodes | pods | RSS before | after nodes | after pods | pods cost | per pod |")
        print("|:--|---:|---:|--:|--:|--:|--:|--:|")
        for label, r in (("cache records (upsert_pod)", rec), ("full objects kept (comparison)", full)):
            if not r:
                continue
            cost = r["rss_after_pods"] - r["rss_after_nodes"]
            print(f"| {label} | {r['nodes']} | {r['pods']} | {r['rss_base'] / 2**20:.0f} MiB | "
                  f"{r['rss_after_nodes'] / 2**20:.0f} MiB | {r['rss_after_pods'] / 2**20:.0f} MiB | "
                  f"{cost / 2**20:.0f} MiB | {cost / r['pods']:.0f} B |")
        print(f"\n(one pod object is {rec['pod_json_bytes']} bytes of JSON)")


def print_profiles(report: dict[str, Any]) -> None:
    for run in report["runs"]:
        for where in ("inprocess", "http"):
            profiles = run[where].get("profiles") or {}
            for label, rows in profiles.items():
                print(f"\nProfile {where} {run['nodes']} nodes {label} (cProfile, per request, µs; "
                      "cProfile inflates many small calls):\n")
                print("| function | calls | self µs | cum µs |")
                print("|:--|--:|--:|--:|")
                for r in rows:
                    print(f"| `{r['function']}` | {r['calls_per_request']:.0f} | "
                          f"{r['self_us_per_request']:.0f} | {r['cum_us_per_request']:.0f} |")
