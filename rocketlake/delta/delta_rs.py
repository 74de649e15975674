"""Which tables delta-rs can read the data of, and a read of a few columns that takes Spark where it cannot.

delta-rs reads every table's log (the ledger, its versions: ``ledger_log``), but not the data of tables whose
protocol needs a reader feature it lacks: deletion vectors, column mapping, type widening, v2 checkpoints (Delta 4's
and Databricks' defaults for new tables among them). ``to_pyarrow_table`` refuses most of these itself, but not a
table on the older protocol (reader version 2) with column mapping, whose files it would read under their physical
column names. Data reads of rocketlake's own (the demo's read-back) check the protocol here first and say why they
took Spark.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

#: What the installed delta-rs reads, from its own declaration.
from deltalake.table import MAX_SUPPORTED_READER_VERSION, SUPPORTED_READER_FEATURES

#: pyarrow 19 (the lowest allowed) aborts the process reading the level histograms of pages delta-rs wrote.
PYARROW_MAJOR = int(pa.__version__.split(".")[0])

if TYPE_CHECKING:
    from rocketlake.delta.writer import SliceClause
    from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange


@dataclass(frozen=True)
class Protocol:
    """A table's protocol as delta-rs reports it (``DeltaTable.protocol()``), and its column mapping mode."""

    min_reader_version: int
    reader_features: frozenset[str] = frozenset()
    column_mapping: str = "none"

    @classmethod
    def of(cls, table) -> Protocol:
        """The protocol of a ``deltalake.DeltaTable``."""
        found = table.protocol()
        configuration: Mapping[str, str] = table.metadata().configuration or {}
        return cls(
            found.min_reader_version,
            frozenset(found.reader_features or ()),
            configuration.get("delta.columnMapping.mode", "none"),
        )


def read_refusal(protocol: Protocol) -> str | None:
    """Why delta-rs cannot read this table's data, naming what it lacks; None when it can."""
    if protocol.min_reader_version > MAX_SUPPORTED_READER_VERSION:
        return f"the table needs a reader of protocol version {protocol.min_reader_version}"
    lacking = sorted(protocol.reader_features - set(SUPPORTED_READER_FEATURES))
    if protocol.column_mapping != "none" and "columnMapping" not in lacking:
        lacking.insert(0, "columnMapping")  # reader version 2 names no features, but its files are mapped
    if lacking:
        return f"the table has reader feature(s) delta-rs does not read: {', '.join(lacking)}"
    return None


def read_columns(path: str, columns: Sequence[str], storage_options: dict[str, str] | None, spark_session):
    """``columns`` of the table at ``path`` as a pyarrow Table, and the reader used ("delta-rs", or "Spark" and why):
    delta-rs when it can read the table, else the session ``spark_session()`` opens (called only then)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        table = DeltaTable(path, storage_options=storage_options)
    except DeltaError as exc:  # a table with a reader feature delta-rs does not know at all is not even opened
        if "Unsupported" not in str(exc):  # "Kernel error: Unsupported: Feature 'x' is not supported"
            raise
        refusal = f"delta-rs does not open the table: {exc}"
    else:
        refusal = read_refusal(Protocol.of(table))
        if refusal is None:
            return table.to_pyarrow_table(columns=list(columns)), "delta-rs"
    frame = spark_session().read.format("delta").load(path).select(*columns)
    return frame.toArrow(), f"Spark ({refusal})"


def landed_rows(
    path: str, ranges: Sequence[OffsetRange], columns: Sequence[str], storage_options: dict[str, str] | None
) -> pa.Table | None:
    """``columns`` the table has (and ``queue_offset``) of the rows the table at ``path`` holds in ``ranges``, read
    by delta-rs in this process: files whose statistics cannot hold such a row are never opened, so a window's rows
    cost a read of that window's files, not a Spark job. None when delta-rs may not read this table or fails to (a
    file compacted away under the read), or it is not on the local file system (an object store's credentials are
    Spark's): the caller then asks Spark."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    from rocketlake.delta.local_commits import local_path

    if local_path(path) is None or not ranges or PYARROW_MAJOR < 20:
        return None
    clauses = [
        (ds.field("topic") == queue.topic)
        & (ds.field("broker_name") == queue.broker_name)
        & (ds.field("queue_id") == queue.queue_id)
        & (ds.field("queue_offset") >= start)
        & (ds.field("queue_offset") < end)
        for queue, start, end in _joined(ranges)
    ]
    try:
        table = DeltaTable(path, storage_options=storage_options)
        if read_refusal(Protocol.of(table)) is not None:
            return None
        if not _statistics_cover(table):
            return None
        names = {field.name for field in table.schema().fields}
        wanted = [c for c in dict.fromkeys(["queue_offset", *columns]) if c in names]
        return table.to_pyarrow_table(columns=wanted, filters=functools.reduce(operator.or_, clauses))
    except (DeltaError, OSError, pa.ArrowException):
        return None


def _statistics_cover(table, columns: Sequence[str] = ("queue_offset",)) -> bool:
    """Whether every file of the table has the ranges of ``columns`` in the log: delta-rs leaves a file without one
    out of a read filtered on it, as if it could hold no row (a table whose statistics skip the column, files written
    without)."""
    files = pa.table(table.get_add_actions(flatten=True))
    for bound in (f"{edge}.{column}" for column in columns for edge in ("min", "max")):
        if files.num_rows and (bound not in files.column_names or files[bound].null_count):
            return False
    return True


#: What a slice's rows are counted by, and the columns its clauses compare (``delta.writer.slice_clauses``).
COUNTED_BY = ("window_start", "topic", "broker_name", "queue_id")
SLICE_COLUMNS = (*COUNTED_BY, "queue_offset")


def slice_counts(
    path: str, clauses: Sequence[SliceClause], storage_options: dict[str, str] | None
) -> dict[tuple[int, MessageQueue], int] | None:
    """(window start ms, queue) -> rows the table at ``path`` holds in the slice ``clauses`` cover, counted by
    delta-rs in this process from the files whose statistics may hold such a row. None where ``landed_rows`` would
    be: delta-rs may not read this table, fails to, or it is not on the local file system."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    from rocketlake.delta.local_commits import local_path
    from rocketlake.rocketmq.message_queue import MessageQueue

    if local_path(path) is None or PYARROW_MAJOR < 20:
        return None
    if not clauses:
        return {}

    def window(ms: int):
        return ds.field("window_start") == pa.scalar(ms * 1000, pa.timestamp("us", tz="UTC"))

    def clause(c: SliceClause):
        queues = functools.reduce(
            operator.or_,
            [
                (ds.field("topic") == q.topic)
                & (ds.field("broker_name") == q.broker_name)
                & (ds.field("queue_id") == q.queue_id)
                for q in c.queues
            ],
        )
        picked = functools.reduce(operator.or_, [window(ms) for ms in c.window_starts_ms]) & queues
        return picked if c.min_offset is None else picked & (ds.field("queue_offset") >= c.min_offset)

    try:
        table = DeltaTable(path, storage_options=storage_options)
        if read_refusal(Protocol.of(table)) is not None or not _statistics_cover(table, SLICE_COLUMNS):
            return None
        rows = table.to_pyarrow_table(
            columns=list(COUNTED_BY), filters=functools.reduce(operator.or_, map(clause, clauses))
        )
    except (DeltaError, OSError, pa.ArrowException):
        return None
    counted = rows.group_by(list(COUNTED_BY)).aggregate([([], "count_all")])
    starts = pc.cast(pc.cast(counted["window_start"], pa.timestamp("us", tz="UTC")), pa.int64())
    return {
        (us // 1000, MessageQueue(topic, broker, queue_id)): n
        for us, topic, broker, queue_id, n in zip(
            starts.to_pylist(),
            counted["topic"].to_pylist(),
            counted["broker_name"].to_pylist(),
            counted["queue_id"].to_pylist(),
            counted["count_all"].to_pylist(),
        )
    }


def _joined(ranges: Sequence[OffsetRange]) -> list[tuple]:
    """(queue, start, end) of ``ranges``, a queue's ranges that follow each other joined into one: the windows of one
    run are back to back, so a day's backfill is a clause per queue, not one per window and queue."""
    joined: list[list] = []
    last: dict = {}
    for r in sorted(ranges, key=lambda r: (r.queue, r.start)):
        span = last.get(r.queue)
        if span is not None and span[2] == r.start:
            span[2] = r.end
        else:
            span = last[r.queue] = [r.queue, r.start, r.end]
            joined.append(span)
    return [tuple(span) for span in joined]
