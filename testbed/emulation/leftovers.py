"""What the testbed has left on this machine, listed and not removed: `testbed clean --check`
prints it, and the test suite lists it when it starts and again when it ends, so that whatever is
new at the end was left by the suite.

Each item is what one would remove by hand: a process (by pid and start time, so a reused pid is
another item), a network namespace (named in /run/netns, or unnamed and held by a process), a link
or bridge in this machine's namespace, a mount, a container, a file of run state. An item is
`ours` when something marks it as the testbed's: a run tag, a test session's tag, a program the
testbed starts, a network namespace that is neither the machine's own nor a Docker container's, a
path the testbed writes.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from testbed.emulation import cleanup, remote, runstate, servers

SUITE_TAG = "TESTBED_SUITE"  # a test session's mark, inherited by every process it starts
# Programs the testbed starts (in nodes, on servers, for analysis), by their command lines.
PROGRAMS = re.compile(r"(^|/)(serf|nats-server|delayline|mnexec)( |$)|org\.apache\.zookeeper\.|"
                      r"org\.apache\.spark\.|pyspark\.(daemon|worker)|-m testbed\.")
LINK_KINDS = ("veth", "vxlan", "bridge")  # what the testbed makes; a physical interface it never does
DOCKER_LINKS = re.compile(r"docker\d+|br-[0-9a-f]{12}")  # Docker's own bridges, made by its engine
DOCKER_NETNS = Path("/run/docker/netns")  # where the Docker engine names its containers' namespaces


@dataclass(frozen=True)
class Item:
    kind: str  # process, netns, link, mount, container, file
    key: str  # what names it across two listings
    text: str  # what a person reads
    ours: bool = True
    processes: tuple[runstate.Process, ...] = field(default=(), compare=False)  # what holds it


def not_ours() -> set[int]:
    """Network namespaces the testbed did not make: the machine's own and Docker's containers'
    (a Containernet container of ours is listed as a container)."""
    found = {runstate.init_netns(), 0}  # 0: a namespace the kernel would not show
    for path in DOCKER_NETNS.glob("*"):
        try:
            found.add(path.stat().st_ino)
        except OSError:
            pass
    return found


def is_ours(process: runstate.Process, others: set[int]) -> bool:
    """A process the testbed (or a test session) started, or one living in a network namespace
    that is not in `others` (`not_ours()`)."""
    return (bool(process.run) or SUITE_TAG in process.env or process.netns not in others
            or bool(PROGRAMS.search(process.title)) or str(runstate.STATE_DIR) in process.title)


def _process_item(process: runstate.Process, others: set[int]) -> Item:
    where = "" if process.netns in others else f", in netns [{process.netns}]"
    run = f", run {process.run}" if process.run else ""
    return Item("process", f"process {process.pid}@{process.started}",
                f"process {process.pid} ({process.title[:100]}{run}{where})", is_ours(process, others), (process,))


def _namespaces(processes: list[runstate.Process], init_netns: int, others: set[int]) -> list[Item]:
    named = {}
    for path in sorted(Path("/run/netns").glob("*")):
        try:
            named[path.stat().st_ino] = path.name
        except OSError:
            continue
    holders: dict[int, list[runstate.Process]] = {}
    for process in processes:
        if process.netns != init_netns:
            holders.setdefault(process.netns, []).append(process)
    items = []
    for inode in sorted(set(named) | set(holders)):
        held = holders.get(inode, [])
        by = f", held by {', '.join(f'{p.pid} ({p.title[:40]})' for p in held[:3])}" if held else ""
        by += f" and {len(held) - 3} more" if len(held) > 3 else ""
        name = named.get(inode)
        items.append(Item("netns", f"netns {name or ''}[{inode}]", f"network namespace {name or 'unnamed'} [{inode}]{by}",
                          inode not in others, tuple(held)))
    return items


def parse_links(text: str) -> list[tuple[str, str, str]]:
    """(name, kind, master) of each link in `ip -d -j link show`'s JSON (kind "" for a device
    without one, such as a physical interface)."""
    return [(link["ifname"], link.get("linkinfo", {}).get("info_kind", ""), link.get("master", ""))
            for link in json.loads(text or "[]")]


def _links() -> list[Item]:
    done = subprocess.run(["ip", "-d", "-j", "link", "show"], capture_output=True, text=True)
    items = []
    for name, kind, master in parse_links(done.stdout if done.returncode == 0 else ""):
        if name == "lo":
            continue
        docker = bool(DOCKER_LINKS.fullmatch(name) or DOCKER_LINKS.fullmatch(master))
        items.append(Item("link", f"link {name}", f"link {name} ({kind or 'device'}{', in ' + master if master else ''})",
                          kind in LINK_KINDS and not docker))
    return items


def parse_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, file system type) of each line of /proc/<pid>/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " in line and len(fields) > 4:
            after = line.split(" - ", 1)[1].split()
            found.append((fields[4].replace("\\040", " "), after[0] if after else ""))
    return found


def _mounts() -> list[Item]:
    """A named namespace is also a mount (/run/netns/NAME): it is listed once, as a namespace."""
    items = []
    for point, kind in parse_mounts(Path("/proc/self/mountinfo").read_text()):
        if point.startswith("/run/netns/") and kind == "nsfs":
            continue
        ours = kind == "nsfs" or point.startswith(f"{runstate.STATE_DIR}/")
        items.append(Item("mount", f"mount {point} {kind}", f"mount {point} ({kind})", ours))
    return items


def run_of(path: Path) -> str | None:
    """The run a file of run state belongs to: /run/testbed/RUN.json, /run/testbed/ssh-RUN/...,
    a remote pid file."""
    if path.is_relative_to(runstate.STATE_DIR) and path != runstate.STATE_DIR:
        top = path.relative_to(runstate.STATE_DIR).parts[0]
        rid = top[:-len(".json")] if top.endswith(".json") else top[len("ssh-"):] if top.startswith("ssh-") else ""
        return rid if runstate.RUN_ID_RE.fullmatch(rid) else None
    return remote.pid_file_run(path)


def _files(processes: dict[int, runstate.Process]) -> list[Item]:
    """Run state, keys and configs under STATE_DIR, remote pid files, sshd's directory; a run's
    files are held by its harness while it runs."""
    paths = sorted(runstate.STATE_DIR.rglob("*")) if runstate.STATE_DIR.is_dir() else []
    paths += sorted(remote.pid_files())
    paths += [servers.PRIVSEP_DIR] if servers.PRIVSEP_DIR.is_dir() else []
    harnesses = {rid: processes.get(info.get("pid")) for rid, info in runstate.known_runs().items()}
    items = []
    for path in paths:
        harness = harnesses.get(run_of(path))
        items.append(Item("file", f"file {path}", f"file {path}", processes=(harness,) if harness else ()))
    return items


def listing() -> list[Item]:
    """Everything of every kind now on this machine that this process may read, each marked
    `ours` or not; this process and those above it left out."""
    others = not_ours()
    mine = runstate.ancestors()
    processes = [p for p in runstate.processes() if p.pid not in mine]
    items = [_process_item(p, others) for p in processes]
    items += _namespaces(processes, runstate.init_netns(), others) + _links() + _mounts()
    items += [Item("container", f"container {name}", f"container {name}") for name in cleanup.docker_containers(None)]
    return items + _files({p.pid: p for p in processes})


def left() -> list[Item]:
    """What the testbed made that is still here (live runs included): `testbed clean --check`."""
    return [item for item in listing() if item.ours]


def new_since(before: list[Item], after: list[Item]) -> list[Item]:
    """Items of `after` that `before` lacks. A process counts only when it is ours (others come
    and go on a shared machine); a namespace, link, mount, container or file counts whatever it
    is, since none appear by themselves."""
    seen = {item.key for item in before}
    return [item for item in after if item.key not in seen and (item.ours or item.kind != "process")]
