"""A broker's tracking files, under <run>/tracking/<broker>/: what the tracker writes and what the
traceback and the analysis read, in one place.

    meta.json          broker name, 4-byte id, the configuration, the start and stop times, counts
    histories.jsonl    {"code", "kind": pub|route|sub, "origin": broker id, "subscriber"} per history
    attach.jsonl       the subscriber attachment map: {"t_ms", "op": attach|detach, "subscriber", "topic"}
    names.jsonl        {"id", "name"}: publisher ids seen here, for answers in names
    store.bin          every stored buffer, appended: HEADER, then its payload (a filter's m bits, or
                       the log's 20-byte records: history code, message id)
"""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

#: strategy (1 bloom, 2 log), history code (log: 0), first and last timestamp (ms), keys, m (bits;
#: log: 0), payload bytes, k (log: 0), why it was stored (1 full, 2 interval, 3 stop)
HEADER = struct.Struct("<BIqqIIIHB")
BLOOM, LOG = 1, 2
REASONS = {1: "full", 2: "interval", 3: "stop"}
REASON_CODES = {name: code for code, name in REASONS.items()}
TRACKING_DIR = "tracking"


@dataclass
class Stored:
    """One buffer or filter stored to disk: the history it belongs to and its timestamp range R."""

    strategy: int
    code: int
    t_start: int
    t_end: int
    count: int
    payload: bytes
    m: int = 0
    k: int = 0
    reason: str = "full"

    def header(self) -> bytes:
        return HEADER.pack(self.strategy, self.code, self.t_start, self.t_end, self.count, self.m, len(self.payload),
                           self.k, REASON_CODES[self.reason])


class StoreWriter:
    """Appends a broker's tracking files. Histories, names and the attachment map are written as
    they change (the paper assumes the map is stored reliably); buffers when the recorder stores them."""

    def __init__(self, directory: Path, meta: dict, sync: bool = True):
        self.dir, self.sync, self.meta = Path(directory), sync, dict(meta)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_meta()
        self.data = (self.dir / "store.bin").open("ab", buffering=0)
        self._lines = {name: (self.dir / f"{name}.jsonl").open("a", buffering=1)
                       for name in ("histories", "attach", "names")}
        self.bytes_written = 0
        self.stores = 0
        self.forces = 0  # writes (each one fsync with sync): the paper's disk forces

    def _write_meta(self) -> None:
        tmp = self.dir / "meta.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=1))
        tmp.replace(self.dir / "meta.json")

    def line(self, name: str, record: dict) -> None:
        handle = self._lines[name]
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        if name == "attach" and self.sync:
            handle.flush()
            os.fsync(handle.fileno())

    def write(self, stored: list[Stored]) -> int:
        """Appends `stored` with one write and (with sync) one fsync: a disk force."""
        if not stored:
            return 0
        blob = b"".join(s.header() + s.payload for s in stored)
        self.data.write(blob)
        if self.sync:
            os.fsync(self.data.fileno())
        self.bytes_written += len(blob)
        self.stores += len(stored)
        self.forces += 1
        return len(blob)

    def close(self, **final) -> None:
        self.meta.update(final, bytes_written=self.bytes_written, stores=self.stores, forces=self.forces)
        self._write_meta()
        self.data.close()
        for handle in self._lines.values():
            handle.close()


@dataclass
class Record:
    """A stored buffer as read back, with where it starts in store.bin (for per-buffer gzip)."""

    strategy: int
    code: int
    t_start: int
    t_end: int
    count: int
    m: int
    k: int
    reason: str
    payload: bytes
    offset: int

    @property
    def size(self) -> int:
        return HEADER.size + len(self.payload)


@dataclass
class BrokerFiles:
    name: str
    meta: dict
    histories: dict[int, dict] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    attach: list[dict] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    @property
    def id(self) -> int:
        return int(self.meta["id"])


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # a line cut by a crash ends what is readable
    return rows


def read_records(path: Path) -> list[Record]:
    data = path.read_bytes() if path.exists() else b""
    records, offset = [], 0
    while offset + HEADER.size <= len(data):
        strategy, code, t0, t1, count, m, nbytes, k, reason = HEADER.unpack_from(data, offset)
        start = offset + HEADER.size
        if start + nbytes > len(data):
            break  # cut by a crash
        records.append(Record(strategy, code, t0, t1, count, m, k, REASONS.get(reason, "?"),
                              data[start:start + nbytes], offset))
        offset = start + nbytes
    return records


def read_broker(directory: Path) -> BrokerFiles:
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{directory}: no meta.json (not a tracker's directory)")
    meta = json.loads(meta_path.read_text())
    return BrokerFiles(name=meta["broker"], meta=meta,
                       histories={int(h["code"]): h for h in _jsonl(directory / "histories.jsonl")},
                       records=read_records(directory / "store.bin"),
                       attach=_jsonl(directory / "attach.jsonl"),
                       names={int(n["id"]): n["name"] for n in _jsonl(directory / "names.jsonl")})


def read_run(run_dir: Path) -> dict[str, BrokerFiles]:
    """Every broker's files of a run (keyed by broker name); empty when the run tracked nothing."""
    root = Path(run_dir) / TRACKING_DIR
    if not root.is_dir():
        return {}
    brokers = [read_broker(d) for d in sorted(root.iterdir()) if (d / "meta.json").exists()]
    return {b.name: b for b in brokers}


def gzip_ratio(blobs: list[bytes]) -> float:
    """Compressed over raw bytes when each stored buffer is gzipped on its own (the paper gzips each
    buffer once it is forced to disk, 5.3). Callers pass a sample: gzip of every 128 KB filter of a
    long run would take longer than the run."""
    raw = sum(len(b) for b in blobs)
    return sum(len(gzip.compress(b, 6)) for b in blobs) / raw if raw else 1.0


def stored_blobs(directory: Path, sample: int = 300, seed: int = 1) -> tuple[list[bytes], int]:
    """Up to `sample` stored buffers of a broker's store.bin (header and payload, as written), drawn
    at random, and how many it holds."""
    records = read_records(Path(directory) / "store.bin")
    picked = records if len(records) <= sample else random.Random(seed).sample(records, sample)
    data = (Path(directory) / "store.bin").read_bytes() if picked else b""
    return [data[r.offset:r.offset + r.size] for r in picked], len(records)


def summary(run_dir: Path) -> dict | None:
    """The run's tracking totals from every tracker's meta.json (not its filters): what summary.json
    and the end screen show. None when the run tracked nothing."""
    root = Path(run_dir) / TRACKING_DIR
    metas = [json.loads(p.read_text()) for p in sorted(root.glob("*/meta.json"))] if root.is_dir() else []
    if not metas:
        return None
    published = sum(m.get("published", 0) for m in metas)
    stored = sum(m.get("bytes_written", 0) for m in metas)
    return {"strategy": metas[0]["config"]["strategy"], "brokers": len(metas),
            "complete": all(m.get("complete", False) for m in metas),
            "incomplete": sorted(m["broker"] for m in metas if not m.get("complete", False)),
            "messages_seen": sum(m.get("messages", 0) for m in metas), "published": published,
            "histories": sum(m.get("histories", 0) for m in metas), "stores": sum(m.get("stores", 0) for m in metas),
            "forces": sum(m.get("forces", 0) for m in metas),
            "bytes_stored": stored, "bytes_per_message": stored / published if published else None,
            "cpu_s": sum(m.get("cpu_s", 0.0) for m in metas)}
