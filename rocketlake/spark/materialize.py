"""The Spark side of a run (``ingest.Lake``): exact ranges in, one Delta commit out, every offset accounted.

1. Read: one Spark job over all ranges of the ledger entry; the source returns a row per offset with
   the tag verdict. An ``Observation`` counts offsets seen and filtered per window in the same pass.
2. Write: the matched rows, with decoded body columns, replace exactly (windows x queues) in one
   commit that also carries the ledger entry.
3. Account: rows now in the table (read back) + filtered must equal the planned sizes.

Nothing here touches the consumer group's offsets (see ``engine.ingest``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from rocketlake.delta import catalog
from rocketlake.delta.delta_rs import landed_rows, slice_counts
from rocketlake.delta.evolution import evolve, type_ddl, widened
from rocketlake.delta.file_stats import may_hold_windows
from rocketlake.delta.ledger_commit import commit_ledger_alone
from rocketlake.delta.ledger_log import read_ledger, table_version
from rocketlake.delta.storage import LOG_STORE_S3A, on_s3, several_writers_refusal
from rocketlake.delta.writer import (
    DAY_COLUMN,
    HOUR_COLUMN,
    Layout,
    clauses_predicate,
    closed_days,
    commit_ledger,
    compact_days,
    is_delta_table,
    slice_clauses,
    slice_predicate,
    table_fields,
    table_properties,
    vacuum,
    write_slice,
)
from rocketlake.engine import accounting
from rocketlake.engine.accounting import DUPLICATES, FILTERED, ROWS, Tally, account
from rocketlake.engine.columns import landed_metadata, read_metadata
from rocketlake.engine.config import IngestionConfig, MessageModel
from rocketlake.engine.failures import (
    DEAD_LETTERED,
    FAILED,
    SENT_BACK,
    FailedContent,
    FailedMessage,
    failures_table,
)
from rocketlake.engine.ingest import LandingReport, Log, WindowAccounting
from rocketlake.engine.ledger import LedgerEntry, Suspension, WindowEntry
from rocketlake.engine.listener import error_in_worker
from rocketlake.engine.options import encode_plan
from rocketlake.engine.traces import Consumed
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.spark.body import configured_schema
from rocketlake.spark.consume import (
    DUPLICATE,
    ERROR,
    HELD,
    HELPERS,
    ORIGIN_ID,
    decode_checked,
    is_copy,
    is_copy_topic,
    listen,
    listen_orderly,
    mark_known,
    with_last_error,
)
from rocketlake.spark.deadline import SparkDeadline
from rocketlake.spark.source import register

MIB = 1024 * 1024
#: Below this many planned offsets a landing's Spark jobs run interpreted. Spark compiles a class for each expression
#: and stage, and a window's classes are new in every run (they inline its timestamps as literals): for a window of a
#: few messages the compiling is most of the run's CPU on the server, for a backlog it is paid back many times.
INTERPRETED_BELOW = 50_000
#: Spark's defaults, and what runs its expressions interpreted: a value the session already has otherwise (the
#: user's ``spark.conf``) is left as it is.
CODEGEN = {
    "spark.sql.codegen.wholeStage": ("true", "false"),
    "spark.sql.codegen.factoryMode": ("FALLBACK", "NO_CODEGEN"),
}
OUTCOME = "_rl_outcome"
#: what becomes of compaction or VACUUM stopped at the deadline: the landing and its offsets are done by then
MAINTENANCE = "The windows and their offsets were committed before; the table keeps its files as they were."
SUSPENDED = "suspended"  # failures table: the message an orderly queue is suspended at


class LazySession:
    """A Spark session opened on first use (``SparkLake``): a quiet window's run commits its ledger entries with
    delta-rs and reads the table's columns from its log, and never needs one."""

    def __init__(self, open_session: Callable[[], SparkSession]):
        self.open_session = open_session


class SparkLake:
    """The table at ``table_path``, read and written with Spark and Delta."""

    def __init__(
        self,
        spark: SparkSession | LazySession,
        source_options: dict[str, str],
        cfg: IngestionConfig,
        table_path: str,
        failures_path: str | None = None,
        *,
        last_errors_from: str | None = None,
        storage_options: dict[str, str] | None = None,
    ):
        self._spark = spark
        self.storage_options = storage_options  # delta-rs's, for the ledger (``delta.storage``)
        self.source_options = source_options
        self.cfg = cfg
        self.table_path = table_path
        self.failures_path = failures_path  # where failed messages are kept (``engine.failures``)
        self.last_errors_from = last_errors_from  # dead letters: the failures table their last errors are in
        self.deadline = SparkDeadline(lambda: self.spark, cfg.run_timeout_seconds)  # counted from the step's start

    @property
    def spark(self) -> SparkSession:
        if isinstance(self._spark, LazySession):
            self._spark = self._spark.open_session()
        return self._spark

    def table_version(self) -> int | None:
        return table_version(self.table_path, self.storage_options)

    def writers_refusal(self, members: tuple[str, ...]) -> str | None:
        if len(members) < 2 or not on_s3(self.table_path):
            return None  # one writer, or a file system whose log store is safe with several: no session needed
        return several_writers_refusal(self.table_path, members, self.spark.conf.get(LOG_STORE_S3A, None))

    def ledger(self, group: str) -> list[LedgerEntry]:
        return read_ledger(self.table_path, group, self.storage_options)

    def land(self, entry: LedgerEntry, queue_count: int, log: Log, *, again: bool = False) -> LandingReport:
        if not entry.queues:
            # No queue at all (a dead-letter queue the broker has not created yet): nothing to read, nothing at
            # stake, no commit to make; the table appears with the first dead letter.
            log(
                f"no queue of {self.cfg.topic_label} to read in these windows (none exists yet, or every one waits): "
                "nothing to land"
            )
            return LandingReport(
                tuple(WindowAccounting(w.partition_key, 0, 0, 0, 0) for w in entry.windows), None, rows_changed=False
            )
        if self.cfg.catalog_table is None and quiet_landing(self.cfg, self.table_path, entry, self.storage_options):
            # No offset to read and no row of these windows anywhere in the table: the slice is empty before and
            # after, so the ledger entry is the whole landing. A Spark read, a slice write and its read-back would
            # cost the server a few CPU-seconds a window to change nothing (benchmarks/README.md, the fixed cost of
            # a window); committed with delta-rs, the run opens no Spark session at all.
            if not commit_ledger_alone(self.table_path, entry, self.storage_options):
                commit_ledger(self.spark, self.table_path, entry)
            version = self.table_version()
            log(
                f"no offset to read in {len(entry.windows)} window(s): Delta commit version {version} of "
                f"{self.table_path} holds the ledger entry alone"
            )
            return LandingReport(account(entry.windows, {}, Tally()), version, (), entry, None, rows_changed=False)
        with self.deadline.watch("landing its windows"):
            named = self._catalog_names()
            try:
                report = land_entry(
                    self.spark,
                    self.source_options,
                    self.cfg,
                    self.table_path,
                    entry,
                    queue_count,
                    log,
                    self.failures_path,
                    self.last_errors_from,
                    again=again,
                    storage_options=self.storage_options,
                )
            except Exception as e:
                said = error_in_worker(e)  # the worker's sentence, not Spark's stack of the job
                if said is None:
                    raise
                raise said from None
            for name, path in named:
                if is_delta_table(self.spark, path):
                    catalog.register(self.spark, name, path)
            return report

    def _catalog_names(self) -> list[tuple[str, str]]:
        """For a catalog table: the (name, path) of this landing's tables the catalog does not name yet, refusing
        (``CatalogConflict``) before anything is written when it names one of them elsewhere."""
        name = self.cfg.catalog_table
        if name is None:
            return []
        tables = [(name, self.table_path)]
        if self.failures_path is not None:
            tables.append((failures_table(name), self.failures_path))
        return [(n, p) for n, p in tables if not catalog.check_catalog(self.spark, n, p)]

    def landed_messages(self, entry: LedgerEntry, most: int) -> list[Consumed]:
        """Up to ``most`` of the messages ``entry`` landed (their ids, keys and reconsume counts), evenly spread over
        the offsets when it landed more: what consume traces name (``engine.traces``)."""
        planned = sum(r.size for w in entry.windows for r in w.ranges)
        predicate = slice_predicate(entry.windows)
        if not planned or predicate == "false" or self.table_version() is None:
            return []
        every = -(-planned // most)  # every n-th offset: a spread the files' statistics cannot skip, but cheap
        ranges = [r for w in entry.windows for r in w.ranges if r.size]
        rows = landed_rows(self.table_path, ranges, TRACED, self.storage_options)
        if rows is not None:  # delta-rs read the window's files here: no Spark job after the landing
            offsets = rows["queue_offset"].to_numpy()
            return _consumed(rows.take(np.flatnonzero(offsets % every == 0)[:most]).to_pylist())
        df = self.spark.read.format("delta").load(self.table_path).where(predicate)
        if every > 1:
            df = df.where(F.col("queue_offset") % every == 0)
        picked = df.select(*(c for c in TRACED if c in df.columns)).limit(most).collect()
        return _consumed([r.asDict() for r in picked])

    def record_verdict(self, verdict: LedgerEntry) -> None:
        # Not under the deadline: by now the landing and its send-back are done, and refusing this one small commit
        # would only make the next run land the window and send its failures back again. A commit that hangs is
        # ended by Dagster's run monitoring (dagster/max_runtime).
        if not commit_ledger_alone(self.table_path, verdict, self.storage_options):
            commit_ledger(self.spark, self.table_path, verdict)

    def columns(self) -> list[tuple[str, str, bool]]:
        """The table's columns as Spark types them, read from its log's schema (Spark's own JSON form) by delta-rs."""
        import json

        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
        from pyspark.sql.types import StructType

        try:
            logged = DeltaTable(self.table_path, storage_options=self.storage_options).schema().to_json()
        except TableNotFoundError:
            return []  # none landed yet (a dead-letter queue not created yet)
        return [(f.name, f.dataType.simpleString(), f.nullable) for f in StructType.fromJson(json.loads(logged)).fields]

    def compact(self, entry: LedgerEntry, closed_before_ms: int) -> list[tuple[str, int, int]]:
        """OPTIMIZE the days of ``entry``'s windows that are over: ``(day, files removed, files added)``."""
        if not closed_days((w.start_ms for w in entry.windows), closed_before_ms):
            return []  # no day over: nothing to ask Spark
        if not is_delta_table(self.spark, self.table_path):
            return []
        with self.deadline.watch("compacting", MAINTENANCE):
            return compact_days(
                self.spark,
                self.table_path,
                closed_days((w.start_ms for w in entry.windows), closed_before_ms),
                self.cfg.layout.zorder_by,
            )

    def vacuum(self) -> int | None:
        """VACUUM with the ingestion's ``vacuum_retention_hours``: the retention applied, or None when it has none."""
        hours = self.cfg.vacuum_retention_hours  # called after a compaction: the table exists
        if hours is None:
            return None
        with self.deadline.watch("vacuuming", MAINTENANCE):
            vacuum(self.spark, self.table_path, hours)
        return hours


def layout_of(cfg: IngestionConfig) -> Layout:
    layout = cfg.layout
    return Layout(tuple(layout.partition_by), tuple(layout.cluster_by), tuple(layout.zorder_by))


def read_plan(
    spark: SparkSession,
    source_options: dict[str, str],
    cfg: IngestionConfig,
    windows: tuple[WindowEntry, ...],
    queue_count: int,
    metadata: tuple[str, ...] = (),
) -> DataFrame:
    register(spark)
    plan = encode_plan((r, w.start_ms) for w in windows for r in w.ranges if r.size > 0)
    max_messages, max_bytes = cfg.per_queue_limits(queue_count)
    return (
        spark.read.format("rocketmq")
        .options(**source_options)
        .option("topic", cfg.topic or min(r.queue.topic for w in windows for r in w.ranges))
        .option("subscription", cfg.subscription)
        .option("plan", plan)
        .option("includeFiltered", "true")
        .option("pullBatchSize", cfg.pull_batch_size)
        .option("pullThresholdForQueue", max_messages)
        .option("pullThresholdSizeForQueue", max(1, max_bytes // MIB))
        .option("maxMessagesPerPartition", cfg.max_messages_per_task)
        .option("consumerGroup", cfg.consumer_group)
        .option("metadataColumns", ",".join(metadata))
        .options(**body_options(cfg))
        .load()
    )


def body_options(cfg: IngestionConfig) -> dict[str, str]:
    """The reader's options for what it does to bodies: decode Protobuf (its message, its descriptor set as bytes: a
    Spark Connect server elsewhere has no file of the project's), check and remove a registry's frames."""
    if cfg.body.format != "protobuf":
        if cfg.body.framing == "none":
            return {}
        from rocketlake.engine.avro import fingerprint

        what = "json" if cfg.body.format == "json" else f"avro:{fingerprint(cfg.body.avro_schema()).hex()}"
        return {**cfg.body.registry_options(), "framedSchema": what}
    return {
        "bodyFormat": "protobuf",
        "protobufDescriptorSet": base64.b64encode(cfg.body.protobuf_descriptor_set()).decode("ascii"),
        "protobufMessageName": cfg.body.message_name,
        **cfg.body.registry_options(),
    }


@contextmanager
def interpreted_when_small(spark: SparkSession, offsets: int) -> Iterator[bool]:
    """Spark's code generation off for the session while ``offsets`` is below ``INTERPRETED_BELOW``, then back."""
    changed = []
    if offsets < INTERPRETED_BELOW:
        for key, (default, interpreted) in CODEGEN.items():
            if spark.conf.get(key) == default:
                spark.conf.set(key, interpreted)
                changed.append(key)
    try:
        yield bool(changed)
    finally:
        for key in changed:
            spark.conf.unset(key)


#: What a consume trace names of a landed message (``engine.traces.Consumed``); reconsume_times where landed.
TRACED = ("msg_id", "keys", "reconsume_times")


def _consumed(rows: list[dict]) -> list[Consumed]:
    return [Consumed(r["msg_id"], r["keys"] or "", r.get("reconsume_times") or 0) for r in rows]


def land_entry(
    spark: SparkSession,
    source_options: dict[str, str],
    cfg: IngestionConfig,
    table_path: str,
    entry: LedgerEntry,
    queue_count: int,
    log: Log,
    failures_path: str | None = None,
    last_errors_from: str | None = None,
    again: bool = False,
    storage_options: dict[str, str] | None = None,
) -> LandingReport:
    planned = entry.windows
    offsets = sum(r.size for w in planned for r in w.ranges)
    with interpreted_when_small(spark, offsets):
        tasks = sum(-(-r.size // cfg.max_messages_per_task) for w in planned for r in w.ranges)
        log(
            f"Spark job: {tasks} tasks (at most {cfg.max_messages_per_task} offsets each) read the ranges and replace "
            f"{len(planned)} window(s) x {queue_count} queue(s) of {table_path} in one Delta commit"
        )
        fields = table_fields(spark, table_path)
        landed = landed_metadata(cfg, [f.name for f in fields])
        read = read_metadata(cfg, landed)
        df = read_plan(spark, source_options, cfg, planned, queue_count, read)
        if last_errors_from is not None:
            df = with_last_error(df, last_errors_from)
        # Dead letters never fail, but one message can reach %DLQ%<group> twice (a re-run after its send-back, a step
        # retry): the judged landing finds the later copy by the stored original, as it finds redelivered ones.
        if cfg.can_fail or cfg.dead_letters_of is not None:
            tally, failed, entry, contents = _land_judged(
                spark,
                df,
                cfg,
                table_path,
                entry,
                log,
                failures_path,
                not_landed=tuple(c for c in read if c not in landed),
                fields=fields,
                again=again,
                storage_options=storage_options,
            )
        else:
            tally, failed, contents = _land_all(df, table_path, entry, log, cfg), (), None
        version = table_version(table_path, storage_options)  # delta-rs, as the ledger is read (``storage_options``)
        log(f"Delta commit version {version} of {table_path} holds the slice and its ledger")

        accounting = account(
            planned, _rows_in_slice(spark, table_path, planned, version, offsets, storage_options), tally
        )
        return LandingReport(accounting, version, failed, entry, contents)


def quiet_landing(
    cfg: IngestionConfig,
    table_path: str,
    entry: LedgerEntry,
    storage_options: dict[str, str] | None = None,
) -> bool:
    """Whether ``entry`` lands as its ledger commit alone: every range empty, no orderly suspension it could change,
    and a table whose files' statistics say none holds a row of its windows (``delta.file_stats``)."""
    if any(r.size for w in entry.windows for r in w.ranges) or (cfg.consume_orderly and entry.suspended):
        return False
    if table_version(table_path, storage_options) is None:
        return False  # the first landing creates the table, with the schema its rows would have
    return not may_hold_windows(table_path, (w.start_ms for w in entry.windows), storage_options)


def _land_all(df: DataFrame, table_path: str, entry: LedgerEntry, log: Log, cfg: IngestionConfig) -> Tally:
    """Every matched message is a row (no listener, a body that cannot fail): one pass, counted on the way."""
    observation = Observation(f"rocketlake-{entry.run_id}")
    metrics = []
    for w in entry.windows:
        in_window = F.col("window_start") == F.timestamp_millis(F.lit(w.start_ms))
        metrics += [
            F.count_if(in_window).alias(f"seen_{w.start_ms}"),
            F.count_if(in_window & ~F.col("matched")).alias(f"filtered_{w.start_ms}"),
            F.coalesce(F.sum(F.when(in_window & F.col("matched"), F.length("body"))), F.lit(0)).alias(
                f"landed_bytes_{w.start_ms}"
            ),
        ]
    observed = df.observe(observation, *metrics) if metrics else df
    write_slice(
        observed.where("matched").drop("matched"),
        table_path,
        entry,
        log,
        properties=cfg.table_properties,
        layout=layout_of(cfg),
    )
    got = observation.get if metrics else {}
    if any(f"seen_{w.start_ms}" not in got for w in entry.windows):
        # PySpark 4.0's Spark Connect client returns no observed metrics for a write (4.2's does): count them in a
        # pass of their own over the same bounded ranges, which hold the same messages.
        got = df.agg(*metrics).collect()[0].asDict()
    tally = Tally()
    for w in entry.windows:
        filtered = got[f"filtered_{w.start_ms}"]
        tally.add(w.start_ms, FILTERED, filtered)
        tally.add(w.start_ms, ROWS, got[f"seen_{w.start_ms}"] - filtered)
        tally.landed_bytes[w.start_ms] += got[f"landed_bytes_{w.start_ms}"]
    return tally


def _land_judged(
    spark: SparkSession,
    df: DataFrame,
    cfg: IngestionConfig,
    table_path: str,
    entry: LedgerEntry,
    log: Log,
    failures_path: str | None,
    not_landed: tuple[str, ...] = (),
    fields=(),
    again: bool = False,
    storage_options: dict[str, str] | None = None,
) -> tuple[Tally, tuple[FailedMessage, ...], LedgerEntry, Callable[[str], dict] | None]:
    """Messages that may fail (a listener, a body that may not decode), or dead letters (copies of one message may
    arrive twice): judged once, then split.

    The verdicts are computed in one pass and kept (``localCheckpoint``): a listener is called once per
    message per run, and the rows written, the failures sent back and the counts all come from the same
    verdicts. A redelivered copy whose original is landed already is a duplicate, neither landed nor sent back.
    The failures' bodies stay where the verdicts are: the driver reads a broker's only if that broker does not take
    their send-back (``LandingReport.contents``).

    The counts are the one Spark query a landing without failures makes before its write: the failures are
    collected, the suspensions looked for and the failures table written only when the counts or the ledger say
    there is something to find or to replace (each is a round trip to the server, a Delta commit for the last).
    """
    clustering = cfg.message_model is MessageModel.CLUSTERING
    max_times = cfg.effective_max_reconsume_times
    queues = entry.queues
    replaced = slice_predicate(entry.windows)
    # Copies are looked for when this run reads a copy topic (%RETRY%<group>, %DLQ%<group>), or lands offsets a run
    # landed before (``again``: a backfill, a catch-up or rebalance run narrowed to main-topic queues), whose
    # failures may have come back and landed since. The look reads the table's last days, which a first landing of
    # main-topic offsets does not pay: none of its messages was ever sent back.
    with_copies = again or any(is_copy_topic(mq.topic) for mq in queues)
    # Only matched rows keep their body: filtered ones are counted, nothing more.
    df = df.withColumn("body", F.when(F.col("matched"), F.col("body")))
    schema = None
    if cfg.body.evolve != "none":
        # Read once: the schema's inference and the landing must see the very same messages.
        df = df.localCheckpoint(eager=True)
        schema = _evolved_schema(df, cfg, fields, log, table_path)
    judged = decode_checked(df, cfg.body, schema)
    earliest = min((w.start_ms for w in entry.windows), default=0)
    judged = mark_known(
        judged,
        table_path if with_copies and table_version(table_path, storage_options) is not None else None,
        replaced,
        earliest,
    )
    reading = {r.queue for w in entry.windows for r in w.ranges if r.size}
    if cfg.consume_orderly:
        prior = {mq.key: (s.offset, s.attempts) for mq, s in entry.suspended.items() if mq in reading}
        judged = listen_orderly(judged, cfg, prior, len(reading))
    else:
        if cfg.listener is not None:
            judged = listen(judged, cfg)
        judged = judged.withColumn(HELD, F.lit(False))
    judged = judged.localCheckpoint(eager=True)
    consumed = F.col("matched") & F.col(ERROR).isNull()
    if with_copies:
        # Two copies of one message consumed in one run (its original and a redelivered copy, or two copies sent
        # back by two attempts of a window, or dead-lettered twice): the first by window, main topic before a copy's
        # topic, offset, lands.
        fresh = consumed & ~F.col(DUPLICATE)
        first = Window.partitionBy(ORIGIN_ID, fresh).orderBy(
            "window_start", is_copy(F.col("topic")), "topic", "broker_name", "queue_id", "queue_offset"
        )
        rank = F.when(fresh, F.row_number().over(first))
        # Only a redelivered copy can be a duplicate: two main-topic messages are two offsets, landed both.
        later_copy = is_copy(F.col("topic")) & F.coalesce(rank > 1, F.lit(False))
        judged = judged.withColumn(DUPLICATE, F.col(DUPLICATE) | later_copy)
    outcome = (
        F.when(~F.col("matched"), F.lit(FILTERED))
        .when(F.col(HELD), F.lit(accounting.HELD))  # the outcome; HELD alone is the judged column
        .when(F.col(ERROR).isNull() & F.col(DUPLICATE), F.lit(DUPLICATES))
        .when(F.col(ERROR).isNull(), F.lit(ROWS))
        .when(F.lit(not clustering), F.lit(FAILED))
        .when(F.lit(cfg.consume_orderly), F.lit(DEAD_LETTERED))
        .when(F.col("reconsume_times") >= max_times, F.lit(DEAD_LETTERED))
        .otherwise(F.lit(SENT_BACK))
    )
    judged = judged.withColumn(OUTCOME, outcome)
    tally = Tally()
    for row in (
        judged.groupBy(F.unix_millis("window_start").alias("w"), "topic", "broker_name", "queue_id", OUTCOME)
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("body")).alias("landed_bytes"))
        .collect()
    ):
        queue = MessageQueue(row["topic"], row["broker_name"], row["queue_id"])
        tally.add(row["w"], row[OUTCOME], row["n"], queue)
        if row[OUTCOME] == ROWS:
            tally.landed_bytes[row["w"]] += row["landed_bytes"] or 0
    outcomes = {outcome for counts in tally.by_window.values() for outcome, n in counts.items() if n}

    if cfg.consume_orderly or entry.suspended:  # only an orderly landing holds messages back (``HELD``)
        entry = with_suspensions(entry, judged, reading, cfg.suspend_current_queue_time_millis, log)
    stopped = F.col(OUTCOME).isin(SENT_BACK, DEAD_LETTERED, FAILED) | (F.col(HELD) & F.col(ERROR).isNotNull())
    failed_rows = judged.where(stopped).withColumn(
        OUTCOME, F.when(F.col(HELD), F.lit(SUSPENDED)).otherwise(F.col(OUTCOME))
    )
    # Only a message that can fail is ever a failure (dead letters are not: nor do they read send-back columns).
    failures = (
        ()
        if not cfg.can_fail or not outcomes & {SENT_BACK, DEAD_LETTERED, FAILED, accounting.HELD}
        else tuple(
            FailedMessage(
                MessageQueue(r["topic"], r["broker_name"], r["queue_id"]),
                r["queue_offset"],
                r["offset_msg_id"],
                r["msg_id"],
                r["origin_topic"],
                r["reconsume_times"],
                r[OUTCOME],
                r[ERROR],
            )
            for r in failed_rows.select(
                "topic",
                "broker_name",
                "queue_id",
                "queue_offset",
                "offset_msg_id",
                "msg_id",
                "origin_topic",
                "reconsume_times",
                OUTCOME,
                ERROR,
            )
            .orderBy("topic", "broker_name", "queue_id", "queue_offset")
            .collect()
        )
    )
    # A landing with no failure writes the failures table only to replace what an earlier landing of its windows
    # kept there: if no file of the table may hold a row of them (its statistics, read with delta-rs), replacing
    # its slice would change nothing, and is not worth a Delta commit a window.
    if failures_path is not None and (
        failures or may_hold_windows(failures_path, (w.start_ms for w in entry.windows), storage_options)
    ):
        kept = failed_rows.select(*[c for c in failed_rows.columns if c not in (DUPLICATE, HELD, "matched")])
        kept = (
            kept.withColumnRenamed(ERROR, "error")
            .withColumnRenamed(OUTCOME, "outcome")
            .withColumn("run_id", F.lit(entry.run_id))
        )
        write_slice(kept, failures_path, entry, log, with_ledger=False)
        log(f"{len(failures)} failure(s) of this run are in {failures_path}")
    # The failures table keeps every column read (what a person needs to see why); the table, the columns landed.
    landed = judged.where(F.col(OUTCOME) == ROWS).drop(*HELPERS, OUTCOME, *not_landed)
    write_slice(landed, table_path, entry, log, properties=cfg.table_properties, layout=layout_of(cfg))
    sent_back = failed_rows.where(F.col(OUTCOME).isin(SENT_BACK, DEAD_LETTERED))

    def contents(broker_name: str) -> dict[tuple[MessageQueue, int], FailedContent]:
        columns = ["topic", "queue_id", "queue_offset", "body", "tags", "keys", ORIGIN_ID]
        with_properties = "properties" in failed_rows.columns
        rows = (
            sent_back.where(F.col("broker_name") == broker_name)
            .select(*columns, *(["properties"] if with_properties else []))
            .collect()
        )
        return {
            (MessageQueue(r["topic"], broker_name, r["queue_id"]), r["queue_offset"]): FailedContent(
                bytes(r["body"]),
                r["tags"],
                r["keys"],
                r[ORIGIN_ID],
                dict(r["properties"]) if with_properties and r["properties"] is not None else None,
            )
            for r in rows
        }

    return tally, tuple(f for f in failures if f.outcome != SUSPENDED), entry, contents if clustering else None


def _evolved_schema(df: DataFrame, cfg: IngestionConfig, fields, log: Log, table_path: str) -> StructType:
    """The JSON schema of an evolving table for this run (``delta.evolution``): its body columns, the
    configured fields, and the fields the bodies of ``df`` add; a column widened where the table allows it
    (``delta.enableTypeWidening``) and a body holds a value its type cannot (``_misfits``)."""
    bodies = df.where(F.col("body").isNotNull()).select(F.col("body").cast("string").alias("body"))
    found = evolve(bodies, configured_schema(cfg.body.schema_), fields, reserved=(DAY_COLUMN, HOUR_COLUMN))
    if found.added:
        log(
            f"schema evolution: new column(s) {', '.join(found.added)} from the bodies of this run, added by the "
            "commit that lands its windows"
        )
    if found.left_out:
        log(f"schema evolution: field(s) {', '.join(found.left_out)} not made columns; they stay in body")
    have = {f.name: f.dataType for f in fields}  # the table's columns: a configured field not yet one binds
    candidates = {name: (have[name], wide) for name, wide in found.wider.items() if name in have}
    if not candidates or not _type_widening_on(df.sparkSession, table_path, cfg):
        return found.schema
    widen = {name: candidates[name][1] for name, count in _misfits(bodies, candidates).items() if count}
    if widen:
        log(
            "schema evolution: column(s) "
            + ", ".join(f"{n} {type_ddl(have[n])} -> {type_ddl(t)}" for n, t in widen.items())
            + " widened by this run's commit (Delta's type widening): its bodies hold values the old type cannot"
        )
    return widened(found.schema, widen)


def _type_widening_on(spark: SparkSession, table_path: str, cfg: IngestionConfig) -> bool:
    """Whether the table may widen a column: ``delta.enableTypeWidening``, in the configuration's ``table_properties``
    (set before the slice's commit) or on the table already."""
    key = "delta.enableTypeWidening"
    return (cfg.table_properties.get(key) or table_properties(spark, table_path).get(key, "false")).lower() == "true"


def _misfits(bodies: DataFrame, columns: dict[str, tuple]) -> dict[str, int]:
    """For each top-level column (name -> (its type, the bodies' wider type)): the bodies whose value of it the
    column's type cannot hold but the wider type can (``try_cast`` of the JSON value's text). One pass."""
    counts = []
    for name, (narrow, wide) in columns.items():
        value = F.get_json_object("body", "$['" + name + "']")
        misfit = value.isNotNull() & value.try_cast(narrow).isNull() & value.try_cast(wide).isNotNull()
        counts.append(F.count_if(misfit).alias(name))
    return bodies.agg(*counts).first().asDict()


def with_suspensions(
    entry: LedgerEntry, judged: DataFrame, reading: set[MessageQueue], suspend_ms: int, log: Log
) -> LedgerEntry:
    """The entry to commit: the suspensions this landing found on the queues it read (the first held message of
    each, with its failed attempts counted on from the previous suspension at the same offset), and those of the
    queues it did not read (still waiting), unchanged."""
    import time

    first_held = (
        judged.where(F.col(HELD) & F.col(ERROR).isNotNull())
        .groupBy("topic", "broker_name", "queue_id")
        .agg(
            F.min_by(
                F.struct("queue_offset", "msg_id", ERROR, F.unix_millis("window_start").alias("w")), "queue_offset"
            ).alias("first")
        )
        .collect()
    )
    if not first_held and not entry.suspended:
        return entry
    windows = {w.start_ms: w for w in entry.windows}
    now_ms = int(time.time() * 1000)
    suspended = {mq: s for mq, s in entry.suspended.items() if mq not in reading}
    for row in first_held:
        mq, first = MessageQueue(row["topic"], row["broker_name"], row["queue_id"]), row["first"]
        before = entry.suspended.get(mq)
        attempts = (before.attempts if before is not None and before.offset == first["queue_offset"] else 0) + 1
        w = windows[first["w"]]
        suspended[mq] = Suspension(
            first["queue_offset"],
            attempts,
            now_ms + suspend_ms,
            w.partition_key,
            w.start_ms,
            w.end_ms,
            first["msg_id"],
            first[ERROR],
        )
        log(
            f"orderly: {mq.key} suspended at offset {first['queue_offset']} (attempt {attempts}: {first[ERROR]}); "
            f"its later messages wait, the next run after {suspend_ms} ms tries it again"
        )
    return replace(entry, suspended=suspended)


def _rows_in_slice(
    spark: SparkSession,
    table_path: str,
    windows: tuple[WindowEntry, ...],
    version: int | None,
    offsets: int,
    storage_options: dict[str, str] | None,
) -> dict[tuple[int, MessageQueue], int]:
    """(window start ms, queue) -> rows now in the table (at ``version``, None if there is none), read back from
    Delta: a landing of fewer than ``INTERPRETED_BELOW`` offsets counts them with delta-rs in the run's process
    (the files of its windows, a few rows: four round trips to the Spark server saved each window), a larger one or
    a table delta-rs does not read with Spark."""
    clauses = slice_clauses(windows)
    if not clauses or version is None:
        return {}
    if offsets < INTERPRETED_BELOW:
        counted = slice_counts(table_path, clauses, storage_options)
        if counted is not None:
            return counted
    counted = (
        spark.read.format("delta")
        .load(table_path)
        .where(clauses_predicate(clauses))
        .groupBy((F.unix_millis("window_start")).alias("w"), "topic", "broker_name", "queue_id")
        .count()
        .collect()
    )
    return {
        (row["w"], MessageQueue(row["topic"], row["broker_name"], row["queue_id"])): row["count"] for row in counted
    }
