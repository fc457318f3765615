"""US cities and their WonderProxy inter-city RTTs (testbed/data/wonderproxy, see its SOURCE.md).

Scenarios name cities by short codes, because a city name becomes a switch and host name and must
fit Linux's interface-name limit; the data files keep WonderProxy's full names.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

CITY_CODES: dict[str, str] = {
    "nyc": "New York",
    "atl": "Atlanta",
    "chi": "Chicago",
    "dal": "Dallas",
    "lax": "Los Angeles",
    "sfo": "San Francisco",
    "sea": "Seattle",
    "den": "Denver",
    "mia": "Miami",
    "was": "Washington DC",
    "bos": "Boston",
    "hou": "Houston",
    "phx": "Phoenix",
    "slc": "Salt Lake City",
    "mci": "Kansas City",
    "msp": "Minneapolis",
}


@dataclass(frozen=True)
class City:
    code: str
    name: str
    lat: float
    lon: float


def _data_file(name: str):
    return resources.files("testbed.data").joinpath("wonderproxy", name)


@cache
def city_table() -> dict[str, City]:
    """The 16 cities with the coordinates of the WonderProxy server standing for each."""
    by_name = {name: code for code, name in CITY_CODES.items()}
    with _data_file("us_cities_16.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return {
        by_name[row["city"]]: City(by_name[row["city"]], row["city"], float(row["lat"]), float(row["lon"]))
        for row in rows
    }


@cache
def rtt_table() -> dict[frozenset[str], float]:
    """Measured RTT in seconds for every unordered pair of city codes."""
    by_name = {name: code for code, name in CITY_CODES.items()}
    with _data_file("us_city_rtt_16.csv").open() as handle:
        return {
            frozenset((by_name[row["city_a"]], by_name[row["city_b"]])): float(row["rtt_ms"]) / 1000.0
            for row in csv.DictReader(handle)
        }


def rtt(a: str, b: str) -> float:
    """Inter-city RTT in seconds (0 for a city with itself)."""
    if a == b:
        return 0.0
    return rtt_table()[frozenset((a, b))]


@dataclass(frozen=True)
class Spread:
    """A city pair's measured RTT summary in seconds: a typical `ping -c 30` run's min, mean, max and
    standard deviation (ping's `mdev`), each the mean of the pair's two directions."""

    min: float
    avg: float
    max: float
    mdev: float


@cache
def spread_table() -> dict[frozenset[str], Spread]:
    """Every unordered pair of the 16 cities, from the servers that stand for them (us_pings_ms.csv)."""
    by_name = {name: code for code, name in CITY_CODES.items()}
    with _data_file("us_city_servers_16.csv").open() as handle:
        city_of_server = {row["wp_server_id"]: by_name[row["city"]] for row in csv.DictReader(handle)}
    directed: dict[frozenset[str], list[dict]] = {}
    with _data_file("us_pings_ms.csv").open() as handle:
        for row in csv.DictReader(handle):
            a, b = city_of_server.get(row["source"]), city_of_server.get(row["destination"])
            if a and b and a != b:
                directed.setdefault(frozenset((a, b)), []).append(row)
    return {pair: Spread(*(sum(float(r[key]) for r in rows) / len(rows) / 1000.0 for key in ("min", "avg", "max", "mdev")))
            for pair, rows in directed.items()}


def spread(a: str, b: str) -> Spread:
    return spread_table()[frozenset((a, b))]


#: A link's jitter is uniform within +-J in each direction (testbed/emulation/delayline.c, never
#: reordering a flow), whose standard deviation is J / sqrt(3); a round trip crosses the link twice,
#: independently, so an RTT deviation D needs J = D * sqrt(3 / 2).
JITTER_PER_RTT_STD = math.sqrt(1.5)
#: The emulator's own RTT deviation with constant links: the routed shaper sends a frame on its 500 us
#: departure grid (delayline.SHARED_TICK_US), a rounding uniform over one tick in each direction, so
#: 0.5 ms / sqrt(6) = 0.204 ms per round trip; `make bench-calibration` measured a median of 0.20 ms
#: over the 120 city pairs with `jitter: none`. The measured jitter adds only what this lacks.
EMULATOR_RTT_STD = 500e-6 / math.sqrt(6)


def measured_jitter(a: str, b: str) -> float:
    """The per-direction jitter (s) that gives the link between two cities its measured RTT spread,
    on top of the emulator's own (none for a pair that varied less than the emulator does)."""
    wanted = spread(a, b).mdev
    return JITTER_PER_RTT_STD * math.sqrt(max(0.0, wanted * wanted - EMULATOR_RTT_STD * EMULATOR_RTT_STD))
