"""The figures a reader misread, checked on their matplotlib objects: Fig. 8's relinks and migrations
in each swarm's colour, the balance figure scaled to its data with its thresholds drawn or named, the
estimates figure's legend in its lines' colours; every legend entry names something drawn."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from analysis import balance, estimates, figures
from tests.figcheck import drawn, unmatched_legend_entries

E2E = [{"topic": f"{cls}-swarm{s}", "t_s": float(t), "p50_s": 0.02, "p95_s": 0.025 + 0.002 * s, "max_s": 0.03}
       for s in (1, 2) for cls in ("follow_leader", "sensor_data") for t in range(30)]
RELINKS = [{"node": "swarm1", "t_s": 6.0}, {"node": "swarm2", "t_s": 12.0}, {"node": "swarm1", "t_s": 20.0}]
MIGRATIONS = [{"topic": "follow_leader-swarm1", "t_s": 7.5, "ok": True},
              {"topic": "sensor_data-swarm1", "t_s": 7.5, "ok": True},
              {"topic": "follow_leader-swarm2", "t_s": 13.0, "ok": True},
              {"topic": "sensor_data-swarm2", "t_s": 24.0, "ok": False}]


def _line_colour(fig, label: str):
    (line,) = drawn(fig)[label]
    return to_rgba(line.get_color())


def test_fig8_marks_relinks_and_migrations_in_each_swarm_s_colour():
    fig, series = figures.fig8_figure(E2E, relinks=RELINKS, migrations=MIGRATIONS, topic_class="follow_leader")
    ax = fig.axes[0]
    colour = {s: _line_colour(fig, f"follow_leader-{s}") for s in ("swarm1", "swarm2")}
    assert colour["swarm1"] != colour["swarm2"]
    relinks = [(line.get_xdata()[0], to_rgba(line.get_color())) for line in ax.lines if line.get_linestyle() == ":"]
    assert sorted(relinks) == sorted((m["t_s"], colour[m["node"]]) for m in RELINKS)
    marked = [(t, to_rgba(line.get_color()), line.get_marker()) for line in ax.lines if line.get_marker() in ("v", "x")
              for t in line.get_xdata()]
    assert sorted(marked) == sorted((m["t_s"], colour[m["topic"].split("-")[1]], "v" if m["ok"] else "x")
                                    for m in MIGRATIONS)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"swarm1: relink (zone change)", "swarm2: relink (zone change)", "swarm1: topic migration",
            "swarm2: topic migration", "swarm2: topic migration FAILED"} <= set(legend)
    assert unmatched_legend_entries(fig) == []
    assert series == ["follow_leader-swarm1", "follow_leader-swarm2"]


T0 = 1000.0


def _loads(t: float, rnd: int, rates: dict) -> dict:
    return {"type": "loads", "time": T0 + t, "round": rnd, "imbalance": 0.3,
            "brokers": {b: {"rate_out": r, "network_out": r / 10_000, "topics": 2} for b, r in rates.items()}}


def _run(rth_out: float, bundles: bool = False) -> dict:
    """A run as `balance.load_run` reads it: two monitoring rounds in the settle (negative times), then
    the workload at up to 300 msg/s per broker; Rth_out `rth_out`, the link threshold 85 %."""
    events = [{"type": "run_start", "time": T0}, _loads(-10, 1, {"a": 0, "b": 0}), _loads(-5, 2, {"a": 0, "b": 0}),
              *[_loads(t, 3 + t, {"a": 100 + 20 * t, "b": 50}) for t in range(0, 11)]]
    if bundles:
        events.append({"type": "lm_usage", "time": T0 + 5, "round": 8, "brokers": {"a": {"bundles": 3}}})
    return {"policy": "epulsar", "scenario": "s", "run_id": "r", "rth_out": rth_out, "link_threshold": 0.85,
            "surge_s": None, **balance.over_time(events, T0)}


def test_balance_is_scaled_to_its_data_and_a_threshold_far_above_it_is_named():
    fig = balance.over_time_plot([_run(rth_out=20_000)])
    rate, link, owned = fig.axes[:3]
    assert 300 <= rate.get_ylim()[1] < 2 * 300           # the data fills the axis, not 20,000 msg/s
    assert not [line for line in rate.lines if line.get_color() == "red"]
    assert [t.get_text() for t in rate.texts] == ["Rth_out 20,000 msg/s, above the axis"]
    assert [t.get_text() for t in link.texts] == ["overload 85 %, above the axis"]
    assert link.get_ylim()[1] < 85
    assert "dashed" not in owned.get_ylabel()             # no bundles drawn, none named
    assert unmatched_legend_entries(fig) == []


def test_balance_draws_a_threshold_near_its_data_inside_the_axis():
    fig = balance.over_time_plot([_run(rth_out=400, bundles=True)])
    rate, _, owned = fig.axes[:3]
    (line,) = [line for line in rate.lines if line.get_label().startswith("Rth_out")]
    assert line.get_ydata()[0] == 400 and rate.get_ylim()[0] == 0 and rate.get_ylim()[1] > 400
    assert not list(rate.texts)
    assert "bundles owned (dashed)" in owned.get_ylabel()
    assert [line for line in owned.lines if line.get_linestyle() == "--"]
    assert unmatched_legend_entries(fig) == []


def test_balance_time_before_the_workload_is_the_shaded_settle():
    fig = balance.over_time_plot([_run(rth_out=400)])
    for ax in fig.axes[:3]:
        (settle,) = [p for p in ax.patches if p.get_label() == "settle (before the workload)"]
        x0 = settle.get_x()
        assert (x0, x0 + settle.get_width()) == (-10.0, 0.0)
        shown = np.concatenate([line.get_xdata() for line in ax.lines if len(line.get_xdata()) > 2])
        assert shown.min() >= x0                          # no time drawn outside the axis' story
    assert "workload started" in fig.axes[2].get_xlabel()


def test_estimates_legend_colours_are_their_lines():
    pairs = [{"time_s": float(t), "phase": "run", "a": f"b{i}", "b": f"p{i}", "same_site": True,
              "configured_ms": 2.0 if i < 3 else 5.0, "estimated_ms": 10.0 - t / 10 + i, "error_ms": 8.0 - t / 10}
             for i in range(4) for t in range(-10, 30, 5)]
    snapshots = [{"time_s": float(t), "median_error_ms": 3.0, "p95_error_ms": 6.0, "same_site_max_error_ms": 8.0}
                 for t in range(-10, 30, 5)]
    end = {"time_s": -2.0, "settled": True, "waited_s": 8.0}
    fig, _series = estimates.figure(snapshots, pairs, end, bound_ms=8.0)
    top = fig.axes[0]
    configured = sorted(t.get_text() for t in top.get_legend().get_texts() if t.get_text().startswith("configured"))
    assert configured == ["configured RTT 2 ms (3 pairs)", "configured RTT 5 ms (b3-p3)"]
    assert unmatched_legend_entries(fig) == []


def test_a_legend_entry_without_its_line_is_caught():
    """The check above can fail: a proxy entry (the estimates figure's old "configured RTT (dashed)",
    grey while the lines were coloured) names nothing drawn."""
    fig, ax = figures.plt.subplots()
    ax.plot([0, 1], [2, 2], color="C0", linestyle="--")
    ax.plot([], [], color="grey", linestyle="--", label="configured RTT (dashed)")
    ax.plot([0, 1], [1, 3], color="C1", label="estimated")
    ax.legend()
    assert unmatched_legend_entries(fig) == ["configured RTT (dashed)"]
    figures.plt.close(fig)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    figures.plt.close("all")
