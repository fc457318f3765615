"""`make bench-calibration`: the emulated inter-city paths against the WonderProxy pings they stand for.

A testbed that claims geography is checked against the geography's measurements, not only against
its own configuration (emulators that matched their configured values have failed to reproduce real
traces: arXiv 2604.04498). Every pair of the 16 US cities is built as a scenario would build it
(a broker per city behind its local link, the cities joined by links of half the measured RTT) and
pinged by `testbed probe --json` as a user would, twice: with constant links (`cities.jitter: none`)
and with each link varying as the pings between its cities did (`jitter: measured`). Per pair, the
emulated RTTs less the brokers' local links are compared with the dataset's summary of a typical
`ping -c 30` run (testbed.scenario.cities.Spread):

- avg within max(0.5 ms, 3 %) of the measured avg, and mdev (the RTTs' standard deviation) within
  30 % of the measured mdev, for at least 90 % of the pairs: the target;
- min and max are reported beside (a probe of COUNT pings spans more than a 30-ping run).

Writes results/bench/calibration.json and prints the table; `analysis.bench_figures.calibration`
draws calibration.png (emulated against measured, per pair).

    python -m testbed.bench.calibration [--count 300] [--modes none,measured] [--figures-only]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from testbed import screen
from testbed.screen import Table

from testbed.scenario import cities

OUT = Path("results/bench")
REPO = Path(__file__).resolve().parents[2]
COUNT = 300  # pings per pair, 10 ms apart: ~3 s of probing, every pair at once
AVG_TOLERANCE_MS, AVG_TOLERANCE_SHARE, MDEV_TOLERANCE_SHARE, PAIRS_WITHIN = 0.5, 0.03, 0.30, 0.90
LOCAL_MS = 0.5  # the brokers' local links, one-way (as mmog.yaml's)
console = screen.console()


def scenario(jitter: str, names: list[str] | None = None) -> dict:
    """The cities (default: all 16), a broker in each (the probe's representative of its site),
    nothing else to ping."""
    names = names or list(cities.CITY_CODES)
    return {"name": f"calibration-{jitter}", "seed": 1, "duration": "10s",
            "description": "bench-calibration: US cities, a broker per city, inter-city links from WonderProxy",
            "infrastructure": {"cities": {"names": names, "access_latency": "1ms", "jitter": jitter},
                               "cloud": {"name": "cloud", "city": names[0]}, "links": {"local": {"delay": f"{LOCAL_MS}ms"}}},
            "nodes": {"nc_proxies_per_site": 0,
                      "clients": [{"name": "gs", "role": "game-server", "count": 1, "site": names[0]},
                                  {"name": "p", "role": "avatar", "count": 1, "site": names[0]}]},
            "workload": {"kind": "mmog", "avatars": 1, "groups": 1, "rate": "1/s",
                         "topics": [{"name": "avatar", "threshold": "100ms"}]}}


def probe(jitter: str, count: int, directory: Path, names: list[str] | None = None) -> dict:
    """`testbed probe --json` on the calibration scenario with `jitter` (over `names`, default all)."""
    path = directory / f"calibration-{jitter}.yaml"
    path.write_text(yaml.safe_dump(scenario(jitter, names), sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "probe", str(path), "--count", str(count), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"testbed probe exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}") from None


def city_of(node: str, cloud_city: str) -> str | None:
    """The city of a broker node named after its site (`b<city>`; the cloud node is in `cloud_city`)."""
    if node == "cloud":
        return cloud_city
    return node[1:] if node.startswith("b") and node[1:] in cities.CITY_CODES else None


def compared(pairs: list[dict], cloud_city: str = "nyc") -> list[dict]:
    """One row per city pair the probe measured: emulated (less the local links) against measured."""
    rows = []
    for pair in pairs:
        a, b = city_of(pair["a"], cloud_city), city_of(pair["b"], cloud_city)
        if not a or not b or a == b or pair.get("mean_ms") is None:
            continue
        real = cities.spread(a, b)
        offset = pair["configured_ms"] - 1e3 * cities.rtt(a, b)  # the two brokers' local links, both ways
        avg, mdev = pair["mean_ms"] - offset, pair["mdev_ms"]
        avg_bound = max(AVG_TOLERANCE_MS, AVG_TOLERANCE_SHARE * 1e3 * real.avg)
        rows.append({"a": a, "b": b, "measured": {k: round(1e3 * getattr(real, k), 3) for k in ("min", "avg", "max", "mdev")},
                     "emulated": {"min": round(pair["min_ms"] - offset, 3), "avg": round(avg, 3),
                                  "max": round(pair["max_ms"] - offset, 3), "mdev": round(mdev, 3)},
                     "received": pair["received"], "sent": pair["sent"],
                     "avg_ok": abs(avg - 1e3 * real.avg) <= avg_bound,
                     "mdev_ok": abs(mdev - 1e3 * real.mdev) <= MDEV_TOLERANCE_SHARE * 1e3 * real.mdev})
    return rows


def verdict(rows: list[dict]) -> dict:
    """Shares of pairs within each target, and whether both reach PAIRS_WITHIN."""
    n = len(rows) or 1
    avg, mdev = sum(r["avg_ok"] for r in rows) / n, sum(r["mdev_ok"] for r in rows) / n
    return {"pairs": len(rows), "avg_within": round(avg, 3), "mdev_within": round(mdev, 3),
            "ok": bool(rows) and avg >= PAIRS_WITHIN and mdev >= PAIRS_WITHIN}


def report(data: dict) -> None:
    for mode, result in data["modes"].items():
        table = Table("pair", "avg measured", "avg emulated", "mdev measured", "mdev emulated", "max-min measured",
                      "max-min emulated", title=f"jitter: {mode} (ms; emulated less the brokers' local links)")
        for r in sorted(result["rows"], key=lambda r: -r["measured"]["mdev"])[:12]:
            m, e = r["measured"], r["emulated"]
            table.add_row(f"{r['a']}-{r['b']}", f"{m['avg']:.2f}", f"{e['avg']:.2f}" + ("" if r["avg_ok"] else " !"),
                          f"{m['mdev']:.2f}", f"{e['mdev']:.2f}" + ("" if r["mdev_ok"] else " !"),
                          f"{m['max'] - m['min']:.2f}", f"{e['max'] - e['min']:.2f}")
        console.print(table)
        v = result["verdict"]
        console.print(f"jitter {mode}: {v['pairs']} pairs; avg within max({AVG_TOLERANCE_MS} ms, "
                      f"{AVG_TOLERANCE_SHARE:.0%}): {v['avg_within']:.0%}; mdev within {MDEV_TOLERANCE_SHARE:.0%}: "
                      f"{v['mdev_within']:.0%} (target {PAIRS_WITHIN:.0%} each): {'ok' if v['ok'] else 'NOT MET'}"
                      f"; the 12 pairs of largest measured mdev shown", highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.bench.calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT, help="pings per pair")
    parser.add_argument("--modes", default="none,measured", help="cities.jitter values to probe, comma-separated")
    parser.add_argument("--figures-only", action="store_true", help="redraw calibration.png from the JSON")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.figures_only:
        data = {"count": args.count, "dataset": "WonderProxy 2020-07-19/20 (testbed/data/wonderproxy/SOURCE.md)",
                "targets": {"avg_ms": AVG_TOLERANCE_MS, "avg_share": AVG_TOLERANCE_SHARE,
                            "mdev_share": MDEV_TOLERANCE_SHARE, "pairs_within": PAIRS_WITHIN}, "modes": {}}
        for mode in args.modes.split(","):
            started = time.monotonic()
            console.print(f"jitter {mode}: building the 16 cities and pinging every pair ({args.count} pings each)")
            result = probe(mode, args.count, OUT)
            rows = compared(result["pairs"])
            data["modes"][mode] = {"rows": rows, "verdict": verdict(rows), "shaper": result.get("shaper"),
                                   "backend": result.get("backend"), "took_s": round(time.monotonic() - started, 1)}
        (OUT / "calibration.json").write_text(json.dumps(data, indent=2))
    data = json.loads((OUT / "calibration.json").read_text())
    report(data)
    from analysis.bench_figures import draw

    for item in draw("calibration", data, OUT):
        console.print(f"wrote {item['path']}")
    measured = data["modes"].get("measured")
    return 0 if measured is None or measured["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
