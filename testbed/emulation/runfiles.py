"""The run directory on servers whose file system is not the harness's (other machines, isolated
namespace-servers): the same path there, made at the start, fed with what the harness writes for
the nodes (plans, configurations, the common start time), and gathered back at the end.

Nodes write their traces, logs and records where they run; the harness's own copies of their
stdout and stderr are written here. Gathering merges each server's directory into the harness's:
a file only there is taken, a file the same on both is left, and a log both wrote to (a process's
stderr here, its own log file there) keeps ours with theirs appended, once: gathering again (`testbed
gather`, after a harness that died or a server that did not answer) changes nothing already here.
An earlier gather may have copied a file the server was still writing: what of theirs ours already
ends with (from a line start on: a copy cut mid-line included) is not appended again, only the rest,
so a trace gathered twice has each row once.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from testbed.emulation.servers import Server, ServerError, run

SHIP_TIMEOUT_S = 30.0
GATHER_TIMEOUT_S = 600.0


class RunFiles:
    """`run_dir` on `servers` (each reached over ssh through `control_dir`)."""

    def __init__(self, servers: list[Server], control_dir: Path | None, run_dir: Path):
        self.servers, self.control_dir, self.run_dir = servers, control_dir, Path(run_dir)

    def prepare(self, *subdirs: str) -> None:
        """The run directory and `subdirs` of it on every server (a process opens its log there)."""
        paths = [str(self.run_dir)] + [str(self.run_dir / d) for d in subdirs]
        for server in self.servers:
            run(server, "mkdir -p " + " ".join(shlex.quote(p) for p in paths), self.control_dir)

    def ship(self, path: Path) -> None:
        """A file the harness wrote for the nodes, at the same path on every server at once (each
        written aside and renamed: a process polling for it never reads half)."""
        data, target = Path(path).read_bytes(), shlex.quote(str(path))
        command = (f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {target}.part && "
                   f"mv {target}.part {target}")
        failures: list[str] = []

        def send(server: Server) -> None:
            try:
                done = subprocess.run(server.ssh(self.control_dir) + [command], input=data, capture_output=True,
                                      timeout=SHIP_TIMEOUT_S)
                if done.returncode != 0:
                    failures.append(f"{server.name}: {done.stderr.decode(errors='replace').strip()[-300:]}")
            except subprocess.TimeoutExpired:
                failures.append(f"{server.name}: no answer in {SHIP_TIMEOUT_S:.0f} s")

        threads = [threading.Thread(target=send, args=(s,)) for s in self.servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise ServerError(f"cannot write {path} on the servers: " + "; ".join(failures))

    def gather(self) -> list[str]:
        """Every server's run directory merged into ours; what could not be gathered, by server
        (the rest is kept: one slow or lost server does not cost the others' results)."""
        problems = []
        for server in self.servers:
            with tempfile.TemporaryDirectory(prefix="testbed-gather-") as scratch:
                try:
                    fetched = subprocess.run(server.ssh(self.control_dir) + [
                        f"tar -C {shlex.quote(str(self.run_dir))} -cf - ."], capture_output=True,
                        timeout=GATHER_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    problems.append(f"{server.name}: its run directory did not arrive in {GATHER_TIMEOUT_S:.0f} s")
                    continue
                if fetched.returncode != 0:
                    problems.append(f"{server.name}: {fetched.stderr.decode(errors='replace').strip()[-300:]}")
                    continue
                unpacked = subprocess.run(["tar", "-C", scratch, "-xf", "-"], input=fetched.stdout, capture_output=True)
                if unpacked.returncode != 0:
                    problems.append(f"{server.name}: {unpacked.stderr.decode(errors='replace').strip()[-300:]}")
                    continue
                merge(Path(scratch), self.run_dir)
        return problems


def merge(source: Path, target: Path) -> None:
    """Files of `source` into `target` (see the module's docstring for a file in both)."""
    for path in sorted(source.rglob("*")):
        if path.is_dir() or path.is_symlink():
            continue
        into = target / path.relative_to(source)
        if not into.exists():
            into.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), into)
        else:
            _append_new(into, path)


def _append_new(into: Path, path: Path) -> None:
    """What `path` (theirs) holds beyond the part of it that `into` (ours) already ends with: all of
    it the first time, the rows written since an earlier gather, nothing the second time."""
    ours, theirs = into.read_bytes(), path.read_bytes()
    held = _held(ours, theirs)
    if held == len(theirs):
        return
    if held == len(ours):  # ours is an earlier, partial copy of theirs (or empty)
        shutil.copyfile(path, into)
        return
    with into.open("ab") as handle:
        handle.write((b"" if held or ours.endswith(b"\n") else b"\n") + theirs[held:])


def _held(ours: bytes, theirs: bytes) -> int:
    """How much of the start of `theirs` ends `ours`, from a line start of ours on (the longest
    such part; 0 if none). An append always begins on a new line, so a part that begins mid-line
    of ours is ours, not an earlier copy of theirs."""
    if not ours or not theirs:
        return 0
    head = theirs[:theirs.find(b"\n") + 1] or theirs  # their first line, whole or as far as it goes
    at = ours.find(head)
    while at >= 0:  # earliest first: the longest part
        if (at == 0 or ours[at - 1] == 10) and theirs.startswith(ours[at:]):
            return len(ours) - at
        at = ours.find(head, at + 1)
    last = ours.rfind(b"\n") + 1  # a part shorter than their first line is a cut copy of it
    return len(ours) - last if last < len(ours) and head.startswith(ours[last:]) else 0
