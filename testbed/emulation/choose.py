"""Which backend and shaper a run uses, and why: the same answer for `doctor` and `run`.

Backends come from their registry (backends.BACKENDS), each saying whether it can run here; the
shaper is netem where the kernel has sch_netem, else the delay line shared by every link that
also routes between them (`routed`). Containernet imports only in a venv of its own, so `reexec_argv()` is
how `testbed` re-runs itself under that venv's interpreter, and `make scenario` gets Docker hosts
without the user switching venvs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from testbed.emulation import backends, installed
from testbed.emulation.installed import REEXECUTED_ENV, mininet_importable  # noqa: F401 - tests skip on choose.mininet_importable

REEXEC_COMMANDS = ("run", "probe", "doctor")  # the commands that build networks or say which backend runs


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
    doctor), no backend that runs without it was asked for, a Containernet venv that can run the project exists and
    (but for doctor) a Docker engine answers: without one, Debian's Mininet here does the run.
    The project is made importable there by PYTHONPATH, not by installing it."""
    if (not args or args[0] not in REEXEC_COMMANDS or os.environ.get(REEXECUTED_ENV)
            or not _may_need_containernet(_asked_backend(args)) or "--help" in args
            or installed.containernet_importable_here()[0]):
        return None
    install = installed.find_containernet()
    if not install.usable or Path(install.python).absolute() == Path(sys.executable).absolute():
        return None
    if args[0] != "doctor" and not installed.docker_engine_running():
        return None
    env = dict(os.environ)
    env[REEXECUTED_ENV] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(installed.PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    code = "import sys; from testbed.cli import main; sys.argv[0] = 'testbed'; main()"
    return [install.python, "-c", code, *args], env


def _may_need_containernet(asked: str) -> bool:
    """auto, a backend that imports only in the Containernet venv, or a name the run will reject."""
    return asked not in backends.BACKENDS or backends.BACKENDS[asked].needs_containernet_venv


def choose_backend(requested: str = "auto") -> Choice:
    """The backend asked for if it can run here; for auto, the first in the registry's order that
    can. The reason says why, or what is missing and its fix."""
    if requested != "auto":
        try:
            backend = backends.get(requested)
        except backends.UnknownBackend as error:
            return Choice("", str(error))
        ok, why = backend.available()
        return Choice(backend.name, "asked for") if ok else Choice("", f"{backend.name} was asked for but {why}")
    failed = []
    for backend in backends.BACKENDS.values():
        ok, why = backend.available()
        if ok:
            return Choice(backend.name, f"{'; '.join(failed)}: using {backend.node_kind}" if failed else why)
        failed.append(why)
    return Choice("", f"no backend: {'; '.join(failed)}")


def choose_shaper(requested: str = "auto") -> Choice:
    has_netem = netem_available()
    if requested == "netem":
        return Choice("netem", "asked for") if has_netem else Choice("", "netem was asked for but this kernel has no sch_netem")
    if requested in ("routed", "shared", "delayline"):
        return Choice(requested, "asked for")
    if has_netem:
        return Choice("netem", "the kernel has sch_netem")
    return Choice("routed", "the kernel has no sch_netem: user-space delay line, one process for every link "
                  "that also does the site routers' forwarding")
