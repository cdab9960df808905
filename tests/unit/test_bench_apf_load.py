"""The APF comparison's own pieces (bench/apf_load.py, bench/apf_ab.py): the load must land where
every controller's requests land (``service-accounts``, never Quorum's schema), its accounts must be
allowed what they list, and the figures must be the runs' own."""

from __future__ import annotations

from pathlib import Path

import yaml

from .bench_modules import bench_module

ROOT = Path(__file__).resolve().parents[2]


def test_the_load_is_made_of_accounts_quorums_flow_schema_does_not_match() -> None:
    apf_load = bench_module("apf_load")
    schema = yaml.safe_load((ROOT / "manifests" / "flowschema.yaml").read_text())
    matched = {(s["serviceAccount"]["namespace"], s["serviceAccount"]["name"])
               for rule in schema["spec"]["rules"] for s in rule["subjects"] if s["kind"] == "ServiceAccount"}
    accounts = [(apf_load.NAMESPACE, obj["metadata"]["name"])
                for _, obj in apf_load.setup_objects(3) if obj["kind"] == "ServiceAccount"]
    assert accounts == [("apf-load", "load-0"), ("apf-load", "load-1"), ("apf-load", "load-2")]
    assert not matched & set(accounts)
    assert all(ns != apf_load.NAMESPACE for ns, _ in matched)


def test_every_load_account_may_list_what_it_asks_for() -> None:
    apf_load = bench_module("apf_load")
    objects = dict((obj["kind"], obj) for _, obj in apf_load.setup_objects(2))
    binding, role = objects["ClusterRoleBinding"], objects["ClusterRole"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                    "name": "system:serviceaccounts:apf-load"}]
    assert {"nodes", "pods"} <= set(role["rules"][0]["resources"]) and "list" in role["rules"][0]["verbs"]


def test_percentile_is_the_nearest_rank() -> None:
    percentile = bench_module("apf_load").percentile
    values = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) == 0.0


def test_a_runs_row_carries_each_schemas_mean_wait() -> None:
    apf_ab = bench_module("apf_ab")
    run = {"workload": "W1", "pods_per_second": 60.0, "skew_p50_ms": 40.0, "skew_p99_ms": 500.0,
           "skew_max_ms": 700.0, "quorum_cpu_ms_per_pod": 4.0, "bound": 1800,
           "metrics": {"quorum": {"binds_failed": 12.0, "gang_binds": 59.0},
                       "kube-apiserver": {"apf_wait_quorum_sum": 0.0, "apf_wait_quorum_count": 0.0,
                                          "apf_wait_service_accounts_sum": 12.0,
                                          "apf_wait_service_accounts_count": 4000.0,
                                          "apf_wait_kube_scheduler_sum": 0.5,
                                          "apf_wait_kube_scheduler_count": 250.0}}}
    row = apf_ab.summarize("no-schema", 1, run, {"requests": 10})
    assert row["wait_quorum"] == [0, 0.0]  # no request classified there: no division by zero
    assert row["wait_service_accounts"] == [4000, 3.0]
    assert row["wait_kube_scheduler"] == [250, 2.0]
    assert (row["arm"], row["rep"], row["pods_per_second"]) == ("no-schema", 1, 60.0)
    assert row["load"] == {"requests": 10}
    assert (row["pods_bound"], row["binds_failed"], row["gang_binds"]) == (1800, 12, 59)
