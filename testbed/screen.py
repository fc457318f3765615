"""What the testbed prints for people, read in a terminal or from a pipe or a log.

Rich cuts a cell that does not fit its column ("10.1.0.…", "nc-pro…") and, when its output is not
a terminal, draws at 80 columns. Here a table folds a long cell onto the next line instead, and
output that is not a terminal is as wide as COLUMNS says, else WIDE: a logged end screen keeps
every address and topic name whole.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.table import Table as RichTable

WIDE = 200  # columns when the output is a pipe or a file and COLUMNS says nothing


class Table(RichTable):
    """rich's Table whose columns fold a long cell rather than cut it (overflow="fold")."""

    def add_column(self, *args, overflow: str = "fold", **kwargs) -> None:
        super().add_column(*args, overflow=overflow, **kwargs)


def console(*, stderr: bool = False, **kwargs) -> Console:
    """A rich Console; on a pipe or a file (not a terminal) as wide as COLUMNS, else WIDE, unless
    a width is given."""
    stream = sys.stderr if stderr else sys.stdout
    if kwargs.get("width") is None and not (stream is not None and stream.isatty()):
        columns = os.environ.get("COLUMNS", "")
        kwargs["width"] = int(columns) if columns.isdigit() and int(columns) > 0 else WIDE
    return Console(stderr=stderr, **kwargs)
