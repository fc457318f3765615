"""Build the role images (testbed/<role>:latest) for the Containernet backend.

Usage: ``python -m testbed.emulation.images build [ROLE ...]``.

The project and its Python dependencies are turned into wheels on the host
first (build/wheels), so ``docker build`` needs no access to PyPI; the role
Dockerfiles install them with ``pip --no-index``.  The source tree goes to
the images as a snapshot (build/image-src), the only other thing in the
build context.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from testbed.emulation.docker_engine import (
    BASE_IMAGE,
    Progress,
    bootstrap_base_image,
    image_exists,
    start_engine,
)

ROLES: tuple[str, ...] = ("cloud", "broker", "nc-proxy", "client")
# Both relative to the repo root, the build context; .dockerignore sends only these.
WHEELHOUSE = Path("build/wheels")
SOURCE_SNAPSHOT = Path("build/image-src")
# Not copied into the images: VCS, venvs, caches, run results, host-built binaries.
_SKIP_ANYWHERE = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "_build"}
_SKIP_TOP = {"build", "results"}
IMAGE_PYTHON = "3.11"  # Debian bookworm's python3
IMAGE_GLIBC = (2, 36)  # Debian bookworm's glibc


def repo_root() -> Path:
    """The repository root: the directory holding images/ above this package."""
    return Path(__file__).resolve().parents[2]


def image_name(role: str) -> str:
    """Tag of a role image, e.g. ``testbed/broker:latest``."""
    return f"testbed/{role}:latest"


def _image_platforms() -> list[str]:
    """manylinux tags that bookworm's glibc 2.36 accepts, on this machine's arch."""
    arch = platform.machine()
    return [f"manylinux_2_{minor}_{arch}" for minor in range(IMAGE_GLIBC[1], 4, -1)] + [
        f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def _pip(args: Sequence[str], what: str) -> None:
    # A fixed SOURCE_DATE_EPOCH makes the project wheel byte-identical for the
    # same source, so docker's build cache survives a rebuild of the wheelhouse.
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
    res = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                         check=False, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{res.stdout}{res.stderr}")


def build_wheelhouse(root: Path, progress: Progress = print) -> Path:
    """Put the project's wheel and its dependencies' wheels into build/wheels.

    Dependencies are fetched as CPython 3.11 manylinux wheels whatever the
    host's Python is (Ubuntu 22.04 has 3.10), because they install into the
    image's python3 (3.11); requirements.txt pins their versions when present.
    Returns the project's wheel.
    """
    wheels = root / WHEELHOUSE
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    progress(f"building the project wheel and fetching dependency wheels into {wheels}")
    _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(root)], "pip wheel")
    built = sorted(wheels.glob("*.whl"))
    if len(built) != 1:
        raise RuntimeError(f"expected one project wheel in {wheels}, found {built}")
    project = built[0]
    download = ["download", "--quiet", "--dest", str(wheels), "--only-binary=:all:",
                "--python-version", IMAGE_PYTHON, "--implementation", "cp",
                "--abi", f"cp{IMAGE_PYTHON.replace('.', '')}"]
    for tag in _image_platforms():
        download += ["--platform", tag]
    _pip([*download, *node_requirements(root)], "pip download of the dependency wheels")
    return project


# Host-side only: the analysis (PySpark has no wheel, so it cannot be fetched for the image anyway),
# figures and development tools. Processes inside nodes never import them.
HOST_ONLY = {"pyspark", "matplotlib", "pyarrow", "pytest", "ruff"}


def node_requirements(root: Path) -> list[str]:
    """The pinned requirements that processes inside nodes need (requirements.txt minus HOST_ONLY)."""
    import re

    pins = []
    for line in (root / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        name = re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0].lower()
        if line and name not in HOST_ONLY:
            pins.append(line)
    return pins


def snapshot_source(root: Path, progress: Progress = print) -> Path:
    """Copy the source tree to build/image-src for /opt/testbed in the images.

    One snapshot serves all role builds of a run, so the images agree with
    each other and the build cache holds even while files are being edited.
    """
    dest = root / SOURCE_SNAPSHOT

    def skip(directory: str, names: list[str]) -> set[str]:
        top = Path(directory).resolve() == root.resolve()
        return {n for n in names if n in _SKIP_ANYWHERE or n.endswith((".pyc", ".egg-info"))
                or (top and n in _SKIP_TOP)}

    shutil.rmtree(dest, ignore_errors=True)
    progress(f"snapshotting the source into {dest}")
    shutil.copytree(root, dest, ignore=skip, symlinks=True)
    return dest


REQUIREMENTS_LABEL = "org.testbed.requirements"


def requirements_digest(root: Path | None = None) -> str:
    """What the images' Python environment was built from: a run refuses images built from other
    requirements (their venv would lack or mismatch what the code imports)."""
    import hashlib

    root = root or repo_root()
    digest = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        digest.update((root / name).read_bytes())
    return digest.hexdigest()[:16]


def build_role(role: str, root: Path | None = None, base: str = BASE_IMAGE,
               progress: Progress = print) -> None:
    """``docker build -f images/<role>/Dockerfile -t testbed/<role>:latest .``

    Expects the engine, the base image, build/wheels and build/image-src to
    be there already (``build_all`` sees to that).
    """
    root = root or repo_root()
    dockerfile = root / "images" / role / "Dockerfile"
    if not dockerfile.is_file():
        raise RuntimeError(f"no Dockerfile for role {role!r} at {dockerfile}")
    progress(f"building {image_name(role)}")
    started = time.monotonic()
    res = subprocess.run(
        ["docker", "build", "--force-rm", "-f", str(dockerfile), "-t", image_name(role),
         "--build-arg", f"BASE={base}",
         "--label", f"{REQUIREMENTS_LABEL}={requirements_digest(root)}", "."],
        cwd=root, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).splitlines()[-25:])
        raise RuntimeError(f"docker build of {image_name(role)} failed:\n{tail}")
    progress(f"built {image_name(role)} in {time.monotonic() - started:.0f}s")


def build_all(progress: Progress = print, roles: Sequence[str] = ROLES,
              root: Path | None = None, base: str = BASE_IMAGE) -> None:
    """Start the engine, bootstrap the base image if missing, build every role."""
    root = root or repo_root()
    start_engine()
    if not image_exists(base):
        bootstrap_base_image(base, progress)
    build_wheelhouse(root, progress)
    snapshot_source(root, progress)
    # The shared project image first: the role images are thin layers on top of it.
    build_role("project", root=root, base=base, progress=progress)
    for role in roles:
        build_role(role, root=root, base=base, progress=progress)
    remove_stale_images()


def remove_stale_images() -> None:
    """Drop untagged images that earlier builds left behind.

    Rebuilt role images leave their predecessors untagged, and every change of
    the source leaves a new project stage; only the newest stage is kept, as
    the build cache for the next run.  Only images carrying our labels go.
    """
    def dangling(label: str) -> list[str]:
        res = subprocess.run(["docker", "images", "--quiet", "--filter", "dangling=true",
                              "--filter", f"label={label}"],
                             capture_output=True, text=True, check=False)
        return list(dict.fromkeys(res.stdout.split()))  # newest first

    stale = dangling("org.testbed.role") + dangling("org.testbed.stage=project")[1:]
    if stale:
        subprocess.run(["docker", "rmi", *stale], capture_output=True, check=False)


def stale(roles: Sequence[str] = ROLES, base: str = BASE_IMAGE) -> list[str]:
    """Why `build` would be needed: the base image missing, a role image missing or built from other
    requirements (the source itself is bind-mounted at run time, so a source change needs no build)."""
    from testbed.emulation.backends.containernet import image_problems

    start_engine()
    return ([] if image_exists(base) else [f"image {base} is missing (make images)"]) + image_problems(set(roles))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.emulation.images",
                                     description="Build the testbed's Docker role images.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the base image (if missing) and role images")
    build.add_argument("roles", nargs="*", metavar="ROLE",
                       help=f"roles to build (default: all of {', '.join(ROLES)})")
    build.add_argument("--root", type=Path, default=None,
                       help="build context (default: this repository)")
    sub.add_parser("check", help="exit 0 when the images are there and current, else 1 naming what is not")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = stale()
        print("\n".join(problems) or "images current")
        return 1 if problems else 0
    unknown = sorted(set(args.roles) - set(ROLES))
    if unknown:
        parser.error(f"unknown role(s) {', '.join(unknown)}; choose from {', '.join(ROLES)}")
    try:
        build_all(roles=args.roles or ROLES, root=args.root)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
