"""Fixtures more than one test module needs, written once (pytest finds them here by name).

- `spark`: a small local SparkSession for the PySpark jobs (analysis tests), one per test process
  (a JVM start costs ~10 s), skipping without pyspark or Java;
- `cn_python`: the interpreter that has Containernet, skipping (with what is missing) where it is
  not installed, not root, or the Docker engine or base image is absent; `tests.needs.containernet_missing()`
  is that skip, a failure where $TESTBED_REQUIRE_CONTAINERNET is set (CI, after `make containernet`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# tests.leftovers: the session fails if it leaves anything behind; tests.machine: which live tests
# may run side by side (marker `quiet`: none beside it); tests.claims: which claims were judged, which
# not and why (claims.json, the table .ci/run prints).
pytest_plugins = ["tests.leftovers", "tests.machine", "tests.claims"]


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -r requirements.txt)")
    from analysis.spark import java_available

    if not java_available():
        pytest.skip("Spark needs a Java runtime: no JAVA_HOME and no java on PATH (apt install default-jre-headless)")
    from pyspark.sql import SparkSession

    from analysis.spark import session

    existing = SparkSession.getActiveSession()  # another module's session: reuse it, leave it running
    # Tiny inputs: query planning and code generation dominate, so skip what only pays off on big data.
    spark = session("local[2]", app_name="test-analysis", shuffle_partitions=1,
                    conf={"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false"})
    yield spark
    if existing is None:
        spark.stop()


def containernet_python() -> str:
    """Interpreter that has Containernet installed: the one `testbed` itself finds."""
    from testbed.emulation import installed

    env = os.environ.get(installed.CONTAINERNET_PYTHON_ENV)
    if env:
        return env
    default = Path(installed.DEFAULT_CONTAINERNET_PYTHON)
    return str(default) if default.exists() else sys.executable


@pytest.fixture(scope="module")
def cn_python() -> str:
    from testbed.emulation import installed
    from testbed.emulation.docker_engine import BASE_IMAGE, engine_running, image_exists
    from tests.needs import containernet_missing

    python = containernet_python()
    res = subprocess.run([python, "-c", "from mininet.net import Containernet; from mininet.node import Docker"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        containernet_missing(f"Containernet not importable with {python} (install: {installed.INSTALL}; "
                             f"or set {installed.CONTAINERNET_PYTHON_ENV})")
    if os.geteuid() != 0:
        containernet_missing("Containernet needs root")
    if not engine_running():
        containernet_missing("Docker engine not running "
                             "(testbed.emulation.docker_engine.start_engine() starts it)")
    if not image_exists(BASE_IMAGE):
        containernet_missing(f"image {BASE_IMAGE} missing (make images)")
    return python


def pytest_collection_modifyitems(config, items):
    """Files with live runs first (stable otherwise): `make test` deals whole files to two workers
    (pytest-xdist, --dist loadfile), and a long file dealt last would finish alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
