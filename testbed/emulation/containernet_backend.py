"""Containernet specifics: nodes as Docker containers built from images/<role>/Dockerfile.

Containernet names containers `mn.<node>`, which would collide between two runs at once, and its
labels are fixed; the subclass below names them `tb<run-id>.<node>` and puts the run tag in the
container's environment, so `testbed clean` finds them by name and every process inside carries
the tag like a Mininet node's.
"""

from __future__ import annotations

from testbed.emulation import runstate

# The same settings as NODE_SYSCTLS for namespace hosts; Docker applies them at creation.
DOCKER_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
                  "net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 65536 33554432"}
ROLE_IMAGES = {"cloud": "cloud", "broker": "broker", "nc-proxy": "nc-proxy"}
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


def add_docker_host(net, name: str, role: str, run_id: str, images: dict[str, str] | None = None):
    """A container for one node: no Docker network (the emulator gives it eth0), net_admin only."""
    return net.addDocker(name, cls=_docker_class(), run_id=run_id, dimage=image_for(role, images), ip=None,
                         network_mode="none", sysctls=DOCKER_SYSCTLS)


def missing_images(roles: set[str], images: dict[str, str] | None = None) -> list[str]:
    """Images the topology needs that the Docker engine does not have."""
    from testbed.emulation import docker_engine

    needed = sorted({image_for(role, images) for role in roles})
    return [image for image in needed if not docker_engine.image_exists(image)]
