"""Third-party libraries' log records from the harness process go to the run's log files, never to
the progress display.

The harness itself talks to ZooKeeper (kazoo: the probe that waits for the server, `testbed topic`)
and to NATS (nats-py, from benchmarks). Their warnings are routine there: the probe's first
connections are dropped while ZooKeeper is still starting ("Connection dropped: socket connection
broken"). They used to land on the console, without a newline, glued to the next progress line:
Mininet's log module calls `logging.setLoggerClass` when imported, so every logger created after it
(kazoo's among them) gets its own stderr handler that writes no newline, at its own level, which a
parent's level does not override. `route_library_logs` undoes that class and gives each library one
file handler.
"""

from __future__ import annotations

import logging
from pathlib import Path

LIBRARIES = ("kazoo", "nats")
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


def _plain_loggers() -> None:
    """Loggers created from now on are plain: Mininet's import-time `setLoggerClass` is undone (its
    module is imported first, as a module runs once, so a later import cannot redo it)."""
    try:
        import mininet.log  # noqa: F401
    except ImportError:
        pass
    logging.setLoggerClass(logging.Logger)


def route_library_logs(log_dir: Path, libraries: tuple[str, ...] = LIBRARIES,
                       level: int = logging.WARNING) -> Path:
    """Send the `libraries`' records at `level` and above to `log_dir`/harness-libraries.log, and
    nowhere else. Loggers those libraries already made lose their console handlers and their own
    level, so that their records reach the file; calling again (a second run in the same process)
    moves the file. Returns the file's path."""
    _plain_loggers()
    path = Path(log_dir) / "harness-libraries.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.testbed_route = True  # type: ignore[attr-defined]  (found and replaced by the next call)
    existing = logging.Logger.manager.loggerDict
    for library in libraries:
        top = logging.getLogger(library)
        for old in [h for h in top.handlers if _is_console(h) or getattr(h, "testbed_route", False)]:
            top.removeHandler(old)
            if getattr(old, "testbed_route", False):
                old.close()
        top.addHandler(handler)
        top.setLevel(level)
        top.propagate = False
        for name, child in list(existing.items()):
            if name.startswith(library + ".") and isinstance(child, logging.Logger):
                for old in [h for h in child.handlers if _is_console(h)]:
                    child.removeHandler(old)
                child.setLevel(logging.NOTSET)
                child.propagate = True
    return path
