from datetime import datetime, timezone

import pytest

from rocketlake.assets.partitions import partition_format, window_partitions
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
