"""What the containernet backend relies on that CI can check without Containernet: absolute paths
into containers, finding the Containernet venv and re-running `testbed` under it, the pins.

(Issue 21: `--results` defaulted to the relative `results`, which inside a container points into
the read-only source mount; the end-to-end tests passed only because they gave an absolute path.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from testbed import cli
from testbed.emulation import backends, choose, installed
from testbed.emulation.backends.containernet import SOURCE_MOUNT, exec_argv, relative_paths
from tests.needs import REQUIRE_CONTAINERNET_ENV, containernet_missing

ROOT = Path(__file__).resolve().parent.parent
HOST = SimpleNamespace(dnameprefix="tbab12cd", name="bzone1")


def test_relative_paths_into_the_working_directory_are_found(tmp_path):
    (tmp_path / "results").mkdir()
    argv = ["java", "-cp", "/usr/share/java/a.jar:/usr/share/java/b.jar", "results/run/logs/zoo.cfg",
            "--trace=results/run/traces/c.jsonl", "--rate", "20/s", "10.0.0.1/24", Path("logs/x.log"),
            "/abs/results/run/zoo.cfg", "--out=/abs/x"]
    assert relative_paths(argv, tmp_path) == ["results/run/logs/zoo.cfg", "--trace=results/run/traces/c.jsonl",
                                              "logs/x.log"]


def test_exec_argv_refuses_relative_paths_and_passes_absolute_ones():
    ok = exec_argv(HOST, ["/opt/venv/bin/python", "-m", "testbed.systems.pubsub.broker", "--log", Path("/tmp/r/a.log")])
    assert ok == ["docker", "exec", "-w", SOURCE_MOUNT, "tbab12cd.bzone1", "/opt/venv/bin/python", "-m",
                  "testbed.systems.pubsub.broker", "--log", "/tmp/r/a.log"]
    with pytest.raises(ValueError, match="tests/x.cfg.*read-only mount"):
        exec_argv(HOST, ["java", "tests/x.cfg"])  # cwd is the repository when pytest runs


def test_run_hands_the_experiment_an_absolute_results_directory(monkeypatch, tmp_path):
    """The default `--results results` and any relative one reach experiment.run absolute, so every
    path derived from it (logs, ZooKeeper's data, traces) means the same inside a container."""
    from testbed import experiment

    seen = []

    def record(*_args, results_root, **_kwargs):
        seen.append(results_root)
        return 0

    monkeypatch.setattr(experiment, "run", record)
    monkeypatch.chdir(tmp_path)
    scenario = ROOT / "scenarios" / "failover-smoke.yaml"
    for extra in ([], ["--results", "out/here"]):
        result = CliRunner().invoke(cli.app, ["run", str(scenario), *extra])
        assert result.exit_code == 0, result.output
    assert seen == [tmp_path / "results", tmp_path / "out" / "here"]
    assert all(p.is_absolute() for p in seen)


def test_the_constraints_pin_what_the_docker_sdk_needs():
    pins = installed.pins(installed.CONSTRAINTS)
    assert pins["requests"].startswith("2.31.") and pins["urllib3"].startswith("1.26.")
    assert pins["docker"] == "6.0.1"
    assert "pydantic" in installed.pins(installed.REQUIREMENTS)


def test_a_python_without_containernet_is_reported_with_the_reason(monkeypatch):
    installed.find_containernet.cache_clear()
    monkeypatch.setenv(installed.CONTAINERNET_PYTHON_ENV, sys.executable)
    try:
        install = installed.find_containernet()
    finally:
        installed.find_containernet.cache_clear()
    assert not install.usable and install.source == f"${installed.CONTAINERNET_PYTHON_ENV}"
    assert "Containernet does not import" in install.error and "docs/containernet.md" in install.describe()


def test_a_missing_interpreter_is_named(monkeypatch, tmp_path):
    installed.find_containernet.cache_clear()
    monkeypatch.setenv(installed.CONTAINERNET_PYTHON_ENV, str(tmp_path / "nope" / "python"))
    try:
        install = installed.find_containernet()
    finally:
        installed.find_containernet.cache_clear()
    assert not install.usable and "not an executable file" in install.describe()


def test_missing_requirements_name_the_fix():
    install = installed.Install("/opt/cn-venv/bin/python", "the documented location", missing=("typer", "nats-py"))
    assert not install.usable
    text = install.describe()
    assert "typer, nats-py" in text and f"fix: make -C {ROOT} containernet-deps" in text
    elsewhere = installed.Install("/srv/cn/bin/python", f"${installed.CONTAINERNET_PYTHON_ENV}", missing=("typer",))
    assert elsewhere.describe().endswith("containernet-deps CN_PYTHON=/srv/cn/bin/python")


def test_the_containernet_venv_gets_every_requirement_but_selenium_and_pandas_and_no_two_pins_disagree():
    """selenium 4.51 needs urllib3 >= 2.6.3, the docker SDK 6.0.1 urllib3 1.26: one venv cannot hold both,
    and only the browser tests (in .venv) use selenium; pandas only reads results by hand, in .venv."""
    project, constraints = installed.pins(installed.REQUIREMENTS), installed.pins(installed.CONSTRAINTS)
    kept = installed.pins_of(installed.containernet_requirements())
    assert set(project) - set(kept) == {"selenium", "pandas"} == set(installed.NOT_IN_CONTAINERNET_VENV)
    assert all(kept[name] == project[name] for name in kept)
    assert {name: project[name] for name in set(project) & set(constraints) if project[name] != constraints[name]} == {}
    wanted = installed.wanted_in_containernet_venv()
    assert "selenium" not in wanted and wanted["docker"] == "6.0.1" and wanted["pytest"] == project["pytest"]
    assert "pygments" in constraints  # pytest's, which Containernet's setup.py asks for unpinned


def test_make_containernet_deps_installs_what_the_check_wants():
    """The Makefile's recipe and `testbed doctor`'s check read the same list (installed.py)."""
    recipe = _make_recipe("containernet-deps")
    assert "testbed/emulation/installed.py requirements" in recipe and "-c images/containernet-constraints.txt" in recipe
    out = subprocess.run([sys.executable, str(ROOT / "testbed/emulation/installed.py"), "requirements"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == installed.containernet_requirements()


def _make_recipe(target: str, *variables: str) -> str:
    """`make -n target`'s commands (with `variables`, e.g. "BACKEND=containernet"), without running them."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target, *variables], capture_output=True, text=True,
                         env={**os.environ, "CN_PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_docs_install_is_the_make_target():
    """docs/containernet.md's install section and `make containernet` are one procedure: the doc names
    the target, the Makefile has it, and both name the same pinned commit."""
    doc = (ROOT / "docs/containernet.md").read_text()
    install = doc[doc.index("## Install"):doc.index("## How `testbed` finds")]
    assert "make containernet CONTAINERNET_SRC=" in install and "make containernet-deps" in install
    assert "images/install-containernet" in _make_recipe("containernet")
    script = (ROOT / "images/install-containernet").read_text()
    (commit,) = re.findall(r"^COMMIT=([0-9a-f]{40})", script, re.M)
    assert commit in install and commit in doc[:doc.index("## Install")]


def test_without_a_source_the_target_says_where_to_clone_it():
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERNET_SRC"}
    out = subprocess.run([str(ROOT / "images/install-containernet")], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60)
    assert out.returncode != 0
    assert "git clone https://github.com/containernet/containernet" in out.stderr
    assert "make containernet CONTAINERNET_SRC=" in out.stderr


def test_a_required_containernet_fails_where_it_would_skip(monkeypatch):
    """CI installs Containernet and sets TESTBED_REQUIRE_CONTAINERNET: a missing part is then a failure."""
    monkeypatch.delenv(REQUIRE_CONTAINERNET_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no engine"):
        containernet_missing("no engine")
    monkeypatch.setenv(REQUIRE_CONTAINERNET_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="no engine.*TESTBED_REQUIRE_CONTAINERNET"):
        containernet_missing("no engine")


def test_an_installed_containernet_without_an_engine_is_named_not_skipped_over(monkeypatch):
    """Run's `auto` then uses namespaces, and says why: installed, no engine, how to start one."""
    monkeypatch.setattr(installed, "find_containernet", lambda: installed.Install("/opt/cn-venv/bin/python", "x"))
    monkeypatch.setattr(installed, "containernet_importable_here", lambda: (False, "no"))
    monkeypatch.setattr(installed, "docker_engine_running", lambda: False)
    ok, why = backends.get("containernet").available()
    assert not ok and "installed but no Docker engine answers" in why and "start_engine()" in why
    choice = choose.choose_backend()
    assert "no Docker engine answers" in choice.reason


@pytest.fixture
def usable(monkeypatch):
    """A Containernet venv found and able to run the project; this interpreter cannot import it."""
    install = installed.Install("/opt/cn-venv/bin/python", "the documented location")
    monkeypatch.setattr(installed, "find_containernet", lambda: install)
    monkeypatch.setattr(installed, "containernet_importable_here", lambda: (False, "no"))
    monkeypatch.setattr(installed, "docker_engine_running", lambda: True)
    monkeypatch.delenv(installed.REEXECUTED_ENV, raising=False)
    return install


def test_testbed_re_runs_itself_under_the_containernet_venv(usable, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    argv, env = choose.reexec_argv(["run", "scenarios/uav-smoke.yaml"])
    assert argv[0] == usable.python and argv[-2:] == ["run", "scenarios/uav-smoke.yaml"]
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    assert env[installed.REEXECUTED_ENV] == sys.executable


@pytest.mark.parametrize("args", [["validate", "x.yaml"], ["run", "x.yaml", "--backend", "mininet"],
                                  ["probe", "x.yaml", "--backend=mininet"], ["run", "--help"], []])
def test_no_re_run_where_containernet_is_not_wanted(usable, args):
    assert choose.reexec_argv(args) is None


def test_no_second_re_run(usable, monkeypatch):
    monkeypatch.setenv(installed.REEXECUTED_ENV, "/work/main/.venv/bin/python")
    assert choose.reexec_argv(["doctor"]) is None


def test_without_a_docker_engine_only_doctor_re_runs(usable, monkeypatch):
    monkeypatch.setattr(installed, "docker_engine_running", lambda: False)
    assert choose.reexec_argv(["run", "x.yaml"]) is None
    assert choose.reexec_argv(["doctor"]) is not None


def test_a_scenario_that_asks_for_mininet_is_not_re_run(usable, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nemulation: {backend: mininet}\n")
    assert choose.reexec_argv(["run", str(scenario)]) is None
    scenario.write_text("name: s\nemulation: {backend: auto}\n")
    assert choose.reexec_argv(["run", str(scenario)]) is not None


def test_a_venv_without_the_projects_requirements_is_no_silent_fallback(monkeypatch):
    """`auto` then runs on namespaces, and the run's first line says why: what the venv lacks and the
    command that installs it; `--backend containernet` refuses with the same words."""
    lacking = installed.Install("/opt/cn-venv/bin/python", "the documented location", missing=("pydantic",))
    monkeypatch.setattr(installed, "find_containernet", lambda: lacking)
    monkeypatch.setattr(installed, "containernet_importable_here", lambda: (False, "no"))
    monkeypatch.setattr(installed, "docker_engine_running", lambda: True)
    for choice in (choose.choose_backend(), choose.choose_backend("containernet")):
        assert choice.value != "containernet"
        assert "not the project's requirements pydantic" in choice.reason and "containernet-deps" in choice.reason
    assert choose.reexec_argv(["run", "x.yaml"]) is None


def test_one_word_switches_make_scenario_to_docker_hosts():
    """`BACKEND=containernet make scenario` runs the smoke on Docker hosts; without it the run picks."""
    assert "testbed run scenarios/uav-smoke.yaml  --backend containernet" in _make_recipe("scenario", "BACKEND=containernet")
    assert "--backend" not in _make_recipe("scenario")
