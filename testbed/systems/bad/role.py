"""BAD Pub/Sub (Nguyen et al., DEBS '19) as a run's role: the two-tier data plane, the coordinator, the
back end and the subscribers (testbed.systems.bad), started in the emulated network; its summary and end
screen (loads, cov, migrations, downtime; latency per channel from the traces).

Start: the hub nats-server, the BCS in the cloud node; a leaf nats-server and its load reporter
in every edge broker. Begin: every subscriber node's process registers and attaches its
subscribers, then the back end starts executing channels (one common start, the run's clock).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from testbed.procs import json_lines, percentile, read_line, stop_group
from testbed.roles.base import Role, RunContext, newly_dead
from testbed.roles.launch import start_nats
from testbed.systems.pubsub.workload_role import summarize
from testbed.systems.bad.dataplane import hub_config, leaf_config
from testbed.systems.bad.plan import bad_plan
from testbed.systems.pubsub.broker import MONITOR_PORT, nats_url

PER_PROCESS = 25  # subscribers per process: bad.yaml (300) saturated 28 of 240 s with 10 per process, 17 with 25


class BadRole(Role):
    name = "bad"

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind == "bad"

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        self.network, self.topology, self.scenario = run.network, run.topology, run.scenario
        self.out, self.logs = Path(run.out), run.logs
        self.cloud = next(n.name for n in self.topology.nodes.values() if n.role == "cloud")
        self.brokers = [n.name for n in self.topology.nodes.values() if n.role == "broker"]
        self.servers: dict[str, subprocess.Popen] = {}
        self.loaders: dict[str, subprocess.Popen] = {}
        self.subscribers: dict[str, subprocess.Popen] = {}
        self.bcs = self.cluster = None
        self.summaries: list[dict] = []
        self.dead: set[str] = set()  # processes reported dead
        self.plan_path = self.out / "bad-plan.json"

    @property
    def hub(self) -> str:
        return nats_url(self.network.ip_of(self.cloud))

    def _popen(self, node: str, module: str, args: list[str], log: str, stdout=subprocess.PIPE):
        err = (self.logs / log).open("ab")
        return self.network.popen(node, [self.network.python, "-m", module, *args], stdout=stdout, stderr=err, text=True)

    def _ready(self, process, what: str, timeout: float = 30.0) -> None:
        if read_line(process, timeout) != "ready":
            process.kill()
            raise RuntimeError(f"{what} did not start (see {self.logs})")

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        scenario, control = self.scenario, self.scenario.control.bad
        nodes = [(n.name, n.site, n.members) for n in self.topology.nodes.values() if n.role == "subscriber"]
        self.plan = bad_plan(scenario.workload.bad, scenario.workload.message_size, nodes, scenario.seed,
                             scenario.duration)
        self.plan_path.write_text(json.dumps(self.plan))
        self.network.share(self.plan_path)
        hub_ip = self.network.ip_of(self.cloud)
        self.servers[self.cloud] = start_nats(self.network, self.cloud, self.logs, config=hub_config(hub_ip),
                                             server=scenario.nodes.nats_server)
        for name in self.brokers:
            ip = self.network.ip_of(name)
            self.servers[name] = start_nats(self.network, name, self.logs, config=leaf_config(hub_ip),
                                            server=scenario.nodes.nats_server)
            self.loaders[name] = self._popen(name, "testbed.systems.bad.brokerload",
                                             ["--node", name, "--nats", nats_url(ip), "--monitor",
                                              f"http://{ip}:{MONITOR_PORT}", "--period", f"{control.period:g}"],
                                             f"badload-{name}.log")
            self._ready(self.loaders[name], f"the load reporter in {name}")
        brokers = [{"name": b, "address": nats_url(self.network.ip_of(b))} for b in self.brokers]
        c = control.balancer()
        self.bcs = self._popen(self.cloud, "testbed.systems.bad.coordinator",
                               ["--nats", self.hub, "--plan", str(self.plan_path), "--brokers", json.dumps(brokers),
                                "--placement", control.placement, "--migration", c.migration,
                                *(["--shuffle"] if c.shuffle else []), "--alpha", f"{c.alpha!r}",
                                "--beta", f"{c.beta!r}", "--gamma", f"{c.gamma!r}", "--theta", f"{c.theta!r}",
                                "--period", f"{control.period:g}", "--seed", str(scenario.seed),
                                "--events", str(self.logs / "bcs.jsonl")], "bcs.log")
        self._ready(self.bcs, "the BAD coordinator")
        self.run.say(f"bad: hub in {self.cloud}, {len(self.brokers)} leaf brokers, coordinator ({control.placement}, "
                     f"{c.migration}{' + shuffle' if c.shuffle else ''}, every {control.period:g}s)")

    def begin(self) -> None:
        traces = self.out / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        for node in self.topology.nodes.values():
            if node.role != "subscriber":
                continue
            parts = -(-node.members // PER_PROCESS)
            for part in range(parts):
                name = f"{node.name}.{part}"
                self.subscribers[name] = self._popen(
                    node.name, "testbed.systems.bad.subscriber",
                    ["--node", node.name, "--part", str(part), "--parts", str(parts), "--hub", self.hub,
                     "--plan", str(self.plan_path), "--trace", str(traces / f"{name}.jsonl"),
                     "--events", str(self.logs / f"clients-{name}.jsonl"),
                     "--health", str(self.logs / f"health-{name}.jsonl"), "--run-id", self.run.run_id,
                     "--coord", "proxy" if node.mobile else "serf"], f"workload-{name}.log")
        for name, process in self.subscribers.items():
            self._ready(process, f"the subscribers in {name}", timeout=120)
        start = time.time() + 1.0
        self.cluster = self._popen(self.cloud, "testbed.systems.bad.cluster",
                                   ["--nats", self.hub, "--plan", str(self.plan_path), "--start", f"{start:.6f}",
                                    "--health", str(self.logs / "health-cluster.jsonl")], "cluster.log")
        self._ready(self.cluster, "the BAD back end")
        time.sleep(max(0.0, start - time.time() - 0.05))
        subs = sum(len(s["subs"]) for s in self.plan["subscribers"])
        nodes = len({s["node"] for s in self.plan["subscribers"]})
        self.run.say(f"workload: {len(self.plan['subscribers'])} subscribers on {nodes} nodes "
                     f"({len(self.subscribers)} processes), "
                     f"{subs} FE subscriptions over {len(self.plan['be'])} BE subscriptions of "
                     f"{len(self.plan['channels'])} channels, {len(self.plan['surges'])} rate surges")

    def _processes(self) -> dict[str, subprocess.Popen]:
        found = {f"nats-{n}": p for n, p in self.servers.items()}
        found.update({f"badload-{n}": p for n, p in self.loaders.items()})
        found.update({f"subscribers-{n}": p for n, p in self.subscribers.items()})
        found.update({"bcs": self.bcs, "cluster": self.cluster})
        return {k: p for k, p in found.items() if p is not None}

    def supervise(self) -> list[dict]:
        """A dead process is reported once (the run's record says when), never restarted: a BAD
        broker that restarts loses its subscribers' state, which this system does not recover."""
        return [{"type": "bad_process_died", "time": time.time(), "process": what, "exit_code": code}
                for what, code in newly_dead(self._processes(), self.dead)]

    def progress(self) -> str:
        moved = sum(1 for e in json_lines(self.logs / "bcs.jsonl") if e.get("type") == "bad_migration")
        return f"subscriber migrations {moved}"

    def stop(self) -> None:
        for process in self.subscribers.values():
            if process.poll() is None:
                process.terminate()
        for process in self.subscribers.values():
            try:
                out, _ = process.communicate(timeout=15)
                self.summaries += [json.loads(line) for line in (out or "").splitlines() if line.startswith("{")]
            except subprocess.TimeoutExpired:
                process.kill()
        self.subscribers = {}
        stop_group([p for p in (self.cluster, self.bcs) if p is not None])
        stop_group(list(self.loaders.values()))
        stop_group(list(self.servers.values()))
        self.cluster = self.bcs = None
        self.loaders, self.servers = {}, {}

    def events(self) -> list[dict]:
        found = list(json_lines(self.logs / "bcs.jsonl"))
        for path in sorted(self.logs.glob("clients-*.jsonl")):
            found.extend(json_lines(path))
        return found

    def summary(self, events: list[dict]) -> dict:
        thresholds = {t.name: t.threshold for t in self.scenario.workload.topics}
        latency = summarize(self.out / "traces", thresholds, events, [])
        return {"classes": latency["classes"], "delivered": sum(c["messages"] for c in latency["classes"].values()),
                "bad": balance_summary(events, self.summaries, self.scenario.control.bad)}

    def end_screen(self, summary: dict) -> list:
        from testbed.screen import Table

        b = summary["bad"]
        table = Table("channel", "deliveries", "p50 ms", "p95 ms", "max ms", "threshold ms",
                      title=f"{self.scenario.name} ({self.run.run_id}): BAD subscribers' end-to-end latency")
        for name, c in summary["classes"].items():
            table.add_row(name, str(c["messages"]), f"{c['p50_ms']:.1f}", f"{c['p95_ms']:.1f}", f"{c['max_ms']:.1f}",
                          f"{c['threshold_ms']:.0f}" if c["threshold_ms"] else "-")
        lines = [table, f"BAD {b['scheme']}: broker load cov {b['cov_first']:.3f} (first round with every subscriber) "
                        f"-> {b['cov_last']:.3f} (last round); max load {b['max_first'] / 1e3:.1f} -> "
                        f"{b['max_last'] / 1e3:.1f} KB/s; {b['migrations']} subscriber migrations in "
                        f"{b['rounds_moving']} rounds ({b['shuffles']} shuffles)"]
        if b["reattach_p50_s"] is not None:
            lines.append(f"re-attach p50 {1e3 * b['reattach_p50_s']:.1f} ms; first result through the new broker "
                         f"p50 {b['first_result_p50_s'] or 0:.2f} s; duplicates dropped {b['duplicates']}, "
                         f"lost {b['lost']} (counted by {b['reported']} subscribers)")
        if b["measured_vs_model"] is not None:
            lines.append(f"measured F_j vs eq. 5: median deviation {100 * b['measured_vs_model']:.2f} % "
                         f"({b['fresh_samples']} fresh measurements)")
        return lines


def balance_summary(events: list[dict], summaries: list[dict], control) -> dict:
    """The BCS's rounds as numbers: cov and max load at the first round after every subscriber was
    placed and at the last, migrations, shuffles, re-attach times, measured-vs-model agreement; and
    how many subscribers' own counts came back (`reported`: duplicates and losses are summed over
    those only, so a process that timed out at the stop would otherwise hide its losses)."""
    rounds = sorted((e for e in events if e.get("type") == "bad_round"), key=lambda e: e["round"])
    placed = [e["time"] for e in events if e.get("type") == "bad_placed"]
    full = [r for r in rounds if placed and r["time"] > max(placed) and r["mean"] > 0] or rounds or [{}]
    reattach = sorted(e["reconnect_s"] for e in events if e.get("type") == "bad_reattached")
    first = sorted(e["downtime_s"] for e in events if e.get("type") == "downtime" and e.get("reason") == "bad_migration")
    deviations = sorted(abs(r["measured"][b] - r["model"][b]) / r["model"][b] for r in rounds
                        for b in r.get("fresh", {}) if r["fresh"][b] and r["model"].get(b))
    scheme = f"{control.placement} + {control.migration}" + (" + gsh" if control.shuffle else "")
    return {"scheme": scheme, "rounds": len(rounds), "cov_first": full[0].get("cov", 0.0),
            "cov_last": full[-1].get("cov", 0.0), "max_first": full[0].get("max", 0.0),
            "max_last": full[-1].get("max", 0.0),
            "migrations": sum(e.get("type") == "bad_migration" for e in events),
            "rounds_moving": sum(1 for r in rounds if r.get("moves")), "shuffles": sum(bool(r.get("shuffled")) for r in rounds),
            "reattach_p50_s": percentile(reattach, 0.5), "first_result_p50_s": percentile(first, 0.5),
            "duplicates": sum(s.get("duplicates", 0) for s in summaries), "lost": sum(s.get("lost", 0) for s in summaries),
            "reported": sum(len(s.get("subscribers", ())) for s in summaries),
            "received": sum(s.get("received", 0) for s in summaries),
            "measured_vs_model": percentile(deviations, 0.5), "fresh_samples": len(deviations)}
