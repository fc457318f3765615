"""Whose setting is it: a `control` key or a `kill:` target that a system declares (its manifest,
testbed.plugin) configures nothing under another system under test, so testbed.topology.checked
refuses it at its line with the system that has it. The core declares none of them itself."""

from __future__ import annotations

from testbed import plugin


def check_control(scenario, report, written_for: str | None = None) -> None:
    """A system's `control.<key>` set to anything but its default under another system under test
    is refused at its line: it would configure nothing. Values are judged, so a run's scenario.yaml,
    which carries every default, checks again. The settings of the system the file was written for
    stay when `--system` replaced it: inert, and recorded as written, so its runs and the file's own
    remain one experiment (one reading of d)."""
    for key in type(scenario.control).model_fields:
        owner = plugin.control_owner(key)
        under = owner and owner.name != written_for and plugin.foreign(scenario.system, owner)
        if under and getattr(scenario.control, key) != type(scenario.control).model_fields[key].default:
            report(("control", key), f"a setting of system {owner.name!r}, which configures nothing under {under}: "
                                     f"leave it out, or run under system {owner.name}")


def check_fault_target(scenario, built, index: int, report) -> None:
    """`kill:` naming a system's part (testbed.plugin.FaultTarget): refused under a system that does not
    declare it, with the system that does; else the declaring system's own check of it, if any."""
    name = scenario.faults[index].kill
    system, target = plugin.fault_targets()[name]  # one system declares each (testbed.plugin._claim)
    under = plugin.foreign(scenario.system, system)
    if under:
        report(("faults", index, "kill"), f"{name!r} is a part of system {system.name!r}, and {under} has none; "
                                          f"the system that has it: {system.name}")
    elif target.check:
        plugin.hook(system, target.check)(scenario, built, index, report)
