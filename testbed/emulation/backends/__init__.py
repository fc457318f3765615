"""The backends, by name: the registry is the only list of their names.

Each backend is one class implementing base.Backend (one module each, like Kathara's managers);
`--backend`, the choice of `auto` (choose.py) and `testbed doctor` derive from BACKENDS. Adding a
backend means a module here, one line below and its test in tests/test_backends.py; the scenario
schema's `emulation.backend` (scenario/model.py, a lower layer that cannot import this one) lists
the same names, which tests/test_backends.py holds to this registry.
"""

from __future__ import annotations

from testbed.emulation.backends.base import Backend
from testbed.emulation.backends.containernet import ContainernetBackend
from testbed.emulation.backends.mininet import MininetBackend

# In the order `auto` tries them: the first that can run on this machine is used.
BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (ContainernetBackend, MininetBackend)}


class UnknownBackend(ValueError):
    """A name that is not in the registry."""


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def get(name: str) -> type[Backend]:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})") from None
