"""`testbed exec` and `testbed shell`: a command inside a node of a running experiment, as `mn`'s
`h1 ping h2` or `docker exec` give one.

A run's state file (runstate, /run/testbed/<id>.json) says how to reach its nodes: the pid holding
each namespace (a node's or a site router's), the backend (a Docker host is a container named
`tb<id>.<node>`), and the server of each node or site on another machine (its pid names a process
there). So the command becomes one argv: `mnexec -a PID` here (Mininet's own way into a node), `docker
exec` into a container, or ssh to the server and `mnexec -a PID` there. The command carries the run
tag, so the run's teardown ends it (a shell left open in a node does not outlive the network).
Pure but for reading the state files: the CLI execs the argv, so the exit status is the command's.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from testbed.emulation import runstate


class NoSuchTarget(ValueError):
    """The run or node asked for is not there; the message says what is."""


def running() -> dict[str, dict]:
    """The state of every run whose harness is alive, by run id."""
    return {rid: run for rid, run in sorted(runstate.known_runs().items()) if runstate.is_live(run)}


def _listing(runs: dict[str, dict]) -> str:
    return "; ".join(f"{rid} ({run.get('scenario', '?')})" for rid, run in runs.items()) or "none"


def find_run(text: str, runs: dict[str, dict]) -> dict:
    """The running run `text` names: its run id, or its results folder (whose run.json has the id).
    NoSuchTarget names the runs running."""
    run_id = text
    if not runstate.RUN_ID_RE.fullmatch(text):
        try:
            run_id = json.loads((Path(text) / "run.json").read_text())["run_id"]
        except (OSError, ValueError, KeyError, TypeError):
            raise NoSuchTarget(f"RUN: {text!r} is neither a run id nor a run's results folder; "
                               f"running: {_listing(runs)}") from None
    if run_id not in runs:
        raise NoSuchTarget(f"RUN: run {run_id} is not running; running: {_listing(runs)}")
    return runs[run_id]


def targets(run: dict) -> dict[str, int]:
    """Every node and site router of a run, with the pid that holds its namespace."""
    return {**run.get("nodes", {}), **run.get("sites", {})}


def argv_in(run: dict, node: str, argv: list[str], tty: bool = False, servers: dict | None = None) -> list[str]:
    """The argv that runs `argv` inside `node` of `run` (a runstate dict), with its terminal when
    `tty`. `servers`: the namespace-servers by name (servers.namespace_servers()), for a node on one."""
    where = targets(run)
    if not where:
        raise NoSuchTarget(f"NODE: run {run['run_id']} has no network up yet (or no longer): try again in a moment")
    if node not in where:
        raise NoSuchTarget(f"NODE: run {run['run_id']} has no node {node!r}; nodes: {', '.join(run.get('nodes', {}))}"
                           + (f"; site routers: {', '.join(run['sites'])}" if run.get("sites") else ""))
    if not argv:
        raise NoSuchTarget("CMD: give the command to run after --, e.g. -- ip addr")
    pid, tag = str(where[node]), f"{runstate.ENV_TAG}={run['run_id']}"
    server = run.get("elsewhere", {}).get(node)
    if server is not None:
        return _ssh(server, servers or {}, tty) + [shlex.join(["env", tag, "mnexec", "-a", pid, *argv])]
    if run.get("backend") == "containernet" and node in run.get("nodes", {}):
        return ["docker", "exec", "-i", *(["-t"] if tty else []), f"{runstate.container_prefix(run['run_id'])}.{node}",
                *argv]
    return ["env", tag, "mnexec", "-a", pid, *argv]


def _ssh(name: str, servers: dict, tty: bool) -> list[str]:
    """ssh to the server a run recorded by name: a namespace-server by its own config, another
    machine as the run reached it (`[user@]host`, the user's own ssh setup)."""
    from testbed.emulation.servers import parse

    server = servers.get(name) or parse(name, "server", least=1)[0]
    ssh = server.ssh(None)
    return ssh[:-1] + ["-t" if tty else "-T", ssh[-1]]


def shell(run: dict, node: str) -> list[str]:
    """An interactive shell for `node`: $SHELL (else bash) in a namespace; bash in a container,
    whose image need not have the user's shell."""
    if run.get("backend") == "containernet" and node in run.get("nodes", {}) and node not in run.get("elsewhere", {}):
        return ["bash"]
    return [os.environ.get("SHELL") or "bash"]


def example(run_id: str, nodes: dict[str, str]) -> list[str]:
    """What a held run prints: how to reach its nodes, with two real nodes (`nodes`: name -> IP)."""
    names = list(nodes)
    first, other = names[0], names[-1]
    return [f"testbed exec {run_id} {first} -- ping -c 3 {nodes[other]}    ({other})",
            f"testbed shell {run_id} {first}",
            f"nodes: {', '.join(names)}"]
