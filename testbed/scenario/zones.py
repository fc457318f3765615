"""Atlanta MEC zones: k-means over real tower coordinates (testbed/data/atlanta, see its SOURCE.md).

The points are FAA Digital Obstacle File structures of type TOWER in the Atlanta box: tall
registered towers, most of them likely cellular, not a list of cell sites. Clustering runs on a
local metric projection so a zone is a region of nearby towers, and its site is the centroid.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

EARTH_RADIUS_M = 6_371_000.0


@dataclass(frozen=True)
class Zone:
    name: str
    lat: float
    lon: float
    towers: int


@cache
def towers(dataset: str = "atlanta") -> np.ndarray:
    """Tower coordinates as an (n, 2) array of (lat, lon) degrees."""
    path = resources.files("testbed.data").joinpath(dataset, f"{dataset}_towers.csv")
    with path.open() as handle:
        rows = [(float(r["lat"]), float(r["lon"])) for r in csv.DictReader(handle)]
    return np.array(rows)


class Projection:
    """Equirectangular projection around the data's centre: metres are what mobility speeds use."""

    def __init__(self, points: np.ndarray):
        self.lat0, self.lon0 = (float(v) for v in points.mean(axis=0))
        self._kx = math.radians(1) * EARTH_RADIUS_M * math.cos(math.radians(self.lat0))
        self._ky = math.radians(1) * EARTH_RADIUS_M

    def to_xy(self, latlon: np.ndarray) -> np.ndarray:
        latlon = np.atleast_2d(latlon)
        return np.column_stack(((latlon[:, 1] - self.lon0) * self._kx, (latlon[:, 0] - self.lat0) * self._ky))

    def to_latlon(self, xy: np.ndarray) -> np.ndarray:
        xy = np.atleast_2d(xy)
        return np.column_stack((xy[:, 1] / self._ky + self.lat0, xy[:, 0] / self._kx + self.lon0))


@cache  # validation builds the sites twice (names first, then the graph); scenarios share seeds
def mec_zones(count: int, seed: int, dataset: str = "atlanta") -> tuple[Zone, ...]:
    """`count` zones, identical for a seed, named zone1.. from north-west to south-east."""
    points = towers(dataset)
    if count > len(points):
        raise ValueError(f"{count} zones asked for but the {dataset} data has only {len(points)} towers")
    projection = Projection(points)
    xy = projection.to_xy(points)
    from sklearn.cluster import KMeans  # here, not at import: it costs every `testbed` command ~0.7 s
    from threadpoolctl import threadpool_limits

    # One thread: on 700 towers OpenMP's threads cost more than they share, 14x on a busy 2-core VM
    # (185 against 13 ms a fit; the same zones for 72 counts and seeds, tests/test_scenario.py)
    with threadpool_limits(1):
        model = KMeans(n_clusters=count, random_state=seed, n_init=10).fit(xy)
    centres = projection.to_latlon(model.cluster_centers_)
    sizes = np.bincount(model.labels_, minlength=count)
    order = sorted(range(count), key=lambda i: (-round(centres[i, 0], 4), round(centres[i, 1], 4)))
    return tuple(
        Zone(f"zone{rank + 1}", round(float(centres[i, 0]), 6), round(float(centres[i, 1]), 6), int(sizes[i]))
        for rank, i in enumerate(order)
    )


def nearest_zone(zones: list[Zone], xy: np.ndarray, projection: Projection) -> int:
    """Index of the zone whose site is closest: a client attaches to the zone it is in."""
    centres = projection.to_xy(np.array([[z.lat, z.lon] for z in zones]))
    return int(np.argmin(((centres - xy) ** 2).sum(axis=1)))
