"""`testbed paper --check`: does each entry of the paper's index still describe the code beside it?

Every entry of results/paper/index.json names the commits its data was made at and the paths it
depends on (testbed.paper_figures.depends: the harness, its system's folder, its scenarios). An entry is

  current   no file under those paths differs between its commits and the checkout, and it ran on a
            tree without uncommitted changes there
  stale     some did or it did not: the files are listed
  missing   the index lists it without a number (not run, or failed), with the reason
  unknown   its data does not say which commit made it (a benchmark JSON made outside `make paper`),
            or that commit is not in this repository

Exit 0 when every entry is current, 1 otherwise (and when there is no index yet).
"""

from __future__ import annotations

from pathlib import Path

from testbed import paper_record, provenance

SHOWN_FILES = 6  # changed files listed per entry; the rest are counted
SHOWN_PROBLEMS = 2  # what a missing entry lacks, first things first (testbed.paper_entries's order: failed, missing)


def judge(entry: dict, repo: Path = provenance.REPO) -> dict:
    """One entry's state and why, from its record (testbed.paper_record.provenance) and git."""
    verdict = {"figure": entry["figure"], "commits": entry.get("commits") or [], "date": entry.get("date", "")}
    if entry.get("status") != "ok":
        problems = [p for p in entry.get("problems") or [] if not p.startswith("note:")]
        more = f" and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        return {**verdict, "state": "missing", "why": "; ".join(problems[:SHOWN_PROBLEMS]) + more or entry.get("status", "")}
    if not verdict["commits"] or None in verdict["commits"]:
        return {**verdict, "state": "unknown", "why": "nothing says which commit made its data (a benchmark JSON written "
                "before `testbed bench` marked that: run the benchmark again, then `testbed paper --resume`)"}
    depends = entry.get("depends") or ["."]
    files: set[str] = set()
    try:
        for commit in verdict["commits"]:
            files.update(provenance.changed_since(commit, depends, repo))
    except provenance.UnknownCommit as error:
        return {**verdict, "state": "unknown", "why": f"commit not in this repository ({error})"}
    dirty = provenance.dirty_under(entry.get("dirty") or [], depends, repo)
    if not files and not dirty:
        return {**verdict, "state": "current", "why": ""}
    why = []
    if files:
        shown = sorted(files)[:SHOWN_FILES]
        why.append("changed since: " + ", ".join(shown) + (f" and {len(files) - len(shown)} more" if len(files) > len(shown) else ""))
    if dirty:
        why.append("ran with uncommitted changes to " + ", ".join(dirty[:SHOWN_FILES]))
    return {**verdict, "state": "stale", "why": "; ".join(why), "files": sorted(files), "dirty": dirty}


def check(out: Path, repo: Path = provenance.REPO, say=print) -> int:
    """Say each entry's state, then the counts; 0 when every entry is current, else 1."""
    try:
        record = paper_record.read(out)
    except ValueError as error:
        say(f"paper --check: {error}")
        return 1
    if record is None:
        older = " (index.md there is older: made before the index named its commits)" if (Path(out) / "index.md").exists() else ""
        say(f"paper --check: no index at {paper_record.path(out)}{older}: nothing to check (`make paper` writes it)")
        return 1
    head = provenance.head(repo)
    say(f"paper --check: {paper_record.path(out)} ({record.get('finished', '?')}) against the checkout at "
        f"{provenance.short(head['commit'])}" + (f" with {len(head['dirty'])} uncommitted file(s)" if head["dirty"] else ""))
    if "entries" not in record:
        say(f"paper --check: {paper_record.path(out)} has no entries yet: the paper writing it has not finished "
            f"(or was stopped: `testbed paper --resume` goes on)")
        return 1
    verdicts = [judge(entry, repo) for entry in record["entries"]]
    width = max((len(v["figure"]) for v in verdicts), default=0)
    for v in verdicts:
        made = ", ".join(provenance.short(c) for c in v["commits"])
        at = f"made at {made}" + (f" ({v['date']})" if v["date"] else "") if made else ""
        say(f"  {v['state']:<8} {v['figure']:<{width}}  " + "; ".join(part for part in (at, v["why"]) if part))
    counts = {state: sum(v["state"] == state for v in verdicts) for state in ("current", "stale", "missing", "unknown")}
    bad = len(verdicts) - counts["current"]
    say("paper --check: " + ", ".join(f"{n} {state}" for state, n in counts.items())
        + (" (`make paper` makes them again)" if bad else ": every entry describes this code"))
    return 1 if bad or not verdicts else 0


__all__ = ["judge", "check"]
