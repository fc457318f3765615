"""What a newcomer meets first: every command's help (its arguments said, an example, no markup
escapes), a help that loads no data library, tables whole in a pipe, `list` saying where it looked,
a bad option in one line. Their cost in seconds is `make bench-cli`'s, not a test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import click
import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from testbed import screen
from testbed.cli import app

REPO = Path(__file__).resolve().parents[1]
TESTBED = [str(Path(sys.executable).with_name("testbed"))]  # the entry point a user types (make venv installs it)
# What no help may import: data and plotting libraries, Docker and Mininet, the scenario model's schemas.
HEAVY = ("sklearn", "scipy", "pandas", "pyarrow", "pyspark", "matplotlib", "numpy", "selenium", "docker", "mininet",
         "pydantic", "testbed.scenario.model")


def _commands(command: click.Command, path: tuple[str, ...] = ()):
    """Every command under `command` with the words that name it: () for the top, ("servers", "up"), ..."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))
PATHS = list(COMMANDS)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return {**env, **extra}


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "testbed" for p in PATHS])
def test_every_help_says_its_arguments_and_an_example_without_escapes(path):
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the words, however the help wraps them
    assert "\\" not in result.stdout, result.stdout
    assert "Example: " in result.stdout, result.stdout
    for param in COMMANDS[path].params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name in result.stdout
            assert " ".join(param.help.split()) in text, (param.name, result.stdout)


def test_make_bench_cli_times_every_command():
    """The benchmark reads the commands from the help of the checkout it times: all of them."""
    from testbed.bench.cli import command_paths

    assert command_paths(Path(TESTBED[0])) == PATHS


def test_no_help_imports_a_heavy_module():
    """Every command's help in one process (python -X importtime names a module's first import,
    sys.modules says the same): none loads what only a run, a validation or a figure needs."""
    code = ("import sys\nfrom testbed.cli import main\n"
            f"for path in {PATHS!r}:\n"
            "    sys.argv = ['testbed', *path, '--help']\n"
            "    try:\n        main()\n    except SystemExit as exit:\n        assert exit.code == 0, path\n"
            f"print('\\n' + __import__('json').dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
            f"or m in {HEAVY!r})))")
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert "typer" in imported  # importtime did report: an empty report would prove nothing
    assert loaded == [], loaded
    assert not [m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY]


def test_a_piped_table_keeps_addresses_and_names_whole():
    result = subprocess.run([*TESTBED, "show", "scenarios/uav-smoke.yaml"], capture_output=True, text=True, cwd=REPO,
                            env=_env(), stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    rows = [line for line in result.stdout.splitlines() if "pzone1" in line or "swarm2 (mobile)" in line]
    assert any("nc-proxy" in row and "10.1.0.4" in row for row in rows), result.stdout
    assert any("uav-swarm" in row and "10.1.0.12" in row and "100Mbit" in row for row in rows), result.stdout


def test_a_narrow_pipe_folds_a_table_instead_of_cutting_it():
    result = subprocess.run([*TESTBED, "show", "scenarios/uav-smoke.yaml"], capture_output=True, text=True, cwd=REPO,
                            env=_env(COLUMNS="50"), stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout and "Nodes" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines() if "┃" in line or "│" in line) <= 50


def test_a_long_cell_folds_onto_the_next_line():
    table = screen.Table("topic class", "messages")
    table.add_row("follow_leader_of_the_swarm", "1200")
    out = StringIO()
    Console(file=out, width=24).print(table)
    assert "…" not in out.getvalue()
    assert "".join(line.split("│")[1].strip() for line in out.getvalue().splitlines() if line.count("│") == 3) \
        .startswith("follow_leader_of_the_swarm")


def test_a_console_off_a_terminal_is_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", StringIO())
    assert screen.console().width == screen.WIDE
    monkeypatch.setenv("COLUMNS", "132")
    assert screen.console().width == 132
    assert screen.console(width=90).width == 90


def test_list_elsewhere_says_where_it_looked(tmp_path):
    result = subprocess.run([*TESTBED, "list"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert str(tmp_path / "scenarios") in line and "--directory" in line and str(REPO / "scenarios") in line
    assert result.stdout == ""


def test_an_option_error_is_one_line_exit_2_from_the_shell():
    """The entry point itself, not the test runner's: click's usage box would be four lines."""
    result = subprocess.run([*TESTBED, "show", "scenarios/uav-smoke.yaml", "--sclae", "2"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "testbed show: No such option: --sclae Did you mean --scale? (testbed show --help)"]
