"""The Role protocol: one concern of a run (network coordinates, a system under test, its workload)
on the emulated network, with the phases the experiment drives.

Modelled on OpenMessaging Benchmark's driver interface: a handful of calls every system answers the
same way, so the experiment never names a system. Every method but `__init__` has a default, so a
role says only what it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class RunContext:
    """What every role of a run shares: the running network, the built topology, the scenario, the
    run's directory (results/<run>/, logs in logs/, traces in traces/) and the progress line."""

    network: object
    topology: object
    scenario: object
    out: Path
    run_id: str
    say: Callable[[str], None] = lambda _message: None
    rows_elsewhere: Callable[[], int] | None = None  # trace rows written on other machines so far (their monitors count)

    @property
    def logs(self) -> Path:
        return self.out / "logs"


def newly_dead(processes: dict, reported: set) -> list[tuple[str, int]]:
    """(name, exit code) of each process that has exited since the last call, each once: the
    experiment calls `supervise` every 50 ms, and a dead process stays dead (reported each time, one
    crash was thousands of events and progress lines)."""
    dead = []
    for name, process in processes.items():
        code = process.poll()
        if code is not None and name not in reported:
            reported.add(name)
            dead.append((name, code))
    return dead


class Role:
    """A part of the run. Phases, in the order the experiment calls them:

    start()       bring its processes up (before the coordinates settle)
    begin()       the measured run begins (clients attach and publish); returns when they have
    supervise()   every second or so: what died or restarted, as events (never a silent gap)
    kill(node)    a scenario fault: `node` crashed (for good, or until restore); returns fault events
    restore(node) a fault's end: what was killed comes back after `restart_after` (ZooKeeper, a broker node)
    pause(node)   a scenario fault: `node`'s processes are stopped (SIGSTOP); returns fault events
    resume(node)  the pause's end (SIGCONT after `resume_after`)
    progress()    a few words for the progress line
    stop()        stop its processes (also after an error or Ctrl-C; must be safe to call twice)
    events()      after stop: everything it recorded, as events to merge into the run's
    summary(ev)   after stop: its part of summary.json, from the run's merged events
    end_screen()  after the summary: lines or rich renderables for the end screen
    """

    name = "role"

    @classmethod
    def wanted(cls, scenario) -> bool:
        """Whether a run of `scenario` needs this role."""
        return True

    def __init__(self, run: RunContext, others: list[Role]):
        self.run = run
        self.others = others

    def start(self) -> None:
        pass

    def begin(self) -> None:
        pass

    def supervise(self) -> list[dict]:
        return []

    def kill(self, node: str) -> list[dict]:
        return []

    def restore(self, node: str) -> list[dict]:
        return []

    def pause(self, node: str) -> list[dict]:
        return []

    def resume(self, node: str) -> list[dict]:
        return []

    def progress(self) -> str:
        return ""

    def stop(self) -> None:
        pass

    def events(self) -> list[dict]:
        return []

    def summary(self, events: list[dict]) -> dict:
        return {}

    def end_screen(self, summary: dict) -> list:
        return []

    def find(self, cls: type[Role]) -> Role | None:
        """A role started before this one (the workload needs the system's lookup address)."""
        return next((role for role in self.others if isinstance(role, cls)), None)
