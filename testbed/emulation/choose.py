"""Which backend and shaper a run uses, and why: the same answer for `doctor` and `run`."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import cache


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


def containernet_importable() -> tuple[bool, str]:
    try:
        from mininet.net import Containernet  # noqa: F401
        from mininet.node import Docker  # noqa: F401
    except ImportError as error:
        return False, f"Containernet is not importable ({error})"
    return True, "Containernet imports"


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
