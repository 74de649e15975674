from datetime import datetime, timezone

import pytest

from rocketlake.assets.partitions import WindowKeyError, launchable_windows, partition_format, window_partitions
from rocketlake.pipelines.config import WindowConfig


@pytest.mark.parametrize(("cron", "fmt"), [
    ("* * * * *", "%Y-%m-%d-%H:%M"),
    ("*/5 * * * *", "%Y-%m-%d-%H:%M"),
    ("0 * * * *", "%Y-%m-%d-%H:%M"),
    ("0 0 * * *", "%Y-%m-%d"),
    ("0 0 * * 1", "%Y-%m-%d"),
    ("0 0 1 * *", "%Y-%m-%d"),
])
def test_partition_key_format_follows_dagster(cron, fmt):
    assert partition_format(cron, "UTC") == fmt


def test_minute_windows():
    parts = window_partitions(WindowConfig(cron="* * * * *", start=datetime(2026, 11, 1, tzinfo=timezone.utc)))
    window = parts.time_window_for_partition_key("2026-11-01-10:07")
    assert (window.start.minute, window.end.minute) == (7, 8)


MINUTES = WindowConfig(cron="* * * * *", start=datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc), grace_seconds=5)
NOW = datetime(2026, 11, 23, 9, 5, 3, tzinfo=timezone.utc)


@pytest.mark.parametrize(("start", "end", "keys"), [
    ("2026-11-23-09:01", "2026-11-23-09:03", ["2026-11-23-09:01", "2026-11-23-09:02", "2026-11-23-09:03"]),
    ("2026-11-23T09:01:30+00:00", None, ["2026-11-23-09:01"]),                  # the window holding a time
    ("2026-11-23T10:01:30+01:00", "2026-11-23T09:02:00Z", ["2026-11-23-09:01", "2026-11-23-09:02"]),
    ("2026-11-23-08:00", None, ["2026-11-23-08:00"]),                           # the first window
    ("2026-11-23-09:03", None, ["2026-11-23-09:03"]),                           # closed 2 s ago (grace 5 s)
])
def test_launchable_windows(start, end, keys):
    assert launchable_windows(MINUTES, start, end, NOW) == keys


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2026-13-01", None, "'2026-13-01' is neither a window key (format %Y-%m-%d-%H:%M, e.g. 2026-11-01-10:00) "
                         "nor an ISO-8601 time"),
    ("2026-11-23-07:59", None, "2026-11-23-07:59 is before the first window, 2026-11-23-08:00 (window.start)"),
    ("2026-11-23-09:04", "2026-11-23-09:01", "the range ends at 2026-11-23-09:01, before it starts at 2026-11-23-09:04"),
    ("2026-11-23-09:03", "2026-11-23-09:04",
     "window 2026-11-23-09:04 is not closed yet: it closes at 2026-11-23T09:05:05+00:00 (end + 5s grace), in 3s; "
     "windows 2026-11-23-08:00 .. 2026-11-23-09:03 can run now; nothing was started"),
])
def test_windows_that_cannot_run_are_refused_in_one_line(start, end, message):
    with pytest.raises(WindowKeyError) as refused:
        launchable_windows(MINUTES, start, end, NOW)
    assert str(refused.value) == message


def test_no_window_can_run_before_the_first_closes():
    with pytest.raises(WindowKeyError, match="no window can run yet"):
        launchable_windows(MINUTES, "2026-11-23-08:00", None, datetime(2026, 11, 23, 8, 0, 30, tzinfo=timezone.utc))
