"""A Dagster run launcher that starts each run in a process forked from a warm one.

Dagster's default launcher has the code server start every run in a fresh interpreter (``multiprocessing``'s
``spawn``), which imports Dagster, PySpark's Connect client, pandas, pyarrow and rocketlake again: about 2.4 CPU
seconds on the project's machine before the run does anything, for every window of every ingestion. A long-lived
ingestion service pays its start-up once (Kafka Connect's workers, Structured Streaming's driver), and so does
this launcher: it keeps one *fork server* (Python's ``multiprocessing`` ``forkserver``), which imports those
libraries once, and forks each run from it. The run itself is Dagster's own ``dagster api execute_run``, as the
default launcher's runs and those of Dagster's Docker and Kubernetes launchers are: the same events, the same
run worker, only a warm start.

The code location's own module is not imported ahead: a run still loads the definitions it runs afresh, so a
changed ``rocketlake.yaml`` or a changed project takes effect at the next run, as with the default launcher. The
libraries are imported when the fork server starts: upgrading them takes a restart of the daemon, as it takes a
restart of a code server.

It launches runs from the daemon's own environment, so the daemon must be able to import the code location (one
machine, or a daemon image that holds the code), as for ``dagster dev``. In ``dagster.yaml``::

    run_launcher:
      module: rocketlake.warm_runs
      class: WarmRunLauncher
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import DagsterRun, Field, Noneable

from rocketlake.assets.dagster_private import (
    CheckRunHealthResult,
    ConfigurableClass,
    ConfigurableClassData,
    ExecuteRunArgs,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)

__all__ = ["PRELOADED", "PID_TAG", "WarmRunLauncher"]

#: What the fork server imports once, before its first fork: what every run of rocketlake's assets imports.
PRELOADED = (
    "dagster",
    "pandas",
    "pyarrow",
    "deltalake",
    "pyspark.sql.connect.session",
    "rocketlake.assets.definitions",
    "rocketlake.pipelines.materialize",
)
#: The run's process, for its termination and its health check.
PID_TAG = "rocketlake/run_pid"


def execute_run(command: Sequence[str]) -> None:
    """In the forked process: Dagster's own ``dagster api execute_run`` (``command``: its arguments), as
    ``python -m dagster`` runs it."""
    sys.argv = ["dagster", *command]
    runpy.run_module("dagster", run_name="__main__", alter_sys=True)


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run in a process forked from a fork server that imported ``preload`` once (see the module).

    ``preload``: the modules the fork server imports before its first fork (default ``PRELOADED``)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None, preload: Sequence[str] | None = None):
        self._inst_data = inst_data
        self._preload = list(PRELOADED if preload is None else preload)
        self._lock = threading.Lock()
        self._context = None
        self._processes: dict[str, multiprocessing.process.BaseProcess] = {}
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"preload": Field(Noneable([str]), is_required=False, default_value=None)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> WarmRunLauncher:
        return cls(inst_data=inst_data, preload=config_value.get("preload"))

    def _forks(self):
        """The forkserver context, its modules set before the first fork starts it."""
        if self._context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(self._preload)
            self._context = context
        return self._context

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if run.job_code_origin is None:
            raise ValueError(f"run {run.run_id} has no code origin: WarmRunLauncher cannot load its job")
        arguments = ExecuteRunArgs(
            job_origin=run.job_code_origin,
            run_id=run.run_id,
            instance_ref=self._instance.get_ref(),
            set_exit_code_on_failure=True,
        ).get_command_args()
        command = arguments[arguments.index("api") :]  # after the entry point: the fork runs ``python -m dagster``
        with self._lock:
            multiprocessing.active_children()  # reaps the runs that ended (of this process's forks)
            process = self._forks().Process(target=execute_run, args=(command,), name=f"dagster-run-{run.run_id}")
            process.start()
            self._processes = {k: p for k, p in self._processes.items() if p.is_alive()}
            self._processes[run.run_id] = process
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(process.pid)})
        self._instance.report_engine_event(
            f"Launched in process {process.pid}, forked from a warm fork server (rocketlake.warm_runs).",
            run,
            cls=self.__class__,
        )

    def _pid(self, run: DagsterRun) -> int | None:
        process = self._processes.get(run.run_id)
        if process is not None:
            return process.pid
        tag = run.tags.get(PID_TAG)
        return int(tag) if tag and tag.isdigit() else None

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        pid = self._pid(run)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGINT)  # Dagster's run worker stops its steps and reports the run canceled
        except ProcessLookupError:
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = self._pid(run)
        if pid is None:  # launched by another launcher (before this one was configured): not this one's to judge
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run {run.run_id} was not launched by WarmRunLauncher")
        process = self._processes.get(run.run_id)
        if process is not None:
            if process.is_alive():
                return CheckRunHealthResult(WorkerStatus.RUNNING)
            status = WorkerStatus.SUCCESS if process.exitcode == 0 else WorkerStatus.FAILED
            return CheckRunHealthResult(status, f"process {pid} exited with {process.exitcode}")
        try:
            os.kill(pid, 0)  # launched by an earlier daemon: alive or not is all there is to know
        except ProcessLookupError:
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"process {pid} is gone")
        return CheckRunHealthResult(WorkerStatus.RUNNING)
