"""Process helpers, each written once ("one home per fact").

The harness, the in-node programs and the benchmarks all start children and wait for their first
line, stop groups of them, read the JSON lines they leave behind, reduce latencies to percentiles,
build small C helpers and sample CPU time from /proc. Each of those had grown several copies that
differed in small ways (one waited forever, one never reaped a killed child); they live here now.
Nothing here imports the rest of the testbed, so every layer may use it.
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

TICKS = os.sysconf("SC_CLK_TCK")  # /proc reports CPU time in clock ticks
CPUS = os.cpu_count() or 1


# -- children ---------------------------------------------------------------------------------------
def read_line(process: subprocess.Popen, timeout: float) -> str | None:
    """The child's next stdout line, stripped, or None if it closes its stdout (exits) or says
    nothing for `timeout` seconds: a child that hangs before its "ready" line must not hang the
    harness too. The child's stdout must be a text pipe (`stdout=PIPE, text=True`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.05)
        if ready:
            line = process.stdout.readline()
            return line.strip() if line else None  # "" is the end of the file, "\n" an empty line
        if process.poll() is not None:
            return None
    return None


def wait_or_kill(processes: Iterable[subprocess.Popen | None], timeout: float = 5.0) -> None:
    """Wait until every process has exited, SIGKILL those still running after `timeout` seconds (for
    the whole group, not each), and reap them all so none is left a zombie. None entries are skipped."""
    deadline = time.monotonic() + timeout
    for process in [p for p in processes if p is not None]:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop_group(processes: Iterable[subprocess.Popen | None], timeout: float = 5.0) -> None:
    """SIGTERM every process still running, at once (they shut down in parallel), then
    `wait_or_kill`: a process that ignores SIGTERM costs `timeout`, never a hung teardown."""
    group = [p for p in processes if p is not None]
    for process in group:
        if process.poll() is None:
            process.terminate()
    wait_or_kill(group, timeout)


# -- what children leave behind ---------------------------------------------------------------------
def json_lines(path: str | os.PathLike) -> Iterator[dict]:
    """The JSON objects of a JSON-lines file, one per line, in order. A line that is not a whole
    object (the last line of a writer killed mid-write, a "ready" line, a blank) is skipped; a missing
    file has none. Read lazily, as bytes: trace files can be large and a cut line may end mid-character."""
    path = Path(path)
    if not path.exists():
        return
    with path.open("rb") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except ValueError:  # JSONDecodeError and UnicodeDecodeError
                continue
            if isinstance(row, dict):
                yield row


def percentile(values: Sequence[float], q: float, method: str = "linear") -> float | None:
    """The q-quantile (q in [0, 1]) of `values`, None if there are none. `method` names numpy's:
    "linear" interpolates between the closest ranks (numpy's and Spark SQL's default); "lower",
    "higher" and "nearest" (ties to even) return a value of the sample. Results keep the rule each
    figure was first computed with, so the rule is an argument rather than a choice made here."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    if method == "linear":
        lo, hi = math.floor(position), math.ceil(position)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)
    index = {"lower": math.floor, "higher": math.ceil, "nearest": round}[method](position)
    return ordered[min(len(ordered) - 1, max(0, index))]


# -- C helpers --------------------------------------------------------------------------------------
class BuildError(RuntimeError):
    """A C helper cannot be built here (no gcc, missing headers, a compile error)."""


#: `make sanitize`: with this variable set (to anything but "" or "0"), every C helper is built with
#: AddressSanitizer and UndefinedBehaviorSanitizer into `sanitize/` beside its usual binary, and that
#: binary is the one returned (so is the one run): the tests of the helpers then run the sanitized code.
SANITIZE_ENV = "TESTBED_SANITIZE"
SANITIZE_FLAGS = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer")


def sanitizing() -> bool:
    """Whether C helpers are built (and run) with the sanitizers (SANITIZE_ENV)."""
    return os.environ.get(SANITIZE_ENV, "") not in ("", "0")


def build_c(source: Path, binary: Path, libs: Sequence[str] = ()) -> Path:
    """`binary`, compiled from `source` with gcc if it is missing or older than the source (and, when
    `sanitizing()`, its sanitized twin in `sanitize/` beside it).

    Built on first use rather than at install time, so a fresh checkout works as soon as gcc is
    present. The compiler writes a temporary file that replaces `binary` atomically, so concurrent
    builders and callers never run half a file."""
    source, binary = Path(source), Path(binary)
    flags: Sequence[str] = ("-O2",)
    if sanitizing():
        binary, flags = binary.parent / "sanitize" / binary.name, SANITIZE_FLAGS
    if not source.exists():
        raise BuildError(f"source missing: {source}")
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError(f"gcc not found: it builds {source.name} (apt-get install -y gcc libc6-dev)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f".{binary.name}.{os.getpid()}.tmp")
    proc = subprocess.run([gcc, *flags, "-Wall", "-Wextra", "-o", str(tmp), str(source), *libs],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"building {source.name} failed (are the libc/kernel headers installed? "
                         f"apt-get install -y libc6-dev linux-libc-dev):\n{proc.stderr.strip()}")
    tmp.replace(binary)
    return binary


# -- CPU time from /proc ----------------------------------------------------------------------------
class MachineTicks(NamedTuple):
    """Clock ticks of the whole machine since boot (TICKS a second)."""

    total: int   # user, nice, system, idle, iowait, irq, softirq and steal
    idle: int    # idle and iowait
    steal: int   # time the hypervisor ran something else while this VM wanted a core
    irq: int = 0  # hard and soft interrupts (sampled at ticks): the emulated links' packets



def boot_ticks() -> float:
    """Clock ticks since boot now, as a process's start time counts them."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS


def machine_ticks(stat: str | None = None) -> MachineTicks:
    """The machine's ticks from /proc/stat's first line (or `stat`, its text); guest time is
    already inside user time, so it is left out."""
    if stat is None:
        with open("/proc/stat") as handle:
            stat = handle.readline()
    fields = [int(v) for v in stat.split("\n", 1)[0].split()[1:9]]
    return MachineTicks(sum(fields), fields[3] + fields[4], fields[7], fields[5] + fields[6])


class ProcessStat(NamedTuple):
    """What the testbed reads of /proc/<pid>/stat."""

    ticks: int             # user + system CPU time of all its threads, in clock ticks (TICKS a second)
    kernel_thread: bool    # a kernel thread (ksoftirqd does network work for the emulated links)
    rss_pages: int         # resident memory, in pages
    mapped_bytes: int = 0  # virtual memory size: what could become resident (a relay maps its rings whole)
    name: bytes = b""      # its command name (comm): another after an exec
    children_ticks: int = 0  # CPU time of its children that exited and were reaped (cutime + cstime)
    ppid: int = 0          # its parent (which the kernel charges its CPU to once it is reaped)
    started: int = 0       # when it started, in clock ticks since boot (`boot_ticks`)


def parse_process_stat(raw: bytes) -> ProcessStat:
    """`ProcessStat` from the text of /proc/<pid>/stat. The command name may hold spaces and
    parentheses, so fields are counted after the last ')' (index 0 is field 3, the state)."""
    head, tail = raw.rsplit(b")", 1)
    fields = tail.split()
    return ProcessStat(int(fields[11]) + int(fields[12]), bool(int(fields[6]) & 0x200000), int(fields[21]),
                       int(fields[20]), head.split(b"(", 1)[1] if b"(" in head else b"",
                       int(fields[13]) + int(fields[14]), int(fields[1]), int(fields[19]))


def process_stat(pid: int | str) -> ProcessStat | None:
    """`ProcessStat` of a running process (or "self"); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return parse_process_stat(handle.read())
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds(pid: int | str) -> float:
    """CPU seconds (user + system, all threads) a process has used; 0.0 once it is gone."""
    stat = process_stat(pid)
    return stat.ticks / TICKS if stat is not None else 0.0


def all_process_stats() -> dict[int, ProcessStat]:
    """`process_stat` of every process now running, by pid (those that exit meanwhile are left out)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = process_stat(entry)
            if stat is not None:
                found[int(entry)] = stat
    return found


def thread_cpu_ns(pid: int | str) -> int:
    """CPU time of a running process's threads in ns (/proc/<pid>/task/*/schedstat): the fixed work of
    a benchmark is tens of ms of CPU, which /proc's 10 ms ticks would round by up to a quarter."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (for a server a benchmark starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_delays(pid: int | str) -> tuple[int, int] | None:
    """(ns waited on a run queue for a core, times given a core) summed over the threads of `pid` now
    alive, since they started (/proc/<pid>/task/<tid>/schedstat); None when the process is gone."""
    waited = runs = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                fields = handle.read().split()
            waited, runs = waited + int(fields[1]), runs + int(fields[2])
        except (OSError, IndexError, ValueError):
            continue  # a thread that exited meanwhile
    return waited, runs


def _size(handle) -> int:
    """How long an open file is now. A read of growing files goes as far as this and no further: a
    harness starved of CPU, reading to the end of trace files that grew faster than it read them,
    never came back (an MMOG point 33x past this VM held its timeline at 0 s for 20 minutes)."""
    return os.fstat(handle.fileno()).st_size


class LineTail:
    """The complete lines appended to growing files since the last call (files may appear later);
    a line still being written is held back until its newline arrives, so none is read half or twice."""

    def __init__(self, directory: Path, *patterns: str):
        self.directory, self.patterns = Path(directory), patterns
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}

    def read(self) -> list[bytes]:
        lines: list[bytes] = []
        for pattern in self.patterns:
            for path in sorted(self.directory.glob(pattern)):
                lines.extend(self._new_lines(path))
        return lines

    def _new_lines(self, path: Path) -> list[bytes]:
        try:
            with path.open("rb") as handle:
                start = self.offsets.get(path, 0)
                handle.seek(start)
                data = self.partial.pop(path, b"") + handle.read(max(0, _size(handle) - start))
                self.offsets[path] = handle.tell()
        except OSError:
            return []
        complete, newline, rest = data.rpartition(b"\n")
        if rest:
            self.partial[path] = rest
        return complete.split(b"\n") if newline else []

    def read_json(self) -> list[dict]:
        """The new lines that are JSON objects (a "ready" line or a cut tail is skipped)."""
        found = []
        for line in self.read():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                found.append(row)
        return found


class LineCounter:
    """Counts the lines (or the lines holding `needle`) appended to growing files, reading only
    what is new since the last call. Without a needle it counts newlines in 1 MiB reads and keeps no
    line: the progress line counts the traces' rows, ~7 MB a second at the paper's UAV load, where
    splitting them into lines cost the harness a tenth of a core in bursts."""

    CHUNK = 1 << 20

    def __init__(self, directory: Path, pattern: str, needle: bytes | None = None):
        self.tail, self.needle = LineTail(directory, pattern), needle
        self.offsets: dict[Path, int] = {}
        self.total = 0

    def count(self) -> int:
        if self.needle:
            self.total += sum(self.needle in line for line in self.tail.read())
            return self.total
        for pattern in self.tail.patterns:
            for path in sorted(self.tail.directory.glob(pattern)):
                self.total += self._newlines(path)
        return self.total

    def _newlines(self, path: Path) -> int:
        """Newlines appended to `path` since the last call: a line still being written counts once
        its newline is there."""
        found = 0
        try:
            with path.open("rb") as handle:
                position = self.offsets.get(path, 0)
                handle.seek(position)
                end = _size(handle)
                while position < end and (chunk := handle.read(min(self.CHUNK, end - position))):
                    found += chunk.count(b"\n")
                    position += len(chunk)
                self.offsets[path] = position
        except OSError:
            pass
        return found


def ping_deadline_s(count: int, interval_s: float, timeout_s: float = 2.0) -> int:
    """ping's -w for `count` probes `interval_s` apart: once some replies came, ping waits only two
    RTTs for the rest (a reply a VM stall held back would count as lost); with a deadline it waits
    for every reply until the deadline (the last probe's send plus `timeout_s`)."""
    return math.ceil(count * interval_s + timeout_s) + 1


CLONE_NEWNET = 0x40000000


def setns_net(fd: int) -> None:
    """The calling thread joins the network namespace open as `fd` (setns(2) moves only the calling
    thread; a socket stays in the namespace it was made in). One home for the call: the harness
    entering a node (`testbed.emulation.netns`) and a process serving many nodes (the client host,
    the NC reporters) use it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


def enter_netns(pid: int) -> None:
    """The calling thread moves, for good, into the network namespace of process `pid` (a node)."""
    fd = os.open(f"/proc/{int(pid)}/ns/net", os.O_RDONLY)
    try:
        setns_net(fd)
    finally:
        os.close(fd)


def die_with_parent() -> None:
    """This process gets SIGTERM when the process that started it dies (PR_SET_PDEATHSIG): a harness
    SIGKILLed mid-run leaves nothing it started outside the nodes (the client host, the reporters,
    the live view). Called in the child (before exec, or first thing in its program)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG

