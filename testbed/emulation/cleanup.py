"""`testbed clean`: remove what runs left behind, by run id, without the scenario file.

Node namespaces are held by the run's processes (Mininet node shells), so killing every process
tagged with the run id removes the namespaces, and with them every veth, bridge and qdisc inside.
Containers are found by name (`tb<run-id>.<node>`). Live runs (their controller still running) are left alone, and
nothing without our tag is touched. Cleaning twice is harmless.
"""

from __future__ import annotations

import os
import re
import signal
import shutil
import subprocess
import time

from testbed.emulation import runstate


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(open(f"/proc/{pid}/stat").read().split(") ")[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _kill(pids: list[int], grace_s: float = 2.0) -> list[int]:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(runstate.pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if runstate.pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return pids


def docker_containers(run_id: str | None) -> list[str]:
    """Names of our containers (`tb<run-id>.<node>`; empty when no Docker engine answers)."""
    try:
        out = subprocess.run(["docker", "ps", "-a", "--filter", "label=com.containernet", "--format", "{{.Names}}"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    pattern = re.compile(rf"tb({re.escape(run_id) if run_id else runstate.RUN_ID_RE.pattern})\.[a-z0-9]+")
    return [name for name in out.stdout.split() if pattern.fullmatch(name)]


def clean(run_id: str | None = None, force: bool = False) -> tuple[list[str], list[str]]:
    """Remove the leftovers of one run (or of every dead run); returns (removed, left alone)."""
    if run_id is not None:
        runstate.check_run_id(run_id)
    runs = runstate.known_runs()
    removed: list[str] = []
    notes: list[str] = []
    skip: set[str] = set()
    for rid, info in runs.items():
        if (run_id is None or rid == run_id) and runstate.is_live(info) and not force:
            skip.add(rid)
            notes.append(f"run {rid} is live (pid {info.get('pid')}): left alone")
    mine = _ancestors()
    by_run: dict[str, list[int]] = {}
    for pid, rid in runstate.tagged_processes().items():
        if pid in mine or rid in skip or (run_id is not None and rid != run_id):
            continue
        by_run.setdefault(rid, []).append(pid)
    for rid, pids in sorted(by_run.items()):
        _kill(pids)
        removed.append(f"run {rid}: killed {len(pids)} process(es) (node shells, relays, roles)")
    for name in docker_containers(run_id):
        rid = name[2:8] if name.startswith("tb") else ""
        if rid in skip:
            continue
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        removed.append(f"container {name}")
    for rid in list(runs):
        if rid not in skip and (run_id is None or rid == run_id):
            runstate.unregister(rid)
            removed.append(f"run {rid}: state file")
    for control in runstate.STATE_DIR.glob("ssh-*"):  # a run over servers' ssh control sockets
        rid = control.name[4:]
        if rid not in skip and (run_id is None or rid == run_id):
            shutil.rmtree(control, ignore_errors=True)
            removed.append(f"run {rid}: ssh control directory")
    return removed, notes
