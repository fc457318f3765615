"""The load manager's parameters: one home for their names, Pulsar's defaults and ours.

Pulsar's defaults (broker.conf / ServiceConfiguration.java of the modular load manager; the table
of shared/reference/pulsar-load-balancing.md) assume a production cluster. Two kinds are scaled:

- Capacities (the split limits on message rate and throughput, the shedders' minimum unloads):
  Pulsar sets them for brokers that deliver about 1.5M msg/s (its Rth_out on the paper's 8-CPU
  VMs, 5.4). Here they keep the same share of a broker's capacity: times Rth_out / 1.5M msg/s,
  with the run's Rth_out (`control.overload.output_rate`: nats-server's 20,000 msg/s on this
  machine by default, a scenario's own where its links are narrower). `LoadManagerConfig.scaled`.
- Periods: Pulsar sheds every minute with a 30-minute grace per bundle, for clusters that run for
  months; a run lasts minutes, so the shedder runs every 10 s and a bundle may move again after
  30 s (three shedding periods), which still keeps a bundle from bouncing at every round.

Counts (bundles, topics, sessions), fractions and weights keep Pulsar's values. The scenario's
`control.pulsar_lm` takes its defaults from here, and the topic manager's command line is
`add_arguments` / `to_argv`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from testbed.policies.overload import NATS_OUTPUT_RATE_THRESHOLD
from testbed.policies.pulsar_lm.bundles import SPLIT_ALGORITHMS

PULSAR_OUTPUT_RATE_THRESHOLD = 1.5e6  # msg/s, Pulsar on the paper's 8-CPU VMs (5.4)
MB = 1024 * 1024
# The capacities, at Pulsar's own values: `scaled` multiplies them by Rth_out / 1.5M msg/s.
PULSAR_CAPACITIES = {"split_max_rate": 30_000.0, "split_max_throughput": 100.0 * MB,
                     "min_unload_throughput": 10.0 * MB, "uniform_min_unload_rate": 1000.0,
                     "uniform_min_unload_throughput": 1.0 * MB}
_DEFAULT_SCALE = NATS_OUTPUT_RATE_THRESHOLD / PULSAR_OUTPUT_RATE_THRESHOLD

PLACEMENTS = ("least_long_term_message_rate", "least_resource_usage_with_weight")
SHEDDERS = ("threshold", "overload", "uniform")


def _param(default, help: str, pulsar=None, choices=None):
    """A parameter with its help text and, when scaled, Pulsar's own default."""
    return field(default=default, metadata={"help": help, "pulsar": default if pulsar is None else pulsar,
                                            "choices": choices})


@dataclass(frozen=True)
class LoadManagerConfig:
    bundles: int = _param(4, "bundles per namespace at creation (defaultNumberOfNamespaceBundles)")
    placement: str = _param("least_long_term_message_rate", "placement strategy (loadBalancerLoadPlacementStrategy)",
                            choices=PLACEMENTS)
    overload_threshold: float = _param(0.85, "max resource use (fraction) above which a broker gets no new bundle "
                                             "and OverloadShedder sheds (loadBalancerBrokerOverloadedThresholdPercentage)")
    usage_difference: float = _param(0.10, "LeastResourceUsageWithWeight: a candidate's use must be this far below "
                                           "the average (loadBalancerAverageResourceUsageDifferenceThresholdPercentage)")
    distribute_evenly: bool = _param(True, "place a bundle only among brokers owning the fewest bundles "
                                           "(loadBalancerDistributeBundlesEvenlyEnabled)")
    auto_split: bool = _param(True, "split hot bundles (loadBalancerAutoBundleSplitEnabled)")
    unload_split_bundles: bool = _param(True, "unload both halves of a split (loadBalancerAutoUnloadSplitBundlesEnabled)")
    split_max_topics: int = _param(1000, "split a bundle with more topics (loadBalancerNamespaceBundleMaxTopics)")
    split_max_sessions: int = _param(1000, "... more producers + consumers (loadBalancerNamespaceBundleMaxSessions)")
    split_max_rate: float = _param(30_000 * _DEFAULT_SCALE, "... a higher long-term message rate in + out, msg/s "
                                   "(loadBalancerNamespaceBundleMaxMsgRate, scaled)", pulsar=30_000.0)
    split_max_throughput: float = _param(100 * MB * _DEFAULT_SCALE, "... a higher long-term throughput in + out, "
                                         "bytes/s (loadBalancerNamespaceBundleMaxBandwidthMbytes, scaled)",
                                         pulsar=100.0 * MB)
    max_bundles: int = _param(128, "no split beyond this many bundles (loadBalancerNamespaceMaximumBundles)")
    split_algorithm: str = _param("range_equally_divide", "where a bundle is cut (defaultNamespaceBundleSplitAlgorithm)",
                                  choices=SPLIT_ALGORITHMS)
    shedding_interval: float = _param(10.0, "seconds between shedding and split checks "
                                            "(loadBalancerSheddingIntervalMinutes)", pulsar=60.0)
    grace_period: float = _param(30.0, "seconds before an unloaded bundle may be unloaded again "
                                       "(loadBalancerSheddingGracePeriodMinutes)", pulsar=1800.0)
    shedder: str = _param("threshold", "shedding strategy (loadBalancerLoadSheddingStrategy)", choices=SHEDDERS)
    threshold: float = _param(0.10, "ThresholdShedder: a broker sheds when its use exceeds the average by this much "
                                    "(loadBalancerBrokerThresholdShedderPercentage)")
    history: float = _param(0.9, "weight of the previous use in the smoothed use (loadBalancerHistoryResourcePercentage)")
    cpu_weight: float = _param(1.0, "loadBalancerCPUResourceWeight")
    memory_weight: float = _param(1.0, "loadBalancerMemoryResourceWeight")
    bandwidth_in_weight: float = _param(1.0, "loadBalancerBandwithInResourceWeight")
    bandwidth_out_weight: float = _param(1.0, "loadBalancerBandwithOutResourceWeight")
    min_unload_throughput: float = _param(10 * MB * _DEFAULT_SCALE, "ThresholdShedder: no unload below this much "
                                          "throughput, bytes/s (loadBalancerBundleUnloadMinThroughputThreshold, scaled)",
                                          pulsar=10.0 * MB)
    uniform_rate_difference: float = _param(0.5, "UniformLoadShedder: shed when the busiest broker's message rate "
                                                 "exceeds the idlest's by this fraction "
                                                 "(loadBalancerMsgRateDifferenceShedderThreshold)")
    uniform_throughput_multiplier: float = _param(4.0, "... or its throughput is this many times the idlest's "
                                                       "(loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold)")
    uniform_max_unload: float = _param(0.2, "UniformLoadShedder: fraction of the difference moved per round "
                                            "(maxUnloadPercentage)")
    uniform_min_unload_rate: float = _param(1000 * _DEFAULT_SCALE, "... not below this message rate, msg/s "
                                            "(minUnloadMessage, scaled)", pulsar=1000.0)
    uniform_min_unload_throughput: float = _param(1 * MB * _DEFAULT_SCALE, "... nor this throughput, bytes/s "
                                                  "(minUnloadMessageThroughput, scaled)", pulsar=1.0 * MB)
    short_samples: int = _param(10, "samples of the short-term averages (TimeAverageMessageData)")
    long_samples: int = _param(1000, "samples of the long-term averages (TimeAverageMessageData)")
    default_bundle_rate: float = _param(50.0, "message rate in (and out) assumed for a bundle with no report yet, msg/s")
    default_bundle_throughput: float = _param(50_000.0, "throughput in (and out) assumed for it, bytes/s")

    def __post_init__(self) -> None:
        for f in fields(self):
            choices = f.metadata["choices"]
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ValueError(f"{f.name} must be one of {', '.join(choices)}, not {value!r}")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{f.name} must not be negative")
        if self.bundles < 1 or self.max_bundles < self.bundles:
            raise ValueError("bundles must be at least 1 and at most max_bundles")
        if not 0 <= self.history < 1:
            raise ValueError("history must be in [0, 1)")

    @classmethod
    def scaled(cls, output_rate: float = NATS_OUTPUT_RATE_THRESHOLD, **given) -> LoadManagerConfig:
        """Pulsar's defaults with the capacities at the same share of a broker whose Rth_out is
        `output_rate` msg/s; `given` parameters (None: not given) win."""
        scale = output_rate / PULSAR_OUTPUT_RATE_THRESHOLD
        values = {name: pulsar * scale for name, pulsar in PULSAR_CAPACITIES.items()}
        values.update({name: value for name, value in given.items() if value is not None})
        return cls(**values)

    @classmethod
    def add_arguments(cls, parser) -> None:
        """--lm-<name> for every parameter (booleans as true/false), read back by `from_arguments`. The
        destinations keep the lm_ prefix: `threshold` alone would overwrite the topic manager's Lth."""
        for f in fields(cls):
            kind = {bool: _boolean, int: int, float: float, str: str}[type(f.default)]
            parser.add_argument(f"--lm-{f.name.replace('_', '-')}", dest=f"lm_{f.name}", type=kind, default=f.default,
                                choices=f.metadata["choices"], help=f.metadata["help"])

    @classmethod
    def from_arguments(cls, args) -> LoadManagerConfig:
        """From arguments parsed with `add_arguments`."""
        return cls(**{f.name: getattr(args, f"lm_{f.name}") for f in fields(cls)})

    def to_argv(self) -> list[str]:
        """The command line `add_arguments` reads back (exact: repr of each number)."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            out += [f"--lm-{f.name.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else
                    (value if isinstance(value, str) else repr(value))]
        return out


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return text == "true"


# How a scenario writes each non-count parameter (testbed.systems.pubsub.schema builds `control.pulsar_lm`
# from the fields): the rest are counts, choices, booleans or plain weights.
UNITS = {"shedding_interval": "duration", "grace_period": "duration",
         "split_max_rate": "msg/s", "uniform_min_unload_rate": "msg/s", "default_bundle_rate": "msg/s",
         "split_max_throughput": "bytes/s", "min_unload_throughput": "bytes/s",
         "uniform_min_unload_throughput": "bytes/s", "default_bundle_throughput": "bytes/s",
         "overload_threshold": "fraction", "usage_difference": "fraction", "threshold": "fraction",
         "history": "fraction", "uniform_rate_difference": "fraction", "uniform_max_unload": "fraction"}


def pulsar_defaults() -> dict[str, object]:
    """Each parameter's value in Pulsar itself (before scaling): for the docs and the index."""
    return {f.name: f.metadata["pulsar"] for f in fields(LoadManagerConfig)}
