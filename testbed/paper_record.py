"""results/paper/index.json: what `make paper` did, step by step and entry by entry, for machines to read.

    read(out) -> dict | None            the record, or None before the first `make paper`
    write(out, record)                  atomically, after every step (an interrupted paper can resume)
    resumable(previous, name, now)      a step done at this commit, on the same uncommitted files
    expected_s(previous, name, guess)   how long a step should take: its last timing, else the plan's guess
    made(figure, steps)                 an entry's commits, date, runs, guard verdict and time

A step record is Step's fields (testbed.paper_steps): name, status, seconds, detail, figures, and who made
its data: commit (None: not known), dirty (files with uncommitted changes then), date, runs (run
folders), source_time (a benchmark JSON's "time"), elsewhere (the data was made before this paper
ran: reused or resumed), resumed, planned (its name in the plan). `earlier` holds records at the same
commit this paper has not redone. `testbed paper --check` (testbed.paper_check) reads the entries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed import provenance

INDEX_JSON = "index.json"
SCHEMA = 1


def path(out: Path) -> Path:
    return Path(out) / INDEX_JSON


def read(out: Path) -> dict | None:
    """The record in OUT; None when there is none; ValueError naming the file when it is not one."""
    file = path(out)
    if not file.exists():
        return None
    try:
        record = json.loads(file.read_text())
    except ValueError as error:
        raise ValueError(f"{file}: not JSON ({error})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise ValueError(f"{file}: not a `make paper` record of schema {SCHEMA}")
    return record


def write(out: Path, record: dict) -> Path:
    """Write through a temporary file and rename, so a paper killed mid-write leaves the last whole record."""
    file = path(out)
    tmp = file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, **record}, indent=1, default=str))
    os.replace(tmp, file)
    return file


def steps_by_name(record: dict | None) -> dict[str, dict]:
    """Every step record by name: this paper's, over those it kept from an earlier one (`earlier`)."""
    record = record or {}
    return {s["name"]: s for s in record.get("earlier", []) + record.get("steps", [])}


def resumable(previous: dict[str, dict], name: str, now: dict) -> dict | None:
    """The previous record of step `name` when `--resume` may skip it: it succeeded, its data was made
    at the commit checked out now and with the same files uncommitted (else other code made it)."""
    done = previous.get(name)
    if not done or done.get("status") != "ok":
        return None
    if not provenance.same_commit(done.get("commit"), now["commit"]) or sorted(done.get("dirty") or []) != now["dirty"]:
        return None
    return done


def made_by(previous: dict[str, dict], name: str, source_time) -> dict | None:
    """Who made a benchmark JSON this paper only redraws: the previous record of the same step that ran
    it, if that JSON's "time" is the one it recorded."""
    done = previous.get(name)
    if done and source_time is not None and done.get("source_time") == source_time and done.get("commit"):
        return done
    return None


def expected_s(previous: dict[str, dict], name: str, guess: float) -> float:
    """A step's expected duration: what it took last time it ran (or the run a resumed step stood for; not
    a redraw of data made elsewhere), else `guess`."""
    done = previous.get(name)
    if done and done.get("status") == "ok" and (done.get("resumed") or not done.get("elsewhere")) and done.get("seconds"):
        return float(done["seconds"])
    return guess


def guard(runs: list[Path]) -> str:
    """The saturation guard's verdict over an entry's runs, in its one wording (testbed.health.validity)."""
    from testbed.health import validity

    seconds = saturated = judged = 0
    for run in runs:
        try:
            harness = json.loads((Path(run) / "run.json").read_text()).get("harness") or {}
        except (OSError, ValueError):
            continue
        if harness.get("seconds"):
            seconds, saturated, judged = seconds + harness["seconds"], saturated + (harness.get("saturated_seconds") or 0), judged + 1
    if not runs:
        return "-"
    if not judged:
        return "not measured"
    return validity({"seconds": seconds, "saturated_seconds": saturated}) + (f" over {judged} runs" if judged > 1 else "")


def made(figure: str, steps: list[dict], repo: Path = provenance.REPO) -> dict:
    """An entry's record from the steps that fed it: the commits its data was made at (None: not known),
    the files uncommitted then, the newest date, the run folders, the guard's verdict and the time taken."""
    feeding = [s for s in steps if figure in (s.get("figures") or ())]
    runs = list(dict.fromkeys(r for s in feeding for r in s.get("runs") or ()))
    return {"commits": list(dict.fromkeys(s.get("commit") for s in feeding)),
            "dirty": sorted({f for s in feeding for f in s.get("dirty") or ()}),
            "date": max((s.get("date") or "" for s in feeding), default=""),
            "runs": runs, "guard": guard([repo / r for r in runs]),
            "seconds": round(sum(s.get("seconds") or 0 for s in feeding), 1),
            "steps": [s["name"] for s in feeding]}


__all__ = ["INDEX_JSON", "read", "write", "resumable", "made_by", "expected_s", "guard", "made"]
