"""The consumer group's offsets on the broker: where a group starts, and committing from the ledger.

A group with a committed offset resumes exactly there. A group without one (QUERY_CONSUMER_OFFSET
says not found) starts per ``consume_from_where``; that origin is written into the ledger by the
first run, so every later run agrees on it. Offsets are committed only from ledger entries whose
materialization Dagster has recorded, and only forward along contiguous ranges
(``planning.advance_watermark``); a crash between the Delta commit and the broker commit is
therefore repaired by simply committing again at the start of the next run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from rocketlake.pipelines.broker_access import BrokerStoreTimes
from rocketlake.pipelines.config import ConsumeFromWhere, IngestionConfig
from rocketlake.pipelines.delta_writer import LedgerEntry, queue_key
from rocketlake.pipelines.planning import advance_watermark
from rocketlake.pipelines.windows import first_offset_at_or_after
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq.errors import SubscriptionGroupNotExist
from rocketlake.resources.rocketmq.message_queue import MessageQueue


@dataclass(frozen=True)
class OffsetMove:
    queue: MessageQueue
    before: int | None
    after: int


def committed_offsets(client: RocketMQClient, group: str, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
    """The broker's committed offset per queue (None: the group has none for that queue)."""
    return {mq: client.query_consumer_offset(group, mq) for mq in queues}


def start_position(cfg: IngestionConfig, *, min_offset: int, max_offset: int, floor: int,
                   timestamp_offset: int | None) -> int:
    """Where a group with no committed offset starts, per consume_from_where (RebalancePushImpl's table).

    Only reached when QUERY_CONSUMER_OFFSET says "not found": like the Java client we send no
    ``setZeroIfNotFound``, so the broker itself answers 0 for a young queue whose first message
    is still in memory, and such a group starts at 0 whatever consume_from_where says.
    ``floor`` is ``b(q, window.start)``: offsets stored earlier belong to no partition, so starting
    there would leave a gap the watermark could never cross.
    """
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
        return max_offset
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return max(min_offset, floor)
    return max(timestamp_offset if timestamp_offset is not None else max_offset, floor)


def initial_position(client: RocketMQClient, cfg: IngestionConfig, mq: MessageQueue, now_ms: int,
                     first_window_start_ms: int) -> int:
    """``start_position`` with the broker's bounds and store-time boundaries for ``mq``."""
    times = BrokerStoreTimes(client, cfg.consumer_group)
    lo, hi = times.min_offset(mq), times.max_offset(mq)
    floor = first_offset_at_or_after(times, mq, first_window_start_ms, lo, hi)
    ts_offset = None
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        from datetime import datetime, timezone

        ts = cfg.consume_from_timestamp_ms(datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc))
        ts_offset = first_offset_at_or_after(times, mq, ts, lo, hi)
    return start_position(cfg, min_offset=lo, max_offset=hi, floor=floor, timestamp_offset=ts_offset)


def ledger_origin(entries: Iterable[LedgerEntry]) -> dict[str, int]:
    """The origin each queue got from the first run that saw the group without an offset."""
    origin: dict[str, int] = {}
    for entry in entries:
        for key, offset in entry.origin.items():
            origin.setdefault(key, offset)
    return origin


def commit_from_ledger(client: RocketMQClient, group: str, queues: Collection[MessageQueue],
                       entries: Iterable[LedgerEntry], recorded_runs: Collection[str],
                       current: dict[MessageQueue, int | None] | None = None) -> list[OffsetMove]:
    """Advance the group's offset on every queue whose contiguous run of recorded ranges moved.

    ``current``: the group's committed offsets if the caller already asked the broker.
    """
    entries = list(entries)
    landed: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for entry in entries:
        if entry.consumer_group != group or entry.run_id not in recorded_runs:
            continue
        for window in entry.windows:
            for r in window.ranges:
                landed[queue_key(r.topic, r.broker_name, r.queue_id)].append((r.start, r.end))
        for key, gap in entry.gaps.items():  # accepted losses count as passed, so the watermark can cross them
            landed[key].append(gap)
    origin = ledger_origin(e for e in entries if e.consumer_group == group)
    moves = []
    committed = current if current is not None else committed_offsets(client, group, queues)
    for mq, offset in committed.items():
        key = queue_key(mq.topic, mq.broker_name, mq.queue_id)
        base = offset if offset is not None else origin.get(key)
        if base is None or key not in landed:
            continue
        target = advance_watermark(base, landed[key])
        if offset is None or target > offset:
            _update(client, group, mq, target)
            moves.append(OffsetMove(mq, offset, target))
    return moves


def _update(client: RocketMQClient, group: str, mq: MessageQueue, offset: int) -> None:
    try:
        client.update_consumer_offset(group, mq, offset)
    except SubscriptionGroupNotExist:
        # A broker that does not auto-create groups on offset updates: create it, then retry once.
        client.create_subscription_group(group, brokers=[mq.broker_name])
        client.update_consumer_offset(group, mq, offset)
