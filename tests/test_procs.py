"""testbed.procs: the process helpers every layer shares (pure or local processes only, no root)."""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from testbed import procs


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


# -- children ---------------------------------------------------------------------------------------
def test_read_line_returns_the_first_line_or_none_when_the_child_hangs_or_exits():
    ready = child("print('ready', flush=True); import time; time.sleep(30)")
    hangs = child("import time; time.sleep(30)")
    quits = child("pass")
    try:
        assert procs.read_line(ready, 10) == "ready"
        started = time.monotonic()
        assert procs.read_line(hangs, 0.3) is None
        assert time.monotonic() - started < 2
        assert procs.read_line(quits, 10) is None
    finally:
        procs.stop_group([ready, hangs, quits])


def test_stop_group_terminates_at_once_and_kills_what_ignores_sigterm_within_one_timeout():
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(30)"
    group = [child(stubborn), child(stubborn), child("print('ready', flush=True); import time; time.sleep(30)")]
    for process in group:
        assert procs.read_line(process, 10) == "ready"
    started = time.monotonic()
    procs.stop_group([*group, None], timeout=0.5)
    assert time.monotonic() - started < 0.5 * len(group)  # one deadline for the group, not one each
    assert [p.returncode for p in group] == [-9, -9, -15]


def test_wait_or_kill_reaps_what_already_exited_and_kills_the_rest():
    done, running = child("pass"), child("import time; time.sleep(30)")
    procs.wait_or_kill([done, running], timeout=0.3)
    assert done.returncode == 0 and running.returncode == -9


# -- what children leave behind ---------------------------------------------------------------------
def test_json_lines_skips_what_is_not_a_whole_object(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'ready\n{"a": 1}\n\n[1, 2]\n{"b": "\xc3\xa9"}\n\xff\xfe\n{"c": 3, "d": [1, \n{"e": 5}')
    assert list(procs.json_lines(path)) == [{"a": 1}, {"b": "\u00e9"}, {"e": 5}]
    assert list(procs.json_lines(tmp_path / "missing.jsonl")) == []


def test_percentile_methods_are_numpys_and_keep_the_rules_of_the_old_copies():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert procs.percentile(values, 0.95) == pytest.approx(4.8)  # 4 + 0.8 x (5 - 4)
    assert procs.percentile(values, 0.5, "lower") == 3.0
    assert procs.percentile([1.0, 2.0], 0.5, "lower") == 1.0 and procs.percentile([1.0, 2.0], 0.5, "higher") == 2.0
    assert procs.percentile([1.0, 2.0, 3.0, 4.0], 0.5, "nearest") == 3.0  # position 1.5: ties to even (index 2)
    assert procs.percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.5, "nearest") == 3.0  # position 2.5 -> index 2
    assert procs.percentile([], 0.5) is None and procs.percentile([7.0], 0.99, "higher") == 7.0
    rng = random.Random(1)
    for n in (1, 2, 3, 10, 99, 100, 101, 1000):
        sample = [rng.random() for _ in range(n)]
        ordered = sorted(sample)
        for q in (0.5, 0.95, 0.99):
            # probe, nc snapshots, bench_shaper: round(q (n - 1)); workload summary, migration: int(q (n - 1))
            assert procs.percentile(sample, q, "nearest") == ordered[min(n - 1, round(q * (n - 1)))]
            assert procs.percentile(sample, q, "lower") == ordered[int(q * (n - 1))]
        for q in (0.5, 0.99):  # the client's summary: int(q n)
            assert procs.percentile(sample, q, "higher") == ordered[min(n - 1, int(q * n))]


# -- C helpers --------------------------------------------------------------------------------------
@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc is not installed")
def test_build_c_builds_once_and_again_when_the_source_changes(tmp_path):
    source, binary = tmp_path / "hello.c", tmp_path / "_build" / "hello"
    source.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
    assert procs.build_c(source, binary) == binary
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "hello\n"
    built = binary.stat().st_mtime_ns
    assert procs.build_c(source, binary) == binary and binary.stat().st_mtime_ns == built  # up to date: kept
    source.write_text('#include <stdio.h>\nint main(void) { puts("again"); return 0; }\n')
    os.utime(source, ns=(built + 10**9, built + 10**9))
    procs.build_c(source, binary)
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "again\n"
    source.write_text("int main(void) { return nope; }\n")
    os.utime(source, ns=(built + 2 * 10**9, built + 2 * 10**9))
    with pytest.raises(procs.BuildError, match="nope"):
        procs.build_c(source, binary)
    assert sorted(p.name for p in binary.parent.iterdir()) == ["hello"]  # no temporary file left behind


def test_build_c_says_when_the_source_is_missing(tmp_path):
    with pytest.raises(procs.BuildError, match="source missing"):
        procs.build_c(tmp_path / "none.c", tmp_path / "none")


# -- CPU time from /proc ----------------------------------------------------------------------------
def test_machine_ticks_sum_the_first_eight_fields_and_count_iowait_as_idle():
    stat = "cpu  100 2 30 400 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    ticks = procs.machine_ticks(stat)
    assert ticks == (100 + 2 + 30 + 400 + 5 + 6 + 7 + 8, 400 + 5, 8, 6 + 7)
    total, idle, steal, irq = procs.machine_ticks()
    assert total >= idle + steal + irq and idle > 0 and steal >= 0


def test_process_stat_counts_user_and_system_time_after_the_command_name():
    rest = (["S", "9", "1", "1", "0", "-1", str(0x200000)] + ["0"] * 4 + ["12", "30"] + ["5", "6"] + ["0"] * 5
            + ["4096", "77"] + ["0"] * 30)
    raw = ("42 (odd) name (x)) " + " ".join(rest)).encode()
    assert procs.parse_process_stat(raw) == procs.ProcessStat(ticks=42, kernel_thread=True, rss_pages=77, mapped_bytes=4096,
                                                              name=b"odd) name (x)", children_ticks=11, ppid=9,
                                                              started=0)
    mine = procs.process_stat(os.getpid())
    assert mine.ticks >= 0 and not mine.kernel_thread and mine.rss_pages > 0
    assert 0 < mine.started <= procs.boot_ticks()
    assert procs.process_stat(2**22 + 1) is None  # beyond pid_max: never a process
    assert os.getpid() in procs.all_process_stats()
    deadline = time.process_time() + 3 / procs.TICKS + 0.05
    while time.process_time() < deadline:
        math.sqrt(2.0)
    assert procs.process_stat("self").ticks > mine.ticks
    assert procs.cpu_seconds(os.getpid()) >= 3 / procs.TICKS and procs.cpu_seconds(2**22 + 1) == 0.0


def test_a_line_counter_counts_complete_lines_once_across_reads_and_files_that_appear_later(tmp_path):
    """The progress line's count of trace rows: a row still being written counts once its newline
    is there, a file created later is found, and with a needle only the lines holding it count."""
    from testbed.procs import LineCounter

    rows = LineCounter(tmp_path, "*.jsonl")
    first = tmp_path / "a.jsonl"
    first.write_bytes(b'{"x":1}\n{"x":2}\n{"x":')
    assert rows.count() == 2
    with first.open("ab") as handle:
        handle.write(b'3}\n')
    (tmp_path / "b.jsonl").write_bytes(b"{}\n" * (LineCounter.CHUNK // 3 + 5))  # more than one read
    (tmp_path / "c.log").write_bytes(b"not counted\n")
    assert rows.count() == 3 + LineCounter.CHUNK // 3 + 5
    assert rows.count() == 3 + LineCounter.CHUNK // 3 + 5

    ends = LineCounter(tmp_path, "a.jsonl", b'"x":3')
    assert ends.count() == 1
    with first.open("ab") as handle:
        handle.write(b'{"x":3}\n')
    assert ends.count() == 2


@pytest.mark.parametrize("needle", [None, b"{}"])
def test_a_line_counter_reads_a_file_growing_faster_than_it_reads_only_as_far_as_it_was(tmp_path, monkeypatch, needle):
    """Every read of the counter appends as much again to the file (a writer faster than a starved
    reader): a call counts what the file held when it began and returns; the next call counts the rest
    that has come by then. (Reading to the end held a harness 20 minutes.)"""
    from pathlib import Path as RealPath

    from testbed.procs import LineCounter

    grown = tmp_path / "t.jsonl"
    grown.write_bytes(b"{}\n" * (3 * LineCounter.CHUNK // 3))
    opened = RealPath.open

    appends = []

    class Growing:
        def __init__(self, handle):
            self.handle = handle

        def read(self, *size):
            data = self.handle.read(*size)
            if len(appends) < 20:  # bounded: a reader that chases the end fails the count, not the disk
                appends.append(len(data))
                with opened(grown, "ab") as writer:
                    writer.write(b"{}\n" * max(1, len(data) // 3))
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(RealPath, "open", lambda self, *a, **k: Growing(opened(self, *a, **k)) if self == grown
                        else opened(self, *a, **k))
    rows = LineCounter(tmp_path, "*.jsonl", needle)
    first = rows.count()
    assert first == LineCounter.CHUNK  # what it held at the call, not what came while reading
    assert rows.count() > first  # the rest, later
