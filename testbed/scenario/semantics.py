"""Checks that need the data or the whole scenario: zones vs towers, site names, name clashes.

They run at validation time (never at run time, never at tc time) and report the line of the
field at fault, like schema errors.
"""

from __future__ import annotations


from testbed.scenario import zones
from testbed.scenario.loader import Problem, ScenarioError, line_of
from testbed.scenario.model import Scenario


def check(scenario: Scenario, path: str) -> None:
    problems: list[Problem] = []

    def report(loc: tuple, message: str) -> None:
        field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
        problems.append(Problem(path, line_of(path, loc), field, message))

    infra = scenario.infrastructure
    if infra.mec_zones:
        available = len(zones.towers(infra.mec_zones.towers))
        if infra.mec_zones.zones > available:
            report(("infrastructure", "mec_zones", "zones"),
                   f"{infra.mec_zones.zones} zones but the {infra.mec_zones.towers} data has only {available} towers")
    if problems:
        raise ScenarioError(problems)

    from testbed import topology

    sites = topology.sites_of(scenario)
    for i, override in enumerate(infra.overrides):
        for name in override.between:
            if name not in sites:
                report(("infrastructure", "overrides", i, "between"),
                       f"{name!r} is not a site; sites: {', '.join(sites)}")
        if override.between[0] == override.between[1]:
            report(("infrastructure", "overrides", i, "between"), "a link joins two different sites")
    for i, group in enumerate(scenario.nodes.clients):
        if group.site not in ("random", "each") and group.site not in sites:
            report(("nodes", "clients", i, "site"), f"{group.site!r} is not a site; sites: {', '.join(sites)}")
    if problems:
        raise ScenarioError(problems)
    try:
        built = topology.build(scenario)
    except ValueError as error:
        report(("nodes",), str(error))
        raise ScenarioError(problems) from None
    brokers = sorted(n.name for n in built.nodes.values() if n.role == "broker")
    for i, fault in enumerate(scenario.faults):
        if fault.kill not in brokers:
            why = ("the cloud node holds ZooKeeper and the topic manager; only edge brokers can be killed"
                   if fault.kill in built.nodes and built.nodes[fault.kill].role == "cloud" else "not a broker node")
            report(("faults", i, "kill"), f"{fault.kill!r}: {why}; brokers: {', '.join(brokers) or 'none'}")
        if fault.at >= scenario.duration:
            report(("faults", i, "at"), f"{fault.at:g}s is not within the run's duration ({scenario.duration:g}s)")
    if scenario.faults and scenario.workload.kind == "none":
        report(("faults",), "faults kill brokers of the pub/sub system: the scenario needs a workload")
    if len({f.kill for f in scenario.faults}) != len(scenario.faults):
        report(("faults",), "each broker can be killed once")
    if problems:
        raise ScenarioError(problems)


