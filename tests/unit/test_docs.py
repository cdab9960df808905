"""The README and docs/ stay navigable: every relative link lands on a file and heading that exist,
docs/index.md lists every page, the README stays short, and its gang example declares what it says.

Facts live on one page and the others link to it, so a moved section or a renamed heading breaks
links silently unless something checks them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cluster.conventions import declared_by_pod, gang_key_of_pod, topology_of_pod

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_LIMIT_BYTES = 15_000

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def prose(page: Path) -> str:
    """The page without its code blocks (a '# comment' in YAML is no heading, '](x)' no link)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to
    hyphens, '-1', '-2' added to repeats."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(prose(page)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def relative_links(page: Path) -> list[str]:
    return [link for link in LINK.findall(prose(page)) if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no such heading")
    assert broken == []


def test_the_index_lists_every_page() -> None:
    listed = {link.partition("#")[0] for link in relative_links(DOCS / "index.md")}
    pages = {page.name for page in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= listed


def test_the_readme_stays_short() -> None:
    assert len(README.read_bytes()) <= README_LIMIT_BYTES


def readme_gang_example() -> dict[str, Any]:
    """The pod the README's example Job makes, as Quorum sees it."""
    text = README.read_text(encoding="utf-8")
    job = next(doc for block in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)
               for doc in yaml.safe_load_all(block) if doc and doc.get("kind") == "Job")
    template = job["spec"]["template"]
    return {"metadata": {"namespace": job["metadata"]["namespace"], **template["metadata"]},
            "spec": template["spec"]}


def test_the_readme_example_declares_a_gang_of_eight_in_one_rack() -> None:
    pod = readme_gang_example()
    spec = declared_by_pod(pod)
    topology = topology_of_pod(pod)
    assert gang_key_of_pod(pod) == "ml/trainer"
    assert spec is not None and (spec.min_count, spec.is_gang, spec.problem) == (8, True, "")
    assert topology is not None and (topology.required, topology.problem) == ("rack", "")
    assert pod["spec"]["schedulerName"] == "quorum"
