"""What keeps a server from carrying a run, asked over ssh as a run would: `testbed servers check`
before a run, and the run's own preflight when it starts (all of it for another machine; the
quick part for a namespace-server, which runs this very checkout).

Each finding is one check on one server, said with what to fix: ssh without a password, root (or
passwordless sudo), the project at the same path and the same version as here, the tools a node
needs (`testbed doctor` run on the server itself), an underlay towards every other server that
carries VXLAN whole, and a clock within CLOCK_LIMIT_S of ours (one-way latencies are taken from
clocks on both sides).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.emulation.servers import Server, ServerError, run

MIN_UNDERLAY_MTU = 1550  # VXLAN adds 50 bytes: emulated frames of 1500 bytes cross whole
CLOCK_LIMIT_S = 0.002  # a server clock further off than this would bias one-way latencies
# `testbed doctor`'s checks a node's server must pass (the others are the harness machine's or optional)
SERVER_NEEDS = ("root", "network namespaces", "gcc (delay line)", "Mininet", "serf", "ZooKeeper", "Java")
NATS_NEED = "nats-server ("  # the default nats-server (its check's name carries the choice)


@dataclass(frozen=True)
class Finding:
    server: str
    check: str
    ok: bool
    detail: str


def survey(servers: list[Server], control_dir: Path | None, project: Path, python: str,
           thorough: bool = True) -> list[Finding]:
    """Every check on every server, in order; a server ssh cannot reach gets that finding only.
    `thorough` False (a run's preflight, which measures clocks itself): only what the run could not
    start without (the project, mnexec, the underlay's MTU)."""
    found: list[Finding] = []
    here = project_version(project) if thorough else None
    for server in servers:
        def add(check: str, ok: bool, detail: str, server: Server = server) -> None:
            found.append(Finding(server.name, check, ok, detail))

        if thorough:
            try:
                run(server, "true", control_dir)
            except ServerError as error:
                add("ssh", False, f"{error} (needs passwordless ssh: a key in ~/.ssh/config, BatchMode)")
                continue
            add("ssh", True, f"{server.user}@{server.host}")
            add(*privileges(server, control_dir))
        needs = " && ".join(f"test -e {shlex.quote(str(p))}" for p in (project, python))
        try:
            run(server, needs + " && command -v mnexec >/dev/null", control_dir)
            add("project", True, f"{project} with {python} and mnexec")
        except ServerError as error:
            add("project", False, f"{error} (each server needs the project at {project}, set up with `make setup`, "
                "and Mininet's mnexec)")
            continue
        if thorough:
            add(*same_version(server, control_dir, project, here))
            add(*tools(server, control_dir, project, python))
        for peer in servers:
            if peer != server:
                add(*underlay(server, peer, control_dir))
        if thorough:
            add(*clock(server, control_dir, python))
    return found


def problems(findings: list[Finding]) -> list[str]:
    return [f"server {f.server}: {f.check}: {f.detail.removeprefix(f'server {f.server} ')}" for f in findings if not f.ok]


def privileges(server: Server, control_dir: Path | None) -> tuple[str, bool, str]:
    """Nodes are namespaces, links veths and VXLANs: the run needs root there."""
    if run(server, "id -u", control_dir).strip() == "0":
        return "root", True, f"{server.user} is root"
    try:
        run(server, "sudo -n true", control_dir)
    except ServerError:
        return "root", False, f"{server.user} is not root and has no passwordless sudo (the run makes namespaces and links)"
    return "root", True, f"{server.user} has passwordless sudo"


def project_version(project: Path) -> str | None:
    """The checkout's commit, with `-dirty` for uncommitted changes (None: not a git checkout)."""
    done = subprocess.run(["git", "-C", str(project), "describe", "--always", "--dirty", "--abbrev=12"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def same_version(server: Server, control_dir: Path | None, project: Path, here: str | None) -> tuple[str, bool, str]:
    """The same code on both ends: a node runs the server's copy of the roles the harness starts."""
    if here is None:
        return "version", True, f"{project} is not a git checkout here: versions not compared"
    try:
        there = run(server, f"git -C {shlex.quote(str(project))} describe --always --dirty --abbrev=12", control_dir).strip()
    except ServerError:
        return "version", False, f"{project} there is not a git checkout of this project (here: {here})"
    if there != here:
        return "version", False, f"{there} there, {here} here: check out the same commit on both"
    return "version", True, here


def tools(server: Server, control_dir: Path | None, project: Path, python: str) -> tuple[str, bool, str]:
    """`testbed doctor` on the server: the checks of SERVER_NEEDS and the default nats-server."""
    try:
        out = run(server, f"cd {shlex.quote(str(project))} && {shlex.quote(python)} -m testbed.cli doctor --json",
                  control_dir, timeout=60)
        checks = json.loads(out)["checks"]
    except (ServerError, ValueError, KeyError) as error:
        return "tools", False, f"`testbed doctor` did not answer there: {error}"
    needed = [c for c in checks if c["name"] in SERVER_NEEDS or (c["name"].startswith(NATS_NEED) and "default" in c["name"])]
    missing = [f"{c['name']} ({c['detail']})" for c in needed if not c["ok"]]
    if missing:
        return "tools", False, "; ".join(missing)
    return "tools", True, ", ".join(c["name"] for c in needed)


def underlay(server: Server, peer: Server, control_dir: Path | None) -> tuple[str, bool, str]:
    check = f"MTU to {peer.name}"
    try:
        mtu = underlay_mtu(server, peer, control_dir)
    except ServerError as error:
        return check, False, str(error)
    if mtu < MIN_UNDERLAY_MTU:
        return check, False, (f"the interface towards {peer.name} has MTU {mtu}; VXLAN needs {MIN_UNDERLAY_MTU} or more "
                              "to carry 1500-byte frames (ip link set DEV mtu 9000)")
    return check, True, str(mtu)


def underlay_mtu(server: Server, peer: Server, control_dir: Path | None) -> int:
    out = run(server, f"ip -o route get {shlex.quote(peer.host)}", control_dir)
    match = re.search(r"\bdev (\S+)", out)
    if not match:
        raise ServerError(f"server {server.name}: no route to {peer.name} ({peer.host}): {out.strip()}")
    link = run(server, f"ip -o link show dev {shlex.quote(match[1])}", control_dir)
    return int(re.search(r"\bmtu (\d+)", link)[1])


def clock(server: Server, control_dir: Path | None, python: str) -> tuple[str, bool, str]:
    try:
        offset, error = clock_offset(server, control_dir, python)
    except ServerError as failure:
        return "clock", False, str(failure)
    said = f"{offset * 1e3:+.2f} ms (±{error * 1e3:.2f}) off ours"
    if abs(offset) > CLOCK_LIMIT_S:
        return "clock", False, f"{said}, more than {CLOCK_LIMIT_S * 1e3:g} ms: synchronise the clocks (chrony) first"
    return "clock", True, said


CLOCK_ECHO = "import sys, time\nfor _ in sys.stdin: print(repr(time.time()), flush=True)"


def clock_offset(server: Server, control_dir: Path | None, python: str = "python3", samples: int = 20) -> tuple[float, float]:
    """The server's clock minus ours, NTP-style: a process on the server answers each line with its
    clock; the offset is taken from the sample with the shortest round trip, whose half bounds the
    error: (offset s, error bound s)."""
    echo = subprocess.Popen(server.ssh(control_dir) + [shlex.join([python, "-u", "-c", CLOCK_ECHO])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    best = None
    try:
        for _ in range(samples):
            t0 = time.time()
            try:
                echo.stdin.write("t\n")
                echo.stdin.flush()
            except OSError:
                line = ""
            else:
                line = echo.stdout.readline()
            t1 = time.time()
            try:
                answer = float(line)
            except ValueError:
                raise ServerError(f"server {server.name}: the clock probe ({python}) gave no answer") from None
            if best is None or t1 - t0 < best[1]:
                best = (answer - (t0 + t1) / 2, t1 - t0)
    finally:
        try:
            echo.stdin.close()
        except OSError:
            pass
        try:
            echo.wait(timeout=10)
        except subprocess.TimeoutExpired:
            echo.kill()
            echo.wait()
    return best[0], best[1] / 2
