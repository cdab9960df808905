"""Hypothesis building blocks for structure-aware fuzzing of JSON documents: any JSON value, and
every path inside a document (where a mutation can land)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value, numbers up to the 64-bit edges, small containers."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=max_leaves,
    )


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key or index path inside ``doc`` (the document itself excluded)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += paths(value, (*prefix, i))
    return out
