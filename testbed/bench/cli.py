"""`make bench-cli`: how long the `testbed` command takes to answer. Every command's `--help` (best of
--repeats, each a fresh process, as a user types it) and `testbed validate` of every shipped
scenario. A help should answer within HELP_TARGET_S; the tests check what a help imports, this
measures what it costs on this machine now (its load and steal beside).

Writes results/bench/cli.json and prints the table.

    python -m testbed.bench.cli [--repeats 5] [--testbed PATH]   # PATH: another checkout's .venv/bin/testbed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "bench" / "cli.json"
HELP_TARGET_S = 0.5


def command_paths(executable: Path, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command of `executable` as the words that name it, read from its own help's "Commands:"
    section: () for the top, ("servers", "up"), ... (what that checkout has, not what this one has)."""
    help_text = subprocess.run([str(executable), *path, "--help"], capture_output=True, text=True).stdout
    listed = help_text.partition("\nCommands:\n")[2].split("\n\n")[0]
    names = [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    return [path] + [p for name in names for p in command_paths(executable, (*path, name))]


def best_of(argv: list[str], repeats: int, cwd: Path) -> tuple[float, int]:
    """The shortest wall time of `repeats` runs of argv, and its exit code."""
    times, code = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        code = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        times.append(time.perf_counter() - start)
    return min(times), code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--testbed", default=str(Path(sys.executable).with_name("testbed")),
                        help="the testbed executable to time (default: this venv's)")
    args = parser.parse_args(argv)
    from testbed import screen

    executable = Path(args.testbed).absolute()
    checkout = executable.parents[2]  # <checkout>/.venv/bin/testbed: its scenarios are validated
    rows = []
    for path in command_paths(executable):
        seconds, code = best_of([str(executable), *path, "--help"], args.repeats, checkout)
        rows.append({"command": " ".join(("testbed", *path, "--help")), "best_s": round(seconds, 3), "exit": code})
    scenarios = sorted(str(p.relative_to(checkout)) for p in (checkout / "scenarios").glob("*.yaml"))
    seconds, code = best_of([str(executable), "validate", *scenarios], max(1, args.repeats // 2), checkout)
    rows.append({"command": f"testbed validate scenarios/*.yaml ({len(scenarios)} files)", "best_s": round(seconds, 3),
                 "exit": code})
    table = screen.Table("command", "best s", "exit", title=f"{executable}: best of {args.repeats}, load "
                         f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for row in rows:
        late = row["command"].endswith("--help") and row["best_s"] > HELP_TARGET_S
        table.add_row(row["command"], f"[red]{row['best_s']:.3f}[/red]" if late else f"{row['best_s']:.3f}", str(row["exit"]))
    screen.console().print(table)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"testbed": str(executable), "repeats": args.repeats, "load1": os.getloadavg()[0],
                               "help_target_s": HELP_TARGET_S, "rows": rows}, indent=2))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
