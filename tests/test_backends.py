"""The backend registry and the one interface behind it (pure: no root, no Mininet, no Docker)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

from testbed.emulation import backends, choose
from testbed.emulation.backends import containernet
from testbed.emulation.backends.base import Backend
from testbed.emulation.network import Network
from testbed.emulation.shaping import SHAPERS
from testbed.scenario.model import Emulation


def test_the_registry_is_keyed_by_each_backends_name_and_every_class_is_complete():
    assert backends.names() == tuple(backends.BACKENDS) and set(backends.names()) == {"containernet", "mininet"}
    for name, cls in backends.BACKENDS.items():
        assert issubclass(cls, Backend) and cls.name == name and cls.node_kind
        assert not cls.__abstractmethods__, f"{name} leaves {sorted(cls.__abstractmethods__)} unimplemented"
        assert cls("ab12cd").run_id == "ab12cd"
    assert backends.get("mininet") is backends.BACKENDS["mininet"]


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(backends.UnknownBackend, match="'docker'.*containernet, mininet"):
        backends.get("docker")
    choice = choose.choose_backend("docker")
    assert choice.value == "" and "unknown backend 'docker'" in choice.reason


def test_the_scenario_schema_lists_the_registered_backends_and_shapers():
    """scenario/model.py sits below emulation/ and cannot import the registries: held to them here."""
    assert set(get_args(Emulation.model_fields["backend"].annotation)) == {"auto", *backends.names()}
    assert set(get_args(Emulation.model_fields["shaper"].annotation)) == {"auto", *SHAPERS}


def _fake(name: str, ok: bool, why: str) -> type[Backend]:
    class Fake(backends.MininetBackend):
        node_kind = f"{name} nodes"

        @classmethod
        def available(cls):
            return ok, why

    Fake.name = name
    return Fake


@pytest.fixture
def registry(monkeypatch):
    """Replace the registry by fakes, in the order `auto` tries them."""

    def use(*classes):
        monkeypatch.setattr(backends, "BACKENDS", {cls.name: cls for cls in classes})

    return use


def test_auto_takes_the_first_backend_that_runs_here_and_says_why(registry):
    registry(_fake("a", True, "a works"), _fake("b", True, "b works"))
    assert choose.choose_backend() == choose.Choice("a", "a works")
    registry(_fake("a", False, "a lacks x"), _fake("b", False, "b lacks y"), _fake("c", True, "c works"))
    assert choose.choose_backend() == choose.Choice("c", "a lacks x; b lacks y: using c nodes")
    registry(_fake("a", False, "a lacks x"), _fake("b", False, "b lacks y"))
    assert choose.choose_backend() == choose.Choice("", "no backend: a lacks x; b lacks y")


def test_a_backend_asked_for_is_used_only_if_it_runs_here(registry):
    registry(_fake("a", True, "a works"), _fake("b", False, "b lacks y (install y)"))
    assert choose.choose_backend("a") == choose.Choice("a", "asked for")
    assert choose.choose_backend("b") == choose.Choice("", "b was asked for but b lacks y (install y)")


class Recorder(backends.MininetBackend):
    """A backend that records what the network asks of it."""

    def __init__(self, run_id: str):
        super().__init__(run_id)
        self.calls = []

    def popen(self, host, argv, **kwargs):
        self.calls.append((host, argv, kwargs))
        return "process"


def test_the_network_runs_processes_through_its_backend_with_the_run_tag():
    backend = Recorder("ab12cd")
    network = Network(SimpleNamespace(nodes={}, sites={}), "ab12cd", backend, "netem")
    network.nodes["n1"] = host = SimpleNamespace(name="n1")
    assert network.popen("n1", ["python", "-V"], cwd="/") == "process"
    (call,) = backend.calls
    assert call[0] is host and call[1] == ["python", "-V"]
    assert call[2]["env"]["TESTBED_RUN"] == "ab12cd" and call[2]["cwd"] == "/"
    assert network.python == sys.executable


def test_mininet_nodes_run_the_harnesss_python_through_mininets_popen():
    backend = backends.get("mininet")("ab12cd")
    host = SimpleNamespace(popen=lambda argv, **kwargs: (argv, kwargs))
    assert backend.popen(host, ["x"], env={"A": "1"}) == (["x"], {"env": {"A": "1"}})
    assert backend.python == sys.executable and backend.preflight(SimpleNamespace(nodes={})) == []


def test_containers_run_the_images_python_and_mount_the_run_directory(monkeypatch, tmp_path):
    monkeypatch.setattr(containernet, "prepare_host", lambda: "")
    monkeypatch.setattr(containernet, "_docker_class", lambda: "RunDocker")
    added = {}
    net = SimpleNamespace(addDocker=lambda name, **kwargs: added.update(name=name, **kwargs) or "host")
    backend = backends.get("containernet")("ab12cd", log_dir=tmp_path / "run" / "logs", images={"broker": "mine:1"})
    assert backend.add_host(net, "bzone1", "broker") == "host"
    assert added["name"] == "bzone1" and added["run_id"] == "ab12cd" and added["dimage"] == "mine:1"
    run_dir = (tmp_path / "run").resolve()
    assert f"{run_dir}:{run_dir}:rw" in added["volumes"]
    assert added["volumes"][0].endswith(f":{containernet.SOURCE_MOUNT}:ro")
    assert backend.python == containernet.IMAGE_PYTHON


def test_images_are_chosen_by_role_with_the_clients_image_for_any_other_role():
    assert containernet.image_for("broker") == "testbed/broker:latest"
    assert containernet.image_for("uav-swarm") == containernet.image_for("client") == "testbed/client:latest"
    assert containernet.image_for("cloud", {"cloud": "other:2"}) == "other:2"


def test_preflight_asks_for_the_images_of_the_topologys_roles(monkeypatch):
    asked = []
    monkeypatch.setattr(containernet, "image_problems", lambda roles, images: asked.append(roles) or ["no image"])
    topology = SimpleNamespace(nodes={"a": SimpleNamespace(role="broker"), "b": SimpleNamespace(role="uav-swarm")})
    assert backends.get("containernet")("ab12cd").preflight(topology) == ["no image"]
    assert asked == [{"broker", "uav-swarm"}]


def test_a_container_process_is_signalled_inside_not_through_its_exec_client(monkeypatch):
    """`docker exec` does not forward signals: terminate must reach the process in the container."""
    sent = []
    monkeypatch.setattr(containernet, "exec_argv", lambda host, argv: ["sleep", "30"])
    monkeypatch.setattr(containernet, "signal_inside", lambda pid, argv, sig: sent.append((pid, argv, sig)) or True)
    host = SimpleNamespace(pid=4242)
    process = containernet.ContainernetBackend("ab12cd").popen(host, ["python", Path("/x")])
    try:
        assert process.stdout is not None and process.stderr is not None  # pipes, as Mininet's popen
        process.terminate()
        assert sent == [(4242, ["python", "/x"], signal.SIGTERM)]
        time.sleep(0.1)
        assert process.poll() is None  # the exec client itself was left alone
        monkeypatch.setattr(containernet, "signal_inside", lambda pid, argv, sig: False)
        process.terminate()  # nothing inside matched: the client gets it
        assert process.wait(timeout=5) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()


def test_the_registry_imports_without_the_backends_libraries():
    """Containernet imports only in its own venv: the registry must import anywhere."""
    code = ("import sys; import testbed.emulation.backends, testbed.emulation.network, testbed.emulation.choose; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mininet', 'docker')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
