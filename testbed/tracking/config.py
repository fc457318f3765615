"""What a scenario's `tracking:` block decides, as plain data the tracker and the traceback share."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.tracking.bloom import PRESETS, Filter

STRATEGIES = ("none", "log", "bloom")
LOG_RECORD_BYTES = 20  # the ASYNC log's record: a 4-byte history code, then the 16-byte message id


@dataclass(frozen=True)
class TrackingConfig:
    """`strategy`: none, log (the paper's ASYNC: every tracking event appended to one buffered log)
    or bloom (BF: a history of filters per publisher, origin broker and subscriber).
    `filter`: bloom's m, k, n. `buffer_bytes`: log's in-memory buffer. `persistence_s`: T_p, the
    longest a buffer or filter stays in memory. `skew_tolerance_s`: T_s. `jitter_s`: how far a
    message's timestamp may be from the broker's clock when it is delivered (held or forwarded
    during a migration), for the attachment map's window at traceback. `sync`: fsync every store
    (the paper's "disk force")."""

    strategy: str = "none"
    filter: Filter = PRESETS["10K-99.999"]
    buffer_bytes: int = 10_000
    persistence_s: float = 1.0
    skew_tolerance_s: float = 0.05
    jitter_s: float = 10.0
    sync: bool = True

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"tracking strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")

    @property
    def enabled(self) -> bool:
        return self.strategy != "none"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TrackingConfig:
        return cls(**{**data, "filter": Filter(**data["filter"])})
