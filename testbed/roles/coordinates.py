"""The network-coordinate role (paper section 4): Serf agents in every broker, cloud node, static
client and NC proxy; the NC proxy service in every NC proxy (a site's first one also on the site's
anycast NC address); in every mobile client the coordinate loop that asks its zone's proxy every
`nc_report_period`.

Before the workload the coordinates settle on the scenario's criterion (`control.settle`, waited
for by testbed.roles.settle); every snapshot, in the settle and through the run, is measured against
the configured RTTs under the same criterion, so the run's E(t) is in its events (analysis.estimates).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from testbed import plugin
from testbed.nc import snapshots
from testbed.nc.proxy import NC_ANYCAST_IP
from testbed.procs import json_lines, read_line, stop_group
from testbed.roles.launch import SerfAgents, agent_nodes
from testbed.roles.base import Role, RunContext, newly_dead
from testbed.roles.settle import Settled, describe_end, settle

SETTLE_POLL_S = 2.0  # a snapshot costs one RPC per agent; 2 s lets a 5 s hold be seen three times


class RoleError(RuntimeError):
    """A role process could not start."""


class Coordinates(Role):
    name = "coordinates"

    @classmethod
    def wanted(cls, scenario) -> bool:
        """A run without a workload, or of a kind whose manifest says it places by coordinates."""
        kind = plugin.workload_kind(scenario.workload.kind)
        return kind is None or kind.coordinates

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        self.network, self.topology, self.scenario = run.network, run.topology, run.scenario
        self.log_dir, self.say = run.logs, run.say
        self.agents: SerfAgents | None = None
        self.proxies: dict[str, subprocess.Popen] = {}
        self.reporters: dict[str, subprocess.Popen] = {}
        self._reported: dict[str, set[str]] = {}  # per kind, the processes reported dead
        rule = self.scenario.control.settle
        self.criterion = snapshots.Criterion(median_relative=rule.median_error, same_site_s=rule.same_site)
        self.settled: dict | None = None

    def python(self) -> list[str]:
        return [self.network.python, "-m"]

    def start(self) -> None:
        nodes = agent_nodes(self.topology)
        if nodes:
            self.agents = SerfAgents(self.network, self.topology, self.log_dir)
            self.agents.start(nodes, progress=self.say)
            took = self.agents.wait_joined(progress=self.say)
            self.say(f"serf: all {len(nodes)} agents joined in {took:.1f}s")
        self._start_proxies()
        self._start_reporters()

    def _start_proxies(self) -> None:
        serving: set[str] = set()
        for node in self.topology.nodes.values():
            if node.role != "nc-proxy":
                continue
            if node.site not in serving:  # a site's first proxy holds its anycast address; every proxy
                serving.add(node.site)    # serves on its own (an MMOG edge site's players ask theirs)
                self.network.add_anycast(node.name, NC_ANYCAST_IP)
            argv = [*self.python(), "testbed.nc.proxy", "--node", node.name]
            log = (self.log_dir / f"ncproxy-{node.name}.log").open("ab")
            process = self.network.popen(node.name, argv, stdout=subprocess.PIPE, stderr=log, text=True)
            if read_line(process, 10.0) != "ready":
                process.kill()
                raise RoleError(f"NC proxy in {node.name} did not start (see {log.name})")
            self.proxies[node.name] = process
        if self.proxies:
            self.say(f"nc proxies: {len(self.proxies)} serving {NC_ANYCAST_IP}")

    def _start_reporters(self) -> None:
        if not self.proxies:
            return
        period = self.scenario.control.nc_report_period
        mobile = [node for node in self.topology.nodes.values() if node.mobile]
        if mobile and self.network.namespaces_here:  # one process, a thread in each node's namespace
            nodes = self.log_dir / "nc-reporters.json"
            nodes.write_text(json.dumps([{"node": n.name, "pid": self.network.nodes[n.name].pid,
                                          "out": str(self.log_dir / f"nc-{n.name}.jsonl")} for n in mobile]))
            log = (self.log_dir / "nc-reporters.log").open("ab")
            process = subprocess.Popen([sys.executable, "-m", "testbed.nc.reporter", "--nodes", str(nodes), "--period",
                                        f"{period:g}"], stdout=log, stderr=subprocess.STDOUT, env=self.network.env)
            log.close()
            self.reporters = {n.name: process for n in mobile}
        for node in mobile if not self.reporters else []:
            argv = [*self.python(), "testbed.nc.reporter", "--node", node.name, "--period", f"{period:g}"]
            out = (self.log_dir / f"nc-{node.name}.jsonl").open("ab")
            self.reporters[node.name] = self.network.popen(node.name, argv, stdout=out, stderr=subprocess.STDOUT)
        processes = len({id(p) for p in self.reporters.values()})
        self.say(f"nc reporters: {len(self.reporters)} mobile clients ask their zone's proxy every {period:g}s"
                 + (" (one process)" if processes == 1 < len(self.reporters) else ""))

    def snapshot(self) -> dict | None:
        if not self.agents:
            return None
        return snapshots.snapshot(self.agents.coordinates(), self.topology, len(self.agents.agents), self.criterion)

    def settle(self, sink) -> Settled:
        """Wait for the scenario's criterion (or its cap) before the workload; `sink` records each
        snapshot, restart and the closing `settle_end` event, which the summary keeps too."""
        rule = self.scenario.control.settle

        def keep(event: dict) -> None:
            if event.get("type") == "settle_end":
                self.settled = {k: v for k, v in event.items() if k not in ("type", "time")}
            sink(event)

        return settle(self.snapshot, rule.max, hold=rule.hold, poll=SETTLE_POLL_S, say=self.say, sink=keep,
                      supervise=self.supervise, criterion=self.criterion.describe())

    def summary(self, events: list[dict]) -> dict:
        return {"settle": self.settled} if self.settled else {}

    def end_screen(self, summary: dict) -> list:
        return [describe_end(summary["settle"])] if summary.get("settle") else []

    def supervise(self) -> list[dict]:
        """Serf agents that died are restarted; a dead NC proxy or reporter is reported once. Every
        one is an event, never a silent gap."""
        events = self.agents.supervise() if self.agents else []
        for kind, processes in (("nc_proxy", self.proxies), ("nc_reporter", self.reporters)):
            events += [{"type": f"{kind}_died", "time": time.time(), "node": node, "exit_code": code}
                       for node, code in newly_dead(processes, self._reported.setdefault(kind, set()))]
        return events

    def kill(self, node: str) -> list[dict]:
        """The node crashed for good (a scenario fault): its Serf agent goes with it."""
        if self.agents:
            self.agents.kill(node)
        return []

    def restore(self, node: str) -> list[dict]:
        """The crashed node starts again: its Serf agent rejoins the cluster (a new coordinate)."""
        if self.agents and node in agent_nodes(self.topology):
            self.agents.restart(node)
        return []

    def events(self) -> list[dict]:
        return self.nc_answers()

    def nc_answers(self) -> list[dict]:
        """Every mobile client's proxy answers so far."""
        return [answer for node in self.reporters for answer in json_lines(self.log_dir / f"nc-{node}.jsonl")]

    def stop(self) -> None:
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        reporters = list({id(p): p for p in self.reporters.values()}.values())  # one may serve every node
        stop_group([*reporters, *self.proxies.values()], 3)
        if self.agents:
            self.agents.stop()
