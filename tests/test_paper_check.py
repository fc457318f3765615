"""Whether the paper's index still describes the code (`testbed paper --check`), what each entry records,
and what `--resume` skips: against a small real git repository (real commits, real files), and the
project's own for the CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed import paper, paper_check, paper_entries, paper_figures, paper_record, paper_steps, provenance
from testbed.cli import app

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    """A project in miniature: a harness, two systems and a scenario, one commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("/results/\n")
    commit(repo, {"testbed/emulation/link.py": "a\n", "testbed/systems/pubsub/broker.py": "b\n",
                  "testbed/systems/bad/sim.py": "c\n", "testbed/view/page.py": "v\n", "scenarios/uav.yaml": "u\n",
                  "README.md": "r\n"}, "first")
    return repo


@pytest.fixture
def project_head() -> dict:
    """This project's HEAD and uncommitted files, which `make paper` records beside each step."""
    head = provenance.head()
    if head["commit"] is None:
        pytest.skip("the project is not a git checkout here (the small repository's tests still ran)")
    return head


HARNESS = ["testbed", ":(exclude)testbed/view"]
SYSTEMS = ("pubsub", "bad")


def entry(figure: str, commits, system: str = "pubsub", status: str = "ok", dirty=(), problems=()) -> dict:
    """As testbed.paper_figures.depends declares them: the harness without the other systems, then its own scenario."""
    others = [f":(exclude)testbed/systems/{s}" for s in SYSTEMS if s != system]
    return {"figure": figure, "status": status, "problems": list(problems), "commits": list(commits),
            "dirty": list(dirty), "date": "2026-11-28 10:00", "depends": HARNESS + others + ["scenarios/uav.yaml"]}


def write_record(out: Path, entries: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    paper_record.write(out, {"finished": "2026-11-28 10:00:00", "steps": [], "entries": entries})


def states(repo: Path, out: Path) -> tuple[int, dict[str, str], list[str]]:
    said: list[str] = []
    code = paper_check.check(out, repo, say=said.append)
    found = {}
    for line in said:
        words = line.split()
        if words and words[0] in ("current", "stale", "missing", "unknown"):
            found[words[1]] = words[0]
    return code, found, said


# ---------------------------------------------------------------------------------------- git facts

def test_head_names_the_commit_and_every_uncommitted_file(repo):
    first = git(repo, "rev-parse", "HEAD")
    assert provenance.head(repo) == {"commit": first, "dirty": []}
    (repo / "testbed/emulation/link.py").write_text("changed\n")
    (repo / "testbed/emulation/new file.py").write_text("new\n")
    git(repo, "mv", "README.md", "READ.md")
    (repo / "results").mkdir()
    (repo / "results/run.json").write_text("{}")  # ignored: results are not code
    assert provenance.head(repo)["dirty"] == ["READ.md", "testbed/emulation/link.py", "testbed/emulation/new file.py"]
    assert provenance.head(repo.parent)["commit"] is None  # not a checkout: no commit named


def test_changed_since_reads_the_pathspecs_and_refuses_an_unknown_commit(repo):
    first = git(repo, "rev-parse", "HEAD")
    commit(repo, {"testbed/systems/bad/sim.py": "c2\n", "testbed/view/page.py": "v2\n"}, "bad and view")
    assert provenance.changed_since(first, HARNESS + [":(exclude)testbed/systems/bad"], repo) == []
    assert provenance.changed_since(first, HARNESS + ["scenarios"], repo) == ["testbed/systems/bad/sim.py"]
    (repo / "testbed/emulation/link.py").write_text("uncommitted\n")  # the checkout, not only HEAD, is compared
    assert provenance.changed_since(first, HARNESS + [":(exclude)testbed/systems"], repo) == ["testbed/emulation/link.py"]
    with pytest.raises(provenance.UnknownCommit):
        provenance.changed_since("0" * 40, HARNESS, repo)
    assert provenance.dirty_under(["testbed/view/page.py", "testbed/emulation/link.py", "x.py"], HARNESS, repo) == [
        "testbed/emulation/link.py"]


# ---------------------------------------------------------------------------------------- --check

def test_check_says_current_stale_missing_and_unknown(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "paper"
    write_record(out, [entry("fig8", [first]), entry("bad-sim", [first], system="bad"),
                       entry("tracking", [], status="missing", problems=["missing: results/bench/tracking.json"]),
                       entry("autotune", [None], system="autotune")])
    code, found, said = states(repo, out)
    assert found == {"fig8": "current", "bad-sim": "current", "tracking": "missing", "autotune": "unknown"}
    assert code == 1 and said[-1].startswith("paper --check: 2 current, 0 stale, 1 missing, 1 unknown")
    assert any("tracking" in line and "results/bench/tracking.json" in line for line in said)

    commit(repo, {"testbed/systems/bad/sim.py": "c2\n", "README.md": "r2\n"}, "BAD's simulation changes")
    code, found, said = states(repo, out)
    assert found["fig8"] == "current" and found["bad-sim"] == "stale"  # only BAD's entry rests on BAD's folder
    assert any("bad-sim" in line and "changed since: testbed/systems/bad/sim.py" in line for line in said)

    commit(repo, {"testbed/emulation/link.py": "a2\n"}, "the harness changes")
    code, found, _ = states(repo, out)
    assert found["fig8"] == "stale" and found["bad-sim"] == "stale"  # every entry rests on the harness


def test_check_is_zero_only_when_every_entry_is_current(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "paper"
    write_record(out, [entry("fig8", [first]), entry("bad-sim", [first], system="bad")])
    assert states(repo, out)[0] == 0
    commit(repo, {"README.md": "r2\n", "testbed/view/page.py": "v2\n"}, "outside every entry's paths")
    assert states(repo, out)[0] == 0
    write_record(out, [entry("fig8", [first], dirty=["testbed/emulation/link.py"])])  # ran on an uncommitted change
    code, found, said = states(repo, out)
    assert code == 1 and found == {"fig8": "stale"} and "uncommitted changes to testbed/emulation/link.py" in said[1]
    write_record(out, [entry("fig8", ["1234567"])])  # a commit this repository does not hold
    assert states(repo, out)[1] == {"fig8": "unknown"}


def test_check_without_an_index_says_so(tmp_path):
    result = CliRunner().invoke(app, ["paper", "--check", "--out", str(tmp_path / "none")])
    assert result.exit_code == 1 and "no index at" in result.output and "make paper" in result.output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.json").write_text("{")
    result = CliRunner().invoke(app, ["paper", "--check", "--out", str(tmp_path / "bad")])
    assert result.exit_code == 1 and "index.json: not JSON" in result.output


def test_check_against_an_older_commit_of_this_project(tmp_path, project_head):
    """The project's own history: an entry made at its first commit is stale, and names harness files."""
    repo = provenance.REPO
    first = git(repo, "rev-list", "--max-parents=0", "HEAD").split()[0]
    if first == project_head["commit"]:
        pytest.skip("a clone of one commit (shallow): no older commit of this project to check against")
    out = tmp_path / "paper"
    made = {"figure": "fig8", "status": "ok", "problems": [], "commits": [first], "dirty": [], "date": "",
            "depends": paper_figures.depends(paper_figures.Options())["fig8-smoke"]}
    write_record(out, [made])
    result = CliRunner().invoke(app, ["paper", "--check", "--out", str(out)])
    assert result.exit_code == 1 and "  stale    fig8  made at " + first[:7] in result.output
    files = paper_check.judge(made)["files"]
    assert "testbed/experiment.py" in files and "scenarios/uav-smoke.yaml" in files
    assert not any(f.startswith(("testbed/systems/bad/", "testbed/view/", "docs/")) for f in files)


# ---------------------------------------------------------------------------------------- the record

def test_resume_takes_only_a_step_done_at_this_commit_on_the_same_tree():
    now = {"commit": "a" * 40, "dirty": []}
    done = {"run x": {"status": "ok", "commit": "a" * 40, "dirty": []},
            "run y": {"status": "failed", "commit": "a" * 40, "dirty": []},
            "run z": {"status": "ok", "commit": "b" * 40, "dirty": []},
            "run w": {"status": "ok", "commit": "aaaaaaa", "dirty": ["testbed/x.py"]}}
    assert paper_record.resumable(done, "run x", now) is done["run x"]
    assert paper_record.resumable(done, "run x", {**now, "dirty": ["testbed/x.py"]}) is None
    assert [n for n in ("run y", "run z", "run w", "run v") if paper_record.resumable(done, n, now)] == []
    assert paper_record.resumable(done, "run w", {**now, "dirty": ["testbed/x.py"]}) is done["run w"]


def test_expected_durations_come_from_the_last_timing_else_the_guess():
    done = {"run x": {"status": "ok", "seconds": 93.0}, "run y": {"status": "ok", "seconds": 5.0, "elsewhere": True},
            "run z": {"status": "failed", "seconds": 2.0},
            "run r": {"status": "ok", "seconds": 95.0, "elsewhere": True, "resumed": True}}
    assert [paper_record.expected_s(done, n, 100.0) for n in ("run x", "run y", "run z", "run r", "run new")] == [
        93, 100, 100, 95, 100]  # a redraw of data made elsewhere says nothing of a run's time; a resumed one does
    guesses = {t.name: t.guess_s for t in paper.plan(paper_figures.Options(repeats=1, asides=False))}
    assert guesses["run scenarios/uav-smoke.yaml --policy epulsar (repeat 1/1)"] == 60 + paper.RUN_OVERHEAD_S


def run_dir(root: Path, name: str, seconds: int, saturated: int) -> str:
    (root / name).mkdir(parents=True)
    (root / name / "run.json").write_text(json.dumps({"harness": {"seconds": seconds, "saturated_seconds": saturated},
                                                      "complete": True}))
    return name


def test_an_entry_records_its_commits_runs_guard_and_time(tmp_path):
    steps = [{"name": "run a", "figures": ["fig8-smoke", "violations"], "commit": "c1", "dirty": [],
              "date": "2026-11-28 10:00", "seconds": 95, "runs": [run_dir(tmp_path, "a", 60, 12)]},
             {"name": "run b", "figures": ["fig8-smoke"], "commit": "c1", "dirty": ["testbed/x.py"],
              "date": "2026-11-28 10:02", "seconds": 93, "runs": [run_dir(tmp_path, "b", 61, 0)]},
             {"name": "PySpark comparison", "figures": ["fig8-smoke"], "commit": "c2", "dirty": [],
              "date": "2026-11-28 10:04", "seconds": 40, "runs": []}]
    made = paper_record.made("fig8-smoke", steps, tmp_path)
    assert made["commits"] == ["c1", "c2"] and made["dirty"] == ["testbed/x.py"] and made["date"] == "2026-11-28 10:04"
    assert made["runs"] == ["a", "b"] and made["seconds"] == 228
    assert made["guard"] == "valid 109 of 121 s over 2 runs"
    assert paper_record.made("violations", steps, tmp_path)["guard"] == "valid 48 of 60 s"
    assert paper_record.made("fig3b", steps, tmp_path) == {
        "commits": [], "dirty": [], "date": "", "runs": [], "guard": "-", "seconds": 0, "steps": []}


def test_run_step_resumes_a_run_made_at_this_commit_and_reruns_one_made_at_another(tmp_path, monkeypatch, project_head):
    started = []
    monkeypatch.setattr(paper_steps, "_subprocess", lambda argv: started.append(argv) or 1)  # a run that makes nothing
    out = tmp_path / "paper"
    name = run_dir(out / "runs", "uav-smoke-abc123", 60, 3)
    head = project_head
    record = {"status": "ok", "commit": head["commit"], "dirty": head["dirty"], "date": "2026-11-28 10:00",
              "seconds": 95.0, "runs": [str(out / "runs" / name)], "source_time": None}
    step_name = "run scenarios/uav-smoke.yaml --policy epulsar --seed 3"
    state = paper_steps.State(paper_figures.Options(out=out, resume=True), previous={step_name: record}, head=head)
    step = paper_steps.run_step("uav-swarm", "scenarios/uav-smoke.yaml", "epulsar", state)
    assert started == [] and step.status == "ok" and step.elsewhere and step.seconds == 95.0
    assert state.runs[0]["dir"] == str(out / "runs" / name) and step.runs == [str(out / "runs" / name)]
    moved = paper_steps.State(paper_figures.Options(out=out, resume=True), previous={step_name: {**record, "commit": "f" * 40}},
                        head=head)
    assert paper_steps.run_step("uav-swarm", "scenarios/uav-smoke.yaml", "epulsar", moved).status == "failed"
    assert len(started) == 1 and started[0][3:5] == ["run", "scenarios/uav-smoke.yaml"]


def test_main_records_every_step_and_entry_and_its_total_time(tmp_path, monkeypatch, project_head):
    from analysis.headlines import Headline
    from analysis.paper_index import Entry

    def step(state):
        return paper_steps.Step("bench nc (fig3b)", "ok", detail="measured", figures=("fig3b",))

    monkeypatch.setattr(paper, "plan", lambda options: [paper.Todo("bench nc", step, 90.0),
                                                        paper.Todo("bench later", step, 30.0)])
    def entries(state):  # as paper_entries.entries makes them: each with who made it
        steps = [paper_steps.step_record(s) for s in state.steps]
        return [Entry("fig3b", ["fig3b.png"], Headline("1.9 ms", True, "2-8 nodes"), made=paper_record.made("fig3b", steps)),
                Entry("tracking", missing=["tracking.json"], made=paper_record.made("tracking", steps))]

    monkeypatch.setattr(paper, "entries", entries)
    said: list[str] = []
    out = tmp_path / "paper"
    out.mkdir()
    (out / "fig3b.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert paper.main(paper_figures.Options(out=out), say=said.append) == 0
    text = "\n".join(said)
    assert "~2.0 min left with this one" in text and "~0.5 min left with this one" in text
    assert said[-1].startswith("paper: took ") and said[-1].endswith(" min in all")
    record = paper_record.read(out)
    head = project_head
    assert [s["commit"] for s in record["steps"]] == [head["commit"]] * 2 and record["commit"] == head["commit"]
    fig3b, tracking = record["entries"]
    assert fig3b["status"] == "ok" and fig3b["commits"] == [head["commit"]] and fig3b["steps"] == ["bench nc (fig3b)"] * 2
    assert tracking["status"] == "missing" and tracking["commits"] == [] and "missing: tracking.json" in tracking["problems"]
    md = (out / "index.md").read_text()
    assert f"written at commit {head['commit'][:7]}" in md and "| [tracking](#tracking) | missing | - |" in md


def test_a_benchmark_json_names_the_commit_testbed_bench_marked_before_writing_it(repo, tmp_path):
    result = tmp_path / "bench" / "tracking.json"
    assert provenance.marked(result, 10.0) is None  # no mark: not known
    mark = json.loads(provenance.mark(result, repo).read_text())[-1]
    assert mark["commit"] == git(repo, "rev-parse", "HEAD") and mark["dirty"] == []
    assert provenance.marked(result, mark["started"] + 5)["commit"] == mark["commit"]
    assert provenance.marked(result, mark["started"] - 5) is None  # a JSON older than the mark: some earlier run's
    assert provenance.marked(result, None) is None

    result.write_text(json.dumps({"time": mark["started"] + 5}))
    step, state = paper_steps.Step("tracking figures", figures=("tracking",)), paper_steps.State(paper_figures.Options(out=tmp_path))
    paper_steps._made_elsewhere(step, result, state)
    assert step.elsewhere and step.commit == mark["commit"] and step.source_time == mark["started"] + 5
    result.write_text(json.dumps({"time": mark["started"] - 5}))
    paper_steps._made_elsewhere(step, result, state)
    assert step.commit is None and step.date  # the date it was measured, the commit not known

    second = commit(repo, {"README.md": "r2\n"}, "second")
    later = json.loads(provenance.mark(result, repo).read_text())[-1]  # a run that wrote elsewhere, or failed
    assert later["commit"] == second and provenance.marked(result, mark["started"] + 1e-6)["commit"] == mark["commit"]
    assert provenance.marked(result, later["started"] + 1)["commit"] == second


def test_only_plans_the_steps_feeding_the_entries_named(tmp_path, monkeypatch):
    from testbed import load

    monkeypatch.setattr(load, "capacity_file", lambda *_: tmp_path / "capacity-compiled.json")  # not measured
    names = lambda **kw: [t.name for t in paper.plan(paper_figures.Options(policies=("epulsar",), repeats=1, **kw))]  # noqa: E731
    assert names(only=("fig9",)) == ["run scenarios/mmog-smoke.yaml --policy epulsar (repeat 1/1)",
                                     "run scenarios/mmog-smoke.yaml --system natscluster (repeat 1/1)", "PySpark comparison"]
    assert names(only=("fig9",), systems=()) == ["run scenarios/mmog-smoke.yaml --policy epulsar (repeat 1/1)",
                                                 "PySpark comparison"]
    assert names(only=("bad-sim", "tracking")) == ["bench bad", "tracking figures"]
    assert names(only=("fig8",)) == ["run scenarios/uav-comparable.yaml --policy epulsar",
                                     "PySpark comparison of the comparable run"]
    assert len(names()) > 15
    state = paper_steps.State(paper_figures.Options(out=tmp_path, only=("fig9",)))
    by_fig = {e.figure: e for e in paper_entries.entries(state)}
    assert by_fig["fig3b"].missing[0] == "not run (--only fig9)" and by_fig["fig9"].missing[0] != "not run (--only fig9)"
    result = CliRunner().invoke(app, ["paper", "--only", "fig9,fig99"])
    assert result.exit_code == 2 and "paper: Invalid value for '--only': fig99; allowed: fig3b," in result.output


def test_a_paper_that_redoes_part_keeps_the_records_of_the_rest_at_this_commit(tmp_path, monkeypatch, project_head):
    def step(name):
        return lambda state: paper_steps.Step(name, "ok", detail="measured", figures=("fig3b",))

    out = tmp_path / "paper"
    monkeypatch.setattr(paper, "entries", lambda state: [])
    monkeypatch.setattr(paper, "plan", lambda options: [paper.Todo("a", step("bench a"), 1.0),
                                                        paper.Todo("b", step("bench b"), 1.0)])
    assert paper.main(paper_figures.Options(out=out), say=lambda _: None) == 0
    monkeypatch.setattr(paper, "plan", lambda options: [paper.Todo("a", step("bench a"), 1.0)])  # as --only would
    assert paper.main(paper_figures.Options(out=out), say=lambda _: None) == 0
    record = paper_record.read(out)
    assert [s["name"] for s in record["steps"]] == ["bench a"] and [s["name"] for s in record["earlier"]] == ["bench b"]
    assert set(paper_record.steps_by_name(record)) == {"bench a", "bench b"}
    record["commit"] = "f" * 40  # a record of another commit is kept only while its commit is checked out
    for s in record["steps"] + record["earlier"]:
        s["commit"] = "f" * 40
    paper_record.write(out, record)
    assert paper.main(paper_figures.Options(out=out), say=lambda _: None) == 0
    assert paper_record.read(out)["earlier"] == []


def test_check_says_when_the_index_is_unfinished_or_older_than_index_json(tmp_path):
    said: list[str] = []
    (tmp_path / "index.md").write_text("# an index from before\n")
    assert paper_check.check(tmp_path, say=said.append) == 1
    assert "index.md there is older: made before the index named its commits" in said[-1]
    paper_record.write(tmp_path, {"finished": "", "steps": [{"name": "bench nc", "status": "ok"}]})
    assert paper_check.check(tmp_path, say=said.append) == 1
    assert "has no entries yet" in said[-1] and "--resume" in said[-1]


def test_bench_step_redraws_a_benchmark_done_at_this_commit_and_runs_one_whose_json_changed(tmp_path, monkeypatch,
                                                                                            project_head):
    argvs = []
    monkeypatch.setattr(paper_steps, "_subprocess", lambda argv: argvs.append(argv) or 0)
    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    bench = paper_figures.Microbenchmark("nc", "testbed.bench.nc", ("fig3b",), ("fig3b.png",), "--figures-only")
    (tmp_path / "nc.json").write_text(json.dumps({"time": 100.0}))
    head = project_head
    record = {"status": "ok", "commit": head["commit"], "dirty": head["dirty"], "date": "2026-11-28 10:00",
              "seconds": 400.0, "source_time": 100.0, "runs": []}
    state = paper_steps.State(paper_figures.Options(out=tmp_path / "paper", resume=True),
                        previous={"bench nc (fig3b)": record}, head=head)
    (tmp_path / "paper").mkdir()
    step = paper_steps.bench_step(bench, state)
    assert argvs[-1][-1] == "--figures-only" and step.resumed and step.seconds == 400.0 and step.commit == head["commit"]
    assert not (tmp_path / "nc.made.json").exists()  # a redraw makes nothing new
    (tmp_path / "nc.json").write_text(json.dumps({"time": 200.0}))  # measured again since (make bench-nc)
    step = paper_steps.bench_step(bench, state)
    assert argvs[-1][-1] == "testbed.bench.nc" and not step.resumed and step.source_time == 200.0
    assert json.loads((tmp_path / "nc.made.json").read_text())[-1]["commit"] == head["commit"]


def test_a_reused_run_names_the_commit_and_uncommitted_files_its_run_json_records(tmp_path):
    (tmp_path / "uav-smoke-r1").mkdir()
    (tmp_path / "uav-smoke-r1" / "run.json").write_text(json.dumps(
        {"git_commit": "abc1234", "git_dirty": ["testbed/experiment.py"], "started": 1795879567.0}))
    step = paper_steps.Step("run x")
    paper_steps._made_by_run(step, tmp_path / "uav-smoke-r1")
    assert (step.commit, step.dirty, step.elsewhere) == ("abc1234", ["testbed/experiment.py"], True)
    assert step.runs == [str(tmp_path / "uav-smoke-r1")] and step.date.startswith("2026-11-")
    (tmp_path / "uav-smoke-r1" / "run.json").write_text(json.dumps({"git_commit": "unknown"}))  # made outside git
    paper_steps._made_by_run(step, tmp_path / "uav-smoke-r1")
    assert step.commit is None and step.dirty == [] and step.date == ""


def test_an_experiment_says_its_size_against_the_papers():
    from testbed.paper_scale import against_paper

    assert against_paper("uav-swarm", "scenarios/uav-smoke.yaml") == (
        "0.011x the paper's load (240 of 22,400 deliveries/s), clients uav-swarm 8 of 64")  # 2 swarms of 4 UAVs
    assert against_paper("uav-swarm", "scenarios/uav.yaml").startswith("1.0x the paper's load (22,400 of 22,400")
    assert against_paper("mmog", "scenarios/mmog-smoke.yaml").endswith("clients game-server 10 of 10, avatar 16 of 64")
    assert "scenarios/hotspot.yaml's load" in against_paper("hotspot", "scenarios/hotspot-smoke.yaml")  # no paper size
    assert against_paper("mmog", "scenarios/missing.yaml").startswith("size against scenarios/mmog.yaml not known")


def test_testbed_bench_marks_beside_the_json_its_out_option_names():
    from testbed.cli import _bench_out

    assert _bench_out(["--quick", "--out", "x/y.json"]) == Path("x/y.json")
    assert _bench_out(["--out=z.json", "--fanout", "2"]) == Path("z.json")
    assert _bench_out(["--quick"]) is None
