"""What becomes of each read message before the table: decoded, checked for an earlier copy, given to the listener.

Columns added to the rows of a read (``materialize`` then sorts rows by them), which come from the source with
the origin columns (``engine.columns``): a redelivered copy is known by the stored message it came from.

* ``_rl_error``: null when the message is consumed, else why not (a body that does not decode under
  ``body.format``, a listener's RECONSUME_LATER or exception, a call over ``consume_timeout``).
* ``_rl_duplicate``: a redelivered copy of a message whose original (or another copy) is already landed.
* ``_rl_held`` (orderly): the message its queue is suspended at, or a later one of that queue: landed when the
  queue resumes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

from rocketlake.delta.evolution import ddl, quoted, type_ddl
from rocketlake.engine.columns import (
    FRAME_ERROR_COLUMN,
    PAYLOAD_COLUMN,
    PROTOBUF_COLUMN,
    PROTOBUF_ERROR_COLUMN,
    VARIANT_COLUMN,
)
from rocketlake.engine.config import BodyConfig, IngestionConfig
from rocketlake.rocketmq.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rocketlake.spark.body import BodySchemaError, configured_schema, decode_body

ERROR = "_rl_error"
DUPLICATE = "_rl_duplicate"
HELD = "_rl_held"
HELPERS = (ERROR, DUPLICATE, HELD, "matched")
CORRUPT = "_rl_corrupt"

#: How far back (days before the earliest window of a run) the table is searched for the original of a
#: redelivered copy. Copies come back within hours of their original's consumption (16 retries, at most
#: 2 h apart); a window landed for the first time more than this after its store time could miss one.
ORIGIN_LOOKBACK_DAYS = 7
#: The column copies are matched to their original by (``engine.columns``).
ORIGIN_ID = "origin_offset_msg_id"


#: Topics whose messages are copies of a message stored first elsewhere, known by its offset id: redelivered
#: through ``%RETRY%<group>``, or dead-lettered to ``%DLQ%<group>``, where one message arrives twice when it is sent
#: back twice (a re-run after its send-back, a step retry).
COPY_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)


def is_copy_topic(topic: str) -> bool:
    return topic.startswith(COPY_TOPIC_PREFIXES)


def is_copy(topic: Column) -> Column:
    retry, dlq = COPY_TOPIC_PREFIXES
    return topic.startswith(retry) | topic.startswith(dlq)


def _unframed_then_decoded(df: DataFrame, body: BodyConfig, schema: StructType | None) -> DataFrame:
    """Bodies in a registry's frames (the reader gave each its payload, or why it has none): the payload decoded as
    ``body.format`` says, the body kept as it came (a failed message is sent back as it was)."""
    framed = "_rl_framed_body"
    swapped = df.withColumnRenamed("body", framed).withColumnRenamed(PAYLOAD_COLUMN, "body")
    decoded = decode_checked(swapped, body.model_copy(update={"framing": "none"}), schema)
    fields = [c for c in decoded.columns if c not in swapped.columns and c != ERROR]
    error = F.when(F.col("matched"), F.coalesce(F.col(FRAME_ERROR_COLUMN), F.col(ERROR)))
    kept = [
        F.col(framed).alias("body") if c == "body" else F.col(c)
        for c in df.columns
        if c not in (PAYLOAD_COLUMN, FRAME_ERROR_COLUMN)
    ]
    return decoded.select(*kept, *fields, error.cast("string").alias(ERROR))


def decode_checked(df: DataFrame, body: BodyConfig, schema: StructType | None = None) -> DataFrame:
    """``decode_body`` plus ``_rl_error`` for a matched message whose body does not decode under ``body.format``.

    ``schema``: the JSON schema to parse with, when it is not ``body.schema`` alone (an evolving table's columns,
    ``delta.evolution``)."""
    if body.framing != "none" and body.format != "protobuf":
        return _unframed_then_decoded(df, body, schema)
    if body.format == "raw":
        return df.withColumn(ERROR, F.lit(None).cast("string"))
    utf8 = F.is_valid_utf8(F.col("body").cast("string"))
    bad_utf8 = F.lit("body is not valid UTF-8")
    if body.format == "text":
        decoded = decode_body(df, "text")
        return decoded.withColumn(ERROR, F.when(F.col("matched") & ~utf8, bad_utf8))
    if body.format == "avro":
        from rocketlake.spark.body import decode_avro

        return decode_avro(df, body, ERROR)
    if body.format == "protobuf":  # decoded by the reader (``source.with_decoded_bodies``): its fields, its errors
        fields = df.schema[PROTOBUF_COLUMN].dataType.fields
        error = F.when(F.col("matched"), F.col(PROTOBUF_ERROR_COLUMN))
        kept = [c for c in df.columns if c not in (PROTOBUF_COLUMN, PROTOBUF_ERROR_COLUMN)]
        return df.select(
            *kept,
            *[F.col(PROTOBUF_COLUMN).getField(f.name).alias(f.name) for f in fields],
            error.cast("string").alias(ERROR),
        )
    if body.format == "variant":
        decoded = decode_body(df, "variant")
        not_json = F.concat(F.lit("body is not JSON: "), F.substring(F.col("body").cast("string"), 1, 200))
        error = (
            F.when(~F.col("matched"), F.lit(None))
            .when(~utf8, bad_utf8)
            .when(F.col("body").isNull() | F.col(VARIANT_COLUMN).isNull(), not_json)
        )
        return decoded.withColumn(ERROR, error.cast("string"))
    if schema is None:
        schema = configured_schema(body.schema_)
        against = f"body.schema ({body.schema_})"
    else:
        against = f"the table's body columns ({_shortened(ddl(schema))})"
    # One parse per body: Spark's PERMISSIVE mode gives the schema's fields and, for a record that does not match
    # the schema (a value of another type included), keeps its text in the corrupt-record column.
    parsed = F.col("_rl_json")
    with_json = df.withColumn(
        "_rl_json",
        F.from_json(
            F.col("body").cast("string"),
            StructType(schema.fields + StructType.fromDDL(f"{CORRUPT} STRING").fields),
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
        ),
    )
    malformed = F.concat(
        F.lit(f"body is not JSON matching {against}: "), F.substring(F.col("body").cast("string"), 1, 200)
    )
    error = (
        F.when(~F.col("matched"), F.lit(None))
        .when(~utf8, bad_utf8)
        .when(parsed.isNull() | parsed.getField(CORRUPT).isNotNull(), malformed)
    )
    return with_json.select(
        *df.columns, *[parsed.getField(f.name).alias(f.name) for f in schema.fields], error.cast("string").alias(ERROR)
    )


def _shortened(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mark_known(df: DataFrame, table_path: str | None, replaced: str, earliest_ms: int) -> DataFrame:
    """``_rl_duplicate``: a message one of whose copies the table at ``table_path`` holds already, outside the slice
    this run replaces (rows matching the predicate ``replaced``).

    A copy (from a ``%RETRY%`` or ``%DLQ%`` topic) is one when its original, or another copy of it, is there. An
    original (a main-topic message) is one when a copy of it is there: a window landed again after its failures
    were redelivered and landed in later windows (the copy stays; the original is counted as a duplicate). Copies
    are matched to the stored message they came from (``origin_offset_msg_id``), not by msgId: two main-topic
    messages with one msgId (a producer's retried send, stored twice) are two offsets, landed both, and so are
    their copies.
    """
    if table_path is None:
        return df.withColumn(DUPLICATE, F.lit(False))
    spark = df.sparkSession
    table = spark.read.format("delta").load(table_path)
    # The stored message each row is or came from; rows landed before that column was (their msgId) match none.
    origin = (
        F.coalesce(F.col(ORIGIN_ID), F.col("origin_msg_id"))
        if ORIGIN_ID in table.columns
        else F.coalesce(F.col("origin_msg_id"), F.col("msg_id"))
        if "origin_msg_id" in table.columns
        else F.col("msg_id")
    )
    since = earliest_ms - ORIGIN_LOOKBACK_DAYS * 86_400_000
    known = (
        table.where(F.col("window_start") >= F.timestamp_millis(F.lit(since)))
        .where(f"NOT ({replaced})")
        .groupBy(origin.alias("_rl_known_id"))
        .agg(F.max(is_copy(F.col("topic"))).alias("_rl_known_copy"))
    )
    joined = df.join(known, df[ORIGIN_ID] == known["_rl_known_id"], "left")
    copy = is_copy(F.col("topic"))
    duplicate = F.col("_rl_known_id").isNotNull() & (copy | F.col("_rl_known_copy"))
    return joined.withColumn(DUPLICATE, F.coalesce(duplicate, F.lit(False))).drop("_rl_known_id", "_rl_known_copy")


def listen(df: DataFrame, cfg: IngestionConfig) -> DataFrame:
    """The listener over every matched, decoded, not-yet-landed message; its verdict in ``_rl_error``."""
    from rocketlake.engine.listener import Vectorized, load_listener

    listener = load_listener(cfg.listener)
    schema = df.schema
    added = StructType.fromDDL(listener.columns) if isinstance(listener, Vectorized) and listener.columns else None
    if added is not None:
        clashes = sorted({f.name for f in added.fields} & set(schema.fieldNames()))
        if clashes:
            raise BodySchemaError(
                f"listener {cfg.listener} declares columns {clashes} the table already has; "
                "return them in its DataFrame to replace their values instead"
            )
        schema = StructType(schema.fields + added.fields)
    return plain_strings(
        df.mapInArrow(
            _listening(
                cfg.listener,
                cfg.consume_message_batch_max_size,
                cfg.consume_thread_min,
                cfg.consume_thread_max,
                cfg.consume_timeout_seconds,
                added,
            ),
            schema,
        ),
        schema,
    )


def _has_string(kind: DataType) -> bool:
    if isinstance(kind, StructType):
        return any(_has_string(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _has_string(kind.elementType)
    if isinstance(kind, MapType):
        return _has_string(kind.keyType) or _has_string(kind.valueType)
    return isinstance(kind, StringType)


def plain_strings(df: DataFrame, schema: StructType) -> DataFrame:
    """``df`` with its strings of the default kind. A schema handed to ``mapInArrow`` on Spark Connect goes back to
    the server with every string's collation spelled out (UTF8_BINARY), and Delta records those columns as
    ``string collate UTF8_BINARY``, a type delta-rs (the sensors' and the CLI's reader) refuses to read. A cast to
    the type's DDL, which the server parses, gives the plain string back; on a classic session it changes nothing.
    ``schema``: the one handed to ``mapInArrow`` (asking ``df.schema`` would cost a Connect round trip)."""
    return df.select(
        *[
            df[quoted(f.name)].cast(type_ddl(f.dataType, quote=True)).alias(f.name)
            if _has_string(f.dataType)
            else df[quoted(f.name)]
            for f in schema.fields
        ]
    )


def _listening(
    path: str, batch_max: int, threads_min: int, threads_max: int, timeout_s: float, added: StructType | None
):
    """The mapInArrow function: picklable, it loads the listener in the Python worker."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys

        from rocketlake.engine.listener import CallPool, Vectorized, load_listener

        listener = load_listener(path)
        pool = CallPool(threads_min, threads_max, timeout_s)

        def log(line: str) -> None:
            print(f"rocketlake listener: {line}", file=sys.stderr, flush=True)

        from pyspark.sql.pandas.types import to_arrow_type

        # Parsed on the driver: DDL parsing needs the JVM, which a Python worker does not have.
        extra = {f.name: to_arrow_type(f.dataType) for f in added.fields} if added is not None else {}
        try:
            for batch in batches:
                yield _listen_batch(batch, listener, isinstance(listener, Vectorized), batch_max, pool, log, extra)
        finally:
            pool.close()

    return apply


def _listen_batch(
    batch: pa.RecordBatch, listener, vectorised: bool, batch_max: int, pool, log, extra: dict[str, pa.DataType]
) -> pa.RecordBatch:
    from rocketlake.engine.listener import consume_rows

    table = pa.Table.from_batches([batch])
    errors = table.column(ERROR).to_pylist()
    pending = [
        i
        for i, (m, e, d) in enumerate(
            zip(table.column("matched").to_pylist(), errors, table.column(DUPLICATE).to_pylist())
        )
        if m and e is None and not d
    ]
    added = {name: [None] * table.num_rows for name in extra}
    if pending:
        rows = table.take(pending)
        if vectorised:
            verdicts, changes = _call_vectorised(listener, rows, pool, log)
            if changes is not None:
                for name in changes.columns:
                    if name in ("status", "error"):
                        continue
                    values = list(changes[name])
                    if name in added:
                        for i, v in zip(pending, values):
                            added[name][i] = v
                    elif name in table.column_names and name not in HELPERS:
                        column = table.column(name).to_pylist()
                        for i, v in zip(pending, values):
                            column[i] = v
                        table = table.set_column(
                            table.column_names.index(name), name, pa.array(column, type=table.schema.field(name).type)
                        )
        else:
            messages = [_as_message(r) for r in rows.to_pylist()]
            verdicts = consume_rows(messages, listener, batch_max, pool, log)
        for i, verdict in zip(pending, verdicts):
            errors[i] = verdict
    table = table.set_column(table.column_names.index(ERROR), ERROR, pa.array(errors, type=pa.string()))
    for name, values in added.items():
        table = table.append_column(name, pa.array(values, type=extra[name]))
    return (
        table.combine_chunks().to_batches()[0]
        if table.num_rows
        else pa.RecordBatch.from_pylist([], schema=table.schema)
    )


def _call_vectorised(listener, rows: pa.Table, pool, log):
    from rocketlake.engine.listener import judge_frame, timed_out

    frame = rows.drop_columns([c for c in HELPERS if c in rows.column_names]).to_pandas()
    frame["topic"] = frame["origin_topic"]
    [(kind, value)] = pool.run([lambda: listener(frame)])
    if kind == "ok":
        try:
            return judge_frame(value, rows.num_rows)
        except Exception as e:  # noqa: BLE001 - a malformed answer fails these messages, not the window
            return [f"listener answer unusable: {e}"] * rows.num_rows, None
    if kind == "error":
        return [f"listener raised {type(value).__name__}: {value}"[:1000]] * rows.num_rows, None
    return timed_out(rows.select(["msg_id"]).to_pylist(), value, pool.timeout_s, log), None


def _as_message(row: dict) -> dict:
    """A row as the listener sees it: no rocketlake helper columns, and the original topic (resetRetryAndNamespace)."""
    message = {k: v for k, v in row.items() if k not in HELPERS}
    message["topic"] = row["origin_topic"]
    return message


def queue_key(df_topic: str = "topic") -> Column:
    """``topic/broker_name/queue_id``: ``MessageQueue.key`` as a column."""
    return F.concat_ws("/", F.col(df_topic), F.col("broker_name"), F.col("queue_id").cast("string"))


def listen_orderly(
    df: DataFrame, cfg: IngestionConfig, prior: dict[str, tuple[int, int]], queue_count: int
) -> DataFrame:
    """Orderly consumption (``listener.consume_in_order``): each queue's rows in one Spark task, in offset order,
    given to the listener one batch at a time; ``_rl_held`` marks what a suspension holds back.

    ``prior``: queue key -> (offset, failed attempts) of the queues that resume at a suspended message; that
    message's ``reconsume_times`` is its failed attempts, as the Java consumer's local count is.
    """
    key = queue_key()
    attempts = None
    for q, (offset, failed) in prior.items():
        hit = (key == F.lit(q)) & (F.col("queue_offset") == F.lit(offset))
        attempts = F.when(hit, F.lit(failed)) if attempts is None else attempts.when(hit, F.lit(failed))
    if attempts is not None:
        df = df.withColumn("reconsume_times", attempts.otherwise(F.col("reconsume_times")).cast("int"))
    ordered = df.repartition(max(1, queue_count), "topic", "broker_name", "queue_id").sortWithinPartitions(
        "topic", "broker_name", "queue_id", "queue_offset"
    )
    schema = StructType(df.schema.fields + StructType.fromDDL(f"{HELD} BOOLEAN").fields)
    return plain_strings(
        ordered.mapInArrow(
            _in_order(
                cfg.listener,
                cfg.consume_message_batch_max_size,
                cfg.consume_timeout_seconds,
                prior,
                cfg.effective_max_reconsume_times,
                cfg.consume_thread_max,
            ),
            schema,
        ),
        schema,
    )


def _in_order(
    path: str | None,
    batch_max: int,
    timeout_s: float,
    prior: dict[str, tuple[int, int]],
    max_attempts: int,
    threads: int = 1,
):
    """The mapInArrow function of ``listen_orderly``: picklable. A task holds one queue or several (hashed to the
    same partition): its queues are consumed side by side on up to ``threads`` threads (``consume_thread_max``, as
    the Java consumer's pool serves many queues), each queue one listener call at a time, in offset order."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys
        from concurrent.futures import ThreadPoolExecutor

        from rocketlake.engine.listener import CallPool, consume_in_order, load_listener

        listener = load_listener(path) if path else None
        pools: dict[str, CallPool] = {}  # one call at a time per queue, each within consume_timeout
        held: set[str] = set()

        def log(line: str) -> None:
            print(f"rocketlake orderly: {line}", file=sys.stderr, flush=True)

        def consume_queue(rows: list[dict]) -> list[tuple[str | None, bool]]:
            return consume_in_order(rows, listener, batch_max, pools[rows[0]["queue"]], prior, max_attempts, held, log)

        workers = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="rocketlake-orderly")
        try:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                rows = [
                    {
                        "queue": f"{r['topic']}/{r['broker_name']}/{r['queue_id']}",
                        "queue_offset": r["queue_offset"],
                        "matched": r["matched"],
                        "duplicate": r[DUPLICATE],
                        "error": r[ERROR],
                        "message": _as_message(r),
                    }
                    for r in table.to_pylist()
                ]
                at: dict[str, list[int]] = {}
                for i, row in enumerate(rows):  # sorted by queue and offset: each queue's rows stay in order
                    at.setdefault(row["queue"], []).append(i)
                for key in at:
                    if key not in pools:
                        pools[key] = CallPool(1, 1, timeout_s)
                verdicts: list = [None] * len(rows)
                for indexes, found in zip(
                    at.values(), workers.map(consume_queue, ([rows[i] for i in ix] for ix in at.values()))
                ):
                    for i, verdict in zip(indexes, found):
                        verdicts[i] = verdict
                table = table.set_column(
                    table.column_names.index(ERROR), ERROR, pa.array([e for e, _ in verdicts], type=pa.string())
                )
                table = table.append_column(HELD, pa.array([h for _, h in verdicts], type=pa.bool_()))
                yield (
                    table.combine_chunks().to_batches()[0]
                    if table.num_rows
                    else pa.RecordBatch.from_pylist([], schema=table.schema)
                )
        finally:
            workers.shutdown(wait=False)
            for pool in pools.values():
                pool.close()

    return apply


def with_last_error(df: DataFrame, failures_path: str) -> DataFrame:
    """``last_error`` of each dead letter: the error of the failure that sent it to the DLQ, from the failures
    table of the ingestion whose dead letters these are (null if that failure is not recorded there)."""
    from rocketlake.delta.writer import is_delta_table
    from rocketlake.engine.failures import DEAD_LETTERED

    spark = df.sparkSession
    if not is_delta_table(spark, failures_path):
        return df.withColumn("last_error", F.lit(None).cast("string"))
    failures = spark.read.format("delta").load(failures_path)
    # By the stored original: two messages a producer's retry stored with one msgId fail each with its own error.
    # Failures recorded before that column was are found by msgId, as they were.
    if ORIGIN_ID in failures.columns:
        origin, key = F.coalesce(F.col(ORIGIN_ID), F.col("origin_msg_id")), ORIGIN_ID
    else:
        origin, key = F.col("origin_msg_id"), "origin_msg_id"
    last = (
        failures.where(F.col("outcome") == DEAD_LETTERED)
        .groupBy(origin.alias("_rl_origin"))
        .agg(F.max_by("error", F.struct("window_start", "queue_offset")).alias("last_error"))
    )
    return df.join(last, df[key] == last["_rl_origin"], "left").drop("_rl_origin")
