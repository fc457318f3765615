"""What the auto-tuned publisher offers (testbed.load asks through the manifest)."""

from __future__ import annotations


def autotune(scenario, topology) -> tuple[float, float]:
    """Requests/s into all the auto-tuned publisher's variants at the busiest second of the run's
    arrivals (every variant gets the same arrivals; each is one message to the broker and one delivery)."""
    from collections import Counter

    from testbed.systems.autotune.sources import arrivals

    spec = scenario.workload.autotune
    seconds = Counter(int(t) for t in arrivals(spec.source, scenario.duration, scenario.seed))
    peak = max(seconds.values(), default=0) * len(spec.variants)
    return peak, peak
