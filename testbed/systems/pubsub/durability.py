"""What a run with durable topics owes its subscribers, and whether it paid: every message
a producer had acknowledged (its `acks/` rows) must reach every subscriber of the topic that was
subscribed when it was sent (`traces/` rows), whatever migrations and crashes happened between.

A subscriber is owed a producer's messages from the first one it received from that producer on
(an earlier one was published before its cursor existed). Duplicates are not in the traces (the
client drops them by producer and sequence number and counts them: `duplicates` in its summary).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from testbed.systems.pubsub.durable import ACKS_DIR

TRACES_DIR = "traces"


def _acknowledged(acks: Path) -> dict[tuple[str, str], set[int]]:
    """(topic, producer) -> sequence numbers acknowledged to the producer."""
    found: dict[tuple[str, str], set[int]] = defaultdict(set)
    for path in sorted(acks.glob("*.csv")):
        with path.open(newline="") as handle:
            for row in csv.reader(handle):
                if len(row) == 5:
                    found[(row[0], row[1])].add(int(row[2]))
    return found


def _delivered(traces: Path) -> dict[tuple[str, str, str], set[int]]:
    """(topic, consumer, producer) -> sequence numbers delivered (duplicates already dropped)."""
    found: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for path in sorted(traces.glob("*.jsonl")):
        with path.open() as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                    found[(row["topic"], row["consumer"], row["producer"])].add(int(row["seq"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a crash
    return found


def audit(run_dir: Path) -> dict | None:
    """Acknowledged messages owed to subscribers, delivered, and lost (with the first few lost
    ids); None for a run without durable topics."""
    acks = Path(run_dir) / ACKS_DIR
    if not acks.is_dir():
        return None
    acknowledged = _acknowledged(acks)
    delivered = _delivered(Path(run_dir) / TRACES_DIR)
    owed = got = 0
    lost: list[str] = []
    for (topic, consumer, producer), seqs in delivered.items():
        acked = acknowledged.get((topic, producer), set())
        due = {s for s in acked if s >= min(seqs)}
        owed += len(due)
        got += len(due & seqs)
        lost.extend(f"{topic}/{consumer}: {producer}:{s}" for s in sorted(due - seqs))
    return {"acknowledged": sum(len(s) for s in acknowledged.values()), "owed": owed, "delivered": got,
            "lost": len(lost), "lost_first": lost[:10]}
