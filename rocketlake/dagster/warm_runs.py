"""A Dagster run launcher that starts each run in a process forked from a warm one.

Dagster's default launcher has the code server start every run in a fresh interpreter (``multiprocessing``'s
``spawn``), which imports Dagster, PySpark's Connect client, pandas, pyarrow and rocketlake again: about 2.4 CPU
seconds on the project's machine before the run does anything, for every window of every ingestion. A long-lived
ingestion service pays its start-up once (Kafka Connect's workers, Structured Streaming's driver), and so does
this launcher: it keeps one *fork server* (``python -m rocketlake.dagster.warm_runs``, a child of the daemon), which
imports those libraries once and forks each run from it. The run itself is Dagster's own ``dagster api
execute_run``, as the default launcher's runs and those of Dagster's Docker and Kubernetes launchers are: the same
events, the same run worker, only a warm start.

Each run is forked twice (the middle process exits at once), so it belongs to no process that must reap or wait
for it: the daemon can stop or restart while runs go on, as runs outlive a code server's restart, and a Ctrl-C to
the terminal's process group still reaches them. The fork server leaves when the daemon does (its stdin closes).
The launcher names each run's process by host, boot, pid and start time (``run_guard.RunProcess``), so that
terminating a run or judging its health never mistakes a recycled pid for it.

The code location's own module is not imported ahead: a run still loads the definitions it runs afresh, so a
changed ``rocketlake.yaml`` or a changed project takes effect at the next run, as with the default launcher. The
libraries are imported when the fork server starts: upgrading them takes a restart of the daemon, as it takes a
restart of a code server.

It launches runs from the daemon's own environment, so the daemon must be able to import the code location (one
machine, or a daemon image that holds the code), as for ``dagster dev``. In ``dagster.yaml``::

    run_launcher:
      module: rocketlake.dagster.warm_runs
      class: WarmRunLauncher
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from dagster import DagsterRun, Field, Noneable

from rocketlake.dagster.dagster_private import (
    CheckRunHealthResult,
    ConfigurableClass,
    ConfigurableClassData,
    ExecuteRunArgs,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)

__all__ = ["FORK_SERVER_MODULE", "PRELOADED", "PROCESS_TAG", "WarmRunLauncher"]

#: The fork server's module (``python -m``): every run forked from it keeps this in its command line.
FORK_SERVER_MODULE = "rocketlake.dagster.warm_runs"

#: What the fork server imports once, before its first fork: what every run of rocketlake's assets imports.
PRELOADED = (
    "dagster",
    "pandas",
    "pyarrow",
    "deltalake",
    "pyspark.sql.connect.session",
    "rocketlake.dagster.definitions",
    "rocketlake.spark.materialize",
)
#: The run's process as the launcher started it (``run_guard.RunProcess``), for its termination and health check.
PROCESS_TAG = "rocketlake/launched_process"


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run in a process forked from a fork server that imported ``preload`` once (see the module).

    ``preload``: the modules the fork server imports before its first fork (default ``PRELOADED``)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None, preload: Sequence[str] | None = None):
        self._inst_data = inst_data
        self._preload = list(PRELOADED if preload is None else preload)
        self._lock = threading.Lock()  # one launch at a time talks to the fork server
        self._server: subprocess.Popen | None = None
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

    def _instance_modules(self) -> list[str]:
        """The modules of the instance's configured classes (its storages, compute logs, coordinator): a run imports
        them, and SQLAlchemy and Alembic with them, when it opens the instance, a third of its own CPU if not
        preloaded."""
        ref = self._instance.get_ref() if self.has_instance else None
        if ref is None:
            return []
        found = {getattr(ref, name) for name in ref._fields if name.endswith("_data") and name != "run_launcher_data"}
        return sorted({data.module_name for data in found if isinstance(data, ConfigurableClassData)})

    def _warm_up_line(self) -> bytes:
        """The fork server's first line of stdin: the instance the runs open (its serialized reference, or null), for
        it to open once ahead (see :func:`serve`). On stdin, not the command line: a reference may hold a setting
        written into dagster.yaml in full (a database password), which ``ps`` would show."""
        from dagster import serialize_value

        ref = serialize_value(self._instance.get_ref()) if self.has_instance else None
        return json.dumps({"instance_ref": ref}).encode() + b"\n"

    def _fork_server(self) -> subprocess.Popen:
        server = self._server
        if server is None or server.poll() is not None:
            server = self._server = subprocess.Popen(
                [sys.executable, "-m", FORK_SERVER_MODULE, *self._preload, *self._instance_modules()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            try:
                server.stdin.write(self._warm_up_line())
                server.stdin.flush()  # it warms up now, not when the first request comes
            except (BrokenPipeError, OSError):
                pass  # it died at once: the first request finds it so and starts another (_fork)
        return server

    def _fork(self, command: Sequence[str]) -> tuple[int, int]:
        """(the run's pid, the fork server's pid), the run started: a fork server that died is started again."""
        with self._lock:
            for _ in range(2):
                server = self._fork_server()
                try:
                    server.stdin.write(json.dumps(list(command)).encode() + b"\n")
                    server.stdin.flush()
                    answer = server.stdout.readline()
                except (BrokenPipeError, OSError):
                    answer = b""
                if answer.strip().isdigit():
                    return int(answer), server.pid
                server.kill()
                server.wait()
        raise RuntimeError(
            f"the warm fork server (python -m rocketlake.dagster.warm_runs) exited with {server.returncode} twice before "
            "starting a run: its error is in the daemon's output; to launch runs with Dagster's default launcher "
            "meanwhile, delete the run_launcher block of $DAGSTER_HOME/dagster.yaml and restart the daemon"
        )

    def launch_run(self, context: LaunchRunContext) -> None:
        from rocketlake.dagster.run_guard import RunProcess

        run = context.dagster_run
        if run.job_code_origin is None:
            raise ValueError(f"run {run.run_id} has no code origin: WarmRunLauncher cannot load its job")
        arguments = ExecuteRunArgs(
            job_origin=run.job_code_origin,
            run_id=run.run_id,
            instance_ref=self._instance.get_ref(),
            set_exit_code_on_failure=True,
        ).get_command_args()
        pid, server = self._fork(arguments[arguments.index("api") :])  # after the entry point: ``python -m dagster``
        self._instance.add_run_tags(run.run_id, {PROCESS_TAG: RunProcess.of(pid, run.run_id).to_tag()})
        self._instance.report_engine_event(
            f"Launched in process {pid}, forked from the warm fork server {server} (rocketlake.dagster.warm_runs).",
            run,
            cls=self.__class__,
        )

    @staticmethod
    def _process(run: DagsterRun):
        """The process this launcher started for ``run`` (not a parent run's: re-executions copy the tags)."""
        from rocketlake.dagster.run_guard import RunProcess

        process = RunProcess.from_tag(run.tags.get(PROCESS_TAG))
        return process if process is not None and process.run_id == run.run_id else None

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        process = self._process(run)
        if process is None or not process.alive():  # gone, or on another host: nothing here to signal
            return False
        try:
            os.kill(process.pid, signal.SIGINT)  # Dagster's run worker stops its steps and reports the run canceled
        except OSError:
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        process = self._process(run)
        if process is None:  # launched by another launcher (before this one was configured): not this one's to judge
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run {run.run_id} was not launched by WarmRunLauncher")
        alive = process.alive()
        if alive is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"process {process.pid} is on host {process.host}")
        if alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"process {process.pid} of run {run.run_id} is gone")


#: Set in the fork server (and so in what it forks) by a Ctrl-C to the process group: see :func:`serve`.
_interrupted = False


def _note_interrupt(signum: int, frame: object) -> None:
    global _interrupted
    _interrupted = True


def serve() -> None:
    """The fork server: imports the modules ``sys.argv[1:]`` names and opens the instance its first line of stdin
    names, then for each further line (a JSON list: the arguments of ``dagster``) forks a run and answers its pid;
    leaves when stdin closes (its daemon is gone).

    Opening the instance reads Dagster's migration scripts, which every run reads again when it opens its instance
    (four or five times a run): shared in this process (``migration_scripts``), the runs inherit them read.

    A Ctrl-C to the group does not stop it (it leaves with its daemon, which may still be launching), but it is
    noted: a run forked after it, or before its process could take the signal itself, never saw the Ctrl-C its
    group was sent, and would run to its end after everything else stopped. Such a run stops at once instead (see
    :func:`_become_run`), as the runs in flight do."""
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    first = requests.readline()
    if not first:
        return  # the daemon left before asking for anything
    _warm_up(sys.argv[1:], json.loads(first).get("instance_ref"))
    signal.signal(signal.SIGINT, _note_interrupt)
    while line := requests.readline():
        command = json.loads(line)
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(read_end)
            run = os.fork()
            if run == 0:
                os.close(write_end)
                _become_run(command)
            os.write(write_end, str(run).encode())
            os._exit(0)  # the run is nobody's child now: no process must wait for it
        os.close(write_end)
        pid = os.read(read_end, 32)
        os.close(read_end)
        os.waitpid(middle, 0)
        try:
            answers.write(pid + b"\n")
            answers.flush()
        except BrokenPipeError:  # the daemon left while launching: nobody asks for more (nothing to undo here)
            os._exit(0)


def _warm_up(modules: list[str], instance_ref: str | None) -> None:
    """What the fork server does once, before its first fork: imports ``modules``, opens the instance ``instance_ref``
    names (serialized), then leaves all it holds out of the runs' garbage collections.

    A forked run inherits the fork server's 200,000 objects and more (Dagster, PySpark, pandas, pyarrow), and each of
    its full collections walked them all again (about 0.13 CPU-s each on the project's machine), touching, and so
    copying, the pages they sit on. Frozen (``gc.freeze``, Python's own advice for a server that forks without
    exec), they are in no generation the runs collect. They are modules and what their imports keep: nothing a run
    would have freed."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            pass  # an optional library missing: the runs import what they need themselves
    from rocketlake.dagster.migration_scripts import share_revision_maps

    share_revision_maps()
    if instance_ref is not None:
        _open_instance(instance_ref)
    gc.collect()  # what the imports and the instance left unreachable is freed, not frozen for ever
    gc.freeze()


def _open_instance(serialized_ref: str) -> None:
    """Opens and closes the instance, which reads what its storages check (the migration scripts) into this process."""
    from dagster import DagsterInstance, deserialize_value

    try:
        with DagsterInstance.from_ref(deserialize_value(serialized_ref)):
            pass
    except Exception:  # noqa: BLE001 - only a head start: each run opens the instance itself and reports what fails
        pass


def _become_run(command: list[str]) -> NoReturn:
    """In the run's process: Dagster's own ``dagster api execute_run`` as ``python -m dagster`` runs it; never returns."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Dagster turns it into the run's interruption
    if _interrupted:  # the group's Ctrl-C came before this process could take it (see serve): stop as the others did
        os._exit(128 + signal.SIGINT)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the fork server's stdin is its requests: not the run's
    os.dup2(devnull, 1)  # ... and its stdout its answers; the run's own output is its event log and stderr
    os.close(devnull)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr
    sys.argv = ["dagster", *command]
    runpy.run_module("dagster", run_name="__main__", alter_sys=True)
    # Dagster's command ends with sys.exit: its SystemExit leaves the fork server's loop (which holds nothing to
    # undo) and ends this process as any Python ends, its exit handlers run. One that returned ends the same way.
    raise SystemExit(0)


if __name__ == "__main__":
    serve()
