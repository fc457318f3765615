"""The documentation stays true: the scenario reference is the schema's, the README a front door
whose quick start the CLI accepts as typed, and every relative link points at a file."""

import re
import shlex
from pathlib import Path

import click
import pytest
import typer.main

from testbed import cli
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


QUICK_START = "## Quick start"


def readme_commands(text: str) -> list[str]:
    """The `testbed ...` lines of the code blocks in the README's quick start section, as typed."""
    start = text.index(QUICK_START)
    end = text.find("\n## ", start + len(QUICK_START))
    blocks = re.findall(r"^```\w*\n(.*?)^```", text[start:end if end > 0 else None], re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if re.match(r"(sudo )?(\.venv/bin/)?testbed ", line.strip())]


def words_after_testbed(line: str) -> list[str]:
    """The words after `testbed` on a shell line, its comment left out."""
    words = shlex.split(line, comments=True)
    return words[next(i for i, word in enumerate(words) if word.endswith("testbed")) + 1:]


def cli_refusal(line: str) -> str | None:
    """Why the `testbed` command would refuse this line (an unknown subcommand, option or argument
    count), or None when it parses: click itself parses it, so the check is the CLI's own."""
    words = words_after_testbed(line)
    command, path = typer.main.get_command(cli.app), ["testbed"]
    while isinstance(command, click.Group):
        if not words or words[0] not in command.commands:
            return f"{' '.join(path)}: no subcommand {words[0] if words else '(none)'!r}; it has {', '.join(command.commands)}"
        path.append(words[0])
        command = command.commands[words.pop(0)]
    try:
        command.make_context(" ".join(path), list(words))
    except click.UsageError as error:
        return f"{' '.join(path)}: {error.format_message()}"
    return None


def test_every_command_of_the_readme_quick_start_is_one_the_cli_accepts():
    lines = readme_commands((REPO / "README.md").read_text())
    wanted = {"validate", "show", "run", "figures", "view", "compare", "exec", "shell"}
    assert wanted <= {words_after_testbed(line)[0] for line in lines}, "the quick start lost one of its steps"
    refused = [f"{line}\n    -> {why}" for line in lines if (why := cli_refusal(line))]
    assert not refused, "README quick start commands the CLI refuses:\n" + "\n".join(refused)


@pytest.mark.parametrize("line, why", [
    ("testbed frobnicate x", "no subcommand 'frobnicate'"),
    ("sudo .venv/bin/testbed run scenarios/x.yaml --no-such-flag", "No such option: --no-such-flag"),
    ("testbed servers sideways", "no subcommand 'sideways'"),
    ("testbed view", "Missing argument"),
])
def test_a_command_the_cli_would_refuse_is_caught(line, why):
    assert why in (cli_refusal(line) or "")


def test_a_command_the_cli_accepts_passes_sub_subcommands_and_comments_included():
    assert cli_refusal("sudo .venv/bin/testbed servers up 3 --isolated   # three namespace-servers") is None
    assert cli_refusal(".venv/bin/testbed run scenarios/x.yaml --duration 20s --policy pulsar-hash") is None


def test_the_readme_stays_a_front_door_of_at_most_250_lines():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move detail into docs/"


def test_every_relative_link_points_at_a_file():
    broken = [f"{path.relative_to(REPO)}: {target}" for path in documents() for target in relative_links(path)
              if not (path.parent / target).exists()]
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[here](missing.md#part) [web](https://example.org) [anchor](#top)\n```\n[code](no.md)\n```\n")
    assert relative_links(page) == ["missing.md"]
