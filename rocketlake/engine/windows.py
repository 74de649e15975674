"""Windows are a pure function of broker store time.

``b(q, t)`` is the first offset of queue ``q`` whose store timestamp is ``>= t`` (the queue's max
offset if none). A window ``W = [t0, t1)`` covers ``R(q, W) = [b(q, t0), b(q, t1))`` on every queue,
so adjacent windows tile each queue's offsets with no gap and no overlap, by construction.

SEARCH_OFFSET_BY_TIMESTAMP only gives a first guess (the *nearest* entry on 4.9.x and 5.0-5.1.3,
a bound from 5.1.4), so the exact boundary is found by reading store timestamps around the guess:
gallop away from the guess, then bisect. Store timestamps are non-decreasing within a queue
(the broker stamps them under the commit-log lock, in append order), which is what makes a
bisection exact. The reads go through the small ``StoreTimeReader`` protocol so this module is
pure and testable with plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange


class WindowNotClosed(ValueError):
    """The window still accepts messages (``t1 + grace > now``); materializing it would not be final."""


class MessagesDeleted(RuntimeError):
    """The broker deleted messages the group never landed; the message names the queues and offsets."""


@dataclass(frozen=True, order=True)
class StoreTimeWindow:
    """``[start_ms, end_ms)`` in epoch milliseconds of broker store time."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            raise ValueError(f"a window ends after it starts, got [{self.start_ms}, {self.end_ms})")

    @classmethod
    def from_datetimes(cls, start: datetime, end: datetime) -> "StoreTimeWindow":
        return cls(to_ms(start), to_ms(end))

    def check_closed(self, now_ms: int, grace_ms: int) -> None:
        if self.end_ms + grace_ms > now_ms:
            wait_s = (self.end_ms + grace_ms - now_ms + 999) // 1000
            raise WindowNotClosed(
                f"window [{iso(self.start_ms)}, {iso(self.end_ms)}) is not closed yet: it closes at "
                f"{iso(self.end_ms + grace_ms)} (end + {grace_ms // 1000}s grace), in {wait_s}s. "
                "Materialize it after that; a window is only final once no message can land in it."
            )


def to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone; store time is absolute")
    return int(value.timestamp() * 1000)


def iso(ms: int) -> str:
    from datetime import timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class StoreTimeReader(Protocol):
    """What finding ``b(q, t)`` needs from a broker, per queue."""

    def min_offset(self, queue: MessageQueue) -> int: ...

    def max_offset(self, queue: MessageQueue) -> int: ...

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The broker's guess for ``timestamp_ms`` (any offset; it is clamped and verified)."""

    def store_time(self, queue: MessageQueue, offset: int) -> int:
        """The store timestamp of the message at ``offset`` (min_offset <= offset < max_offset)."""


def first_offset_at_or_after(
    reader: StoreTimeReader, queue: MessageQueue, timestamp_ms: int, lo: int | None = None, hi: int | None = None
) -> int:
    """``b(q, t)`` within ``[lo, hi]`` (default: the queue's min and max offsets)."""
    lo = reader.min_offset(queue) if lo is None else lo
    hi = reader.max_offset(queue) if hi is None else hi
    if lo >= hi:
        return hi
    guess = min(max(reader.search_offset(queue, timestamp_ms), lo), hi - 1)

    def at_or_after(offset: int) -> bool:
        return reader.store_time(queue, offset) >= timestamp_ms

    # Invariant for the bisection: every offset <= below is before t, the answer is <= above.
    if at_or_after(guess):
        above, step = guess, 1
        below = guess - 1
        while below >= lo and at_or_after(below):
            above = below
            step *= 2
            below = above - step
        below = max(below, lo - 1)
    else:
        below, step = guess, 1
        above = guess + 1
        while above < hi and not at_or_after(above):
            below = above
            step *= 2
            above = below + step
        above = min(above, hi)
    while above - below > 1:
        middle = (above + below) // 2
        if middle < hi and at_or_after(middle):
            above = middle
        else:
            below = middle
    return above


def window_ranges(
    reader: StoreTimeReader,
    queues: list[MessageQueue],
    window: StoreTimeWindow,
    anchors: dict[MessageQueue, dict[int, int]] | None = None,
) -> list[OffsetRange]:
    """``R(q, W)`` for every queue, in the order of ``queues``.

    ``anchors``: boundaries recorded by earlier plans (``ledger.known_bounds``): a window starts where the one
    before it was planned to end, and ends where the one after it was planned to start, when those are known and
    the broker still holds them. So a message that became visible after its window was planned (dispatch lag, a
    short grace, a broker clock behind the planner's) lands in the next window, and store times that step back
    (a failover to a replica with a slower clock, an NTP step) make no window overlap the one before: never lost,
    never landed twice. Unknown boundaries are found from store times.
    """
    ranges = []
    for queue in queues:
        lo, hi = reader.min_offset(queue), reader.max_offset(queue)
        known = anchors.get(queue, {}) if anchors else {}
        start = known.get(window.start_ms)
        if start is None or not lo <= start <= hi:
            start = first_offset_at_or_after(reader, queue, window.start_ms, lo, hi)
        end = known.get(window.end_ms)
        if end is None or not start <= end <= hi:
            end = first_offset_at_or_after(reader, queue, window.end_ms, start, hi)
        ranges.append(OffsetRange(queue, start, end))
    return ranges
