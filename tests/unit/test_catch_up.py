"""Trailing queues on plain data: which queues trail, and the one run the lag sensor asks for to land them.

The integration test (tests/integration/test_lag.py) runs the same on real brokers and a real Dagster run.
"""

import logging
from datetime import datetime, timedelta, timezone

from dagster import AssetMaterialization, DagsterRunStatus, instance_for_test
from dagster._core.test_utils import create_run_for_test

from rocketlake.dagster.catch_up import (
    MOST_WINDOWS,
    RANGE_END,
    RANGE_START,
    behind,
    catch_up_request,
    caught_up_outcome,
    unread_outcome,
    window_holding,
)
from rocketlake.dagster.ingestion import CATCH_UP_TAG, QUEUES_TAG
from rocketlake.dagster.partitions import window_partitions
from rocketlake.dagster.translator import translate
from rocketlake.engine.config import parse_config
from rocketlake.engine.progress import QueueProgress, Unanswered
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.unit.support import with_ingestion

START = datetime(2026, 11, 1, tzinfo=timezone.utc)
HOUR = 3_600_000
A, B, C = (MessageQueue("orders", b, 0) for b in ("broker-a", "broker-b", "broker-c"))
LOG = logging.getLogger("test")


def config():
    return parse_config(
        with_ingestion(
            window={
                "cron": "0 * * * *",
                "grace_seconds": 60,
                "start": START.isoformat(),
                "freshness_slack_seconds": 300,
            }
        )
    )


def at(hours: float) -> int:
    return int((START + timedelta(hours=hours)).timestamp() * 1000)


def progress(queue, committed, oldest_hours):
    return QueueProgress(queue, 0, 100, committed, None if oldest_hours is None else at(oldest_hours))


def test_a_queue_trails_when_a_message_not_passed_was_stored_before_the_end_of_the_newest_due_window():
    cfg = config().ingestions["orders"]
    parts = window_partitions(cfg.window)
    now = START + timedelta(hours=10, minutes=6)  # the 09:00 window closed at 10:00 + 60 s grace + 300 s slack
    rows = [progress(A, 5, 8.5), progress(B, 7, 9.99), progress(C, None, 1.0)]
    found = behind(cfg, parts, [*rows, progress(MessageQueue("orders", "broker-d", 0), 9, None)], now)
    assert found.due == "2026-11-01-09:00"
    assert [r.queue for r in found.trailing] == [A, B]  # C: no offset yet (consume_from_where decides); d: none left
    assert found.oldest_ms == at(8.5)
    outcome = caught_up_outcome(cfg, found, int(now.timestamp() * 1000))
    assert not outcome["passed"]
    assert "broker-a/0 at offset 5 (stored 2026-11-01T08:30:00.000Z)" in outcome["description"]
    # Five minutes earlier the 09:00 window was not due yet: the 08:00 one was, and only A trails it.
    earlier = behind(cfg, parts, rows, now - timedelta(minutes=5))
    assert earlier.due == "2026-11-01-08:00" and [r.queue for r in earlier.trailing] == [A]
    assert caught_up_outcome(cfg, behind(cfg, parts, [progress(A, 5, 10.02)], now), 0)["passed"]


def test_a_broker_not_answering_fails_the_check_naming_it_whatever_the_other_queues_show():
    cfg = config().ingestions["orders"]
    parts = window_partitions(cfg.window)
    now = START + timedelta(hours=10, minutes=6)
    down = {
        "broker-b": Unanswered("127.0.0.1:10921", "127.0.0.1:10921 did not answer GET_MIN_OFFSET(31) within 3 s", [B])
    }
    outcome = caught_up_outcome(cfg, behind(cfg, parts, [progress(A, 5, 10.02)], now), 0, down)
    assert not outcome["passed"], outcome
    assert outcome["description"].startswith(
        f"broker-b (127.0.0.1:10921) did not answer (the progress of 1 queue(s) of group {cfg.consumer_group} on it "
        "is unknown): 127.0.0.1:10921 did not answer GET_MIN_OFFSET(31) within 3 s."
    ), outcome["description"]
    assert outcome["description"].endswith("The other brokers' queues are caught up."), outcome["description"]
    assert outcome["metadata"]["unanswering_brokers"].value == "broker-b"
    trailing = caught_up_outcome(cfg, behind(cfg, parts, [progress(A, 5, 8.5)], now), 0, down)
    assert trailing["description"].endswith("1 trail window 2026-11-01-09:00."), trailing["description"]
    gone = {"broker-b": Unanswered(None, "it held them when last read, at 2026-11-01T10:05:00.000Z", [B])}
    left = caught_up_outcome(cfg, behind(cfg, parts, [progress(A, 5, 10.02)], now), 0, gone)
    assert not left["passed"] and left["description"].startswith(
        f"broker-b is in no route of the group's topics (the progress of 1 queue(s) of group {cfg.consumer_group} "
        "on it is unknown): it held them when last read, at 2026-11-01T10:05:00.000Z."
    ), left["description"]
    assert left["description"].endswith("is forgotten 24 h after its last lag observation."), left["description"]
    assert "forgotten" not in outcome["description"]  # a broker listed and not answering is not retired
    unread = unread_outcome(cfg, "cannot read the progress of group g: 127.0.0.1:9876: connection refused")
    assert not unread["passed"] and unread["description"].startswith(
        "cannot read the progress of group g: 127.0.0.1:9876: connection refused. Whether a queue of group "
    )


def test_the_window_holding_an_instant():
    parts = window_partitions(config().ingestions["orders"].window)
    assert window_holding(parts, at(3.5)) == "2026-11-01-03:00"
    assert window_holding(parts, at(3)) == "2026-11-01-03:00"  # a boundary starts its window
    assert window_holding(parts, at(-5)) == "2026-11-01-00:00"  # before the first window: the first


def ask(instance, rows, now):
    cfg = config()
    ingestion, assets = cfg.ingestions["orders"], translate(cfg)["orders"]
    parts = window_partitions(ingestion.window)
    found = behind(ingestion, parts, rows, now)
    return catch_up_request(ingestion, assets.table_key, assets.job_name, parts, found, instance, now, LOG), assets


def materialize(instance, assets, *hours):
    for h in hours:
        instance.report_runless_asset_event(
            AssetMaterialization(asset_key=assets.table_key, partition=f"2026-11-01-{h:02d}:00")
        )


def test_after_an_outage_one_run_lands_the_hole_of_the_trailing_queues_from_where_the_group_stands():
    """The daemon was down from 02:00 to 07:00: windows 02:00 .. 06:00 were never asked for, 07:00 .. 09:00 landed
    since. One run of the hole, of the trailing queues; its commit then passes the windows landed after it."""
    now = START + timedelta(hours=10, minutes=6)
    rows = [progress(A, 5, 2.2), progress(B, 7, 2.7), progress(C, 9, None)]
    with instance_for_test() as instance:
        _, assets = ask(instance, rows, now)
        materialize(instance, assets, 0, 1, 7, 8, 9)
        request, _ = ask(instance, rows, now)
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-02:00", "2026-11-01-06:00")
        assert request.tags[QUEUES_TAG] == "orders/broker-a/0,orders/broker-b/0"
        assert request.tags[CATCH_UP_TAG] == "orders_raw" and request.asset_selection == [assets.table_key]
        # Asked again at the next tick, it is the same run key: the daemon launches it once (until RETRY_EVERY_S).
        again, _ = ask(instance, rows, now + timedelta(minutes=1))
        assert again.run_key == request.run_key
        # While it is running (or queued), nothing more is asked.
        create_run_for_test(instance, job_name="__ASSET_JOB", status=DagsterRunStatus.STARTED, tags=request.tags)
        assert ask(instance, rows, now)[0] is None


def test_windows_landed_without_a_queue_are_landed_again_for_that_queue_in_one_run():
    """Broker-a did not answer when windows 08:00 and 09:00 were planned: they landed without its queue. Every window
    is materialized, so none tells where the queue's part ends: the run takes all of them, for broker-a's queue,
    from where the group stands on it (one run, not one a window)."""
    now = START + timedelta(hours=10, minutes=6)
    with instance_for_test() as instance:
        _, assets = ask(instance, [], now)
        materialize(instance, assets, 8, 9)
        request, _ = ask(instance, [progress(A, 5, 8.1)], now)
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-08:00", "2026-11-01-09:00")
        assert request.tags[QUEUES_TAG] == "orders/broker-a/0"


def test_the_windows_a_catch_up_takes_are_instants_across_the_end_of_daylight_saving_time():
    """Europe/Berlin, hourly: 02:00 happens twice on 2026-10-25. The range stops at the window asked for, never runs
    into windows that have not happened."""
    from rocketlake.dagster.catch_up import windows_through
    from rocketlake.dagster.partitions import last_closed_windows, window_end, window_start
    from rocketlake.engine.config import WindowConfig

    parts = window_partitions(
        WindowConfig(cron="0 * * * *", timezone="Europe/Berlin", start="2026-10-24", grace_seconds=0)
    )
    now = datetime(2026, 10, 25, 1, 30, tzinfo=timezone.utc)  # 02:30 CET, in the second 02:00 hour
    first, second = last_closed_windows(parts, now, 0, 3)[-2:]  # 01:00 CEST (23:00Z) .. 02:00 CEST (00:00Z)
    assert window_end(parts, second).timestamp() == window_start(parts, second).timestamp() + 3600
    keys = windows_through(parts, first, second, MOST_WINDOWS)
    assert keys == [first, second], keys
    assert window_start(parts, keys[-1]) < now


def test_a_window_whose_scheduled_run_is_on_its_way_is_left_to_it_and_a_long_hole_is_landed_in_bounded_runs():
    now = START + timedelta(days=5, minutes=6)
    with instance_for_test() as instance:
        _, assets = ask(instance, [], now)
        request, _ = ask(instance, [progress(A, 5, 0.5)], now)
        assert request.tags[RANGE_START] == "2026-11-01-00:00"
        assert request.tags[RANGE_END] == (START + timedelta(hours=MOST_WINDOWS - 1)).strftime("%Y-%m-%d-%H:%M")
        create_run_for_test(
            instance,
            job_name=assets.job_name,
            status=DagsterRunStatus.STARTED,
            tags={"dagster/partition": "2026-11-01-03:00"},
        )
        request, _ = ask(instance, [progress(A, 5, 0.5)], now)
        assert request.tags[RANGE_END] == "2026-11-01-02:00"  # up to the window the schedule's run lands
        assert ask(instance, [progress(A, 5, 3.5)], now)[0] is None


def test_the_windows_on_their_way_are_the_schedules_and_the_sensors_runs_of_the_table_by_partition_or_range():
    """What the rebalance sensor leaves alone: on the chaos soak it asked, tick after tick, for another run of a
    window whose earlier runs were still queued behind the group's pool (four runs of one window at once)."""
    from dagster import AssetKey

    from rocketlake.dagster.catch_up import windows_on_their_way

    cfg = config()
    assets = translate(cfg)["orders"]
    partitions = window_partitions(cfg.ingestions["orders"].window)
    with instance_for_test() as instance:
        create_run_for_test(
            instance,
            job_name=assets.job_name,
            status=DagsterRunStatus.STARTED,
            tags={"dagster/partition": "2026-11-01-01:00"},
        )
        create_run_for_test(
            instance,
            job_name="__ASSET_JOB",
            status=DagsterRunStatus.STARTING,
            asset_selection={assets.table_key},
            tags={RANGE_START: "2026-11-01-03:00", RANGE_END: "2026-11-01-04:00"},
        )
        create_run_for_test(
            instance,
            job_name="__ASSET_JOB",
            status=DagsterRunStatus.STARTED,
            asset_selection={AssetKey("another_table")},
            tags={"dagster/partition": "2026-11-01-05:00"},
        )
        create_run_for_test(
            instance,
            job_name=assets.job_name,
            status=DagsterRunStatus.FAILURE,
            tags={"dagster/partition": "2026-11-01-06:00"},
        )
        found = windows_on_their_way(instance, assets.table_key, assets.job_name, partitions)
    assert found == {"2026-11-01-01:00", "2026-11-01-03:00", "2026-11-01-04:00"}
