"""`rocketlake local spark up | down | status`: a Spark standalone master and workers on 127.0.0.1.

They are the installed pyspark's own daemons (``spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker``), started in the foreground of their own session, recorded and stopped by pid like the
RocketMQ JVMs (``process.ManagedProcess``), with small daemon heaps and one core and 1 GiB per worker unless told
otherwise. Readiness is asked of the master itself: its JSON page lists every worker ALIVE.

The ports are chosen at ``up`` and kept in ``spark.json`` beside the pid files, so ``down`` and ``status``
need no options and a second ``up`` finds the same cluster.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rocketlake import jars
from rocketlake.local.process import (
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    port_in_use,
    stop_all,
    wait_for,
)
from rocketlake.spark.session import put_worker_site

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 120.0
DAEMON_MEMORY = "256m"  # master and worker daemons only schedule; executors get the worker's memory


@dataclass(frozen=True)
class SparkClusterSpec:
    """Where the master listens, and what each worker offers."""

    state_dir: Path
    master_port: int = 7077
    master_ui_port: int = 8080
    worker_ui_ports: tuple[int, ...] = (8081, 8082)
    worker_cores: int = 1
    worker_memory: str = "1g"

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{LOOPBACK}:{self.master_ui_port}"

    @property
    def workers(self) -> int:
        return len(self.worker_ui_ports)

    def save(self) -> None:
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        (self.state_dir / "spark.json").write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def saved(cls, state_dir: Path) -> "SparkClusterSpec | None":
        """The spec the last ``up`` in ``state_dir`` used, or None."""
        try:
            data = json.loads((state_dir / "spark.json").read_text())
        except FileNotFoundError:
            return None
        data["state_dir"] = Path(data["state_dir"])
        data["worker_ui_ports"] = tuple(data["worker_ui_ports"])
        return cls(**data)


@dataclass(frozen=True)
class SparkClusterStatus:
    master_url: str
    master_pid: int | None
    alive_workers: int
    workers_expected: int
    worker_pids: tuple[int | None, ...]

    @property
    def ready(self) -> bool:
        return self.master_pid is not None and self.alive_workers == self.workers_expected

    def render(self) -> str:
        lines = [
            f"spark master {self.master_url}: {'up' if self.master_pid else 'down'} (pid {self.master_pid or '-'}), "
            f"{self.alive_workers} of {self.workers_expected} workers alive"
        ]
        lines += [
            f"  worker-{i + 1}: {'running' if pid else 'down'} (pid {pid or '-'})"
            for i, pid in enumerate(self.worker_pids)
        ]
        return "\n".join(lines)


def spark_home() -> Path:
    """The installed pyspark: it carries ``bin/spark-class`` and every jar the daemons need."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class LocalSparkCluster:
    def __init__(self, spec: SparkClusterSpec):
        self.spec = spec
        self.master = ManagedProcess("spark-master", spec.state_dir)
        self.workers = [ManagedProcess(f"spark-worker-{i + 1}", spec.state_dir) for i in range(spec.workers)]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_LOG_DIR=str(self.spec.state_dir / "logs"),
            SPARK_NO_DAEMONIZE="1",
        )
        env.pop("JAVA_TOOL_OPTIONS", None)
        # Executors start Python workers with the interpreter the driver names (PYSPARK_PYTHON travels with
        # each task); nothing here may pin the daemons to this shell's environment.
        env.pop("PYSPARK_PYTHON", None)
        # The executors' Python workers inherit the workers' PYTHONPATH: with the worker site first they import
        # this machine's installed PySpark, not the zip Spark puts first (1 CPU-s a daemon; worker_site).
        put_worker_site(env)
        return env

    def _spark_class(self, main_class: str, *args: str) -> list[str]:
        jars.require_tool("java", "run a Spark standalone master and workers")
        return ["bash", str(spark_home() / "bin" / "spark-class"), main_class, *args]

    def up(self, timeout: float = START_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> SparkClusterStatus:
        report = progress or (lambda line: None)
        started = time.monotonic()
        deadline = started + timeout
        self.spec.state_dir.mkdir(parents=True, exist_ok=True)
        self.spec.save()
        if self.master.pid() is None:
            self._check_ports("the Spark master", (self.spec.master_port, self.spec.master_ui_port))
            self.master.start(
                self._spark_class(
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(self.spec.master_port),
                    "--webui-port",
                    str(self.spec.master_ui_port),
                ),
                self._env(),
            )
        wait_for(
            lambda: accepts_connections(self.spec.master_port) and self._master_json() is not None,
            deadline,
            [self.master],
            f"the Spark master to listen on {self.spec.master_url}",
        )
        report(f"  spark master listening on {self.spec.master_url} ({time.monotonic() - started:.0f}s)")
        for worker, ui_port in zip(self.workers, self.spec.worker_ui_ports):
            if worker.pid() is not None:
                continue
            self._check_ports(worker.role, (ui_port,))
            work_dir = self.spec.state_dir / "work" / worker.role
            work_dir.mkdir(parents=True, exist_ok=True)
            worker.start(
                self._spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    LOOPBACK,
                    "--webui-port",
                    str(ui_port),
                    "--cores",
                    str(self.spec.worker_cores),
                    "--memory",
                    self.spec.worker_memory,
                    "--work-dir",
                    str(work_dir),
                    self.spec.master_url,
                ),
                self._env(),
            )
        wait_for(
            lambda: self._alive_workers() >= self.spec.workers,
            deadline,
            [self.master, *self.workers],
            f"{self.spec.workers} workers to register with {self.spec.master_url}",
        )
        report(
            f"  {self.spec.workers} spark workers registered, {self.spec.worker_cores} core(s) and "
            f"{self.spec.worker_memory} each ({time.monotonic() - started:.0f}s)"
        )
        return self.status()

    def down(self) -> list[str]:
        return stop_all([*self.workers, self.master])

    def status(self) -> SparkClusterStatus:
        return SparkClusterStatus(
            self.spec.master_url,
            self.master.pid(),
            self._alive_workers(),
            self.spec.workers,
            tuple(w.pid() for w in self.workers),
        )

    def pids(self) -> frozenset[int]:
        return frozenset(p for p in (proc.pid() for proc in (self.master, *self.workers)) if p is not None)

    def _master_json(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.spec.master_ui}/json/", timeout=2) as answer:
                return json.load(answer)
        except (OSError, ValueError):
            return None

    def _alive_workers(self) -> int:
        state = self._master_json() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _check_ports(self, what: str, ports: tuple[int, ...]) -> None:
        busy = [p for p in ports if port_in_use(p)]
        if busy:
            raise LocalClusterError(
                f"cannot start {what}: port(s) {', '.join(map(str, busy))} on {LOOPBACK} are in "
                "use by another process; stop it, or choose other ports (--spark-port)"
            )
