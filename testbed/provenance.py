"""Which code made a result, and whether that code has changed since: git, asked in the repository.

    head(repo)                          # {"commit": full hash or None, "dirty": [paths with uncommitted changes]}
    changed_since(commit, paths, repo)  # files under `paths` that differ between `commit` and the checkout now
    mark(result) / marked(result, time) # who is about to write a benchmark's JSON / who wrote it

`make paper` records head() beside every step, so its index can say which code its numbers describe;
`testbed paper --check` asks changed_since() whether that is still the code beside them. The checkout
(HEAD plus uncommitted edits) is what a reader has in front of them, so that is what is compared.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class UnknownCommit(LookupError):
    """The commit is not in this repository (a shallow clone, rewritten history, or no git at all)."""


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UnknownCommit(f"git {' '.join(args)}: {error}") from None
    if done.returncode != 0:
        raise UnknownCommit(f"git {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def _porcelain_paths(text: str) -> list[str]:
    """The paths of `git status --porcelain -z`: one entry each, a rename's second (source) entry skipped."""
    fields, paths, skip = text.split("\0"), [], False
    for entry in fields:
        if skip or not entry:
            skip = False
            continue
        paths.append(entry[3:])
        skip = entry[0] in "RC"
    return sorted(paths)


def head(repo: Path = REPO) -> dict:
    """HEAD's full hash and the files with uncommitted changes (untracked ones included); commit None
    outside a git checkout, so a result made there says so instead of naming a commit."""
    try:
        commit = _git(repo, "rev-parse", "HEAD").strip()
        dirty = _porcelain_paths(_git(repo, "status", "--porcelain", "-z", "--untracked-files=all"))
    except UnknownCommit:
        return {"commit": None, "dirty": []}
    return {"commit": commit, "dirty": dirty}


def short(commit: str | None) -> str:
    return commit[:7] if commit else "unknown"


def same_commit(a: str | None, b: str | None) -> bool:
    """Two hashes name the same commit (one may be the other's short form: run.json keeps 7 digits)."""
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


def changed_since(commit: str, paths: list[str], repo: Path = REPO) -> list[str]:
    """The files under `paths` (git pathspecs, ":(exclude)..." allowed) that differ between `commit` and
    the checkout, committed or not; raises UnknownCommit when this repository does not hold `commit`."""
    _git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
    return sorted(set(_git(repo, "diff", "--name-only", commit, "--", *paths).split()))


def dirty_under(dirty: list[str], paths: list[str], repo: Path = REPO) -> list[str]:
    """Which of `dirty` (paths with uncommitted changes when a step ran) fall under `paths`."""
    if not dirty:
        return []
    matched = _git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *paths).split("\0")
    return sorted(set(dirty) & set(matched))


def _mark_path(result: Path) -> Path:
    return Path(result).with_suffix(".made.json")


MARKS_KEPT = 20  # the newest marks beside a result: a run that wrote elsewhere (or nothing) hides no earlier one


def _marks(result: Path) -> list[dict]:
    try:
        marks = json.loads(_mark_path(result).read_text())
    except (OSError, ValueError):
        return []
    return marks if isinstance(marks, list) else []


def mark(result: Path, repo: Path = REPO) -> Path:
    """Before a benchmark writes `result` (its JSON, which names no commit): HEAD, the uncommitted files and
    the start time, added beside it in <name>.made.json, so `make paper` can say which code made a JSON it
    only reads."""
    path = _mark_path(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps((_marks(result) + [{**head(repo), "started": time.time()}])[-MARKS_KEPT:]))
    return path


def marked(result: Path, measured_at: float | None) -> dict | None:
    """The newest mark beside `result` made before it was measured (its "time"): the run that wrote it;
    None when there is none (the JSON is older than every mark, or was made outside git)."""
    if measured_at is None:
        return None
    before = [m for m in _marks(result) if m.get("started", float("inf")) <= measured_at and m.get("commit")]
    return max(before, key=lambda m: m["started"]) if before else None


__all__ = ["REPO", "UnknownCommit", "head", "short", "same_commit", "changed_since", "dirty_under", "mark", "marked"]
