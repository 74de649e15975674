"""Time-window partitions from ``window.cron``, keyed the way Dagster keys its own.

Dagster's built-in partitions use ``%Y-%m-%d`` when every window starts at midnight (daily,
weekly, monthly) and ``%Y-%m-%d-%H:%M`` otherwise (hourly and finer); we choose the same, so a
user typing ``--partition 2026-11-01-10:00`` gets what Dagster's docs show.
"""

from __future__ import annotations

from itertools import islice

from dagster import TimeWindowPartitionsDefinition
from dagster._utils.partitions import DEFAULT_DATE_FORMAT, DEFAULT_HOURLY_FORMAT_WITHOUT_TIMEZONE
from dagster._utils.schedules import cron_string_iterator

from rocketlake.pipelines.config import WindowConfig


def partition_format(cron: str, timezone: str) -> str:
    ticks = islice(cron_string_iterator(0, cron, timezone), 60)
    return DEFAULT_DATE_FORMAT if all(t.hour == 0 and t.minute == 0 for t in ticks) else (
        DEFAULT_HOURLY_FORMAT_WITHOUT_TIMEZONE)


def window_partitions(window: WindowConfig) -> TimeWindowPartitionsDefinition:
    return TimeWindowPartitionsDefinition(
        cron_schedule=window.cron,
        start=window.start,
        timezone=window.timezone,
        fmt=partition_format(window.cron, window.timezone),
    )
