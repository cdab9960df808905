"""Fail on any function of extender/ over cyclomatic complexity 15, or any module over 400 lines.

Complexity is counted by radon, the way reviewers count it: every ``and``/``or`` is a branch, which
ruff's mccabe check (C901) does not count. Nested functions and methods of nested classes are
checked on their own, like any other function.

Usage: python hack/check-complexity.py [PACKAGE_DIR ...]   (default: extender)
Prints one line per offender and exits 1 when there is any, else prints a one-line summary.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from radon.visitors import Class, ComplexityVisitor, Function

MAX_COMPLEXITY = 15
MAX_MODULE_LINES = 400
ROOT = Path(__file__).resolve().parent.parent


def _functions(blocks: list[Function] | list[Class]) -> Iterator[Function]:
    """Every function radon found, with closures, methods and the methods of inner classes."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _functions(list(block.methods) + list(block.inner_classes))
        else:
            yield block
            yield from _functions(list(block.closures))


def offences(path: Path) -> list[str]:
    """What is wrong with one module, one line per function or length found too large."""
    source = path.read_text(encoding="utf-8")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{shown}: {lines} lines (max {MAX_MODULE_LINES})")
    visitor = ComplexityVisitor.from_code(source)
    for function in [*_functions(visitor.functions), *_functions(visitor.classes)]:
        if function.complexity > MAX_COMPLEXITY:
            found.append(
                f"{shown}:{function.lineno} {function.fullname}: "
                f"cyclomatic complexity {function.complexity} (max {MAX_COMPLEXITY})"
            )
    return found


def main(argv: list[str]) -> int:
    packages = [Path(arg).resolve() for arg in argv] or [ROOT / "extender"]
    modules = sorted(module for package in packages for module in package.rglob("*.py"))
    found = [line for module in modules for line in offences(module)]
    for line in found:
        print(line)
    if found:
        print(
            f"check-complexity: {len(found)} offender(s) in {len(modules)} modules "
            f"(radon cyclomatic complexity <= {MAX_COMPLEXITY}, modules <= {MAX_MODULE_LINES} lines)",
            file=sys.stderr,
        )
        return 1
    print(f"check-complexity: {len(modules)} modules, every function <= {MAX_COMPLEXITY}, "
          f"every module <= {MAX_MODULE_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
