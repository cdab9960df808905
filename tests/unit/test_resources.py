"""extender.cluster.resources: quantities and effective pod requests, counted like kube-scheduler."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest

from extender.cluster.resources import (
    MAX_UNITS,
    QuantityError,
    add,
    beyond_capacity,
    parse_quantity,
    parse_resource_list,
    pod_requests,
    subtract_into,
    sum_all,
    to_units,
)

from .fixtures import load

GiB = 2**30
MiB = 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        ("1.5", Decimal("1.5")),
        ("4Gi", Decimal(4 * GiB)),
        ("100Mi", Decimal(100 * MiB)),
        ("1Ki", Decimal(1024)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2k", Decimal(2000)),
        ("3M", Decimal(3_000_000)),
        ("64G", Decimal(64 * 10**9)),
        ("250u", Decimal("0.00025")),
        ("100n", Decimal("0.0000001")),
        ("1E", Decimal(10**18)),  # exa
        (" 2 ", Decimal(2)),
        (8, Decimal(8)),
        (0, Decimal(0)),
        (2.5, Decimal("2.5")),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "abc", "1.2.3", "Gi", "m", "12x", "1K", "4GiB", "--1", True, "NaN", "Infinity", "inf"],
)
def test_invalid_quantities_raise(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("name", "quantity", "units"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "0.1m", 1),  # rounded up like Quantity.MilliValue()
        ("cpu", 1.5, 1500),
        ("memory", "1.5", 2),  # rounded up like Quantity.Value()
        ("memory", "4Gi", 4 * GiB),
        ("nvidia.com/gpu", "8", 8),
        ("ephemeral-storage", "1k", 1000),
    ],
)
def test_to_units(name: str, quantity: str | float, units: int) -> None:
    assert to_units(name, quantity) == units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.", Decimal(1)),
        (".5", Decimal("0.5")),
        ("+2", Decimal(2)),
        ("1e+3", Decimal(1000)),
        ("1.5e-3", Decimal("0.0015")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("0.000000000001", Decimal("1e-9")),  # rounded up to the nano, like Kubernetes
        ("-0.000000000001", Decimal("-1e-9")),
        ("007", Decimal(7)),
        ("-0", Decimal(0)),
        (1e-5, Decimal("0.00001")),
    ],
)
def test_kubernetes_grammar_edges(text: str | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [".", "+", "1e", "e3", "1e3Ki", "1Ki3", "1.5.", "1 k", "\u0661", "1e1.5", "0x10", "1_000", [], None,
     "1e99999999999999999999", "1e-9223372036854775809"],
)
def test_syntax_kubernetes_rejects(text: Any) -> None:
    with pytest.raises(QuantityError):
        to_units("cpu", text)


# --------------------------------------------------------------------------- hostile quantities

CAP = Decimal(MAX_UNITS)


def short_id(value: object) -> str:
    """Test ids of a few characters, whatever the size of the hostile value."""
    if isinstance(value, int):
        return f"int{value.bit_length()}"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 24 else f"{text[:12]}..{len(text)}chars"


def timed(call: Any, *args: Any) -> Any:
    """Run ``call``; the bound only catches a freeze (the old code took ~25 s), it is no benchmark."""
    start = time.perf_counter()
    result = call(*args)
    assert time.perf_counter() - start < 0.5
    return result


@pytest.mark.parametrize(
    "quantity",
    ["1e999999", "1E999999", "1e9999999999999", "99999999999999999999999Ei", "9" * 100_000, 2**200, 1e308,
     "9223372036854775808", "1e" + "0" * 50_000 + "99"],
    ids=short_id,
)
def test_values_beyond_any_capacity_are_clamped(quantity: str | int | float) -> None:
    assert timed(parse_quantity, quantity) == CAP
    assert timed(to_units, "cpu", quantity) == MAX_UNITS
    assert timed(to_units, "memory", quantity) == MAX_UNITS
    assert beyond_capacity(parse_resource_list({"cpu": quantity, "memory": "1Gi"})) == ["cpu"]


def test_cpu_clamps_in_millicores() -> None:
    # 2**63 millicores is beyond the cap even though 2**63 / 1000 cores is not beyond it in cores.
    assert to_units("cpu", str(MAX_UNITS // 1000 + 1)) == MAX_UNITS
    assert to_units("cpu", str(MAX_UNITS // 1000)) == MAX_UNITS // 1000 * 1000
    assert beyond_capacity({"cpu": MAX_UNITS - 1, "memory": 1}) == []


@pytest.mark.parametrize(
    ("quantity", "units"),
    [("1e-999999", 1), ("1e-9223372036854775808", 1), ("0." + "0" * 200_000 + "1", 1),
     ("1." + "1" * 200_000, 2), ("0" * 200_000 + "5", 5), ("0e999999", 0), ("0.0e9999999999999", 0)],
    ids=short_id,
)
def test_tiny_or_long_values_round_up_exactly(quantity: str, units: int) -> None:
    assert timed(to_units, "memory", quantity) == units


@pytest.mark.parametrize("quantity", ["-1e999999", "-1", "-500m", -2**200, "-1e-999999", "-" + "9" * 100_000],
                         ids=short_id)
def test_negative_quantities_are_invalid(quantity: str | int) -> None:
    with pytest.raises(QuantityError, match="negative") as caught:
        timed(to_units, "cpu", quantity)
    assert len(str(caught.value)) < 100  # a hostile value is not copied into logs whole


def test_huge_negative_integer_is_invalid() -> None:
    with pytest.raises(QuantityError, match="negative"):
        timed(to_units, "cpu", -(10**100_000))


def test_long_fractions_round_up_exactly_with_binary_suffixes() -> None:
    # The digits far below a unit are folded into one flag; the result stays the exact ceiling.
    assert to_units("memory", "0.0009765625Ki") == 1  # exactly one byte
    assert to_units("memory", "0.0009765625" + "0" * 5000 + "Ki") == 1
    assert to_units("memory", "0.0009765625" + "0" * 5000 + "1Ki") == 2
    assert to_units("memory", "0.9999999999999999999999999999Ei") == 2**60
    assert to_units("memory", "1." + "0" * 80 + "1Ei") == 2**60 + 1


def test_parse_resource_list() -> None:
    assert parse_resource_list({"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}) == {
        "cpu": 64000, "memory": 512 * GiB, "pods": 110, "nvidia.com/gpu": 8}
    assert parse_resource_list(None) == {}
    assert parse_resource_list({}) == {}


# --------------------------------------------------------------------------- pod_requests


def container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example.com/x:1", "resources": resources, **extra}


def test_recorded_gang_member() -> None:
    spec = load("pod_gang_member.json")["spec"]
    assert pod_requests(spec) == {"cpu": 8000, "memory": 64 * GiB, "nvidia.com/gpu": 2}


def test_containers_are_summed() -> None:
    spec = {"containers": [
        container("a", {"cpu": "1", "memory": "1Gi"}),
        container("b", {"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": "1"}),
    ]}
    assert pod_requests(spec) == {"cpu": 1500, "memory": GiB + 512 * MiB, "nvidia.com/gpu": 1}


def test_init_containers_count_as_the_maximum() -> None:
    spec = {
        "initContainers": [
            container("fetch", {"cpu": "4", "memory": "256Mi"}),
            container("warm", {"cpu": "1", "memory": "8Gi"}),
        ],
        "containers": [container("main", {"cpu": "2", "memory": "1Gi"})],
    }
    # cpu: max(2, 4, 1) = 4; memory: max(1Gi, 256Mi, 8Gi) = 8Gi.
    assert pod_requests(spec) == {"cpu": 4000, "memory": 8 * GiB}


def test_restartable_init_containers_are_added() -> None:
    spec = {
        "initContainers": [
            container("proxy", {"cpu": "500m", "memory": "128Mi"}, restartPolicy="Always"),
            container("migrate", {"cpu": "3", "memory": "64Mi"}),
        ],
        "containers": [container("main", {"cpu": "2", "memory": "1Gi"})],
    }
    # Running: main + sidecar = 2.5 cpu. While "migrate" runs, the sidecar already runs: 3 + 0.5 = 3.5.
    assert pod_requests(spec) == {"cpu": 3500, "memory": GiB + 128 * MiB}


def test_sidecar_started_after_an_init_container_does_not_add_to_its_peak() -> None:
    spec = {
        "initContainers": [
            container("migrate", {"cpu": "3"}),
            container("proxy", {"cpu": "1"}, restartPolicy="Always"),
        ],
        "containers": [container("main", {"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 3000}


def test_overhead_is_added() -> None:
    spec = {
        "containers": [container("main", {"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert pod_requests(spec) == {"cpu": 1250, "memory": GiB + 120 * MiB}


def test_limits_only_container_defaults_requests_to_limits() -> None:
    spec = {"containers": [container("main", limits={"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 2000, "memory": 4 * GiB, "nvidia.com/gpu": 1}


def test_gpu_in_limits_only_is_counted_next_to_cpu_requests() -> None:
    # The usual GPU manifest: requests for cpu/memory, the GPU only under limits. The apiserver
    # defaults each missing request from its limit, so the GPU is requested too.
    spec = {"containers": [container("main", requests={"cpu": "4", "memory": "16Gi"},
                                     limits={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"})]}
    assert pod_requests(spec) == {"cpu": 4000, "memory": 16 * GiB, "nvidia.com/gpu": 2}


def test_extended_resource_counted() -> None:
    spec = {"containers": [container("a", {"nvidia.com/gpu": "8"}), container("b", {"nvidia.com/gpu": "0"})]}
    assert pod_requests(spec) == {"nvidia.com/gpu": 8}


def test_container_without_resources_requests_nothing() -> None:
    assert pod_requests({"containers": [{"name": "a", "image": "x"}, container("b")]}) == {}
    assert pod_requests({}) == {}


def test_pod_level_requests_win_for_cpu_and_memory() -> None:
    spec = {
        "resources": {"requests": {"cpu": "6", "memory": "24Gi"}},
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"}), container("b", {"cpu": "1"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": 6100, "memory": 24 * GiB}


def test_pod_level_requests_keep_container_extended_resources() -> None:
    # Pod-level resources cover cpu, memory and hugepages only; kube-scheduler still takes every
    # other resource (here the GPUs) from the containers.
    spec = {
        "resources": {"requests": {"cpu": "6", "memory": "24Gi"}},
        "containers": [container("trainer", {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "4"})],
    }
    assert pod_requests(spec) == {"cpu": 6000, "memory": 24 * GiB, "nvidia.com/gpu": 4}


# --------------------------------------------------------------------------- arithmetic


def test_add_and_subtract() -> None:
    a = {"cpu": 1000, "memory": GiB}
    b = {"cpu": 500, "nvidia.com/gpu": 1}
    total = add(a, b)
    assert total == {"cpu": 1500, "memory": GiB, "nvidia.com/gpu": 1}
    assert a == {"cpu": 1000, "memory": GiB}  # inputs untouched
    subtract_into(total, b)
    assert total == a  # entries that reach zero are dropped
    assert sum_all([a, b, b]) == {"cpu": 2000, "memory": GiB, "nvidia.com/gpu": 2}


def test_parsed_quantities_are_remembered_but_the_memory_stays_bounded() -> None:
    from extender.cluster import resources

    assert resources.to_units("cpu", "250m") == 250
    assert resources._PARSED[(True, "250m")] == 250  # the second pod with this value skips the parse
    assert resources.to_units("memory", "250m") == 1  # same text, other resource: its own entry
    for i in range(resources._PARSED_LIMIT * 3):
        resources.to_units("memory", f"{i}Ki")
    assert len(resources._PARSED) <= resources._PARSED_LIMIT
    assert resources.to_units("memory", "7Ki") == 7 * 1024  # still right after a flush


def test_a_deeply_nested_quantity_is_refused_without_rendering_it() -> None:
    from extender.cluster.resources import QuantityError, to_units

    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(QuantityError, match="<list>"):
        to_units("cpu", nested)  # type: ignore[arg-type]


def test_the_opt_in_member_resource_is_no_request() -> None:
    # Members-only mode: gang members ask for quorum.dev/member so that kube-scheduler consults
    # Quorum about them; no node offers it and kube-scheduler ignores it, so Quorum must as well.
    container = {"resources": {"limits": {"quorum.dev/member": "1", "nvidia.com/gpu": "2"},
                               "requests": {"cpu": "1"}}}
    assert pod_requests({"containers": [container]}) == {"cpu": 1000, "nvidia.com/gpu": 2}
