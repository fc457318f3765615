"""Harness code that talks to services inside a node (ZooKeeper, nats-server) from the host.

Node addresses exist only inside the run's namespaces, and setns(2) moves one thread: so a
thread enters the node's namespace, and every socket it (or a thread it starts) creates lives
there. `entered` does that for a block; `NodeLoop` keeps an asyncio loop in such a thread, so
nats-py (which opens its own sockets) can be driven from the harness.
"""

from __future__ import annotations

import asyncio
import threading

from testbed.emulation.netns import entered


class NodeLoop:
    """An asyncio event loop running in a thread inside a node's network namespace."""

    def __init__(self, pid: int):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            with entered(pid):
                asyncio.set_event_loop(self.loop)
                ready.set()
                self.loop.run_forever()

        self.thread = threading.Thread(target=run, name=f"netns-{pid}", daemon=True)
        self.thread.start()
        ready.wait(5)

    def run(self, coro, timeout: float = 30.0):
        """Run a coroutine in the node and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def _cancel_all():
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        try:
            self.run(_cancel_all(), 5)
        except Exception:  # noqa: BLE001 - closing must not fail
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def __enter__(self) -> NodeLoop:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
