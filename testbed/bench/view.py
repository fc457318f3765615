"""`make bench-view`: what watching a run costs. The same scenario run with and without the live view
(a headless Chromium on its page from the start to the end), the two alternating run by run (off on,
then on off) so this VM's drift falls on both alike. Per run: the run's own CPU per delivery by
process class over the workload's seconds (bench-efficiency's rule, `per_delivery`), the view
server's and the browser's CPU from the workload's start to the run's end per delivery (the server's
start-up, before the workload, apart), the machine's busy CPU over the whole command, steal beside,
and the guard's valid seconds.

Writes results/bench/view.json and view-live.png, and prints the table.

    python -m testbed.bench.view [--repeats 2] [--duration 30s] [--scenario scenarios/uav-smoke.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.systems.pubsub.bench.efficiency import per_delivery
from testbed.view import browser as view_browser

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "bench" / "view.json"
SCREENSHOT = OUT.parent / "view-live.png"  # the page 20 s into a watched run
ADDRESS = re.compile(r"view: (http://127\.0\.0\.1:\d+/)")


def cpu_s_of(*patterns: str) -> float:
    """CPU seconds (user + system) of every process whose command line holds every one of `patterns`,
    from /proc (a command line's arguments are NUL-separated there: give them apart)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if not all(p.encode() in cmdline for p in patterns):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def busy_s() -> float:
    """The machine's CPU seconds spent in processes so far (/proc/stat: user, nice, system, irq,
    softirq; idle, iowait and the hypervisor's steal excluded), all cores."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def one_run(scenario: Path, view: bool, duration: str, where: Path, say) -> dict:
    argv = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--duration", duration, "--settle", "5s",
            "--results", str(where), *(["--view", "--view-port", "0"] if view else [])]
    profile = where / "profile"
    server = ("testbed.view.server", str(where))
    driver, at_start, at_end = None, None, None
    busy = busy_s()
    run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in run.stdout:
        lines.append(line)
        found = ADDRESS.search(line)
        if found and view:
            driver = view_browser.open_browser(profile)
            driver.get(found.group(1))
        if "running: " in line and at_start is None:  # the workload begins: CPU from here on is its
            at_start = (cpu_s_of(*server), cpu_s_of(str(profile)))
        if "running:    20s" in line and driver is not None:
            driver.save_screenshot(str(SCREENSHOT))
        if "results in " in line:
            at_end = (cpu_s_of(*server), cpu_s_of(str(profile)))  # the page stayed open to the run's end
    code = run.wait()
    busy = busy_s() - busy
    if driver is not None:
        driver.quit()
    (run_dir,) = where.glob("*-*") if code == 0 else (None,)
    if run_dir is None:
        return {"view": view, "error": "".join(lines)[-2000:]}
    summary = json.loads((run_dir / "summary.json").read_text())
    meta = json.loads((run_dir / "run.json").read_text())
    delivered = summary["delivered"] or 1
    steady = per_delivery(run_dir, outside_migrations=False)  # a 30 s smoke run is mostly migration windows
    row = {"view": view, "run_dir": str(run_dir), "delivered": summary["delivered"],
           "valid_seconds": summary["harness"]["seconds"] - summary["harness"]["saturated_seconds"],
           "seconds": summary["harness"]["seconds"], "run_us_per_delivery": steady["total_us_per_delivery"],
           "cpu_us_per_delivery": steady["cpu_us_per_delivery"], "steal_ms_per_s": steady["steal_ms_per_s"],
           "view_server_us_per_delivery": 1e6 * (at_end[0] - at_start[0]) / delivered if view else 0.0,
           "browser_us_per_delivery": 1e6 * (at_end[1] - at_start[1]) / delivered if view else 0.0,
           "view_server_start_cpu_s": at_start[0] if view else 0.0, "view_server_cpu_s": meta.get("view", {}).get("cpu_s"),
           "machine_us_per_delivery": 1e6 * busy / delivered}
    say(f"view {'on ' if view else 'off'}: run {row['run_us_per_delivery']:.1f} us/delivery (machine, whole "
        f"command: {row['machine_us_per_delivery']:.1f}), view server "
        f"{row['view_server_us_per_delivery']:.1f}, browser {row['browser_us_per_delivery']:.1f}; valid "
        f"{row['valid_seconds']}/{row['seconds']} s, steal {row['steal_ms_per_s']:.1f} ms/s")
    return row


def mean(rows: list[dict], key: str) -> float | None:
    found = [r[key] for r in rows if r.get(key) is not None]
    return sum(found) / len(found) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "uav-smoke.yaml")
    parser.add_argument("--repeats", type=int, default=2, help="alternating pairs")
    parser.add_argument("--duration", default="30s")
    args = parser.parse_args(argv)
    if not view_browser.available():
        print(f"bench-view {view_browser.MISSING}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-view-") as scratch:
        for repeat in range(args.repeats):
            for view in ((False, True) if repeat % 2 == 0 else (True, False)):
                where = Path(scratch) / f"r{repeat}-{'on' if view else 'off'}"
                rows.append(one_run(args.scenario, view, args.duration, where, lambda line: print(line, flush=True)))
    result = {"scenario": str(args.scenario), "duration": args.duration, "repeats": args.repeats, "runs": rows,
              "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
              "mean": {state: {k: mean([r for r in rows if r["view"] == (state == "on")], k)
                               for k in ("run_us_per_delivery", "machine_us_per_delivery", "view_server_us_per_delivery",
                                         "browser_us_per_delivery", "steal_ms_per_s", "valid_seconds")}
                       for state in ("off", "on")}}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    for state, m in result["mean"].items():
        print(f"view {state}: " + ", ".join(f"{k} {v:.1f}" for k, v in m.items() if v is not None))
    print(f"-> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
