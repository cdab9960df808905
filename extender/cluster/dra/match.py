"""Which devices a request's selectors pick: the one place CEL is evaluated on devices.

Real drivers give every device its own uuid, so a device is described by a signature of its driver,
attributes and capacity, and identical devices share it. A selector usually reads only a few fields
(a model, a memory size): devices alike in those fields share one evaluation as well. Results are
remembered until a DeviceClass changes (a class's selectors are part of every request's).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import orjson

from .cel import Field, SelectorCache, device_data, fields_read, project_raw
from .demand import Choice, DeviceKind, Request, field_of

_MEMO_LIMIT = 1 << 20  # selector results and device variables kept; rebuilt after a clear


class DeviceCatalog:
    def __init__(self) -> None:
        self.selectors = SelectorCache()
        self.classes: dict[str, tuple[str, ...]] = {}  # DeviceClass name -> its selectors
        # signature -> (driver, attributes, capacity) of the devices that have it, and how many do
        self._raw: dict[str, list[Any]] = {}
        self._data: dict[str, dict[str, Any]] = {}  # signature -> the CEL ``device`` variable
        self._unencodable = 0
        self._match: dict[tuple[str, str], bool] = {}  # (choice.selects, device signature)
        self._fields: dict[str, tuple[Field, ...] | None] = {}  # choice.selects -> fields read
        self._projected: dict[tuple[str, object], bool] = {}
        self._checked: dict[str, str] = {}  # kind key -> why it cannot be counted ("" when it can)

    # --- devices -------------------------------------------------------------------------
    def signature(self, driver: str, device: Mapping[str, Any]) -> str:
        """Hold one more device; identical devices share one signature."""
        attributes, capacity = field_of(device, "attributes"), field_of(device, "capacity")
        try:
            signature = orjson.dumps([driver, attributes, capacity], option=orjson.OPT_SORT_KEYS).decode()
        except (orjson.JSONEncodeError, TypeError):  # keys or numbers JSON cannot hold: alike only to itself
            self._unencodable += 1
            signature = f"{driver}\0#{self._unencodable}"
        held = self._raw.get(signature)
        if held is None:
            self._raw[signature] = [(driver, attributes, capacity), 1]
        else:
            held[1] += 1
        return signature

    def forget(self, signature: str) -> None:
        """Let go of one device of this signature."""
        held = self._raw.get(signature)
        if held is not None:
            held[1] -= 1
            if held[1] <= 0:
                del self._raw[signature]
                self._data.pop(signature, None)

    def _device(self, signature: str) -> dict[str, Any]:
        """The CEL ``device`` variable, built only for devices a selector is evaluated on."""
        data = self._data.get(signature)
        if data is None:
            if len(self._data) > _MEMO_LIMIT:
                self._data.clear()
            data = self._data[signature] = device_data(*self._raw[signature][0])
        return data

    # --- DeviceClasses -------------------------------------------------------------------
    def set_class(self, name: str, selectors: tuple[str, ...]) -> bool:
        """Whether this changed what any request selects."""
        if self.classes.get(name) == selectors:
            return False
        self.classes[name] = selectors
        self._classes_moved()
        return True

    def drop_class(self, name: str) -> bool:
        if self.classes.pop(name, None) is None:
            return False
        self._classes_moved()
        return True

    def _classes_moved(self) -> None:
        self._match.clear()
        self._fields.clear()
        self._projected.clear()
        self._checked.clear()

    # --- requests ------------------------------------------------------------------------
    def forget_kind(self, key: str) -> None:
        self._checked.pop(key, None)

    def check(self, request: Request) -> Request:
        """The request, or why it cannot be counted: a class not seen, a selector that cannot compile."""
        if request.kind is None:
            return request
        why = self._checked.get(request.kind.key)
        if why is None:
            why = ""
            for choice in request.kind.choices:
                classes = self.classes.get(choice.class_name)
                if classes is None:
                    why = f"DeviceClass {choice.class_name[:100]} not found"
                    break
                for expression in (*classes, *choice.selectors):
                    compiled = self.selectors.compile(expression)
                    if isinstance(compiled, str):
                        why = f"a selector of {choice.class_name[:100]} {compiled}"
                        break
                if why:
                    break
            self._checked[request.kind.key] = why
        return Request(None, request.amount, why) if why else request

    def matches(self, choice: Choice, signature: str) -> bool:
        """Whether the choice's class and own selectors all pick devices of this signature."""
        known = self._match.get((choice.selects, signature))
        if known is None:
            if choice.selects not in self._fields:
                expressions = (*self.classes.get(choice.class_name, ()), *choice.selectors)
                self._fields[choice.selects] = fields_read(expressions)
            fields = self._fields[choice.selects]
            driver, attributes, capacity = self._raw[signature][0]
            projected = project_raw(driver, attributes, capacity, fields) if fields is not None else None
            key = (choice.selects, signature if projected is None else projected)
            known = self._projected.get(key)
            if known is None:
                if len(self._projected) > _MEMO_LIMIT or len(self._match) > _MEMO_LIMIT:
                    self._projected.clear()
                    self._match.clear()
                expressions = (*self.classes.get(choice.class_name, ()), *choice.selectors)
                result = self.selectors.all_match(expressions, self._device(signature))
                known = self._projected[key] = result is True  # an expression that fails selects nothing
            self._match[(choice.selects, signature)] = known
        return known

    def requests_served(self, kind: DeviceKind, devices: Collection[str], free: list[str]) -> int:
        """How many requests of a kind a node with ``devices`` (``free`` of them unallocated; device
        signatures) serves, as kube-scheduler would give them one after another: each takes the first
        choice that still fits. Devices taken for one choice are assumed gone for all (exact for
        choices of one class, cautious for overlapping ones)."""
        left = [(choice, self._available(choice, devices, free)) for choice in kind.choices]
        served = 0
        while True:
            taken = next((c.count if not c.all_devices else n for c, n in left if n and n >= c.count), 0)
            if not taken:
                return served
            served += 1
            left = [(c, n - taken) for c, n in left]

    def _available(self, choice: Choice, devices: Collection[str], free: list[str]) -> int:
        """Free devices a choice matches; for an "all devices" choice, every one it matches or none."""
        available = sum(1 for sig in free if self.matches(choice, sig))
        if choice.all_devices:
            matching = sum(1 for sig in devices if self.matches(choice, sig))
            return available if matching and available == matching else 0
        return available
