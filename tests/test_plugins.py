"""Systems as plugins (testbed.plugin): every system folder is registered and its hooks resolve, the
core names no registered system, and a new system is one folder plus one registry line (a toy system
written here is validated, checked and estimated by the real CLI, with no core file touched)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed import plugin
from testbed.policies import POLICIES
from testbed.roles import classes as role_classes
from testbed.systems import SYSTEMS
from testbed.systems.pubsub.trace_schema import FIELDS as TRACE_FIELDS

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS_DIR = ROOT / "testbed" / "systems"
# What a pub/sub text says in any system (a trace's rows are a publisher's or a subscriber's): words, not names.
GENERIC_WORDS = {"publisher", "subscriber"}
# Modules that still name systems, with how many times (a count may only go down; a module not listed
# must name none). None left: the core's harness, `make paper`, the analysis of runs and the harness's
# own benchmarks derive every system from testbed.plugin.
NOT_YET_PLUGGED: dict[str, int] = {}


def test_every_system_folder_is_registered_with_a_manifest_and_a_readme():
    folders = sorted(p.name for p in SYSTEMS_DIR.iterdir() if (p / "__init__.py").exists())
    assert sorted(p.rsplit(".", 1)[1] for p in SYSTEMS) == folders
    for system in plugin.systems():
        folder = system.package.rsplit(".", 1)[1]  # a system's name may differ from its folder's (epulsar: pubsub)
        assert (SYSTEMS_DIR / folder / "README.md").exists(), system.name
        assert system.package == f"testbed.systems.{folder}"


def test_every_hook_of_every_system_resolves():
    for kind in plugin.workload_kinds().values():
        for hook in ("check", "offered"):
            assert getattr(kind, hook) is None or callable(plugin.kind_hook(kind, hook)), (kind.name, hook)
        assert set(kind.features) <= set(plugin.FEATURES) and set(kind.refuses) <= set(plugin.FEATURES)
    roles = role_classes()
    assert len(roles) == 1 + sum(len(s.roles) for s in plugin.systems())
    assert all(hasattr(cls, "wanted") for cls in roles)


def _named_systems(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """String constants (docstrings aside) that are exactly a system's name, workload kind or client role."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in docstrings]


def test_the_core_names_no_registered_system():
    # `epulsar` names both the system under test and its placement policy, which the core's figures
    # and the pure policy layer name as they name every policy (testbed.policies.POLICIES)
    names = ({s.name for s in plugin.systems()} - set(POLICIES)
             | set(plugin.workload_kinds()) | set(plugin.client_roles())) - GENERIC_WORDS
    found = {}
    for path in sorted([*(ROOT / "testbed").rglob("*.py"), *(ROOT / "analysis").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("testbed/systems/"):
            continue
        hits = _named_systems(path, names)
        if hits:
            found[relative] = hits
    _no_more_than_allowed(found, NOT_YET_PLUGGED, "the core names a system (derive it from testbed.plugin instead)",
                          "more system names than before (derive them from testbed.plugin)")


def _no_more_than_allowed(found: dict[str, list], allowed: dict[str, int], new: str, grown: str) -> None:
    """A scan's hits by module: none in a module not yet allowed any, never more than allowed."""
    unplugged = {p: hits for p, hits in found.items() if p not in allowed}
    assert not unplugged, f"{new}: {unplugged}"
    more = {p: len(hits) for p, hits in found.items() if len(hits) > allowed[p]}
    assert not more, f"{grown}: {more}"


# Modules that still read a system's control keys or name its fault targets, with how many times (a
# count may only go down; a module not listed must have none). The analysis of runs and `make paper`
# read ePulsar's recorded settings from a run's scenario.yaml (its series per policy, its reading of
# d, its reaction bound); the harness's CPU classes and the container image name ZooKeeper's program.
SETTINGS_NOT_YET_PLUGGED: dict[str, int] = {
    "analysis/balance.py": 3, "analysis/bounds.py": 1, "analysis/compare_runs.py": 1, "analysis/traces.py": 2,
    "testbed/paper_steps.py": 2, "testbed/emulation/docker_engine.py": 1, "testbed/monitor.py": 2,
}


def _attribute_name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _named_settings(path: Path, keys: set[str], targets: set[str]) -> list[tuple[int, str]]:
    """Where a module reads a system's control key (`x.control.policy`, `control.get("policy")`,
    `control["policy"]`), declares one in a `Control*` model, or names a system's fault target (a string
    constant, docstrings aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in keys and _attribute_name(node.value) == "control":
            hits.append((node.lineno, f"control.{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and _attribute_name(node.func.value) == "control" and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
            hits.append((node.lineno, f"control.{node.args[0].value}"))
        elif (isinstance(node, ast.Subscript) and _attribute_name(node.value) == "control"
              and isinstance(node.slice, ast.Constant) and node.slice.value in keys):
            hits.append((node.lineno, f"control.{node.slice.value}"))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Control"):
            hits += [(item.lineno, f"control.{item.target.id}") for item in node.body
                     if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id in keys]
        elif isinstance(node, ast.Constant) and node.value in targets and id(node) not in docstrings:
            hits.append((node.lineno, node.value))
    return sorted(hits)


def test_the_core_names_no_system_s_settings_or_fault_targets():
    """The topic manager's keys (`control.policy`, ...) and ePulsar's fault targets (`kill: zookeeper`)
    are its manifest's: the core's control model declares only what every system shares, and no core
    module reads or names them beyond the counted ones."""
    from testbed.scenario.model import Control, ControlCore

    keys = {key for system in plugin.systems() for key in system.control}
    targets = set(plugin.fault_targets())
    assert {"policy", "distance", "migration", "overload", "pulsar_lm"} <= keys and {"zookeeper", "manager"} <= targets
    assert set(ControlCore.model_fields) == {"settle", "nc_report_period"}
    assert all(plugin.control_owner(key) for key in set(Control.model_fields) - set(ControlCore.model_fields))
    found = {}
    for path in sorted([*(ROOT / "testbed").rglob("*.py"), *(ROOT / "analysis").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        # the systems' folders, and the pure decisions the keys configure (testbed/policies, shared with
        # offline simulations: ePulsar's Algorithm 1, Pulsar's load manager, BAD's balancing)
        systems_own = relative.startswith(("testbed/systems/", "testbed/policies/"))
        hits = [] if systems_own else _named_settings(path, keys, targets)
        if hits:
            found[relative] = hits
    _no_more_than_allowed(found, SETTINGS_NOT_YET_PLUGGED,
                          "the core names a system's setting or fault target (ask testbed.plugin)",
                          "more of a system's settings than before")


def test_the_settings_scan_finds_a_key_and_a_target(tmp_path):
    """The scan above can fail: a core model declaring `policy`, a read of `control.distance` or of
    a recorded `control.get("overload")`, and a branch on `"zookeeper"` are found; docstrings are not."""
    module = tmp_path / "core.py"
    module.write_text('"""zookeeper"""\n\nclass ControlCore:\n    policy: str = "epulsar"\n    settle: float = 60\n\n\n'
                      'def f(scenario, fault, control):\n    """manager"""\n    d = scenario.control.distance\n'
                      '    o = control.get("overload")\n    return fault.kill == "zookeeper"\n')
    hits = _named_settings(module, {"policy", "distance", "overload"}, {"zookeeper", "manager"})
    assert hits == [(4, "control.policy"), (10, "control.distance"), (11, "control.overload"), (12, "zookeeper")]


def _feature_branches(path: Path, words: tuple[str, ...]) -> list[int]:
    """Lines of `if`s and conditional expressions whose test names one of `words` (a word of a name, an
    attribute or a string; a trace column's name is the trace's, not a feature's)."""
    tree = ast.parse(path.read_text())

    def named(node) -> bool:
        for part in ast.walk(node):
            text = (part.id if isinstance(part, ast.Name) else part.attr if isinstance(part, ast.Attribute)
                    else part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "")
            if text not in TRACE_FIELDS and set(text.lower().split("_")) & set(words):
                return True
        return False
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, (ast.If, ast.IfExp, ast.While)) and named(node.test)]


def test_the_pubsub_client_and_broker_branch_on_no_feature():
    """Durable topics and message tracking plug into the pub/sub client and broker through the hooks
    of `feature.py`: neither tests for a feature anywhere (the scan's words: the features' names and
    their parts' words)."""
    words = (*plugin.FEATURES, "track", "acks", "acked", "unacked", "ids")
    for module in ("client.py", "broker.py"):
        assert _feature_branches(SYSTEMS_DIR / "pubsub" / module, words) == [], module


def test_the_feature_scan_finds_a_branch(tmp_path):
    module = tmp_path / "client.py"
    module.write_text("def f(self):\n    if self.durable:\n        pass\n    return 1 if self.ids is None else 2\n")
    assert _feature_branches(module, ("durable", "ids")) == [2, 4]


def test_the_name_scan_finds_a_branch_on_a_system(tmp_path):
    """The scan above can fail: a branch on a workload kind is found, its docstring is not."""
    module = tmp_path / "core.py"
    module.write_text('"""mmog"""\n\ndef f(kind):\n    """bad"""\n    return kind == "mmog"\n')
    assert _named_systems(module, {"mmog", "bad"}) == [(5, "mmog")]


TOY_MANIFEST = '''
from pydantic import Field

from testbed.plugin import Benchmark, FaultTarget, Figure, System, WorkloadKind
from testbed.scenario.fields import Count, PositiveDuration, Strict


class Echo(Strict):
    """Each echo node repeats every message to `fanout` readers."""

    fanout: Count = 2


def one_class(workload) -> None:
    if len(workload.topics) != 1:
        raise ValueError("the echo workload needs exactly one topic class")


SYSTEM = System(name="toyecho", title="a toy echo service",
                workloads=(WorkloadKind("echo", block="echo", block_model=Echo, validate=one_class,
                                        check="checks:needs_echo_nodes", offered="load:offered"),),
                client_roles=("echoer",), agent_roles=("echoer",),
                control={"echo_period": (PositiveDuration, 1.0, "how often an echo node repeats")},
                fault_targets=(FaultTarget("hub", "kills the echo hub for good", restart=False),),
                benchmarks=(Benchmark("echo-fanout", program="bench", figures="figures", about="readers reached per message",
                                      shows=(Figure("echo", images=(), section="Echo, 1", title="Echo fanout",
                                                    paper="every message reaches 3 readers", rule="fanout >= 3"),),
                                      scale="one echo node"),))
'''
TOY_BENCH = '''
import argparse
import json
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--fanout", type=int, default=3)
args = parser.parse_args()
args.out.write_text(json.dumps({"time": 1.0, "fanout": args.fanout}))
'''
TOY_FIGURES = '''
from analysis.headlines import Headline


def headline(result, scale):
    return Headline(f"fanout {result['fanout']}", result["fanout"] >= 3, scale, {})


def markdown_table(result):
    return ["| fanout |", "|---|", f"| {result['fanout']} |"]


def draw(result, out, stem):
    return []
'''
TOY_CHECKS = '''
def needs_echo_nodes(scenario, built, report):
    if not built.placed("echoer"):
        report(("nodes", "clients"), "the echo workload needs client nodes with role: echoer")
'''
TOY_LOAD = '''
def offered(scenario, topology):
    nodes = len(topology.placed("echoer"))
    rate = scenario.workload.rate * scenario.scale
    return rate * nodes, rate * nodes * scenario.workload.echo.fanout
'''
TOY_SCENARIO = '''
name: toy-echo
duration: 30s
infrastructure:
  mec_zones: {towers: atlanta, zones: 2, inter_site_rtt: 10ms}
  cloud: {name: cloud, one_way: 20ms}
nodes:
  clients:
    - {name: echo, role: echoer, count: 2, site: each}
workload:
  kind: echo
  rate: 10/s
  topics: [{name: chirp, threshold: 50ms}]
  echo: {fanout: 3}
'''


def _toy_cli(tmp_path: Path, *args: str, registered: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop(plugin.EXTRA_SYSTEMS_ENV, None)
    if registered:
        env[plugin.EXTRA_SYSTEMS_ENV] = "toyecho"  # the one registry line
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


@pytest.fixture
def toy_system(tmp_path) -> Path:
    """The toy system: one folder (a manifest with its schema, a check, an offered-load estimate)."""
    folder = tmp_path / "toyecho"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A toy system: echo nodes that repeat every message."""\n')
    for name, text in (("manifest", TOY_MANIFEST), ("checks", TOY_CHECKS), ("load", TOY_LOAD), ("bench", TOY_BENCH),
                       ("figures", TOY_FIGURES)):
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    (tmp_path / "toy.yaml").write_text(TOY_SCENARIO.lstrip())
    return tmp_path


def test_a_new_system_is_one_folder_and_one_registry_line(toy_system):
    run = _toy_cli(toy_system, "validate", str(toy_system / "toy.yaml"))
    assert run.returncode == 0, run.stdout + run.stderr
    shown = _toy_cli(toy_system, "show", str(toy_system / "toy.yaml"), "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    load = json.loads(shown.stdout)["load"]
    assert load["kind"] == "echo"
    assert (load["published_per_s"], load["deliveries_per_s"]) == (40.0, 120.0)  # 2 x 2 echo nodes x 10/s, x 3


def test_a_toy_system_brings_a_benchmark_that_bench_runs_and_the_paper_judges(toy_system, monkeypatch):
    from testbed import paper, paper_entries, paper_figures, paper_steps

    listed = _toy_cli(toy_system, "bench")
    assert listed.returncode == 0 and "echo-fanout" in listed.stdout and "readers reached" in listed.stdout
    out = toy_system / "echo-fanout.json"
    ran = _toy_cli(toy_system, "bench", "echo-fanout", "--out", str(out), "--fanout", "2")  # its options pass through
    assert ran.returncode == 0 and json.loads(out.read_text())["fanout"] == 2, ran.stdout + ran.stderr
    unknown = _toy_cli(toy_system, "bench", "echo-fanin")
    assert unknown.returncode == 2 and "known:" in unknown.stderr and "echo-fanout" in unknown.stderr
    monkeypatch.setenv(plugin.EXTRA_SYSTEMS_ENV, "toyecho")
    monkeypatch.syspath_prepend(str(toy_system))
    monkeypatch.setattr(paper_figures, "BENCH_DIR", toy_system)
    options = paper_figures.Options(out=toy_system / "paper", repeats=1, asides=False)
    assert "echo-fanout figures" in [todo.name for todo in paper.plan(options)]  # read, as it is not quick
    entry = {e.figure: e for e in paper_entries.entries(paper_steps.State(options))}["echo"]
    assert entry.headline.verdict == "no" and entry.claim.section == "Echo, 1" and entry.rule == "fanout >= 3"
    assert entry.table[-1] == "| 2 |" and entry.source.startswith(str(out))


def test_every_experiment_s_scenarios_exist_and_run_its_kind():
    import yaml

    from testbed import paper_figures

    assert plugin.experiments(), "make paper would compare nothing"
    for kind, experiment in plugin.experiments().items():
        assert set(experiment.scenarios) == set(paper_figures.SCALE_NAMES), kind
        for path in experiment.scenarios.values():
            assert yaml.safe_load((ROOT / path).read_text())["workload"]["kind"] == kind, path
    assert sum(e.balance for e in plugin.experiments().values()) <= 1  # make paper runs one balance experiment
    for aside in paper_figures.asides():  # an aside redraws a compared kind's figure
        assert aside.kind in paper_figures.SCALES["smoke"], aside.name


def test_every_system_benchmark_is_a_make_target_with_modules_that_resolve():
    import importlib

    for name, (system, bench) in plugin.benchmarks().items():
        dry = subprocess.run(["make", "--no-print-directory", "-n", f"bench-{name}", "ARGS=--quick"], cwd=ROOT,
                             capture_output=True, text=True)  # (under `make test`, make is a sub-make)
        assert any(line.endswith(f"testbed bench {name} --quick") for line in dry.stdout.splitlines()), \
            dry.stdout + dry.stderr
        assert importlib.util.find_spec(f"{system.package}.{bench.program}") is not None, name
        if not bench.shows:  # a measurement of the machine, in no index entry
            continue
        figures = importlib.import_module(f"{system.package}.{bench.figures}")
        judges = getattr(figures, "HEADLINES", None) or {f.entry: getattr(figures, "headline", None) for f in bench.shows}
        assert {f.entry for f in bench.shows} <= set(judges) and all(map(callable, judges.values())), name
        assert bench.paper_runs or callable(getattr(figures, "draw", None)), name  # a long one is drawn from its JSON


def test_a_toy_system_s_schema_and_checks_name_file_line_and_field(toy_system):
    text = (toy_system / "toy.yaml").read_text()
    (toy_system / "wrong.yaml").write_text(text.replace("fanout: 3", "fanout: 0"))
    run = _toy_cli(toy_system, "validate", str(toy_system / "wrong.yaml"))
    assert run.returncode != 0 and "wrong.yaml:" in run.stdout + run.stderr and "fanout" in run.stdout + run.stderr
    (toy_system / "no-echoers.yaml").write_text(text.replace("role: echoer", "role: static"))
    run = _toy_cli(toy_system, "validate", str(toy_system / "no-echoers.yaml"))
    assert "needs client nodes with role: echoer" in run.stdout + run.stderr, run.stdout + run.stderr


def test_a_toy_system_s_settings_and_fault_targets_are_its_own(toy_system):
    """A system's `control` key and fault target, declared in its manifest only: taken under it,
    refused at their line under another system, naming the system that has them (both ways)."""
    text = (toy_system / "toy.yaml").read_text()
    (toy_system / "own.yaml").write_text(text + "control: {echo_period: 2s}\nfaults:\n  - {at: 5s, kill: hub}\n")
    run = _toy_cli(toy_system, "validate", str(toy_system / "own.yaml"))
    assert run.returncode == 0, run.stdout + run.stderr
    (toy_system / "zk.yaml").write_text(text + "faults:\n  - {at: 5s, kill: zookeeper, restart_after: 2s}\n")
    run = _toy_cli(toy_system, "validate", str(toy_system / "zk.yaml"))
    assert run.returncode == 2 and f"zk.yaml:{len(text.splitlines()) + 2}: faults[0].kill: 'zookeeper' is a part of " \
        "system 'epulsar', and system 'toyecho' has none" in run.stderr, run.stdout + run.stderr
    uav = (ROOT / "scenarios" / "uav-smoke.yaml").read_text().replace("settle: 15s}", "settle: 15s, echo_period: 2s}")
    (toy_system / "uav.yaml").write_text(uav)
    run = _toy_cli(toy_system, "validate", str(toy_system / "uav.yaml"))
    assert run.returncode == 2 and "control.echo_period: a setting of system 'toyecho'" in run.stderr, run.stderr


def test_an_unregistered_system_s_workload_is_refused(toy_system):
    run = _toy_cli(toy_system, "validate", str(toy_system / "toy.yaml"), registered=False)
    assert run.returncode != 0 and "kind" in run.stdout + run.stderr


def test_a_registry_line_without_a_manifest_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "nomanifest").mkdir()
    (tmp_path / "nomanifest" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="no nomanifest.manifest module"):
        plugin._load(("nomanifest",))
