"""Per-test outcome table from a pytest JUnit XML report, for hack/regressions-on-old-code.sh.

A regression test proves its defect on old code only if it fails there by an assertion about
behaviour. A failure by any other exception (ImportError, AttributeError, a crash in the harness)
says nothing about the defect, so it is reported apart as an error.

    python hack/lib/junit_table.py REPORT.xml --expect fail|pass

Exits 0 when every test came out as expected (all failed by assertion, or all passed).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass

PASS = "PASS"
ASSERTION = "FAIL (assertion)"


@dataclass(frozen=True)
class Outcome:
    test: str
    result: str  # PASS, FAIL (assertion), ERROR (<exception type>), SKIPPED
    detail: str


def exception_type(report: str) -> str:
    """The exception named by pytest's last report line ("tests/x.py:12: AssertionError")."""
    lines = [line for line in report.strip().splitlines() if line.strip()]
    return lines[-1].rsplit(": ", 1)[-1].strip() if lines else ""


def outcome_of(case: ET.Element) -> Outcome:
    """What happened to one <testcase>: passed, failed by assertion, or errored."""
    name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '')}"
    for tag in ("failure", "error"):
        found = case.find(tag)
        if found is not None:
            message = (found.get("message") or "").strip()
            kind = exception_type(found.text or "") or tag
            first_line = message.splitlines()[0] if message else ""
            if tag == "failure" and kind == "AssertionError":
                return Outcome(name, ASSERTION, first_line)
            return Outcome(name, f"ERROR ({kind})", first_line)
    if case.find("skipped") is not None:
        return Outcome(name, "SKIPPED", "")
    return Outcome(name, PASS, "")


def outcomes(report: str) -> list[Outcome]:
    return [outcome_of(case) for case in ET.parse(report).getroot().iter("testcase")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--expect", choices=["fail", "pass"], default="fail")
    args = parser.parse_args(argv)
    rows = outcomes(args.report)
    if not rows:
        print("no tests ran", file=sys.stderr)
        return 1
    width = max(len(row.test) for row in rows)
    for row in rows:
        detail = f"  {row.detail[:90]}" if row.detail else ""
        print(f"{row.test:<{width}}  {row.result}{detail}")
    wanted = ASSERTION if args.expect == "fail" else PASS
    unexpected = [row for row in rows if row.result != wanted]
    print(f"\n{len(rows) - len(unexpected)}/{len(rows)} tests {wanted}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
