"""How big an experiment `make paper` ran is, against the paper's: "0.011x the paper's load (240 of
22,400 deliveries/s), 8 of 64 clients".

The paper's size is the workload kind's full-scale scenario (testbed.plugin.Experiment.scenarios
["full"]: uav.yaml and mmog.yaml are the paper's cases); a kind whose paper gives no size (the hot
spot) is measured against its own full-scale scenario, and the words say so. The load is what the
scenario offers (testbed.load.deliveries_per_s), so the statement holds whether or not the run kept up;
the saturation guard's verdict beside it says whether it did.
"""

from __future__ import annotations

import functools
from pathlib import Path

from testbed import plugin

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def size(scenario: str) -> tuple[float, int]:
    """Deliveries/s offered and client nodes (a swarm's UAVs counted one by one) of a scenario file."""
    from testbed import load, topology
    from testbed.scenario.loader import load as load_scenario

    parsed = load_scenario(REPO / scenario)
    clients = sum(group.count * group.members for group in parsed.nodes.clients)
    return load.deliveries_per_s(parsed, topology.build(parsed)), clients


def against_paper(kind: str, scenario: str) -> str:
    """`scenario`'s load and clients against its kind's full-scale scenario; "" when either cannot be read."""
    experiment = plugin.experiments()[kind]
    full = experiment.scenarios["full"]
    try:
        (ours, our_clients), (theirs, their_clients) = size(scenario), size(full)
    except Exception as error:  # noqa: BLE001 - a description: the index says it is unknown rather than stop
        return f"size against {full} not known ({type(error).__name__}: {error})"
    whose = "the paper's" if experiment.paper_scale else f"{full}'s"
    ratio = f"{ours / theirs:.2g}" if theirs else "?"
    ratio += ".0x" if ratio.isdigit() else "x"
    return (f"{ratio} {whose} load ({ours:,.0f} of {theirs:,.0f} deliveries/s), "
            f"{our_clients} of {their_clients} clients")


__all__ = ["size", "against_paper"]
