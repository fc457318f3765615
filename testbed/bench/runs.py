"""A benchmark's run of a scenario: `testbed run` as a user types it, in a child process, into a
directory of runs; the one home for "run it and find the run's directory"."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml


def run_scenario(path: Path, runs: Path, backend: str) -> tuple[Path | None, str]:
    """(the new run's directory, "") or (None, the end of what the run said) when it failed."""
    before = set(runs.glob("*"))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--backend", backend,
                           "--results", str(runs)], capture_output=True, text=True)
    made = sorted(set(runs.glob("*")) - before)
    if done.returncode != 0 or not made:
        return None, (done.stderr or done.stdout)[-1500:]
    return made[0], ""


def variant_file(base: Path, name: str, changes: dict, work: Path) -> Path:
    """`base` with `changes` ({"dotted.key": value}) and the scenario name `name`, written to `work`."""
    data = yaml.safe_load(base.read_text())
    data["name"] = name
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def experiment_parser(description: str, default_out: Path) -> argparse.ArgumentParser:
    """The options every live bench of named experiments takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", default="", help="comma-separated experiment names (default: all)")
    parser.add_argument("--reuse", action="store_true", help="keep the other experiments' results from the JSON")
    parser.add_argument("--backend", default="mininet")
    parser.add_argument("--out", type=Path, default=default_out)
    return parser


def chosen_experiments(parser: argparse.ArgumentParser, args, known) -> tuple[list[str], dict]:
    """(the experiments to run, the results kept from the JSON with --reuse); unknown names are a usage error."""
    chosen = [n for n in args.only.split(",") if n] or list(known)
    unknown = set(chosen) - set(known)
    if unknown:
        parser.error(f"unknown experiments {sorted(unknown)}; known: {', '.join(known)}")
    previous = json.loads(args.out.read_text()) if args.reuse and args.out.exists() else {}
    return chosen, dict(previous.get("experiments", {}))


def draw_and_judge(out: Path, figures: str) -> None:
    """Draw a bench's figures from its JSON with its analysis module and print each rule's verdict."""
    import importlib

    module = importlib.import_module(figures)
    result = json.loads(out.read_text())
    for line in module.draw(result, out.parent, out.stem):
        print(line)
    for rule in module.rules(result):
        print(f"{rule['verdict']}: {rule['claim']} ({rule['evidence']})")
