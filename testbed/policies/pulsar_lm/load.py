"""The load data Pulsar's leader decides on ("Load data model" in the Pulsar load-balancing article),
built from the brokers' reports (testbed.policies.snapshot).

- `Rates`: message rates (msg/s) and throughputs (bytes/s) in and out.
- `TimeAverage`: Pulsar's TimeAverageMessageData: the plain mean of the samples until `samples`
  have been seen, then each new sample weighs 1/samples. Short-term (10 samples) for shedding,
  long-term (1000) for placement and split.
- `BrokerLoad`: one broker's resources (CPU, memory, bandwidth in and out as fractions; we have no
  JVM direct memory) and the sum of its topics' rates; `max_usage` is Pulsar's
  getMaxResourceUsage, `weighted_usage` its getMaxResourceUsageWithWeight.

Pulsar keeps averages per bundle; we keep them per topic and sum them per bundle, so the two halves
of a split bundle start with their own topics' history (Pulsar starts them from defaults).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from testbed.policies.snapshot import BrokerReport, TopicReport


@dataclass(frozen=True)
class Rates:
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0

    @property
    def rate(self) -> float:
        """Message rate in + out (what LeastLongTermMessageRate and the split rule compare)."""
        return self.rate_in + self.rate_out

    @property
    def throughput(self) -> float:
        """Bytes/s in + out (what the shedders order bundles by)."""
        return self.throughput_in + self.throughput_out

    def __add__(self, other: Rates) -> Rates:
        return Rates(self.rate_in + other.rate_in, self.rate_out + other.rate_out,
                     self.throughput_in + other.throughput_in, self.throughput_out + other.throughput_out)

    @classmethod
    def of(cls, report: TopicReport) -> Rates:
        return cls(report.rate_in, report.rate_out, report.throughput_in, report.throughput_out)

    @classmethod
    def total(cls, parts: Iterable[Rates]) -> Rates:
        out = cls()
        for part in parts:
            out = out + part
        return out


@dataclass
class TimeAverage:
    samples: int
    seen: int = 0
    value: Rates = Rates()

    def update(self, sample: Rates) -> Rates:
        self.seen = min(self.seen + 1, self.samples)
        n, old = self.seen, self.value
        self.value = Rates(*(((n - 1) * a + b) / n for a, b in zip(
            (old.rate_in, old.rate_out, old.throughput_in, old.throughput_out),
            (sample.rate_in, sample.rate_out, sample.throughput_in, sample.throughput_out))))
        return self.value


@dataclass(frozen=True)
class BrokerLoad:
    name: str
    cpu: float
    memory: float
    bandwidth_in: float
    bandwidth_out: float
    current: Rates  # sum of its topics' latest rates (LocalBrokerData's msgRate / msgThroughput)

    @classmethod
    def of(cls, report: BrokerReport, topics: Iterable[TopicReport]) -> BrokerLoad:
        return cls(report.broker, report.cpu, report.memory, report.network_in, report.network_out,
                   Rates.total(Rates.of(t) for t in topics))

    @property
    def max_usage(self) -> float:
        return max(self.cpu, self.memory, self.bandwidth_in, self.bandwidth_out)

    def weighted_usage(self, config) -> float:
        return max(self.cpu * config.cpu_weight, self.memory * config.memory_weight,
                   self.bandwidth_in * config.bandwidth_in_weight, self.bandwidth_out * config.bandwidth_out_weight)
