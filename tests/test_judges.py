"""The live tests' own judging helpers on fabricated inputs of a broken system: each must say
"wrong" where the system is (tests/spans.py's are in tests/test_spans.py)."""

from __future__ import annotations

import json

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


def _health(tmp_path, rows):
    (tmp_path / "health.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_an_mmog_run_is_excused_only_when_the_hypervisor_took_the_seconds(tmp_path):
    """A busy-looping client leaves no CPU idle in 10 seconds: not held, and not the machine's (it
    fails after the retry); 10 seconds the hypervisor stole are the machine's (it skips, recorded)."""
    from tests.live import ByMachine
    from tests.test_run_mmog import mmog_not_held

    quiet = [{"elapsed_s": float(s), "t": s} for s in range(30)]
    summary = {"harness": {"saturated": ["..."]}}
    assert mmog_not_held(_health(tmp_path, quiet), summary) is None
    busy = [{**r, "cpu_idle": 0.0, "causes": ["cpu"]} if r["elapsed_s"] < 10 else r for r in quiet]
    why = mmog_not_held(_health(tmp_path, busy), summary)
    assert why and not isinstance(why, ByMachine)
    stolen = [{**r, "cpu_steal_ms": 300.0, "loop_lag_max_ms": 40.0, "causes": ["event-loops"]}
              if r["elapsed_s"] < 10 else r for r in quiet]
    assert isinstance(mmog_not_held(_health(tmp_path, stolen), summary), ByMachine)
