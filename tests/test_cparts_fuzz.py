"""Hostile input to the compiled parts: the client engine (testbed/systems/pubsub/engine.c) and the
shared delay line (testbed/emulation/delayline.c) are fed 100,000 random and mutated control lines
each (truncated, huge and negative numbers, over-long lines, NUL bytes, bad UTF-8), and the engine a
fake peer's malformed messages through a real nats-server. Each must stay up (no exit), answer a
valid line within a bound after the garbage (no hang), keep its memory within a bound (RSS from
/proc), and still do its job: a publish still comes back to a subscription, a link still forwards.
Seeded: a failure replays. `make sanitize` runs these against the sanitized binaries too."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from testbed import procs
from testbed.bench.client import local_nats_server
from testbed.emulation.delayline import Direction, ensure_built as build_delayline, link_options, shared_command
from testbed.systems.pubsub import engine as engine_module
from tests.needs import needs_nats_server

LINES = 100_000
ANSWER_S = 10.0          # a valid line after the garbage is answered within this
# what the garbage may add to the process's resident memory (under ASan, plus the freed memory its
# quarantine holds back to catch a use after free: 256 MB by default)
RSS_GROWTH_MB = 64 + (256 if procs.sanitizing() else 0)
HOSTILE_WORDS = [b"18446744073709551616", b"9223372036854775807", b"-9223372036854775808", b"99999999999999999999",
                 b"-1", b"-0", b"1e308", b"-1e308", b"nan", b"inf", b"0x10", b"+5", b" 5", b"1.5", b"", b"\x00",
                 b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"-", b"--", b"\t", b"\r", b"9" * 400]


# -- the garbage ------------------------------------------------------------------------------------
def mutate(line: bytes, rng: random.Random) -> bytes:
    """`line` changed in one to three ways a hostile or broken writer would."""
    for _ in range(rng.randint(1, 3)):
        words = line.split(b" ")
        kind = rng.randrange(9)
        if kind == 0:
            line = line[:rng.randrange(len(line) + 1)]                       # truncated
        elif kind == 1:
            words[rng.randrange(len(words))] = rng.choice(HOSTILE_WORDS)    # a number out of range, a NUL, bad UTF-8
            line = b" ".join(words)
        elif kind == 2:
            at = rng.randrange(len(line) + 1)
            line = line[:at] + rng.choice([b"\x00", b"\xff", b"\xc0\xaf", b"\x80"]) + line[at:]
        elif kind == 3:
            del words[rng.randrange(len(words))]                              # a word missing
            line = b" ".join(words)
        elif kind == 4:
            line = line + b" " + rng.choice(words)                            # a word too many
        elif kind == 5:
            line = b" ".join(words + [b"w"] * rng.randint(10, 80))            # far too many
        elif kind == 6 and line:
            at = rng.randrange(len(line))                                     # a byte flipped
            line = line[:at] + bytes([rng.randrange(256)]) + line[at + 1:]
        elif kind == 7:
            line = line + b"x" * rng.choice([4096, 5000, 9000, 20000])        # over-long
        else:
            line = line.replace(b" ", b"  ", 1) if rng.random() < 0.5 else line.replace(b" ", b"\t")
    return line.replace(b"\n", b" ")


def garbage(templates: list[bytes], rng: random.Random, count: int, keep=lambda line: True):
    """`count` lines: a third random bytes, the rest mutations of `templates` (minus what `keep` refuses)."""
    made = 0
    while made < count:
        if rng.random() < 0.3:
            line = rng.randbytes(rng.randrange(60)).replace(b"\n", b" ")
        else:
            line = mutate(rng.choice(templates), rng)
        if keep(line):
            made += 1
            yield line


# -- the process under test -------------------------------------------------------------------------
class Child:
    """A compiled part on pipes: lines in, its stdout collected by a thread, its RSS from /proc."""

    def __init__(self, argv: list[str], cwd: Path | None = None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=cwd)
        self.out = bytearray()
        self.err = bytearray()
        self.lock = threading.Lock()
        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._drain, args=(stream, into), daemon=True).start()

    def _drain(self, stream, into: bytearray) -> None:
        while chunk := os.read(stream.fileno(), 1 << 16):
            with self.lock:
                into.extend(chunk)

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def wait_for(self, pattern: bytes, timeout: float = ANSWER_S) -> re.Match:
        """The first match of `pattern` in stdout's whole lines (a long line arrives in several reads:
        `$` would match the end of its first part), or a failure naming what the process did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = re.search(pattern, self.out[:self.out.rfind(b"\n") + 1])
            if found:
                return found
            assert self.proc.poll() is None, f"exited with {self.proc.returncode}: {self.err[-2000:]!r}"
            time.sleep(0.01)
        raise AssertionError(f"no {pattern!r} within {timeout} s (alive: {self.proc.poll() is None}); "
                             f"stderr {self.err[-2000:]!r}")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def feed(child: Child, lines, batch: int = 2000) -> None:
    """Every line to the child, checking between batches that it is still there."""
    chunk: list[bytes] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == batch:
            assert child.proc.poll() is None, f"exited with {child.proc.returncode}: {child.err[-2000:]!r}"
            child.send(b"\n".join(chunk) + b"\n")
            chunk = []
    child.send(b"\n".join(chunk) + b"\n")


# -- the engine -------------------------------------------------------------------------------------
needs_libnats = pytest.mark.skipif(not engine_module.HEADER.exists(), reason="libnats-dev is not installed (make setup)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process, url = local_nats_server(log=(tmp_path_factory.mktemp("nats") / "nats.log").open("wb"))
    yield url
    process.terminate()
    process.wait(10)


def start_engine(tmp_path: Path) -> Child:
    child = Child([str(engine_module.ensure_built()), "--rt-prio", "0", "--max-payload",
                   str(engine_module.MAX_PAYLOAD)], cwd=tmp_path)
    child.wait_for(rb"^ready\n")
    return child


def round_trip(child: Child, url: str, conn: int, req: int) -> None:
    """A fresh connection, a subscription to Python on it, and a publish that comes back."""
    child.send(f"connect {req} {conn} {url} b 5000 -\n".encode())
    child.wait_for(rb"(?m)^ok %d$" % req)
    child.send(f"sub {req + 1} {req + 1} {conn} t.back\n".encode())
    child.wait_for(rb"(?m)^ok %d$" % (req + 1))
    child.send(f"flush {req + 2} {conn}\n".encode())
    child.wait_for(rb"(?m)^ok %d$" % (req + 2))
    child.send(f"pub {conn} t.back 5\nhello".encode())
    child.wait_for(rb"msg %d 5\nhello\n" % (req + 1))


def engine_templates(conn: int) -> list[bytes]:
    future = time.time() + 3600  # a publisher whose first message is an hour away: nothing due meanwhile
    return [line.encode() for line in (
        f"flush 5 {conn}", "summary 7 1", "summary 7 2", "halt 3 2", "unsub 4 99", "route 5 2 -", "forget 10 3",
        f"publisher 6 2 t.f p1 s1 10.0 100 {future!r} 1.0 -", "subscriber 8 3 - run topic c site",
        "close 9 77 now", "close 9 78 drain", f"dsub 11 12 {conn} t.g 3", f"sub 12 13 {conn} t.h",
        f"pub {conn} t.x 0", "connect 13 4000 nats://127.0.0.1:1 b 100 -", "connect 14 4001 nats://127.0.0.1:1 b 100 0",
        f"pubr {conn} t.x _INBOX.1 0", "netns 15 0 /proc/1/ns/net", "exit now", "bogus 1 2 3")]


def engine_keeps(line: bytes) -> bool:
    """Garbage that a valid engine line could still become and that would do real harm in a test: a
    trace file outside the test's folder, a connection to whatever host a mutation names, or the
    end of the engine ("exit" is a valid line)."""
    words = line.split()
    if not words:
        return True
    if words[0] == b"subscriber" and b"/" in line:
        return False
    if words[0] == b"connect" and (len(words) < 4 or not words[3].startswith(b"nats://127.0.0.1:1")):
        return False
    return words != [b"exit"]


@pytest.mark.slow
@needs_nats_server
@needs_libnats
def test_the_engine_survives_100000_hostile_command_lines_and_still_works(server, tmp_path):
    child = start_engine(tmp_path)
    try:
        round_trip(child, server, 1, 1_000_000)
        # a pub whose length would fill the whole buffer, then its end: the buffer is in use from here on
        child.send(b"\n" * (engine_module.MAX_PAYLOAD + 8192))
        before = child.rss_mb()
        began = time.monotonic()
        feed(child, garbage(engine_templates(1), random.Random(52), LINES, engine_keeps))
        # a pub line left waiting for its data is given it: blank lines after are nothing
        child.send(b"\n" * (engine_module.MAX_PAYLOAD + 8192))
        child.send(b"summary 2000000 1\n")
        child.wait_for(rb"(?m)^(ok|err) 2000000 ")
        spent = time.monotonic() - began
        assert child.proc.poll() is None
        round_trip(child, server, 50_000, 3_000_000)  # valid lines after the garbage still work
        assert child.rss_mb() - before < RSS_GROWTH_MB, (before, child.rss_mb())
        # every refusal is one printable line the Python side can read
        with child.lock:
            errors = re.findall(rb"(?m)^err \d+ .*$", child.out)
        assert len(errors) > LINES // 2 and all(e.isascii() and e.decode().isprintable() for e in errors)
        assert spent < 60, spent
    finally:
        child.stop()


@needs_nats_server
@needs_libnats
def test_the_engine_refuses_malformed_lines_with_one_error_each_and_never_runs_them(tmp_path):
    """The parser's cases one by one: a garbage id is an error, not client 0; an over-long line is
    dropped whole with one error (its tail never runs); a pub length past the limit is refused."""
    child = start_engine(tmp_path)
    try:
        child.send(b"subscriber 1 0 - r t c s\n")           # client 0 exists: garbage must not reach it
        child.wait_for(rb"(?m)^ok 1$")
        for req, line in enumerate([b"summary 2 x0", b"summary 3 0x", b"summary 4 -1", b"summary 5 99999999999",
                                    b"summary 6", b"summary 7 0 0", b"summary 8 0\x00", b"publisher 9 5 s n - nan 1 0 1 -",
                                    b"publisher 10 5 s n - 1e9 1 0 1 -", b"flush 11 1e3"], start=2):
            child.send(line + b"\n")
            child.wait_for(rb"(?m)^err %d " % req)
        with child.lock:
            assert b'{"received"' not in child.out          # no summary of client 0 was given
        # an over-long line whose tail is a valid command: dropped whole, refused once, the tail never run
        child.send(b"summary 20 0 " + b"x" * 10_000 + b" \nsummary 21 0\n")
        child.wait_for(rb"(?m)^ok 21 ")
        with child.lock:
            assert len(re.findall(rb"(?m)^err 20 ", child.out)) == 1 and b"ok 20" not in child.out
        child.send(b"x" * 300_000 + b"\nsummary 22 0\n")     # longer than any read: still one error
        child.wait_for(rb"(?m)^ok 22 ")
        with child.lock:
            assert len(re.findall(rb"(?m)^err 0 a line over", child.out)) == 1
        # a pub length past the limit (and one near SIZE_MAX) is refused, and what follows still runs
        for length in (engine_module.MAX_PAYLOAD + 1, 2**64 - 2):
            child.send(b"pub 1 t.x %d\nsummary 30 0\n" % length)
            child.wait_for(rb"(?m)^ok 30 ")
            with child.lock:
                child.out.clear()
        assert child.proc.poll() is None
    finally:
        child.stop()


# -- a hostile peer ---------------------------------------------------------------------------------
class Peer:
    """A NATS client spoken by hand: it publishes whatever it is given."""

    def __init__(self, url: str):
        host, port = url.removeprefix("nats://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), 5)
        self.sock.recv(4096)  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')

    def publish(self, subject: bytes, payloads: list[bytes]) -> None:
        self.sock.sendall(b"".join(b"PUB %s %d\r\n%s\r\n" % (subject, len(p), p) for p in payloads))

    def sync(self) -> None:
        self.sock.sendall(b"PING\r\n")
        seen = b""
        while b"PONG" not in seen:
            seen += self.sock.recv(4096)

    def close(self) -> None:
        self.sock.close()


def header(seq, producer=b"p", t=b"1700000000.5") -> bytes:
    return b'{"id":"x","seq":%s,"t":%s,"p":"%s","s":"z"}\n' % (seq, t, producer) + b"x" * 20


def hostile_messages(rng: random.Random, count: int) -> list[bytes]:
    made = []
    for _ in range(count):
        kind = rng.randrange(6)
        if kind == 0:
            made.append(rng.randbytes(rng.randrange(80)))
        elif kind == 1:                                   # holes punched anywhere below 1e12
            made.append(header(b"%d" % rng.randrange(10**12), b"holes"))
        elif kind == 2:
            made.append(header(rng.choice(HOSTILE_WORDS + [b"1e12", b'"7"', b"12abc"]), b"odd"))
        elif kind == 3:                                   # a new producer name each time
            made.append(header(b"%d" % rng.randrange(100), b"n%d" % rng.randrange(10**9)))
        elif kind == 4:
            made.append(header(b"1", rng.choice([b"\\u0000", b"p" * 200, b'\\"', b"\xff"]),
                               rng.choice([b"nan", b"1e400", b"-1", b'"t"', b"1700000000"])))
        else:
            made.append(mutate(header(b"%d" % rng.randrange(1000), b"m"), rng))
    return made


@pytest.mark.slow
@needs_nats_server
@needs_libnats
def test_the_engine_survives_a_peer_sending_malformed_messages_and_huge_sequence_numbers(server, tmp_path):
    """One message numbered 1e12 is one hole, not 1e12 entries; 100,000 malformed or hole-punching
    messages (past the producers a subscriber keeps, too) leave the engine up, answering, within its
    memory bound, and counting a good producer right."""
    child = start_engine(tmp_path)
    peer = Peer(server)
    try:
        child.send(f"connect 1 1 {server} b 5000 -\n".encode())
        child.wait_for(rb"(?m)^ok 1$")
        child.send(b"subscriber 2 1 trace.jsonl r t c s\ndsub 3 3 1 t.peer 1\nflush 4 1\n")
        child.wait_for(rb"(?m)^ok 4$")
        before = child.rss_mb()
        began = time.monotonic()
        peer.publish(b"t.peer", [header(b"0", b"good"), header(b"0", b"big"), header(b"%d" % 10**12, b"big")])
        rng = random.Random(53)
        for _ in range(10):
            peer.publish(b"t.peer", hostile_messages(rng, LINES // 10))
            peer.sync()
            assert child.proc.poll() is None, f"exited with {child.proc.returncode}: {child.err[-2000:]!r}"
        peer.publish(b"t.peer", [header(b"%d" % s, b"good") for s in (1, 3, 2, 2, 4)])
        peer.sync()
        child.send(b"flush 5 1\n")
        child.wait_for(rb"(?m)^ok 5$", timeout=60)
        child.send(b"summary 6 1\n")
        summary = child.wait_for(rb"(?m)^ok 6 (.*)$").group(1).decode()
        spent = time.monotonic() - began
        counts = json.loads(summary)
        assert counts["producers"]["big"]["lost"] == 10**12 - 1 and counts["producers"]["big"]["received"] == 2
        assert {k: counts["producers"]["good"][k] for k in ("received", "lost", "duplicates", "reordered")} == \
               {"received": 5, "lost": 0, "duplicates": 1, "reordered": 1}
        assert counts["malformed"] > 0
        assert child.rss_mb() - before < RSS_GROWTH_MB, (before, child.rss_mb())
        round_trip(child, server, 7, 100)
        assert spent < 60, spent
    finally:
        peer.close()
        child.stop()


# -- the delay line ---------------------------------------------------------------------------------
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces")


@pytest.fixture
def relay_topo():
    from testbed.emulation.bench_shaper import LinkTopology

    topo = LinkTopology(prefix="tbfuzz-")
    try:
        topo.build()
        for pair in (("C", "D"), ("E", "F")):
            subprocess.run(["ip", "-n", topo.relay_ns, "link", "add", pair[0], "type", "veth", "peer", "name", pair[1]],
                           check=True)
            for name in pair:
                subprocess.run(["ip", "-n", topo.relay_ns, "link", "set", name, "up"], check=True)
        yield topo
    finally:
        topo.close()


def start_relay(topo) -> Child:
    argv = shared_command(build_delayline(), topo.tag, rt_priority=0)
    child = Child(["ip", "netns", "exec", topo.relay_ns, *argv])
    child.wait_for(rb"^ready\n")
    return child


def relay_stats(child: Child) -> dict:
    with child.lock:
        seen = len(child.err)
    child.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with child.lock:
            lines = bytes(child.err[seen:]).splitlines()
        for line in lines:
            if line.startswith(b"{") and line.endswith(b"}"):
                return json.loads(line)
        time.sleep(0.01)
    raise AssertionError("no stats line")


MAIN_LINK = b"add 0 " + " ".join(link_options("A", "B", Direction(delay_s=0.002), Direction(delay_s=0.002), 1)).encode()
# Links really added and removed are few among the lines: each removal closes two packet sockets,
# and the kernel waits for an RCU grace period on each (~25 ms here).
RELAY_TEMPLATES = [b"add 1 --if-a C --if-b D --delay-ab 0.001 --seed 3", b"del 1", b"del 2",
                   b"add 2 --if-a E --if-b F --delay-ab 0.01 --jitter-ab 0.001 --loss-ba 0.1 --rate-ab 1000000 "
                   b"--limit-ab 100000"] + 6 * [
                   b"hop 1 0 7 02:00:00:00:00:0a", b"hop 1 1 -", b"route 7 10.0.0.5 1 0 02:00:00:00:00:01 02:00:00:00:00:02",
                   b"route 7 10.0.0.5 -", b"move 1", b"add 3 --if-a nothere --if-b D --delay-ab 0.001",
                   b"add 4 --if-a C --if-b D --delay-ab 5000 --loss-ab 0.5"]


def relay_keeps(line: bytes) -> bool:
    """Not a line that would take the test's own link's ports (A, B) or remove it (del 0)."""
    words = line.split()
    removes_it = len(words) > 1 and words[0] == b"del" and words[1].lstrip(b"+-0") == b""
    return not ({b"A", b"B"} & set(words)) and not removes_it


@pytest.mark.slow
@needs_root
def test_the_delay_line_survives_100000_hostile_control_lines_and_still_forwards(relay_topo):
    child = start_relay(relay_topo)
    try:
        child.send(MAIN_LINK + b"\n")
        child.wait_for(rb"(?m)^ok 0$")
        before = child.rss_mb()
        began = time.monotonic()
        feed(child, garbage(RELAY_TEMPLATES, random.Random(54), LINES, relay_keeps))
        child.send(b"del 424242\n")
        child.wait_for(rb"(?m)^error 424242 no such link$", timeout=30)
        spent = time.monotonic() - began
        assert child.proc.poll() is None
        assert child.rss_mb() - before < RSS_GROWTH_MB, (before, child.rss_mb())
        # once the links the garbage added are gone, the table is as long as the links relayed (a
        # relink takes a freed slot: the relay's every pass scans no more than that)
        with child.lock:
            ids = {int(i) for i in re.findall(rb"(?m)^ok (\d+)$", child.out)} - {0}
        child.send(b"".join(b"del %d\n" % i for i in sorted(ids)) + b"del 424243\n")
        child.wait_for(rb"(?m)^error 424243 no such link$", timeout=30)
        stats = relay_stats(child)
        assert (stats["links"], stats["slots"]) == (1, 1), stats
        # the link relayed all along still forwards, and so does a link added after the garbage
        assert len(relay_topo.ping(5, 0.01, answered=True)) == 5
        child.send(b"del 0\n" + MAIN_LINK + b"\n")
        child.wait_for(rb"(?m)^ok 0\n(.*\n)*ok 0$")
        assert len(relay_topo.ping(5, 0.01, answered=True)) == 5
        assert spent < 60, spent
    finally:
        child.stop()


@needs_root
def test_the_delay_line_drops_an_over_long_line_whole_and_reuses_link_slots(relay_topo):
    """An over-long line is dropped up to its newline and refused once (its tail, a valid `del 0`,
    never runs); a relinked link takes a freed slot, so the table stays as long as the links relayed
    at once however often links come and go."""
    child = start_relay(relay_topo)
    try:
        child.send(MAIN_LINK + b"\n")
        child.wait_for(rb"(?m)^ok 0$")
        child.send(b"route 7 " + b"y" * 20_000 + b" del 0\ndel 31337\n")
        child.wait_for(rb"(?m)^error 31337 no such link$")
        with child.lock:
            assert re.findall(rb"(?m)^error .*$", child.out)[0].startswith(b"error - a line over")
            assert b"ok 0\nok 0" not in child.out
        child.send(b"del 0 \x00 garbage\n")
        child.wait_for(rb"(?m)^error - a NUL byte")
        assert relay_stats(child)["links"] == 1  # link 0 is still relayed
        for i in range(100):
            child.send(b"add %d --if-a C --if-b D --delay-ab 0.001\ndel %d\n" % (100 + i, 100 + i))
        child.send(b"del 31338\n")
        child.wait_for(rb"(?m)^error 31338 no such link$", timeout=30)
        stats = relay_stats(child)
        assert stats["links"] == 1 and stats["slots"] <= 2, stats
    finally:
        child.stop()
