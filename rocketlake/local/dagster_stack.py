"""`rocketlake local up --stack`: Dagster as production runs it, on this machine.

``dagster-daemon`` (schedules, sensors, the run queue, run retries and monitoring) and ``dagster-webserver``
on an instance configured by ``deploy/dagster.yaml`` (PostgreSQL storage, queued runs, pools, run retries),
both loading the code location ``rocketlake.definitions`` with the given ``rocketlake.yaml`` from one long-lived
code server (``code_server``: the daemon does not start a new one every minute); every schedule is turned on. The processes are recorded and stopped by pid like the rest of the local stack; each leads its own
process group, so ``down`` also ends the code servers and run workers they started.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketlake.local.code_server import LocalCodeServer
from rocketlake.local.postgres import LocalPostgres
from rocketlake.local.process import (
    LocalClusterError,
    ManagedProcess,
    port_in_use,
    session_members,
    stop_all,
    wait_for,
)

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 180.0


def production_instance() -> Path:
    """The production instance settings, shipped in the package (``deploy/dagster.yaml`` in the repository
    links to it)."""
    # Package data found where the package is, without importing the layers above this one.
    return Path(importlib.util.find_spec("rocketlake").origin).parent / "dagster" / "dagster.production.yaml"


@dataclass(frozen=True)
class LocalDagster:
    state_dir: Path  # <state>/dagster: DAGSTER_HOME, pid files, logs
    config: Path  # the rocketlake.yaml the code location loads
    postgres: LocalPostgres
    webserver_port: int = 3000
    code_server_port: int = 4266

    @property
    def code_server(self) -> LocalCodeServer:
        return LocalCodeServer(self.state_dir, self.code_server_port)

    @property
    def home(self) -> Path:
        return self.state_dir / "home"

    @property
    def daemon(self) -> ManagedProcess:
        return ManagedProcess("dagster-daemon", self.state_dir)

    @property
    def webserver(self) -> ManagedProcess:
        return ManagedProcess("dagster-webserver", self.state_dir)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.webserver_port}"

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            DAGSTER_HOME=str(self.home),
            ROCKETLAKE_CONFIG=str(self.config.absolute()),
            **self.postgres.dagster_env(),
        )

    def _bin(self, name: str) -> str:
        return str(Path(sys.executable).parent / name)

    def up(self, timeout: float = START_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> None:
        report = progress or (lambda line: None)
        started = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        shutil.copy(production_instance(), self.home / "dagster.yaml")
        env = self.env()
        server = self.code_server
        if server.process.pid() is None and port_in_use(self.code_server_port):
            raise LocalClusterError(
                f"cannot start the Dagster code server: port {self.code_server_port} on {LOOPBACK} "
                "is in use; stop that process or choose another port (--code-server-port)"
            )
        server.start(env, timeout)
        workspace = ["-w", str(server.workspace)]
        if self.daemon.pid() is None:
            self.daemon.start([self._bin("dagster-daemon"), "run", *workspace], env)
        if self.webserver.pid() is None:
            if port_in_use(self.webserver_port):
                raise LocalClusterError(
                    f"cannot start dagster-webserver: port {self.webserver_port} on {LOOPBACK} is in "
                    "use; stop that process or choose another port (--dagster-port)"
                )
            self.webserver.start(
                [self._bin("dagster-webserver"), "-h", LOOPBACK, "-p", str(self.webserver_port), *workspace], env
            )
        wait_for(
            self._serving,
            time.monotonic() + timeout,
            [self.daemon, self.webserver],
            f"dagster-webserver to serve {self.url}",
        )
        result = subprocess.run(
            [self._bin("dagster"), "schedule", "start", "--start-all", *workspace],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise LocalClusterError(f"turning the schedules on failed:\n{(result.stdout + result.stderr)[-2000:]}")
        report(
            f"  dagster-daemon and dagster-webserver up on {self.url}, schedules on ({time.monotonic() - started:.0f}s)"
        )

    def _serving(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def status(self) -> str:
        return (
            "\n".join(
                f"{p.role}: {'running' if p.pid() else 'down'} (pid {p.pid() or '-'})"
                for p in (self.code_server.process, self.daemon, self.webserver)
            )
            + f"; UI {self.url}"
        )

    def down(self) -> list[str]:
        # Each leads its own session; the code servers and run workers they start stay in it (in process groups of
        # their own), so the whole session is signalled, not only the leader's group.
        sessions = [pid for pid in (self.daemon.pid(), self.webserver.pid()) if pid is not None]
        members = [pid for sid in sessions for pid in session_members(sid) if pid not in sessions]
        stopped = stop_all([self.daemon, self.webserver])
        for pid in members:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.code_server.stop():  # after the daemon: it launches no run on a server going away
            stopped.append(self.code_server.process.role)
        return stopped
