"""`testbed doctor` and the preflight before `run`: what this machine supports, and what is wrong.

Checks are plain functions returning (ok, detail); `required` ones make `run` refuse to start
with the detail as the reason, the others say which features are unavailable. Each backend in the
registry brings its own checks (Backend.checks) and its own preflight for a topology.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from testbed import natsserver
from testbed.emulation import backends, choose


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _version(argv: list[str]) -> tuple[bool, str]:
    if not shutil.which(argv[0]):
        return False, f"{argv[0]} not found"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, str(error)
    text = (out.stdout or out.stderr).strip().splitlines()
    return True, text[0] if text else argv[0]


def check_root() -> tuple[bool, str]:
    return (os.geteuid() == 0, "running as root" if os.geteuid() == 0 else "not root: run with sudo")


def check_namespaces() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to test"
    name = f"tbdoctor{os.getpid()}"  # per process: two runs starting at once both probe (a shared name failed one)
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok, "ip netns works" if ok else "cannot create a network namespace"


def check_bridge_nf() -> tuple[bool, str]:
    """Bridges live inside the run's namespaces, so host iptables (Docker's FORWARD DROP) do not apply."""
    value = _read("/proc/sys/net/bridge/bridge-nf-call-iptables")
    policy = ""
    if shutil.which("iptables"):
        out = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True)
        policy = "FORWARD policy DROP" if "-P FORWARD DROP" in out.stdout else "FORWARD policy ACCEPT"
    detail = f"bridge-nf-call-iptables={value if value is not None else 'n/a (br_netfilter not loaded)'}"
    detail += f", {policy}" if policy else ""
    detail += "; switches are bridges inside per-run namespaces, not affected"
    return True, detail


def check_neigh_limits(nodes: int = 0) -> tuple[bool, str]:
    thresh = [_read(f"/proc/sys/net/ipv4/neigh/default/gc_thresh{i}") for i in (1, 2, 3)]
    value = int(thresh[2] or 0)
    # Each site router holds a permanent neighbour entry per local node; namespaces have their own tables.
    ok = value == 0 or value >= 2 * nodes
    return ok, f"gc_thresh1..3 = {', '.join(t or '?' for t in thresh)}" + ("" if ok else f" (raise gc_thresh3 above {2 * nodes})")


def check_open_files(nodes: int = 0) -> tuple[bool, str]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 64 + 16 * nodes
    return soft >= need, f"open files soft={soft} hard={hard}" + ("" if soft >= need else f" (need about {need}: ulimit -n)")


def check_servers() -> tuple[bool, str]:
    """Runs over servers: namespace-servers need sshd; say which are up."""
    import shutil

    from testbed.emulation import servers

    up = servers.namespace_servers()
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        return False, "no sshd: namespace-servers need it (apt-get install openssh-server)"
    if up:
        return True, f"namespace-servers up: --servers {','.join(up)}"
    return True, "sshd present: `testbed servers up 3` makes namespace-servers"


def collect(nodes: int = 0) -> dict:
    checks = []

    def add(name: str, result: tuple[bool, str], required: bool = False) -> None:
        checks.append({"name": name, "ok": bool(result[0]), "detail": result[1], "required": required})

    add("root", check_root(), required=True)
    add("network namespaces", check_namespaces(), required=True)
    has_netem = choose.netem_available() if os.geteuid() == 0 else False
    add("sch_netem", (has_netem, "tc netem works" if has_netem else "kernel has no sch_netem: user-space delay line"))
    add("gcc (delay line)", _version(["gcc", "--version"]))
    add("bridge netfilter / FORWARD", check_bridge_nf())
    add("neighbour table", check_neigh_limits(nodes))
    add("open files", check_open_files(nodes))
    for backend in backends.BACKENDS.values():
        for name, result in backend.checks():
            add(name, result)
    ovs = _version(["ovs-vsctl", "--version"])
    add("Open vSwitch", ovs)
    add("serf", _version(["serf", "version"]))
    for choice in natsserver.CHOICES:  # the scenario's nodes.nats_server picks one
        add(f"nats-server ({choice}{', default' if choice == natsserver.DEFAULT else ''})",
            _version([natsserver.binary(choice, sys.executable), "--version"]))
    nats_c = Path("/usr/include/nats/nats.h").exists()  # the compiled client engine (workload.client_engine)
    add("NATS C client", (nats_c, "libnats-dev installed: workload.client_engine: compiled can run" if nats_c else
                          "libnats-dev not installed: workload.client_engine: compiled cannot run (apt-get install libnats-dev)"))
    zk = any(Path(p).exists() for p in ("/usr/share/zookeeper/bin/zkServer.sh", "/usr/bin/zookeeper-server"))
    add("ZooKeeper", (zk, "zookeeper installed" if zk else "zookeeper not installed (apt-get install zookeeper)"))
    add("Java", _version(["java", "-version"]))
    add("servers (--servers)", check_servers())
    try:
        import pyspark  # noqa: F401

        add("PySpark", (True, f"pyspark {pyspark.__version__}"))
    except ImportError:
        add("PySpark", (False, "pyspark not installed in this environment"))
    backend = choose.choose_backend()
    shaper = choose.choose_shaper() if os.geteuid() == 0 else choose.Choice("", "needs root to test")
    return {"checks": checks, "backend": backend.value or "none", "backend_reason": backend.reason,
            "shaper": shaper.value or "none", "shaper_reason": shaper.reason}


def preflight(nodes: int) -> list[str]:
    """Reasons `run` cannot start on this machine (empty when it can)."""
    problems = []
    for name, (ok, detail) in (("root", check_root()), ("namespaces", check_namespaces()),
                               ("open files", check_open_files(nodes)), ("neighbour table", check_neigh_limits(nodes))):
        if not ok:
            problems.append(f"{name}: {detail}")
    return problems
