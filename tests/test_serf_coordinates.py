"""Serf coordinate distance: the examples of hashicorp/serf coordinate_test.go, worked by hand."""

import pytest

from testbed.nc.coordinate import Coordinate


def coord(vec, height=0.0, adjustment=0.0):
    return Coordinate(tuple(vec), 1.5, adjustment, height)


def test_euclidean_part():
    a, b = coord([-0.5, 1.3, 2.4]), coord([1.2, -2.3, 3.4])
    # sqrt(1.7^2 + 3.6^2 + 1.0^2) = sqrt(16.85)
    assert a.distance_to(b) == pytest.approx(4.104875150354758)
    assert a.distance_to(b) == pytest.approx(b.distance_to(a))


def test_heights_add():
    a, b = coord([-0.5, 1.3, 2.4], height=0.7), coord([1.2, -2.3, 3.4], height=0.1)
    assert a.distance_to(b) == pytest.approx(4.104875150354758 + 0.8)


def test_adjustments_add_when_positive():
    a = coord([-0.5, 1.3, 2.4], height=0.7, adjustment=0.1)
    b = coord([1.2, -2.3, 3.4], height=0.1, adjustment=0.2)
    assert a.distance_to(b) == pytest.approx(4.104875150354758 + 0.8 + 0.3)


def test_negative_adjusted_distance_falls_back_to_raw():
    a, b = coord([0.0, 0.0], adjustment=-5.0), coord([0.003, 0.004])
    assert a.distance_to(b) == pytest.approx(0.005)


def test_proxy_height():
    a, b = coord([0.0, 0.0], height=0.001), coord([0.0, 0.0], height=0.002)
    assert a.with_extra_height(0.010).distance_to(b) == pytest.approx(0.013)


def test_dimension_mismatch():
    with pytest.raises(ValueError):
        coord([0.0]).distance_to(coord([0.0, 1.0]))
