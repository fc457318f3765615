"""Containernet: every node is a Docker container built from images/<role>/Dockerfile.

Containernet names containers `mn.<node>`, which would collide between two runs at once, and its
labels are fixed; the host class below names them `tb<run-id>.<node>` and puts the run tag in the
container's environment, so `testbed clean` finds them by name and every process inside carries
the tag like a Mininet node's. Processes start through `docker exec` in the project's source,
mounted read-only, with the image's venv (IMAGE_PYTHON).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from testbed.emulation import installed, runstate
from testbed.emulation.backends.base import Backend, Check
from testbed.emulation.images import ROLES, image_name

# The same settings as network.NODE_SYSCTLS for namespace hosts; Docker applies them at creation.
DOCKER_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
                  "net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 65536 33554432",
                  "net.ipv4.tcp_congestion_control": "cubic"}
ROLE_IMAGES = {"cloud": "cloud", "broker": "broker", "storage": "broker", "nc-proxy": "nc-proxy"}  # storage: nats-server
DEFAULT_IMAGE_ROLE = "client"
IMAGE_PYTHON = "/opt/venv/bin/python"  # the project's venv in images/project
PROJECT_SOURCE = installed.PROJECT_ROOT  # the repository root (holds testbed/)
SOURCE_MOUNT = "/opt/testbed-live"
START_ENGINE = ".venv/bin/python -c 'from testbed.emulation.docker_engine import start_engine; start_engine()'"


class ContainernetBackend(Backend):
    name = "containernet"
    node_kind = "Docker containers"
    needs_containernet_venv = True  # it ships its own fork of the `mininet` package

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = installed.containernet_importable()
        if not ok and not installed.find_containernet().usable:
            return False, why  # what is missing where, and the command that installs it
        if not installed.docker_engine_running():
            return False, f"Containernet is installed but no Docker engine answers (start it: {START_ENGINE})"
        if not ok:
            return False, why  # usable in its venv: `testbed` re-runs itself there
        return True, "Containernet imports and a Docker engine answers"

    @classmethod
    def checks(cls) -> list[Check]:
        """Containernet itself, then what it needs besides, each with its fix."""
        from testbed.emulation import docker_engine

        engine = installed.docker_engine_running()
        brctl = bool(shutil.which("brctl"))
        checks = [
            ("Containernet", installed.containernet_importable()),
            ("Docker engine", (engine, "docker info answers" if engine else
                               f"no Docker engine answers (apt-get install docker.io; start it: {START_ENGINE})")),
            ("brctl (bridge-utils)", (brctl, "brctl found" if brctl else
                                      "brctl not found: Containernet's LinuxBridge needs it (apt-get install bridge-utils)")),
            ("Docker bridged frames", docker_engine.bridged_traffic_state()),
        ]
        if engine:
            problems = image_problems(set(ROLES))
            checks.append(("Docker images", (not problems, "; ".join(problems) or "role images built from this checkout")))
        return checks

    def preflight(self, topology) -> list[str]:
        return image_problems({node.role for node in topology.nodes.values()}, self.images)

    def net_class(self) -> type:
        from mininet.net import Containernet

        return Containernet

    def add_host(self, net, name: str, role: str):
        run_dir = Path(self.log_dir).parent if self.log_dir else None
        return add_docker_host(net, name, role, self.run_id, self.images, run_dir)

    @property
    def python(self) -> str:
        return IMAGE_PYTHON

    def popen(self, host, argv: list, **kwargs) -> subprocess.Popen:
        # Not Containernet's Docker.popen: its `docker exec -t` merges stderr into stdout through a
        # TTY, and callers read their process's first stdout line. Same defaults as Mininet's popen.
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        process = subprocess.Popen(exec_argv(host, argv), **kwargs)
        plain = process.send_signal
        node_pid, args = host.pid, [str(a) for a in argv]

        def send_signal(sig: int) -> None:
            if process.poll() is None and not signal_inside(node_pid, args, sig):
                plain(sig)

        process.send_signal = send_signal
        return process


def image_for(role: str, images: dict[str, str] | None = None) -> str:
    images = images or {}
    image_role = ROLE_IMAGES.get(role, DEFAULT_IMAGE_ROLE)
    return images.get(image_role, image_name(image_role))


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
    from testbed.emulation.netns import running_in

    sent = False
    for pid in running_in(node_pid, argv):
        try:
            os.kill(pid, sig)
            sent = True
        except OSError:
            continue
    return sent


def image_problems(roles: set[str], images: dict[str, str] | None = None) -> list[str]:
    """What is wrong with the images the topology needs: missing, or built from other requirements
    than this checkout's (`make images` fixes both)."""
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
