"""The consumer group's offsets: where a group starts, and how far the ledger lets it move. No I/O.

A group with a committed offset resumes exactly there. A group without one (QUERY_CONSUMER_OFFSET
says not found) starts per ``consume_from_where``; that origin is written into the ledger by the
first run, so every later run agrees on it. Offsets move only over ledger entries a run may trust
(``ingest``: a balanced verdict, or a landing without one that Dagster recorded), and only forward along contiguous
ranges
(``planning.advance_watermark``); a crash between the Delta commit and the broker commit is
therefore repaired by simply committing again at the start of the next run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from rocketlake.engine.config import ConsumeFromWhere, IngestionConfig
from rocketlake.engine.ledger import LedgerEntry, landed_spans, origin_of
from rocketlake.engine.planning import watermarks
from rocketlake.engine.windows import StoreTimeReader, first_offset_at_or_after
from rocketlake.rocketmq.message_queue import MessageQueue


@dataclass(frozen=True)
class OffsetMove:
    queue: MessageQueue
    before: int | None
    after: int


def start_position(
    cfg: IngestionConfig, *, min_offset: int, max_offset: int, floor: int, timestamp_offset: int | None
) -> int:
    """Where a group with no committed offset starts, per consume_from_where (RebalancePushImpl's table).

    Only reached when QUERY_CONSUMER_OFFSET says "not found": like the Java client we send no
    ``setZeroIfNotFound``, so the broker itself answers 0 for a young queue whose first message
    is still in memory, and such a group starts at 0 whatever consume_from_where says.
    ``floor`` is ``b(q, window.start)``: offsets stored earlier belong to no partition, so starting
    there would leave a gap the watermark could never cross. The three deprecated names
    (``..._AND_FROM_MIN_WHEN_BOOT_FIRST``, ``..._MIN_OFFSET``, ``..._MAX_OFFSET``) start at the
    last offset, as in RebalancePushImpl.computePullFromWhereWithException.
    """
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return max(min_offset, floor)
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return max(timestamp_offset if timestamp_offset is not None else max_offset, floor)
    return max_offset


def initial_position(
    times: StoreTimeReader, cfg: IngestionConfig, mq: MessageQueue, now_ms: int, first_window_start_ms: int
) -> int:
    """``start_position`` with the broker's bounds and store-time boundaries for ``mq``."""
    lo, hi = times.min_offset(mq), times.max_offset(mq)
    floor = first_offset_at_or_after(times, mq, first_window_start_ms, lo, hi)
    ts_offset = None
    if cfg.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        ts = cfg.consume_from_timestamp_ms(datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc))
        ts_offset = first_offset_at_or_after(times, mq, ts, lo, hi)
    return start_position(cfg, min_offset=lo, max_offset=hi, floor=floor, timestamp_offset=ts_offset)


def moves_from_ledger(
    committed: dict[MessageQueue, int | None], entries: list[LedgerEntry], trusted: Callable[[LedgerEntry], bool]
) -> list[OffsetMove]:
    """Where each queue's committed offset may move over the entries ``trusted`` accepts (gaps count as passed)."""
    moved = watermarks(committed, origin_of(entries), landed_spans(entries, trusted))
    return [OffsetMove(mq, before, after) for mq, (before, after) in sorted(moved.items())]


@dataclass(frozen=True)
class ResetPlan:
    """What resetting a group's offsets to a time would do, per queue (RocketMQ's resetOffsetByTime)."""

    moves: list[OffsetMove]  # forward, or from no offset at all: applied
    unchanged: list[MessageQueue]
    backward: list[OffsetMove]  # refused: the ledger would move them forward again (see ``plan_reset``)


def plan_reset(committed: dict[MessageQueue, int | None], targets: dict[MessageQueue, int]) -> ResetPlan:
    """Offsets may only move forward: skipping messages is a reset, landing them again is a backfill.

    Moving a group back would not make anything land again (windows are functions of store time, and a
    schedule lands only the newest closed windows), and the next run would repair the offsets forward
    from the ledger, since those windows are landed; so a backward move is refused, not half-applied.
    """
    moves, unchanged, backward = [], [], []
    for mq, target in sorted(targets.items()):
        before = committed.get(mq)
        if before == target:
            unchanged.append(mq)
        elif before is None or target > before:
            moves.append(OffsetMove(mq, before, target))
        else:
            backward.append(OffsetMove(mq, before, target))
    return ResetPlan(moves, unchanged, backward)


class GroupOffsets(StoreTimeReader, Protocol):
    """A consumer group's queues and committed offsets on its brokers (``broker_access.GroupBroker``)."""

    def subscribed_queues(self) -> list[MessageQueue]: ...

    def committed_offset(self, queue: MessageQueue) -> int | None: ...


def plan_reset_to_time(group: GroupOffsets, to_ms: int) -> tuple[dict[MessageQueue, int | None], ResetPlan]:
    """RocketMQ's resetOffsetByTime, planned: each subscribed queue's committed offset, and the plan that moves it to
    the first message stored at or after ``to_ms`` (``plan_reset``'s rule: forward only)."""
    committed: dict[MessageQueue, int | None] = {}
    targets: dict[MessageQueue, int] = {}
    for mq in group.subscribed_queues():
        lo, hi = group.min_offset(mq), group.max_offset(mq)
        committed[mq] = group.committed_offset(mq)
        targets[mq] = first_offset_at_or_after(group, mq, to_ms, lo, hi)
    return committed, plan_reset(committed, targets)
