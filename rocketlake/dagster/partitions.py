"""Time-window partitions from ``window.cron``, keyed the way Dagster keys its own.

Dagster's built-in partitions use ``%Y-%m-%d`` when every window starts at midnight (daily,
weekly, monthly) and ``%Y-%m-%d-%H:%M`` otherwise (hourly and finer); we choose the same, so a
user typing ``--partition 2026-11-01-10:00`` gets what Dagster's docs show.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from itertools import islice
from zoneinfo import ZoneInfo

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInvalidDefinitionError,
    ScheduleDefinition,
    TimeWindow,
    TimeWindowPartitionsDefinition,
)

from rocketlake.dagster.dagster_private import cron_string_iterator, dst_safe_strftime, dst_safe_strptime
from rocketlake.dagster.instance_records import materialization_records
from rocketlake.engine.config import CRON_PROBLEM, ConfigError, RocketLakeConfig, WindowConfig
from rocketlake.engine.windows import StoreTimeWindow

# Dagster's own key formats (dagster's daily and hourly partitions use these).
DATE_FORMAT = "%Y-%m-%d"
MINUTE_FORMAT = "%Y-%m-%d-%H:%M"
_EPOCH = datetime(1970, 1, 2, tzinfo=timezone.utc)


@lru_cache(maxsize=None)  # 60 cron ticks (7 ms) for each of a location's windows, asked by every tick of a sensor
def partition_format(cron: str, timezone: str) -> str:
    ticks = islice(cron_string_iterator(_EPOCH.timestamp(), cron, timezone), 60)
    return DATE_FORMAT if all(t.hour == 0 and t.minute == 0 for t in ticks) else MINUTE_FORMAT


def check_crons(config: RocketLakeConfig, source: str = "the configuration") -> None:
    """Each ingestion's ``window.cron`` read by Dagster's own parser (through its public API: the cron a schedule of
    these windows gets), whose partitions the windows are; ConfigError naming each key it refuses. The configuration
    checks the cron's shape only, so that it needs no Dagster."""
    problems = []
    for name, ingestion in config.ingestions.items():
        try:
            ScheduleDefinition(name="cron_check", cron_schedule=ingestion.window.cron, job_name="cron_check")
        except (DagsterInvalidDefinitionError, ValueError):
            problems.append(f"ingestions.{name}.window.cron: {ingestion.window.cron!r} {CRON_PROBLEM}")
    if problems:
        raise ConfigError(source, problems)


def window_partitions(window: WindowConfig) -> TimeWindowPartitionsDefinition:
    """The windows as Dagster partitions, the open one included (``end_offset=1``): a person who asks Dagster for
    the current window (``dagster asset materialize --partition <now>``) gets rocketlake's sentence saying when it
    closes, not Dagster's unknown-partition traceback. Schedules and sensors ask for closed windows only."""
    return TimeWindowPartitionsDefinition(
        cron_schedule=window.cron,
        start=window.start,
        timezone=window.timezone,
        fmt=partition_format(window.cron, window.timezone),
        end_offset=1,
    )


def window_key(partitions: TimeWindowPartitionsDefinition, start: datetime) -> str:
    """The key of the window starting at ``start``, made as Dagster makes it: the second of two equal local times at
    the end of daylight saving time gets its UTC offset."""
    return dst_safe_strftime(start, partitions.timezone, partitions.fmt, partitions.cron_schedule)


def window_start(partitions: TimeWindowPartitionsDefinition, key: str) -> datetime:
    """The start of the window ``key``, read back as Dagster reads it (without computing the window's end, which
    walks the cron)."""
    return dst_safe_strptime(key, partitions.timezone, partitions.fmt)


def window_end(partitions: TimeWindowPartitionsDefinition, key: str) -> datetime:
    """The end of the window ``key``: the cron's next tick after its start."""
    start = window_start(partitions, key)
    ticks = cron_string_iterator(start.timestamp(), partitions.cron_schedule, partitions.timezone)
    # Instants, not local times: at the end of daylight saving time two ticks share a local time (and a tzinfo).
    return next(tick for tick in ticks if tick.timestamp() > start.timestamp())


def next_boundary(partitions: TimeWindowPartitionsDefinition, now: datetime) -> str:
    """The key of the window that starts at the next boundary after ``now`` (from the cron, as
    :func:`last_closed_windows`)."""
    ticks = cron_string_iterator(now.timestamp(), partitions.cron_schedule, partitions.timezone)
    return window_key(partitions, next(tick for tick in ticks if tick > now))


def last_closed_windows(
    partitions: TimeWindowPartitionsDefinition, now: datetime, grace_seconds: int, count: int
) -> list[str]:
    """Keys of the last ``count`` windows closed at ``now`` (end + grace), oldest first.

    Walks the cron back from the cut-off. Not with the partitions definition's own lookups: each of those
    (``get_partition_key_for_timestamp``, ``get_prev_partition_window``) walks forward from ``window.start``,
    14 ms for minute windows 25 days old and growing every minute, and the schedule and the sensors of every
    ingestion ask every minute: 43 s a tick for 100 ingestions (``benchmarks/deployment_cost.py``).
    """
    cutoff = now - timedelta(seconds=grace_seconds)
    if cutoff <= partitions.start:
        return []
    # Ticks at or before the cut-off, newest first: the first is the end of the last closed window.
    ticks = cron_string_iterator(cutoff.timestamp(), partitions.cron_schedule, partitions.timezone, ascending=False)
    next(ticks)
    keys = []
    for start in ticks:
        if start < partitions.start or len(keys) == count:
            break
        keys.append(window_key(partitions, start))
    return list(reversed(keys))


def windows_from(partitions: TimeWindowPartitionsDefinition, first: str, now: datetime) -> list[str]:
    """Keys of the window ``first`` and of every window after it that has started by ``now``."""
    keys = []
    for tick in cron_string_iterator(
        window_start(partitions, first).timestamp(), partitions.cron_schedule, partitions.timezone
    ):
        if tick > now:
            break
        keys.append(window_key(partitions, tick))
    return keys


#: Dagster's tags of a run over a range of partitions (one run, several windows)
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def run_windows(partitions: TimeWindowPartitionsDefinition, tags: dict[str, str]) -> set[str]:
    """The windows a run lands, from its tags: its partition, or every window of its range."""
    if "dagster/partition" in tags:
        return {tags["dagster/partition"]}
    first, last = tags.get(RANGE_START), tags.get(RANGE_END)
    if first is None or last is None:
        return set()
    from dagster import PartitionKeyRange

    try:
        return set(partitions.get_partition_keys_in_range(PartitionKeyRange(first, last)))
    except Exception:  # noqa: BLE001 - a range of another definition (the window changed since): none of ours
        return set()


def contiguous_ranges(keys: list[str], next_key) -> list[tuple[str, str]]:
    """``keys`` (sorted) as (first, last) ranges of partitions that follow each other (``next_key(k)``: the
    partition after ``k``), oldest first."""
    ranges: list[list[str]] = []
    for key in keys:
        if ranges and next_key(ranges[-1][1]) == key:
            ranges[-1][1] = key
        else:
            ranges.append([key, key])
    return [(first, last) for first, last in ranges]


def materialized_among(instance, asset_key: AssetKey, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` (a few recent windows) the asset has materialized.

    A query of those partitions only: ``get_materialized_partitions`` groups every materialization the asset
    ever had (half a million rows after a year of minute windows), and the schedule, the lag and the rebalance
    sensors of every ingestion ask every minute."""
    wanted, found = set(keys), set()
    if not wanted:
        return found
    for record in materialization_records(
        instance, AssetRecordsFilter(asset_key=asset_key, asset_partitions=list(keys)), page=100
    ):
        if record.partition_key in wanted:
            found.add(record.partition_key)
            if found == wanted:
                break
    return found


class WindowKeyError(ValueError):
    """A partition key or time that names no launchable window; the message is one line with the valid range."""


def _parse(value: str, fmt: str, tz: str) -> datetime:
    """A partition key in ``fmt``, or an ISO-8601 time (a naive one is in the ingestion's time zone)."""
    for parse in (lambda v: datetime.strptime(v, fmt), datetime.fromisoformat):
        try:
            parsed = parse(value)
        except ValueError:
            continue
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=ZoneInfo(tz))
    example = datetime(2026, 11, 1, 10, 0).strftime(fmt)
    raise WindowKeyError(f"{value!r} is neither a window key (format {fmt}, e.g. {example}) nor an ISO-8601 time")


def launchable_windows(window: WindowConfig, start: str, end: str | None, now: datetime) -> list[str]:
    """Keys of the windows from the one holding ``start`` to the one holding ``end`` (default: ``start``'s).

    Each must be closed at ``now`` (end + grace passed). Anything else is refused in one line naming the
    format and the range that can run now: a value that is neither a key nor a time, a time before the
    first window, a window not closed yet (with when it closes).
    """
    fmt = partition_format(window.cron, window.timezone)
    tz = window.timezone
    grace = timedelta(seconds=window.grace_seconds)
    first = window.start if window.start.tzinfo else window.start.replace(tzinfo=ZoneInfo(tz))
    ticks = cron_string_iterator(first.timestamp(), window.cron, tz)
    first = next(ticks)  # the first window starts at the first tick at or after window.start
    lo = _parse(start, fmt, tz)
    hi = _parse(end, fmt, tz) if end is not None else lo
    if hi < lo:
        raise WindowKeyError(f"the range ends at {end}, before it starts at {start}")
    if lo < first:
        raise WindowKeyError(f"{start} is before the first window, {first.strftime(fmt)} (window.start)")
    keys, window_start = [], first
    for window_end in ticks:
        if window_start > hi:
            break
        if window_end > lo:
            if window_end + grace > now:
                wait = int((window_end + grace - now).total_seconds()) + 1
                raise WindowKeyError(
                    f"window {window_start.strftime(fmt)} is not closed yet: it closes at "
                    f"{(window_end + grace).isoformat()} (end + {window.grace_seconds}s grace), in {wait}s; "
                    f"{_closed_range(window, first, now - grace, fmt)}; nothing was started"
                )
            keys.append(window_start.strftime(fmt))
        window_start = window_end
    return keys


def _closed_range(window: WindowConfig, first: datetime, closed_before: datetime, fmt: str) -> str:
    last, start = None, first
    for end in cron_string_iterator(first.timestamp(), window.cron, window.timezone):
        if end <= first:
            continue
        if end > closed_before:
            break
        last, start = start, end
    return f"windows {first.strftime(fmt)} .. {last.strftime(fmt)} can run now" if last else "no window can run yet"


def windows_between(
    partitions: TimeWindowPartitionsDefinition, start_ms: int, end_ms: int
) -> list[tuple[str, StoreTimeWindow]]:
    """The partitions whose windows lie in ``[start_ms, end_ms)``, as ``(key, StoreTimeWindow)``: the windows an orderly
    queue resuming at an earlier window still has to land."""
    span = TimeWindow(
        datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc), datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)
    )
    found = []
    for key in partitions.get_partition_keys_in_time_window(span):
        tw = partitions.time_window_for_partition_key(key)
        found.append((key, StoreTimeWindow.from_datetimes(tw.start, tw.end)))
    return found
