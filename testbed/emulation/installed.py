"""What this machine has for the backends: Mininet, Containernet (here or in a venv of its own), a
Docker engine. Plain probes, each saying what it found and why; the backends' `available()` and
`checks()` (backends/) and the re-run under the Containernet venv (choose.py) are built on them.

Containernet ships its own fork of the `mininet` package, so it lives in a venv of its own
(docs/containernet.md) and the project's `.venv` cannot import it. `find_containernet()` finds that
venv's interpreter and checks it can run the project; choose.reexec_argv() re-runs `testbed` there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CONTAINERNET_PYTHON_ENV = "TESTBED_CONTAINERNET_PYTHON"
DEFAULT_CONTAINERNET_PYTHON = "/opt/cn-venv/bin/python"  # where docs/containernet.md installs it
REEXECUTED_ENV = "TESTBED_REEXECUTED"  # set in the re-run process, so it never re-runs itself again
PROJECT_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = PROJECT_ROOT / "requirements.txt"
CONSTRAINTS = PROJECT_ROOT / "images" / "containernet-constraints.txt"
# Distributions of requirements.txt that the Containernet venv does not get. selenium drives the live
# view's browser tests, which run in .venv, never in that venv; its 4.51 needs urllib3 >= 2.6.3, and the
# docker SDK 6.0.1 that Containernet pins breaks with urllib3 2 (images/containernet-constraints.txt).
# pandas is for reading results by hand (docs/guide/results.md), in .venv; no node imports it.
NOT_IN_CONTAINERNET_VENV = frozenset({"selenium", "pandas"})
INSTALL = "make containernet CONTAINERNET_SRC=<its checkout> (docs/containernet.md)"


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements or constraints file (comments and blanks skipped)."""
    return pins_of(path.read_text().splitlines())


def pins_of(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[name.strip().lower()] = version.strip()
    return found


def containernet_requirements() -> list[str]:
    """requirements.txt's lines that the Containernet venv gets (all but NOT_IN_CONTAINERNET_VENV)."""
    lines = (line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return [pin for pin in lines if pin and pin.split("==", 1)[0].strip().lower() not in NOT_IN_CONTAINERNET_VENV]


def wanted_in_containernet_venv() -> dict[str, str]:
    """What the Containernet venv must hold, name -> version: its constraints win over requirements.txt."""
    project = {name: version for name, version in pins(REQUIREMENTS).items() if name not in NOT_IN_CONTAINERNET_VENV}
    return {**project, **pins(CONSTRAINTS)}


# Run with the candidate interpreter: does Containernet import, and which pinned distributions are
# absent or at another version. Prints one JSON object.
_INSPECT = r"""
import json, sys
from importlib.metadata import PackageNotFoundError, version
out = {"error": "", "missing": [], "other": []}
try:
    from mininet.net import Containernet
    from mininet.node import Docker
except Exception as error:
    out["error"] = f"{type(error).__name__}: {error}"
for name, pin in json.loads(sys.argv[1]).items():
    try:
        have = version(name)
    except PackageNotFoundError:
        out["missing"].append(name)
        continue
    if have != pin:
        out["other"].append(f"{name} {have} (pinned {pin})")
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Install:
    """A Containernet installation outside this venv, as found and checked."""

    python: str  # "" when none was found
    source: str  # where the path came from
    error: str = ""  # why it cannot run the project ("" when it can)
    missing: tuple[str, ...] = ()  # the project's pinned distributions absent there
    other_versions: tuple[str, ...] = ()  # present at another version than pinned (a warning)

    @property
    def usable(self) -> bool:
        return bool(self.python) and not self.error and not self.missing

    @property
    def fix(self) -> str:
        python = f" CN_PYTHON={self.python}" if self.python and self.python != DEFAULT_CONTAINERNET_PYTHON else ""
        return f"make -C {PROJECT_ROOT} containernet-deps{python}"

    def describe(self) -> str:
        if not self.python:
            return self.source
        where = f"{self.python} ({self.source})"
        if self.error:
            return f"{where}: {self.error}"
        if self.missing:
            return f"{where} has Containernet but not the project's requirements {', '.join(self.missing)}; fix: {self.fix}"
        text = f"{where} has Containernet and the project's requirements"
        if self.other_versions:
            text += f" (other versions: {', '.join(self.other_versions)}; to match: {self.fix})"
        return text


@cache
def find_containernet() -> Install:
    """The interpreter of a Containernet venv: $TESTBED_CONTAINERNET_PYTHON, else the documented
    /opt/cn-venv/bin/python if it exists; checked by running it (imports and pinned versions)."""
    python = os.environ.get(CONTAINERNET_PYTHON_ENV, "")
    source = f"${CONTAINERNET_PYTHON_ENV}"
    if not python:
        if not Path(DEFAULT_CONTAINERNET_PYTHON).exists():
            return Install("", f"no Containernet venv: {CONTAINERNET_PYTHON_ENV} is unset and "
                               f"{DEFAULT_CONTAINERNET_PYTHON} does not exist (install: {INSTALL})")
        python, source = DEFAULT_CONTAINERNET_PYTHON, "the documented location"
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        return Install(python, source, error=f"not an executable file (install: {INSTALL})")
    wanted = wanted_in_containernet_venv()
    try:
        out = subprocess.run([python, "-c", _INSPECT, json.dumps(wanted)], capture_output=True, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        found = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        return Install(python, source, error=f"cannot run it: {error}")
    if found["error"]:
        return Install(python, source, error=f"Containernet does not import ({found['error']}; "
                                             f"install: {INSTALL})")
    return Install(python, source, missing=tuple(found["missing"]), other_versions=tuple(found["other"]))


def containernet_importable_here() -> tuple[bool, str]:
    try:
        from mininet.net import Containernet  # noqa: F401
        from mininet.node import Docker  # noqa: F401
    except ImportError as error:
        return False, f"Containernet is not importable ({error})"
    return True, f"Containernet imports in {sys.executable}"


def containernet_importable() -> tuple[bool, str]:
    """Containernet in this interpreter; when not, what the Containernet venv check found."""
    ok, why = containernet_importable_here()
    if ok:
        rerun = os.environ.get(REEXECUTED_ENV)
        return True, why + (f" (testbed re-ran itself here from {rerun})" if rerun else "")
    install = find_containernet()
    if install.usable:
        return False, (f"Containernet is not importable in {sys.executable}; {install.describe()}: "
                       "the `testbed` command re-runs itself there (run, probe, doctor)")
    return False, f"Containernet is not importable in {sys.executable}; {install.describe()}"


def mininet_importable() -> tuple[bool, str]:
    try:
        import mininet.net  # noqa: F401
    except ImportError as error:
        return False, f"Mininet is not importable ({error}); apt-get install mininet"
    if not shutil.which("mnexec"):
        return False, "mnexec is missing; apt-get install mininet"
    return True, "Mininet imports and mnexec is installed"


def docker_engine_running() -> bool:
    """`docker info` answers (a loaded engine can take seconds: 10 s allowed)."""
    from testbed.emulation.docker_engine import engine_running

    return engine_running(timeout_s=10.0)


if __name__ == "__main__":  # `make containernet-deps`: run as a file, before the venv can import the package
    if sys.argv[1:] != ["requirements"]:
        sys.exit(f"usage: python {__file__} requirements")
    print("\n".join(containernet_requirements()))
