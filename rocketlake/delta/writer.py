"""Writing windows to Delta: replace exactly the slice (windows x queues), ledger in the same commit.

Idempotence comes from ``replaceWhere``: re-running a window rewrites the rows of that window
on the queues this run took, and nothing else, in one atomic commit. The ledger (which offset
ranges each window covered, and what became of every offset) travels in that very commit's
``userMetadata``, so the table and the ledger can never disagree; any Delta reader sees it in the
table history. The table itself is a plain Delta table.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession

from rocketlake.delta.evolution import widens
from rocketlake.delta.local_commits import one_writer
from rocketlake.engine.ledger import LedgerEntry, WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _queues_sql(queues: Iterable[MessageQueue]) -> str:
    """Rows of these queues, as comparisons of the columns themselves: Parquet filters can take them, and no row
    has a key string built for it (a slice's predicate is evaluated on every row read back and, on a replace, on
    every row written)."""
    by_broker: dict[tuple[str, str], list[int]] = {}
    for mq in queues:
        by_broker.setdefault((mq.topic, mq.broker_name), []).append(mq.queue_id)
    clauses = [
        f"(topic = {_sql_string(topic)} AND broker_name = {_sql_string(broker)} AND "
        + (f"queue_id = {ids[0]})" if len(ids) == 1 else f"queue_id IN ({', '.join(map(str, sorted(set(ids))))}))")
        for (topic, broker), ids in sorted(by_broker.items())
    ]
    return clauses[0] if len(clauses) == 1 else "(" + " OR ".join(clauses) + ")"


def timestamp_sql(ms: int) -> str:
    """The instant ``ms`` (epoch milliseconds) as a SQL TIMESTAMP literal in UTC, whatever the session's time zone.

    A literal, not ``timestamp_millis(ms)``: Delta prunes the files a replace may touch by their statistics against
    literals only, and it does not fold a ``replaceWhere`` condition's constants first. Named by a function, each
    slice's replace read every file of its day whose queues and offsets overlap the slice's, to find none of its
    rows there (a Spark job of its own: "Finding files to rewrite").
    """
    instant = EPOCH + timedelta(milliseconds=ms)
    return f"TIMESTAMP'{instant:%Y-%m-%d %H:%M:%S}.{instant.microsecond // 1000:03d}Z'"


@dataclass(frozen=True)
class SliceClause:
    """Rows of ``queues`` in the windows starting at ``window_starts_ms``, at or above ``min_offset`` when it is set."""

    window_starts_ms: tuple[int, ...]
    queues: tuple[MessageQueue, ...]
    min_offset: int | None = None


def slice_clauses(windows: Iterable[WindowEntry]) -> list[SliceClause]:
    """Exactly what ``windows``' ranges cover, as clauses whose union is the slice; none when they cover nothing.

    Windows are functions of store time, so a range that starts where its window starts on its queue covers
    that (window, queue) slice whole. Only a queue's first non-empty range in an entry can start later (the
    group's position, or where an orderly queue resumes): its clause keeps the rows below its start, landed
    by an earlier run. An empty range (a window re-run after the group passed it) replaces nothing.
    """
    whole: dict[tuple[int, ...], set[MessageQueue]] = {}
    by_queue: dict[MessageQueue, list[int]] = {}
    bounded: list[SliceClause] = []
    seen: set[MessageQueue] = set()
    for w in sorted(windows, key=lambda w: w.start_ms):
        for r in w.ranges:
            if r.size == 0:
                continue
            if r.queue not in seen:
                seen.add(r.queue)
                bounded.append(SliceClause((w.start_ms,), (r.queue,), r.start))
            else:
                by_queue.setdefault(r.queue, []).append(w.start_ms)
    for mq, starts in by_queue.items():
        whole.setdefault(tuple(sorted(set(starts))), set()).add(mq)
    return bounded + [SliceClause(starts, tuple(sorted(queues))) for starts, queues in sorted(whole.items())]


def slice_predicate(windows: Iterable[WindowEntry]) -> str:
    """The replaceWhere predicate of the slice ``windows``' ranges cover (``slice_clauses``); ``false`` when they
    cover nothing."""
    return clauses_predicate(slice_clauses(windows))


def clauses_predicate(clauses: Iterable[SliceClause]) -> str:
    """``clauses`` (``slice_clauses``) as one SQL predicate; ``false`` when there is none."""
    sql = []
    for c in clauses:
        if c.min_offset is not None:
            sql.append(
                f"(window_start = {timestamp_sql(c.window_starts_ms[0])} AND {_queues_sql(c.queues)} "
                f"AND queue_offset >= {c.min_offset})"
            )
        else:
            starts = ", ".join(timestamp_sql(ms) for ms in c.window_starts_ms)
            sql.append(f"(window_start IN ({starts}) AND {_queues_sql(c.queues)})")
    return "(" + " OR ".join(sql) + ")" if sql else "false"


def slice_days(windows: Iterable[WindowEntry]) -> list[str]:
    """The days (UTC) of the windows with a non-empty range: the only partitions a slice touches."""
    return sorted({_day(w.start_ms) for w in windows if any(r.size for r in w.ranges)})


def _on_connect(spark: SparkSession) -> bool:
    """A Spark Connect session (``spark.remote``): delta-spark's ``DeltaTable`` needs Delta Connect's server plugin
    there, so the same operations go through Delta's SQL, which any session with Delta's extension takes."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _sql_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


#: What loading a path that holds no Delta table raises: nothing there, a folder without a log, another format.
NOT_A_TABLE = ("PATH_NOT_FOUND", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE")


def is_delta_table(spark: SparkSession, path: str) -> bool:
    if _on_connect(spark):
        import logging

        from pyspark.errors import AnalysisException

        # The Connect client logs every error answer at ERROR, stack and all, before raising it (the demo printed
        # one); a table not created yet is the expected answer of a first run, not an error to show a person.
        client_log = logging.getLogger("pyspark.sql.connect.logging")
        level = client_log.level
        client_log.setLevel(logging.CRITICAL)
        try:
            # The schema only: resolving it reads the log's newest metadata. DESCRIBE DETAIL also counts the
            # table's files and bytes, which after each new commit is a Spark job over the whole state, several
            # times a landing.
            spark.read.format("delta").load(path).schema
            return True
        except AnalysisException as e:
            if e.getCondition() in NOT_A_TABLE:
                return False
            raise
        finally:
            client_log.setLevel(level)
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


#: The partition column of tables rocketlake creates: the UTC day of ``window_start``, computed from epoch
#: milliseconds so no session time zone can move a window to another day. Filter on it to read whole days.
DAY_COLUMN = "window_date"
DAY_EXPRESSION = "date_from_unix_date(CAST(floor(unix_millis(window_start) / 86400000) AS INT))"
DAY_MS = 86_400_000


def _day(start_ms: int) -> str:
    return datetime.fromtimestamp(start_ms // DAY_MS * DAY_MS / 1000, tz=timezone.utc).date().isoformat()


def table_fields(spark: SparkSession, path: str) -> list:
    """The Spark fields of the table at ``path``; none when there is no table yet."""
    if not is_delta_table(spark, path):
        return []
    return list(spark.read.format("delta").load(path).schema.fields)


@dataclass(frozen=True)
class Layout:
    """How a table rocketlake creates lays out its files (an ingestion's ``layout``): partition columns after the
    day, or liquid clustering instead of partitions; and the columns the day's compaction Z-orders by."""

    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()

    @property
    def columns(self) -> set[str]:
        return set(self.partition_by) | set(self.cluster_by) | set(self.zorder_by)


class LayoutMismatch(ValueError):
    """An existing table is laid out otherwise than the ingestion's ``layout`` asks; nothing was written."""


@dataclass(frozen=True)
class _Detail:
    partition_by: list[str]
    cluster_by: list[str]
    properties: dict[str, str]
    types: dict[str, str] = field(default_factory=dict)  # top-level column -> its type, as DESCRIBE TABLE says it


#: The property ``SHOW TBLPROPERTIES`` gives a liquid-clustered table's columns in (JSON, each a field path).
CLUSTERING_PROPERTY = "clusteringColumns"


def _detail(spark: SparkSession, path: str) -> _Detail:
    """What a write needs to know of the existing table, from its metadata only: ``SHOW TBLPROPERTIES`` (the
    properties, and the clustering columns) and ``DESCRIBE TABLE`` (the partition columns). DESCRIBE DETAIL says
    the same but also counts the table's files, a Spark job over its whole state after each new commit, ten times the
    cost of these two (``benchmarks/README.md``)."""
    properties = table_properties(spark, path, with_clustering=True)
    clustering = json.loads(properties.pop(CLUSTERING_PROPERTY, "[]"))
    partitions, types, in_section = [], {}, False
    for row in spark.sql(f"DESCRIBE TABLE {_sql_path(path)}").collect():
        name = (row["col_name"] or "").strip()
        if name == "# Partition Information":
            in_section = True
        elif in_section and (not name or (name.startswith("#") and name != "# col_name")):
            break
        elif in_section and name != "# col_name":
            partitions.append(name)
        elif not in_section and name and not name.startswith("#"):
            types[name] = row["data_type"]
    return _Detail(partitions, [".".join(parts) for parts in clustering], properties, types)


def to_widened_columns(df: DataFrame, types: Mapping[str, str]) -> DataFrame:
    """``df`` with each column the table has widened (a user's ``ALTER COLUMN ... TYPE``, Delta's type widening) cast
    to the table's type: the column's type binds, and a value of the narrower type always fits it."""
    from pyspark.sql import functions as F

    casts = {
        f.name: F.col(f.name).cast(types[f.name])
        for f in df.schema.fields
        if f.name in types and widens(f.dataType.simpleString(), types[f.name])
    }
    return df.withColumns(casts) if casts else df


#: The UTC hour (0-23) of ``window_start``, from epoch milliseconds as the day is (``layout``'s ``window_hour``).
HOUR_COLUMN = "window_hour"
HOUR_EXPRESSION = "CAST(floor(unix_millis(window_start) / 3600000) % 24 AS INT)"


#: How often a slice is written again after losing a race with another writer of the table.
CONFLICT_ATTEMPTS = 8


def _conflicts() -> tuple[type[BaseException], ...]:
    from delta.exceptions import (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
        DeltaConcurrentModificationException,
        MetadataChangedException,
        ProtocolChangedException,
    )

    return (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
        DeltaConcurrentModificationException,
        MetadataChangedException,
        ProtocolChangedException,
    )


def write_slice(
    df: DataFrame,
    path: str,
    ledger: LedgerEntry,
    log=None,
    *,
    with_ledger: bool = True,
    properties: Mapping[str, str] | None = None,
    layout: Layout = Layout(),
) -> int:
    """``_write_slice`` again whenever Delta reports a concurrent commit it conflicts with; the attempts made.

    Members of a group write the same table: their slices are disjoint (other queues) or identical (a queue
    both took during a rebalance), and a slice write replaces exactly its slice, so writing it again on top of
    whatever won the race loses and duplicates nothing. Its ledger entry is unchanged: the winner's entry has a
    version between this entry's ``read_version`` and its own, where readers look for it.
    """
    conflicts = _conflicts()
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            with one_writer(path):
                _write_slice(df, path, ledger, with_ledger, properties or {}, layout)
            return attempt
        except conflicts as e:
            if attempt == CONFLICT_ATTEMPTS:
                raise
            wait = random.uniform(0.2, 0.5) * 2 ** min(attempt, 4)  # jittered: two losers must not collide again
            if log is not None:
                log(
                    f"Delta commit of {path} lost a race with another writer ({type(e).__name__}); "
                    f"writing the slice again in {wait:.1f}s (attempt {attempt + 1} of {CONFLICT_ATTEMPTS})"
                )
            time.sleep(wait)
    raise AssertionError("unreachable")


def commit_ledger(spark: SparkSession, path: str, ledger: LedgerEntry) -> None:
    """A commit of the table at ``path`` that adds and removes nothing and carries ``ledger`` (a verdict): an
    empty append, retried on conflicts like a slice (an append conflicts with nothing a member writes)."""
    # An append of nothing is a commit only where Delta records empty commits: set here too, not left to a slice
    # written earlier in the session (a verdict dropped silently would leave its landing pending for ever).
    spark.conf.set("spark.databricks.delta.skipRecordingEmptyCommits", "false")
    empty = spark.read.format("delta").load(path).limit(0)
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            with one_writer(path):
                empty.write.format("delta").mode("append").option("userMetadata", ledger.to_json()).save(path)
            return
        except _conflicts():
            if attempt == CONFLICT_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.2, 0.5) * 2 ** min(attempt, 4))  # jittered, as a slice's retry


#: Optimized writes exist for small slices: without them every Spark task (a queue's range, or a piece of one)
#: writes its own small file. Once the ranges average this many offsets, each task's file is large already
#: (about 50 MiB of 1 KiB messages), and the shuffle optimized writes add (every row through the shuffle files)
#: costs more than it saves; the day's compaction still makes one file of the day.
LARGE_RANGE_OFFSETS = 50_000


def optimize_write_for(ledger: LedgerEntry) -> bool:
    """Whether a slice is small enough per range that optimized writes pay (see ``LARGE_RANGE_OFFSETS``)."""
    sizes = [r.size for w in ledger.windows for r in w.ranges if r.size > 0]
    return not sizes or sum(sizes) / len(sizes) < LARGE_RANGE_OFFSETS


#: Columns where nearly every row holds a value not seen before: bodies, ids, keys, property values. Parquet's
#: dictionary encoding probes a hash map with every such value until the dictionary outgrows its page and the
#: column falls back to plain encoding anyway; written plain from the start they cost Spark less CPU for files a
#: little larger (the figures: ``benchmarks/README.md``). Topic, tags, hosts and property names keep their
#: dictionaries: there they pay.
PLAIN_COLUMNS = (
    "body",
    "body_text",
    "msg_id",
    "offset_msg_id",
    "origin_msg_id",
    "origin_offset_msg_id",
    "keys",
    "properties.key_value.value",
)

#: Columns Delta keeps no min/max statistics for in tables rocketlake creates. Delta's default takes the first 32
#: columns, so every row written fed bodies, property maps, hosts and keys into per-file min/max aggregates that
#: no query prunes files with (the cost: ``benchmarks/README.md``). Statistics stay on the columns
#: messages are looked up by (topic, queue, offsets, ids, tags, times, window) and on a decoded body's fields.
NO_STATS_COLUMNS = frozenset(
    {
        "body",
        "body_text",
        "body_variant",  # Delta keeps no statistics of a VARIANT column
        "properties",
        "keys",
        "born_host",
        "store_host",
        "reconsume_times",
        "origin_topic",
        "origin_msg_id",
        "origin_offset_msg_id",
    }
)


def plain_encoding_settings() -> dict[str, str]:
    """Session settings that reach Parquet's writer (Spark copies SQL settings into the Hadoop configuration of
    a write) and turn dictionary encoding off for ``PLAIN_COLUMNS`` only: columns of these names in any table."""
    return {f"parquet.enable.dictionary#{column}": "false" for column in PLAIN_COLUMNS}


#: The types Delta keeps min/max statistics of (Delta's ``SkippingEligibleDataType``); a STRUCT is eligible when
#: every field of it is. Any other column named in ``delta.dataSkippingStatsColumns`` makes Delta refuse the table.
STATS_TYPES = ("byte", "short", "integer", "long", "float", "double", "decimal", "date", "timestamp", "string")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _stats_paths(path: str, data_type) -> list[str]:
    """The column at ``path`` if Delta keeps statistics of its type, else its fields' that it does (a STRUCT of some
    eligible fields), else none (a BOOLEAN, BINARY, ARRAY or MAP)."""
    from pyspark.sql.types import StructType

    if isinstance(data_type, StructType):
        children = [f"{path}.{_quoted(f.name)}" for f in data_type.fields]
        inner = [_stats_paths(child, f.dataType) for child, f in zip(children, data_type.fields)]
        whole = all(paths == [child] for paths, child in zip(inner, children))
        return [path] if whole and inner else [p for paths in inner for p in paths]
    name = data_type.typeName()
    return [path] if name in STATS_TYPES or name.startswith("timestamp") else []


def stats_columns(fields: Iterable, layout: Layout = Layout()) -> str:
    """``delta.dataSkippingStatsColumns`` for a new table of ``fields`` (Spark's): all but ``NO_STATS_COLUMNS``, the
    ``_rl_*`` bookkeeping columns, the partition columns (Delta refuses statistics on those) and the columns of
    types Delta keeps no statistics of (refused too: a STRUCT is named by its eligible fields); clustering columns
    always (Delta requires statistics on them)."""
    keep, partitions = set(layout.cluster_by), {DAY_COLUMN, *layout.partition_by}
    kept = []
    for f in fields:
        if f.name in keep:
            kept.append(_quoted(f.name))
        elif f.name not in NO_STATS_COLUMNS and not f.name.startswith("_rl_") and f.name not in partitions:
            kept += _stats_paths(_quoted(f.name), f.dataType)
    return ",".join(kept)


def _write_slice(
    df: DataFrame,
    path: str,
    ledger: LedgerEntry,
    with_ledger: bool = True,
    properties: Mapping[str, str] | None = None,
    layout: Layout = Layout(),
) -> None:
    """Replace (ledger windows) x (ledger queues) in the table at ``path`` with ``df``, one commit (carrying the
    ledger entry, unless ``with_ledger`` is False: a side table such as the failures table has no ledger).

    A new table is created by that same commit, partitioned by day (then by ``layout.partition_by``): a window's
    slice is then found and replaced among one day's files, and a day is a unit compaction can finish. With
    ``layout.cluster_by`` it is created empty first, liquid-clustered and not partitioned (Delta's DataFrame
    writer cannot cluster a table it creates), and the slice is the next commit. Optimized writes bin-pack
    each day's rows into few files, whatever the number of Spark tasks (one per range), instead of one
    small file per queue per window; a slice of large ranges skips them (``optimize_write_for``). Tables
    created before the day column keep their layout; a table laid out otherwise than a ``layout`` that is not
    the default asks for is refused (``LayoutMismatch``) before anything is written. A new table keeps
    statistics on ``stats_columns`` only; every write encodes ``PLAIN_COLUMNS`` without a dictionary.

    ``properties`` (an ingestion's ``table_properties``): Delta's own (``delta.*``) are set by the commit that
    creates the table; any that an existing table lacks or holds another value of are set before the slice's
    commit, by a commit of their own (``set_table_properties``).
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    for key, value in plain_encoding_settings().items():
        spark.conf.set(key, value)
    if with_ledger:
        # A slice of empty ranges only (a quiet window, queues added after a window landed) adds and removes no
        # file; Delta would then skip the commit, and with it the ledger entry saying those queues are landed.
        spark.conf.set("spark.databricks.delta.skipRecordingEmptyCommits", "false")

    def writer_of(frame: DataFrame):
        writer = (
            frame.write.format("delta")
            .option("mergeSchema", "true")
            .option("optimizeWrite", str(optimize_write_for(ledger)).lower())
        )
        return writer.option("userMetadata", ledger.to_json()) if with_ledger else writer

    def with_layout_columns(frame: DataFrame, day: bool, hour: bool) -> DataFrame:
        frame = frame.withColumn(DAY_COLUMN, F.expr(DAY_EXPRESSION)) if day else frame
        return frame.withColumn(HOUR_COLUMN, F.expr(HOUR_EXPRESSION)) if hour else frame

    properties = properties or {}
    if not is_delta_table(spark, path):
        laid = with_layout_columns(df, day=True, hour=HOUR_COLUMN in layout.columns)
        missing = [
            f"{key}: {name!r}"
            for key in ("partition_by", "cluster_by", "zorder_by")
            for name in getattr(layout, key)
            if name not in laid.columns
        ]
        if missing:
            raise LayoutMismatch(
                f"layout {', '.join(missing)} is not a column of the rows landed "
                f"({', '.join(laid.columns)}); name a column rocketlake lands or a body field"
            )
        stats = stats_columns(laid.schema.fields, layout)
        if layout.cluster_by:
            _create_clustered(spark, path, laid, layout.cluster_by, stats, properties)
        else:
            creating = writer_of(laid).option("delta.dataSkippingStatsColumns", stats)
            for key, value in properties.items():
                if key.startswith("delta."):
                    creating = creating.option(key, value)
            creating.partitionBy(DAY_COLUMN, *layout.partition_by).mode("append").save(path)
            if any(not key.startswith("delta.") for key in properties):
                set_table_properties(spark, path, properties)
            return
    detail = _detail(spark, path)
    _check_layout(path, detail, layout)
    _check_features(path, detail.properties)
    set_table_properties(spark, path, properties, detail.properties)
    df = to_widened_columns(df, detail.types)
    predicate = slice_predicate(ledger.windows)
    # The table's own layout decides the derived columns a slice needs: a layout since removed from the
    # configuration (the default asks nothing) must not drop a column the table is partitioned or clustered by.
    laid_out_by = {*detail.partition_by, *detail.cluster_by}
    df = with_layout_columns(
        df,
        day=DAY_COLUMN in detail.partition_by or bool(detail.cluster_by),
        hour=HOUR_COLUMN in layout.columns or HOUR_COLUMN in laid_out_by,
    )
    if DAY_COLUMN in detail.partition_by:
        days = slice_days(ledger.windows)
        if days:
            listed = ", ".join("DATE'" + day + "'" for day in days)
            predicate = f"{DAY_COLUMN} IN ({listed}) AND {predicate}"
    writer_of(df).mode("overwrite").option("replaceWhere", predicate).save(path)


def _create_clustered(
    spark: SparkSession,
    path: str,
    frame: DataFrame,
    cluster_by: tuple[str, ...],
    stats: str,
    properties: Mapping[str, str],
) -> None:
    """An empty liquid-clustered table of ``frame``'s columns (a commit of its own, before the first slice's)."""
    from rocketlake.delta.evolution import quoted, type_ddl

    columns = ", ".join(f"{quoted(f.name)} {type_ddl(f.dataType, quote=True)}" for f in frame.schema.fields)
    listed = {
        "delta.dataSkippingStatsColumns": stats,
        **{key: value for key, value in properties.items() if key.startswith("delta.")},
    }
    options = ", ".join(f"'{key}' = '{value}'" for key, value in listed.items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {_sql_path(path)} ({columns}) USING delta "
        f"CLUSTER BY ({', '.join(map(quoted, cluster_by))}) TBLPROPERTIES ({options})"
    )


#: Table properties of features this writer cannot keep up: Delta would commit to the table all the same.
UNIFORM = "delta.universalFormat.enabledFormats"


class UnsupportedTableFeature(ValueError):
    """The existing table has a feature on that a landing would silently break."""


def _check_features(path: str, properties: Mapping[str, str]) -> None:
    """Refuse, before the slice's commit, a table with Iceberg compatibility (UniForm) on: Delta without the
    delta-iceberg module commits to it without writing the Iceberg metadata, so Iceberg readers would stop seeing
    what lands (tests/integration/test_table_features.py)."""
    formats = properties.get(UNIFORM)
    if formats:
        raise UnsupportedTableFeature(
            f"the table {path} has Iceberg compatibility (UniForm) on ({UNIFORM} = {formats}), which is not "
            "supported yet: Delta writes its Iceberg metadata with the delta-iceberg module, which rocketlake's "
            "Spark does not carry, so Iceberg readers would not see what lands; turn it off (ALTER TABLE ... UNSET "
            f"TBLPROPERTIES ('{UNIFORM}')) or land into another table"
        )


def _check_layout(path: str, detail: _Detail, layout: Layout) -> None:
    """``LayoutMismatch`` when the table is laid out otherwise than ``layout`` (the default layout asks nothing:
    tables made before it keep theirs)."""
    if layout == Layout():
        return
    wanted = ([], list(layout.cluster_by)) if layout.cluster_by else ([DAY_COLUMN, *layout.partition_by], [])
    if (detail.partition_by, detail.cluster_by) != wanted:
        raise LayoutMismatch(
            f"the table at {path} is partitioned by {detail.partition_by or 'nothing'} and clustered by "
            f"{detail.cluster_by or 'nothing'}, but layout asks for partitions {wanted[0] or 'none'} and clustering "
            f"{wanted[1] or 'none'}. Delta fixes a table's layout when it is created: write a new table, or set "
            "layout to what the table has"
        )


def closed_days(window_starts_ms: Iterable[int], closed_before_ms: int) -> list[str]:
    """Days (UTC) among those of ``window_starts_ms`` that ended before ``closed_before_ms``: no window of
    theirs can change any more except by an explicit re-run, so their files can be compacted for good."""
    return sorted({_day(ms) for ms in window_starts_ms if (ms // DAY_MS + 1) * DAY_MS <= closed_before_ms})


def compact_days(
    spark: SparkSession, path: str, days: list[str], zorder_by: Iterable[str] = ()
) -> list[tuple[str, int, int]]:
    """Delta OPTIMIZE of these day partitions (bin-packing, or Z-ordering by ``zorder_by``): ``(day, files removed,
    files added)`` each. A liquid-clustered table is OPTIMIZEd whole, once (Delta clusters only what is not
    clustered yet): ``("clustered", removed, added)``.

    Only for tables with the day column or clustering (older tables are left as they are). Run it where no replace
    of the same table can run at once: rocketlake runs it inside the run that landed the windows, which holds the
    consumer group's pool slot, after the offsets are committed.
    """
    from delta.tables import DeltaTable

    if not days:
        return []
    detail = _detail(spark, path)
    if detail.cluster_by:
        with one_writer(path):
            metrics = spark.sql(f"OPTIMIZE {_sql_path(path)}").collect()[0]["metrics"]
        return [("clustered", int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]))]
    if DAY_COLUMN not in detail.partition_by:
        return []
    zorder_by = list(zorder_by)
    done = []
    for day in days:
        where = f"{DAY_COLUMN} = DATE'{day}'"
        with one_writer(path):
            if _on_connect(spark):
                zorder = f" ZORDER BY ({', '.join(zorder_by)})" if zorder_by else ""
                compaction = spark.sql(f"OPTIMIZE {_sql_path(path)} WHERE {where}{zorder}")
            else:
                optimize = DeltaTable.forPath(spark, path).optimize().where(where)
                compaction = optimize.executeZOrderBy(*zorder_by) if zorder_by else optimize.executeCompaction()
            metrics = compaction.collect()[0]["metrics"]
        done.append((day, int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])))
    return done


def table_properties(spark: SparkSession, path: str, with_clustering: bool = False) -> dict[str, str]:
    """The table's properties (its protocol's ``delta.feature.*`` and reader/writer versions among them), read from
    its metadata; a liquid-clustered table's ``clusteringColumns`` only ``with_clustering``."""
    found = {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {_sql_path(path)}").collect()}
    if not with_clustering:
        found.pop(CLUSTERING_PROPERTY, None)
    return found


def set_table_properties(
    spark: SparkSession, path: str, wanted: Mapping[str, str], current: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Set those of ``wanted`` the table lacks or holds another value of (one ``ALTER TABLE ... SET TBLPROPERTIES``
    commit, none when all match); what was set. Names and values were checked at load (no quote to escape).
    ``current``: the table's properties, when the caller has read them already."""
    if current is None:
        current = table_properties(spark, path) if wanted else {}
    changed = {key: value for key, value in wanted.items() if current.get(key) != value}
    if changed:
        listed = ", ".join(f"'{key}' = '{value}'" for key, value in changed.items())
        spark.sql(f"ALTER TABLE {_sql_path(path)} SET TBLPROPERTIES ({listed})")
    return changed


#: Delta refuses a VACUUM retention below this unless its check is turned off (a reader or writer running longer
#: than the retention could lose the files it reads).
DELTA_MIN_RETENTION_HOURS = 168


def vacuum(spark: SparkSession, path: str, retention_hours: int) -> None:
    """``VACUUM`` the table keeping ``retention_hours`` of history: data files no version within it refers to
    are deleted.

    A retention below Delta's safety check (``DELTA_MIN_RETENTION_HOURS``) is the ingestion's explicit choice
    (``vacuum_retention_hours``): the check is turned off for this call only. Run where no replace of the table
    runs at once, as ``compact_days``."""
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(check, "true")
    if retention_hours < DELTA_MIN_RETENTION_HOURS:
        spark.conf.set(check, "false")
    try:
        spark.sql(f"VACUUM {_sql_path(path)} RETAIN {int(retention_hours)} HOURS").collect()
    finally:
        spark.conf.set(check, before)


def last_commit_version(spark: SparkSession, path: str) -> int | None:
    if not is_delta_table(spark, path):
        return None
    if _on_connect(spark):
        return spark.sql(f"DESCRIBE HISTORY {_sql_path(path)} LIMIT 1").collect()[0]["version"]
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
