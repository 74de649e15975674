"""A deployment of rocketlake as the stack-tier tests run one: its configuration and Dagster instance, its member
process, and ``dagster-daemon`` on a long-lived code server (as ``rocketlake local up --stack`` runs it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from rocketlake.engine.ledger import LedgerEntry
from rocketlake.local.code_server import LocalCodeServer
from rocketlake.local.process import session_members
from tests.conftest import free_ports
from tests.dagster_instance import recommended_home
from tests.integration.ingestion_support import definitions, materialize_command, write_config

ROOT = Path(__file__).resolve().parents[2]


class Deployment:
    """One deployment: its configuration (own instance_name) and its `rocketlake member` process (the brokers
    know a member by its connection, so each member is its own process, as each deployment is)."""

    def __init__(self, tmp_path, cluster, name: str, ingestions: dict, spark: dict | None = None):
        self.client_id = f"127.0.0.1@{name}"
        specs = {k: {**v, "client_ip": "127.0.0.1", "instance_name": name} for k, v in ingestions.items()}
        self.config = write_config(tmp_path / f"{name}.yaml", cluster, tmp_path / "lake", specs, spark)
        self.defs = definitions(self.config)
        self.home = recommended_home(tmp_path / f"{name}_dagster_home")  # the README's instance
        self.env = dict(os.environ, ROCKETLAKE_CONFIG=str(self.config), DAGSTER_HOME=str(self.home))
        self.member: subprocess.Popen | None = None

    def materialize(self, table: str, partition: str) -> subprocess.Popen:
        """``dagster asset materialize`` of one window on this deployment's own instance."""
        return subprocess.Popen(
            materialize_command(table, partition),
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def join(self):
        self.member = subprocess.Popen(
            [str(Path(sys.executable).parent / "rocketlake"), "member", "wide", "--config", str(self.config)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def leave(self) -> str:
        self.member.send_signal(signal.SIGTERM)
        output, _ = self.member.communicate(timeout=60)
        assert self.member.returncode == 0 and f"member {self.client_id} left group" in output, output
        return output

    def kill(self):
        if self.member is not None and self.member.poll() is None:
            self.member.kill()
            self.member.communicate()


def ledger(path) -> list[LedgerEntry]:
    """Every landing's entry, oldest first (verdict commits, which land nothing, left out)."""
    return [
        e
        for e in (LedgerEntry.from_json(c.get("userMetadata")) for c in reversed(DeltaTable(str(path)).history()))
        if e is not None and not e.is_verdict
    ]


def start_daemon(deployment: Deployment) -> subprocess.Popen:
    """``dagster-daemon`` as ``rocketlake local up --stack`` runs it: on a long-lived code server of the deployment's
    (``rocketlake/local/code_server.py``), which ``stop_daemon`` stops with it."""
    server = LocalCodeServer(deployment.home / "code-server", free_ports(1)[0])
    server.start(deployment.env, cwd=ROOT)
    log = (deployment.home / "daemon.log").open("w")
    daemon = str(Path(sys.executable).parent / "dagster-daemon")
    process = subprocess.Popen(
        [daemon, "run", "-w", str(server.workspace)],
        cwd=ROOT,
        env=deployment.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    process.code_server = server
    return process


def end_group(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the process group ``process`` leads, SIGKILL if it has not ended ``timeout`` seconds later."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def stop_daemon(process: subprocess.Popen | None) -> None:
    # Its session holds any code server and run it started, each in a process group of its own; the runs launched
    # from the code server are in that server's session.
    if process is None:
        return
    if process.poll() is None:
        members = [pid for pid in session_members(process.pid) if pid != process.pid]
        end_group(process, timeout=60)
        for pid in members:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    server = getattr(process, "code_server", None)
    if server is not None:
        server.stop()
