"""Message tracking's pure parts (seed 002): filters, formulas, ids, histories, stores, traceback."""

from __future__ import annotations

import hashlib
import random

import pytest

from testbed.tracking.bloom import PRESETS, BloomFilter, efpp, fpp, positions
from testbed.tracking.config import TrackingConfig
from testbed.tracking.bloom import Filter
from testbed.tracking.msgid import IdClock, MessageId, node_id, parse, unpack
from testbed.tracking.recorder import Recorder
from testbed.tracking.store import StoreWriter, read_records, read_run
from testbed.tracking.traceback import Traceback


def test_bit_positions_are_the_md5_segments_the_paper_describes():
    """k=16, m=65,536: two MD5 applications (prefix bytes 0x5c, 0xa3), 16 segments of 16 bits each,
    read off the hex digests four digits at a time."""
    key = bytes(range(16))
    hex_digits = hashlib.md5(b"\x5c" + key).hexdigest() + hashlib.md5(b"\xa3" + key).hexdigest()
    by_hand = [int(hex_digits[4 * j:4 * j + 4], 16) for j in range(16)]
    assert positions(key, 65_536, 16) == by_hand
    # m = 1 Mbit, k = 12: 20-bit segments (5 hex digits), still two applications (240 bits)
    assert positions(key, 1 << 20, 12) == [int(hex_digits[5 * j:5 * j + 5], 16) for j in range(12)]
    # m not a power of two: segments of ceil(log2 m) bits, reduced mod m
    assert positions(key, 1000, 3) == [int(bin(int(hex_digits[:8], 16))[2:].zfill(32)[10 * j:10 * j + 10], 2) % 1000
                                       for j in range(3)]


def test_a_filter_sets_exactly_those_bits_and_finds_what_it_holds():
    key = b"m" * 16
    f = BloomFilter(65_536, 16)
    f.add(key)
    set_bits = {i for i in range(65_536) if f.bits[i >> 3] >> (i & 7) & 1}
    assert set_bits == set(positions(key, 65_536, 16))
    assert key in f and f.count == 1
    assert b"n" * 16 not in f


def test_false_positive_formulas_match_the_papers_table_2():
    """Eq. 1 and 2: each preset's full filter, two of them in a matching set, meets its accuracy
    (99.999 %: efpp 1e-5 from fpp < 5e-6 at m/n = 26, k = 16)."""
    assert fpp(65_536, 16, 2_521) < 5e-6
    assert efpp([0.1, 0.1]) == pytest.approx(1 - 0.9 ** 2)
    targets = {"99.999": 1e-5, "99": 0.01, "95": 0.05}
    for name, f in PRESETS.items():
        assert efpp([f.full_fpp()] * 2) <= targets[name.split("-")[1]], name
    assert fpp(65_536, 8, 0) == 0.0


def test_a_filters_measured_false_positive_rate_follows_eq_1():
    f = BloomFilter(4_096, 4)
    rng = random.Random(1)
    for _ in range(600):
        f.add(rng.randbytes(16))
    trials = 40_000
    hits = sum(rng.randbytes(16) in f for _ in range(trials))
    expected = fpp(4_096, 4, 600)  # ~0.0306
    assert abs(hits / trials - expected) < 5 * (expected / trials) ** 0.5


def test_message_ids_are_table_1s_16_bytes_and_count_within_a_millisecond():
    mid = MessageId(node_id("pub1"), node_id("bzone1"), 1_700_000_000_123, 7)
    assert len(mid.pack()) == 16 and unpack(mid.pack()) == mid and parse(mid.hex()) == mid
    clock = IdClock("pub1")
    a, b = unpack(clock.next("bzone1", 1000.0005)), unpack(clock.next("bzone1", 1000.0006))
    assert (a.t_ms, a.counter, b.t_ms, b.counter) == (1_000_000, 0, 1_000_000, 1)
    assert unpack(clock.next("bzone1", 999.0)).t_ms == 1_000_000  # never backwards
    clock.adjust(-250)
    assert unpack(clock.next("bzone2", 1001.0)).t_ms == 1_000_750
    assert unpack(clock.next("bzone2", 1001.0)).broker == node_id("bzone2")
    with pytest.raises(ValueError, match="32 hex digits"):
        parse("zz")


def _raw(publisher: str, broker: str, t_ms: int, counter: int = 0) -> bytes:
    return MessageId(node_id(publisher), node_id(broker), t_ms, counter).pack()


def _bloom(n: int = 3, tp: float = 1.0, m: int = 65_536, k: int = 8, **kw) -> TrackingConfig:
    return TrackingConfig(strategy="bloom", filter=Filter(m=m, k=k, n=n), persistence_s=tp, **kw)


def test_a_filter_is_stored_when_full_and_when_the_persistence_interval_expires():
    r = Recorder("b1", _bloom(n=3, tp=1.0))
    for i in range(3):
        r.message("x", _raw("p", "b1", 1000 + i), now_s=1.0)
    (full,) = r.take()
    assert (full.reason, full.count, full.t_start, full.t_end) == ("full", 3, 1000, 1002)
    r.message("x", _raw("p", "b1", 990), now_s=2.0)  # R_j grows both ways: [990, 995]
    r.message("x", _raw("p", "b1", 995), now_s=2.2)
    r.tick(2.9)
    assert r.take() == []
    r.tick(3.0)
    (late,) = r.take()
    assert (late.reason, late.count, late.t_start, late.t_end) == ("interval", 2, 990, 995)


def test_the_log_keeps_20_byte_records_in_one_buffer_stored_when_full_or_on_t_p():
    r = Recorder("b1", TrackingConfig(strategy="log", buffer_bytes=60, persistence_s=2.0))
    r.attach("s1", "x")
    r.message("x", _raw("p", "b1", 1), now_s=0.0)  # two records: publisher and subscriber history
    assert r.take() == []
    r.message("x", _raw("p", "b1", 2), now_s=0.1)  # the third record fills 60 bytes
    (stored,) = r.take()
    assert (stored.reason, stored.count, len(stored.payload)) == ("full", 3, 60)
    r.tick(2.2)  # the fourth record, born at 0.1, is 2.1 s old
    (rest,) = r.take()
    assert (rest.reason, rest.count) == ("interval", 1)


def test_the_publishing_broker_corrects_a_publisher_out_of_its_skew_tolerance():
    r = Recorder("b1", _bloom(skew_tolerance_s=0.05))
    assert r.message("x", _raw("p", "b1", 10_030), now_s=10.0) is None  # 30 ms: within T_s
    assert r.message("x", _raw("p", "b1", 10_500), now_s=10.0) == -500
    assert r.message("x", _raw("p", "b1", 10_500), now_s=10.5) is None  # told once a second at most
    assert r.message("x", _raw("p", "b2", 99_000), now_s=10.0) is None  # routed, not published here
    assert r.message("x", _raw("p", "b1", 12_000), now_s=10.0, forwarded=True) is None


@pytest.mark.parametrize("skew_s, bounded", [(0.2, True), (1.5, False)])
def test_the_matching_set_stays_within_theorem_1s_bound(skew_s, bounded):
    """Theorem 1: with 2 T_s <= w T_n a timestamp matches at most w + 1 filters. 100 msg/s from
    publishers whose clocks are up to T_s off, filters of 50 keys (T_f = 0.5 s) and T_p = 2 s: T_n
    = 0.5 s. T_s = 0.2 s gives w = 1 (at most 2 filters); a skew of 1.5 s past that breaks the bound."""
    rng = random.Random(4)
    r = Recorder("b1", _bloom(n=50, tp=2.0, skew_tolerance_s=0.2))
    t = 100.0
    sent = []
    for i in range(3000):
        t += 0.01
        stamp = round((t + rng.uniform(-skew_s, skew_s)) * 1000)
        r.message("x", _raw("p", "b1", stamp, i % 100), now_s=t)
        r.tick(t)
        sent.append(stamp)
    r.close()
    ranges = [(s.t_start, s.t_end) for s in r.take()]
    largest = max(sum(1 for a, b in ranges if a <= stamp <= b) for stamp in sent)
    assert (largest <= 2) == bounded, largest


def _two_brokers(tmp_path, config):
    """A hand-built history: p1 publishes at b1; m1 is delivered to s1 at b1 and forwarded to b2
    (a migration's grace period), where s2 gets it; m2 reaches s1 only; s3 was at b2 long before."""
    recorders = {}
    for name in ("b1", "b2"):
        writer = StoreWriter(tmp_path / "tracking" / name, {"broker": name, "id": node_id(name),
                                                             "config": config.to_json()}, sync=False)
        recorder = Recorder(name, config, on_history=lambda c, e, w=writer: w.line("histories", {"code": c, **e}))
        recorders[name] = (recorder, writer)
    b1, w1 = recorders["b1"]
    b2, w2 = recorders["b2"]
    w2.line("attach", {"t_ms": 0, "op": "attach", "subscriber": "s3", "topic": "x"})
    w2.line("attach", {"t_ms": 1, "op": "detach", "subscriber": "s3", "topic": "x"})
    for writer, recorder, sub in ((w1, b1, "s1"), (w2, b2, "s2")):
        recorder.attach(sub, "x")
        writer.line("attach", {"t_ms": 100_000, "op": "attach", "subscriber": sub, "topic": "x"})
    w1.line("names", {"id": node_id("p1"), "name": "p1"})
    m1, m2 = _raw("p1", "b1", 100_500), _raw("p1", "b1", 100_600)
    b1.message("x", m1, 100.5)
    b2.message("x", m1, 100.6, forwarded=True)
    b1.message("x", m2, 100.6)
    for recorder, writer in recorders.values():
        recorder.close()
        writer.write(recorder.take())
        writer.close()
    return m1, m2


@pytest.mark.parametrize("strategy", ["bloom", "log"])
def test_traceback_finds_the_path_and_the_subscribers_across_two_brokers(tmp_path, strategy):
    config = _bloom(n=1000) if strategy == "bloom" else TrackingConfig(strategy="log")
    m1, m2 = _two_brokers(tmp_path, config)
    tracker = Traceback(read_run(tmp_path))
    a1 = tracker.query(m1)
    assert (a1.origin, a1.publisher, a1.published, a1.routed) == ("b1", "p1", True, ["b2"])
    assert a1.delivered == {"s1": ["b1"], "s2": ["b2"]} and a1.brokers == ["b1", "b2"]
    assert a1.brokers_consulted == 2 and a1.filters_consulted >= 4
    a2 = tracker.query(m2)
    assert (a2.routed, a2.delivered) == ([], {"s1": ["b1"]})
    never = tracker.query(_raw("p1", "b1", 100_700))
    assert (never.published, never.routed, never.delivered) == (False, [], {})
    if strategy == "bloom":
        assert a1.expected_false < 1e-20  # a few keys in 64 Kbit filters: eq. 1 gives ~1e-29 per test
        assert all(t.subscriber != "s3" for t in a1.tests)  # s3 left long before: not a candidate
    else:
        assert a1.expected_false == 0.0


def test_a_store_cut_by_a_crash_reads_up_to_its_last_whole_buffer(tmp_path):
    config = _bloom(n=1)
    writer = StoreWriter(tmp_path / "b1", {"broker": "b1", "id": node_id("b1"), "config": config.to_json()}, sync=False)
    r = Recorder("b1", config)
    for i in range(3):
        r.message("x", _raw("p", "b1", i), now_s=0.0)
    writer.write(r.take())
    writer.close()
    path = tmp_path / "b1" / "store.bin"
    path.write_bytes(path.read_bytes()[:-10])
    assert [rec.t_start for rec in read_records(path)] == [0, 1]


def test_an_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="not one of none, log, bloom"):
        TrackingConfig(strategy="async")


def test_a_compared_message_with_no_negative_test_fits_the_spark_schema():
    """A message every tested subscriber received has no negative test: its expected false
    positives must still be a double, or Spark refuses the row (a CI run once failed on that)."""
    from pyspark.sql.types import _make_type_verifier

    from analysis.tracking import _schema, compared
    from testbed.tracking.traceback import Answer, Test

    answer = Answer(id=None, origin="b1", publisher="p1", published=True,
                    delivered={"s1": ["b1"]}, tests=[Test("b1", "sub", "s1", True, 0.01, 2)], brokers_consulted=1)
    verify = _make_type_verifier(_schema())
    row = compared("ab", {"s1"}, {"b1"}, answer)
    verify(row)
    assert row[5:8] == (0, 0, 0.0) and isinstance(row[7], float)
    answer.tests.append(Test("b1", "sub", "s2", True, 0.02, 2))  # s2 never got it: a false positive
    row = compared("ab", {"s1"}, {"b1"}, answer)
    verify(row)
    assert row[5:8] == (1, 1, 0.02) and row[-1] == [(0.02, 1.0)]
