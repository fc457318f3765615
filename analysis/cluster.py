"""A Spark standalone cluster on this machine, from the installed pyspark's own launcher
(`bin/spark-class`): one master and N workers, for running the analysis on a real cluster master
(`spark://...`) where there is no other, and for the test that the reduction gives the same rows
there as in `local[*]`.

    with StandaloneCluster(workers=2) as cluster:
        spark = analysis.spark.session(cluster.master)

    python -m analysis.cluster --workers 2        # up until Ctrl-C, its master URL printed

Each daemon is a child process in its own process group, stopped by its PID (SIGTERM, then
SIGKILL) when the block ends, also after an error; its log is under `log_dir`. Ports are free
ones chosen here; everything binds to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"


class ClusterError(RuntimeError):
    """The cluster did not come up (no Java, a daemon died, workers did not register)."""


def spark_class() -> Path:
    """The pyspark distribution's `bin/spark-class`."""
    import pyspark

    path = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not path.exists():
        raise ClusterError(f"{path} is missing: this pyspark has no launcher")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


class StandaloneCluster:
    """One master and `workers` workers of `cores` cores and `memory` each."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", log_dir: Path | None = None):
        self.workers, self.cores, self.memory = workers, cores, memory
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="spark-cluster-"))
        self.port, self.ui_port = free_port(), free_port()
        self.master = f"spark://{HOST}:{self.port}"
        self.processes: list[subprocess.Popen] = []

    def _daemon(self, name: str, *argv: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1",
               "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        log = (self.log_dir / f"{name}.log").open("ab")
        process = subprocess.Popen([str(spark_class()), *argv], stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def state(self) -> dict:
        """The master's own view (its web UI's /json): workers and their state."""
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=2) as answer:
            return json.loads(answer.read())

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._daemon("master", MASTER_CLASS, "--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._daemon(f"worker-{i + 1}", WORKER_CLASS, self.master, "--host", HOST, "--cores", str(self.cores),
                         "--memory", self.memory, "--webui-port", str(free_port()),
                         "--work-dir", str(self.log_dir / f"work-{i + 1}"))
        deadline = time.monotonic() + timeout
        alive = 0
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                self.stop()
                raise ClusterError(f"a Spark daemon exited with {dead[0].returncode}; see {self.log_dir}")
            try:
                alive = sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
            except (OSError, ValueError):
                alive = 0
            if alive >= self.workers:
                return self
            time.sleep(0.5)
        self.stop()
        raise ClusterError(f"{alive} of {self.workers} workers registered within {timeout:g} s; see {self.log_dir}")

    def stop(self, grace: float = 10.0) -> None:
        """Every daemon stopped by its PID (its process group: the JVM the launcher started)."""
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self.processes):
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=grace)
        self.processes = []

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="1g")
    args = parser.parse_args(argv)
    with StandaloneCluster(args.workers, args.cores, args.memory) as cluster:
        print(f"Spark standalone cluster up: {cluster.master} ({args.workers} workers; logs {cluster.log_dir}); "
              "Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
