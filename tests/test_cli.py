"""The command line's refusals: a bad value of any option is one line naming the command and the
option, exit 2, before anything starts (pure: the run, probe and paper entry points are replaced by
ones that fail the test if reached)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli import app

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "scenarios" / "uav-smoke.yaml")
MMOG = str(REPO / "scenarios" / "mmog.yaml")

BAD = [  # (arguments, the option the one line names)
    (["validate", SMOKE, "--scale", "0"], "--scale"),
    (["validate", SMOKE, "--scale", "nan"], "--scale"),
    (["validate", MMOG, "--scale", "100"], "--scale"),  # in range, but client names no longer fit
    (["show", SMOKE, "--scale", "-1"], "--scale"),
    (["show", SMOKE, "--scale", "inf"], "--scale"),
    (["show", SMOKE, "--scale", "big"], "--scale"),
    (["show", SMOKE, "--sclae", "2"], "--sclae"),
    (["show"], "PATH"),
    (["run", SMOKE, "--scale", "101"], "--scale"),
    (["run", SMOKE, "--backend", "docker"], "--backend"),
    (["run", SMOKE, "--shaper", "tc"], "--shaper"),
    (["run", SMOKE, "--seed", "-1"], "--seed"),
    (["run", SMOKE, "--duration", "0s"], "--duration"),
    (["run", SMOKE, "--duration", "soon"], "--duration"),
    (["run", SMOKE, "--settle", "-1s"], "--settle"),
    (["run", SMOKE, "--policy", "hashing"], "--policy"),
    (["run", SMOKE, "--distance", "miles"], "--distance"),
    (["run", SMOKE, "--view-port", "70000"], "--view-port"),
    (["run", SMOKE, "--view-address", "localhost; true"], "--view-address"),
    (["view", str(REPO), "--port", "-1"], "--port"),
    (["view", str(REPO), "--address", "nowhere"], "--address"),
    (["probe", SMOKE, "--backend", "docker"], "--backend"),
    (["probe", SMOKE, "--shaper", "tc"], "--shaper"),
    (["probe", SMOKE, "--count", "1"], "--count"),
    (["paper", "--repeats", "0"], "--repeats"),
    (["paper", "--scale", "huge"], "--scale"),
    (["paper", "--policies", "hashing"], "--policies"),
    (["topic", "set-threshold", "abcdef", "follow_leader-swarm1", "soon"], "THRESHOLD"),
    (["compare"], "RUN_DIRS"),
    (["compare", str(REPO), str(REPO), "--out"], "--out"),
    (["list", "--directory"], "--directory"),
    (["servers", "up", "x"], "COUNT"),
    (["servers", "up", "3", "--isolatd"], "--isolatd"),
]


@pytest.fixture
def nothing_starts(monkeypatch):
    import testbed.experiment
    import testbed.paper
    import testbed.probe

    def started(*_args, **_kwargs):
        raise AssertionError("started with a bad option")
    for module, name in ((testbed.experiment, "run"), (testbed.probe, "main"), (testbed.paper, "main")):
        monkeypatch.setattr(module, name, started)


@pytest.mark.parametrize("args,option", BAD, ids=[f"{a[0]} {option} {a[-1]}" for a, option in BAD])
def test_a_bad_option_is_one_line_naming_it_exit_2(args, option, nothing_starts):
    result = CliRunner().invoke(app, args, prog_name="testbed")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.exception, result.output[-500:])
    assert len(lines) == 1 and option in lines[0], lines
    assert lines[0].startswith(f"testbed {args[0]}"), lines  # the command named, as the option is
    assert "Traceback" not in result.output and "pydantic" not in result.output


def test_the_options_take_what_a_scenario_file_takes(nothing_starts, monkeypatch):
    """The checks are the scenario model's own: a value a file may hold passes as an option."""
    import testbed.experiment

    seen = {}
    monkeypatch.setattr(testbed.experiment, "run", lambda scenario, *_a, **kw: seen.update(scenario=scenario) or 0)
    result = CliRunner().invoke(app, ["run", SMOKE, "--scale", "0.5", "--duration", "20s", "--settle", "0s",
                                      "--seed", "7", "--policy", "pulsar-hash", "--distance", "rtt", "--shaper",
                                      "shared", "--backend", "mininet", "--view-port", "0"])
    assert result.exit_code == 0, result.output[-1000:]
    scenario = seen["scenario"]
    assert (scenario.scale, scenario.duration, scenario.seed, scenario.control.policy) == (0.5, 20.0, 7, "pulsar-hash")
