"""The warm fork server's warm-up: it reads Dagster's migration scripts once, a run opening its instance reads none
again (``dagster.migration_scripts``), and what it loaded is out of its runs' garbage collections (the runs
themselves are tested under a real daemon in tests/integration/test_warm_runs.py)."""

from __future__ import annotations

import json
import threading

import pytest
from alembic.script import ScriptDirectory
from dagster import DagsterEventType, DagsterInstance, DagsterRun, deserialize_value, instance_for_test

from rocketlake.dagster import migration_scripts
from rocketlake.dagster.warm_runs import WarmRunLauncher, _open_instance


@pytest.fixture
def script_reads(monkeypatch):
    """How many times this process reads a directory of migration scripts; Alembic's own ``from_config`` put back
    after the test (sharing is for the fork server's process, not the test worker's)."""
    reads = []
    read = ScriptDirectory._load_revisions

    def counted(script):
        reads.append(script.dir)
        return read(script)

    monkeypatch.setattr(ScriptDirectory, "_load_revisions", counted)
    own = ScriptDirectory.__dict__["from_config"]
    monkeypatch.setattr(migration_scripts, "_shared", {})
    monkeypatch.setattr(migration_scripts, "_installed", False)
    try:
        yield reads
    finally:
        ScriptDirectory.from_config = own


def open_as_a_run_does(ref) -> None:
    """What a run does to its instance: opens it from the reference and writes its run's first event (on SQLite, a
    new event-log shard whose schema is created and stamped)."""
    with DagsterInstance.from_ref(ref) as instance:
        run = instance.add_run(DagsterRun(job_name="orders_raw_job"))
        instance.report_engine_event("started", run)
        assert [
            r.event_log_entry.dagster_event.event_type for r in instance.get_records_for_run(run.run_id).records
        ] == [DagsterEventType.ENGINE_EVENT]


def test_a_run_opening_its_instance_reads_the_scripts_each_time_unless_they_are_shared(script_reads):
    with instance_for_test() as instance:
        ref = instance.get_ref()
        script_reads.clear()  # those of the test's own instance
        open_as_a_run_does(ref)
        unshared = len(script_reads)
        assert unshared >= 3  # runs, schedules, the run's shard: each check reads every script again

        migration_scripts.share_revision_maps()
        migration_scripts.share_revision_maps()  # idempotent
        script_reads.clear()
        open_as_a_run_does(ref)
        assert len(script_reads) == 1  # once for the process, whichever storage asks
        open_as_a_run_does(ref)
        assert len(script_reads) == 1


def test_the_fork_server_opens_the_launchers_instance_ahead_so_runs_read_no_script(script_reads):
    with instance_for_test() as instance:
        launcher = WarmRunLauncher()
        assert json.loads(launcher._warm_up_line()) == {"instance_ref": None}  # no instance: nothing to open
        launcher.register_instance(instance)
        line = launcher._warm_up_line()
        assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line of the fork server's stdin
        serialized = json.loads(line)["instance_ref"]
        assert deserialize_value(serialized) == instance.get_ref()

        threads = threading.active_count()
        migration_scripts.share_revision_maps()
        script_reads.clear()  # those of the test's own instance
        _open_instance(serialized)  # as serve() does before its first fork
        assert len(script_reads) == 1
        assert threading.active_count() == threads  # nothing left running in a process about to fork
        open_as_a_run_does(instance.get_ref())  # what a forked run then does: no script read again
        assert len(script_reads) == 1


def test_an_instance_that_cannot_be_opened_is_left_to_the_runs(script_reads):
    _open_instance("not a reference")  # the runs open it themselves and report what fails
    assert script_reads == []


def test_the_fork_server_leaves_what_it_loaded_out_of_its_runs_garbage_collections(script_reads):
    """A run forked from the fork server walks none of the objects the fork server loaded at its full collections."""
    import gc

    from rocketlake.dagster.warm_runs import _warm_up

    try:
        _warm_up(["json", "no_such_module_here"], None)  # a module missing is the run's to report
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # at least this test worker's Dagster and pytest, frozen
        tracked = sum(len(gc.get_objects(generation)) for generation in range(3))
        assert tracked < frozen / 10  # a collection now walks what came after, not what was loaded
    finally:
        gc.unfreeze()  # the test worker's objects collected again as before
