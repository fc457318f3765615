"""`testbed clean`: remove what runs left behind, by run id, without the scenario file.

Node namespaces are held by the run's processes (Mininet node shells), so killing every process
tagged with the run id removes the namespaces, and with them every veth, bridge and qdisc inside.
Containers are found by name (`tb<run-id>.<node>`). A run over servers also leaves its ssh control
connections (found by their control directory, /run/testbed/ssh-RUN) and the pid files of its remote
processes. Namespace-servers whose name is gone but whose sshd still holds the namespace (a
connection outlived `servers down`) are removed too. Live runs (their controller still running)
are left alone, and nothing without our tag is touched. Cleaning twice is harmless.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from testbed.emulation import remote, runstate, servers


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
    mine = runstate.ancestors()
    by_run: dict[str, list[int]] = {}
    for pid, rid in runstate.tagged_processes().items():
        if pid in mine or rid in skip or (run_id is not None and rid != run_id):
            continue
        by_run.setdefault(rid, []).append(pid)
    for rid, pids in sorted(by_run.items()):
        runstate.end(pids)
        removed.append(f"run {rid}: killed {len(pids)} process(es) (node shells, relays, roles)")
    for name in docker_containers(run_id):
        rid = name[2:8] if name.startswith("tb") else ""
        if rid in skip:
            continue
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        removed.append(f"container {name}")
    removed += _ssh_connections(run_id, runs, skip)
    pid_files: dict[str, int] = {}
    for path, rid in remote.pid_files(run_id or "*").items():
        if rid not in skip:
            path.unlink(missing_ok=True)
            pid_files[rid] = pid_files.get(rid, 0) + 1
    removed += [f"run {rid}: {count} remote pid file(s)" for rid, count in sorted(pid_files.items())]
    for rid in list(runs):
        if rid not in skip and (run_id is None or rid == run_id):
            runstate.unregister(rid)
            removed.append(f"run {rid}: state file")
    removed += servers.end_orphans()
    return removed, notes


def _ssh_connections(run_id: str | None, runs: dict, skip: set[str]) -> list[str]:
    """A run over servers' ssh control connections and their directory. A killed harness's
    connections outlive it (ControlPersist) and carry no run tag (they open before the network
    that sets it). A directory whose run is not registered yet but whose connections are up is a
    run still reaching its servers: left alone."""
    removed = []
    for control in runstate.STATE_DIR.glob("ssh-*"):
        rid = control.name[4:]
        if not runstate.RUN_ID_RE.fullmatch(rid) or rid in skip or (run_id is not None and rid != run_id):
            continue
        masters = servers.control_masters(control)
        if masters and run_id is None and rid not in runs:
            continue
        runstate.end([m.pid for m in masters])
        shutil.rmtree(control, ignore_errors=True)
        removed.append(f"run {rid}: ssh control directory" + (f" and {len(masters)} connection(s)" if masters else ""))
    return removed
