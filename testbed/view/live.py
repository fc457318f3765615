"""The live view beside a run: the server in its own process, niced, on a socket the harness bound
before anything started (so a port in use is refused before the network is built). It dies with
the harness (PR_SET_PDEATHSIG): a SIGKILLed run leaves no server behind. It carries no run tag, so
the run's teardown does not kill it before the final update: the harness stops it last."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from testbed.procs import die_with_parent, stop_group
from testbed.view.server import address_of

def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the process used so far, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LiveView:
    """`start` it once the run's folder holds run.json; `stop` it after the run's last write."""

    def __init__(self, run_dir: Path, sock: socket.socket):
        self.address = address_of(sock)
        env = {k: v for k, v in os.environ.items() if k != "TESTBED_RUN"}
        logs = Path(run_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "view.log").open("ab") as log:  # its own session: the terminal's Ctrl-C is the harness's
            self.process = subprocess.Popen(
                [sys.executable, "-m", "testbed.view.server", str(run_dir), "--fd", str(sock.fileno())],
                pass_fds=[sock.fileno()], preexec_fn=die_with_parent, start_new_session=True, stdout=log,
                stderr=log, env=env)
        sock.close()  # the server holds its own copy

    def stop(self) -> dict:
        """SIGTERM (open pages get the final update), then what run.json keeps of the view."""
        cpu = _cpu_s(self.process.pid)
        stop_group([self.process], timeout=8)
        return {"address": self.address, "cpu_s": cpu, "exit": self.process.returncode}
