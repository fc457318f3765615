"""Containernet specifics: nodes as Docker containers built from images/<role>/Dockerfile.

Containernet names containers `mn.<node>`, which would collide between two runs at once, and its
labels are fixed; the subclass below names them `tb<run-id>.<node>` and puts the run tag in the
container's environment, so `testbed clean` finds them by name and every process inside carries
the tag like a Mininet node's.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from testbed.emulation import runstate

# The same settings as NODE_SYSCTLS for namespace hosts; Docker applies them at creation.
DOCKER_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
                  "net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 65536 33554432"}
ROLE_IMAGES = {"cloud": "cloud", "broker": "broker", "nc-proxy": "nc-proxy"}
IMAGE_PYTHON = "/opt/venv/bin/python"  # the project's venv in images/project
PROJECT_SOURCE = Path(__file__).resolve().parents[2]  # the repository root (holds testbed/)
SOURCE_MOUNT = "/opt/testbed-live"
DEFAULT_IMAGE_ROLE = "client"


def image_for(role: str, images: dict[str, str] | None = None) -> str:
    images = images or {}
    image_role = ROLE_IMAGES.get(role, DEFAULT_IMAGE_ROLE)
    return images.get(image_role, f"testbed/{image_role}:latest")


def _docker_class():
    from mininet.node import Docker

    class RunDocker(Docker):
        """Docker host named and tagged with the run id."""

        def __init__(self, name, run_id: str, **kwargs):
            self._tb_prefix = runstate.container_prefix(run_id)
            environment = dict(kwargs.pop("environment", None) or {})
            environment[runstate.ENV_TAG] = run_id
            super().__init__(name, environment=environment, **kwargs)

        @property
        def dnameprefix(self):  # Containernet assigns "mn" in __init__; keep ours
            return self._tb_prefix

        @dnameprefix.setter
        def dnameprefix(self, _value):
            pass

    return RunDocker


def add_docker_host(net, name: str, role: str, run_id: str, images: dict[str, str] | None = None,
                    run_dir: Path | None = None):
    """A container for one node: no Docker network (the emulator gives it eth0), net_admin only.

    The run's results directory is mounted at the same path, so the paths the harness hands to the
    processes (traces, events, logs, ZooKeeper's data) mean the same inside; the project's source is
    mounted read-only first on PYTHONPATH, so containers run the harness's code, not the copy
    baked into the image when it was built (the image still provides the dependencies)."""
    prepare_host()
    volumes = [f"{PROJECT_SOURCE}:{SOURCE_MOUNT}:ro"]
    if run_dir is not None:
        volumes.append(f"{Path(run_dir).resolve()}:{Path(run_dir).resolve()}:rw")
    return net.addDocker(name, cls=_docker_class(), run_id=run_id, dimage=image_for(role, images), ip=None,
                         network_mode="none", sysctls=DOCKER_SYSCTLS, volumes=volumes,
                         environment={"PYTHONPATH": SOURCE_MOUNT})


@cache
def prepare_host() -> str:
    """Once per process, before the first container and its links: let frames that a host bridge
    forwards pass Docker's FORWARD DROP (docker_engine.allow_bridged_traffic; idempotent, left in
    place). The run's own switches are bridges inside its namespaces, which Docker's rules do not
    reach, but Containernet's own LinuxBridge switches (and `--interactive` experiments) need it."""
    from testbed.emulation.docker_engine import allow_bridged_traffic

    return allow_bridged_traffic()


def relative_paths(argv: list, cwd: Path | None = None) -> list[str]:
    """Arguments (or the value of `--opt=value`) that are relative paths into the harness's working
    directory: inside a container they would resolve in the read-only source mount instead."""
    cwd = Path(cwd or os.getcwd())
    found = []
    for arg in argv:
        text = str(arg)
        value = text.split("=", 1)[1] if text.startswith("-") and "=" in text else text
        if isinstance(arg, Path) and not arg.is_absolute():
            found.append(text)
        elif "/" in value and not value.startswith("/") and (cwd / value.split("/", 1)[0]).exists():
            found.append(text)
    return found


def exec_argv(host, argv: list) -> list[str]:
    """`docker exec` of argv in a Containernet host's container, without a TTY, in the mounted
    source (`python -m` puts the working directory first on sys.path). Refuses relative paths:
    the process starts in the read-only source mount, not in the harness's working directory."""
    relative = relative_paths(argv)
    if relative:
        raise ValueError(f"relative path(s) {', '.join(relative)} handed to a process in container "
                         f"{host.name}: they would point into the read-only mount {SOURCE_MOUNT}; pass absolute paths")
    return ["docker", "exec", "-w", SOURCE_MOUNT, f"{host.dnameprefix}.{host.name}", *[str(a) for a in argv]]


def signal_inside(node_pid: int, argv: list[str], sig: int) -> bool:
    """Send `sig` to the process running `argv` inside a container. `docker exec` does not forward
    signals, so terminating the exec client would leave the process running (and a workload would
    never print its summary). False when no such process runs."""
    import os

    from testbed.emulation.netns import pids_in

    wanted = "\0".join(argv)
    sent = False
    for pid in pids_in(node_pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0") == wanted:
                os.kill(pid, sig)
                sent = True
        except OSError:
            continue
    return sent


def image_problems(roles: set[str], images: dict[str, str] | None = None) -> list[str]:
    """What is wrong with the images the topology needs: missing, or built from other requirements
    than this checkout's (`make images` fixes both)."""
    import subprocess

    from testbed.emulation.images import REQUIREMENTS_LABEL, requirements_digest

    want = requirements_digest()
    problems = []
    for image in sorted({image_for(role, images) for role in roles}):
        out = subprocess.run(["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{REQUIREMENTS_LABEL}"}}}}',
                              image], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            problems.append(f"image {image} is missing (make images)")
        elif out.stdout.strip() != want:
            problems.append(f"image {image} was built from other requirements than this checkout's (make images)")
    return problems
