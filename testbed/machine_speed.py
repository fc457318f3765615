"""How fast this machine is today against the day its capacity was measured.

This VM's speed varies from day to day (the scale-out pairs measured every class twice as costly on
one day as on another), so a knee `make bench-capacity` measured once is no promise for today. A
short reference times two fixed pieces of work a run is made of, each as the CPU its own process
spent per unit (so the hypervisor's steal, reported beside, is not in it): one delay-line relay
moving a fixed rate of frames, and nats-server delivering a fixed rate of messages. bench-capacity
records the reference with its knees; `testbed run` takes it again before a run near its knee and
says the ratio before the workload starts (`compared`), so a saturated run is no surprise and a
claim can say on what kind of day it held.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from testbed import natsserver, procs

#: The references' fixed work: frames/s through one relay, messages/s through nats-server, seconds.
RELAY_FRAMES_PER_S = 20_000
NATS_MESSAGES_PER_S = 20_000
SECONDS = 2.0
#: A run offering at least this share of its measured knee takes the reference first.
NEAR_KNEE = 0.7
#: Today's cost over the recorded one beyond which the machine is called slower (or faster, below
#: its inverse): six back-to-back references on one day, under 2-3 cores of other load, spanned
#: 1.19x from the cheapest to the costliest (relay 4.9-5.7, nats-server 1.34-1.75 CPU-µs), noise.
SLOWER_BEYOND = 1.25


@dataclass
class Reference:
    """CPU-µs of the relay per frame and of nats-server per delivered message; steal during both."""

    relay_us_per_frame: float
    nats_us_per_delivery: float
    steal_ms: float
    taken_at: float

    def as_dict(self) -> dict:
        return asdict(self)


def take() -> Reference:
    """Both references, back to back (~6 s; needs root for the relay's namespaces)."""
    steal0, taken_at = procs.machine_ticks().steal, time.time()
    relay = relay_us_per_frame()
    nats = nats_us_per_delivery()
    steal_ms = (procs.machine_ticks().steal - steal0) * 1000 / procs.TICKS
    return Reference(round(relay, 3), round(nats, 3), round(steal_ms, 1), round(taken_at, 3))


def relay_us_per_frame(seconds: float = SECONDS) -> float:
    """One delay-line relay's CPU per 200 B UDP frame it moved through a 10 ms direction."""
    from testbed.emulation.bench_shaper import Direction, LinkTopology

    with LinkTopology(a_to_b=Direction(delay_s=0.010), prefix="tbspeed-") as link:
        cpu0 = procs.thread_cpu_ns(link.proc.pid)
        result = link.iperf(["-u", "-l", "200", "-b", str(RELAY_FRAMES_PER_S * 200 * 8)], seconds)
        cpu = (procs.thread_cpu_ns(link.proc.pid) - cpu0) / 1e9
    totals = result["end"]["sum"]
    frames = totals.get("packets", 0) - totals.get("lost_packets", 0)
    if frames <= 0:
        raise RuntimeError("the relay reference moved no frame")
    return cpu * 1e6 / frames


def nats_us_per_delivery(seconds: float = SECONDS) -> float:
    """nats-server's CPU per message delivered to one subscriber on loopback, at a fixed rate."""
    port = procs.free_port()
    server = subprocess.Popen([natsserver.binary(natsserver.DEFAULT, sys.executable), "-a", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return asyncio.run(_deliver(server.pid, port, seconds))
    finally:
        procs.stop_group([server], timeout=2.0)


async def _deliver(pid: int, port: int, seconds: float) -> float:
    import nats

    client = await _connect(nats, port)
    received = 0

    async def count(_message) -> None:
        nonlocal received
        received += 1

    await client.subscribe("speed.reference", cb=count)
    await client.flush()
    batch, period = NATS_MESSAGES_PER_S // 100, 0.01
    payload = b"x" * 200
    cpu0, start = procs.thread_cpu_ns(pid), time.monotonic()
    for tick in range(math.ceil(seconds / period)):
        for _ in range(batch):
            await client.publish("speed.reference", payload)
        await asyncio.sleep(max(0.0, start + (tick + 1) * period - time.monotonic()))
    await client.flush()
    await asyncio.sleep(0.1)  # the last deliveries reach the callback
    cpu = (procs.thread_cpu_ns(pid) - cpu0) / 1e9
    await client.close()
    if received == 0:
        raise RuntimeError("the nats-server reference delivered no message")
    return cpu * 1e6 / received


async def _quiet(error: Exception) -> None:
    pass


async def _connect(nats, port: int):
    """A connection once the server listens (it starts in a few ms; 5 s is a dead server)."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            # a refused try is expected while the server starts: nats-py's own error callback printed
            # each one's traceback before a run's workload
            return await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=1, max_reconnect_attempts=0,
                                      error_cb=_quiet)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def compared(today: Reference, then: dict | None) -> str:
    """The line a run prints before its workload: today's costs against the capacity file's."""
    if not then:
        return (f"machine today: relay {today.relay_us_per_frame:.2f} CPU-µs/frame, nats-server "
                f"{today.nats_us_per_delivery:.2f} CPU-µs/delivery; the capacity file has no reference to "
                "compare with (measured before bench-capacity took one): run make bench-capacity again")
    ratio = slowdown(today, then)
    word = ("slower" if ratio > SLOWER_BEYOND else "faster" if ratio < 1 / SLOWER_BEYOND else "as fast")
    verdict = (f"{ratio:.2f}x as costly as when its capacity was measured: {word}"
               if word != "as fast" else f"{ratio:.2f}x the measured costs: as fast as when its capacity was measured")
    warning = ", its knee may not hold today" if word == "slower" else ""
    return (f"machine today: {verdict}{warning} (relay {today.relay_us_per_frame:.2f} against "
            f"{then['relay_us_per_frame']:.2f} CPU-µs/frame, nats-server {today.nats_us_per_delivery:.2f} against "
            f"{then['nats_us_per_delivery']:.2f} CPU-µs/delivery; {today.steal_ms:.0f} ms stolen meanwhile)")


def slowdown(today: Reference, then: dict) -> float:
    """Today's cost over the recorded one, both references weighted alike (geometric mean)."""
    return math.sqrt(today.relay_us_per_frame / then["relay_us_per_frame"]
                     * today.nats_us_per_delivery / then["nats_us_per_delivery"])


def near_knee(deliveries_per_s: float, knee_per_s: float | None) -> bool:
    """Whether a run's offered load is close enough to its knee that today's speed decides it."""
    return bool(knee_per_s) and deliveries_per_s >= NEAR_KNEE * knee_per_s



def before_run(deliveries_per_s: float, knee_per_s: float | None, capacity: dict | None, say) -> dict | None:
    """For `testbed run`: near its knee, today's reference against the capacity file's, said before
    the workload; what run.json records of it (None when the run is not near its knee). A reference
    that cannot be taken is said and does not stop the run."""
    if not near_knee(deliveries_per_s, knee_per_s):
        return None
    say(f"offered load is {deliveries_per_s / knee_per_s:.0%} of this machine's measured knee: timing today's "
        f"machine against the day it was measured (~{3 * SECONDS:.0f} s)")
    try:
        today = take()
    except Exception as error:  # a reference is advice; the run goes on without it
        say(f"machine today: not measured ({error})")
        return {"error": str(error)}
    then = (capacity or {}).get("speed_reference")
    say(compared(today, then))
    return {**today.as_dict(), "recorded": then, "ratio": round(slowdown(today, then), 3) if then else None}
