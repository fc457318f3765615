"""BAD Pub/Sub's offline simulation (Nguyen et al., DEBS '19, 6.2; `make bench-bad`): its figures and
the paper's qualitative claims as rules, pure functions over the JSON testbed.systems.bad.bench.sim writes.

Figures, named by the paper's figure numbers (ours come from the simulation; the paper's Fig. 5-12 are
from its prototype, whose claims the simulation restates at ten times the size):

- badsim-fig5/7/8/9.png: broker load over time, one line per broker (RND, RR, NR; NR + shuffle)
- badsim-fig6/10/11.png: max load, cov and migrations per scheme (RND; NR with DM; NR with DM + GSH)
- badsim-fig12.png: total migrations for RND, RR, NR under LDM and SDM
- badsim-fig13.png: subscribers and load per broker over time, NR without LB, with LDM, with GSH
- badsim-fig14.png: alpha = 0.05 vs 0.15 under NR + LDM: cov over time, cumulative migrations

Rules (each returns {claim, holds, numbers}; each can fail, and the tests show it does): see RULES.

    python -m testbed.systems.bad.bench.sim_figures [results/bench/bad.json] [--dir results/bench] [--prefix badsim-]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# tolerances of the rules, stated once
FEW_MIGRATIONS = 0.05  # (1) "few": at most this share of the subscribers migrated over the run
LDM_SDM_MAX_LOAD = 0.05  # (3) max loads within 5 % of each other ...
LDM_SDM_COV = 0.02  # ... and cov within 0.02 (absolute)
MANY_MORE = 3.0  # (5) "many more": NR migrates at least 3x what RND and RR do

# the claims, as the verdicts and the paper index word them
RULE_RND_RR_MILD = "RND and RR are mildly skewed without LB and need few migrations"
RULE_NR_EXTREME = "NR without LB is extremely skewed and the shuffle fires"
RULE_LDM_CLOSE_TO_SDM = "LDM is close to SDM (max load and cov)"
RULE_SHUFFLE_AT_ONCE = "the shuffle balances at once and needs fewer later migrations than DM alone"
RULE_NR_MIGRATES_MOST = "NR needs many more migrations than RND and RR under LDM and SDM"
RULE_ALPHA_SENSITIVITY = "alpha = 0.05 gives lower cov and more migrations than 0.15"


class Missing(KeyError):
    """A rule's scheme is not in the JSON (a run with --schemes)."""


def _scheme(data: dict, name: str) -> dict:
    try:
        return data["schemes"][name]
    except KeyError:
        raise Missing(name) from None


def _tot(data: dict, name: str) -> dict:
    return _scheme(data, name)["totals"]


def _alpha(data: dict) -> float:
    return _scheme(data, "nr-ldm")["config"]["alpha"]


def _gamma(data: dict) -> float:
    return float(data["setup"]["gamma"])


def _verdict(claim: str, holds: bool, numbers: dict) -> dict:
    return {"claim": claim, "holds": bool(holds), "numbers": numbers}


def rule_rnd_rr_mild(data: dict) -> dict:
    """(1) RND and RR: skewed only mildly without LB (cov < gamma: no shuffle territory) and few
    migrations under LDM and SDM."""
    n, gamma = data["setup"]["subscribers"], _gamma(data)
    numbers, holds = {}, True
    for p in ("rnd", "rr"):
        c = _tot(data, f"{p}-none")["cov"]
        moved = {m: _tot(data, f"{p}-{m}")["migrations"] for m in ("ldm", "sdm")}
        numbers[p] = {"cov_no_lb": c, "migrations": moved}
        holds &= c < gamma and all(v <= FEW_MIGRATIONS * n for v in moved.values())
    numbers["few_means_at_most"] = int(FEW_MIGRATIONS * n)
    return _verdict(RULE_RND_RR_MILD, holds, numbers)


def rule_nr_extreme(data: dict) -> dict:
    """(2) NR without LB: cov > gamma, and the shuffle fires in the runs that allow it."""
    c, gamma = _tot(data, "nr-none")["cov"], _gamma(data)
    fired = {s: _tot(data, s)["shuffles"] for s in ("nr-ldm-gsh", "nr-sdm-gsh")}
    counts = _scheme(data, "nr-none")["series"]["subscribers"][-1]
    return _verdict(RULE_NR_EXTREME,
                    c > gamma and all(v > 0 for v in fired.values()),
                    {"cov_no_lb": c, "gamma": gamma, "shuffles": fired,
                     "subscribers_per_broker": {"max": max(counts), "min": min(counts)}})


def rule_ldm_close_to_sdm(data: dict) -> dict:
    """(3) LDM and SDM end close: max load within LDM_SDM_MAX_LOAD, cov within LDM_SDM_COV, per placement."""
    numbers, holds = {}, True
    for p in ("rnd", "rr", "nr"):
        ldm, sdm = _tot(data, f"{p}-ldm"), _tot(data, f"{p}-sdm")
        rel = abs(ldm["max_load_mb_s"] - sdm["max_load_mb_s"]) / max(ldm["max_load_mb_s"], sdm["max_load_mb_s"])
        dcov = abs(ldm["cov"] - sdm["cov"])
        numbers[p] = {"max_load_rel_diff": round(rel, 4), "cov_diff": round(dcov, 4)}
        holds &= rel <= LDM_SDM_MAX_LOAD and dcov <= LDM_SDM_COV
    numbers["tolerance"] = {"max_load_rel": LDM_SDM_MAX_LOAD, "cov_abs": LDM_SDM_COV}
    return _verdict(RULE_LDM_CLOSE_TO_SDM, holds, numbers)


def rule_shuffle_at_once(data: dict) -> dict:
    """(4) The shuffle balances at once (cov after its round and at the next measurement < alpha) and
    fewer migrations follow it than follow DM alone from the same time."""
    alpha, numbers, holds = _alpha(data), {}, True
    for dm in ("ldm", "sdm"):
        s = _scheme(data, f"nr-{dm}-gsh")["series"]
        if not any(s["shuffled"]):
            numbers[dm] = "the shuffle never fired"
            holds = False
            continue
        r = s["shuffled"].index(True)
        after_next = s["cov"][r + 1] if r + 1 < len(s["cov"]) else s["cov_after"][r]
        later = sum(s["migrations"][r + 1:])
        alone = sum(_scheme(data, f"nr-{dm}")["series"]["migrations"][r + 1:])
        numbers[dm] = {"fired_at_s": s["t"][r], "cov_before": s["cov"][r], "cov_after": s["cov_after"][r],
                       "cov_next_round": after_next, "shuffle_moves": s["migrations"][r],
                       "migrations_after": later, "dm_alone_migrations_after": alone}
        holds &= s["cov_after"][r] < alpha and after_next < alpha and later < alone
    numbers["alpha"] = alpha
    return _verdict(RULE_SHUFFLE_AT_ONCE, holds, numbers)


def rule_nr_migrates_most(data: dict) -> dict:
    """(5) NR needs many more (>= MANY_MORE x) migrations than RND and RR, under LDM and under SDM."""
    numbers, holds = {}, True
    for dm in ("ldm", "sdm"):
        moved = {p: _tot(data, f"{p}-{dm}")["migrations"] for p in ("rnd", "rr", "nr")}
        numbers[dm] = moved
        holds &= moved["nr"] >= MANY_MORE * max(moved["rnd"], moved["rr"], 1)
    numbers["factor"] = MANY_MORE
    return _verdict(RULE_NR_MIGRATES_MOST, holds, numbers)


def rule_alpha_sensitivity(data: dict) -> dict:
    """(6) alpha = 0.05 gives a lower cov and more migrations than alpha = 0.15 (NR + LDM)."""
    low, high = _scheme(data, "nr-ldm-a0.05"), _scheme(data, "nr-ldm")
    a, b = low["totals"], high["totals"]
    return _verdict(RULE_ALPHA_SENSITIVITY,
                    a["cov"] < b["cov"] and a["migrations"] > b["migrations"],
                    {f"alpha={low['config']['alpha']}": {"cov": a["cov"], "migrations": a["migrations"]},
                     f"alpha={high['config']['alpha']}": {"cov": b["cov"], "migrations": b["migrations"]}})


RULES = {RULE_RND_RR_MILD: rule_rnd_rr_mild, RULE_NR_EXTREME: rule_nr_extreme,
         RULE_LDM_CLOSE_TO_SDM: rule_ldm_close_to_sdm, RULE_SHUFFLE_AT_ONCE: rule_shuffle_at_once,
         RULE_NR_MIGRATES_MOST: rule_nr_migrates_most, RULE_ALPHA_SENSITIVITY: rule_alpha_sensitivity}


def verdicts(data: dict) -> list[dict]:
    """Every rule; one whose schemes were not run does not hold, and says which is missing."""
    out = []
    for claim, rule in RULES.items():
        try:
            out.append(rule(data))
        except Missing as missing:
            out.append(_verdict(claim, False, {"missing_scheme": missing.args[0]}))
    return out


def verdict_table(data: dict) -> list[str]:
    """The index's table under the figures: each claim, whether it holds, its numbers; then the totals."""
    lines = ["| the paper's claim (6.2) | holds | numbers |", "|---|---|---|"]
    lines += [f"| {v['claim']} | {'yes' if v['holds'] else 'no'} | {json.dumps(v['numbers'])} |"
              for v in data.get("verdicts") or verdicts(data)]
    lines += ["", "| scheme | max load MB/s (2nd half) | peak MB/s | cov (2nd half) | migrations | shuffles |",
              "|---|---|---|---|---|---|"]
    for name, run in data["schemes"].items():
        t = run["totals"]
        lines.append(f"| {name} | {t['max_load_mb_s']:,.0f} | {t['peak_load_mb_s']:,.0f} | {t['cov']:.3f} | "
                     f"{t['migrations']:,} | {t['shuffles']} |")
    return lines


markdown_table = verdict_table  # the interface of a system's benchmark figures (testbed.plugin.Benchmark)


def headline(data: dict, scale: str):
    """The index's line: the simulation's verdicts (written into bad.json by the bench) and its numbers."""
    from analysis.headlines import Headline, require

    verdict_list = require(data.get("verdicts"), "verdicts in bad.json")
    totals = {name: run["totals"] for name, run in data.get("schemes", {}).items()}
    nr = require(totals.get("nr-none"), "scheme nr-none in bad.json")
    ldm, gsh = totals.get("nr-ldm") or {}, totals.get("nr-ldm-gsh") or {}
    held = sum(bool(v["holds"]) for v in verdict_list)
    text = (f"{held} of {len(verdict_list)} claims hold. NR alone cov {nr['cov']:.2f}; NR + LDM {ldm.get('cov', 0):.3f} "
            f"with {ldm.get('migrations', 0):,} migrations; NR + LDM + GSH {gsh.get('cov', 0):.3f} with "
            f"{gsh.get('migrations', 0):,} moves (one shuffle); RND/RR cov <= "
            f"{max(totals.get(n, {}).get('cov', 0) for n in ('rnd-none', 'rr-none')):.3f}, no migrations needed"
            + "".join(f"; FAILS: {v['claim']}" for v in verdict_list if not v["holds"]))
    return Headline(text, held == len(verdict_list), scale, {"verdicts": verdict_list})


def table(data: dict) -> str:
    """One line per scheme: the totals the bar charts show."""
    lines = [f"{'scheme':>13} {'max MB/s (2nd half)':>20} {'peak MB/s':>10} {'cov (2nd half)':>15} "
             f"{'migrations':>11} {'shuffles':>9}"]
    for name, run in data["schemes"].items():
        t = run["totals"]
        lines.append(f"{name:>13} {t['max_load_mb_s']:>20.1f} {t['peak_load_mb_s']:>10.1f} {t['cov']:>15.3f} "
                     f"{t['migrations']:>11d} {t['shuffles']:>9d}")
    return "\n".join(lines)


# -- figures --------------------------------------------------------------------------------------------------
LABELS = {"none": "No LB", "ldm": "LDM", "sdm": "SDM"}


def _label(name: str) -> str:
    parts = name.split("-")
    text = " + ".join([parts[0].upper()] + [LABELS.get(p, p.upper()) for p in parts[1:] if not p.startswith("a0")])
    return text + (f" (alpha {parts[-1][1:]})" if parts[-1].startswith("a0") else "")


def _loads(ax, data: dict, name: str) -> None:
    run = data["schemes"][name]
    s = run["series"]
    t = np.asarray(s["t"]) / 60
    F = np.asarray(s["F"])
    for j in range(F.shape[1]):
        ax.plot(t, F[:, j], lw=0.8)
    ax.axhline(data["setup"]["beta_mb"], color="k", ls="--", lw=0.8, label="beta")
    for tt, fired in zip(t, s["shuffled"]):
        if fired:
            ax.axvline(tt, color="r", ls=":", lw=1, label="shuffle")
    ax.set_title(f"{_label(name)}: {run['totals']['migrations']} migrations", fontsize=9)
    ax.set_xlabel("time (min)")
    ax.set_ylabel("broker load F_j (MB/s)")
    ax.legend(fontsize=7, loc="upper right")


def _load_figure(data: dict, names: list[str], path: Path, title: str) -> Path | None:
    names = [n for n in names if n in data["schemes"]]
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        _loads(ax, data, name)
    return _save(fig, title, path)


def _bars(data: dict, names: list[str], path: Path, title: str) -> Path | None:
    names = [n for n in names if n in data["schemes"]]
    if not names:
        return None
    tots = [data["schemes"][n]["totals"] for n in names]
    labels = [_label(n) for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    panels = (("max_load_mb_s", "(1) max broker load, mean over 2nd half (MB/s)"),
              ("cov", "(2) cov, mean over 2nd half"), ("migrations", "(3) total subscriber migrations"))
    for ax, (key, ylabel) in zip(axes, panels):
        ax.bar(labels, [t[key] for t in tots], color="tab:blue")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    axes[1].axhline(_scheme(data, names[0])["config"]["alpha"], color="k", ls="--", lw=0.8, label="alpha")
    axes[1].legend(fontsize=7)
    return _save(fig, title, path)



def _save(fig, title: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

def fig12(data: dict, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
    for ax, dm in zip(axes, ("ldm", "sdm")):
        names = [f"{p}-{dm}" for p in ("rnd", "rr", "nr") if f"{p}-{dm}" in data["schemes"]]
        ax.bar([n.split("-")[0].upper() for n in names], [data["schemes"][n]["totals"]["migrations"] for n in names])
        ax.set_title(f"({1 if dm == 'ldm' else 2}) {dm.upper()}", fontsize=9)
        ax.set_xlabel("initial placement")
        ax.set_ylabel("total subscriber migrations")
    return _save(fig, "Total subscriber migrations per placement (paper Fig. 12)", path)


def fig13(data: dict, path: Path) -> Path:
    names = [n for n in ("nr-none", "nr-ldm", "nr-ldm-gsh") if n in data["schemes"]]
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.4), sharey="row", squeeze=False)
    for col, name in enumerate(names):
        s = data["schemes"][name]["series"]
        t = np.asarray(s["t"]) / 60
        counts = np.asarray(s["subscribers"])
        for j in range(counts.shape[1]):
            axes[0][col].plot(t, counts[:, j], lw=0.8)
        axes[0][col].set_title(_label(name), fontsize=9)
        axes[0][col].set_xlabel("time (min)")
        axes[0][col].set_ylabel("subscribers per broker")
        _loads(axes[1][col], data, name)
    return _save(fig, "Subscribers and load per broker, NR placement (paper Fig. 13)", path)


def fig14(data: dict, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for name in ("nr-ldm", "nr-ldm-a0.05"):
        if name not in data["schemes"]:
            continue
        run = data["schemes"][name]
        s, alpha = run["series"], run["config"]["alpha"]
        t = np.asarray(s["t"]) / 60
        line, = axes[0].plot(t, s["cov"], lw=1, label=f"alpha = {alpha:g}")
        axes[0].axhline(alpha, color=line.get_color(), ls="--", lw=0.8, label=f"threshold alpha = {alpha:g}")
        axes[1].plot(t, np.cumsum(s["migrations"]), lw=1, label=f"alpha = {alpha:g}")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("cov of broker loads (log)")
    axes[1].set_ylabel("cumulative subscriber migrations")
    for ax in axes:
        ax.set_xlabel("time (min)")
        ax.legend(fontsize=7)
    return _save(fig, f"NR + LDM, alpha sensitivity (beta {data['setup']['beta_mb']:g} MB/s; paper Fig. 14)", path)


def draw(data: dict, directory: Path, prefix: str = "badsim-") -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def p(fig: str) -> Path:
        return directory / f"{prefix}{fig}.png"

    dm = ("none", "ldm", "sdm")
    drawn = [
        _load_figure(data, [f"rnd-{m}" for m in dm], p("fig5"), "Broker load, RND placement (paper Fig. 5)"),
        _bars(data, [f"rnd-{m}" for m in dm], p("fig6"), "RND placement (paper Fig. 6)"),
        _load_figure(data, [f"rr-{m}" for m in dm], p("fig7"), "Broker load, RR placement (paper Fig. 7)"),
        _load_figure(data, [f"nr-{m}" for m in dm], p("fig8"), "Broker load, NR placement (paper Fig. 8)"),
        _load_figure(data, ["nr-ldm-gsh", "nr-sdm-gsh"], p("fig9"), "Broker load, NR + DM + GSH (paper Fig. 9)"),
        _bars(data, [f"nr-{m}" for m in dm], p("fig10"), "NR placement with DM (paper Fig. 10)"),
        _bars(data, ["nr-ldm", "nr-sdm", "nr-ldm-gsh", "nr-sdm-gsh"], p("fig11"),
              "NR placement with DM and DM + GSH (paper Fig. 11)"),
        fig12(data, p("fig12")),
        fig13(data, p("fig13")),
        fig14(data, p("fig14")),
    ]
    return [path for path in drawn if path is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.systems.bad.bench.sim_figures", description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", type=Path, default=Path("results/bench/bad.json"))
    parser.add_argument("--dir", type=Path, default=None, help="where the PNGs go (default: beside the JSON)")
    parser.add_argument("--prefix", default="badsim-")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.json.read_text())
    except (OSError, ValueError) as error:
        print(f"testbed.systems.bad.bench.sim_figures: {args.json}: {error}", file=sys.stderr)
        return 2
    print(table(data))
    for v in verdicts(data):
        print(f"[{'holds' if v['holds'] else 'FAILS'}] {v['claim']}: {v['numbers']}")
    for path in draw(data, args.dir or args.json.parent, args.prefix):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
