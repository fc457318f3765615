"""testbed.bench.mutants, pure: every mutant's patch applies exactly once to this tree (a refactor
that moves the code fails here rather than letting the bench pass on a mutant that no longer
exists), each names a test that exists, and the runner tells caught from not caught from error on a
tiny fake tree of its own (a package `testbed` with one function and one test)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from testbed.bench import mutants
from testbed.bench.mutants import MUTANTS, Edit, Mutant, Outcome, PatchError, apply, verdict

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_patch_applies_exactly_once_and_changes_the_file(mutant, tmp_path):
    for edit in mutant.edits:
        assert (ROOT / edit.file).read_text().count(edit.old) == 1, (mutant.name, edit.file)
        (tmp_path / edit.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / edit.file, tmp_path / edit.file)
    apply(tmp_path, mutant)
    assert all((tmp_path / e.file).read_text() != (ROOT / e.file).read_text() for e in mutant.edits)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_names_a_test_function_that_exists(mutant):
    for node in mutant.tests:
        path, name = node.split("::")
        assert f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), node


def test_at_least_six_distinct_defects():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS) >= 6


def test_a_patch_found_twice_or_never_does_not_apply_and_writes_nothing(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\nx = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    twice = Mutant("twice", "", (Edit("b.py", "y = 2", "y = 3"), Edit("a.py", "x = 1", "x = 2")), ("t",))
    with pytest.raises(PatchError, match="2 times"):
        apply(tmp_path, twice)
    assert (tmp_path / "b.py").read_text() == "y = 2\n"  # nothing half-applied
    with pytest.raises(PatchError, match="0 times"):
        apply(tmp_path, Mutant("gone", "", (Edit("a.py", "z = 0", "z = 1"),), ("t",)))


FAKE = {
    "testbed/__init__.py": "",
    "testbed/calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from testbed.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                          "def test_other():\n    assert add(0, 0) == 0\n\n\n"
                          "def test_skipped():\n    import pytest\n    pytest.skip('not here')\n\n\n"
                          "def test_held():\n    assert add(2, 3) == 5, '2 runs, none held by the harness: busy'\n",
    "pyproject.toml": "[tool.pytest.ini_options]\n",
}


def fake_copy(dest: Path) -> None:
    for name, text in FAKE.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text)


def fake(name: str, old: str, new: str, test: str = "tests/test_calc.py::test_add") -> Mutant:
    return Mutant(name, name, (Edit("testbed/calc.py", old, new),), (test,))


def test_the_runner_tells_caught_from_not_caught_from_error_on_a_fake_tree(tmp_path):
    chosen = (fake("breaks", "a + b", "a - b"),                           # test_add fails: caught
              fake("harmless", "a + b", "b + a"),                         # test_add passes: not caught
              fake("moved", "a * b", "a - b"),                            # not in the source: error
              fake("skipped", "a + b", "a - b", "tests/test_calc.py::test_skipped"),  # baseline skips: unjudged
              fake("uncollected", "(a, b):", "(a, b)"),                  # the test file does not import: error
              fake("busy", "a + b", "a - b", "tests/test_calc.py::test_held"),  # failed, runs not held: unjudged
              fake("absent", "a + b", "a - b", "tests/test_calc.py::test_absent"))  # baseline not collected: unjudged
    results = {r.name: r for r in mutants.bench(chosen, fake_copy, sys.executable, build=False, timeout=120,
                                                logs=tmp_path / "logs")}
    assert {n: r.verdict for n, r in results.items()} == {
        "breaks": "caught", "harmless": "not caught", "moved": "error", "skipped": "unjudged", "uncollected": "error",
        "busy": "unjudged", "absent": "unjudged"}
    assert "patch does not apply" in results["moved"].detail
    assert results["breaks"].seconds > 0 and results["breaks"].baseline["status"] == "passed"
    assert results["absent"].seconds == 0 and "unmutated test error" in results["absent"].detail  # not run
    assert (tmp_path / "logs" / "breaks.log").read_text()


def test_the_copy_s_own_code_is_what_gets_imported(tmp_path):
    fake_copy(tmp_path)
    assert mutants.prepare(tmp_path, sys.executable, build=False) is None
    (tmp_path / "testbed" / "__init__.py").unlink()
    (tmp_path / "testbed").rename(tmp_path / "elsewhere")  # this venv's testbed would be imported instead
    assert "not from the copy" in mutants.prepare(tmp_path, sys.executable, build=False)


@pytest.mark.parametrize("baseline, mutated, expected", [
    ("passed", "failed", "caught"), ("passed", "passed", "not caught"), ("failed", "failed", "unjudged"),
    ("skipped", "failed", "unjudged"), ("passed", "skipped", "unjudged"), ("passed", "error", "error"),
    ("passed", "not held", "unjudged"), (None, "failed", "unjudged")])
def test_verdicts(baseline, mutated, expected):
    base = Outcome(baseline, 1.0) if baseline else None
    assert verdict(base, Outcome(mutated, 1.0)) == expected


def test_a_run_of_some_mutants_replaces_theirs_in_the_record_and_keeps_the_others(tmp_path):
    record = tmp_path / "mutants.json"
    first = [mutants.Result(m.name, m.defect, m.files, list(m.tests), "unjudged", 1.0, "") for m in MUTANTS[:2]]
    record.write_text(json.dumps(mutants.merged(record, first, "aaaaaaa")))
    again = [mutants.Result(MUTANTS[0].name, "", "", [], "caught", 2.0, "")]
    kept = mutants.merged(record, again, "bbbbbbb")["mutants"]
    assert [(m["name"], m["verdict"], m["commit"]) for m in kept] == [
        (MUTANTS[0].name, "caught", "bbbbbbb"), (MUTANTS[1].name, "unjudged", "aaaaaaa")]
