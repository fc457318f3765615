"""`make bench-durable`'s figures and claims (durable topics, ePulsar paper 3.5): publish-acknowledgement and
end-to-end latency by storage placement and replica count (the figure 3.5 argues for and does not
show), what storing costs the network and the CPU, and the zero-loss table across migrations and
crashes. Plain data in (results/bench/durable.json), PNGs and verdicts out."""

from __future__ import annotations

from pathlib import Path

from analysis.headlines import Headline, MissingInput, name_saturated, rule, rules_headline

LATENCY = ("latency-none", "latency-local-r1", "latency-local-r3", "latency-cloud-r1", "latency-cloud-r3",
           "latency-local-r1-debian", "latency-local-r3-debian")  # the last two: nats-server 2.9, no sync per ack
LOSS = ("loss-none", "loss-r1-enhanced", "loss-r3-enhanced", "loss-r1-baseline", "loss-r3-baseline")
CLOUD_RTT_MS = 80.0  # uav-smoke: the cloud is 40 ms one way from every zone
REMOTE_SHARE = 0.8  # cloud storage costs at least 80 % of that round trip more than site-local
THRESHOLD_MS = 40.0  # both topic classes' Lth in the UAV scenarios


def _ok(result: dict, name: str) -> dict | None:
    run = result.get("experiments", {}).get(name)
    return run if run and run.get("ok") else None


def rules(result: dict) -> list[dict]:
    out = []
    local, cloud = _ok(result, "latency-local-r3"), _ok(result, "latency-cloud-r3")
    if local and cloud and local["ack"]["q50_ms"] is not None and cloud["ack"]["q50_ms"] is not None:
        gap = cloud["ack"]["q50_ms"] - local["ack"]["q50_ms"]
        out.append(rule("3.5: site-local storage keeps the remote round trip out of the acknowledgement",
                        gap >= REMOTE_SHARE * CLOUD_RTT_MS,
                        f"ack p50 site-local R3 {local['ack']['q50_ms']:.1f} ms, cloud R3 {cloud['ack']['q50_ms']:.1f} ms "
                        f"(the cloud is {CLOUD_RTT_MS:.0f} ms RTT away)"))
    r3 = [(name, run) for name in ("loss-r3-enhanced", "loss-r3-baseline") if (run := _ok(result, name))]
    if r3:
        out.append(rule("Durable topics with 3 replicas lose no acknowledged message across migrations, a broker kill "
                        "and a storage-node kill", all(run["durable"] and run["durable"]["lost"] == 0 for _, run in r3),
                        "; ".join(f"{name[5:]}: {run['durable']['lost']} of {run['durable']['owed']} lost"
                                  for name, run in r3 if run["durable"])))
    moved = [run for name in LATENCY[2:3] + ("loss-r3-enhanced",) if (run := _ok(result, name))]
    if moved:
        out.append(rule("A site-local stream moves with its topic's broker", all(run["streams_moved"] for run in moved),
                        "; ".join(f"{run['streams_moved']} streams moved" for run in moved)))
    one, three = _ok(result, "latency-local-r1"), _ok(result, "latency-local-r3")
    if one and three and one["storage_mb"] and three["storage_mb"]:
        out.append(rule("Three replicas cost the storage network more than one", three["storage_mb"] > 1.5 * one["storage_mb"],
                        f"R1 {one['storage_mb']:.1f} MB, R3 {three['storage_mb']:.1f} MB"))
    return name_saturated(out, result.get("experiments", {}))


def headline(result: dict, scale: str) -> Headline:
    if not result.get("experiments"):
        raise MissingInput("no results/bench/durable.json (make bench-durable)")
    return rules_headline(rules(result), scale, "no experiment completed")


def _n(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(result: dict) -> list[str]:
    lines = ["| experiment | harness | ack p50 ms | ack p99 ms | e2e p50 ms | e2e p95 ms | storage MB | storage cores |",
             "|---|---|---|---|---|---|---|---|"]
    for name in LATENCY:
        run = _ok(result, name)
        if run:
            held = "valid" if run["valid"] else f"saturated {run['saturated_seconds']} s"
            lines.append(f"| {name} | {held} | {_n(run['ack']['q50_ms'])} | {_n(run['ack']['q99_ms'])} | "
                         f"{_n(run['e2e']['q50_ms'])} | {_n(run['e2e']['q95_ms'])} | {_n(run['storage_mb'])} | "
                         f"{_n(run['storage_cores'], '.3f')} |")
    lines += ["", "| experiment (zero loss) | harness | migrations | faults | acknowledged | owed | delivered | "
                  "lost | resent | duplicates | not delivered (no durability) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in LATENCY + LOSS:
        run = _ok(result, name)
        if not run:
            continue
        held = "valid" if run["valid"] else f"saturated {run['saturated_seconds']} s"
        d = run["durable"]
        faults = ", ".join(run["faults"]) or "-"
        if d:
            lines.append(f"| {name} | {held} | {run['migrations']} | {faults} | {d['acknowledged']} | {d['owed']} | "
                         f"{d['delivered']} | {d['lost']} | {d['resent']} | {d['duplicates']} | - |")
        else:
            missing = max(0, (run["expected"] or 0) - (run["delivered"] or 0))
            lines.append(f"| {name} | {held} | {run['migrations']} | {faults} | - | - | {run['delivered']} | - | - | - | "
                         f"{missing} of {run['expected']} |")
    return lines


# -- figures ---------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _boxes(ax, runs: list[tuple[str, dict]], key: str) -> None:
    """One box per run from its quantiles: whiskers q05-q95, box q25-q75, line at q50."""
    stats = [{"label": name.replace("latency-", ""), "whislo": r[key]["q05_ms"], "q1": r[key]["q25_ms"],
              "med": r[key]["q50_ms"], "q3": r[key]["q75_ms"], "whishi": r[key]["q95_ms"], "fliers": []}
             for name, r in runs if r[key]["q50_ms"] is not None]
    if stats:
        ax.bxp(stats, showfliers=False)


def _finish(plt, fig, title: str, path: Path) -> str:
    for ax in fig.axes:
        ax.set_xlabel("storage (placement, replicas)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def draw(result: dict, out: Path, stem: str = "durable") -> list[str]:
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [(name, run) for name in LATENCY if (run := _ok(result, name))]
    drawn = []
    if runs:
        fig, (ack, e2e) = plt.subplots(1, 2, figsize=(11, 4))
        _boxes(ack, [(n, r) for n, r in runs if n != "latency-none"], "ack")
        ack.set_title("publish acknowledgement (stored on a quorum)")
        ack.set_ylabel("latency (ms)")
        ack.axhline(CLOUD_RTT_MS, color="grey", linestyle=":", label=f"cloud RTT {CLOUD_RTT_MS:.0f} ms")
        ack.legend(loc="upper left")
        _boxes(e2e, runs, "e2e")
        e2e.set_title("end to end, producer to subscriber")
        e2e.set_ylabel("latency (ms, log scale)")
        e2e.set_yscale("log")  # a migration's stall (seconds) and the steady state (tens of ms) on one axis
        e2e.axhline(THRESHOLD_MS, color="red", linestyle="--", label=f"threshold Lth {THRESHOLD_MS:.0f} ms")
        e2e.legend(loc="upper left")
        drawn.append(_finish(plt, fig, "Durable topics on durable-smoke's flying swarm: site-local vs cloud storage "
                                       "(q05-q95)", out / f"{stem}-latency.png"))
        fig, (net, cpu) = plt.subplots(1, 2, figsize=(10, 3.6))
        labels = [n.replace("latency-", "") for n, _ in runs]
        net.bar(labels, [r["storage_mb"] or 0 for _, r in runs])
        net.set_ylabel("storage nodes' traffic, in + out (MB)")
        cpu.bar(labels, [r["storage_cores"] or 0 for _, r in runs])
        cpu.set_ylabel("storage nodes' CPU (cores, mean)")
        drawn.append(_finish(plt, fig, "What durability costs on this machine (one run each)",
                             out / f"{stem}-cost.png"))
    return drawn
