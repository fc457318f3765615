"""The auto-tuned batching publisher (Balasubramanian et al.) as a run's role: a JetStream-enabled
nats-server in the subscriber's broker, the subscriber (which creates one bounded stream per publisher
variant) next to it, and one publisher process per variant in the publisher node, the emulated WAN
between.

Start: the broker and the subscriber. Begin: the arrivals are drawn once from the scenario's seed
(every variant gets the same), each variant's publisher connects, and all start together. The
summary: per variant, end-to-end latency (request arrival to delivery) from the traces, drops at the
input, the broker's refusals, and N over the run from the poll logs.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from testbed.procs import json_lines, percentile, read_line, stop_group
from testbed.roles.base import Role, RunContext, newly_dead
from testbed.roles.launch import start_nats
from testbed.systems.pubsub.workload_role import release_start
from testbed.systems.autotune.sources import arrivals
from testbed.systems.autotune.subscriber import subject
from testbed.systems.pubsub.broker import nats_url
from testbed.systems.autotune.checks import autotune_nodes

JETSTREAM_MEMORY = 256 << 20  # every stream is in memory; the shipped scenarios hold at most 24 x 1000 x 1 KB


def phase(index: int, count: int, poll_s: float) -> float:
    """Publisher `index` of `count` starts this long after the common start, arrivals and polls
    together: spread over one poll period. With the same arrivals, publishers that started together
    would all wake at the same instants, and on two cores the last of twelve was 2-4 ms late (the
    harness flagged 14 of 60 s at 1.75 requests/s). The shift changes no publisher's arrival process
    (each request's latency counts from its own arrival), only when they fall relative to the others."""
    return poll_s * index / count


def poll_log(logs: Path, variant: str) -> Path:
    return logs / f"autotune-{variant}.jsonl"


def n_over_time(rows: list[dict], since: float) -> float | None:
    """N's time-weighted mean from `since` on (each poll's N holds until the next poll)."""
    rows = [r for r in rows if r["t"] >= since]
    spans = [(b["t"] - a["t"], a["n"]) for a, b in zip(rows, rows[1:])]
    total = sum(d for d, _ in spans)
    return sum(d * n for d, n in spans) / total if total > 0 else None


class AutotuneRole(Role):
    name = "autotune"

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind == "autotune"

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        self.network, self.topology, self.scenario = run.network, run.topology, run.scenario
        self.spec = self.scenario.workload.autotune
        self.out, self.logs = Path(run.out), run.logs
        self.publisher_node, self.subscriber_node, self.broker = autotune_nodes(self.topology)
        self.topic_class = self.scenario.workload.topics[0].name
        self.server: subprocess.Popen | None = None
        self.subscriber: subprocess.Popen | None = None
        self.publishers: dict[str, subprocess.Popen] = {}
        self.summaries: list[dict] = []
        self.dead: set[str] = set()
        self.started: float | None = None

    def topic(self, variant: str) -> str:
        return f"{self.topic_class}-{variant}"

    @property
    def url(self) -> str:
        return nats_url(self.network.ip_of(self.broker))

    def _popen(self, node: str, module: str, args: list[str], log: str) -> subprocess.Popen:
        err = (self.logs / log).open("ab")
        return self.network.popen(node, [self.network.python, "-m", module, *args], stdout=subprocess.PIPE,
                                  stderr=err, text=True)

    def _ready(self, process: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
        line = read_line(process, timeout)
        if not line or not line.startswith("{") or not json.loads(line).get("ready"):
            process.kill()
            raise RuntimeError(f"{what} did not start (see {self.logs})")

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        store = self.logs / f"jetstream-{self.broker}"
        self.server = start_nats(self.network, self.broker, self.logs, config=(
            f'jetstream {{ store_dir: "{store}", max_memory_store: {JETSTREAM_MEMORY} }}\n'),
                                 server=self.scenario.nodes.nats_server)
        site = self.topology.nodes[self.subscriber_node].site
        pub_site = self.topology.nodes[self.publisher_node].site
        variants = [{"name": v.name, "topic": self.topic(v.name), "producer": self.publisher_node,
                     "producer_site": pub_site} for v in self.spec.variants]
        speed = self.spec.subscriber
        self.subscriber = self._popen(self.subscriber_node, "testbed.systems.autotune.subscriber",
                                      ["--node", self.subscriber_node, "--site", site, "--broker", self.broker,
                                       "--nats", self.url, "--variants", json.dumps(variants),
                                       "--buffer", str(self.spec.broker_buffer),
                                       "--pull-interval", f"{speed.pull_interval!r}", "--pull-time", f"{speed.pull_time!r}",
                                       "--seed", str(self.scenario.seed), "--trace-dir", str(self.out / "traces"),
                                       "--run-id", self.run.run_id,
                                       "--health", str(self.logs / f"health-{self.subscriber_node}.jsonl")],
                                      f"autotune-{self.subscriber_node}.log")
        self._ready(self.subscriber, f"the subscriber in {self.subscriber_node}")
        rtt = self.topology.node_rtt(self.publisher_node, self.broker)
        self.run.say(f"autotune: broker {self.broker} (JetStream, {len(variants)} streams of "
                     f"{self.spec.broker_buffer} messages), subscriber {self.subscriber_node}, publisher "
                     f"{self.publisher_node} {1e3 * rtt:.0f} ms RTT away")

    def begin(self) -> None:
        times = arrivals(self.spec.source, self.scenario.duration, self.scenario.seed)
        arrivals_path = self.out / "autotune-arrivals.json"
        arrivals_path.write_text(json.dumps(times))
        self.network.share(arrivals_path)
        start_path = self.logs / "autotune-start"
        start_path.unlink(missing_ok=True)
        tuning = json.dumps(self.spec.tuning.config().__dict__)
        size = f"{self.scenario.workload.message_size:.0f}"
        for i, v in enumerate(self.spec.variants):
            self.publishers[v.name] = self._popen(
                self.publisher_node, "testbed.systems.autotune.publisher",
                ["--node", self.publisher_node, "--variant", v.name, "--nats", self.url, "--subject", subject(v.name),
                 "--n", str(v.batch), *(["--tuned"] if v.tuned else []), "--poll", f"{self.spec.poll!r}",
                 "--tuning", tuning, "--workers", str(self.spec.workers), "--input-buffer", str(self.spec.input_buffer),
                 "--size", size, "--retry", f"{self.spec.retry!r}", "--arrivals", str(arrivals_path),
                 "--start-file", str(start_path), "--phase", f"{phase(i, len(self.spec.variants), self.spec.poll)!r}",
                 "--poll-log", str(poll_log(self.logs, v.name)),
                 "--health", str(self.logs / f"health-{self.publisher_node}-{v.name}.jsonl")],
                f"autotune-{self.publisher_node}-{v.name}.log")
        for name, process in self.publishers.items():
            self._ready(process, f"publisher {name} in {self.publisher_node}")
        self.started = time.time() + 1.0
        release_start(start_path, self.network)
        self.run.say(f"workload: {len(times)} requests ({self.spec.source.kind}) into each of "
                     f"{len(self.publishers)} publishers: " + ", ".join(
                         f"{v.name} (N {'from ' if v.tuned else '= '}{v.batch})" for v in self.spec.variants))

    def _processes(self) -> dict[str, subprocess.Popen]:
        found = {f"publisher-{name}": p for name, p in self.publishers.items()}
        found.update({"subscriber": self.subscriber, f"nats-{self.broker}": self.server})
        return {k: p for k, p in found.items() if p is not None}

    def supervise(self) -> list[dict]:
        return [{"type": "autotune_process_died", "time": time.time(), "process": what, "exit_code": code}
                for what, code in newly_dead(self._processes(), self.dead)]

    def progress(self) -> str:
        tuned = [v.name for v in self.spec.variants if v.tuned][:3]
        last = {name: _last_line(poll_log(self.logs, name)) for name in tuned}
        return ", ".join(f"N[{name}] {row['n']}" for name, row in last.items() if row)

    def stop(self) -> None:
        for process in [*self.publishers.values(), self.subscriber]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.publishers.values(), self.subscriber]:
            if process is None:
                continue
            try:
                out, _ = process.communicate(timeout=15)
                self.summaries += [json.loads(line) for line in (out or "").splitlines() if line.startswith("{")]
            except subprocess.TimeoutExpired:
                process.kill()
        self.publishers, self.subscriber = {}, None
        if self.server is not None:
            stop_group([self.server])
            self.server = None

    def summary(self, events: list[dict]) -> dict:
        published = {s["variant"]: s for s in self.summaries if "variant" in s and "arrived" in s}
        read = {v["variant"]: v for s in self.summaries for v in s.get("variants", [])}
        threshold = self.scenario.workload.topics[0].threshold
        variants = {}
        for v in self.spec.variants:
            latencies = sorted(float(r["receive_time"]) - float(r["send_time"]) for r in
                               json_lines(self.out / "traces" / f"{self.topic(v.name)}.{self.subscriber_node}.jsonl"))
            counts = published.get(v.name, {})
            variants[v.name] = {
                "batch": v.batch, "tuned": v.tuned, "delivered": len(latencies),
                "mean_ms": 1e3 * sum(latencies) / len(latencies) if latencies else None,
                "p50_ms": _ms(percentile(latencies, 0.5)), "p95_ms": _ms(percentile(latencies, 0.95, "lower")),
                "max_ms": _ms(latencies[-1] if latencies else None),
                "violation_ratio": sum(x > threshold for x in latencies) / len(latencies) if latencies else None,
                "n_mean": n_over_time(list(json_lines(poll_log(self.logs, v.name))), self.started or 0.0),
                **{k: counts.get(k) for k in ("arrived", "dropped", "acked", "refused", "timeouts", "errors", "waiting",
                                              "in_flight", "n_last", "source_late_p99_ms", "source_late_max_ms")},
                "duplicates": read.get(v.name, {}).get("duplicates"),
            }
        source = self.spec.source
        return {"delivered": sum(v["delivered"] for v in variants.values()),
                "autotune": {"rtt_ms": 1e3 * self.topology.node_rtt(self.publisher_node, self.broker),
                             "source": source.model_dump(mode="json", exclude_none=True),
                             "threshold_ms": 1e3 * threshold, "workers": self.spec.workers,
                             "subscriber": self.spec.subscriber.model_dump(mode="json"), "variants": variants}}

    def end_screen(self, summary: dict) -> list:
        from testbed.screen import Table

        a = summary["autotune"]
        table = Table("publisher", "N", "arrived", "dropped", "delivered", "mean ms", "p50 ms", "p95 ms", "N mean",
                      "refused", title=f"{self.scenario.name} ({self.run.run_id}): auto-tuned publisher, "
                                       f"{a['rtt_ms']:.0f} ms RTT to the broker, end-to-end latency")
        for name, v in a["variants"].items():
            table.add_row(name, f"{'from ' if v['tuned'] else ''}{v['batch']}", str(v["arrived"]), str(v["dropped"]),
                          str(v["delivered"]), _fmt(v["mean_ms"]), _fmt(v["p50_ms"]), _fmt(v["p95_ms"]),
                          _fmt(v["n_mean"]), str(v["refused"]))
        return [table]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _last_line(path: Path) -> dict | None:
    """The newest row of a JSON-lines file, reading only its end."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 512))
            lines = handle.read().splitlines()
        return json.loads(lines[-1]) if len(lines) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
