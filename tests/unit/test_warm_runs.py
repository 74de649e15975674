"""``WarmRunLauncher``'s judgement of a run's process, on plain runs: a process is named by pid and start time, so a
recycled pid or a parent run's copied tag is never taken for the run's own (the launch itself is tested under a real
daemon in tests/integration/test_warm_runs.py)."""

from __future__ import annotations

import os
from dataclasses import replace

from dagster import DagsterRun

from rocketlake.dagster.dagster_private import WorkerStatus
from rocketlake.dagster.run_guard import RunProcess
from rocketlake.dagster.warm_runs import PROCESS_TAG, WarmRunLauncher


def run_with(process: RunProcess, run_id: str = "run-1") -> DagsterRun:
    return DagsterRun(job_name="orders_raw_job", run_id=run_id, tags={PROCESS_TAG: process.to_tag()})


def test_a_runs_process_is_judged_by_pid_and_start_time_and_a_copied_tag_is_not_its_own() -> None:
    launcher = WarmRunLauncher()
    alive = RunProcess.of(os.getpid(), "run-1")  # this very process, as the launcher would record a run's
    assert launcher.check_run_worker_health(run_with(alive)).status is WorkerStatus.RUNNING
    recycled = replace(alive, start_ticks=alive.start_ticks + 1)  # the same pid, started at another time
    gone = launcher.check_run_worker_health(run_with(recycled))
    assert gone.status is WorkerStatus.FAILED and f"process {os.getpid()} of run run-1 is gone" in gone.msg
    # A re-execution carries its parent's tags: the parent's process is not the new run's to judge.
    copied = launcher.check_run_worker_health(run_with(alive, run_id="run-2"))
    assert copied.status is WorkerStatus.RUNNING and "not launched by WarmRunLauncher" in copied.msg
    elsewhere = replace(alive, host="another-host")
    assert launcher.check_run_worker_health(run_with(elsewhere)).status is WorkerStatus.RUNNING


def test_the_launcher_is_configured_from_dagster_yaml_with_its_preloads() -> None:
    from rocketlake.dagster.warm_runs import PRELOADED

    assert WarmRunLauncher.from_config_value(None, {})._preload == list(PRELOADED)
    assert WarmRunLauncher.from_config_value(None, {"preload": ["dagster"]})._preload == ["dagster"]


def test_the_fork_server_also_preloads_the_modules_of_the_instances_storage(tmp_path) -> None:
    """A run opens the instance: its storage classes' modules, with SQLAlchemy and Alembic, are imported once by the
    fork server, whatever the instance's storage (SQLite here; PostgreSQL's module in a deployment)."""
    from dagster import DagsterInstance

    launcher = WarmRunLauncher()
    assert launcher._instance_modules() == []  # no instance yet: nothing to name
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        launcher.register_instance(instance)
        modules = launcher._instance_modules()
    assert "dagster._core.storage.sqlite_storage" in modules and "dagster._core.storage.event_log" in modules
    assert not any(m.startswith("rocketlake") for m in modules)  # the launcher's own module is preloaded already
