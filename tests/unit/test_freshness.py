"""Freshness and lag growth on plain data; the lag metadata Dagster plots."""

import time
from datetime import datetime, timedelta, timezone

from dagster import AssetKey, AssetObservation, instance_for_test

from rocketlake.dagster.lag import (
    BROKER_MAX,
    COMMITTED,
    LAG_MESSAGES,
    LAG_SECONDS,
    LAG_TABLE,
    RETIRED_AFTER_S,
    growth_outcome,
    lag_metadata,
    last_observed_queues,
    queue_figure,
    table_freshness,
)
from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.freshness import freshness, lag_keeps_growing
from rocketlake.engine.progress import QueueProgress
from rocketlake.rocketmq.message_queue import MessageQueue

START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def minute(key: str) -> datetime:
    return datetime.strptime(key, "%Y-%m-%d-%H:%M").replace(tzinfo=timezone.utc)


def test_fresh_when_the_newest_due_window_is_landed_or_none_is_due():
    assert freshness(None, [], minute).passed
    assert freshness("2026-11-01-00:05", ["2026-11-01-00:04", "2026-11-01-00:05"], minute).passed
    assert freshness("2026-11-01-00:05", ["2026-11-01-00:06"], minute).passed  # newer than due is fine


def test_stale_when_the_newest_landed_window_is_older_than_the_newest_due():
    f = freshness("2026-11-01-00:05", ["2026-11-01-00:02", "2026-11-01-00:04"], minute)
    assert not f.passed and f.newest_landed == "2026-11-01-00:04"
    assert "window 2026-11-01-00:05 is due" in f.describe() and "00:04" in f.describe()
    assert not freshness("2026-11-01-00:05", [], minute).passed


def test_lag_growth_needs_a_rise_at_every_one_of_the_last_ticks():
    assert lag_keeps_growing([1, 2, 3, 4, 5, 6], ticks=5)
    assert not lag_keeps_growing([2, 3, 4, 5, 6], ticks=5)  # too few observations
    assert not lag_keeps_growing([1, 2, 3, 3, 5, 6], ticks=5)  # a flat step
    assert not lag_keeps_growing([9, 1, 2, 0, 4, 5, 6], ticks=5)  # the run of rises is shorter
    assert lag_keeps_growing([9, 0, 1, 2, 3, 4, 5], ticks=5)  # only the last ticks count
    assert growth_outcome([1, 2, 3])["passed"]
    assert not growth_outcome([1, 2, 3, 4, 5, 6])["passed"]
    assert "1 -> 2 -> 3 -> 4 -> 5 -> 6" in growth_outcome([1, 2, 3, 4, 5, 6])["description"]


def test_lag_metadata_totals_and_per_queue_figures():
    a, b = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-b", 1)
    now = 1_000_000
    rows = [QueueProgress(a, 0, 10, 4, now - 30_000), QueueProgress(b, 0, 5, None, now - 90_000)]
    m = lag_metadata(rows, now, "t")
    assert m[LAG_MESSAGES].value == 6 + 5 and m[LAG_SECONDS].value == 90.0
    assert m[BROKER_MAX].value == 15 and m[COMMITTED].value == 4
    assert m[queue_figure(LAG_MESSAGES, a, "t")].value == 6 and m[queue_figure(COMMITTED, b, "t")].value == -1
    assert queue_figure(LAG_SECONDS, b, "t") == "rocketlake/lag_seconds/broker-b/1"
    assert (
        queue_figure(LAG_SECONDS, MessageQueue("%RETRY%g", "broker-a", 0), "t")
        == "rocketlake/lag_seconds/%RETRY%g/broker-a/0"
    )
    assert [r.data["lag"] for r in m[LAG_TABLE].value.records] == [6, 5]


def test_the_queues_of_the_last_lag_observation_are_remembered_a_day():
    a, b = MessageQueue("t", "broker-a", 0), MessageQueue("%RETRY%g", "broker-b", 1)
    key = AssetKey("orders")
    with instance_for_test() as instance:
        now_ms = int(time.time() * 1000)
        assert last_observed_queues(instance, key, now_ms) == ([], "")
        instance.report_runless_asset_event(AssetObservation(key, metadata={"other": 1}))  # not the lag sensor's
        assert last_observed_queues(instance, key, now_ms) == ([], "")
        rows = [QueueProgress(a, 0, 10, 4, None), QueueProgress(b, 0, 5, None, None)]
        instance.report_runless_asset_event(AssetObservation(key, metadata=lag_metadata(rows, now_ms, "t")))
        queues, seen = last_observed_queues(instance, key, now_ms)
        assert queues == [a, b] and seen.startswith(datetime.now(timezone.utc).strftime("%Y-%m-%dT"))
        # A day on (no observation is recorded while a broker is unread): taken for retired on purpose.
        assert last_observed_queues(instance, key, now_ms + (RETIRED_AFTER_S + 60) * 1000) == ([], "")


def test_table_freshness_reads_the_materialized_windows_of_the_instance():
    from dagster import AssetMaterialization

    cfg = IngestionConfig.model_validate(
        {
            "cluster": "c",
            "topic": "t",
            "consumer_group": "g",
            "table": "t_fresh",
            "window": {
                "cron": "* * * * *",
                "grace_seconds": 10,
                "freshness_slack_seconds": 60,
                "start": START.isoformat(),
            },
            "body": {"format": "text"},
        }
    )
    now = START + timedelta(minutes=10, seconds=5)
    # Due: windows closed (end + 10 s) at least 60 s ago: 00:08 (ends 00:09, due at 00:10:10) is not yet.
    with instance_for_test() as instance:
        assert table_freshness(cfg, instance, now).newest_due == "2026-11-01-00:07"
        assert not table_freshness(cfg, instance, now).passed
        instance.report_runless_asset_event(AssetMaterialization("t_fresh", partition="2026-11-01-00:06"))
        assert not table_freshness(cfg, instance, now).passed
        instance.report_runless_asset_event(AssetMaterialization("t_fresh", partition="2026-11-01-00:07"))
        assert table_freshness(cfg, instance, now).passed
