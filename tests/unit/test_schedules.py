"""The window schedule asks for closed, unmaterialized windows only, each once (run key = partition)."""

from datetime import datetime, timedelta, timezone

from dagster import build_schedule_context, instance_for_test

from rocketlake.assets.partitions import last_closed_windows, window_partitions
from rocketlake.assets.schedules import CATCH_UP, build_window_schedule
from rocketlake.assets.translator import translate
from rocketlake.pipelines.config import parse_config
from tests.unit.test_config import with_ingestion

START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def config(grace: int = 60):
    return parse_config(with_ingestion(window={"cron": "0 * * * *", "grace_seconds": grace,
                                               "start": START.isoformat()}))


def ingestion(grace: int = 60):
    return config(grace).ingestions["orders"]


def schedule_of(grace: int = 60):
    config_ = config(grace)
    return build_window_schedule(config_.ingestions["orders"], translate(config_)["orders"])


def test_only_windows_closed_with_grace_are_due():
    parts = window_partitions(ingestion().window)
    now = START + timedelta(hours=5, seconds=59)  # 05:00 window ended 59 s ago: still in its 60 s grace
    closed = last_closed_windows(parts, now, 60, CATCH_UP)
    assert closed == ["2026-11-01-01:00", "2026-11-01-02:00", "2026-11-01-03:00"]
    later = START + timedelta(hours=5, seconds=61)
    assert last_closed_windows(parts, later, 60, CATCH_UP)[-1] == "2026-11-01-04:00"


def test_catch_up_is_bounded_and_skips_materialized_windows():
    from dagster import AssetMaterialization

    config_ = config()
    schedule = build_window_schedule(config_.ingestions["orders"], translate(config_)["orders"])
    with instance_for_test() as instance:
        instance.report_runless_asset_event(AssetMaterialization(
            asset_key=translate(config_)["orders"].table_key, partition="2026-11-03-23:00"))
        context = build_schedule_context(instance=instance, scheduled_execution_time=START + timedelta(days=3, minutes=5))
        requests = schedule(context)
    assert [r.partition_key for r in requests] == ["2026-11-03-21:00", "2026-11-03-22:00"]


def test_schedule_emits_run_requests_keyed_by_partition():
    schedule = schedule_of()
    with instance_for_test() as instance:
        context = build_schedule_context(instance=instance,
                                         scheduled_execution_time=START + timedelta(hours=2, minutes=2))
        requests = schedule(context)
    assert [(r.run_key, r.partition_key) for r in requests] == [
        ("2026-11-01-00:00", "2026-11-01-00:00"), ("2026-11-01-01:00", "2026-11-01-01:00")]


def test_a_window_with_a_run_queued_or_in_progress_is_not_asked_for_again():
    """A run waiting for its group's pool slot (or outlasting a tick) is not doubled at the next tick; a window
    whose run failed is asked for again."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    schedule = schedule_of()
    job = "orders_raw_job"
    with instance_for_test() as instance:
        create_run_for_test(instance, job_name=job, status=DagsterRunStatus.STARTED,
                            tags={"dagster/partition": "2026-11-01-00:00"})
        create_run_for_test(instance, job_name=job, status=DagsterRunStatus.FAILURE,
                            tags={"dagster/partition": "2026-11-01-01:00"})
        create_run_for_test(instance, job_name="another_job", status=DagsterRunStatus.STARTED,
                            tags={"dagster/partition": "2026-11-01-01:00"})
        context = build_schedule_context(instance=instance,
                                         scheduled_execution_time=START + timedelta(hours=2, minutes=2))
        requests = schedule(context)
    assert [r.partition_key for r in requests] == ["2026-11-01-01:00"]
