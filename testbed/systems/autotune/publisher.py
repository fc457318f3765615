"""The multi-threaded batching publisher of Balasubramanian et al. (section III, Fig. 4), as one asyncio
process on the emulated network, publishing to a real broker over one TCP connection.

- Requests arrive from the source (`sources`) at their drawn times. The Main Receive Thread (MRT)
  keeps a finite input buffer: a request that finds it full is dropped (counted). For each request
  the MRT takes a worker (WT), which writes it to the data store (in memory).
- The Main Publisher Thread (MPT) polls the store every T_poll; the control rule
  (testbed.policies.autotune) says how many requests to take. It hands each to a WT, blocking while
  none is free; T_mpt is how long that took.
- A WT publishes its one message to the broker's JetStream stream and returns to the pool only when
  the stream acknowledges it. A stream that is full (the subscriber lags) refuses the message; the
  WT tries again after `retry` (message-level flow control from a real broker, where the paper's
  simulator modelled it). The stream drops a resent duplicate by its message id.
- The pool of W workers is shared. With tuning, a freed WT serves a waiting receive before the MPT
  (non-preemptive priority for receiving, section IV-A, part of the paper's tuned publisher: "with
  auto-tuning, MRT has nonpreemptive priority", V-B-3); without, the pool serves in order of asking.

Every poll is a line in the poll log (N, T_poll, the estimates, how many waited and left); at the
end one JSON line on stdout: arrivals, drops, acknowledgements, refusals.

    python -m testbed.systems.autotune.publisher --node pub1 --variant auto10 --nats nats://IP:4222 \
        --subject at.auto10 --n 10 --tuned --arrivals FILE --start-file FILE --poll-log FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import nats.js.errors

from testbed.policies.autotune import Tuner, TuningConfig
from testbed.procs import percentile
from testbed.systems.pubsub.clienthealth import ClientHealth
from testbed.systems.pubsub.workloads import wait_start

RECEIVE, PUBLISH = 0, 1  # worker priorities: receiving first
ARRIVAL_HEADER = "Testbed-Arrival"  # epoch seconds the request reached the publisher
STREAM_FULL = 10077  # JetStream's error code for "maximum messages exceeded" (a full stream, discard new)


@dataclass
class Request:
    seq: int
    arrival: float  # epoch s


class WorkerPool:
    """W workers shared by the MRT and the MPT. With `receive_first`, a freed worker serves a
    waiting receive before a waiting publish; without, whoever asked first."""

    def __init__(self, size: int, receive_first: bool = True):
        self.size, self.free, self.receive_first = size, size, receive_first
        self.waiting: tuple[deque, deque] = (deque(), deque())

    @property
    def busy(self) -> int:
        return self.size - self.free

    async def acquire(self, priority: int) -> None:
        if self.free > 0:
            self.free -= 1
            return
        future = asyncio.get_running_loop().create_future()
        self.waiting[priority if self.receive_first else PUBLISH].append(future)
        await future

    def release(self) -> None:
        for queue in self.waiting:
            while queue:
                future = queue.popleft()
                if not future.done():
                    future.set_result(None)
                    return
        self.free += 1


class AutotunedPublisher:
    def __init__(self, js, subject: str, node: str, tuner: Tuner, workers: int, input_buffer: int, size: int,
                 retry_s: float, ack_timeout_s: float, poll_log: Path):
        self.js, self.subject, self.node, self.tuner = js, subject, node, tuner
        self.pool, self.input_buffer = WorkerPool(workers, receive_first=tuner.tuned), input_buffer
        self.payload, self.retry_s, self.ack_timeout_s = bytes(size), retry_s, ack_timeout_s
        self.source_late_ms: list[float] = []
        self.inbox: deque[Request] = deque()
        self.inbox_ready = asyncio.Event()
        self.store: deque[Request] = deque()
        self.in_flight = 0
        self.tasks: set[asyncio.Task] = set()
        self.log = Path(poll_log).open("a", buffering=1 << 16)
        self.counts = {"arrived": 0, "dropped": 0, "stored": 0, "taken": 0, "acked": 0, "refused": 0, "timeouts": 0,
                       "errors": 0, "polls": 0, "batches": 0}

    # -- receive side (MRT) ------------------------------------------------------------------------
    def receive(self, request: Request) -> None:
        self.counts["arrived"] += 1
        if len(self.inbox) >= self.input_buffer:
            self.counts["dropped"] += 1
            return
        self.inbox.append(request)
        self.inbox_ready.set()

    async def mrt(self) -> None:
        while True:
            if not self.inbox:
                self.inbox_ready.clear()
                await self.inbox_ready.wait()
            await self.pool.acquire(RECEIVE)
            self.store.append(self.inbox.popleft())  # the WT's write to the data store
            self.counts["stored"] += 1
            self.pool.release()

    # -- publishing side (MPT and WTs) ---------------------------------------------------------------
    async def mpt(self) -> None:
        poll_at = last_poll = time.monotonic()
        stored_before = 0
        while True:
            await asyncio.sleep(max(0.0, poll_at - time.monotonic()))
            now = time.monotonic()
            self.counts["polls"] += 1
            arrivals, stored_before = self.counts["stored"] - stored_before, self.counts["stored"]
            waiting = len(self.store)
            oldest = time.time() - self.store[0].arrival if self.store else 0.0
            take = self.tuner.poll(waiting, arrivals, now - last_poll, oldest)
            last_poll, t_mpt = now, None
            if take:
                for _ in range(take):
                    await self.pool.acquire(PUBLISH)
                    self._spawn(self.transfer(self.store.popleft()))
                t_mpt = time.monotonic() - now
                self.counts["taken"] += take
                self.counts["batches"] += 1
                self.tuner.published(t_mpt)
            self._log(waiting=waiting, take=take, t_mpt=t_mpt)
            poll_at = now + self.tuner.t_poll

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def transfer(self, request: Request) -> None:
        """One WT: publish, wait for the stream's acknowledgement (again after `retry` while the
        stream is full), then return to the pool."""
        began = time.monotonic()
        self.in_flight += 1
        headers = {"Nats-Msg-Id": f"{self.node}:{request.seq}", ARRIVAL_HEADER: f"{request.arrival:.6f}"}
        try:
            while True:
                try:
                    await self.js.publish(self.subject, self.payload, timeout=self.ack_timeout_s, headers=headers)
                    break
                except nats.js.errors.APIError as error:
                    if error.err_code == STREAM_FULL:
                        self.counts["refused"] += 1
                    else:
                        self._error(request, error)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    self.counts["timeouts"] += 1
                except nats.errors.Error as error:  # no stream answers, the connection is down: counted, retried
                    self._error(request, error)
                await asyncio.sleep(self.retry_s)
            self.counts["acked"] += 1
            self.tuner.transferred(time.monotonic() - began, self.in_flight)
        finally:
            self.in_flight -= 1
            self.pool.release()

    def _error(self, request: Request, error: Exception) -> None:
        self.counts["errors"] += 1
        if self.counts["errors"] <= 5:  # the first few say what is wrong; the count says how often
            print(f"publish {request.seq}: {error!r}", file=sys.stderr)

    def _log(self, waiting: int, take: int, t_mpt: float | None) -> None:
        row = {"t": round(time.time(), 6), **self.tuner.state(), "waiting": waiting, "take": take,
               "t_mpt_s": None if t_mpt is None else round(t_mpt, 6), "busy": self.pool.busy, "inbox": len(self.inbox),
               "in_flight": self.in_flight}
        self.log.write(json.dumps(row, separators=(",", ":")) + "\n")

    # -- the source ----------------------------------------------------------------------------------
    async def feed(self, arrivals: list[float], start: float) -> None:
        """Hand each request to the receive side at its arrival time (the external sources). A
        request is stamped when it arrives, so a source that wakes late moves an arrival, not a
        latency: its lateness is reported (summary), not fed to the saturation guard's publisher
        budget, which is for open-loop publishers timed from their due times. The guard still
        watches this process's event loop (a blocked loop delays polls and acknowledgements)."""
        for seq, offset in enumerate(arrivals):
            delay = start + offset - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            self.source_late_ms.append(1e3 * (now - start - offset))
            self.receive(Request(seq, now))

    def summary(self) -> dict:
        late = sorted(self.source_late_ms)
        return {**self.counts, "waiting": len(self.store), "in_flight": self.in_flight, "inbox": len(self.inbox),
                "n_last": self.tuner.n, "source_late_p99_ms": round(percentile(late, 0.99), 3) if late else None,
                "source_late_max_ms": round(late[-1], 3) if late else None}

    def close(self) -> None:
        self.log.close()


async def _main(args) -> int:
    arrivals = json.loads(Path(args.arrivals).read_text())
    health = ClientHealth(args.health)
    nc = await nats.connect(args.nats, name=f"{args.node}-{args.variant}", max_reconnect_attempts=-1)
    js = nc.jetstream()
    config = TuningConfig(**json.loads(args.tuning))
    publisher = AutotunedPublisher(js, args.subject, args.node, Tuner(config, args.n, args.tuned, args.poll),
                                   args.workers, args.input_buffer, args.size, args.retry, args.ack_timeout,
                                   args.poll_log)
    print(json.dumps({"ready": True, "variant": args.variant}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    start = await wait_start(Path(args.start_file), stop)
    if start is not None:
        start += args.phase
        await asyncio.sleep(max(0.0, start - time.time()))
    work = [asyncio.create_task(c) for c in (publisher.mrt(), publisher.mpt(), health.run())]
    if start is not None:
        feed = asyncio.create_task(publisher.feed(arrivals, start))
        await asyncio.wait({feed, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        await stop.wait()  # after the last arrival, keep publishing what waits until the run ends
        feed.cancel()
    for task in [*work, *publisher.tasks]:
        task.cancel()
    health.close()
    publisher.close()
    print(json.dumps({"node": args.node, "variant": args.variant, **publisher.summary()}), flush=True)
    await nc.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--nats", required=True, help="the broker's URL")
    parser.add_argument("--subject", required=True, help="the variant's stream subject")
    parser.add_argument("--n", type=int, required=True, help="N: fixed, or the tuning's starting point")
    parser.add_argument("--tuned", action="store_true", help="tune N and T_poll (else both stay fixed)")
    parser.add_argument("--poll", type=float, default=0.05, help="T_poll, seconds (fixed without tuning; the start with)")
    parser.add_argument("--tuning", default="{}", help="TuningConfig fields as JSON (Table I's values by default)")
    parser.add_argument("--workers", type=int, default=16, help="W, the worker pool")
    parser.add_argument("--input-buffer", type=int, default=100, help="the receive side's buffer, requests")
    parser.add_argument("--size", type=int, default=1000, help="message payload, bytes")
    parser.add_argument("--retry", type=float, default=0.01, help="a WT's wait before resending to a full stream, s")
    parser.add_argument("--ack-timeout", type=float, default=5.0, help="how long a WT waits for an acknowledgement, s")
    parser.add_argument("--arrivals", type=Path, required=True, help="JSON list of arrival times, s from the start")
    parser.add_argument("--start-file", type=Path, required=True, help="where the common start time appears")
    parser.add_argument("--phase", type=float, default=0.0,
                        help="start this much after the common start, s (arrivals and polls shift together)")
    parser.add_argument("--poll-log", type=Path, required=True)
    parser.add_argument("--health", type=Path, default=None)
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
