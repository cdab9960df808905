"""Loading a full list into a table of the cache: the one way every kind takes a relist.

A fresh start, or a watch that ended with 410 Gone, gives the whole list again. Objects gone since
are deleted first, so the indexes built on them let go; then each listed object is upserted on its
own, and one the table cannot take is handed back with its error instead of stopping the others
(the informer logs and counts it; the object keeps its last good record, if any).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

# An object a relist could not take, and why; the others are loaded all the same.
Rejected = tuple[Any, Exception]

T = TypeVar("T")


def relist(objs: Iterable[T], key: Callable[[T], str], known: Iterable[str],
           delete: Callable[[str], None], upsert: Callable[[T], None]) -> list[Rejected]:
    """Delete each of ``known`` that ``objs`` no longer has (by ``key``), then upsert every object."""
    fresh = list(objs)
    listed = {key(obj) for obj in fresh}
    for gone in [k for k in known if k not in listed]:
        delete(gone)
    rejected: list[Rejected] = []
    for obj in fresh:
        try:
            upsert(obj)
        except Exception as exc:  # any object the table cannot take: reported by the caller
            rejected.append((obj, exc))
    return rejected


def meta_field(obj: Any, field: str) -> str:
    """One metadata field of an object of any shape ("" when absent), for keying a relist."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get(field) or "") if isinstance(meta, dict) else ""
