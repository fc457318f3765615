"""How big an experiment `make paper` ran is, against the paper's: "0.011x the paper's load (240 of
22,400 deliveries/s), clients uav-swarm 8 of 64".

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
def size(scenario: str) -> tuple[float, dict[str, int]]:
    """Deliveries/s offered, and client nodes per role (a swarm's UAVs counted one by one), of a scenario file."""
    from testbed import load, topology
    from testbed.scenario.loader import load as load_scenario

    parsed = load_scenario(REPO / scenario)
    built = topology.build(parsed)
    roles = dict.fromkeys(group.role for group in parsed.nodes.clients)
    clients = {role: sum(n.members for n in built.nodes.values() if n.role == role) for role in roles}
    return load.deliveries_per_s(parsed, built), clients


def against_paper(kind: str, scenario: str) -> str:
    """`scenario`'s load and clients against its kind's full-scale scenario; what failed when either cannot be read."""
    experiment = plugin.experiments()[kind]
    full = experiment.scenarios["full"]
    try:
        (ours, our_clients), (theirs, their_clients) = size(scenario), size(full)
    except Exception as error:  # noqa: BLE001 - a description: the index says it is unknown rather than stop
        return f"size against {full} not known ({type(error).__name__}: {error})"
    whose = "the paper's" if experiment.paper_scale else f"{full}'s"
    ratio = f"{ours / theirs:.2g}" if theirs else "?"
    ratio += ".0x" if ratio.isdigit() else "x"
    clients = ", ".join(f"{role} {n} of {their_clients.get(role, 0)}" for role, n in our_clients.items())
    return f"{ratio} {whose} load ({ours:,.0f} of {theirs:,.0f} deliveries/s), clients {clients}"


__all__ = ["size", "against_paper"]
