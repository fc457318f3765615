"""A benchmark's run of a scenario: `testbed run` as a user types it, in a child process, into a
directory of runs; the one home for "run it and find the run's directory"."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

TEARDOWN_S = 120  # what an interrupted run may take to take its network down (then it is killed)


def run_scenario(path: Path, runs: Path, backend: str, extra: list[str] = ()) -> tuple[Path | None, str]:
    """(the new run's directory, "") or (None, the end of what the run said) when it failed;
    `extra`: more of `testbed run`'s options."""
    before = set(runs.glob("*"))
    harness = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(path), "--backend", backend,
                                "--results", str(runs), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = harness.communicate()
    except BaseException:  # Ctrl-C or a kill of the bench: the run tears its network down, as for a user's Ctrl-C
        harness.send_signal(signal.SIGINT)
        try:
            harness.communicate(timeout=TEARDOWN_S)
        except subprocess.TimeoutExpired:
            harness.kill()
            harness.wait()
        raise
    made = sorted(set(runs.glob("*")) - before)
    if harness.returncode != 0 or not made:
        return None, (err or out)[-1500:]
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


def run_experiments(args, chosen: list[str], results: dict, scenario_of, run_one, describe, figures: str,
                    extra: dict | None = None) -> int:
    """A live bench's loop over its named experiments: each one's scenario file (`scenario_of(name,
    work)`), its run (`run_one(path, runs, backend)` -> a result dict with "ok", "valid" and
    "saturated_seconds", or "error"), one progress line (`describe(result)` after the harness's
    verdict), the JSON rewritten after every run (what ran is kept if a later one fails or is
    stopped), then the figures and verdicts. Returns the exit code: 0 when every run completed."""
    work = args.out.parent / args.out.stem
    runs = work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    for k, name in enumerate(chosen, 1):
        t = time.monotonic()
        r = results[name] = run_one(scenario_of(name, work), runs, args.backend)
        if r["ok"]:
            line = f"{'valid' if r['valid'] else 'SATURATED ' + str(r['saturated_seconds']) + ' s'}; {describe(r)}"
        else:
            line = f"FAILED: {r['error'][-300:]}"
        print(f"[{k}/{len(chosen)}] {name}: {line} ({time.monotonic() - t:.0f} s, {time.monotonic() - began:.0f} s in all)",
              flush=True)
        args.out.write_text(json.dumps({"time": time.time(), **(extra or {}), "experiments": results}, indent=1))
    draw_and_judge(args.out, figures)
    return 0 if all(results[n]["ok"] for n in chosen) else 1
