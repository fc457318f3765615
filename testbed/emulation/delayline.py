"""Python side of the user-space delay line (``delayline.c``).

This kernel has no ``sch_netem``, so link delay/jitter/loss/rate are emulated
by a small C relay that sits between two veths (A, B) inside a relay
namespace.  This module builds the binary on demand and turns per-direction
link parameters into its command line; launching and supervising the process
is the caller's business (one process per link, relaying both directions).

The relay uses ``PACKET_VNET_HDR``, so GSO/TSO super-frames pass intact and
offloads can stay enabled: ``offload_commands`` returns an empty list and only
exists so callers need not special-case it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from testbed import procs
from testbed.health import BUDGET

SOURCE = Path(__file__).with_name("delayline.c")
BUILD_DIR = Path(__file__).with_name("_build")
BINARY = BUILD_DIR / "delayline"

#: Smallest default queue: a few full-size frames (and a few GSO super-frames)
#: must fit, or TCP cannot even start at low bandwidth-delay products.
MIN_LIMIT_BYTES = 64 * 1024

#: Exit status meaning "an interface is missing/was deleted": relink, restart.
EXIT_INTERFACE_GONE = 3
#: Exit status for bad command-line arguments.
EXIT_BAD_ARGS = 2

#: SCHED_FIFO priority requested by default.  On a 2-core VM a normal-priority
#: relay is often preempted by the very hosts it serves, making frames late by
#: several ms; the relay never busy-polls, so real-time priority is cheap.
DEFAULT_RT_PRIORITY = 10


class ShaperUnavailable(RuntimeError):
    """The delay line cannot be built or run here (e.g. no C compiler)."""


def ensure_built() -> Path:
    """Return the relay binary, compiling it if missing or older than the source.

    Built lazily instead of at install time so a fresh checkout works as soon
    as gcc is present; the output lives in the gitignored ``_build`` folder.
    """
    try:
        return procs.build_c(SOURCE, BINARY)
    except procs.BuildError as error:
        raise ShaperUnavailable(f"the delay line: {error}") from None


@dataclass(frozen=True)
class Direction:
    """Impairments of one direction of a link (seconds, fraction, bit/s)."""

    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    rate_bps: float = 0.0  # 0 = unlimited
    limit_bytes: int | None = None  # drop-tail queue; None = default_limit()

    def __post_init__(self) -> None:
        for name in ("delay_s", "jitter_s", "rate_bps"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss must be in [0, 1], got {self.loss!r}")
        if self.limit_bytes is not None and self.limit_bytes < 1:
            raise ValueError(f"limit_bytes must be >= 1, got {self.limit_bytes!r}")

    def default_limit(self) -> int | None:
        """Queue limit when none is given: bandwidth x delay, at least 64 KB.

        The bandwidth-delay rule sizes a router buffer so one TCP flow can keep
        the link busy; with no rate there is no queue to limit (None).
        """
        if self.rate_bps <= 0:
            return None
        return max(int(self.rate_bps / 8 * self.delay_s), MIN_LIMIT_BYTES)

    def effective_limit(self) -> int | None:
        """The limit actually passed to the relay."""
        return self.limit_bytes if self.limit_bytes is not None else self.default_limit()


def _fmt(value: float) -> str:
    return repr(float(value))


def link_options(if_a: str, if_b: str, a_to_b: Direction, b_to_a: Direction, seed: int) -> list[str]:
    """The options of one link (frames from ``if_a`` leave ``if_b`` per ``a_to_b``): the relay's
    argv for a link of its own, or what follows ``add ID`` on a shared relay's stdin."""
    if seed < 0:
        raise ValueError("seed must be >= 0")
    options = ["--if-a", if_a, "--if-b", if_b]
    for suffix, d in (("ab", a_to_b), ("ba", b_to_a)):
        options += [f"--delay-{suffix}", _fmt(d.delay_s)]
        if d.jitter_s:
            options += [f"--jitter-{suffix}", _fmt(d.jitter_s)]
        if d.loss:
            options += [f"--loss-{suffix}", _fmt(d.loss)]
        if d.rate_bps:
            options += [f"--rate-{suffix}", _fmt(d.rate_bps)]
        limit = d.effective_limit()
        if limit is not None:
            options += [f"--limit-{suffix}", str(int(limit))]
    return options + ["--seed", str(int(seed))]


def process_options(tag: str, rt_priority: int = DEFAULT_RT_PRIORITY) -> list[str]:
    """Options of the relay process: ``tag`` only rides along in argv so cleanup can find the
    process with ``pgrep -f -- '--tag <tag>'``; ``rt_priority`` > 0 asks for SCHED_FIFO so the
    emulated network is not delayed by busy emulated hosts (best effort: without the privilege
    it warns and runs normally); 0 = off."""
    argv = ["--rt-prio", str(int(rt_priority))] if rt_priority else []
    # Frames released later than the harness's error budget are counted (the saturation guard).
    return argv + ["--late-budget-us", _fmt(BUDGET.relay_late_p99_ms * 1e3), "--tag", tag]


def command(
    binary: Path | str,
    if_a: str,
    if_b: str,
    a_to_b: Direction,
    b_to_a: Direction,
    seed: int,
    tag: str,
    *,
    rt_priority: int = DEFAULT_RT_PRIORITY,
) -> list[str]:
    """argv for one link's own relay (run it inside the relay namespace; it prints ``ready``
    once both sockets are bound)."""
    return [str(binary), *link_options(if_a, if_b, a_to_b, b_to_a, seed), *process_options(tag, rt_priority)]


#: The shared relay's departure grid at most (delayline.c --tick-us; the relay makes it no coarser
#: than how late it may read a port, half the smallest link delay, or for a relay that routes half
#: of a path's shortest two hops: 500 us with 0.5 ms links, 250 us without routing). A frame leaves
#: within half a tick of its due time, zero on average (a routing relay rounds only a path's last
#: hop, so a three-hop path is rounded about as much as by a 250 us grid at every hop); under load
#: the grid's wakeups alone read every port and send every frame. Against a 200 us grid, routed:
#: relays -25 % CPU per delivery at 0.25x the paper's UAV load (2,000 wakeups/s instead of 4,900).
SHARED_TICK_US = 500


def shared_command(binary: Path | str, tag: str, *, rt_priority: int = DEFAULT_RT_PRIORITY,
                   tick_us: int = SHARED_TICK_US) -> list[str]:
    """argv for a relay shared by many links: it prints ``ready``, then takes ``add ID <link
    options>`` and ``del ID`` lines on stdin, answering ``ok ID`` or ``error ID <why>`` each."""
    return [str(binary), "--control", "--tick-us", str(int(tick_us)), *process_options(tag, rt_priority)]


def offload_commands(ifname: str) -> list[list[str]]:
    """Commands to run on ``ifname`` before relaying: none are needed.

    The relay reads and writes virtio-net headers (PACKET_VNET_HDR), so GSO
    super-frames and partial checksums cross it intact; turning offloads off
    would only cost throughput.  Kept so callers have one place to ask.
    """
    del ifname
    return []
