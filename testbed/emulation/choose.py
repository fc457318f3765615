"""Which backend and shaper a run uses, and why: the same answer for `doctor` and `run`.

Containernet ships its own fork of the `mininet` package, so it lives in a venv of its own
(docs/containernet.md) and the project's `.venv` cannot import it. `find_containernet()` finds that
venv's interpreter and checks it can run the project; `reexec_argv()` is how `testbed` re-runs
itself under it, so `make scenario` gets Docker hosts without the user switching venvs.
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
REEXEC_COMMANDS = ("run", "probe", "doctor")  # the commands that build networks or say which backend runs
PROJECT_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = PROJECT_ROOT / "requirements.txt"
CONSTRAINTS = PROJECT_ROOT / "images" / "containernet-constraints.txt"


@dataclass(frozen=True)
class Choice:
    value: str
    reason: str


@cache
def netem_available() -> bool:
    """Does this kernel have sch_netem? Asked of tc itself in a throwaway namespace."""
    from testbed.emulation import runstate

    ns = f"tbprobe{runstate.new_run_id()}"
    try:
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
            return False
        run = lambda *a: subprocess.run(["ip", "netns", "exec", ns, *a], capture_output=True, text=True)  # noqa: E731
        run("ip", "link", "add", "t0", "type", "veth", "peer", "name", "t1")
        result = run("tc", "qdisc", "add", "dev", "t0", "root", "netem", "delay", "1ms")
        return result.returncode == 0
    except OSError:
        return False
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements or constraints file (comments and blanks skipped)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[name.strip().lower()] = version.strip()
    return found


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
        pip = str(Path(self.python).parent / "pip") if self.python else "/opt/cn-venv/bin/pip"
        return f"{pip} install -r {REQUIREMENTS} -c {CONSTRAINTS}"

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
                               f"{DEFAULT_CONTAINERNET_PYTHON} does not exist (install: docs/containernet.md)")
        python, source = DEFAULT_CONTAINERNET_PYTHON, "the documented location"
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        return Install(python, source, error="not an executable file (install: docs/containernet.md)")
    wanted = {**pins(REQUIREMENTS), **pins(CONSTRAINTS)}
    try:
        out = subprocess.run([python, "-c", _INSPECT, json.dumps(wanted)], capture_output=True, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        found = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        return Install(python, source, error=f"cannot run it: {error}")
    if found["error"]:
        return Install(python, source, error=f"Containernet does not import ({found['error']}; "
                                             "install: docs/containernet.md)")
    return Install(python, source, missing=tuple(found["missing"]), other_versions=tuple(found["other"]))


def _asked_backend(args: list[str]) -> str:
    """`--backend`, else the scenario file's emulation.backend (unreadable files: validation says why)."""
    for i, arg in enumerate(args):
        if arg == "--backend" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--backend="):
            return arg.split("=", 1)[1]
    for arg in args[1:]:
        if arg.endswith((".yaml", ".yml")) and Path(arg).is_file():
            import yaml

            try:
                data = yaml.safe_load(Path(arg).read_text())
                return str(data.get("emulation", {}).get("backend", "auto"))
            except (yaml.YAMLError, AttributeError, OSError):
                return "auto"
    return "auto"


def reexec_argv(args: list[str]) -> tuple[list[str], dict[str, str]] | None:
    """The argv and environment to re-run `testbed args` under the Containernet venv, or None to
    go on here: when this interpreter lacks Containernet, the command builds a network (or is
    doctor), mininet was not asked for, a Containernet venv that can run the project exists and
    (but for doctor) a Docker engine answers: without one, Debian's Mininet here does the run.
    The project is made importable there by PYTHONPATH, not by installing it."""
    if (not args or args[0] not in REEXEC_COMMANDS or os.environ.get(REEXECUTED_ENV)
            or _asked_backend(args) == "mininet" or "--help" in args or containernet_importable_here()[0]):
        return None
    install = find_containernet()
    if not install.usable or Path(install.python).absolute() == Path(sys.executable).absolute():
        return None
    if args[0] != "doctor" and not docker_engine_running():
        return None
    env = dict(os.environ)
    env[REEXECUTED_ENV] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    code = "import sys; from testbed.cli import main; sys.argv[0] = 'testbed'; main()"
    return [install.python, "-c", code, *args], env


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
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_backend(requested: str = "auto") -> Choice:
    ok_cn, why_cn = containernet_importable()
    if requested == "containernet":
        if not ok_cn:
            return Choice("", f"containernet was asked for but {why_cn}")
        if not docker_engine_running():
            return Choice("", "containernet was asked for but no Docker engine answers (start dockerd)")
        return Choice("containernet", "asked for")
    ok_mn, why_mn = mininet_importable()
    if requested == "mininet":
        return Choice("mininet", "asked for") if ok_mn else Choice("", f"mininet was asked for but {why_mn}")
    if ok_cn and docker_engine_running():
        return Choice("containernet", "Containernet imports and a Docker engine answers")
    reason = why_cn if not ok_cn else "no Docker engine answers"
    if ok_mn:
        return Choice("mininet", f"{reason}: using network namespaces")
    return Choice("", f"no backend: {reason}; {why_mn}")


def choose_shaper(requested: str = "auto") -> Choice:
    has_netem = netem_available()
    if requested == "netem":
        return Choice("netem", "asked for") if has_netem else Choice("", "netem was asked for but this kernel has no sch_netem")
    if requested == "delayline":
        return Choice("delayline", "asked for")
    if has_netem:
        return Choice("netem", "the kernel has sch_netem")
    return Choice("delayline", "the kernel has no sch_netem: user-space delay line")
