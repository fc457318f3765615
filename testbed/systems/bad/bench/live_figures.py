"""What BAD's balancing costs subscribers in latency, on the live sweep (`make bench-bad-live`).

BAD (Nguyen et al., DEBS '19) balances broker load F_j and never measures delay; the testbed does. Beside each
scheme's final cov this puts the worst channel's p50 / p95 end-to-end latency, so the load-versus-
latency trade-off shows in `make paper`'s index: a note and a figure, not a rule, since the paper
makes no latency claim to test. Also the thresholds a run balanced against (alpha, beta), read from
the run's own scenario.yaml, so figures can draw them.

Pure: testbed.systems.bad.bench.sweep's rows in (only the runs the harness held count), a note and a PNG out.
`draw`, `markdown_table`, `headline` and `notes` are the sweep's entry in `make paper` (testbed.plugin.Benchmark).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.units import parse_byte_rate


def thresholds(run_dir: str | Path) -> dict:
    """{alpha, beta_Bps} from <run>/scenario.yaml's control.bad (the scenario as the run resolved it)."""
    path = Path(run_dir) / "scenario.yaml"
    try:
        bad = yaml.safe_load(path.read_text())["control"]["bad"]
        return {"alpha": float(bad["alpha"]), "beta_Bps": parse_byte_rate(bad["beta"])}
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: control.bad.alpha / control.bad.beta unreadable ({error})") from error


def latency_vs_load(table: list[dict]) -> dict:
    """{rows: [{scheme, cov_last, p50_ms, p95_ms}], note}: latency beside balance, held runs only."""
    held = [r for r in table if r.get("ok") and r.get("held")]
    rows = [{k: r[k] for k in ("scheme", "cov_last", "p50_ms", "p95_ms")} for r in held]
    if not rows:
        return {"rows": [], "note": "latency vs load: no scheme's run was held by the harness"}
    by = {r["scheme"]: r for r in rows}
    fastest = min(rows, key=lambda r: r["p95_ms"])
    balanced = min(rows, key=lambda r: r["cov_last"])
    note = (f"latency vs load (BAD ignores latency; worst channel over {len(rows)} held run(s)): p95 "
            f"{min(r['p95_ms'] for r in rows):.1f}-{max(r['p95_ms'] for r in rows):.1f} ms; lowest p95 "
            f"{fastest['scheme']} ({fastest['p95_ms']:.1f} ms at cov {fastest['cov_last']:.3f}); best balanced "
            f"{balanced['scheme']} (cov {balanced['cov_last']:.3f}, p95 {balanced['p95_ms']:.1f} ms)")
    nr = by.get("nr+none")
    if nr:
        note += "".join(f"; {s} vs NR alone: p50 {by[s]['p50_ms'] - nr['p50_ms']:+.1f} ms, p95 "
                        f"{by[s]['p95_ms'] - nr['p95_ms']:+.1f} ms" for s in ("nr+ldm", "nr+sdm", "nr+ldm+gsh") if s in by)
    left_out = [r["scheme"] for r in table if r.get("ok") and not r.get("held")]
    if left_out:
        note += f"; left out (harness saturated): {', '.join(left_out)}"
    return {"rows": rows, "note": note}


def tradeoff_figure(table: list[dict], path: Path, alpha: float = 0.15) -> Path | None:
    """Final cov against the worst channel's p50 (hollow) and p95 (filled) per scheme; None if no run was held."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = latency_vs_load(table)["rows"]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in rows:
        color = {"nr": "tab:red", "rr": "tab:blue", "rnd": "tab:green"}.get(r["scheme"].split("+")[0], "tab:gray")
        ax.plot([r["cov_last"]] * 2, [r["p50_ms"], r["p95_ms"]], color=color, lw=0.8)
        ax.scatter(r["cov_last"], r["p50_ms"], facecolors="none", edgecolors=color)
        ax.scatter(r["cov_last"], r["p95_ms"], color=color)
        ax.annotate(r["scheme"], (r["cov_last"], r["p95_ms"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axvline(alpha, ls="--", color="k", lw=0.8, label=f"alpha {alpha:g}")
    ax.set_xlabel("cov of broker loads, last round")
    ax.set_ylabel("worst channel latency (ms): p50 hollow, p95 filled")
    ax.legend(fontsize=7)
    ax.set_title("BAD live: balance against the latency subscribers see", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw(result: dict, out: Path, stem: str = "bad-live") -> list[str]:
    """The sweep's three figures from its JSON: cov and migrations, NR's load over time, latency beside cov."""
    from testbed.systems.bad.bench import sweep

    table = sweep.rows(result)
    drawn = [sweep.sweep_figure(table, out / f"{stem}.png"), sweep.load_figure(table, out / f"{stem}-load.png"),
             tradeoff_figure(table, out / f"{stem}-latency.png")]
    return [f"wrote {path}" for path in drawn if path]


def markdown_table(result: dict) -> list[str]:
    from testbed.systems.bad.bench import sweep

    return sweep.markdown_table(sweep.rows(result))


def headline(result: dict, scale: str):
    from testbed.systems.bad.bench import sweep

    return sweep.headline(sweep.rows(result), scale)


def notes(result: dict) -> list[str]:
    """What the index says beside the verdict: latency against load (the paper makes no latency claim)."""
    from testbed.systems.bad.bench import sweep

    return [latency_vs_load(sweep.rows(result))["note"]]
