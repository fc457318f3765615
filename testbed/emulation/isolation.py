"""An isolated namespace-server's own view of the machine, made before its sshd starts.

Run as the first process of a new PID and mount namespace (`unshare --pid --mount --fork
--mount-proc`, see servers.up): it hides what another machine would not share with the harness,
then becomes the server's sshd. What the server sees afterwards:

- its own processes only (its /proc), so a pid the harness got from it names nothing here;
- its own empty /tmp, /run/testbed and <project>/results, so every file a node reads must be
  shipped to it and every file a node writes must be gathered from it, as with a real machine;
- the project itself at the same path (a real server has its own checkout there).

The sshd's own files (config, host key, authorized key) live under /run/testbed, which is hidden:
they are read first and written again into the server's own /run/testbed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PRIVATE = (Path("/tmp"), Path("/run/testbed"))  # a tmpfs of the server's own over each
STAGE = Path("/mnt")  # where the project is held while /tmp is covered (it may live under /tmp)


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"isolation: mount {' '.join(args)}: {done.stderr.strip()}")


def isolate(project: Path, keep: list[Path]) -> None:
    """Cover PRIVATE and <project>/results with tmpfs, keep the project visible at its path, and
    put `keep` (files under the covered directories) back where they were."""
    saved = {path: path.read_bytes() for path in keep}
    _mount("--make-rprivate", "/")
    _mount("--rbind", str(project), str(STAGE))
    for directory in PRIVATE:
        _mount("-t", "tmpfs", "-o", "mode=1777" if directory == Path("/tmp") else "mode=755",
               f"testbed-{directory.name}", str(directory))
    project.mkdir(parents=True, exist_ok=True)
    _mount("--move", str(STAGE), str(project))
    (project / "results").mkdir(exist_ok=True)
    _mount("-t", "tmpfs", "testbed-results", str(project / "results"))
    for path, data in saved.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, 0o600)


def main(argv: list[str]) -> None:
    """`python -m testbed.emulation.isolation PROJECT KEEP... -- COMMAND...`: isolate, then exec COMMAND."""
    split = argv.index("--")
    project, keep, command = Path(argv[0]), [Path(p) for p in argv[1:split]], argv[split + 1:]
    isolate(project, keep)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
