"""extender.cluster.dra.cel: DRA CEL selectors evaluated against ResourceSlice devices."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.dra import cel as device_cel
from extender.cluster.dra.cel import (
    MAX_EXPRESSION_LENGTH,
    SELECTORS,
    Compiled,
    SelectorCache,
    all_match,
    device_data,
)

DRIVER = "gpu.example.com"
GiB = 2**30


def gpu(**extra_attributes: Any) -> dict[str, Any]:
    """A v1 ResourceSlice device of DRIVER with attributes of every kind and two capacities."""
    attributes = {
        "model": {"string": "a100"},
        "cores": {"int": 108},
        "mig": {"bool": True},
        "driverVersion": {"version": "1.2.3-rc.1"},
        "pci.example.com/slot": {"int": 3},
        **extra_attributes,
    }
    capacity = {"memory": {"value": "80Gi"}, "net.example.com/bandwidth": {"value": "1.5"}}
    return device_data(DRIVER, attributes, capacity)


def match(expression: str, device: dict[str, Any] | None = None) -> bool | str:
    return SelectorCache().matches(expression, gpu() if device is None else device)


def assert_error(result: bool | str, *fragments: str) -> None:
    assert isinstance(result, str), result
    assert result.startswith("cannot be evaluated: ")
    assert len(result) <= 120
    for fragment in fragments:
        assert fragment in result


def test_device_data_splits_qualified_names_and_keeps_quantities_in_milli_units() -> None:
    data = gpu()
    assert data["driver"] == DRIVER
    assert data["attributes"] == {
        DRIVER: {"model": "a100", "cores": 108, "mig": True, "driverVersion": "1.2.3-rc.1"},
        "pci.example.com": {"slot": 3},
    }
    assert data["capacity"] == {DRIVER: {"memory": 80 * GiB * 1000}, "net.example.com": {"bandwidth": 1500}}


def test_device_data_leaves_out_entries_the_apiserver_would_refuse() -> None:
    data = device_data(
        DRIVER,
        {"empty": {}, "flag": {"bool": "yes"}, "n": {"int": True}, "huge": {"int": 2**64}, "ok": {"int": 1}},
        {"bad": {"value": "lots"}, "none": {}, "b": {"value": True}, "ok": {"value": "1E"}},
    )
    assert data["attributes"] == {DRIVER: {"ok": 1}}
    assert data["capacity"] == {DRIVER: {"ok": 2**63 - 1}}  # 1E = 1e21 milli, clamped to int64


def test_driver_match() -> None:
    assert match(f'device.driver == "{DRIVER}"') is True
    assert match('device.driver == "nic.example.com"') is False


def test_bare_names_belong_to_the_driver_domain_and_qualified_ones_to_their_own() -> None:
    assert match(f'device.attributes["{DRIVER}"].model == "a100"') is True
    assert match('device.attributes["pci.example.com"].slot == 3') is True
    assert match(f'"slot" in device.attributes["{DRIVER}"]') is False
    assert match('"model" in device.attributes["pci.example.com"]') is False


def test_attribute_kinds() -> None:
    attrs = f'device.attributes["{DRIVER}"]'
    assert match(f"{attrs}.cores > 100 && {attrs}.cores < 200") is True
    assert match(f"{attrs}.cores == 107") is False
    assert match(f"{attrs}.mig") is True
    assert match(f"!{attrs}.mig") is False
    assert match(f'{attrs}.model.startsWith("a1")') is True
    assert match(f'{attrs}.driverVersion == "1.2.3-rc.1"') is True


def test_version_attributes_compare_in_semver_order() -> None:
    version = f'device.attributes["{DRIVER}"].driverVersion'
    assert match(f'{version}.isLessThan(semver("1.2.3"))') is True  # a prerelease precedes its release
    assert match(f'{version}.isGreaterThan(semver("1.2.3-beta.9"))') is True  # "rc" > "beta"
    assert match(f'{version}.compareTo(semver("1.2.3-rc.1+build.5")) == 0') is True  # build ignored
    assert match(f'{version}.isGreaterThan(semver("1.10.0"))') is False  # numeric, not lexical
    assert match(f"{version}.major() == 1 && {version}.minor() == 2 && {version}.patch() == 3") is True
    assert match('isSemver("1.2.3") && !isSemver("1.2") && !isSemver("01.2.3")') is True
    assert_error(match('semver("v1") == ""'), "invalid semantic version 'v1'")


def test_capacity_compared_with_quantities() -> None:
    memory = f'device.capacity["{DRIVER}"].memory'
    assert match(f'{memory}.compareTo(quantity("40Gi")) > 0') is True
    assert match(f'{memory}.compareTo(quantity("80Gi")) == 0') is True
    assert match(f'{memory}.compareTo(quantity("81Gi")) < 0') is True
    assert match(f'{memory}.isGreaterThan(quantity("40Gi"))') is True
    assert match(f'{memory}.isLessThan(quantity("40Gi"))') is False
    assert match(f'quantity("40Gi").isLessThan({memory})') is True
    assert match(f'{memory} >= quantity("80Gi")') is True  # plain operators work on the int form


def test_quantities_are_exact_to_the_milli_unit() -> None:
    assert match('quantity("1.5") == quantity("1500m")') is True
    assert match('quantity("1.5") == quantity("1501m")') is False
    assert match('device.capacity["net.example.com"].bandwidth == quantity("1500m")') is True
    assert match('quantity("1Ki") == quantity("1024")') is True


def test_quantity_library() -> None:
    assert match('quantity("1.5").add(quantity("500m")) == quantity("2")') is True
    assert match('quantity("2").sub(quantity("3")).sign() == -1') is True
    assert match('quantity("4k").asInteger() == 4000') is True
    assert match('quantity("1.5").isInteger() || !quantity("2").isInteger()') is False
    assert match('quantity("1.5").asApproximateFloat() == 1.5') is True
    assert match('quantity("0").sign() == 0 && quantity("3m").sign() == 1') is True
    assert match('isQuantity("8Gi") && !isQuantity("8 GB")') is True
    assert_error(match('quantity("1.5").asInteger() == 1'), "not an integer")
    assert_error(match('quantity("8 GB") == 0'), "invalid quantity")


def test_missing_key_is_an_error_string_not_an_exception() -> None:
    assert_error(match('device.attributes["other.example.com"].x == 1'), "not found", '"x"')
    assert_error(match(f'device.attributes["{DRIVER}"].nope == 1'), '"nope"')
    assert_error(match("device.attributes.other == {}"), '"other"')


def test_a_domain_without_attributes_is_an_empty_map_like_in_kubernetes() -> None:
    assert match('device.attributes["other.example.com"].size() == 0') is True
    assert match("'x' in device.capacity['other.example.com']") is False
    assert match(f'has(device.attributes["{DRIVER}"].model)') is True


def test_syntax_error() -> None:
    assert_error(match("device.driver =="), "1:17", "Syntax error")


def test_unknown_function() -> None:
    assert_error(match("gpus(device) > 2"), "undeclared reference to 'gpus'")
    assert_error(match('device.driver.frobnicate("x")'), "frobnicate")


def test_type_error_at_compile() -> None:
    assert_error(match('1 + "a" == 2'), "no matching overload")


def test_a_result_that_is_not_bool_is_an_error() -> None:
    assert_error(match("1 + 2"), "must evaluate to bool, not int")  # known when type-checking
    assert_error(match("device.driver"), "result is string, not bool")  # known only when evaluated


def test_huge_expressions_are_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(expression: str) -> Compiled | str:
        raise AssertionError("parsed")

    monkeypatch.setattr(device_cel, "_compile", parse)
    huge = "true && " * (MAX_EXPRESSION_LENGTH // 8) + "true"
    assert len(huge) > MAX_EXPRESSION_LENGTH
    assert_error(SelectorCache().matches(huge, gpu()), f"longer than {MAX_EXPRESSION_LENGTH}")


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 500 + "true" + ")" * 500,
        "[" * 500 + "]" * 500 + " == []",
        "1" + " + 1" * 2000 + " > 0",
        "[" + ",".join(["0"] * 200) + "].all(x, [" + ",".join(["0"] * 200) + "].all(y, true))",
        "\ud800 == ''",
        "\x00",
        "",
    ],
    ids=["parens", "lists", "sum", "nested-loops", "surrogate", "nul", "empty"],
)
def test_hostile_expressions_give_a_reason_and_never_raise(expression: str) -> None:
    assert_error(match(expression))


def test_nested_comprehensions_stop_at_the_iteration_budget() -> None:
    loop = "[" + ",".join(["0"] * 200) + "]"
    assert_error(match(f"{loop}.all(x, {loop}.all(y, true))"), "Iteration budget exceeded")
    assert match(f"{loop}.all(x, x == 0)") is True  # a modest loop is fine


def test_bad_inputs_never_raise() -> None:
    cache = SelectorCache()
    assert_error(cache.matches(42, gpu()), "int, not a string")  # type: ignore[arg-type]
    assert_error(cache.matches("device.driver == 'x'", 5), "non-message")  # type: ignore[arg-type]
    assert_error(cache.matches("device.n == 1", {"n": (1,)}))


def test_bind_and_string_extensions_are_available() -> None:
    assert match(f'cel.bind(g, device.attributes["{DRIVER}"], g.cores == 108 && g.mig)') is True
    assert match(f'device.attributes["{DRIVER}"].model.upperAscii() == "A100"') is True


def test_compile_happens_once_per_distinct_expression(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = device_cel._compile

    def counting(expression: str) -> Compiled | str:
        calls.append(expression)
        return real(expression)

    monkeypatch.setattr(device_cel, "_compile", counting)
    cache = SelectorCache()
    first = cache.compile("device.driver == 'a'")
    assert isinstance(first, Compiled)
    assert cache.compile("device.driver == 'a'") is first
    for _ in range(3):
        assert cache.matches("device.driver == 'a'", gpu()) is False
        assert_error(cache.matches("device.driver ==", gpu()))  # a refusal is cached too
    assert calls == ["device.driver == 'a'", "device.driver =="]


def test_cache_is_bounded_by_entries_and_by_characters() -> None:
    cache = SelectorCache(limit=3)
    for n in range(3):
        cache.compile(f"device.attributes.size() == {n}")
    assert len(cache) == 3
    cache.compile("device.attributes.size() == 3")
    assert len(cache) == 1  # cleared when full, then the new entry added
    by_chars = SelectorCache(max_chars=100)
    by_chars.compile("true || " * 10 + "true")  # 84 characters
    by_chars.compile("false || " * 2 + "true")  # 22 more: over the budget
    assert len(by_chars) == 1


def test_all_match_needs_every_selector_and_reports_the_first_failure() -> None:
    device = gpu()
    ok = f'device.driver == "{DRIVER}"'
    fractional = 'device.capacity["net.example.com"].bandwidth.isInteger() == false'
    assert all_match([ok, fractional], device) is True
    assert all_match([ok, "false", "device.driver =="], device) is False
    first = all_match([ok, "device.attributes.nope == 1", "device.driver =="], device)
    assert_error(first, '"nope"')
    assert all_match([], device) is True
    assert SELECTORS.all_match((ok,), device) is True
