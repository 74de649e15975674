"""The window schedule asks for closed, unmaterialized windows only, each once (run key = partition)."""

from datetime import datetime, timedelta, timezone

from dagster import build_schedule_context, instance_for_test

from rocketlake.dagster.partitions import RANGE_END, RANGE_START, last_closed_windows, window_partitions
from rocketlake.dagster.schedules import CATCH_UP, build_window_schedule
from rocketlake.dagster.translator import translate
from rocketlake.engine.config import parse_config
from tests.unit.support import with_ingestion

START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def config(grace: int = 60):
    return parse_config(
        with_ingestion(window={"cron": "0 * * * *", "grace_seconds": grace, "start": START.isoformat()})
    )


def ingestion(grace: int = 60):
    return config(grace).ingestions["orders"]


def schedule_of(grace: int = 60):
    config_ = config(grace)
    return build_window_schedule(config_.ingestions["orders"], translate(config_)["orders"])


def windows_of(request) -> tuple[str, str]:
    """(first, last) window of a run request: its partition, or its range."""
    if request.partition_key is not None:
        return request.partition_key, request.partition_key
    return request.tags[RANGE_START], request.tags[RANGE_END]


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
        instance.report_runless_asset_event(
            AssetMaterialization(asset_key=translate(config_)["orders"].table_key, partition="2026-11-03-23:00")
        )
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=START + timedelta(days=3, minutes=5)
        )
        requests = schedule(context)
    # The two windows left, which follow each other: one run lands both.
    assert [windows_of(r) for r in requests] == [("2026-11-03-21:00", "2026-11-03-22:00")]


def test_schedule_emits_run_requests_keyed_by_partition_or_by_range():
    schedule = schedule_of()
    with instance_for_test() as instance:
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=START + timedelta(hours=1, minutes=2)
        )
        (single,) = schedule(context)
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=START + timedelta(hours=2, minutes=2)
        )
        (both,) = schedule(context)
    assert (single.run_key, single.partition_key) == ("2026-11-01-00:00", "2026-11-01-00:00")
    assert (both.run_key, windows_of(both)) == (
        "2026-11-01-00:00...2026-11-01-01:00",
        ("2026-11-01-00:00", "2026-11-01-01:00"),
    )


def test_behind_a_tick_asks_for_nothing_then_one_run_takes_every_window_closed_meanwhile():
    """Runs that outlast their windows (a slow machine, a backlog) must not queue a run per window for ever: with a
    run landing and one waiting, a tick asks for nothing; once one ends, one run takes the windows left."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    schedule = schedule_of()
    job = "orders_raw_job"
    tick = START + timedelta(hours=5, minutes=2)  # windows 02:00, 03:00, 04:00 are the last three closed
    with instance_for_test() as instance:
        create_run_for_test(
            instance, job_name=job, status=DagsterRunStatus.STARTED, tags={"dagster/partition": "2026-11-01-01:00"}
        )
        waiting = create_run_for_test(
            instance, job_name=job, status=DagsterRunStatus.STARTING, tags={"dagster/partition": "2026-11-01-02:00"}
        )
        skipped = schedule(build_schedule_context(instance=instance, scheduled_execution_time=tick))
        assert "2 runs of orders_raw_job are on their way" in skipped.skip_message
        instance.report_run_failed(waiting)  # one ends (a failure, here): its window is left too
        (request,) = schedule(build_schedule_context(instance=instance, scheduled_execution_time=tick))
    assert windows_of(request) == ("2026-11-01-02:00", "2026-11-01-04:00")


def test_a_window_with_a_run_queued_or_in_progress_is_not_asked_for_again():
    """A run waiting for its group's pool slot (or outlasting a tick) is not doubled at the next tick; a window
    whose run failed is asked for again."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    schedule = schedule_of()
    job = "orders_raw_job"
    with instance_for_test() as instance:
        create_run_for_test(
            instance, job_name=job, status=DagsterRunStatus.STARTED, tags={"dagster/partition": "2026-11-01-00:00"}
        )
        create_run_for_test(
            instance, job_name=job, status=DagsterRunStatus.FAILURE, tags={"dagster/partition": "2026-11-01-01:00"}
        )
        create_run_for_test(
            instance,
            job_name="another_job",
            status=DagsterRunStatus.STARTED,
            tags={"dagster/partition": "2026-11-01-01:00"},
        )
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=START + timedelta(hours=2, minutes=2)
        )
        requests = schedule(context)
    assert [r.partition_key for r in requests] == ["2026-11-01-01:00"]


def test_a_window_closing_before_the_next_tick_is_asked_for_ahead_with_its_close():
    """With a grace that is not whole minutes, a minute's tick never falls on a close: the tick before it asks for
    the window, tagged with its close, instead of leaving it a minute to the next tick."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from rocketlake.dagster.ingestion import CLOSES_AT_TAG

    schedule = schedule_of(grace=2)
    tick = START + timedelta(hours=2)  # the 01:00 window ends now and closes at 02:00:02
    with instance_for_test() as instance:
        requests = schedule(build_schedule_context(instance=instance, scheduled_execution_time=tick))
        # The closed window before it is taken in the same run (one run, not two queued behind each other), which
        # waits for the close like the window's own.
        assert [(windows_of(r), r.tags.get(CLOSES_AT_TAG)) for r in requests] == [
            (("2026-11-01-00:00", "2026-11-01-01:00"), str(int((tick + timedelta(seconds=2)).timestamp() * 1000))),
        ]
        # Its run under way: the next tick, after the close, asks for neither of its windows again.
        create_run_for_test(instance, job_name="orders_raw_job", status=DagsterRunStatus.STARTED, tags=requests[0].tags)
        later = schedule(
            build_schedule_context(instance=instance, scheduled_execution_time=tick + timedelta(minutes=1))
        )
        assert list(later) == []
    # Closed windows that do not lead up to it keep runs of their own, without its close.
    with instance_for_test() as instance:
        create_run_for_test(
            instance,
            job_name="orders_raw_job",
            status=DagsterRunStatus.STARTED,
            tags={"dagster/partition": "2026-11-01-01:00"},
        )
        apart = schedule(build_schedule_context(instance=instance, scheduled_execution_time=tick + timedelta(hours=1)))
        assert [(windows_of(r), r.tags.get(CLOSES_AT_TAG)) for r in apart] == [
            (("2026-11-01-00:00", "2026-11-01-00:00"), None),
            (
                ("2026-11-01-02:00", "2026-11-01-02:00"),
                str(int((tick + timedelta(hours=1, seconds=2)).timestamp() * 1000)),
            ),
        ]
    # A grace of whole minutes: the close falls on a tick, nothing is asked for ahead.
    with instance_for_test() as instance:
        on_tick = schedule_of(grace=60)(
            build_schedule_context(instance=instance, scheduled_execution_time=tick + timedelta(minutes=1))
        )
    assert [(windows_of(r), r.tags.get(CLOSES_AT_TAG)) for r in on_tick] == [
        (("2026-11-01-00:00", "2026-11-01-01:00"), None)
    ]


def test_a_run_asked_for_ahead_waits_for_the_close_and_never_longer_than_the_lead():
    from rocketlake.dagster.ingestion import CLOSES_AT_TAG, LEAD_SECONDS, seconds_to_close

    now = 1_800_000_000.0
    assert seconds_to_close({}, now) == 0
    assert seconds_to_close({CLOSES_AT_TAG: str(int(now * 1000) + 2500)}, now) == 2.5
    assert seconds_to_close({CLOSES_AT_TAG: str(int(now * 1000) - 1)}, now) == 0  # closed: a retry, or a late start
    # Further ahead than a schedule asks: not waited for (the run then refuses the open window by name).
    assert seconds_to_close({CLOSES_AT_TAG: str(int((now + LEAD_SECONDS + 1) * 1000))}, now) == 0


def test_every_run_of_the_job_carries_the_run_deadline_to_dagster():
    """Dagster's run monitoring ends a run over ``dagster/max_runtime`` whose process no longer answers: the
    ingestion's run_timeout, with the margin that lets the run's own deadline fail it with a sentence first."""
    schedule = build_window_schedule(
        parse_config(with_ingestion(run_timeout=30)).ingestions["orders"], translate(config())["orders"]
    )
    assert schedule.job.tags["dagster/max_runtime"] == str(30 * 60 + 300)
