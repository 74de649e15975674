"""A run that died never blocks the next run of its consumer group.

Runs of one consumer group are kept apart by a Dagster pool (``rocketmq_group_<group>``, limit 1): the
asset's step claims the pool's slot before it starts. A run whose process is killed outright (SIGKILL,
the OOM killer, a power cut) never frees that slot and stays STARTED for ever, so every later run of the
group would wait for a slot nobody releases. Dagster's daemon frees the slots of runs that *ended*, and
its run monitoring needs a run launcher that can check a worker's health; neither sees a run started by
``dagster asset materialize`` die.

So every run of rocketlake's own jobs (``<table>_job``: the schedule's, the sensors', ``rocketlake backfill``'s,
the job launched from the UI), in its executor, before any step claims a slot:

1. records which process it is (host, boot id, pid, the process's start time) in a run tag;
2. looks at every run that holds or waits for a pool slot, and every run still marked in progress: one
   that rocketlake recorded on this host whose process is gone (or whose host rebooted since) is marked
   failed and its slots are freed, and the new run says so in one line of its log. A run that already
   ended but still holds slots (killed while its failure was being written) is freed the same way.

The executor is the job's own, not the code location's: a user's project keeps its executor for its own jobs.
A run of rocketlake's assets through another job (the UI's "Materialize" button, ``dagster asset materialize``)
records its process when its step starts (``record_process``), and the ``rocketlake_dead_runs`` sensor reclaims
it within 30 seconds if it dies; such a run does not reclaim others before it starts.

A run recorded on another host cannot be checked from here: it keeps its slot until it ends or
Dagster's run monitoring fails it (see docs/guide/deploying.md). The start time guards against
a recycled pid; the boot id against a reboot.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dagster import DagsterEvent, DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter, executor

from rocketlake.dagster.dagster_private import (
    IN_PROC_CONFIG,
    EngineEventData,
    ExecuteRunWithPlanIterable,
    InProcessExecutor,
    PlanExecutionContextManager,
    _core_in_process_executor_creation,
)
from rocketlake.dagster.pool_wait import paced_execution_iterator

PROCESS_TAG = "rocketlake/process"
IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
#: A run on its way: queued, or not ended yet (what the schedule and the catch-up never ask for twice).
ON_ITS_WAY = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
FINISHED_STATUSES = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass(frozen=True)
class RunProcess:
    """The process executing a run, identified so that a recycled pid or a reboot is not mistaken for it."""

    host: str
    boot_id: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot
    run_id: str = ""  # the run it recorded itself for (a re-execution inherits its parent's tag: see recorded_process)
    # The PID namespace its pid is a number in: two containers may share a host name and a kernel (boot id) and
    # not their pids; None in tags written before it was recorded.
    pid_namespace: str | None = None

    @classmethod
    def current(cls, run_id: str = "") -> "RunProcess":
        return cls.of(os.getpid(), run_id)

    @classmethod
    def of(cls, pid: int, run_id: str = "") -> "RunProcess":
        """Process ``pid`` of this host (a launcher naming the process it started for ``run_id``)."""
        return cls(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or 0, run_id, _pid_namespace())

    def to_tag(self) -> str:
        return f"{self.host}|{self.boot_id}|{self.pid}|{self.start_ticks}|{self.run_id}|{self.pid_namespace or ''}"

    @classmethod
    def from_tag(cls, value: str | None) -> "RunProcess | None":
        parts = (value or "").split("|")
        try:
            host, boot_id, pid, ticks, run_id = parts[:5]
            namespace = parts[5] if len(parts) == 6 else None
            if len(parts) not in (5, 6):
                return None
            return cls(host, boot_id, int(pid), int(ticks), run_id, namespace or None)
        except ValueError:
            return None

    def alive(self) -> bool | None:
        """True or False when this host can tell; None for a process on another host, or in another PID namespace
        of this one (another container with the same host name): its pid means nothing here."""
        if self.host != socket.gethostname():
            return None
        if self.pid_namespace is not None and self.pid_namespace != _pid_namespace():
            return None
        if self.boot_id != _boot_id():
            return False  # the host rebooted: no process of before survives that
        return _start_ticks(self.pid) == self.start_ticks


def recorded_process(run: DagsterRun) -> RunProcess | None:
    """The process that recorded itself as executing ``run``, or None while none has. A re-execution (Dagster's run
    retries, the UI's "Re-execute") is created with its parent's tags, this one among them: a tag recorded for another
    run names the parent's process, which is not this run's and is likely dead, so it does not count."""
    process = RunProcess.from_tag(run.tags.get(PROCESS_TAG))
    return process if process is not None and process.run_id == run.run_id else None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]": the namespace's inode
    except OSError:
        return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else int(start)  # a zombie has exited: it only waits to be reaped


def reclaim_dead_runs(instance: DagsterInstance, current_run_id: str | None = None) -> list[str]:
    """Fail and free every dead rocketlake run that holds or waits for a pool slot or is marked in
    progress; one line per run."""
    storage = instance.event_log_storage
    slot_holders = storage.get_concurrency_run_ids() if storage.supports_global_concurrency_limits else set()
    runs = {r.run_id: r for r in instance.get_runs(RunsFilter(statuses=IN_PROGRESS))}
    ended_holders = slot_holders - runs.keys()
    if ended_holders:
        runs.update((r.run_id, r) for r in instance.get_runs(RunsFilter(run_ids=sorted(ended_holders))))
    lines = []
    for run_id, run in sorted(runs.items()):
        process = recorded_process(run)
        if run_id == current_run_id or process is None:
            continue  # not a rocketlake run (or not yet one that recorded itself): not ours to judge
        if run.status in FINISHED_STATUSES:
            storage.free_concurrency_slots_for_run(run_id)
            lines.append(f"run {run_id} ended ({run.status.value}) still holding pool slots; released them")
        elif process.alive() is False:
            what = (
                f"its process {process.pid} on {process.host} is gone"
                if process.boot_id == _boot_id()
                else f"{process.host} has rebooted since it started"
            )
            instance.report_run_failed(
                run,
                f"rocketlake: this run died without finishing ({what}); marked failed "
                f"by run {current_run_id} so the consumer group's next runs can go on",
            )
            if run_id in slot_holders:
                storage.free_concurrency_slots_for_run(run_id)
            lines.append(
                f"run {run_id} died without finishing ({what}): marked it failed"
                f"{' and released its pool slot' if run_id in slot_holders else ''}; its windows are "
                "materialized again by a later run, exactly once"
            )
    return lines


def record_process(instance: DagsterInstance, run: DagsterRun) -> None:
    """Tag ``run`` with the process executing it, unless its executor already did (a tag inherited from the run it
    re-executes is replaced)."""
    if recorded_process(run) is None:
        instance.add_run_tags(run.run_id, {PROCESS_TAG: RunProcess.current(run.run_id).to_tag()})


class ReclaimingInProcessExecutor(InProcessExecutor):
    """Dagster's in-process executor, after recording this run's process and reclaiming dead runs' slots, whose
    steps sleep while they wait for a pool slot (``pool_wait``)."""

    def execute(self, plan_context, execution_plan) -> Iterator[DagsterEvent]:
        instance: DagsterInstance = plan_context.instance
        run: DagsterRun = plan_context.dagster_run
        record_process(instance, run)
        for line in reclaim_dead_runs(instance, run.run_id):
            yield DagsterEvent.engine_event(plan_context, line, EngineEventData())
        # Dagster's InProcessExecutor.execute, with the loop that sleeps while a step waits for its pool slot
        # (``pool_wait``) instead of ``inprocess_execution_iterator``, which spins.
        steps = execution_plan.step_keys_to_execute
        pid = os.getpid()
        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in process (pid: {pid})",
            event_specific_data=EngineEventData.in_process(pid, steps),
        )
        began = time.monotonic()
        yield from ExecuteRunWithPlanIterable(
            execution_plan=plan_context.execution_plan,
            iterator=paced_execution_iterator,
            execution_context_manager=PlanExecutionContextManager(
                job=plan_context.job,
                retry_mode=plan_context.retry_mode,
                execution_plan=plan_context.execution_plan,
                run_config=plan_context.run_config,
                dagster_run=plan_context.dagster_run,
                instance=plan_context.instance,
                raise_on_error=plan_context.raise_on_error,
                output_capture=plan_context.output_capture,
                step_dependency_config=self.step_dependency_config,
            ),
        )
        yield DagsterEvent.engine_event(
            plan_context,
            f"Finished steps in process (pid: {pid}) in {time.monotonic() - began:.1f} s",
            event_specific_data=EngineEventData.in_process(pid, steps),
        )


@executor(name="rocketlake_in_process", config_schema=IN_PROC_CONFIG)
def rocketlake_executor(init_context) -> ReclaimingInProcessExecutor:
    """Every step in the run's own process (an ingestion run is one Spark-driving step), with dead runs'
    pool slots reclaimed first. Takes the same configuration as Dagster's ``in_process`` executor."""
    base = _core_in_process_executor_creation(init_context.executor_config)
    return ReclaimingInProcessExecutor(base.retries, base.step_dependency_config)
