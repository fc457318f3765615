"""One process for every client node of a machine: a client host.

A node's own workload process and its own compiled engine made two processes per client node, 148
for MMOG's 74 nodes on two cores, and each manager round woke all of them at once. Here one event
loop runs every node's control plane (the same `workloads` programs: lookups, NC reports, moves,
group changes) and one engine holds every node's broker connections. A node keeps its identity:
each of its sockets is made inside the node's network namespace (setns(2) in the engine's connect
and reconnect threads; `client.in_node` for the queries to its NC proxy or Serf agent), so its
packets leave through its own shaped access link with its own address; its trace files, events and
summary are its own. What the model gives up: a node's clients no longer have a process, and so
no CPU time, of their own (nor had they a core before), and the engine's health lines are the
machine's, not the node's. Crashing a node (a scenario fault) halts its publishers and closes its
connections at once; the other nodes go on.

    python -m testbed.systems.pubsub.clienthost PLAN.json

PLAN: {"health": FILE, "nodes": [{"node": NAME, "pid": PID, "argv": [workload arguments]}]}; PID is
a process in the node (its namespace). Lines out, one JSON object each, every one naming its node:
what the node's program says (ready, its summary), {"node", "failed": why} when its program
failed, {"node", "crashed": true} after a crash. Lines in: `crash NODE`. SIGTERM stops every node;
each prints its summary on the way out.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import traceback
from pathlib import Path

from testbed.systems.pubsub.client import run_precise
from testbed.systems.pubsub.clienthealth import ClientHealth
from testbed.systems.pubsub.engine import Engine
from testbed.systems.pubsub.workloads import PROGRAMS, NodeProcess, parse_args


def say(node: str, line: dict) -> None:
    print(json.dumps({"node": node, **line}), flush=True)


class Host:
    def __init__(self, plan: dict):
        self.plan = plan
        self.nodes = {spec["node"]: parse_args([*spec["argv"], "--netns-pid", str(spec["pid"])])
                      for spec in plan["nodes"]}
        for name, args in self.nodes.items():
            if args.client_engine != "compiled" or args.node != name:
                raise ValueError(f"{name}: a client host runs nodes of the compiled engine under their own name")
        self.stops = {name: asyncio.Event() for name in self.nodes}
        self.tasks: dict[str, asyncio.Task] = {}
        self.engine: Engine | None = None

    async def run(self) -> int:
        self.engine = await Engine(Path(self.plan["health"])).start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        commands = loop.create_task(self._commands())
        for name, args in self.nodes.items():
            node = NodeProcess(self.engine, ClientHealth(None), self.stops[name],
                               lambda line, name=name: say(name, line), own_engine=False)
            self.tasks[name] = loop.create_task(self._node(name, PROGRAMS[args.kind](args, node)))
        await asyncio.gather(*self.tasks.values())
        commands.cancel()
        await self.engine.stop()
        return 0

    async def _node(self, name: str, program) -> None:
        try:
            await program
        except asyncio.CancelledError:
            pass  # crashed
        except Exception as error:  # noqa: BLE001 - one node's failure is its own; the others go on
            traceback.print_exc()
            say(name, {"failed": repr(error)})

    def stop(self) -> None:
        for event in self.stops.values():
            event.set()

    async def _commands(self) -> None:
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            word, _, name = line.decode().strip().partition(" ")
            if word == "crash" and name in self.tasks:
                await self.crash(name)
            elif word:
                print(f"client host: unknown command {line!r}", file=sys.stderr, flush=True)

    async def crash(self, name: str) -> None:
        """Node `name` fails for good: its program stops where it is, its publishers produce nothing
        more and its connections close at once (the brokers see them go, as a killed process's)."""
        self.tasks[name].cancel()
        await self.engine.crash(self.nodes[name].netns_pid)
        say(name, {"crashed": True})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    return run_precise(Host(json.loads(Path(argv[0]).read_text())).run())


if __name__ == "__main__":
    sys.exit(main())
