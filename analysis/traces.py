"""A run directory's JSON-lines traces and events -> Parquet, with the run's metadata attached.

    results/<scenario>-<run-id>/
      run.json, scenario.yaml, events.jsonl        written by `testbed run`
      traces/<subscriber>.jsonl  (or traces*.jsonl) one row per delivered message, per subscriber
    ->
      traces.parquet   TRACE_PARQUET_SCHEMA: the client's columns (TRACE_SCHEMA) plus where each end was,
                       one file, row groups of at most one read chunk
      events.parquet   EVENT_SCHEMA: the common fields as columns, every event whole in `attrs` (JSON)
      run.parquet      one row, RUN_SCHEMA: run.json + scenario facts + what the conversion found

The run metadata (scenario, scenario hash, git commit, backend, shaper, machine, seed, scale,
complete/interrupted, partial) is in every file's Parquet key-value metadata too: `testbed.run` holds
it all as JSON and `testbed.<field>` each simple field.

Interrupted runs: a last line cut in the middle (the writer was killed) is dropped, every complete
line is kept, and the run is marked partial; so is a run whose run.json says it did not complete, or
whose files hold lines that are not JSON objects with the required fields (they are counted and
skipped). Only pyarrow is needed here, not Spark; big files are read in chunks (memory stays bounded).

Where the clients were: a client writes `producer_site` and `consumer_site` once, from the site it
started at, so a mobile client's rows keep its initial site for the whole run. The ground truth of
where a node was is the run's `relink` events (node, from_site, to_site, time: the moment the harness
starts moving its access link). The conversion adds `producer_site_at_send` (the producer's node's
site at the message's send time) and `consumer_site_at_receive` (the consumer's at its receive time);
a client belongs to the node it is named after (`swarm2-u3` is a UAV of node `swarm2`: see
`MEMBER_SEPARATORS`), and a client whose node never moved keeps its initial site. Analyses that mean
"where it was" use the `_at_` columns; the original two are the initial sites.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from testbed import health
from testbed.systems.pubsub import trace_schema

FORMAT_VERSION = "5"  # 2: the sites at send and receive time; 3: track_id; 4: harness_validity; 5: system
CHUNK_BYTES = 64 << 20

# The writer's columns (testbed.systems.pubsub.trace_schema), required ones not null.
TRACE_REQUIRED = trace_schema.REQUIRED
TRACE_SCHEMA = pa.schema([pa.field(name, getattr(pa, kind)(), nullable=name not in TRACE_REQUIRED)
                          for name, kind in trace_schema.COLUMNS])
# pyarrow's JSON reader wants every field nullable; required ones are checked after reading.
_TRACE_JSON_SCHEMA = pa.schema([f.with_nullable(True) for f in TRACE_SCHEMA])
# (derived column, client column, its time column, the client's initial-site column): see the module doc.
SITES_AT = (("producer_site_at_send", "producer", "send_time", "producer_site"),
            ("consumer_site_at_receive", "consumer", "receive_time", "consumer_site"))
TRACE_PARQUET_SCHEMA = pa.schema([*TRACE_SCHEMA, *(pa.field(name, pa.string()) for name, *_ in SITES_AT)])
# A client of node N is N itself or N followed by one of these (swarm2 -> swarm2-u3, swarm2.leader, swarm2:1):
# how the workloads name a node's clients (testbed.systems.pubsub.workloads: `<swarm>-u<k>`).
MEMBER_SEPARATORS = "-._:"
MEMBER_CLASS = f"[{MEMBER_SEPARATORS}]"  # '-' first: literal in a character class (Python's and Java's regex)

EVENT_SCHEMA = pa.schema([
    pa.field("run_id", pa.string()),
    pa.field("type", pa.string()),
    pa.field("time", pa.float64()),
    pa.field("node", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("client", pa.string()),
    pa.field("broker", pa.string()),
    pa.field("from_site", pa.string()),
    pa.field("to_site", pa.string()),
    pa.field("from_broker", pa.string()),
    pa.field("to_broker", pa.string()),
    pa.field("workflow", pa.string()),
    pa.field("executors", pa.int64()),
    pa.field("n_topics", pa.int64()),
    pa.field("wan_one_way_s", pa.float64()),
    pa.field("migration_id", pa.string()),
    pa.field("duration_s", pa.float64()),
    pa.field("planned_at_s", pa.float64()),
    pa.field("late_s", pa.float64()),
    pa.field("ok", pa.bool_()),
    pa.field("detail", pa.string()),
    pa.field("attrs", pa.string()),        # the whole event as written, JSON
])
# Names other writers may use for the same thing: event type and field aliases.
EVENT_TYPE_ALIASES = {
    "migration_started": "migration_start", "migration_begin": "migration_start",
    "migration_done": "migration_end", "migration_finished": "migration_end",
    "migration_complete": "migration_end", "migration_completed": "migration_end",
    "client_downtime": "downtime", "violation_detected": "violation",
}
EVENT_FIELD_ALIASES = {
    "from": "from_broker", "to": "to_broker", "old_broker": "from_broker", "new_broker": "to_broker",
    "downtime_s": "duration_s", "migration_time_s": "duration_s", "id": "migration_id",
    "wan_latency_s": "wan_one_way_s", "topics": "n_topics",
}

RUN_SCHEMA = pa.schema([
    pa.field("run_id", pa.string()),
    pa.field("run_dir", pa.string()),
    pa.field("scenario", pa.string()),
    pa.field("scenario_hash", pa.string()),       # sha256 of scenario.yaml as run, first 16 hex digits
    pa.field("scenario_file", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("backend", pa.string()),
    pa.field("shaper", pa.string()),
    pa.field("machine", pa.string()),
    pa.field("kernel", pa.string()),
    pa.field("seed", pa.int64()),
    pa.field("scale", pa.float64()),
    pa.field("started", pa.float64()),
    pa.field("finished", pa.float64()),
    pa.field("complete", pa.bool_()),             # run.json: the run finished as planned
    pa.field("interrupted", pa.string()),         # run.json: SIGINT/SIGTERM/... or null
    pa.field("status", pa.string()),              # complete | interrupted | incomplete
    pa.field("partial", pa.bool_()),              # not complete, or lines lost (truncated or skipped)
    pa.field("harness_valid", pa.bool_()),        # run.json harness verdict: null for runs before the guard
    pa.field("harness_saturated", pa.string()),   # JSON [{from_s, to_s, cause, causes}] since the run start
    pa.field("harness_validity", pa.string()),    # "valid N of M s" (testbed.health.validity): every place's wording
    pa.field("faults", pa.string()),              # JSON [{kind, target, from_s, to_s}]: the scenario's faults
    pa.field("workload", pa.string()),
    pa.field("policy", pa.string()),              # the run's series: its policy, or another system's label
    pa.field("system", pa.string()),              # the system under test (scenario.yaml's system)
    pa.field("workflow", pa.string()),
    pa.field("executors", pa.int64()),
    pa.field("wan_one_way_s", pa.float64()),
    pa.field("duration_s", pa.float64()),
    pa.field("thresholds", pa.string()),          # JSON {topic class: seconds}, scenario order
    pa.field("figures", pa.string()),             # JSON list: the scenario's outputs.figures
    pa.field("trace_files", pa.int64()),
    pa.field("trace_rows", pa.int64()),
    pa.field("event_rows", pa.int64()),
    pa.field("truncated_files", pa.string()),     # JSON list of files whose last line was cut
    pa.field("skipped_lines", pa.int64()),
    pa.field("converted_at", pa.float64()),
    pa.field("format_version", pa.string()),
])


JSON_COLUMNS = ("thresholds", "truncated_files", "figures", "harness_saturated", "faults")  # JSON text in run.parquet


@dataclass
class Conversion:
    """What `convert_run` wrote and found."""

    run_dir: str
    traces: str
    events: str
    run: str
    meta: dict
    trace_rows: int = 0
    event_rows: int = 0
    truncated_files: list[str] = field(default_factory=list)
    skipped_lines: int = 0

    @property
    def partial(self) -> bool:
        return bool(self.meta.get("partial"))


# ---------------------------------------------------------------------------------------- discovery

def trace_files(run_dir: str | os.PathLike) -> list[Path]:
    """The run's trace files: traces/**/*.jsonl[.gz] and traces*.jsonl[.gz] at the top level."""
    root = Path(run_dir)
    found = set()
    for pattern in ("traces/**/*.jsonl", "traces/**/*.jsonl.gz", "traces*.jsonl", "traces*.jsonl.gz"):
        found.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def outputs(run_dir: str | os.PathLike) -> dict[str, Path]:
    root = Path(run_dir)
    return {"traces": root / "traces.parquet", "events": root / "events.parquet", "run": root / "run.parquet"}


def needs_conversion(run_dir: str | os.PathLike) -> bool:
    """True if a Parquet output is missing, older than a source file or of an older format."""
    outs = outputs(run_dir)
    if not all(p.exists() for p in outs.values()):
        return True
    try:
        if parquet_run_metadata(outs["run"]).get("format_version") != FORMAT_VERSION:
            return True
    except (OSError, ValueError, pa.ArrowException):
        return True
    oldest = min(p.stat().st_mtime for p in outs.values())
    root = Path(run_dir)
    sources = [*trace_files(root), root / "events.jsonl", root / "run.json", root / "scenario.yaml"]
    return any(p.exists() and p.stat().st_mtime > oldest for p in sources)


# ---------------------------------------------------------------------------------------- metadata

def _duration(value) -> float | None:
    if value is None:
        return None
    try:
        from testbed.units import parse_duration

        return parse_duration(value)
    except (ImportError, ValueError):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None


def series(meta: dict, kind: str | None, policy: str | None) -> str | None:
    """What names a run beside others of its workload (the `policy` column every figure and table
    groups by): the placement policy for a run of the system that declares the workload, as the
    paper's series are; for another system under test its label (run.json, e.g. `natscluster/home`),
    so the runs of two systems on one workload are two series."""
    from testbed import plugin

    system = meta.get("system")
    if not system or not kind or kind not in plugin.workload_kinds() or system == plugin.default_system(kind):
        return policy
    return meta.get("label") or system


def run_metadata(run_dir: str | os.PathLike) -> dict:
    """run.json plus facts from scenario.yaml (policy, workflow, thresholds ...), before conversion."""
    root = Path(run_dir)
    meta: dict = {}
    if (root / "run.json").exists():
        try:
            meta = json.loads((root / "run.json").read_text())
        except json.JSONDecodeError:
            meta = {"run_json_error": "run.json is not valid JSON"}
    meta.setdefault("run_id", root.name.rsplit("-", 1)[-1] if "-" in root.name else root.name)
    meta["run_dir"] = str(root)
    scenario_file = root / "scenario.yaml"
    if scenario_file.exists():
        import yaml

        raw = scenario_file.read_bytes()
        meta["scenario_hash"] = hashlib.sha256(raw).hexdigest()[:16]
        try:
            scenario = yaml.safe_load(raw) or {}
        except yaml.YAMLError:
            scenario = {}
        meta.setdefault("scenario", scenario.get("name"))
        meta.setdefault("seed", scenario.get("seed"))
        meta.setdefault("scale", scenario.get("scale"))
        workload = scenario.get("workload") or {}
        control = scenario.get("control") or {}
        migration = control.get("migration") or {}
        cloud = (scenario.get("infrastructure") or {}).get("cloud") or {}
        meta["workload"] = workload.get("kind")
        meta["system"] = scenario.get("system")
        meta["policy"] = series(meta, workload.get("kind"), control.get("policy"))
        meta["workflow"] = migration.get("workflow")
        meta["executors"] = migration.get("executors")
        meta["wan_one_way_s"] = _duration(cloud.get("one_way"))
        meta["duration_s"] = _duration(scenario.get("duration"))
        meta["thresholds"] = {t["name"]: _duration(t.get("threshold")) for t in workload.get("topics") or []
                              if isinstance(t, dict) and "name" in t}
        meta["figures"] = list((scenario.get("outputs") or {}).get("figures") or [])
    harness = meta.get("harness") if isinstance(meta.get("harness"), dict) else {}
    meta["harness_valid"] = harness.get("valid")
    meta["harness_saturated"] = harness.get("saturated")
    meta["harness_validity"] = harness.get("validity") or (health.validity(harness) if harness.get("seconds") else None)
    meta.setdefault("faults", [])
    interrupted = meta.get("interrupted")
    complete = bool(meta.get("complete"))
    meta["complete"] = complete
    meta["status"] = "complete" if complete else ("interrupted" if interrupted else "incomplete")
    return meta


def harness_note(run: dict) -> str:
    """A figure's word on the run's harness verdict: its validity as every other place words it."""
    if run.get("harness_valid") is None:
        return "harness not checked (run before the saturation guard)"
    seconds = sum(i["to_s"] - i["from_s"] for i in run.get("harness_saturated") or [])
    validity = run.get("harness_validity") or f"saturated for {seconds:.0f} s"  # a run recorded before the wording
    return f"harness {validity}" + ("" if run["harness_valid"] else ", saturated seconds shaded: not evidence there")


def _kv_metadata(meta: dict) -> dict[bytes, bytes]:
    kv = {b"testbed.run": json.dumps(meta, sort_keys=True, default=str).encode()}
    for key, value in meta.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            kv[f"testbed.{key}".encode()] = b"" if value is None else str(value).encode()
    return kv


def parquet_run_metadata(path: str | os.PathLike) -> dict:
    """The run metadata stored in a Parquet file's key-value metadata by `convert_run`."""
    kv = pq.read_metadata(path).metadata or {}
    return json.loads(kv.get(b"testbed.run", b"{}"))


def read_run(run_dir: str | os.PathLike) -> dict:
    """run.parquet as a dict (thresholds and truncated_files decoded)."""
    rows = pq.read_table(outputs(run_dir)["run"]).to_pylist()
    row = rows[0] if rows else {}
    for key in JSON_COLUMNS:
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    return row


# ---------------------------------------------------------------------------------------- JSON lines

@dataclass
class _Scan:
    truncated: bool = False
    skipped: int = 0


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _complete_chunks(path: Path, scan: _Scan, chunk_bytes: int):
    """Yield byte chunks made of whole lines; a cut last line is dropped and noted in `scan`."""
    carry = b""
    with _open(path) as handle:
        while True:
            try:
                block = handle.read(chunk_bytes)
            except EOFError:  # a gzip stream cut short
                scan.truncated = True
                block = b""
            if not block:
                break
            data = carry + block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            yield data[:cut + 1]
            carry = data[cut + 1:]
    if carry.strip():
        try:
            whole = isinstance(json.loads(carry), dict)
        except ValueError:
            whole = False
        if whole:  # only the final newline is missing
            yield carry + b"\n"
        else:
            scan.truncated = True


def _coerce(value, kind):
    if value is None:
        return None
    if kind == "str":
        if isinstance(value, str):
            return value
        return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    if kind == "float":
        return None if isinstance(value, bool) else float(value)
    if kind == "int":
        if isinstance(value, bool):
            return None
        number = float(value)
        return int(number) if number.is_integer() else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    return value


_ARROW_KIND = {pa.string(): "str", pa.float64(): "float", pa.int64(): "int", pa.bool_(): "bool"}


def _rows_slow(chunk: bytes, schema: pa.Schema, scan: _Scan) -> pa.Table:
    """Line by line: keep the lines that are JSON objects with convertible fields, count the rest."""
    kinds = [(f.name, _ARROW_KIND[f.type]) for f in schema]
    rows = []
    for line in chunk.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            rows.append({name: _coerce(obj.get(name), kind) for name, kind in kinds})
        except (ValueError, TypeError, OverflowError):
            scan.skipped += 1
    return pa.Table.from_pylist(rows, schema=schema)


def _trace_table(chunk: bytes, run_id: str, scan: _Scan) -> pa.Table:
    try:
        table = pj.read_json(io.BytesIO(chunk), parse_options=pj.ParseOptions(
            explicit_schema=_TRACE_JSON_SCHEMA, unexpected_field_behavior="ignore"))
        table = table.select(_TRACE_JSON_SCHEMA.names).cast(_TRACE_JSON_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = _rows_slow(chunk, _TRACE_JSON_SCHEMA, scan)
    if table.num_rows == 0:
        return table.cast(TRACE_SCHEMA)
    keep = None
    for name in TRACE_REQUIRED:
        valid = pc.is_valid(table[name])
        keep = valid if keep is None else pc.and_(keep, valid)
    dropped = table.num_rows - pc.sum(pc.cast(keep, pa.int64())).as_py()
    if dropped:
        scan.skipped += dropped
        table = table.filter(keep)
    if table.num_rows:
        run_ids = table["run_id"]
        if run_ids.null_count:
            table = table.set_column(0, "run_id", pc.fill_null(run_ids, run_id))
        msg_ids = table["msg_id"]
        if msg_ids.null_count:
            made = pc.binary_join_element_wise(table["producer"], pc.cast(table["seq"], pa.string()), ":")
            table = table.set_column(table.schema.get_field_index("msg_id"), "msg_id",
                                     pc.if_else(pc.is_valid(msg_ids), msg_ids, made))
    return table.cast(TRACE_SCHEMA)


def _event_row(obj: dict, run_id: str) -> dict:
    row = {}
    for key, value in obj.items():
        row.setdefault(EVENT_FIELD_ALIASES.get(key, key), value)
    kind = row.get("type")
    row["type"] = EVENT_TYPE_ALIASES.get(kind, kind)
    out = {}
    for f in EVENT_SCHEMA:
        if f.name == "attrs":
            out["attrs"] = json.dumps(obj, sort_keys=True, default=str)
            continue
        try:
            out[f.name] = _coerce(row.get(f.name), _ARROW_KIND[f.type])
        except (ValueError, TypeError, OverflowError):
            out[f.name] = None
    out["run_id"] = out["run_id"] or run_id
    return out


def _events_table(path: Path, run_id: str, scan: _Scan) -> pa.Table:
    rows = []
    if path.exists():
        for chunk in _complete_chunks(path, scan, CHUNK_BYTES):
            for line in chunk.splitlines():
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    scan.skipped += 1
                    continue
                if isinstance(obj, dict):
                    rows.append(_event_row(obj, run_id))
                else:
                    scan.skipped += 1
    return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)


# ---------------------------------------------------------------------------------------- sites

@dataclass
class Moves:
    """One node's relinks in time order: times, the sites it moved to, the site it started at."""

    times: np.ndarray
    sites: np.ndarray      # [initial site, site after move 1, ...]: index = moves at or before a time


def relink_moves(events: pa.Table) -> dict[str, Moves]:
    """{node: Moves} from the run's `relink` events (rows without node, time or to_site are ignored)."""
    per_node: dict[str, list[tuple[float, str | None, str]]] = {}
    for e in events.select(["type", "node", "time", "from_site", "to_site"]).to_pylist():
        if e["type"] == "relink" and e["node"] and e["time"] is not None and e["to_site"]:
            per_node.setdefault(e["node"], []).append((e["time"], e["from_site"], e["to_site"]))
    out = {}
    for node, moves in per_node.items():
        moves.sort(key=lambda m: m[0])
        sites = np.array([moves[0][1], *(m[2] for m in moves)], dtype=object)
        out[node] = Moves(np.array([m[0] for m in moves], dtype=float), sites)
    return out


def member_pattern(node: str) -> str:
    """The regular expression of the clients of `node` (see MEMBER_SEPARATORS)."""
    return f"^{re.escape(node)}({MEMBER_CLASS}|$)"


def with_sites_at(table: pa.Table, moves: dict[str, Moves]) -> pa.Table:
    """TRACE_SCHEMA rows -> TRACE_PARQUET_SCHEMA rows: each end's site at its own time (module doc).

    Before a node's first relink its site is that relink's from_site (the row's initial site when the
    event lacks it); a client of a node that never moved keeps the initial site its row names."""
    for name, client, when, initial in SITES_AT:
        out = np.array(table[initial].to_pylist(), dtype=object)
        names, times = table[client], table[when].to_numpy(zero_copy_only=False)
        for node, move in sorted(moves.items(), key=lambda item: len(item[0])):  # the longest name wins
            mine = pc.fill_null(pc.match_substring_regex(names, member_pattern(node)), False)
            mine = mine.to_numpy(zero_copy_only=False)
            if not mine.any():
                continue
            index = np.searchsorted(move.times, times[mine], side="right")
            sites = move.sites[index]
            unknown = (index == 0) & np.equal(sites, None)
            sites[unknown] = out[mine][unknown]
            out[mine] = sites
        table = table.append_column(name, pa.array(out.tolist(), pa.string()))
    return table.cast(TRACE_PARQUET_SCHEMA)


# ---------------------------------------------------------------------------------------- conversion

def _run_row(meta: dict) -> dict:
    row = {}
    for f in RUN_SCHEMA:
        value = meta.get(f.name)
        if f.name in JSON_COLUMNS and value is not None:
            value = json.dumps(value)
        try:
            row[f.name] = _coerce(value, _ARROW_KIND[f.type])
        except (ValueError, TypeError, OverflowError):
            row[f.name] = None
    return row


def convert_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> Conversion:
    """Write traces.parquet, events.parquet and run.parquet for one run directory (see the module doc)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such run directory")
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    paths = outputs(out)
    meta = run_metadata(root)
    run_id = str(meta["run_id"])
    files = trace_files(root)

    truncated: list[str] = []
    event_scan = _Scan()
    events = _events_table(root / "events.jsonl", run_id, event_scan)  # first: the relinks place the rows
    skipped = event_scan.skipped
    moves = relink_moves(events)
    rows = 0
    tmp_traces = paths["traces"].with_name(".traces.parquet.tmp")
    with pq.ParquetWriter(tmp_traces, TRACE_PARQUET_SCHEMA, compression="snappy") as writer:
        for path in files:
            scan = _Scan()
            for chunk in _complete_chunks(path, scan, chunk_bytes):
                table = _trace_table(chunk, run_id, scan)
                if table.num_rows:
                    writer.write_table(with_sites_at(table, moves))
                    rows += table.num_rows
            skipped += scan.skipped
            if scan.truncated:
                truncated.append(str(path.relative_to(root)))
        if event_scan.truncated:
            truncated.append("events.jsonl")
        meta.update(trace_files=len(files), trace_rows=rows, event_rows=events.num_rows,
                    truncated_files=truncated, skipped_lines=skipped, converted_at=time.time(),
                    format_version=FORMAT_VERSION)
        meta["partial"] = (not meta["complete"]) or bool(truncated) or skipped > 0
        kv = _kv_metadata(meta)
        writer.add_key_value_metadata({k.decode(): v.decode() for k, v in kv.items()})

    events = events.replace_schema_metadata(kv)
    run_table = pa.Table.from_pylist([_run_row(meta)], schema=RUN_SCHEMA).replace_schema_metadata(kv)
    tmp_events = paths["events"].with_name(".events.parquet.tmp")
    tmp_run = paths["run"].with_name(".run.parquet.tmp")
    pq.write_table(events, tmp_events)
    pq.write_table(run_table, tmp_run)
    for tmp, final in ((tmp_traces, paths["traces"]), (tmp_events, paths["events"]), (tmp_run, paths["run"])):
        os.replace(tmp, final)
    return Conversion(run_dir=str(root), traces=str(paths["traces"]), events=str(paths["events"]),
                      run=str(paths["run"]), meta=meta, trace_rows=rows, event_rows=events.num_rows,
                      truncated_files=truncated, skipped_lines=skipped)


def ensure_converted(run_dir: str | os.PathLike, force: bool = False) -> Conversion | None:
    """Convert when needed (or forced); None when the Parquet files are up to date."""
    if force or needs_conversion(run_dir):
        return convert_run(run_dir)
    return None


def describe(conversion: Conversion) -> str:
    meta = conversion.meta
    state = "partial" if conversion.partial else "complete"
    notes = []
    if conversion.truncated_files:
        notes.append(f"cut last line dropped in {', '.join(conversion.truncated_files)}")
    if conversion.skipped_lines:
        notes.append(f"{conversion.skipped_lines} bad lines skipped")
    if meta.get("status") != "complete":
        notes.append(f"run {meta.get('status')}" + (f" ({meta['interrupted']})" if meta.get("interrupted") else ""))
    return (f"{conversion.run_dir}: {conversion.trace_rows} trace rows, {conversion.event_rows} events, {state}"
            + (f" ({'; '.join(notes)})" if notes else ""))


__all__ = ["TRACE_SCHEMA", "TRACE_PARQUET_SCHEMA", "SITES_AT", "MEMBER_SEPARATORS", "member_pattern",
           "relink_moves", "with_sites_at", "EVENT_SCHEMA", "RUN_SCHEMA", "Conversion", "convert_run", "ensure_converted",
           "needs_conversion", "trace_files", "outputs", "run_metadata", "read_run", "parquet_run_metadata",
           "describe"]
