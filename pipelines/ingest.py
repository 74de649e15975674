"""One ingestion run, free of Dagster: repair offsets, decide starts, materialize, commit.

The Dagster asset calls ``prepare`` and ``materialize_windows`` before it yields the
materialization, and ``commit`` only after Dagster has recorded it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from pyspark.sql import SparkSession

from rocketlake.pipelines.config import IngestionConfig, MessageModel
from rocketlake.pipelines.delta_writer import LedgerEntry, queue_key, read_ledger
from rocketlake.pipelines.materialize import Materialization, materialize, subscribed_queues
from rocketlake.pipelines.offsets import OffsetMove, commit_from_ledger, committed_offsets, initial_position, ledger_origin
from rocketlake.pipelines.windows import Window
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq.message_queue import MessageQueue


class MessagesDeleted(RuntimeError):
    """The broker deleted messages the group never landed; the message names the queues and offsets."""


@dataclass(frozen=True)
class Prepared:
    queues: list[MessageQueue]
    ledger: list[LedgerEntry]
    repaired: list[OffsetMove]         # offsets a previous run landed but did not commit
    starts: dict[MessageQueue, int]    # where the group stands on each queue (committed or origin)
    new_origin: dict[str, int]         # origins decided by this run (a group with no offsets yet)
    gaps: dict[str, tuple[int, int]]   # offsets deleted before they were landed (on_deleted_messages=record)


def prepare(spark: SparkSession, client: RocketMQClient, cfg: IngestionConfig, table_path: str,
            recorded_runs: Collection[str], now_ms: int, first_window_start_ms: int) -> Prepared:
    if cfg.message_model is MessageModel.BROADCASTING:
        # Broadcasting progress lives in a local offset store per client id, never on the broker;
        # until that store exists, refuse rather than commit broadcast progress as the group's.
        raise NotImplementedError(
            f"message_model BROADCASTING (group {cfg.consumer_group}) is not supported yet: its offsets belong in a "
            "local offset store, which rocketlake does not have yet. Use CLUSTERING for this ingestion for now.")
    ledger = read_ledger(spark, table_path)
    queues = subscribed_queues(client, cfg)
    committed = committed_offsets(client, cfg.consumer_group, queues)
    repaired = commit_from_ledger(client, cfg.consumer_group, queues, ledger, recorded_runs, committed)
    committed |= {move.queue: move.after for move in repaired}
    origin = ledger_origin(e for e in ledger if e.consumer_group == cfg.consumer_group)
    starts, new_origin = {}, {}
    for mq, offset in committed.items():
        key = queue_key(mq.topic, mq.broker_name, mq.queue_id)
        if offset is not None:
            starts[mq] = offset
        elif key in origin:
            starts[mq] = origin[key]
        else:
            starts[mq] = new_origin[key] = initial_position(client, cfg, mq, now_ms, first_window_start_ms)
    gaps = deleted_gaps(client, starts)
    if gaps and cfg.on_deleted_messages == "fail":
        listed = "; ".join(f"{k}: [{lo}, {hi})" for k, (lo, hi) in sorted(gaps.items()))
        raise MessagesDeleted(
            f"the broker deleted messages group {cfg.consumer_group} never landed ({listed}). Nothing was written. "
            "Land them from a backup if you have one; to accept the loss, set on_deleted_messages: record for this "
            "ingestion, which records the gap in the ledger and moves on.")
    return Prepared(queues, ledger, repaired, starts, new_origin, gaps)


def deleted_gaps(client: RocketMQClient, starts: dict[MessageQueue, int]) -> dict[str, tuple[int, int]]:
    """Queues where the group stands below the broker's min offset: [position, min) is gone."""
    gaps = {}
    for mq, position in starts.items():
        lowest = client.get_min_offset(mq)
        if position < lowest:
            gaps[queue_key(mq.topic, mq.broker_name, mq.queue_id)] = (position, lowest)
    return gaps


def materialize_windows(spark: SparkSession, client: RocketMQClient, source_options: dict[str, str],
                        ingestion: str, cfg: IngestionConfig, table_path: str, windows: list[tuple[str, Window]],
                        run_id: str, prepared: Prepared, *, clip_to_group_position: bool,
                        log: Callable[[str], None] = lambda _: None) -> Materialization:
    """Scheduled runs start where the group stands; an explicit backfill always takes whole windows."""
    return materialize(spark, client, source_options, ingestion, cfg, table_path, windows, run_id,
                       starts=prepared.starts if clip_to_group_position else None, origin=prepared.new_origin,
                       gaps=prepared.gaps, log=log)


def commit(client: RocketMQClient, cfg: IngestionConfig, prepared: Prepared, landed: LedgerEntry,
           recorded_runs: Collection[str]) -> list[OffsetMove]:
    return commit_from_ledger(client, cfg.consumer_group, prepared.queues, [*prepared.ledger, landed], recorded_runs)
