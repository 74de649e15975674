from datetime import datetime, timedelta, timezone

import pytest

from rocketlake.dagster.partitions import (
    WindowKeyError,
    last_closed_windows,
    launchable_windows,
    materialized_among,
    next_boundary,
    partition_format,
    window_partitions,
    windows_from,
)
from rocketlake.engine.config import WindowConfig


@pytest.mark.parametrize(
    ("cron", "fmt"),
    [
        ("* * * * *", "%Y-%m-%d-%H:%M"),
        ("*/5 * * * *", "%Y-%m-%d-%H:%M"),
        ("0 * * * *", "%Y-%m-%d-%H:%M"),
        ("0 0 * * *", "%Y-%m-%d"),
        ("0 0 * * 1", "%Y-%m-%d"),
        ("0 0 1 * *", "%Y-%m-%d"),
    ],
)
def test_partition_key_format_follows_dagster(cron, fmt):
    assert partition_format(cron, "UTC") == fmt


def test_minute_windows():
    parts = window_partitions(WindowConfig(cron="* * * * *", start=datetime(2026, 11, 1, tzinfo=timezone.utc)))
    window = parts.time_window_for_partition_key("2026-11-01-10:07")
    assert (window.start.minute, window.end.minute) == (7, 8)


MINUTES = WindowConfig(cron="* * * * *", start=datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc), grace_seconds=5)
NOW = datetime(2026, 11, 23, 9, 5, 3, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("start", "end", "keys"),
    [
        ("2026-11-23-09:01", "2026-11-23-09:03", ["2026-11-23-09:01", "2026-11-23-09:02", "2026-11-23-09:03"]),
        ("2026-11-23T09:01:30+00:00", None, ["2026-11-23-09:01"]),  # the window holding a time
        ("2026-11-23T10:01:30+01:00", "2026-11-23T09:02:00Z", ["2026-11-23-09:01", "2026-11-23-09:02"]),
        ("2026-11-23-08:00", None, ["2026-11-23-08:00"]),  # the first window
        ("2026-11-23-09:03", None, ["2026-11-23-09:03"]),  # closed 2 s ago (grace 5 s)
    ],
)
def test_launchable_windows(start, end, keys):
    assert launchable_windows(MINUTES, start, end, NOW) == keys


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (
            "2026-13-01",
            None,
            "'2026-13-01' is neither a window key (format %Y-%m-%d-%H:%M, e.g. 2026-11-01-10:00) nor an ISO-8601 time",
        ),
        ("2026-11-23-07:59", None, "2026-11-23-07:59 is before the first window, 2026-11-23-08:00 (window.start)"),
        (
            "2026-11-23-09:04",
            "2026-11-23-09:01",
            "the range ends at 2026-11-23-09:01, before it starts at 2026-11-23-09:04",
        ),
        (
            "2026-11-23-09:03",
            "2026-11-23-09:04",
            "window 2026-11-23-09:04 is not closed yet: it closes at 2026-11-23T09:05:05+00:00 (end + 5s grace), in 3s; "
            "windows 2026-11-23-08:00 .. 2026-11-23-09:03 can run now; nothing was started",
        ),
    ],
)
def test_windows_that_cannot_run_are_refused_in_one_line(start, end, message):
    with pytest.raises(WindowKeyError) as refused:
        launchable_windows(MINUTES, start, end, NOW)
    assert str(refused.value) == message


def test_no_window_can_run_before_the_first_closes():
    with pytest.raises(WindowKeyError, match="no window can run yet"):
        launchable_windows(MINUTES, "2026-11-23-08:00", None, datetime(2026, 11, 23, 8, 0, 30, tzinfo=timezone.utc))


def _closed_by_dagster(partitions, now, grace_seconds, count):
    """The last closed windows through the partitions definition's own lookups (each walks from the start)."""
    cutoff = now - timedelta(seconds=grace_seconds)
    if cutoff <= partitions.start:
        return []
    holding = partitions.time_window_for_partition_key(partitions.get_partition_key_for_timestamp(cutoff.timestamp()))
    window = holding if holding.end <= cutoff else partitions.get_prev_partition_window(holding.start)
    keys = []
    while window is not None and len(keys) < count:
        keys.append(partitions.get_partition_key_for_timestamp(window.start.timestamp()))
        window = partitions.get_prev_partition_window(window.start)
    return list(reversed(keys))


@pytest.mark.parametrize(
    "cron,tz,start",
    [
        ("* * * * *", "UTC", "2026-11-20T10:00:00"),
        ("*/5 * * * *", "UTC", "2026-11-20T10:02:00"),  # the first window starts at the first tick after start
        ("0 * * * *", "America/New_York", "2026-10-30"),  # across the end of daylight saving time (2026-11-01)
        ("30 2 * * *", "Europe/Paris", "2026-03-20"),  # a daily tick that does not exist on 2026-03-29
        ("0 9 * * 1-5", "Asia/Kolkata", "2026-10-01"),
    ],
)
def test_the_last_closed_windows_are_the_partitions_dagster_lists(cron, tz, start):
    """Walking the cron back from the cut-off gives the windows the partitions definition gives, at every moment
    around a boundary, a grace and the start."""
    window = WindowConfig(cron=cron, timezone=tz, start=start, grace_seconds=30)
    partitions = window_partitions(window)
    first = partitions.start
    for now in [first + timedelta(seconds=s) for s in (0, 29, 31, 59, 61, 90)] + [
        datetime(2026, 11, 1, 6, 0, 30, tzinfo=timezone.utc) + timedelta(minutes=m, seconds=s)
        for m in (0, 1, 5, 59, 60, 61, 600, 1440 * 3)
        for s in (-1, 0, 1, 30, 31)
    ]:
        for grace, count in ((30, 3), (0, 1), (125, 10)):
            assert last_closed_windows(partitions, now, grace, count) == _closed_by_dagster(
                partitions, now, grace, count
            ), (now, grace, count)
        current = partitions.time_window_for_partition_key(partitions.get_partition_key_for_timestamp(now.timestamp()))
        assert next_boundary(partitions, now) == partitions.get_partition_key_for_timestamp(current.end.timestamp())


def test_the_windows_from_one_to_now_include_the_open_one():
    partitions = window_partitions(WindowConfig(cron="*/5 * * * *", start="2026-11-01"))
    now = datetime(2026, 11, 1, 0, 17, tzinfo=timezone.utc)
    assert windows_from(partitions, "2026-11-01-00:05", now) == [
        "2026-11-01-00:05",
        "2026-11-01-00:10",
        "2026-11-01-00:15",
    ]


def test_the_materialized_windows_among_a_few_are_found_past_many_runs_of_one():
    from dagster import AssetKey, AssetMaterialization, instance_for_test

    with instance_for_test() as instance:
        for _ in range(150):  # one window run again and again: more records than one page
            instance.report_runless_asset_event(AssetMaterialization("t", partition="2026-11-01-00:05"))
        instance.report_runless_asset_event(AssetMaterialization("t", partition="2026-11-01-00:00"))
        instance.report_runless_asset_event(AssetMaterialization("other", partition="2026-11-01-00:10"))
        keys = ["2026-11-01-00:00", "2026-11-01-00:05", "2026-11-01-00:10"]
        assert materialized_among(instance, AssetKey("t"), keys) == {"2026-11-01-00:00", "2026-11-01-00:05"}
        assert materialized_among(instance, AssetKey("t"), ["2026-11-01-00:10"]) == set()
