"""Links from real measurements carry their real variation (`infrastructure.cities.jitter:
measured`): the WonderProxy summaries behind the cities, the jitter they give a link, the scenario
check, and a live probe of the pairs that varied most, with and without it (testbed.bench.calibration)."""

from __future__ import annotations

import math

import pytest

from testbed.bench import calibration
from testbed.emulation.delayline import SHARED_TICK_US
from testbed.mobility import group_changes
from testbed.scenario import cities
from testbed.scenario.loader import ScenarioError, load, parse_text
from testbed.topology import build, checked
from tests.live import measured_held
from tests.needs import full_system


def test_the_spread_of_every_city_pair_comes_from_both_directions_of_the_pings():
    table = cities.spread_table()
    assert len(table) == 120  # every unordered pair of the 16 cities
    for pair, spread in table.items():
        assert spread.avg == pytest.approx(cities.rtt(*pair), abs=1e-6)  # the RTT table is the same mean
        assert spread.min <= spread.avg <= spread.max and spread.mdev > 0
    assert cities.spread("dal", "bos").mdev == pytest.approx(2.165e-3, abs=5e-6)  # the pair that varied most


def test_the_jitter_adds_to_the_emulators_own_spread_what_the_pair_had_more():
    assert cities.EMULATOR_RTT_STD == pytest.approx(SHARED_TICK_US * 1e-6 / math.sqrt(6))
    mdev = cities.spread("dal", "bos").mdev
    jitter = cities.measured_jitter("dal", "bos")
    # two crossings of +-J uniform (variance J^2/3 each) plus the emulator's own give the measured mdev
    assert math.sqrt(2 * jitter ** 2 / 3 + cities.EMULATOR_RTT_STD ** 2) == pytest.approx(mdev)
    quiet = min(cities.spread_table(), key=lambda pair: cities.spread(*pair).mdev)
    assert cities.spread(*quiet).mdev < cities.EMULATOR_RTT_STD and cities.measured_jitter(*quiet) == 0.0


def _cities_scenario(jitter: str, extra: str = "") -> str:
    return f"""
name: jit
duration: 30s
infrastructure:
  cities: {{names: [dal, bos, den], access_latency: 4.5ms, jitter: {jitter}}}
  cloud: {{name: cloud, city: dal}}
  links:
    local: {{delay: 0.5ms}}
{extra}nodes:
  clients:
    - {{name: p, role: avatar, count: 2, site: random}}
workload: {{kind: mmog, avatars: 2, groups: 2, rate: 1/s, topics: [{{name: avatar, threshold: 100ms}}]}}
"""


def test_measured_jitter_goes_on_the_inter_city_links_only():
    topology = build(parse_text(_cities_scenario("measured")))
    site_links = {frozenset((link.a, link.b)): link.shaping.jitter for link in topology.links if link.kind == "site"}
    assert site_links[frozenset(("dal", "bos"))] == pytest.approx(cities.measured_jitter("dal", "bos"))
    assert all(link.shaping.jitter == 0 for link in topology.links if link.kind != "site")
    assert all(jitter == 0 for jitter in [link.shaping.jitter for link in build(parse_text(_cities_scenario("none"))).links])


def test_measured_jitter_and_a_site_jitter_of_ones_own_are_refused_with_the_line(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text(_cities_scenario("measured", "    site: {jitter: 1ms}\n"))
    with pytest.raises(ScenarioError) as error:
        checked(load(path), str(path))
    assert "both.yaml:5: infrastructure.cities.jitter: measured" in str(error.value)  # the cities line


def test_players_without_group_changes_stay_in_their_first_group():
    """An MMOG scenario without `mobility` (no stay time) validates: no group changes (it crashed)."""
    groups, changes = group_changes(parse_text(_cities_scenario("none")))
    assert len(groups) == 2 and changes == []


@full_system
def test_the_pair_that_varied_most_varies_as_measured_and_constant_links_do_not(tmp_path):
    """dal-bos's pings varied most (mdev 2.17 ms): with `jitter: measured` the emulated RTTs' standard
    deviation is within the bench's 30 %, with constant links it is the emulator's ~0.2 ms, and the
    mean within max(0.5 ms, 3 %) either way (real probes through the delay line)."""
    names = ["dal", "bos", "den"]

    def spread_off(result: dict) -> float:  # how far dal-bos's deviation is beyond 30 %, ms
        (row,) = [r for r in calibration.compared(result["pairs"], "dal") if {r["a"], r["b"]} == {"dal", "bos"}]
        return abs(row["emulated"]["mdev"] - row["measured"]["mdev"]) - calibration.MDEV_TOLERANCE_SHARE * row["measured"]["mdev"]

    measured = measured_held(lambda: calibration.probe("measured", 300, tmp_path, names), spread_off)
    constant = calibration.probe("none", 300, tmp_path, names)
    for result in (measured, constant):
        rows = calibration.compared(result["pairs"], "dal")
        assert len(rows) == 3 and all(r["avg_ok"] for r in rows), rows
    assert calibration.verdict(calibration.compared(measured["pairs"], "dal"))["mdev_within"] >= 2 / 3
    assert spread_off(constant) > 0  # constant links miss the measured spread: the check can fail
