"""``rocketlake.dagster.warm_runs.WarmRunLauncher`` under a real Dagster daemon: queued runs are launched in processes forked
from one fork server that imported the libraries once, succeed, and are told apart by their pid.

The job is a plain one of this file's own (no broker, no Spark): what is under test is where its runs start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus

from rocketlake.dagster.run_guard import RunProcess
from rocketlake.dagster.warm_runs import PROCESS_TAG
from tests.conftest import free_ports
from tests.integration.ingestion_support import until

pytestmark = pytest.mark.dagster
BIN = Path(sys.executable).parent

JOB = """
import json, os, sys
from dagster import Definitions, in_process_executor, job, op


@op
def where_it_runs(context):
    # Before importing anything: whether the libraries came with the process (forked warm) or must load now.
    preloaded = {name: name in sys.modules for name in ("pandas", "pyspark.sql.connect.session")}
    context.log.info("where: " + json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "preloaded": preloaded}))


@job(executor_def=in_process_executor)
def warm():
    where_it_runs()


defs = Definitions(jobs=[warm])
"""


def where_runs_ran(instance: DagsterInstance, run_id: str) -> dict:
    for event in instance.all_logs(run_id):
        if event.user_message.startswith("where: "):
            return json.loads(event.user_message.removeprefix("where: "))
    raise AssertionError(f"run {run_id} logged no 'where:' line")


def test_queued_runs_start_in_processes_forked_from_one_warm_fork_server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        yaml.safe_dump(
            {
                "run_launcher": {"module": "rocketlake.dagster.warm_runs", "class": "WarmRunLauncher"},
                "run_coordinator": {
                    "module": "dagster._core.run_coordinator",
                    "class": "QueuedRunCoordinator",
                    "config": {"dequeue_interval_seconds": 1},
                },
                "telemetry": {"enabled": False},
            }
        )
    )
    (tmp_path / "warm_job.py").write_text(textwrap.dedent(JOB))
    (tmp_path / "workspace.yaml").write_text(
        yaml.safe_dump({"load_from": [{"python_file": {"relative_path": "warm_job.py", "location_name": "warm"}}]})
    )
    env = dict(os.environ, DAGSTER_HOME=str(home))
    # The instance's SQLite storage made once, now: the daemon and the first launch creating it at once collide.
    DagsterInstance.from_config(str(home)).dispose()
    daemon = subprocess.Popen(
        [BIN / "dagster-daemon", "run", "-w", "workspace.yaml"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        for _ in range(2):  # enqueued; the daemon's run queue hands each to the launcher
            launch = subprocess.run(
                [BIN / "dagster", "job", "launch", "-w", "workspace.yaml", "-j", "warm"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert launch.returncode == 0, launch.stdout[-2000:] + launch.stderr[-3000:]
        with DagsterInstance.from_config(str(home)) as instance:
            runs = until(
                lambda: (found := instance.get_runs()) and all(r.is_finished for r in found) and found,
                180,
                lambda: f"both runs finished: {[(r.run_id, r.status) for r in instance.get_runs()]}",
                daemon,
            )
            assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS] * 2
            wheres = [where_runs_ran(instance, r.run_id) for r in runs]
            # Each ran in the process the launcher started and recorded (by pid and start time), ...
            launched = [RunProcess.from_tag(r.tags[PROCESS_TAG]) for r in runs]
            assert [w["pid"] for w in wheres] == [p.pid for p in launched]
            assert [p.run_id for p in launched] == [r.run_id for r in runs] and wheres[0]["pid"] != wheres[1]["pid"]
            # ... a child of neither the daemon nor the fork server (nobody has to wait for it), with the libraries
            # imported already: both were forked from one warm fork server, a process of rocketlake.dagster.warm_runs.
            assert all(w["ppid"] != daemon.pid for w in wheres)
            assert all(w["preloaded"] == {"pandas": True, "pyspark.sql.connect.session": True} for w in wheres)
            events = [
                e.dagster_event.message
                for r in runs
                for e in instance.all_logs(r.run_id)
                if e.dagster_event is not None and "warm fork server" in (e.dagster_event.message or "")
            ]
            servers = {int(m.split("warm fork server ")[1].split(" ")[0]) for m in events}
            assert len(events) == 2 and len(servers) == 1, events
            (server,) = servers
            assert all(f"Launched in process {w['pid']}," in m for w, m in zip(wheres, events))
            assert server not in (w["ppid"] for w in wheres)
            command = Path(f"/proc/{server}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert "rocketlake.dagster.warm_runs" in command
        os.kill(daemon.pid, signal.SIGTERM)  # the daemon alone
        daemon.wait(timeout=60)
        # The fork server leaves with its daemon (its requests' pipe closes).
        until(lambda: not Path(f"/proc/{server}").exists() or _zombie(server), 30, f"fork server {server} exited")
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=60)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_run_forked_after_a_ctrl_c_to_the_group_stops_at_once(tmp_path):
    """Ctrl-C reached the group while the daemon was still launching (`make ui`'s CI failure): the run the fork server
    forked after it never received the signal and ran to its end after everything else had stopped. Now it stops at
    once, as the runs in flight do. Its command here would serve forever: an empty code server."""
    server = subprocess.Popen(
        [sys.executable, "-m", "rocketlake.dagster.warm_runs"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        start_new_session=True,  # a group of its own, as `make ui`'s
    )
    server.stdin.write(b'{"instance_ref": null}\n')  # the launcher's first line: no instance to open ahead
    forked: list[int] = []

    def launch(command: list[str]) -> int:
        server.stdin.write(json.dumps(command).encode() + b"\n")
        server.stdin.flush()
        forked.append(int(server.stdout.readline()))
        return forked[-1]

    try:
        launch(["--version"])  # answered: the fork server is in its loop, its Ctrl-C handler set
        os.killpg(server.pid, signal.SIGINT)
        (port,) = free_ports(1)
        run = launch(["api", "grpc", "--host", "127.0.0.1", "--port", str(port)])
        until(lambda: not _alive(run), 10, "the run forked after the Ctrl-C to stop")
        assert server.poll() is None  # the fork server itself leaves with its daemon, not at the Ctrl-C
    finally:
        for pid in forked:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        server.stdin.close()
        server.wait(timeout=10)
