"""Docker engine helpers for the Containernet backend.

The testbed VMs have Debian's docker.io but no init system that starts
dockerd, and often no reachable container registry.  These helpers start the
engine on demand and build the base image locally (debootstrap + docker
import) when ``docker pull`` cannot work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

BASE_IMAGE = "testbed/base:bookworm"
UPSTREAM_IMAGE = "debian:bookworm-slim"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DOCKERD_LOG = Path("/var/log/testbed-dockerd.log")

# Every image needs these: network tools for the emulation, python for the
# project, bash because Containernet drives each container through bash.
BASE_PACKAGES: tuple[str, ...] = (
    "bash",
    "iproute2",
    "net-tools",
    "iputils-ping",
    "procps",
    "python3",
    "python3-venv",
    "ca-certificates",
)
# Union of the role images' packages.  They go into the base image so the
# role builds need no package archive (docker build may have no network);
# the cost is a bigger base image (the JRE for zookeeper dominates).
ROLE_PACKAGES: tuple[str, ...] = (
    "nats-server",
    "serf",
    "zookeeper",
    "default-jre-headless",
)

# Containernet drives each host through an interactive bash and parses its
# output; bash 5.2's bracketed-paste escapes (ESC[?2004h) break that parsing
# ("Error setting h1-eth0 up"), so the images switch the feature off.
INPUTRC_FIX = "\n# Containernet parses interactive bash output\nset enable-bracketed-paste off\n"

Progress = Callable[[str], object]


def _docker(args: Sequence[str], timeout: float | None = None,
            capture: bool = True) -> subprocess.CompletedProcess:
    """Run the docker CLI; never raises on a non-zero exit, only on timeout."""
    return subprocess.run(["docker", *args], capture_output=capture, text=True,
                          timeout=timeout, check=False)


def engine_running(timeout_s: float = 5.0) -> bool:
    """True when ``docker info`` answers within ``timeout_s``."""
    if shutil.which("docker") is None:
        return False
    try:
        return _docker(["info", "--format", "{{.ServerVersion}}"],
                       timeout=timeout_s).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_engine(timeout_s: float = 60) -> None:
    """Start dockerd in the background (no init system here) and wait for it.

    Does nothing when the engine already answers.  Logs go to
    /var/log/testbed-dockerd.log.  Raises RuntimeError naming the problem.
    """
    if engine_running():
        return
    if shutil.which("docker") is None:
        raise RuntimeError("docker CLI not found: install Debian's docker.io")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RuntimeError("dockerd not found: install Debian's docker.io")
    if os.geteuid() != 0:
        raise RuntimeError("Docker engine not running and starting dockerd needs root")
    DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(DOCKERD_LOG, "ab") as log:
        proc = subprocess.Popen([dockerd], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd exited with code {proc.returncode}; "
                               f"see {DOCKERD_LOG}: {_log_tail()}")
        if engine_running(timeout_s=3):
            return
        time.sleep(0.5)
    raise RuntimeError(f"dockerd (pid {proc.pid}) did not answer within "
                       f"{timeout_s}s; see {DOCKERD_LOG}: {_log_tail()}")


def _log_tail(lines: int = 5) -> str:
    try:
        return " | ".join(DOCKERD_LOG.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def image_exists(name: str) -> bool:
    """True when the local engine has image ``name`` (never pulls)."""
    try:
        return _docker(["image", "inspect", name], timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def bootstrap_base_image(name: str = BASE_IMAGE, progress: Progress = print, *,
                         packages: Sequence[str] = BASE_PACKAGES + ROLE_PACKAGES,
                         pull_timeout_s: float = 60) -> None:
    """Create the base image ``name`` with ``packages`` installed.

    Tries the registry first (``docker pull debian:bookworm-slim`` plus an
    apt layer); when no registry is reachable it builds a minbase rootfs with
    debootstrap and ``docker import``s it, so it works offline from Docker Hub.
    """
    start_engine()
    progress(f"pulling {UPSTREAM_IMAGE}")
    try:
        pulled = _docker(["pull", UPSTREAM_IMAGE], timeout=pull_timeout_s)
        ok, why = pulled.returncode == 0, (pulled.stderr or pulled.stdout).strip()
    except subprocess.TimeoutExpired:
        ok, why = False, f"timed out after {pull_timeout_s}s"
    if ok:
        progress(f"registry reachable: building {name} from {UPSTREAM_IMAGE}")
        _build_from_upstream(name, packages)
    else:
        progress(f"registry unreachable ({why.splitlines()[-1] if why else 'no output'}): "
                 "bootstrapping base image locally with debootstrap")
        _build_with_debootstrap(name, packages, progress)
    progress(f"base image {name} ready")


def _build_from_upstream(name: str, packages: Sequence[str]) -> None:
    """Add the package layer on top of the pulled upstream image."""
    dockerfile = (
        f"FROM {UPSTREAM_IMAGE}\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        f"--no-install-recommends {' '.join(packages)} && rm -rf /var/lib/apt/lists/* "
        "&& echo 'set enable-bracketed-paste off' >> /etc/inputrc\n"
        'CMD ["/bin/bash"]\n'
    )
    with tempfile.TemporaryDirectory(prefix="testbed-base-") as ctx:
        (Path(ctx) / "Dockerfile").write_text(dockerfile)
        res = _docker(["build", "--force-rm", "-t", name, ctx], capture=False)
    if res.returncode != 0:
        raise RuntimeError(f"docker build of {name} from {UPSTREAM_IMAGE} failed")


def _build_with_debootstrap(name: str, packages: Sequence[str],
                            progress: Progress) -> None:
    """debootstrap a minbase rootfs, slim it, and ``docker import`` it."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("no registry and no debootstrap: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise RuntimeError("debootstrap needs root")
    with tempfile.TemporaryDirectory(prefix="testbed-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        progress(f"debootstrap {SUITE} (minbase) into {root}; this takes a few minutes")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
               SUITE, str(root), MIRROR]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            tail = "\n".join((res.stdout + res.stderr).splitlines()[-15:])
            raise RuntimeError(f"debootstrap failed (exit {res.returncode}):\n{tail}")
        _slim_rootfs(root)
        progress(f"importing rootfs as {name}")
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."],
                               stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "--change", 'CMD ["/bin/bash"]',
                              "--change", "ENV LANG=C.UTF-8", "-", name],
                             stdin=tar.stdout, capture_output=True, text=True, check=False)
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            raise RuntimeError(f"docker import of {name} failed: {imp.stderr.strip()}")


def _slim_rootfs(root: Path) -> None:
    """Drop caches and docs, and set up apt the way Debian's docker images do."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc",
                "usr/share/man", "usr/share/info", "usr/share/locale"):
        d = root / sub
        if d.is_dir():
            for child in d.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                elif child.name != "lock":
                    child.unlink(missing_ok=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    # Keep the man section dirs: openjdk's postinst (update-alternatives)
    # fails without /usr/share/man/man1 (a known slim-image pitfall).
    for section in range(1, 9):
        (root / f"usr/share/man/man{section}").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list").write_text(
        f"deb {MIRROR} {SUITE} main\n"
        f"deb {MIRROR} {SUITE}-updates main\n"
        f"deb http://deb.debian.org/debian-security {SUITE}-security main\n")
    conf = root / "etc/apt/apt.conf.d"
    (conf / "docker-clean").write_text(
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
        '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
        'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
        '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n')
    (conf / "docker-no-languages").write_text('Acquire::Languages "none";\n')
    (conf / "docker-autoremove-suggests").write_text(
        'Apt::AutoRemove::SuggestsImportant "false";\n')
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/docker-excludes").write_text(
        "path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\n"
        "path-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n"
        "path-exclude /usr/share/locale/*\n")
    with open(root / "etc/inputrc", "a") as inputrc:
        inputrc.write(INPUTRC_FIX)
    # Docker bind-mounts these at run time; the host's copies must not leak in.
    for f in ("etc/hostname", "etc/resolv.conf"):
        (root / f).unlink(missing_ok=True)
        (root / f).touch()


BRIDGED_RULE = ("DOCKER-USER", "-m", "physdev", "--physdev-is-bridged", "-j", "ACCEPT")


def bridged_traffic_state() -> tuple[bool, str]:
    """Would Docker's FORWARD DROP drop frames a host bridge forwards? Changes nothing (doctor)."""
    knob = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if not knob.exists() or knob.read_text().strip() == "0":
        return True, "bridged frames bypass iptables (bridge-nf-call-iptables off or br_netfilter not loaded)"
    if shutil.which("iptables") is None:
        return False, "iptables not found (apt-get install iptables)"
    if subprocess.run(["iptables", "-n", "-L", "DOCKER-USER"], capture_output=True, check=False).returncode != 0:
        return True, "no DOCKER-USER chain (dockerd not started)"
    if subprocess.run(["iptables", "-C", *BRIDGED_RULE], capture_output=True, check=False).returncode == 0:
        return True, "DOCKER-USER accepts bridged frames (-m physdev --physdev-is-bridged -j ACCEPT)"
    return False, ("Docker's FORWARD DROP drops frames bridged on the host (Containernet's LinuxBridge); "
                   "a containernet run inserts the rule itself: iptables -I " + " ".join(BRIDGED_RULE))


def allow_bridged_traffic() -> str:
    """Let frames cross plain Linux bridges (the emulated links) again.

    dockerd sets the FORWARD policy to DROP, and with br_netfilter loaded
    (net.bridge.bridge-nf-call-iptables=1) frames bridged by a LinuxBridge
    switch traverse that chain too, so Containernet hosts cannot ping each
    other.  Inserts ``-m physdev --physdev-is-bridged -j ACCEPT`` into
    DOCKER-USER (idempotent; routed traffic stays filtered); when that match
    is unavailable, sets bridge-nf-call-iptables to 0.  Returns what it did.
    """
    knob = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if not knob.exists() or knob.read_text().strip() == "0":
        return "bridged frames bypass iptables already"
    rule = list(BRIDGED_RULE)
    if subprocess.run(["iptables", "-n", "-L", "DOCKER-USER"], capture_output=True,
                      check=False).returncode != 0:
        return "no DOCKER-USER chain (dockerd not started): nothing to do"
    if subprocess.run(["iptables", "-C", *rule], capture_output=True,
                      check=False).returncode == 0:
        return "DOCKER-USER accepts bridged frames already"
    if subprocess.run(["iptables", "-I", *rule], capture_output=True,
                      check=False).returncode == 0:
        return "inserted iptables rule: DOCKER-USER -m physdev --physdev-is-bridged -j ACCEPT"
    try:
        knob.write_text("0\n")
    except OSError as exc:
        raise RuntimeError("bridged traffic is dropped by Docker's FORWARD policy and "
                           f"neither the physdev rule nor the sysctl could be set: {exc}") from exc
    return "set net.bridge.bridge-nf-call-iptables=0"
