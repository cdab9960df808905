"""The Grafana dashboard (charts/quorum/dashboards/quorum.json) asks only for exported metrics and labels.

A renamed metric or label would leave a panel silently empty; this test names the query instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Histogram

from extender.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "quorum" / "dashboards" / "quorum.json"
METRIC = re.compile(r"\bquorum_[a-z_]+\b")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")


def exported() -> dict[str, set[str]]:
    """Every sample name Quorum exports, with the labels it carries."""
    metrics = Metrics()
    metrics.track_state(lambda: {"Pending": 1}, lambda: {"pods": 1}, lambda: {"all": 1},
                        lambda: {"waiting": 1})
    names: dict[str, set[str]] = {}
    for item in vars(metrics).values():
        if isinstance(item, Counter):
            names[f"{item._name}_total"] = set(item._labelnames)
        elif isinstance(item, Histogram):
            labels = set(item._labelnames)
            names.update({f"{item._name}_bucket": labels | {"le"}, f"{item._name}_count": labels,
                          f"{item._name}_sum": labels})
    for family in metrics.registry.collect():
        if family.type == "gauge":
            names[family.name] = {label for sample in family.samples for label in sample.labels}
    return names


def queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in doc["panels"] for target in panel["targets"]]


def problems(doc: dict[str, Any], names: dict[str, set[str]]) -> list[str]:
    out = []
    for title, expr in queries(doc):
        used = METRIC.findall(expr)
        if not used:
            out.append(f"{title!r}: {expr} names no Quorum metric")
        missing = [m for m in used if m not in names]
        out += [f"{title!r}: {expr} asks for {m}, which Quorum does not export" for m in missing]
        labels = set().union(*(names.get(m, set()) for m in used))
        asked = {label.strip() for group in GROUPING.findall(expr) for label in group.split(",")}
        asked |= {m.split("=")[0].strip() for group in MATCHERS.findall(expr) for m in group.split(",")}
        asked.discard("")
        out += [f"{title!r}: {expr} uses label {label!r}, not one of {sorted(labels)}"
                for label in sorted(asked - labels)]
    return out


def test_every_dashboard_query_names_exported_metrics_and_labels() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert len(queries(doc)) >= 15
    assert problems(doc, exported()) == []


def test_a_query_for_a_missing_metric_or_label_is_reported() -> None:
    doc = {"panels": [{"title": "t", "targets": [
        {"expr": "sum by (outcome) (rate(quorum_binds_total[5m]))"},
        {"expr": "rate(quorum_no_such_thing_total[5m])"},
        {"expr": "sum by (colour) (quorum_gangs)"}]}]}
    found = problems(doc, exported())
    assert len(found) == 2
    assert "quorum_no_such_thing_total" in found[0] and "'colour'" in found[1]
