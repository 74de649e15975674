"""The Spark side of a run (``ingest.Lake``): exact ranges in, one Delta commit out, every offset accounted.

1. Read: one Spark job over all ranges of the ledger entry; the source returns a row per offset with
   the tag verdict. An ``Observation`` counts offsets seen and filtered per window in the same pass.
2. Write: the matched rows, with decoded body columns, replace exactly (windows x queues) in one
   commit that also carries the ledger entry.
3. Account: rows now in the table (read back) + filtered must equal the planned sizes.

Nothing here touches the consumer group's offsets (see ``pipelines.ingest``).
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from rocketlake.pipelines.body import decode_body
from rocketlake.pipelines.config import IngestionConfig
from rocketlake.pipelines.delta_writer import (
    closed_days,
    compact_days,
    last_commit_version,
    read_ledger,
    slice_predicate,
    write_slice,
)
from rocketlake.pipelines.failpoints import failpoint
from rocketlake.pipelines.ingest import Landing, Log, WindowAccounting
from rocketlake.pipelines.ledger import LedgerEntry, WindowEntry
from rocketlake.pipelines.options import encode_plan
from rocketlake.pipelines.source import register
from rocketlake.resources.rocketmq.message_queue import MessageQueue

MIB = 1024 * 1024


class SparkLake:
    """The table at ``table_path``, read and written with Spark and Delta."""

    def __init__(self, spark: SparkSession, source_options: dict[str, str], cfg: IngestionConfig, table_path: str):
        self.spark = spark
        self.source_options = source_options
        self.cfg = cfg
        self.table_path = table_path

    def table_version(self) -> int | None:
        return last_commit_version(self.spark, self.table_path)

    def ledger(self, group: str) -> list[LedgerEntry]:
        return read_ledger(self.spark, self.table_path, group)

    def land(self, entry: LedgerEntry, queue_count: int, log: Log) -> Landing:
        return land_entry(self.spark, self.source_options, self.cfg, self.table_path, entry, queue_count, log)

    def compact(self, entry: LedgerEntry, closed_before_ms: int) -> list[tuple[str, int, int]]:
        """OPTIMIZE the days of ``entry``'s windows that are over: ``(day, files removed, files added)``."""
        return compact_days(self.spark, self.table_path, closed_days((w.start_ms for w in entry.windows), closed_before_ms))


def read_plan(spark: SparkSession, source_options: dict[str, str], cfg: IngestionConfig,
              windows: tuple[WindowEntry, ...], queue_count: int) -> DataFrame:
    register(spark)
    plan = encode_plan((r, w.start_ms) for w in windows for r in w.ranges if r.size > 0)
    max_messages, max_bytes = cfg.per_queue_limits(queue_count)
    return (spark.read.format("rocketmq").options(**source_options)
            .option("topic", cfg.topic).option("subscription", cfg.subscription)
            .option("plan", plan).option("includeFiltered", "true")
            .option("pullBatchSize", cfg.pull_batch_size).option("pullThresholdForQueue", max_messages)
            .option("pullThresholdSizeForQueue", max(1, max_bytes // MIB))
            .option("maxMessagesPerPartition", cfg.max_messages_per_task)
            .option("consumerGroup", cfg.consumer_group)
            .load())


def land_entry(spark: SparkSession, source_options: dict[str, str], cfg: IngestionConfig, table_path: str,
               entry: LedgerEntry, queue_count: int, log: Log) -> Landing:
    planned = entry.windows
    run_id = entry.run_id
    tasks = sum(-(-r.size // cfg.max_messages_per_task) for w in planned for r in w.ranges)
    log(f"Spark job: {tasks} tasks (at most {cfg.max_messages_per_task} offsets each) read the ranges and replace "
        f"{len(planned)} window(s) x {queue_count} queue(s) of {table_path} in one Delta commit")

    df = read_plan(spark, source_options, cfg, planned, queue_count)
    observation = Observation(f"rocketlake-{run_id}")
    metrics = []
    for i, w in enumerate(planned):
        in_window = F.col("window_start") == F.timestamp_millis(F.lit(w.start_ms))
        metrics += [F.count_if(in_window).alias(f"seen_{i}"), F.count_if(in_window & ~F.col("matched")).alias(f"filtered_{i}"),
                    F.coalesce(F.sum(F.when(in_window & F.col("matched"), F.length("body"))), F.lit(0)).alias(f"landed_bytes_{i}")]
    metrics.append(F.coalesce(F.sum(F.length("body")), F.lit(0)).alias("bytes"))
    observed = df.observe(observation, *metrics)
    landed = decode_body(observed.where("matched").drop("matched"), cfg.body.format, cfg.body.schema_)
    write_slice(landed, table_path, entry, log)
    failpoint("after_delta_commit")
    version = last_commit_version(spark, table_path)
    log(f"Delta commit version {version} of {table_path} holds the slice and its ledger")
    observed_metrics = observation.get

    rows = _rows_in_slice(spark, table_path, planned)
    accounting = tuple(
        WindowAccounting(
            partition_key=w.partition_key,
            planned=sum(r.size for r in w.ranges),
            seen=observed_metrics[f"seen_{i}"],
            rows=sum(n for (start_ms, _), n in rows.items() if start_ms == w.start_ms),
            filtered=observed_metrics[f"filtered_{i}"],
            body_bytes=int(observed_metrics[f"landed_bytes_{i}"]),
        )
        for i, w in enumerate(planned))
    by_queue: dict[MessageQueue, int] = defaultdict(int)
    for (_, mq), n in rows.items():
        by_queue[mq] += n
    return Landing(accounting, dict(by_queue), int(observed_metrics["bytes"]), version)


def _rows_in_slice(spark: SparkSession, table_path: str, windows: tuple[WindowEntry, ...]) -> dict[tuple[int, MessageQueue], int]:
    """(window start ms, queue) -> rows now in the table, read back from Delta."""
    queues = {r.queue for w in windows for r in w.ranges}
    if not queues:
        return {}
    counted = (spark.read.format("delta").load(table_path)
               .where(slice_predicate((w.start_ms for w in windows), queues))
               .groupBy((F.unix_millis("window_start")).alias("w"), "topic", "broker_name", "queue_id").count()
               .collect())
    return {(row["w"], MessageQueue(row["topic"], row["broker_name"], row["queue_id"])): row["count"] for row in counted}
