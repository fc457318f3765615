"""Run identity: every process, container and state file of a run carries its run id.

Processes inherit `TESTBED_RUN=<id>` in their environment (Mininet node shells, relays, role
processes), containers are named `tb<id>.<node>` and labelled, and /run/testbed/<id>.json says
which process controls the run, so `testbed clean` can find a crashed run's leftovers without the
scenario file and can tell a live run (left alone) from a dead one.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import string
import time
from pathlib import Path

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


def tagged_processes() -> dict[int, str]:
    """pid -> run id for every process carrying a run tag in its environment."""
    found = {}
    needle = f"{ENV_TAG}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                found[int(entry.name)] = item[len(needle):].decode(errors="replace")
                break
    return found
