"""Dead runs' pool slots are reclaimed, live ones are left alone: on a real (temporary) Dagster instance."""

import dataclasses
import socket
import subprocess

import pytest
from dagster import DagsterRunStatus, instance_for_test
from dagster._core.test_utils import create_run_for_test

from rocketlake.dagster.run_guard import (
    PROCESS_TAG,
    RunProcess,
    _boot_id,
    _start_ticks,
    reclaim_dead_runs,
    record_process,
    recorded_process,
)

POOL = "rocketmq_group_g"


def dead_process() -> RunProcess:
    """A process that really existed here and has exited since."""
    child = subprocess.Popen(["sleep", "60"])
    process = RunProcess(socket.gethostname(), _boot_id(), child.pid, _start_ticks(child.pid))
    child.kill()
    child.wait()
    return process


def test_process_identity_round_trips_and_tells_alive_from_dead():
    me = RunProcess.current("a-run")
    assert RunProcess.from_tag(me.to_tag()) == me
    assert me.alive() is True
    assert dead_process().alive() is False
    assert RunProcess(me.host, me.boot_id, me.pid, me.start_ticks + 1).alive() is False  # a recycled pid
    assert RunProcess(me.host, "another-boot", me.pid, me.start_ticks).alive() is False  # the host rebooted
    assert RunProcess("elsewhere.example", me.boot_id, me.pid, me.start_ticks).alive() is None  # cannot tell
    assert RunProcess.from_tag("not|a|tag") is None


@pytest.fixture
def instance():
    with instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 1}}}) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 1)
        yield instance


def started_run(instance, process: RunProcess | None, holds_slot: bool = True, tags: dict | None = None):
    """A run in progress; ``process`` recorded as executing it."""
    run = create_run_for_test(instance, job_name="orders_raw_job", status=DagsterRunStatus.STARTED, tags=tags or {})
    if process is not None:
        instance.add_run_tags(run.run_id, {PROCESS_TAG: dataclasses.replace(process, run_id=run.run_id).to_tag()})
    if holds_slot:
        assert instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "orders_raw").is_claimed
    return run


def test_a_dead_run_is_failed_and_its_slot_released(instance):
    dead = started_run(instance, dead_process())
    lines = reclaim_dead_runs(instance, current_run_id="the-new-run")
    assert len(lines) == 1 and dead.run_id in lines[0] and "died without finishing" in lines[0]
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert instance.event_log_storage.get_concurrency_run_ids() == set()
    assert instance.event_log_storage.claim_concurrency_slot(POOL, "the-new-run", "orders_raw").is_claimed


def test_live_foreign_and_unrecorded_runs_keep_their_slots(instance):
    live = started_run(instance, RunProcess.current())
    assert reclaim_dead_runs(instance, "the-new-run") == []
    assert instance.get_run_by_id(live.run_id).status == DagsterRunStatus.STARTED
    instance.event_log_storage.free_concurrency_slots_for_run(live.run_id)

    me = RunProcess.current()
    foreign = started_run(instance, RunProcess("elsewhere.example", me.boot_id, 1, 1))
    assert reclaim_dead_runs(instance, "the-new-run") == []  # another host: only its own monitoring can tell
    instance.event_log_storage.free_concurrency_slots_for_run(foreign.run_id)

    unrecorded = started_run(instance, None)  # not started by rocketlake's executor: not ours to judge
    assert reclaim_dead_runs(instance, "the-new-run") == []
    assert instance.event_log_storage.get_concurrency_run_ids() == {unrecorded.run_id}


def test_a_dead_run_without_a_slot_is_marked_failed(instance):
    dead = started_run(instance, dead_process(), holds_slot=False)
    [line] = reclaim_dead_runs(instance, "the-new-run")
    assert "marked it failed;" in line
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE


def test_an_ended_run_still_holding_a_slot_is_released(instance):
    ended = started_run(instance, RunProcess.current())
    instance.report_run_failed(instance.get_run_by_id(ended.run_id))
    [line] = reclaim_dead_runs(instance, "the-new-run")
    assert "ended (FAILURE) still holding pool slots" in line
    assert instance.event_log_storage.get_concurrency_run_ids() == set()


def test_the_daemon_sensor_reclaims_dead_runs(instance):
    from dagster import build_sensor_context

    from rocketlake.dagster.sensors import dead_runs_sensor

    dead = started_run(instance, dead_process())
    result = dead_runs_sensor(build_sensor_context(instance=instance))
    assert dead.run_id in result.skip_message and "died without finishing" in result.skip_message
    assert instance.event_log_storage.get_concurrency_run_ids() == set()
    assert "no dead rocketlake run" in dead_runs_sensor(build_sensor_context(instance=instance)).skip_message


def test_a_re_execution_is_not_judged_by_the_process_tag_it_inherited(instance):
    """Dagster's run retries create the new run with its parent's tags: the dead parent's process among them. Until
    the new run records its own process it is not judged, and then its own process counts."""
    parent = dead_process()
    inherited = {PROCESS_TAG: dataclasses.replace(parent, run_id="the-killed-run").to_tag()}
    retry = started_run(instance, None, tags=inherited)
    assert recorded_process(retry) is None
    assert reclaim_dead_runs(instance, "the-new-run") == []
    assert instance.get_run_by_id(retry.run_id).status == DagsterRunStatus.STARTED
    record_process(instance, retry)
    assert recorded_process(instance.get_run_by_id(retry.run_id)) == RunProcess.current(retry.run_id)
    assert reclaim_dead_runs(instance, "the-new-run") == []  # alive: it keeps its slot
    assert instance.event_log_storage.get_concurrency_run_ids() == {retry.run_id}


def test_a_live_run_in_another_pid_namespace_of_this_host_is_never_judged_dead(instance):
    """Two containers sharing the host name and the kernel (boot id) but not their pids: a run recorded in the other
    one names a pid that is another process here, or none. It is left alone; before the namespace was recorded it
    was failed and its slot taken while it ran."""
    import sys

    code = (
        "import time; from rocketlake.dagster.run_guard import RunProcess; "
        "print(RunProcess.current().to_tag(), flush=True); time.sleep(60)"
    )
    # A process in a PID namespace of its own, as a container's (inside a user namespace: no root needed).
    unshare = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"]
    contained = subprocess.Popen([*unshare, sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        tag = contained.stdout.readline().strip()
        process = RunProcess.from_tag(tag)
        assert process is not None and process.host == socket.gethostname() and process.pid <= 3, tag
        assert process.pid_namespace and process.pid_namespace != RunProcess.current().pid_namespace
        assert process.alive() is None  # its pid names nothing here, or another process
        live = started_run(instance, process)
        assert reclaim_dead_runs(instance, "the-new-run") == []
        assert instance.get_run_by_id(live.run_id).status == DagsterRunStatus.STARTED
        assert instance.event_log_storage.get_concurrency_run_ids() == {live.run_id}
    finally:
        contained.kill()
        contained.wait()
