"""The cluster benchmark's API Priority and Fairness figures (bench/cb_procs.py): each FlowSchema's
queue wait is read from the apiserver's scrape by its exact name, so Quorum's schema is never
summed with another whose name starts the same, and every counted series is a real one."""

from __future__ import annotations

from .bench_modules import bench_module

WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"


def sample(name: str, labels: str, value: float) -> str:
    return f"{name}{{{labels}}} {value}"


SCRAPE = "\n".join([
    f"# HELP {WAIT} [BETA] Length of time a request spent waiting in its queue",
    f"# TYPE {WAIT} histogram",
    sample(f"{WAIT}_bucket", 'execute="true",flow_schema="quorum",priority_level="workload-high",le="1"', 4),
    sample(f"{WAIT}_sum", 'execute="true",flow_schema="quorum",priority_level="workload-high"', 0.25),
    sample(f"{WAIT}_count", 'execute="true",flow_schema="quorum",priority_level="workload-high"', 50),
    sample(f"{WAIT}_sum", 'execute="false",flow_schema="quorum",priority_level="workload-high"', 0.5),
    sample(f"{WAIT}_count", 'execute="false",flow_schema="quorum",priority_level="workload-high"', 1),
    sample(f"{WAIT}_sum", 'execute="true",flow_schema="quorum-other",priority_level="workload-high"', 9),
    sample(f"{WAIT}_sum", 'execute="true",flow_schema="service-accounts",priority_level="workload-low"', 3),
    sample(f"{WAIT}_count", 'execute="true",flow_schema="service-accounts",priority_level="workload-low"', 6),
    sample("apiserver_flowcontrol_request_execution_seconds_sum",
           'flow_schema="kube-scheduler",priority_level="workload-high",type="create"', 7),
])


def test_each_flow_schemas_wait_is_its_own() -> None:
    cb_procs = bench_module("cb_procs")
    figures = cb_procs._sum_series(SCRAPE, cb_procs.APISERVER_SERIES)
    assert figures == {
        "apf_wait_quorum_sum": 0.75, "apf_wait_quorum_count": 51.0,  # executed or not, never quorum-other
        "apf_wait_service_accounts_sum": 3.0, "apf_wait_service_accounts_count": 6.0,
        "apf_wait_kube_scheduler_sum": 0.0, "apf_wait_kube_scheduler_count": 0.0,  # execution, not wait
        "apf_wait_kube_system_accounts_sum": 0.0, "apf_wait_kube_system_accounts_count": 0.0,
    }
