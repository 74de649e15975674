"""``rocketlake.warm_runs.WarmRunLauncher`` under a real Dagster daemon: queued runs are launched in processes forked
from one fork server that imported the libraries once, succeed, and are told apart by their pid.

The job is a plain one of this file's own (no broker, no Spark): what is under test is where its runs start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus

from rocketlake.warm_runs import PID_TAG
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
                "run_launcher": {"module": "rocketlake.warm_runs", "class": "WarmRunLauncher"},
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
            subprocess.run(
                [BIN / "dagster", "job", "launch", "-w", "workspace.yaml", "-j", "warm"],
                cwd=tmp_path,
                env=env,
                check=True,
                capture_output=True,
                timeout=120,
            )
        with DagsterInstance.from_config(str(home)) as instance:
            runs = until(
                lambda: (found := instance.get_runs()) and all(r.is_finished for r in found) and found,
                180,
                lambda: f"both runs finished: {[(r.run_id, r.status) for r in instance.get_runs()]}",
                daemon,
            )
            assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS] * 2
            wheres = [where_runs_ran(instance, r.run_id) for r in runs]
            # Each ran in the process the launcher forked and recorded, ...
            assert [w["pid"] for w in wheres] == [int(r.tags[PID_TAG]) for r in runs]
            assert wheres[0]["pid"] != wheres[1]["pid"]
            # ... both forked from one fork server, which is not the daemon and had the libraries imported already.
            assert wheres[0]["ppid"] == wheres[1]["ppid"] != daemon.pid
            assert all(w["preloaded"] == {"pandas": True, "pyspark.sql.connect.session": True} for w in wheres)
            server = Path(f"/proc/{wheres[0]['ppid']}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert "multiprocessing.forkserver" in server
            launched = [
                e.dagster_event.message
                for r in runs
                for e in instance.all_logs(r.run_id)
                if e.dagster_event is not None and "warm fork server" in (e.dagster_event.message or "")
            ]
            assert launched == [
                f"[WarmRunLauncher] Launched in process {w['pid']}, forked from a warm fork server "
                "(rocketlake.warm_runs)."
                for w in wheres
            ]
    finally:
        os.killpg(daemon.pid, 15)
        daemon.wait(timeout=60)
