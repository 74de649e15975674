"""What a materialization tells the Dagster UI, per window: its rows, bytes, ranges, accounting, Delta version.

A run may land several windows (a single-run backfill); each window's partition gets its own figures
(``context.add_asset_metadata(..., partition_key=...)``), so a partition's row count is that window's
rows and Dagster plots each number over the partition's materializations. Keys are namespaced
constants so sensors, checks and users can rely on them.
"""

from __future__ import annotations

from pathlib import Path

from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableRecord, TableSchema

from rocketlake.engine.config import IngestionConfig, MessageModel
from rocketlake.engine.identity import client_id, offset_store_path
from rocketlake.engine.ingest import LandedSlice, WindowAccounting
from rocketlake.engine.ledger import WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue

ROWS = "rocketlake/rows"
BODY_BYTES = "rocketlake/body_bytes"
PLANNED = "rocketlake/planned_offsets"
FILTERED = "rocketlake/filtered_by_tag"
SENT_BACK = "rocketlake/sent_back"
DEAD_LETTERED = "rocketlake/dead_lettered"
FAILED = "rocketlake/failed"
DUPLICATES = "rocketlake/duplicate_copies"
HELD = "rocketlake/held"  # orderly: messages at or after a suspended queue's failing message
SUSPENDED = "rocketlake/suspended_queues"
ACCOUNTED = "rocketlake/offsets_accounted"
RANGES = "rocketlake/ranges"
DELTA_VERSION = "rocketlake/delta_version"
#: False when the landing changed no row of the table (``LandingReport.rows_changed``): followers skip it.
ROWS_CHANGED = "rocketlake/rows_changed"
LEDGER_RUN = "rocketlake/ledger_run_id"
ASSIGNMENT = "rocketlake/assignment"
MEMBER = "rocketlake/member"
QUEUES_TAKEN = "rocketlake/queues_taken"
REPLACED_TAILS = "rocketlake/replaced_tails"  # queues a promoted replica held only part of (``engine.tails``)

RANGE_SCHEMA = TableSchema(
    columns=[
        TableColumn("topic", "string"),
        TableColumn("broker_name", "string"),
        TableColumn("queue_id", "int"),
        TableColumn("start", "int", description="first offset of the window on this queue"),
        TableColumn("end", "int", description="first offset after the window (exclusive)"),
        TableColumn("size", "int"),
    ]
)


def window_metadata(
    window: WindowEntry, accounting: WindowAccounting, m: LandedSlice, assignment: str | None = None
) -> dict:
    """The metadata of one window's partition (``assignment``: the member's share, in one line)."""
    ranges = [
        TableRecord(
            {
                "topic": r.queue.topic,
                "broker_name": r.queue.broker_name,
                "queue_id": r.queue.queue_id,
                "start": r.start,
                "end": r.end,
                "size": r.size,
            }
        )
        for r in window.ranges
    ]
    metadata = {
        ROWS: MetadataValue.int(accounting.rows),
        BODY_BYTES: MetadataValue.int(accounting.body_bytes),
        PLANNED: MetadataValue.int(accounting.planned),
        FILTERED: MetadataValue.int(accounting.filtered),
        SENT_BACK: MetadataValue.int(accounting.sent_back),
        DEAD_LETTERED: MetadataValue.int(accounting.dead_lettered),
        FAILED: MetadataValue.int(accounting.failed),
        DUPLICATES: MetadataValue.int(accounting.duplicates),
        HELD: MetadataValue.int(accounting.held),
        ACCOUNTED: MetadataValue.bool(accounting.balanced),
        RANGES: MetadataValue.table(ranges, schema=RANGE_SCHEMA),
        LEDGER_RUN: m.ledger.run_id,
        QUEUES_TAKEN: MetadataValue.int(len(window.ranges)),
        "dagster/row_count": MetadataValue.int(accounting.rows),
    }
    if m.ledger.member is not None:
        metadata[MEMBER] = m.ledger.member
    if m.ledger.suspended:
        metadata[SUSPENDED] = suspended_table(
            {
                mq.key: {
                    "offset": s.offset,
                    "attempts": s.attempts,
                    "retry_after_ms": s.until_ms,
                    "window": s.window_key,
                    "msg_id": s.msg_id,
                    "error": s.error,
                }
                for mq, s in sorted(m.ledger.suspended.items())
            }
        )
    if assignment is not None:
        metadata[ASSIGNMENT] = assignment
    if m.delta_version is not None:
        metadata[DELTA_VERSION] = MetadataValue.int(m.delta_version)
    metadata[ROWS_CHANGED] = MetadataValue.bool(m.rows_changed)
    return metadata


SUSPENDED_SCHEMA = TableSchema(
    columns=[
        TableColumn("queue", "string"),
        TableColumn("offset", "int", description="the message the queue stopped at"),
        TableColumn("attempts", "int", description="failed attempts so far"),
        TableColumn("retry_after_ms", "int", description="epoch ms when the queue resumes"),
        TableColumn("window", "string"),
        TableColumn("msg_id", "string"),
        TableColumn("error", "string"),
    ]
)


def suspended_table(by_queue: dict[str, dict]) -> MetadataValue:
    """Suspended orderly queues, one row each (a person reads it; the resume sensor parses it back)."""
    return MetadataValue.table(
        [TableRecord({"queue": q, **fields}) for q, fields in sorted(by_queue.items())], schema=SUSPENDED_SCHEMA
    )


def suspended_from(value) -> dict[str, dict]:
    """Queue key -> its suspension's fields, from the ``rocketlake/suspended_queues`` table."""
    return {r.data["queue"]: {k: v for k, v in r.data.items() if k != "queue"} for r in value.records}


def windows_metadata(
    m: LandedSlice, assignment: str | None = None, keys=None, replaced: tuple[str, ...] = ()
) -> dict[str, dict]:
    """Partition key -> its metadata, for every window the materialization landed (among ``keys``: the run's
    partitions; an orderly queue resuming lands the rest of earlier windows too, shown in the check's table).
    ``replaced``: what the run said about queues whose tail a failover replaced, kept with the windows it landed."""
    by_key = {a.partition_key: a for a in m.accounting}
    said = {REPLACED_TAILS: MetadataValue.md("\n".join(f"- {line}" for line in replaced))} if replaced else {}
    return {
        w.partition_key: {**window_metadata(w, by_key[w.partition_key], m, assignment), **said}
        for w in m.ledger.windows
        if keys is None or w.partition_key in keys
    }


ACCOUNTING_SCHEMA = TableSchema(
    columns=[
        TableColumn("window", "string"),
        TableColumn("planned", "int"),
        TableColumn("seen", "int"),
        TableColumn("rows", "int"),
        TableColumn("filtered", "int"),
        TableColumn("sent_back", "int"),
        TableColumn("dead_lettered", "int"),
        TableColumn("failed", "int"),
        TableColumn("duplicates", "int"),
        TableColumn("held", "int"),
        TableColumn("balanced", "bool"),
    ]
)


def accounting_table(m: LandedSlice) -> MetadataValue:
    """The check's evidence, one row per window, readable in the UI."""
    return MetadataValue.table(
        [
            TableRecord(
                {
                    "window": a.partition_key,
                    "planned": a.planned,
                    "seen": a.seen,
                    "rows": a.rows,
                    "filtered": a.filtered,
                    "sent_back": a.sent_back,
                    "dead_lettered": a.dead_lettered,
                    "failed": a.failed,
                    "duplicates": a.duplicates,
                    "held": a.held,
                    "balanced": a.balanced,
                }
            )
            for a in m.accounting
        ],
        schema=ACCOUNTING_SCHEMA,
    )


OFFSET_STORE = "rocketlake/offset_store"
OFFSETS = "rocketlake/committed_offsets"
OFFSETS_SCHEMA = TableSchema(
    columns=[
        TableColumn("topic", "string"),
        TableColumn("broker_name", "string"),
        TableColumn("queue_id", "int"),
        TableColumn("committed", "int", description="the member's (BROADCASTING) or the group's committed offset"),
    ]
)


def progress_metadata(cfg: IngestionConfig, committed: dict[MessageQueue, int | None]) -> dict:
    """An observation after the offsets moved: whose progress, where it is kept, and the offset per queue."""
    broadcasting = cfg.message_model is MessageModel.BROADCASTING
    return {
        MEMBER: client_id(cfg),
        OFFSET_STORE: MetadataValue.path(str(offset_store_path(cfg)))
        if broadcasting
        else f"brokers (group {cfg.consumer_group})",
        OFFSETS: MetadataValue.table(
            [
                TableRecord(
                    {
                        "topic": mq.topic,
                        "broker_name": mq.broker_name,
                        "queue_id": mq.queue_id,
                        "committed": -1 if offset is None else offset,
                    }
                )
                for mq, offset in sorted(committed.items())
            ],
            schema=OFFSETS_SCHEMA,
        ),
    }


def table_identity(table: str, table_path: str) -> dict:
    """Dagster's standard keys naming the table: the UI shows them on the asset and links the URI."""
    uri = table_path if "://" in table_path else Path(table_path).absolute().as_uri()
    return {"dagster/table_name": table, "dagster/uri": MetadataValue.text(uri)}


def column_schema(columns: list[tuple[str, str, bool]]) -> dict:
    """``dagster/column_schema`` of the Delta table as it is now (``Lake.columns``: its schema grows with
    ``mergeSchema``); nothing when the table does not exist yet (a dead-letter table before its first dead letter)."""
    if not columns:
        return {}
    return {
        "dagster/column_schema": MetadataValue.table_schema(
            TableSchema(
                columns=[
                    TableColumn(name, kind, constraints=TableColumnConstraints(nullable=nullable))
                    for name, kind, nullable in columns
                ]
            )
        )
    }
