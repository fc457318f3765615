"""What the view shows, built from a run's results folder and kept current by reading only what the
run appended since the last refresh: one code path for a live run and for a replay of a finished one
(also of runs made before the view existed: it needs nothing they did not record).

Sources, all written by the run anyway: scenario.yaml (rebuilt into the topology and the mobility
plan's initial sites), run.json and summary.json, events.jsonl (relinks, faults, coordinate
snapshots; at the end every role's events merged in), logs/ (the managers', brokers' and clients'
events as they happen), traces/ (one row per delivery, flushed every second) and health.jsonl (the
guard's verdict per second). Times stay epoch seconds; the page subtracts the run's start."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from testbed import health, mobility, topology
from testbed.emulation import runstate
from testbed.policies.topics import topic_class
from testbed.procs import LineTail, percentile
from testbed.scenario import loader

#: Event types that become marks on the time axis (what the page draws, and how it names them).
MARKS = {"relink": "move", "violation_detected": "violation", "handover_detected": "handover",
         "early_round": "early round", "broker_killed": "fault", "broker_paused": "fault",
         "broker_resumed": "fault", "broker_restarted": "fault", "client_killed": "fault", "site_cut": "fault",
         "site_healed": "fault", "manager_killed": "fault", "zookeeper_killed": "fault",
         "zookeeper_restarted": "fault", "relay_killed": "fault", "elected": "election",
         "group_change": "group change", "round_failed": "round failed"}
ROLE_EVENT_FILES = ("manager*.jsonl", "broker-*.events.jsonl", "clients-*.jsonl", "bcs.jsonl")


class NotARun(ValueError):
    """The folder is not a run's results folder (or lacks what every run writes first)."""


def check_run_dir(run_dir: Path) -> Path:
    """The folder, if it is a run's results folder; else NotARun saying what is missing and what to give."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARun(f"{run_dir}: no such folder; give a run's results folder, e.g. results/uav-smoke-<run id>")
    if not (run_dir / "run.json").exists() and not (run_dir / "scenario.yaml").exists():
        raise NotARun(f"{run_dir}: not a run's results folder (it has neither run.json nor scenario.yaml, which every "
                      f"`testbed run` writes first); give a folder such as results/uav-smoke-<run id>")
    return run_dir


class Store:
    """Keyed records with a change log: a page that has read the log up to a cursor asks only for
    what changed since, so a page opened at the start, late, or on a replay gets the same records."""

    def __init__(self):
        self.records: dict[str, dict[str, object]] = {}
        self.log: list[tuple[str, str]] = []

    def put(self, kind: str, key: str, value) -> None:
        if self.records.get(kind, {}).get(key, self) == value:
            return
        self.records.setdefault(kind, {})[key] = value
        self.log.append((kind, key))

    def since(self, cursor: int) -> tuple[dict, int]:
        """({kind: {key: record}} changed after `cursor`, the new cursor)."""
        if cursor <= 0:
            return {kind: dict(records) for kind, records in self.records.items()}, len(self.log)
        changed: dict[str, dict] = {}
        for kind, key in set(self.log[cursor:]):
            changed.setdefault(kind, {})[key] = self.records[kind][key]
        return changed, len(self.log)


class RunState:
    """The view's records of one run; `refresh()` reads what was appended and updates them."""

    def __init__(self, run_dir: Path):
        self.run_dir = check_run_dir(run_dir)
        self.store = Store()
        self.events = LineTail(self.run_dir, "events.jsonl")
        self.role_events = LineTail(self.run_dir / "logs", *ROLE_EVENT_FILES)
        self.traces = LineTail(self.run_dir / "traces", "*.jsonl")
        self.health = LineTail(self.run_dir, "health.jsonl")
        self.judged = self.saturated = 0  # seconds of health.jsonl read so far, and saturated ones
        self.seen: set[str] = set()
        self.thresholds: dict[str, float] = {}
        self.by_class: dict[str, list[float]] = defaultdict(list)
        self.over: dict[str, int] = defaultdict(int)  # latencies over the class's threshold
        self.bins: dict[tuple[str, int], list[float]] = defaultdict(list)
        self.load: dict[tuple[str, int], int] = defaultdict(int)
        self.started: dict[str, dict] = {}  # migration_start by topic, until its end
        self.counts = {"deliveries": 0, "migrations": 0, "migrations_failed": 0, "violations_detected": 0}
        self.marks = 0
        self.store.put("run", "dir", str(self.run_dir))
        self._topology()

    # -- what does not change during the run ---------------------------------------------------------------
    def _topology(self) -> None:
        path = self.run_dir / "scenario.yaml"
        try:
            scenario = loader.parse_text(path.read_text(), str(path))
            built = topology.build(scenario)
            mobility.plan(scenario, built)  # mobile nodes at their initial sites, as the run placed them
        except (OSError, ValueError) as error:
            self.store.put("problem", "topology", f"the topology cannot be rebuilt from {path}: {error}")
            return
        self.thresholds = {t.name: t.threshold for t in getattr(scenario.workload, "topics", []) if t.threshold}
        self.store.put("topology", "graph", layout(built))
        self.store.put("run", "plan", {"scenario": scenario.name, "duration_s": scenario.duration,
                                       "thresholds_ms": {k: 1e3 * v for k, v in self.thresholds.items()}})

    # -- what grows -----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        self._meta()
        for event in self.events.read_json() + self.role_events.read_json():
            self._event(event)
        self._traces()
        self._health()
        self._totals()

    def _meta(self) -> None:
        for name in ("run.json", "summary.json"):
            try:
                data = json.loads((self.run_dir / name).read_text())
            except (OSError, ValueError):
                continue
            if name == "summary.json":
                self.store.put("summary", "recorded", data)
            else:
                status = run_status(data)
                self.store.put("run", "meta", {k: data.get(k) for k in ("run_id", "scenario", "backend", "shaper",
                                                                          "started", "finished", "interrupted",
                                                                          "stopped")} | {"status": status})

    def _event(self, event: dict) -> None:
        """One event, once: events.jsonl repeats at the end what the roles' own files said live."""
        key = json.dumps(event, sort_keys=True)
        if key in self.seen:
            return
        self.seen.add(key)
        kind, at = event.get("type"), event.get("time")
        if not isinstance(at, (int, float)):
            return
        if kind == "run_start":
            self.store.put("run", "start", at)
        elif kind == "run_end":
            self.store.put("run", "end", at)
        elif kind == "acquired" and event.get("topic") and event.get("broker"):
            self.store.put("owner", f"{at:.6f}|{event['topic']}", [at, event["topic"], event["broker"]])
        elif kind == "migration_start":
            self.started[event.get("topic")] = event
        elif kind == "migration_end":
            self._migration(event)
        if kind == "violation_detected":
            self.counts["violations_detected"] += 1
        if kind == "relink":
            self.store.put("move", f"{at:.6f}|{event['node']}", [at, event["node"], event["from_site"],
                                                                 event["to_site"]])
        if kind in MARKS:
            self._mark(at, None, MARKS[kind], describe(event))

    def _migration(self, end: dict) -> None:
        start = self.started.pop(end.get("topic"), None)
        self.counts["migrations"] += 1
        self.counts["migrations_failed"] += not end.get("ok")
        began = start["time"] if start else end["time"] - float(end.get("duration_s") or 0.0)
        self._mark(began, end["time"], "migration" if end.get("ok") else "failed migration",
                   f"{end.get('topic')}: {end.get('from_broker')} -> {end.get('to_broker')}")

    def _mark(self, at: float, until: float | None, kind: str, text: str) -> None:
        self.store.put("mark", str(self.marks), [at, until, kind, text])
        self.marks += 1

    def _traces(self) -> None:
        touched: set[tuple[str, int]] = set()
        brokers: set[tuple[str, int]] = set()
        for row in self.traces.read_json():
            try:
                received = float(row["receive_time"])
                latency = received - float(row["send_time"])
            except (KeyError, TypeError, ValueError):
                continue
            name = topic_class(row["topic"])
            self.by_class[name].append(latency)
            self.over[name] += latency > self.thresholds.get(name, math.inf)
            second = math.floor(received)
            self.bins[(row["topic"], second)].append(latency)
            touched.add((row["topic"], second))
            broker = (str(row.get("broker")), second)
            self.load[broker] += 1
            brokers.add(broker)
            self.counts["deliveries"] += 1
        for topic, second in touched:
            values = self.bins[(topic, second)]
            self.store.put("latency", f"{topic}|{second}", [topic, second, len(values), 1e3 * percentile(values, 0.5),
                                                            1e3 * percentile(values, 0.95, "lower"), 1e3 * max(values)])
        for broker, second in brokers:
            self.store.put("load", f"{broker}|{second}", [broker, second, self.load[(broker, second)]])

    def _health(self) -> None:
        """Each judged second, with the run's validity up to it (`health.validity`, the wording of the
        progress line, the end screen and summary.json: the badge shows the one at the slider)."""
        for row in self.health.read_json():
            if "t" not in row:
                continue
            causes = row.get("causes") or []
            verdict = "ok" if not causes else ("steal" if health.explained_by_machine(row) else "saturated")
            self.judged += 1
            self.saturated += bool(causes)
            validity = health.validity({"seconds": self.judged, "saturated_seconds": self.saturated})
            self.store.put("guard", str(row["t"]), [row["t"], verdict, causes, row.get("cpu_steal_ms"),
                                                    row.get("cpu_idle"), row.get("machine_stall_ms"), validity])

    def _totals(self) -> None:
        """Per topic class, the numbers the end screen prints, by the same rules (`summarize`)."""
        classes = {}
        for name, values in sorted(self.by_class.items()):
            values.sort()
            threshold = self.thresholds.get(name)
            classes[name] = {"messages": len(values), "p50_ms": 1e3 * percentile(values, 0.5),
                             "p95_ms": 1e3 * percentile(values, 0.95, "lower"), "max_ms": 1e3 * values[-1],
                             "threshold_ms": 1e3 * threshold if threshold else None,
                             "violation_ratio": self.over[name] / len(values) if threshold else None}
        self.store.put("totals", "classes", classes)
        self.store.put("totals", "counts", dict(self.counts))


def run_status(meta: dict) -> str:
    """finished | ended early | running | killed: a run.json without its end whose controller is gone
    (the run was killed before it could write it)."""
    if meta.get("finished"):
        return "finished" if meta.get("complete") else "ended early"
    controller = runstate.known_runs().get(str(meta.get("run_id")), {}).get("pid")
    return "running" if runstate.pid_alive(controller) else "killed"


def folder_note(run_dir: Path) -> str | None:
    """What the terminal says of a results folder that is not a finished run's, else None."""
    try:
        meta = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return "it has no readable run.json: the page shows what the other files recorded"
    status = run_status(meta)
    why = meta.get("interrupted") or meta.get("stopped")
    if status == "finished":
        return None if (Path(run_dir) / "summary.json").exists() else "the run finished but wrote no summary.json"
    return {"running": "the run is still going: the page follows it",
            "killed": "the run ended without recording its end (killed?): the page shows what it recorded",
            "ended early": f"the run ended early{f' ({why})' if why else ''}: the page shows what it recorded"}[status]


def describe(event: dict) -> str:
    """A mark's one-line text: the event's own fields but its time and type."""
    return ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("type", "time") and not isinstance(v, (dict, list)))


def layout(built: topology.Topology) -> dict:
    """Sites where they are (longitude, latitude); a site with no place (the cloud, a hub) above the
    others; nodes with their role and initial site; links with their configured one-way delay."""
    placed = [s for s in built.sites.values() if s.lat is not None and s.lon is not None]
    lons, lats = [s.lon for s in placed] or [0.0], [s.lat for s in placed] or [0.0]
    span = max(max(lons) - min(lons), max(lats) - min(lats), 0.1)
    unplaced = [s for s in built.sites.values() if s.lat is None or s.lon is None]
    sites = []
    for site in built.sites.values():
        if site in unplaced:
            x = min(lons) + span * (unplaced.index(site) + 1) / (len(unplaced) + 1)
            y = max(lats) + 0.35 * span
        else:
            x, y = site.lon, site.lat
        sites.append({"name": site.name, "kind": site.kind, "x": x, "y": y})
    return {"sites": sites, "span": span,
            "links": [{"a": link.a, "b": link.b, "kind": link.kind, "delay_ms": 1e3 * link.shaping.delay}
                      for link in built.links],
            "nodes": [{"name": n.name, "role": n.role, "site": n.site, "mobile": n.mobile, "members": n.members}
                      for n in built.nodes.values()]}
