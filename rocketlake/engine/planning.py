"""Turning offset ranges into Spark tasks, and ledgers into committed offsets: arithmetic, no I/O.

Two rules live here because everything else relies on them:

* ``split_ranges``: no task holds more than ``max_messages`` of one queue, so a task's memory is
  bounded by the push consumer's per-queue thresholds whatever the backlog; empty ranges are
  dropped and the last chunk of a range absorbs the remainder (as Spark's Kafka source does).
* ``advance_watermark``: the group's committed offset for a queue is the end of the longest
  contiguous run of materialized ranges starting at the current offset. It never skips a gap and
  never moves backward: RocketMQ's "ack = smallest unfinished offset".
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from rocketlake.rocketmq.message_queue import OffsetRange


def split_ranges(ranges: Iterable[OffsetRange], max_messages: int) -> list[OffsetRange]:
    """Chunks of at most ``max_messages`` offsets, in queue then offset order."""
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, got {max_messages}")
    chunks = []
    for r in sorted(ranges):
        start = r.start
        while start < r.end:
            end = min(start + max_messages, r.end)
            chunks.append(OffsetRange(r.queue, start, end))
            start = end
    return chunks


def advance_watermark(committed: int, materialized: Iterable[tuple[int, int]]) -> int:
    """End of the contiguous run of ``[start, end)`` ranges reachable from ``committed``."""
    watermark = committed
    for start, end in sorted(materialized):
        if start > watermark:
            break  # a gap: the offsets in between are not landed yet
        watermark = max(watermark, end)
    return watermark


def watermarks(
    committed: dict[Hashable, int | None], origin: dict[Hashable, int], landed: dict[Hashable, list[tuple[int, int]]]
) -> dict[Hashable, tuple[int | None, int]]:
    """``queue -> (committed, new)`` for every queue whose committed offset the landed ranges move.

    A queue with no committed offset advances from its ``origin`` (and is committed even if no range
    moves it past the origin, so the broker learns where the group starts); without an origin either,
    nothing is known about where the group starts and the queue is left alone.
    """
    moved = {}
    for queue, current in committed.items():
        base = current if current is not None else origin.get(queue)
        if base is None or queue not in landed:
            continue
        new = advance_watermark(base, landed[queue])
        if current is None or new > current:
            moved[queue] = (current, new)
    return moved
