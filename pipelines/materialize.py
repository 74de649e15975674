"""Materializing closed windows: exact ranges in, one Delta commit out, every offset accounted for.

1. Plan: for every window, ``R(q, W)`` on every readable queue of the subscription (the retry
   topic ``%RETRY%<group>`` included in CLUSTERING), optionally clipped at where the group starts.
2. Read: one Spark job over all chunks; the source returns a row per offset with the tag verdict.
   An ``Observation`` counts offsets seen and filtered per window in the same pass.
3. Write: the matched rows, with decoded body columns, replace exactly (windows x queues) in one
   commit that also carries the ledger.
4. Account: rows now in the table (read back) + filtered + failed must equal the planned sizes.

Nothing here touches the consumer group's offsets: committing them is a separate step that runs
only after the materialization is recorded (see ``pipelines.offsets``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from rocketlake.pipelines.body import decode_body
from rocketlake.pipelines.broker_access import BrokerStoreTimes
from rocketlake.pipelines.config import IngestionConfig, MessageModel
from rocketlake.pipelines.failpoints import failpoint
from rocketlake.pipelines.delta_writer import (
    LedgerEntry,
    RangeEntry,
    WindowEntry,
    last_commit_version,
    queue_key,
    slice_predicate,
    write_slice,
)
from rocketlake.pipelines.source import plan_option, register
from rocketlake.pipelines.windows import Window, window_ranges
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq.errors import TopicNotExist
from rocketlake.resources.rocketmq.message_queue import MessageQueue

MIB = 1024 * 1024


def _no_log(_: str) -> None:
    pass


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


@dataclass(frozen=True)
class WindowAccounting:
    partition_key: str
    planned: int   # sum of the window's range sizes
    seen: int      # offsets the reader returned
    rows: int      # rows of this window x these queues in the table after the commit
    filtered: int  # offsets the subscription's tags filtered out
    body_bytes: int = 0  # bytes of the message bodies of the rows landed (before any decoding)
    failed: int = 0

    @property
    def balanced(self) -> bool:
        return self.seen == self.planned and self.rows + self.filtered + self.failed == self.planned


@dataclass(frozen=True)
class Materialization:
    ledger: LedgerEntry
    accounting: tuple[WindowAccounting, ...]
    rows_by_queue: dict[str, int]
    bytes_read: int            # bytes of every message body read, filtered ones included
    delta_version: int | None  # the Delta commit that replaced the slice and carries the ledger


def subscribed_queues(client: RocketMQClient, cfg: IngestionConfig) -> list[MessageQueue]:
    """Readable queues of the topic, plus the group's retry topic in CLUSTERING when it exists."""
    queues = list(client.queues(cfg.topic))
    if cfg.message_model is MessageModel.CLUSTERING:
        try:
            queues += client.queues(retry_topic(cfg.consumer_group))
        except TopicNotExist:
            pass  # created by the broker on the first send-back; nothing to read until then
    return sorted(queues)


def plan_windows(client: RocketMQClient, consumer_group: str, queues: list[MessageQueue],
                 windows: list[tuple[str, Window]], starts: dict[MessageQueue, int] | None = None) -> tuple[WindowEntry, ...]:
    """Exact ranges per window; with ``starts``, a range begins no earlier than its queue's start."""
    times = BrokerStoreTimes(client, consumer_group)
    planned = []
    for key, window in sorted(windows, key=lambda kw: kw[1]):
        ranges = []
        for r in window_ranges(times, queues, window):
            mq: MessageQueue = r.queue
            start = max(r.start, starts[mq]) if starts and mq in starts else r.start
            ranges.append(RangeEntry(mq.topic, mq.broker_name, mq.queue_id, min(start, r.end), r.end))
        planned.append(WindowEntry(key, window.start_ms, window.end_ms, tuple(ranges)))
    return tuple(planned)


def read_plan(spark: SparkSession, source_options: dict[str, str], cfg: IngestionConfig,
              windows: tuple[WindowEntry, ...], queue_count: int) -> DataFrame:
    register(spark)
    chunks = [{"topic": r.topic, "broker_name": r.broker_name, "queue_id": r.queue_id, "start": r.start,
               "end": r.end, "window_start_ms": w.start_ms}
              for w in windows for r in w.ranges if r.size > 0]
    max_messages, max_bytes = cfg.per_queue_limits(queue_count)
    return (spark.read.format("rocketmq").options(**source_options)
            .option("topic", cfg.topic).option("subscription", cfg.subscription)
            .option("plan", plan_option(chunks)).option("includeFiltered", "true")
            .option("pullBatchSize", cfg.pull_batch_size).option("pullThresholdForQueue", max_messages)
            .option("pullThresholdSizeForQueue", max(1, max_bytes // MIB))
            .option("maxMessagesPerPartition", cfg.max_messages_per_task)
            .option("timeoutMs", cfg.mq_client_api_timeout).option("consumerGroup", cfg.consumer_group)
            .load())


def materialize(spark: SparkSession, client: RocketMQClient, source_options: dict[str, str], ingestion: str,
                cfg: IngestionConfig, table_path: str, windows: list[tuple[str, Window]], run_id: str, *,
                starts: dict[MessageQueue, int] | None = None, origin: dict[str, int] | None = None,
                gaps: dict[str, tuple[int, int]] | None = None, log: Callable[[str], None] = _no_log) -> Materialization:
    """``log`` hears what the run does, one line per step: the planned ranges, the Spark job, the Delta commit."""
    queues = subscribed_queues(client, cfg)
    planned = plan_windows(client, cfg.consumer_group, queues, windows, starts)
    ledger = LedgerEntry(ingestion, cfg.consumer_group, run_id, planned, origin or {}, gaps=gaps or {})
    for w in planned:
        log(f"window {w.partition_key}: {sum(r.size for r in w.ranges)} offsets planned: "
            + ", ".join(f"{r.broker_name}/{r.topic}/{r.queue_id} [{r.start}, {r.end})" for r in w.ranges))
    tasks = sum(-(-r.size // cfg.max_messages_per_task) for w in planned for r in w.ranges)
    log(f"Spark job: {tasks} tasks (at most {cfg.max_messages_per_task} offsets each) read the ranges and replace "
        f"{len(planned)} window(s) x {len(queues)} queue(s) of {table_path} in one Delta commit")

    df = read_plan(spark, source_options, cfg, planned, len(queues))
    observation = Observation(f"rocketlake-{run_id}")
    metrics = []
    for i, w in enumerate(planned):
        in_window = F.col("window_start") == F.timestamp_millis(F.lit(w.start_ms))
        metrics += [F.count_if(in_window).alias(f"seen_{i}"), F.count_if(in_window & ~F.col("matched")).alias(f"filtered_{i}"),
                    F.coalesce(F.sum(F.when(in_window & F.col("matched"), F.length("body"))), F.lit(0)).alias(f"landed_bytes_{i}")]
    metrics.append(F.coalesce(F.sum(F.length("body")), F.lit(0)).alias("bytes"))
    observed = df.observe(observation, *metrics)
    landed = decode_body(observed.where("matched").drop("matched"), cfg.body.format, cfg.body.schema_)
    write_slice(landed, table_path, ledger)
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
    by_queue: dict[str, int] = defaultdict(int)
    for (_, key), n in rows.items():
        by_queue[key] += n
    return Materialization(ledger, accounting, dict(by_queue), int(observed_metrics["bytes"]), version)


def _rows_in_slice(spark: SparkSession, table_path: str, windows: tuple[WindowEntry, ...]) -> dict[tuple[int, str], int]:
    """(window start ms, queue key) -> rows now in the table, read back from Delta."""
    queues = {r.queue for w in windows for r in w.ranges}
    if not queues:
        return {}
    counted = (spark.read.format("delta").load(table_path)
               .where(slice_predicate((w.start_ms for w in windows), queues))
               .groupBy((F.unix_millis("window_start")).alias("w"), "topic", "broker_name", "queue_id").count()
               .collect())
    return {(row["w"], queue_key(row["topic"], row["broker_name"], row["queue_id"])): row["count"] for row in counted}
