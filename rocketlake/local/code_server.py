"""One long-lived Dagster code server that a deployment's daemon and webserver load the code location from.

Why not ``dagster-daemon run -m rocketlake.definitions``: a daemon given a module starts a code server of its own
and, every 60 s (``RELOAD_WORKSPACE_INTERVAL`` in ``dagster/_daemon/controller.py``), drops it and starts another
(``clear_all_grpc_endpoints`` before ``refresh_workspace``): a new code server every minute, each importing
Dagster, PySpark and the definitions again (the cost: ``benchmarks/README.md``); and
``dagster-webserver -m`` starts one more. Dagster's production shape is a code server of its own (``dagster
code-server start``) that both load through a workspace file's ``grpc_server`` entry: the definitions are imported
once, the daemon's minute refresh only asks the server for its snapshot, and the runs it launches start from it.

The server reads ``rocketlake.yaml`` when it starts: a changed configuration takes effect after ``Reload`` on the
code location in the UI (the server re-imports it in a new process) or a restart of the server. The location keeps
the module's name, so schedules and sensors turned on with ``dagster ... -m rocketlake.definitions`` are the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from rocketlake.local.process import (
    ManagedProcess,
    session_members,
    stop_all,
    wait_for,
)

LOOPBACK = "127.0.0.1"
MODULE = "rocketlake.definitions"
#: ``host:port`` of this server, in its environment: its sensors may ask it to load the definitions again (a table per
#: topic's new topic, ``dagster.topic_tables``).
CODE_SERVER_ENV = "ROCKETLAKE_CODE_SERVER"


@dataclass(frozen=True)
class LocalCodeServer:
    state_dir: Path  # its pid file, log and workspace file
    port: int

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("dagster-code-server", self.state_dir)

    @property
    def workspace(self) -> Path:
        """The workspace file that loads the code location from this server (``dagster ... -w``)."""
        return self.state_dir / "workspace.yaml"

    def _bin(self, name: str) -> str:
        return str(Path(sys.executable).parent / name)

    def start(self, env: dict[str, str], timeout: float = 180.0, cwd: Path | None = None) -> None:
        """Start it (unless it runs) and return once it serves the loaded code location."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.workspace.write_text(
            yaml.safe_dump(
                {"load_from": [{"grpc_server": {"host": LOOPBACK, "port": self.port, "location_name": MODULE}}]}
            )
        )
        if self.process.pid() is None:
            env = {**env, CODE_SERVER_ENV: f"{LOOPBACK}:{self.port}"}
            self.process.start(
                [
                    self._bin("dagster"),
                    "code-server",
                    "start",
                    "-m",
                    MODULE,
                    "-h",
                    LOOPBACK,
                    "-p",
                    str(self.port),
                    "--location-name",
                    MODULE,
                ],
                env,
                cwd,
            )
        wait_for(
            self.serving,
            time.monotonic() + timeout,
            [self.process],
            f"the code server on {LOOPBACK}:{self.port} to load {MODULE}",
            interval=0.5,
        )

    def serving(self) -> bool:
        """Dagster's own health check, which answers SERVING once the code location is loaded."""
        result = subprocess.run(
            [self._bin("dagster"), "api", "grpc-health-check", "-h", LOOPBACK, "-p", str(self.port)],
            check=False,
            capture_output=True,
            timeout=60,
        )
        return result.returncode == 0

    def stop(self) -> bool:
        """SIGTERM to it and to what it started in its session (the server process under its proxy, the runs it
        launched), SIGKILL after 30 s; True if it was running."""
        pid = self.process.pid()
        members = [p for p in session_members(pid) if p != pid] if pid is not None else []
        stopped = stop_all([self.process]) == [self.process.role]
        for member in members:
            try:
                os.kill(member, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return stopped
