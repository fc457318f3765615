"""`make bench-mutants`: do the live tests catch what they are there to catch? Each mutant is a named
defect written as a text patch on one file of the tree (placement to a random broker, a migration
that never completes, the shaper adding 20 ms to one link, a client dropping 1 % of what it
receives, a handover trigger that never fires, a durable acknowledgement sent before the message is
stored), with the live test that must fail because of it: mutation testing, one hand-chosen mutant
per mechanism rather than thousands of generated ones (the live tests cost minutes each).

Each mutant runs on its own copy of the committed tree (`git archive HEAD`: uncommitted changes are
not in it), its C parts compiled there (the copy has its own `_build`), its test run by this
interpreter with PYTHONPATH at the copy (checked: `testbed.__file__` must resolve inside it). Every
distinct test runs once unmutated first; it must pass, else the mutants it judges are `unjudged`.

A verdict is `caught` (the test failed), `not caught` (it passed), `unjudged` (the baseline did not
pass; the mutant's test was skipped, or failed only because the harness held none of its runs:
`tests.live.run_held`) or `error` (the patch does not apply exactly once, the copy
could not be built or imported, the session failed outside any test, or it timed out): only
`caught` counts, and the bench exits 1 unless every mutant is caught. Result:
results/bench/mutants.json, the pytest output of each run in results/bench/mutants/.

    python -m testbed.bench.mutants [--only NAME,...] [--timeout 1200] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
OUT = Path("results/bench")
NOT_HELD = "none held by the harness"  # tests.live.run_held: no run was evidence (outside load, steal)
TIMEOUT_S = 1200.0  # one test's run: the UAV smoke takes 2-3 min on a busy 2-core VM, twice when not held


@dataclass(frozen=True)
class Edit:
    """Replace `old` by `new` in `file` (relative to the tree); `old` must occur exactly once."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    defect: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # pytest node ids, one of which must fail

    @property
    def files(self) -> str:
        return ", ".join(dict.fromkeys(e.file for e in self.edits))


DATAPLANE_ENHANCED = "tests/test_dataplane.py::test_enhanced_migration_moves_the_topic_without_loss"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("placement-random", "ePulsar places and moves topics on a random broker, not its ranking's first",
           (Edit("testbed/policies/epulsar.py",
                 "        return ranked(scores, threshold_of(topic, snapshot))\n",
                 "        return __import__('random').sample(sorted(snapshot.brokers), len(snapshot.brokers))  # mutant\n"),),
           ("tests/test_run_uav.py::test_topics_start_at_their_swarm_and_follow_it_within_the_detection_window",)),
    Mutant("migration-never-completes", "the old owner waits forever for the new owner's acquire: the release "
           "never answers, so the migration never completes",
           (Edit("testbed/systems/pubsub/broker.py",
                 "                acquired = json.loads(reply.data).get(\"ok\", False)\n",
                 "                await asyncio.Event().wait()  # mutant: the acquire is never reported\n"
                 "                acquired = json.loads(reply.data).get(\"ok\", False)\n"),),
           (DATAPLANE_ENHANCED,)),
    Mutant("shaper-20ms-one-link", "the delay line holds link 0's a-to-b direction 20 ms longer than configured",
           (Edit("testbed/emulation/delayline.c",
                 "        case 1: case 2: l->dirs[c - 1].delay = v; break;\n",
                 "        case 1: case 2: l->dirs[c - 1].delay = v + (l->id == 0 && c == 1 ? 0.020 : 0.0); break;"
                 "  /* mutant */\n"),),
           ("tests/test_delayline.py::test_symmetric_delay_rtt",)),
    Mutant("client-drops-1pct", "a subscriber (nats-py data plane) drops 1 % of the messages it receives",
           (Edit("testbed/systems/pubsub/client.py",
                 "        self._through(ep)\n        stats = self.stats.get(producer)\n",
                 "        self._through(ep)\n        if seq % 100 == 99:  # mutant: 1 % dropped\n            return\n"
                 "        stats = self.stats.get(producer)\n"),),
           (DATAPLANE_ENHANCED,)),
    Mutant("handover-trigger-never-fires", "the handover watch never sees its node's coordinate move",
           (Edit("testbed/systems/pubsub/handover_watch.py",
                 "            if not coordinate_moved(self.reference, now, self.trigger.min_change_s, self.distance):\n",
                 "            if True:  # mutant: the trigger never fires\n"),),
           ("tests/test_handover_live.py::"
            "test_the_trigger_moves_a_handed_over_swarms_topics_early_and_never_back_within_the_hold",)),
    Mutant("durable-ack-before-storage", "a durable topic's broker acknowledges a publish before the stream stored it",
           (Edit("testbed/systems/pubsub/durable.py",
                 "        began = time.monotonic()\n        headers = msg.headers and",
                 "        await self.agent.nc.publish(msg.reply, b\"\")  # mutant: acknowledged before stored\n"
                 "        began = time.monotonic()\n        headers = msg.headers and"),),
           ("tests/test_durable_live.py::test_acknowledged_messages_survive_a_broker_crash_and_a_storage_node_crash",)),
)


class PatchError(RuntimeError):
    """The mutant's text is not in the tree exactly once: the source changed under it."""


def apply(tree: Path, mutant: Mutant) -> None:
    """Write `mutant`'s edits into `tree`; PatchError (and nothing written) unless each applies once."""
    texts = {}
    for edit in mutant.edits:
        path = tree / edit.file
        text = texts.get(path) or (path.read_text() if path.exists() else "")
        found = text.count(edit.old)
        if found != 1:
            raise PatchError(f"patch does not apply: {edit.file} holds its text {found} times, not once")
        texts[path] = text.replace(edit.old, edit.new)
    for path, text in texts.items():
        path.write_text(text)


def git_copy(dest: Path, repo: Path = REPO, rev: str = "HEAD") -> None:
    """The tree at `rev` (committed files only) into `dest`."""
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {rev} of {repo} failed")


# A copy's C parts, compiled where its code will look for them (the engine only where libnats is)
BUILD = """
from testbed.emulation.delayline import ensure_built
ensure_built()
from testbed.systems.pubsub import engine
try:
    engine.ensure_built()
except engine.EngineUnavailable as error:
    if "is missing" not in str(error):
        raise
"""


def prepare(tree: Path, python: str, build: bool = True) -> str | None:
    """None when `tree`'s own `testbed` is what `python` imports there (and, with `build`, its C
    parts compiled), else why not."""
    check = "import testbed, sys; print(testbed.__file__)" + (f"\n{BUILD}" if build else "")
    done = subprocess.run([python, "-c", check], cwd=tree, env=env_for(tree), capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        return f"the copy does not build or import: {done.stderr.strip()[-600:]}"
    where = Path(done.stdout.strip().splitlines()[0]).resolve()
    if not where.is_relative_to(tree.resolve()):
        return f"testbed imported from {where}, not from the copy {tree}"
    return None


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass
class Outcome:
    status: str  # passed, failed, skipped, error, or not held (the test said its runs were no evidence)
    seconds: float
    detail: str = ""


def outcome(returncode: int, junit: Path, seconds: float, output: str) -> Outcome:
    """What one pytest session said, from its JUnit XML: a test that failed (setup included) is
    `failed`; all passed with the session failing anyway (e.g. leftovers) or nothing collected is
    `error`; only skips is `skipped`."""
    cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []
    kinds = [next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed") for case in cases]
    said = " ".join(f"{c.get('message', '')} {c.text or ''}" for case in cases for c in case
                    if c.tag in ("failure", "error"))
    tail = output.strip()[-800:]
    if {"failure", "error"} & set(kinds) and returncode == 1:
        return Outcome("not held" if NOT_HELD in said else "failed", seconds, tail)
    if not kinds or returncode not in (0, 1):
        return Outcome("error", seconds, f"pytest exit {returncode}, {len(kinds)} tests: {tail}")
    if returncode != 0:
        return Outcome("error", seconds, f"every test passed, the session failed: {tail}")
    if set(kinds) == {"skipped"}:
        return Outcome("skipped", seconds, tail)
    return Outcome("passed", seconds, tail)


def run_tests(tree: Path, tests: tuple[str, ...], python: str, timeout: float = TIMEOUT_S,
              log: Path | None = None) -> Outcome:
    """`tests` run in `tree` by `python` (stopping at the first failure), with the tree's code."""
    junit = tree / ".mutants-junit.xml"
    junit.unlink(missing_ok=True)
    # without the suite's leftover check (tests/leftovers.py): on a shared machine it counts what other
    # sessions make meanwhile, and what a test leaves behind is not what the mutant is judged on
    argv = [python, "-m", "pytest", "-x", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:tests.leftovers",
            f"--junitxml={junit}", *tests]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=tree, env=env_for(tree), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout or ""
        _write(log, output)
        return Outcome("error", time.monotonic() - started, f"timed out after {timeout:g} s")
    _write(log, done.stdout + done.stderr)
    return outcome(done.returncode, junit, time.monotonic() - started, done.stdout + done.stderr)


def _write(log: Path | None, text: str) -> None:
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)


def verdict(baseline: Outcome | None, mutated: Outcome) -> str:
    if mutated.status == "error":
        return "error"
    if baseline is None or baseline.status != "passed" or mutated.status in ("skipped", "not held"):
        return "unjudged"
    return "caught" if mutated.status == "failed" else "not caught"


@dataclass
class Result:
    name: str
    defect: str
    files: str
    tests: list[str]
    verdict: str
    seconds: float
    detail: str
    baseline: dict = field(default_factory=dict)


def judge(mutant: Mutant, baseline: Outcome | None, copy: Callable[[Path], None], python: str,
          build: bool = True, timeout: float = TIMEOUT_S, logs: Path | None = None) -> Result:
    """`mutant` applied to a fresh copy, its tests run there, the verdict against `baseline` (a
    patch that does not apply is an error even then; a baseline that did not pass runs nothing)."""
    tree = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant.name}-"))
    base = asdict(baseline) if baseline else {}
    base.pop("detail", None)
    if base:
        base["seconds"] = round(base["seconds"], 1)

    def result(verdict_: str, outcome_: Outcome) -> Result:
        return Result(mutant.name, mutant.defect, mutant.files, list(mutant.tests), verdict_,
                      round(outcome_.seconds, 1), outcome_.detail, base)
    try:
        copy(tree)
        try:
            apply(tree, mutant)
        except PatchError as error:
            return result("error", Outcome("error", 0.0, str(error)))
        if baseline is None or baseline.status != "passed":  # nothing to judge against: the machine's time saved
            why = f"the unmutated test {baseline.status if baseline else 'did not run'}"
            return result("unjudged", Outcome("unjudged", 0.0, f"{why}: {baseline.detail[-600:] if baseline else ''}"))
        started = time.monotonic()
        why = prepare(tree, python, build)
        if why:
            return result("error", Outcome("error", time.monotonic() - started, why))
        mutated = run_tests(tree, mutant.tests, python, timeout, logs / f"{mutant.name}.log" if logs else None)
        return result(verdict(baseline, mutated), mutated)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def baselines(mutants: tuple[Mutant, ...], copy: Callable[[Path], None], python: str, build: bool = True,
              timeout: float = TIMEOUT_S, logs: Path | None = None) -> dict[tuple[str, ...], Outcome]:
    """Each distinct test of `mutants` once, on one unmutated copy."""
    tree = Path(tempfile.mkdtemp(prefix="mutant-baseline-"))
    try:
        copy(tree)
        why = prepare(tree, python, build)
        found = {}
        for i, tests in enumerate(dict.fromkeys(m.tests for m in mutants)):
            found[tests] = (Outcome("error", 0.0, why) if why else
                            run_tests(tree, tests, python, timeout, logs / f"baseline-{i}.log" if logs else None))
            print(f"baseline {' '.join(tests)}: {found[tests].status} in {found[tests].seconds:.0f} s", flush=True)
        return found
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def bench(mutants: tuple[Mutant, ...], copy: Callable[[Path], None], python: str = sys.executable,
          build: bool = True, timeout: float = TIMEOUT_S, logs: Path | None = None) -> list[Result]:
    found = baselines(mutants, copy, python, build, timeout, logs)
    results = []
    for mutant in mutants:
        results.append(judge(mutant, found[mutant.tests], copy, python, build, timeout, logs))
        print(f"{mutant.name}: {results[-1].verdict} in {results[-1].seconds:.0f} s", flush=True)
    return results


def table(results: list[Result]):
    from testbed.screen import Table

    out = Table(title="mutants: each defect against the live test that must catch it")
    for column in ("defect", "file", "test", "verdict", "s", "baseline s"):
        out.add_column(column, justify="right" if column.endswith("s") and len(column) < 12 else "left")
    for r in results:
        tests = ", ".join(t.split("::")[-1] for t in r.tests)
        out.add_row(r.name, r.files, tests, r.verdict, f"{r.seconds:.0f}", f"{r.baseline.get('seconds', 0):.0f}")
    return out


def merged(path: Path, results: list[Result], commit: str) -> dict:
    """The record with `results` in it: a run of some mutants (`--only`) replaces theirs and keeps the
    others' (each entry says its commit and date)."""
    when = time.strftime("%Y-%m-%d %H:%M")
    fresh = {r.name: {**asdict(r), "commit": commit, "date": when} for r in results}
    before = json.loads(path.read_text()) if path.exists() else {}
    kept = [{"commit": before.get("commit"), "date": before.get("date"), **m} for m in before.get("mutants", [])]
    by_name = {m["name"]: m for m in kept} | fresh
    order = [m.name for m in MUTANTS] + sorted(set(by_name) - {m.name for m in MUTANTS})
    return {"mutants": [by_name[n] for n in order if n in by_name]}


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--only", help="comma-separated mutant names")
    args.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds for one test session")
    args.add_argument("--list", action="store_true", help="list the mutants and their tests")
    opts = args.parse_args(argv)
    chosen = MUTANTS
    if opts.only:
        names = opts.only.split(",")
        unknown = set(names) - {m.name for m in MUTANTS}
        if unknown:
            args.error(f"no mutant {', '.join(sorted(unknown))} (known: {', '.join(m.name for m in MUTANTS)})")
        chosen = tuple(m for m in MUTANTS if m.name in names)
    if opts.list:
        for m in chosen:
            print(f"{m.name}: {m.defect}\n    {m.files}\n    {' '.join(m.tests)}")
        return 0
    from testbed import screen

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = bench(chosen, git_copy, timeout=opts.timeout, logs=OUT / "mutants")
    screen.console().print(table(results))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mutants.json").write_text(json.dumps(merged(OUT / "mutants.json", results, commit), indent=2))
    caught = sum(r.verdict == "caught" for r in results)
    print(f"{caught} of {len(results)} mutants caught -> {OUT / 'mutants.json'}")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
