"""US cities and their WonderProxy inter-city RTTs (testbed/data/wonderproxy, see its SOURCE.md).

Scenarios name cities by short codes, because a city name becomes a switch and host name and must
fit Linux's interface-name limit; the data files keep WonderProxy's full names.
"""

from __future__ import annotations

import csv
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
