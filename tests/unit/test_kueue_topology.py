"""Levels from a Kueue Topology object, and the configuration that asks for one."""

from __future__ import annotations

import pytest

from extender.adapters.kueue_topology import levels_of
from extender.config import ConfigError, TopologyLevel, from_mapping


def topology(*labels: object) -> dict[str, object]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


def test_levels_are_named_after_their_labels_highest_first() -> None:
    assert levels_of(topology("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
                              "kubernetes.io/hostname"), "t") == (
        TopologyLevel("topology-block", "cloud.provider.com/topology-block"),
        TopologyLevel("topology-rack", "cloud.provider.com/topology-rack"),
        TopologyLevel("hostname", "kubernetes.io/hostname"))


def test_labels_ending_alike_keep_their_whole_name() -> None:
    levels = levels_of(topology("a.example/rack", "b.example/rack"), "t")
    assert [level.name for level in levels] == ["a.example/rack", "b.example/rack"]


@pytest.mark.parametrize("doc", [topology(), topology("x", "x"), topology(""), {"spec": None}])
def test_a_topology_without_usable_levels_is_a_config_error(doc: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="Topology 't'"):
        levels_of(doc, "t")


def test_config_names_the_topology_or_the_levels_not_both() -> None:
    assert from_mapping({"topology": {"kueueTopology": "t"}}).kueue_topology == "t"
    with pytest.raises(ConfigError, match="kueueTopology"):
        from_mapping({"topology": {"kueueTopology": "t", "levels": [{"nodeLabel": "x"}]}})
    with pytest.raises(ConfigError, match="kueueTopology"):
        from_mapping({"topology": {"kueueTopology": 3}})
