"""The one way rocketlake reads an asset's materializations from a Dagster instance: every record a filter matches,
across the pages the instance serves them in."""

from __future__ import annotations

from collections.abc import Iterator

from dagster import AssetRecordsFilter, DagsterInstance, EventLogRecord


def materialization_records(
    instance: DagsterInstance, records_filter: AssetRecordsFilter, *, page: int = 1000, ascending: bool = False
) -> Iterator[EventLogRecord]:
    """Each materialization record ``records_filter`` matches, newest first (``ascending``: oldest first), fetched
    ``page`` at a time as the caller goes: one that stops early reads no further page."""
    cursor = None
    while True:
        result = instance.fetch_materializations(records_filter, limit=page, cursor=cursor, ascending=ascending)
        yield from result.records
        if not result.has_more:
            return
        cursor = result.cursor
