"""The scenario's faults on the run's clock: each injected when due, each part back when its time
comes, and the spans they covered (run.json's `faults`, drawn in Fig. 8 and 9).

Two kinds belong to the emulated network and are done here: a delay line killed (`relay`; the
shaper's own check restarts it) and a site cut off (`cut`; its routes blackholed both ways until
`heal_after`). The others (`kill`, `pause`) reach the roles, which know what runs in a node.
"""

from __future__ import annotations

import time
from typing import Callable

from testbed.scenario.model import Fault

Write = Callable[..., None]


class FaultSchedule:
    """The faults of one run, driven by `step(elapsed)` from the run's loop."""

    def __init__(self, faults: list[Fault], network, roles: list, write: Write, say: Callable[[str], None]):
        self.due = sorted(faults, key=lambda f: f.at)
        self.network, self.roles, self.write, self.say = network, roles, write, say
        self.back: list[tuple[float, int]] = []  # (when, index into spans) of parts that come back
        self.spans: list[dict] = []  # {kind, target, from_s, to_s}: to_s None = for good (or a moment)
        self._faults: list[Fault] = []  # beside spans: the fault each span is of
        self.events: list[dict] = []  # what it wrote, for the run's summary

    def _write(self, **event) -> None:
        self.events.append(event)
        self.write(**event)

    def step(self, elapsed: float) -> None:
        while self.due and self.due[0].at <= elapsed:
            self._inject(self.due.pop(0), elapsed)
        while self.back and min(self.back)[0] <= elapsed:
            _, index = self.back.pop(self.back.index(min(self.back)))
            self._restore(index, elapsed)

    def _inject(self, fault: Fault, elapsed: float) -> None:
        span = {"kind": fault.kind, "target": fault.target, "from_s": round(elapsed, 3), "to_s": None}
        self.spans.append(span)
        self._faults.append(fault)
        if fault.relay is not None:  # the emulation's own part: the shaper's check restarts it
            link = self.network.kill_relay(*fault.relay)
            self._write(type="relay_killed", time=time.time(), link=link, planned_at_s=fault.at)
            self.say(f"fault: the delay line of {link} killed at {elapsed:.1f}s")
            return
        if fault.cut is not None:
            routes = self.network.cut_site(fault.cut)
            self._write(type="site_cut", time=time.time(), site=fault.cut, routes=routes, planned_at_s=fault.at)
        else:
            for role in reversed(self.roles):  # as a crash would: the system's processes with the node's agent
                found = role.kill(fault.kill) if fault.kill is not None else role.pause(fault.pause)
                for event in found:
                    event["planned_at_s"] = fault.at
        if fault.back_after is None:
            self.say(f"fault: {fault.target} killed for good at {elapsed:.1f}s")
        else:
            self.back.append((fault.at + fault.back_after, len(self.spans) - 1))
            self.say(f"fault: {fault.target} {PAST[fault.kind]} at {elapsed:.1f}s, back in {fault.back_after:g}s")

    def _restore(self, index: int, elapsed: float) -> None:
        fault, span = self._faults[index], self.spans[index]
        span["to_s"] = round(elapsed, 3)
        if fault.cut is not None:
            routes = self.network.heal_site(fault.cut)
            self._write(type="site_healed", time=time.time(), site=fault.cut, routes=routes)
        else:
            for role in self.roles:
                role.restore(fault.target) if fault.kill is not None else role.resume(fault.target)
        self.say(f"fault over: {fault.target} {RETURN[fault.kind]} at {elapsed:.1f}s")


PAST = {"kill": "killed", "pause": "paused", "cut": "cut off", "relay": "killed"}
RETURN = {"kill": "restarting", "pause": "resumed", "cut": "linked again"}
