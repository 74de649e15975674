"""``spark.read.format("rocketmq")``: a PySpark Python Data Source over bounded offset ranges.

Register once per SparkSession, then read like Spark's Kafka source::

    from rocketlake.spark.source import register
    register(spark)
    df = (spark.read.format("rocketmq")
          .option("namesrv", "127.0.0.1:9876").option("topic", "orders")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

The driver plans (``partitions``): it resolves the bounds with the broker and splits every queue's
range into tasks of at most ``maxMessagesPerPartition`` messages. The executors read (``read``):
each pulls exactly ``[start, end)`` and streams Arrow record batches of at most
``pullThresholdForQueue`` messages and ``pullThresholdSizeForQueue`` MiB, so what a task holds at
once is bounded by the push consumer's per-queue cache limits, however long its range. Queues are keyed by
(topic, broker_name, queue_id) everywhere: queue ids repeat across brokers.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from rocketlake.engine.columns import (
    FRAME_ERROR_COLUMN,
    PAYLOAD_COLUMN,
    PROTOBUF_COLUMN,
    PROTOBUF_ERROR_COLUMN,
    arrow_schema,
    schema_ddl,
)
from rocketlake.engine.options import SourceOptionError, SourceOptions, parse_options
from rocketlake.engine.planning import split_ranges
from rocketlake.rocketmq.codes import RequestCode
from rocketlake.rocketmq.columnar import (
    RawRecords,
    origin_msg_id,
    origin_offset_msg_id,
    origin_topic,
    record_batch,
)
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
)
from rocketlake.rocketmq.message_queue import OffsetRange

if TYPE_CHECKING:
    from rocketlake.engine.protobuf import BodyDecoder


@dataclass(frozen=True)
class Chunk(InputPartition):
    """One task: a range of one queue (and the window it belongs to, when planned). Picklable; carries
    no secret (those come from options)."""

    offsets: OffsetRange
    window_start_ms: int | None = None


class RocketMQDataSource(DataSource):
    """The ``rocketmq`` format. Options: see ``engine.options``."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        from rocketlake.engine.stream_options import shaping_options

        opts = shaping_options(self.options)
        ddl = schema_ddl(**_schema_args(opts))
        decoder = protobuf_decoder(opts)
        if decoder is not None:
            ddl += f", {PROTOBUF_COLUMN} {decoder.column.ddl}, {PROTOBUF_ERROR_COLUMN} STRING"
        if opts.framed_schema is not None:
            ddl += f", {PAYLOAD_COLUMN} BINARY, {FRAME_ERROR_COLUMN} STRING"
        return ddl

    def reader(self, schema: StructType) -> "RocketMQReader":
        return RocketMQReader(parse_options(self.options))

    def streamReader(self, schema: StructType):
        """``readStream``: Spark 4.2 or later (``spark.stream``); refused on an older Spark in one sentence."""
        import pyspark

        from rocketlake.engine.stream_options import parse_stream_options, spark_refusal

        refusal = spark_refusal(pyspark.__version__)
        if refusal is not None:
            raise SourceOptionError(refusal)
        from rocketlake.spark.stream import RocketMQStreamReader

        return RocketMQStreamReader(parse_stream_options(self.options))


def _schema_args(opts: SourceOptions) -> dict:
    return {
        "metadata": opts.metadata_columns,
        "text": opts.body_format == "text",
        "matched": opts.include_filtered,
        "window": opts.plan is not None,
    }


_decoders: dict[tuple, "BodyDecoder"] = {}


def protobuf_decoder(opts: SourceOptions) -> BodyDecoder | None:
    """The decoder of bodyFormat=protobuf, one per message type in a process (its pool and classes are built once)."""
    if opts.body_format != "protobuf":
        return None
    from rocketlake.engine.protobuf import BodyDecoder  # the protobuf runtime, for Protobuf bodies only
    from rocketlake.engine.registry import SchemaLookup

    key = (opts.protobuf_descriptor, opts.protobuf_message, opts.schema_registry_url, opts.schema_directory)
    decoder = _decoders.get(key)
    if decoder is None:
        framed = opts.schema_registry_url is not None or opts.schema_directory is not None
        registry = SchemaLookup(opts.schema_registry_url, opts.schema_directory) if framed else None
        decoder = _decoders[key] = BodyDecoder(opts.protobuf_descriptor, opts.protobuf_message, registry=registry)
    return decoder


class Unframer:
    """framing=confluent for bodies Spark decodes (JSON, Avro): each body's payload after its frame, or why it has
    none; an Avro body's schema id must name the configured schema (its fingerprint), a JSON body's any schema."""

    def __init__(self, opts: SourceOptions):
        from rocketlake.engine.registry import SchemaLookup

        self.lookup = SchemaLookup(opts.schema_registry_url, opts.schema_directory)
        kind, _, fingerprint = opts.framed_schema.partition(":")
        self.check = _avro_check(fingerprint) if kind == "avro" else None

    def columns(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        from rocketlake.engine.registry import unframed

        bodies = batch.column("body").to_pylist()
        if "matched" in batch.schema.names:
            bodies = [b if m else None for b, m in zip(bodies, batch.column("matched").to_pylist())]
        payloads, errors = unframed(bodies, self.lookup, self.check)
        return pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(payloads, pa.binary()), pa.array(errors, pa.string())],
            names=[*batch.schema.names, PAYLOAD_COLUMN, FRAME_ERROR_COLUMN],
        )


def _avro_check(fingerprint: str):
    """Whether an id's schema is the configured Avro schema: its Parsing Canonical Form has the same fingerprint."""
    from rocketlake.engine.avro import fingerprint as fingerprint_of

    def check(frame, text: str) -> str | None:
        schema_id = frame.schema_id
        try:
            same = fingerprint_of(text).hex() == fingerprint
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"body is framed with schema id {schema_id}, whose schema is not Avro"
        if same:
            return None
        return f"body is framed with schema id {schema_id}, whose Avro schema is not schema_file's"

    return check


_unframers: dict[tuple, Unframer] = {}


def unframer(opts: SourceOptions) -> Unframer | None:
    """The unframer of framing=confluent for bodies Spark decodes, one per registry and schema in a process."""
    if opts.framed_schema is None:
        return None
    key = (opts.schema_registry_url, opts.schema_directory, opts.framed_schema)
    if key not in _unframers:
        _unframers[key] = Unframer(opts)
    return _unframers[key]


def with_decoded_bodies(batch: pa.RecordBatch, decoder: BodyDecoder) -> pa.RecordBatch:
    """``batch`` with the decoded bodies and their errors as two more columns; a filtered message's body (a
    ``matched`` column saying false) is not decoded."""
    bodies = batch.column("body").to_pylist()
    if "matched" in batch.schema.names:
        bodies = [b if m else None for b, m in zip(bodies, batch.column("matched").to_pylist())]
    decoded, errors = decoder.decode(bodies)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, decoded, pa.array(errors, pa.string())],
        names=[*batch.schema.names, PROTOBUF_COLUMN, PROTOBUF_ERROR_COLUMN],
    )


def register(spark) -> None:
    """Make ``spark.read.format("rocketmq")`` available in this SparkSession."""
    spark.dataSource.register(RocketMQDataSource)


class RocketMQReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[Chunk]:
        opts = self.options
        if opts.plan is not None:
            return [
                Chunk(piece, window_start_ms)
                for offsets, window_start_ms in opts.plan
                for piece in split_ranges([offsets], opts.max_messages_per_partition)
            ]
        from rocketlake.engine.broker_access import resolve_ranges

        return [Chunk(r) for r in split_ranges(resolve_ranges(opts), opts.max_messages_per_partition)]

    def read(self, partition: Chunk) -> Iterator[pa.RecordBatch]:
        from rocketlake.engine.broker_access import pull_chunks, range_subscription

        _freeze()

        if not isinstance(partition, Chunk):
            return  # an empty plan: Spark still runs one task, with its own default partition
        opts = self.options
        schema = arrow_schema(**_schema_args(opts))
        batches = _TaskBatches(
            schema,
            partition.offsets.queue.broker_name,
            partition.window_start_ms,
            range_subscription(opts, partition.offsets),
            opts.include_filtered,
        )
        decoder, frames = protobuf_decoder(opts), unframer(opts)
        for chunk in pull_chunks(opts, partition.offsets):
            batches.add(chunk)
            # What a task holds at once stays within the push consumer's per-queue cache limits (give or take
            # the one pull answer that crossed them, as the push consumer checks before it pulls).
            if (
                batches.rows >= opts.pull_threshold_for_queue
                or batches.bytes >= opts.pull_threshold_size_for_queue_bytes
            ):
                yield from _decoded(batches.flush(), decoder, frames)
        yield from _decoded(batches.flush(), decoder, frames)


def _decoded(
    batches: Iterator[pa.RecordBatch], decoder: BodyDecoder | None, frames: Unframer | None
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if decoder is not None:
            batch = with_decoded_bodies(batch, decoder)
        yield batch if frames is None else frames.columns(batch)


#: How many reads of this process have frozen what is alive (``_freeze``).
_freezes = 0


def _freeze() -> None:
    """Leave what this Python worker holds for good (PySpark, pyarrow, numpy, rocketlake: some 70,000 objects) out
    of every later garbage collection: PySpark's daemon runs a full ``gc.collect()`` after each task of a reused
    worker (``pyspark/daemon.py``), which walked them all again at every task. ``gc.freeze`` moves the objects
    alive now to the permanent generation, as CPython advises for processes that fork workers; what a task makes
    afterwards is collected as before. At a process's first read, then at its second: the first task imports the
    read path's own modules and opens the client's pools (some 30,000 objects more, 5-10 ms of every later
    collection), and the daemon's collection after it has taken that task's garbage, so what the second read finds
    alive is the process's to keep (a task's objects made later stay collectable). Measured in Spark (500,000 x 1 KiB,
    16 queues), the first freeze: the Python workers' CPU 2.1-2.2 -> 1.8 s with pulls of 1024, 3.7-4.0 -> 3.4-3.5 s
    with pulls of 32; the second, in a stream of 75,000 a micro-batch (213 tasks a million): 6.5-7.6 -> 4.4-5.0 s a
    million with pulls of 1024."""
    global _freezes
    if _freezes < 2:
        gc.freeze()
        _freezes += 1


class _TaskBatches:
    """A task's pull answers until the next flush: indexed records go to Arrow in one step
    (:func:`record_batch`); decoded messages, and records it declines, row by row."""

    def __init__(
        self,
        schema: pa.Schema,
        broker_name: str,
        window_start_ms: int | None,
        subscription: Subscription,
        include_filtered: bool,
    ):
        self.schema = schema
        self.broker_name = broker_name
        self.window_us = None if window_start_ms is None else window_start_ms * 1000
        self.subscription = subscription
        self.include_filtered = include_filtered
        self.rows_builder = _BatchBuilder(schema, broker_name, window_start_ms)
        self.records: list[RawRecords] = []
        self.rows = 0
        self.bytes = 0

    def add(self, chunk: list[Message] | RawRecords) -> None:
        if isinstance(chunk, RawRecords):
            self.records.append(chunk)
            self.rows += len(chunk)
            self.bytes += chunk.nbytes
        else:
            self._add_messages(chunk)
            self.rows, self.bytes = self.rows_builder.rows, self.rows_builder.bytes + self._records_bytes()

    def _records_bytes(self) -> int:
        return sum(r.nbytes for r in self.records)

    def _decoded(self, records: RawRecords) -> list[Message]:
        """The exact decoder on records the fast path declined; one that does not decode names the broker."""
        try:
            return records.messages()
        except ProtocolError as exc:
            raise ProtocolError(
                f"broker {self.broker_name} answered PULL_MESSAGE with a body that does not decode: {exc}",
                request_code=RequestCode.PULL_MESSAGE,
            ) from exc

    def _add_messages(self, messages: list[Message]) -> None:
        matches = self.subscription.matches
        for message in messages:
            matched = matches(message)
            if matched or self.include_filtered:
                self.rows_builder.add(message, matched)

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.records:
            records = RawRecords.concat(self.records)
            self.records = []
            batch = record_batch(
                records,
                self.schema,
                broker_name=self.broker_name,
                subscription=self.subscription,
                include_filtered=self.include_filtered,
                window_start_us=self.window_us,
            )
            if batch is None:
                self._add_messages(self._decoded(records))
            elif batch.num_rows:
                yield batch
        if self.rows_builder.rows:
            yield self.rows_builder.flush()
        self.rows = self.bytes = 0


def batch_of(messages: list[Message], schema: pa.Schema, broker_name: str) -> pa.RecordBatch:
    """``messages`` as the source's columns, by the exact decoder's path (a member's direct consume)."""
    builder = _BatchBuilder(schema, broker_name, None)
    for m in messages:
        builder.add(m, True)
    return builder.flush()


class _BatchBuilder:
    """Columns accumulated as Python lists, turned into one Arrow batch per flush."""

    def __init__(self, schema: pa.Schema, broker_name: str, window_start_ms: int | None):
        self.schema = schema
        self.broker_name = broker_name  # not in the stored record: the broker we pulled from
        self.window_us = None if window_start_ms is None else window_start_ms * 1000
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in self.schema.names}
        self.getters = [(self.columns[name], self._getter(name)) for name in self.schema.names]
        self.rows = 0
        self.bytes = 0

    def add(self, m: Message, matched: bool) -> None:
        for column, value_of in self.getters:
            column.append(value_of(m, matched))
        self.rows += 1
        self.bytes += len(m.body) + 200

    def _getter(self, name: str):
        """How the column ``name`` is read off a message: as :func:`record_batch` gives it."""
        special = {
            "broker_name": lambda m, _: self.broker_name,
            "keys": lambda m, _: " ".join(m.keys) if m.keys else None,
            "properties": lambda m, _: list(m.properties.items()),
            "born_timestamp": lambda m, _: m.born_timestamp * 1000,
            "store_timestamp": lambda m, _: m.store_timestamp * 1000,
            "origin_topic": lambda m, _: origin_topic(m.topic, m.properties.get(PROPERTY_RETRY_TOPIC)),
            "origin_msg_id": lambda m, _: origin_msg_id(
                m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID),
                m.offset_msg_id,
            ),
            "origin_offset_msg_id": lambda m, _: origin_offset_msg_id(
                m.topic, m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID), m.offset_msg_id
            ),
            "body_text": lambda m, _: m.body.decode("utf-8", errors="replace"),
            "message_group": lambda m, _: m.properties.get(PROPERTY_SHARDING_KEY),
            "matched": lambda m, matched: matched,
            "window_start": lambda m, _: self.window_us,
        }
        return special.get(name) or (lambda m, _: getattr(m, name))

    def flush(self) -> pa.RecordBatch:
        arrays = [pa.array(self.columns[f.name], type=f.type) for f in self.schema]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch
