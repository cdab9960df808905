"""No field of GangState is written by more than one module of the gang core, and every field
is used by more than one (what one part alone uses lives in that part's table).

A gang's shared fields change only through the registry's writers (``gang/state.py``); a field
one part uses is written by that part alone. Found by reading the source: a write is an assignment
or augmented assignment to ``x.field`` (also ``x.field[k] = ...`` and ``del x.field[k]``), a
mutating call on it (``.add``, ``.discard``, ``.clear``, ``.pop``, ``.update``, ...) or
``setattr(x, "field", ...)``, on any receiver but ``self``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

GANG = Path(__file__).resolve().parents[2] / "extender" / "gang"
MUTATORS = frozenset({"add", "discard", "clear", "pop", "popitem", "update", "remove", "setdefault",
                      "append", "extend", "difference_update", "intersection_update", "insert"})


def gang_state_fields(source: str) -> list[str]:
    """The fields declared on ``class GangState`` in state.py."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "GangState":
            return [item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    raise LookupError("class GangState not found")


def _field_of(node: ast.expr, fields: frozenset[str]) -> str | None:
    """The field ``node`` names as ``x.field`` (or ``x.field[...]``), x not ``self``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in fields:
        receiver = node.value
        if not (isinstance(receiver, ast.Name) and receiver.id == "self"):
            return node.attr
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        out: list[ast.expr] = []
        for target in node.targets:
            out.extend(target.elts if isinstance(target, ast.Tuple) else [target])
        return out
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def written_fields(source: str, fields: frozenset[str]) -> set[str]:
    """The GangState fields one module writes."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            field = _field_of(target, fields)
            if field is not None:
                out.add(field)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            field = _field_of(node.func.value, fields)
            if field is not None:
                out.add(field)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in fields:
            out.add(str(node.args[1].value))
    return out


def writers(gang: Path = GANG) -> dict[str, list[str]]:
    """GangState field -> the modules (file stems) that write it, for every field."""
    fields = frozenset(gang_state_fields((gang / "state.py").read_text()))
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(gang.glob("*.py")):
        for field in written_fields(path.read_text(), fields):
            found[field].add(path.stem)
    return {field: sorted(found.get(field, ())) for field in sorted(fields)}


def test_every_gang_state_field_has_at_most_one_writer_module() -> None:
    table = writers()
    shared = {field: modules for field, modules in table.items() if len(modules) > 1}
    assert shared == {}, "\n".join(f"{field}: {', '.join(modules)}" for field, modules in shared.items())


def test_the_registry_alone_changes_phase_reason_held_binds_and_backoff() -> None:
    table = writers()
    for field in ("phase", "reason", "held", "backoff_until"):
        assert table[field] == ["state"], (field, table[field])


def users(gang: Path = GANG) -> dict[str, list[str]]:
    """GangState field -> the modules that read or write it as ``x.field`` (x not ``self``)."""
    fields = frozenset(gang_state_fields((gang / "state.py").read_text()))
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(gang.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            field = _field_of(node, fields) if isinstance(node, ast.Attribute) else None
            if field is not None:
                found[field].add(path.stem)
    return {field: sorted(found.get(field, ())) for field in sorted(fields)}


# Fields one module uses that stay on GangState all the same, and why.
ONE_USER = {
    # Set by the registry when it creates the gang (a constructor argument, not an attribute):
    # a part's table would only learn it later, on its first look.
    "first_seen": "binding",
    # Changed only through the registry's writer ``count_replan`` (the coordinator calls it).
    "replans": "state",
}


def test_gang_state_keeps_only_what_several_parts_use() -> None:
    """A field one part alone uses belongs in that part's table (``GangRegistry.table``)."""
    table = users()
    alone = {field: modules[0] for field, modules in table.items() if len(modules) == 1}
    assert alone == ONE_USER


def test_the_reader_sees_every_kind_of_write() -> None:
    fields = frozenset({"a", "b", "c", "d", "e", "f"})
    source = (
        "def f(state, self):\n"
        "    state.a = 1\n"
        "    state.b += 1\n"
        "    state.c.add(1)\n"
        "    state.d[1] = 2\n"
        "    setattr(state, 'e', None)\n"
        "    self.f = 1\n"
        "    print(state.f)\n"
    )
    assert written_fields(source, fields) == {"a", "b", "c", "d", "e"}
