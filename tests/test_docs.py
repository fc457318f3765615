"""The documentation stays true: the scenario reference is the schema's, the README a front door,
and every relative link points at a file."""

import re
from pathlib import Path

from testbed.scenario import reference

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted((REPO / "testbed" / "systems").glob("*/README.md"))]


def relative_links(path: Path) -> list[str]:
    """The targets of a document's Markdown links outside code blocks, without web links or anchors."""
    text = FENCE.sub("", path.read_text())
    targets = (target.split("#")[0] for target in LINK.findall(text))
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_the_scenario_reference_is_the_schemas():
    committed = (REPO / "docs" / "guide" / "scenario-reference.md").read_text()
    assert committed == reference.render(), "docs/guide/scenario-reference.md is stale: run `make docs`"


def test_the_readme_is_a_front_door_of_at_most_200_lines():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move detail into docs/"


def test_every_relative_link_points_at_a_file():
    broken = [f"{path.relative_to(REPO)}: {target}" for path in documents() for target in relative_links(path)
              if not (path.parent / target).exists()]
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[here](missing.md#part) [web](https://example.org) [anchor](#top)\n```\n[code](no.md)\n```\n")
    assert relative_links(page) == ["missing.md"]
