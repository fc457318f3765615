"""Run identity: every process, container and state file of a run carries its run id.

Processes inherit `TESTBED_RUN=<id>` in their environment (Mininet node shells, relays, role
processes), containers are named `tb<id>.<node>` and labelled, and /run/testbed/<id>.json says
which process controls the run, so `testbed clean` can find a crashed run's leftovers without the
scenario file and can tell a live run (left alone) from a dead one. The process table read here is
the one `testbed clean` and the leftover listing judge processes by.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import string
import time
from pathlib import Path
from typing import NamedTuple

ENV_TAG = "TESTBED_RUN"
STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))
RUN_ID_RE = re.compile(r"[a-z][a-z0-9]{5}")
CONTAINER_LABEL = "testbed.run"


def new_run_id() -> str:
    """Six characters: short enough for container and interface names, unique enough per host."""
    while True:
        run_id = secrets.choice(string.ascii_lowercase) + "".join(
            secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        if not (STATE_DIR / f"{run_id}.json").exists():
            return run_id


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.fullmatch(run_id or ""):
        raise ValueError(f"{run_id!r} is not a run id (six characters a-z, 0-9, starting with a letter)")
    return run_id


def container_prefix(run_id: str) -> str:
    return f"tb{run_id}"


def register(run_id: str, **info) -> Path:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = STATE_DIR / f"{run_id}.json"
    data = {"run_id": run_id, "pid": os.getpid(), "started": time.time(), **info}
    path.write_text(json.dumps(data))
    return path


def update(run_id: str, **info) -> None:
    """Add to a registered run's state (a network built outside a registered run has none)."""
    path = STATE_DIR / f"{run_id}.json"
    if not path.exists():
        return
    data = json.loads(path.read_text())
    data.update(info)
    path.write_text(json.dumps(data))


def unregister(run_id: str) -> None:
    (STATE_DIR / f"{run_id}.json").unlink(missing_ok=True)


def known_runs() -> dict[str, dict]:
    runs = {}
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob("*.json"):
            if not RUN_ID_RE.fullmatch(path.stem):
                continue  # servers.json: the namespace-servers, not a run
            try:
                runs[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):
                runs[path.stem] = {"run_id": path.stem}
    return runs


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def is_live(run: dict) -> bool:
    """A run is live while its controlling process runs (a crashed or killed run is not)."""
    return pid_alive(run.get("pid"))


class Process(NamedTuple):
    """A process as /proc shows it."""

    pid: int
    started: int  # clock ticks after boot: with the pid, it names this process and no later one
    title: str  # its command line, or the title it gave itself (sshd: root@notty, ssh: PATH [mux])
    netns: int  # inode of its network namespace (0 where the kernel will not say, as for a guarded PID 1)
    env: dict[str, str]  # the TESTBED_* entries of its environment (the run tag among them)

    @property
    def run(self) -> str | None:
        return self.env.get(ENV_TAG)


def _read_process(entry: Path) -> Process | None:
    """None for a kernel thread, a zombie, or a process gone meanwhile."""
    try:
        title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not title or fields[0] == b"Z":
        return None
    try:
        netns = os.stat(entry / "ns" / "net").st_ino
    except PermissionError:
        netns = 0
    except OSError:
        return None
    try:
        environ = (entry / "environ").read_bytes()
    except OSError:
        environ = b""
    env = dict(item.decode(errors="replace").split("=", 1) for item in environ.split(b"\0")
               if item.startswith(b"TESTBED_") and b"=" in item)
    return Process(int(entry.name), int(fields[19]), title, netns, env)


def processes(everywhere: bool = False) -> list[Process]:
    """Every process of this machine now running (kernel threads and zombies left out). The
    processes of isolated namespace-servers are another machine's: this kernel shows them, but the
    harness must not act on them here; `everywhere` includes them (what `servers down` ends)."""
    elsewhere = set() if everywhere else pid_namespaces_elsewhere()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            process = _read_process(entry)
            if process is not None and not (elsewhere and pid_namespace(process.pid) in elsewhere):
                found.append(process)
    return found


def pid_namespace(pid: int) -> int:
    """The inode of a process's PID namespace (0 once it is gone or the kernel will not say)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return 0


def pid_namespaces_elsewhere() -> set[int]:
    """The PID namespaces of isolated namespace-servers: another machine's processes."""
    from testbed.emulation.servers import isolated_pid_namespaces

    return isolated_pid_namespaces()


def tagged_processes() -> dict[int, str]:
    """pid -> run id for every process carrying a run tag in its environment."""
    return {p.pid: p.run for p in processes() if p.run}


def init_netns() -> int:
    """The machine's own network namespace: PID 1's, or where PID 1 hides it (a sandbox's init),
    kthreadd's (kernel threads live there)."""
    try:
        return os.stat("/proc/1/ns/net").st_ino
    except PermissionError:
        return os.stat("/proc/2/ns/net").st_ino


def ancestors() -> set[int]:
    """This process and those above it: what a clean or a check must never count or kill."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def end(pids: list[int], grace_s: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL for those still running after `grace_s`."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return pids
