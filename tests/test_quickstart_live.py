"""The README's quick start, typed as it is printed, in a folder of its own: copy a scenario, edit
it, validate, show, run it (shortened to 20 s), draw its figures, replay it, run it under a baseline
policy and compare the two. The commands come from the README itself (tests/test_docs.py checks
them against the CLI's parser); this test checks they do what the README says they do.

A run counts once the harness delivered what it offered with its guard watching (tests/live.py,
run_held): a run the VM stalled is repeated, not judged."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.scenario.loader import load
from tests import live
from tests.needs import FULL_SYSTEM
from tests.test_docs import QUICK_START, readme_commands, words_after_testbed

pytestmark = [*FULL_SYSTEM, pytest.mark.long]

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
SHORT = ["--duration", "20s", "--backend", "mininet"]  # the README's runs, shortened; namespaces whatever runs here
ADDRESS = re.compile(r"(http://\S+/)")


def quick_start_lines() -> list[str]:
    """Every shell line of the quick start's first code block (the walk-through), comments left out."""
    section = README[README.index(QUICK_START):]
    block = re.search(r"^```sh\n(.*?)^```", section, re.M | re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def readme_line(subcommand: str, extra: str = "") -> list[str]:
    """The quick start's `testbed <subcommand>` line (the first one containing `extra`), as words."""
    (line, *_) = [line for line in quick_start_lines() if line in readme_commands(README)
                  and words_after_testbed(line)[0] == subcommand and extra in line]
    return words_after_testbed(line)


def shell(line: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(line, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120)


def typed(words: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`.venv/bin/testbed WORDS` from `cwd`, as a user in the clone types it (cwd holds a link to .venv)."""
    return subprocess.run([str(cwd / ".venv" / "bin" / "testbed"), *words], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def delivered(out: Path, summary: dict) -> str | None:
    """Held: every offered message delivered while the guard judged the run; else why not."""
    why = []
    if summary["delivered"] < summary["expected_deliveries"]:
        why.append(f"{summary['delivered']} of {summary['expected_deliveries']} delivered")
    if live.judged_seconds(out) == 0:
        why.append("the guard judged no second")
    if not why:
        return None
    rows = live.machine_seconds(out)
    text = "; ".join(why) + (f" ({live.held_by_machine(rows)})" if rows else "")
    return live.ByMachine(text) if rows else text


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A folder laid out as the clone is for the quick start: scenarios/ and the venv."""
    where = tmp_path_factory.mktemp("quickstart")
    (where / "scenarios").mkdir()
    shutil.copy(REPO / "scenarios" / "uav-smoke.yaml", where / "scenarios")
    (where / ".venv").symlink_to(REPO / ".venv")
    return where


@pytest.fixture(scope="module")
def scenario(clone) -> Path:
    """The quick start's copy and edit, run as printed (every line before the first `testbed`)."""
    for line in quick_start_lines():
        if "testbed" in line:
            break
        done = shell(line, clone)
        assert done.returncode == 0, f"{line}: {done.stderr}"
    (made,) = (clone / "scenarios").glob("my-*.yaml")
    return made


@pytest.fixture(scope="module")
def runs(clone, scenario) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """The quick start's two runs (ePulsar, then the baseline policy), each held (tests/live.py)."""
    name = yaml.safe_load(scenario.read_text())["name"]
    made = {}
    for label, extra in (("first", ""), ("baseline", "--policy")):
        words = readme_line("run", extra)[1:]
        argv = [str(clone / w) if w.startswith("scenarios/") else w for w in words]
        run, out, _ = live.run_held([*argv, *SHORT], clone / "results" / label, name, delivered)
        made[label] = (out, run)
    return made


def test_the_edit_the_quick_start_makes_is_one_validate_and_show_see(clone, scenario):
    mine = yaml.safe_load(scenario.read_text())
    shipped = yaml.safe_load((clone / "scenarios" / "uav-smoke.yaml").read_text())
    assert mine["name"] != shipped["name"] and mine["infrastructure"] != shipped["infrastructure"]
    validated = typed(readme_line("validate"), clone)
    assert validated.returncode == 0 and f"ok ({mine['name']})" in validated.stdout, validated.stderr
    shown = typed(readme_line("show"), clone)
    assert shown.returncode == 0, shown.stderr
    one_way = f"{load(scenario).infrastructure.mec_zones.inter_site_rtt * 1000 / 2:g}ms"
    assert re.search(rf"zone1 <-> zone2 .*{one_way}", shown.stdout), "show did not print the edited delay"
    assert "offered load:" in shown.stdout


def test_the_runs_land_where_the_readme_says_with_the_edit_and_the_policy_asked(runs, scenario):
    mine = load(scenario)
    for label, (out, run) in runs.items():
        assert re.fullmatch(rf"{mine.name}-\w+", out.name)
        assert f"results in {out}" in run.stdout
        assert json.loads((out / "run.json").read_text())["complete"] is True
        assert load(out / "scenario.yaml").infrastructure == mine.infrastructure
    policies = {label: load(out / "scenario.yaml").control.policy for label, (out, _) in runs.items()}
    asked = readme_line("run", "--policy")
    assert policies == {"first": "epulsar", "baseline": asked[asked.index("--policy") + 1]}


def test_figures_draws_fig8_of_the_run(clone, runs):
    out, _ = runs["first"]
    words = [str(out) if w.startswith("results/") else w for w in readme_line("figures")]
    drawn = typed(words, clone)
    assert drawn.returncode == 0, drawn.stdout[-2000:] + drawn.stderr[-2000:]
    fig8 = clone / "results" / "figures" / f"fig8-{out.name}.png"
    assert fig8.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    listed = json.loads((clone / "results" / "figures" / "figures.json").read_text())
    assert str(fig8) in {str(clone / f["path"]) if not Path(f["path"]).is_absolute() else f["path"]
                         for f in listed["figures"]}
    assert (out / "traces.parquet").exists()


def test_view_serves_the_run(clone, runs):
    import urllib.request

    out, _ = runs["first"]
    words = [str(out) if w.startswith("results/") else w for w in readme_line("view")]
    server = subprocess.Popen([str(clone / ".venv" / "bin" / "testbed"), *words, "--port", "0"], cwd=clone,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        found = ADDRESS.search(line)
        assert found, f"no address in {line!r}"
        with urllib.request.urlopen(found.group(1) + "api/records", timeout=30) as answer:
            records = answer.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=10)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert run_id in records and "follow_leader" in records


def test_compare_puts_the_two_runs_side_by_side(clone, runs):
    words = readme_line("compare")
    assert shlex.join(words).count("results/") == 2, "the README compares two runs"
    dirs = [str(runs["first"][0]), str(runs["baseline"][0])]
    args = [w for w in words if not w.startswith("results/")]
    compared = typed([*args[:1], *dirs, *args[1:]], clone)
    assert compared.returncode == 0, compared.stdout[-2000:] + compared.stderr[-2000:]
    for out in dirs:
        assert json.loads((Path(out) / "run.json").read_text())["run_id"] in compared.stdout
