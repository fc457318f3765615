"""The trace row: one line of JSON per delivered message, per subscriber. Written by the client
library (`client.TraceWriter`), read by `analysis/traces.py` into Parquet; both take the columns
from here. Plain data, so the client imports no reader and the analysis no client.
"""

from __future__ import annotations

#: (column, Arrow type name) in the order the writer writes them.
COLUMNS = (
    ("run_id", "string"),
    ("topic", "string"),
    ("producer", "string"),
    ("consumer", "string"),
    ("msg_id", "string"),          # the publisher's id, "<producer>:<seq>"
    ("track_id", "string"),        # with message tracking, the id the brokers recorded (32 hex digits)
    ("seq", "int64"),              # the producer's sequence number
    ("send_time", "float64"),      # epoch seconds, the scheduled send (open loop)
    ("receive_time", "float64"),   # epoch seconds, at the consumer
    ("broker", "string"),          # the broker it came through
    ("producer_site", "string"),   # the producer's site at start (analysis adds producer_site_at_send from relinks)
    ("consumer_site", "string"),   # the consumer's site at start (analysis adds consumer_site_at_receive)
)
FIELDS = tuple(name for name, _ in COLUMNS)
#: A row without one of these is skipped by the reader (the others may be filled in or left null).
REQUIRED = ("topic", "producer", "consumer", "seq", "send_time", "receive_time")
