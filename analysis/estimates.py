"""E(t): the network coordinates' estimated RTTs against the configured ones, through the whole run.

Every placement the manager makes reads these estimates, so a run shows how wrong they were and
when: the coordinates role records an `nc_snapshot` event (every agent's coordinate) every 2 s while
the run settles (`phase: settle`) and every 5 s through the run (`phase: run`); this module measures
each one against the configured truth (`Topology.node_rtt`, the graph the emulation built from the
run's scenario.yaml) with the same `testbed.nc.snapshots` code the settle criterion uses, so the
table and the wait cannot disagree. Times are seconds since the workload started (`run_start`): the
settle is negative.

  estimates        per snapshot: time_s, phase, agents, pairs, median_error_ms, p95_error_ms,
                   median_relative, same_site_pairs, same_site_max_error_ms, same_site_median_error_ms
  estimate_pairs   per snapshot and pair of agents: time_s, phase, a, b, same_site, configured_ms,
                   estimated_ms, error_ms

`estimates.png` draws the same-site pairs' estimated RTT beside their configured RTT, and the
all-pairs median and p95 error with the same-site worst, the settle's end marked (settled or not).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from testbed.nc import snapshots
from testbed.policies.snapshot import coord_from_dict

SNAPSHOT_SCHEMA = pa.schema([
    ("time_s", pa.float64()), ("phase", pa.string()), ("agents", pa.int64()), ("pairs", pa.int64()),
    ("median_error_ms", pa.float64()), ("p95_error_ms", pa.float64()), ("median_relative", pa.float64()),
    ("same_site_pairs", pa.int64()), ("same_site_max_error_ms", pa.float64()),
    ("same_site_median_error_ms", pa.float64()),
])
PAIR_SCHEMA = pa.schema([
    ("time_s", pa.float64()), ("phase", pa.string()), ("a", pa.string()), ("b", pa.string()),
    ("same_site", pa.bool_()), ("configured_ms", pa.float64()), ("estimated_ms", pa.float64()),
    ("error_ms", pa.float64()),
])
SHOWN_PAIRS = 8  # same-site pairs drawn one by one; beyond, the worst ones at the settle's end


def start_time(events: list[dict]) -> float | None:
    """The workload's start (`run_start`), else the settle's end, else the first snapshot."""
    for kind in ("run_start", "settle_end", "nc_snapshot"):
        times = [e["time"] for e in events if e.get("type") == kind and e.get("time") is not None]
        if times:
            return min(times)
    return None


def measure(events: list[dict], topology) -> tuple[list[dict], list[dict]]:
    """(per-snapshot rows, per-pair rows) of the run's `nc_snapshot` events against `topology`."""
    t0 = start_time(events)
    per_snapshot, per_pair = [], []
    for event in sorted((e for e in events if e.get("type") == "nc_snapshot"), key=lambda e: e["time"]):
        coordinates = {node: coord_from_dict(c) for node, c in (event.get("coordinates") or {}).items()
                       if node in topology.nodes}
        errors = snapshots.pair_errors(coordinates, topology)
        stats = snapshots.summary(errors)
        at, phase = event["time"] - t0, event.get("phase", "run")
        per_snapshot.append({"time_s": at, "phase": phase, "agents": len(coordinates),
                             **{k: stats[k] for k in SNAPSHOT_SCHEMA.names if k in stats}})
        per_pair.extend({"time_s": at, "phase": phase, "a": e["a"], "b": e["b"], "same_site": e["same_site"],
                         "configured_ms": e["actual_s"] * 1e3, "estimated_ms": e["estimate_s"] * 1e3,
                         "error_ms": e["error_s"] * 1e3} for e in errors)
    return per_snapshot, per_pair


def settle_end(events: list[dict]) -> dict | None:
    """The run's `settle_end` event with its time since the workload start (None: not recorded)."""
    t0 = start_time(events)
    for event in events:
        if event.get("type") == "settle_end":
            return {**event, "time_s": event["time"] - t0}
    return None


def read_events(path: str | Path) -> list[dict]:
    """The events this module needs, whole, from a run's events.parquet (`attrs` holds each event)."""
    table = pq.read_table(path, columns=["type", "attrs"])
    wanted = pc.is_in(table["type"], pa.array(["nc_snapshot", "run_start", "settle_end"]))
    return [json.loads(text) for text in table.filter(wanted)["attrs"].to_pylist()]


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def figure(per_snapshot: list[dict], per_pair: list[dict], end: dict | None, bound_ms: float | None = None,
           title: str = ""):
    """estimates.png as a matplotlib Figure: same-site pairs' estimated vs configured RTT (top), the
    errors (bottom); returns (figure, series)."""
    from analysis.figures import plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    local = [p for p in per_pair if p["same_site"]]
    names = sorted({(p["a"], p["b"]) for p in local})
    if len(names) > SHOWN_PAIRS:
        at_end = end["time_s"] if end else 0.0
        last = {}
        for p in sorted(local, key=lambda p: p["time_s"]):
            if p["time_s"] <= at_end or (p["a"], p["b"]) not in last:
                last[(p["a"], p["b"])] = p["error_ms"]
        names = sorted(names, key=lambda n: -last[n])[:SHOWN_PAIRS]
    series, configured = [], {}
    for i, (a, b) in enumerate(names):
        rows = sorted((p for p in local if (p["a"], p["b"]) == (a, b)), key=lambda p: p["time_s"])
        top.plot([p["time_s"] for p in rows], [p["estimated_ms"] for p in rows], color=f"C{i % 10}", marker=".",
                 label=f"{a}-{b} estimated")
        configured.setdefault(round(rows[0]["configured_ms"], 3), []).append(f"{a}-{b}")
        series.append(f"{a}-{b}")
    for ms, pairs in sorted(configured.items()):  # pairs configured alike share one line, in one colour
        who = pairs[0] if len(pairs) == 1 else f"{len(pairs)} pairs"
        top.axhline(ms, color="dimgrey", linestyle="--", linewidth=1.0, label=f"configured RTT {ms:g} ms ({who})")
    top.set_ylabel("same-site pairs: RTT (ms)")
    top.set_ylim(bottom=0)
    top.set_title(title or "network coordinates: estimated vs configured RTT")
    t = [s["time_s"] for s in per_snapshot]
    for key, label in (("median_error_ms", "all pairs: median |error|"), ("p95_error_ms", "all pairs: p95 |error|"),
                       ("same_site_max_error_ms", "same-site pairs: worst |error|")):
        bottom.plot(t, [s[key] for s in per_snapshot], marker=".", label=label)
        series.append(label)
    if bound_ms is not None:
        bottom.axhline(bound_ms, color="red", linestyle=":", linewidth=1.2, label=f"settle bound, same-site {bound_ms:g} ms")
    bottom.set_ylabel("|estimated - configured| RTT (ms)")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("time since the workload started (s); the settle is before 0")
    for ax in (top, bottom):
        if end is not None:
            word = (f"settled after {end['waited_s']:.0f} s" if end.get("settled")
                    else f"UNSETTLED at the {end['cap_s']:g} s cap")
            ax.axvline(end["time_s"], color="black", linewidth=1.2, label=f"settle ends: {word}" if ax is top else None)
        ax.axvline(0.0, color="black", linestyle="--", linewidth=0.8, label="workload starts" if ax is top else None)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig, series


def draw(per_snapshot: list[dict], per_pair: list[dict], end: dict | None, out, bound_ms: float | None = None,
         title: str = "") -> dict:
    """`figure` saved as estimates.png; returns what it shows."""
    from analysis.figures import save

    fig, series = figure(per_snapshot, per_pair, end, bound_ms, title)
    top, bottom = fig.axes
    return save(fig, out, top.get_title(), bottom.get_xlabel(), "RTT (ms); |error| (ms)", series)


def reduce(run_dir: str | Path, out: str | Path) -> dict | None:
    """Write the two tables and estimates.png into `out` for a local run directory; None when the run
    recorded no snapshots (no Serf agents) or has no scenario.yaml to rebuild the configured network."""
    from testbed import topology as topology_mod
    from testbed.scenario.loader import load

    root, out = Path(run_dir), Path(out)
    if not (root / "scenario.yaml").exists() or not (root / "events.parquet").exists():
        return None
    events = read_events(root / "events.parquet")
    if not any(e.get("type") == "nc_snapshot" for e in events):
        return None
    scenario = load(root / "scenario.yaml")
    per_snapshot, per_pair = measure(events, topology_mod.build(scenario))
    out.mkdir(parents=True, exist_ok=True)
    tables = {}
    for name, rows, schema in (("estimates", per_snapshot, SNAPSHOT_SCHEMA), ("estimate_pairs", per_pair, PAIR_SCHEMA)):
        tables[name] = str(out / f"{name}.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tables[name])
    end = settle_end(events)
    figure = draw(per_snapshot, per_pair, end, out / "estimates.png", bound_ms=scenario.control.settle.same_site * 1e3,
                  title=f"{scenario.name}: estimated vs configured RTT")
    during = [s for s in per_snapshot if s["phase"] == "run"]
    return {"tables": tables, "figure": figure["path"], "settle": end, "snapshots": len(per_snapshot),
            "run": describe(during)}


def describe(rows: list[dict]) -> dict:
    """The run phase's errors in a few numbers (median over snapshots of each one's error)."""
    def median(key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(values) if values else None
    return {"snapshots": len(rows), "median_error_ms": median("median_error_ms"),
            "same_site_max_error_ms": median("same_site_max_error_ms"),
            "same_site_max_error_ms_last": rows[-1]["same_site_max_error_ms"] if rows else None}


def format_lines(result: dict | None) -> list[str]:
    """The reduce summary's lines on the estimates."""
    if not result:
        return []
    end, run = result["settle"], result["run"]
    state = ("no settle_end recorded" if end is None else
             f"settled after {end['waited_s']:.0f} s" if end.get("settled") else
             f"UNSETTLED at the {end['cap_s']:g} s cap (same-site worst {_ms(end.get('same_site_max_error_ms'))}, "
             f"median {_ms(end.get('median_error_ms'))})")
    return [f"estimates: {state}; during the run ({run['snapshots']} snapshots) median |error| "
            f"{_ms(run['median_error_ms'])}, same-site worst {_ms(run['same_site_max_error_ms'])} "
            f"(last {_ms(run['same_site_max_error_ms_last'])}); {result['figure']}"]
