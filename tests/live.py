"""Live runs for tests: `testbed run` as a user types it, repeated once when the harness did not
hold the run. A measurement counts only from a run the harness itself considers held; on this
2-core VM the hypervisor now and then stalls every process for milliseconds at once (steal time,
which the health rows record), and such a run is discarded and repeated, not judged. A run never
held fails, unless the machine is why (tests.claims records which)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable


from tests import claims
from testbed.health import LATENESS_FIELDS, STALL_MIN_MS, STALL_PROBE_PERIOD_MS, explained_by_machine  # noqa: F401
from testbed.stallprobe import StallProbe

ROOT = Path(__file__).resolve().parent.parent


class ByMachine(str):
    """What a `not_held` says when the seconds that kept the run from being held are the machine's
    (the hypervisor's steal or a stalled VM, `explained_by_machine`), not the load's: a run none of
    whose attempts was held for that reason is skipped, recorded (tests.claims), not failed."""


def run_held(argv: list[str], results: Path, name: str, not_held: Callable[[Path, dict], str | None],
             attempts: int = 2, timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """(the run, its directory, its summary) of `testbed run <argv> --results ...`, the first of
    `attempts` whose `not_held(run_dir, summary)` says nothing (None); each attempt in its own folder.
    A run that crashed fails at once; when none was held, the claims on it are unjudged: skipped when
    every attempt's reason is the machine's (`ByMachine`), failed with the guard's reasons otherwise."""
    whys = []
    for attempt in range(attempts):
        where = results / f"attempt{attempt}"
        run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", *argv, "--results", str(where)],
                             capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        (out,) = where.glob(f"{name}-*")
        summary = json.loads((out / "summary.json").read_text())
        why = not_held(out, summary)
        if why is None:
            return run, out, summary
        whys.append(why)
    claims.unjudged(f"{name}: a run the harness held", f"{attempts} runs, none held: " + "; ".join(whys),
                    attributed_to_machine=all(isinstance(why, ByMachine) for why in whys))


def machine_seconds(out: Path) -> list[dict]:
    """The run's saturated seconds (health rows) that the machine explains: steal or a stalled VM."""
    rows = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("causes") and explained_by_machine(r)]


def held_by_machine(rows: list[dict]) -> str:
    """The figure a skip carries: how many seconds, how much steal, how long the longest stall."""
    return (f"{len(rows)} s the hypervisor held (steal {sum(r.get('cpu_steal_ms') or 0.0 for r in rows):.0f} ms, "
            f"stalls up to {max((r.get('machine_stall_ms') or 0.0 for r in rows), default=0.0):.0f} ms)")


def unexplained_seconds(out: Path) -> list[float]:
    """The run's saturated seconds (elapsed_s, from its health.jsonl) that steal does not explain:
    those the harness's own load must answer for."""
    rows = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]
    return [float(r["elapsed_s"]) for r in rows if r.get("causes") and not explained_by_machine(r)]


def judged_seconds(out: Path) -> int:
    """Seconds of the run the guard judged (health rows during the workload): a run whose guard
    said nothing at all is not evidence that it held."""
    rows = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]
    return sum(1 for r in rows if float(r["elapsed_s"]) >= 0)


def steal_ms() -> float:
    """The machine's steal time so far (/proc/stat, all cores), in ms."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")


#: Steal during one measurement (ms, /proc/stat counts it in 10 ms ticks) that makes it no evidence:
#: a stall delays every ping in flight, by as much as it lasts, so a probe the hypervisor stalled
#: says nothing about the emulated links, whichever way it came out
QUIET_STEAL_MS = 30.0


def measured_held(measure: Callable[[], object], off_ms: Callable[[object], float], attempts: int = 4,
                  unit: str = "ms"):
    """`measure()`'s result, measured again (up to `attempts` times) while it is off (`off_ms`: how
    far beyond its bound, in `unit`, <= 0 when held) and the machine held the VM during it: the
    hypervisor stole more than QUIET_STEAL_MS, or stopped every core at once (the guard's stall
    probe, `testbed.stallprobe`: on this VM such stalls of 8-55 ms come without steal) for as long as
    the result is off (any such stall, for a result in another unit). A result off with the machine
    quiet is returned, for the test to judge; when every attempt was off while the machine held the
    VM, the test is skipped as not testable now (recorded: tests.claims)."""
    seen = []
    for _ in range(attempts):
        with machine_watch() as held:
            result = measure()
        off = off_ms(result)
        stolen, stall = held["steal_ms"], held["stall_ms"]
        stalled = stall >= STALL_MIN_MS and (unit != "ms" or stall + STALL_PROBE_PERIOD_MS >= off)
        if off <= 0 or (stolen <= QUIET_STEAL_MS and not stalled):
            return result
        seen.append(f"{off:.2f} {unit} off with {stolen:.0f} ms stolen, every core stopped for up to {stall:.0f} ms")
    claims.unjudged("a measurement the hypervisor left alone",
                    f"not testable on this machine now: {attempts} measurements, each off while the hypervisor "
                    f"held the VM ({'; '.join(seen)})", attributed_to_machine=True)


@contextlib.contextmanager
def machine_watch():
    """What the machine did during the block: {"steal_ms": steal time, "stall_ms": the longest span
    in which every core's stall probe was late at once (0 when the probe cannot run here)}."""
    probe, seconds, held = StallProbe("tests"), {}, {"steal_ms": 0.0, "stall_ms": 0.0}
    probing, before = probe.start(), steal_ms()
    try:
        yield held
    finally:
        held["steal_ms"] = steal_ms() - before
        if probing:
            probe.stop()
            probe.drain(seconds)
            held["stall_ms"] = max((s.get("machine_stall_ms", 0.0) for s in seconds.values()), default=0.0)


def probe_beyond_bounds_ms(pairs: list[dict]) -> float:
    """How far the worst pair of a `testbed probe --json` is beyond its bounds (median within its
    tolerance of the configured RTT, p99 at most its p99_bound_ms), ms; <= 0 when every pair held,
    and a pair with no reply (or a probe with no pairs) is far off."""
    return max([1e9 if p["median_ms"] is None else
                max(abs(p["median_ms"] - p["configured_ms"]) - p["tolerance_ms"], p["p99_ms"] - p["p99_bound_ms"])
                for p in pairs] or [1e9])


def probe_failures(pairs: list[dict]) -> str:
    """The pairs of a `testbed probe --json` beyond their bounds, one line each with what was measured."""
    def ms(value) -> str:
        return "-" if value is None else f"{value:.2f}"

    return "\n".join(f"{p['a']} <-> {p['b']}: configured {ms(p['configured_ms'])} ms, median {ms(p['median_ms'])} "
                     f"(+-{ms(p['tolerance_ms'])}), p99 {ms(p['p99_ms'])} (bound {ms(p['p99_bound_ms'])}), "
                     f"{p['received']}/{p['sent']} replies" for p in pairs if not p["ok"])
