#!/usr/bin/env python3
"""Best-of-rounds p50 per row, from one or more ``bench/compare.py --save DIR`` directories.

    python bench/compare_best.py DIR [DIR ...]

On a shared machine a slow phase (another process, a frequency drop) lifts every figure of the run
it hits, on either side. The median over rounds absorbs some of that; the minimum over rounds of
each side's p50 is the figure least touched by it: the fastest the revision was seen to answer.
This prints both for every in-process and HTTP row, before and after, and the ratio of the minima.
It measures and prints; it never passes or fails.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

Row = tuple[str, str, str]
IN_PROCESS = (("total", "in-process total"), ("coordinator", "in-process coordinator"))
OVER_HTTP = (("http", "HTTP wall"), ("handler", "HTTP handler"))


def collect(directories: list[Path]) -> dict[Row, dict[str, list[float]]]:
    rows: dict[Row, dict[str, list[float]]] = defaultdict(lambda: {"before": [], "after": []})
    for directory in directories:
        for path in sorted(directory.glob("round-*-*.json")):
            side = "after" if path.stem.endswith("after") else "before"
            for run in json.loads(path.read_text())["runs"]:
                for s in run["inprocess"]["series"]:
                    for key, name in IN_PROCESS:
                        rows[(name, s["case"], s["verb"])][side].append(s[key]["p50"])
                for s in run["http"]["series"]:
                    for key, name in OVER_HTTP:
                        rows[(name, s["case"], s["verb"])][side].append(s[key]["p50"])
    return rows


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    rows = collect([Path(a) for a in argv])
    print("| measure | case | verb | rounds | before: best p50 | after: best p50 | after/before (best) "
          "| before: median | after: median |")
    print("|:--|:-:|:--|--:|--:|--:|--:|--:|--:|")
    for (measure, case, verb), sides in sorted(rows.items()):
        before, after = sides["before"], sides["after"]
        if not before or not after:
            continue
        ratio = min(after) / min(before) if min(before) else float("nan")
        print(f"| {measure} | {case} | {verb} | {len(before)}/{len(after)} | {min(before):.3f} "
              f"| {min(after):.3f} | {ratio:.2f} | {statistics.median(before):.3f} "
              f"| {statistics.median(after):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
