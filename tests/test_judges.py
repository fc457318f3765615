"""The live tests' own judging helpers on fabricated inputs of a broken system: each must say
"wrong" where the system is (tests/spans.py's are in tests/test_spans.py)."""

from __future__ import annotations

import pytest

from tests.test_dataplane import assert_baseline_loss
from tests.test_servers_live import _clock_off_ms


def test_a_clock_estimate_is_judged_against_the_true_offset_and_a_bound_of_its_own():
    assert _clock_off_ms({"tbs1": {"offset_ms": 0.3, "error_ms": 0.5}}) <= 0
    assert _clock_off_ms({"tbs1": {"offset_ms": 5.0, "error_ms": 6.0}}) > 0  # a wide bound excuses nothing
    assert _clock_off_ms({"tbs1": {"offset_ms": 1.5, "error_ms": 0.5}}) > 0  # off the truth by more than its bound
    assert _clock_off_ms({}) > 0  # no server measured


def test_the_baseline_may_lose_only_what_its_downtimes_left_unsent():
    downs = {"producer": [{"downtime_s": 0.1}], "consumer": [{"downtime_s": 0.1}]}
    assert_baseline_loss({"received": 585, "lost": 15}, downs)
    with pytest.raises(AssertionError):
        assert_baseline_loss({"received": 500, "lost": 100}, downs)  # lost more than 0.2 s of messages
    with pytest.raises(AssertionError):
        assert_baseline_loss({"received": 590, "lost": 0}, downs)  # ten messages neither received nor counted lost
