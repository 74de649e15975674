"""b(q, t) and window ranges on plain data: exact whatever the broker's first guess."""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketlake.engine.windows import (
    StoreTimeWindow,
    WindowNotClosed,
    first_offset_at_or_after,
    window_ranges,
)
from rocketlake.rocketmq.message_queue import OffsetRange


@dataclass
class Queue:
    """Store timestamps of one queue from offset ``min_offset`` on, and a guess function."""

    times: list[int]
    min_offset: int = 0
    guess: str = "nearest"
    reads: list[int] = field(default_factory=list)


class Reader:
    def __init__(self, queues: dict[str, Queue]):
        self.queues = queues

    def min_offset(self, q):
        return self.queues[q].min_offset

    def max_offset(self, q):
        return self.queues[q].min_offset + len(self.queues[q].times)

    def search_offset(self, q, ts):
        queue = self.queues[q]
        exact = queue.min_offset + bisect_left(queue.times, ts)
        return {"nearest": exact, "early": exact - 3, "late": exact + 5, "zero": 0, "huge": 10**9}[queue.guess]

    def store_time(self, q, offset):
        queue = self.queues[q]
        assert queue.min_offset <= offset < self.max_offset(q), f"read outside the queue: {offset}"
        queue.reads.append(offset)
        return queue.times[offset - queue.min_offset]


def expected(queue: Queue, ts: int) -> int:
    return queue.min_offset + bisect_left(queue.times, ts)


@pytest.mark.parametrize("guess", ["nearest", "early", "late", "zero", "huge"])
@pytest.mark.parametrize("ts", [0, 100, 105, 110, 111, 150, 199, 200, 10_000])
def test_boundary_is_exact_whatever_the_guess(guess, ts):
    # Duplicate timestamps: several messages stored in the same millisecond.
    queue = Queue([100, 100, 105, 110, 110, 110, 120, 150, 150, 199], min_offset=7, guess=guess)
    assert first_offset_at_or_after(Reader({"q": queue}), "q", ts) == expected(queue, ts)


def test_empty_queue_boundary_is_its_max_offset():
    queue = Queue([], min_offset=42)
    assert first_offset_at_or_after(Reader({"q": queue}), "q", 123) == 42


def test_reads_are_logarithmic_when_the_guess_is_far():
    queue = Queue(list(range(100_000)), guess="zero")
    assert first_offset_at_or_after(Reader({"q": queue}), "q", 77_777) == 77_777
    assert len(queue.reads) < 40


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 50), max_size=60),
    st.integers(-5, 1300),
    st.integers(0, 20),
    st.sampled_from(["nearest", "early", "late", "zero", "huge"]),
)
def test_boundary_property(gaps, ts, min_offset, guess):
    times, now = [], 1000
    for g in gaps:
        now += g
        times.append(now)
    queue = Queue(times, min_offset=min_offset, guess=guess)
    assert first_offset_at_or_after(Reader({"q": queue}), "q", ts) == expected(queue, ts)


def test_adjacent_windows_tile_every_queue():
    rng = random.Random(3)
    queues = {
        name: Queue(
            sorted(rng.randrange(0, 600_000) for _ in range(rng.randrange(0, 300))),
            min_offset=rng.randrange(0, 5),
            guess=rng.choice(["nearest", "early", "late"]),
        )
        for name in ("a0", "a1", "b0")
    }
    reader = Reader(queues)
    minute = 60_000
    windows = [StoreTimeWindow(i * minute, (i + 1) * minute) for i in range(10)]
    per_queue: dict[str, list[OffsetRange]] = {q: [] for q in queues}
    for w in windows:
        for r in window_ranges(reader, list(queues), w):
            per_queue[r.queue].append(r)
    for name, ranges in per_queue.items():
        assert ranges[0].start == queues[name].min_offset
        assert ranges[-1].end == reader.max_offset(name)
        assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
        # Every message is in the window of its store time.
        for r, w in zip(ranges, windows):
            for off in range(r.start, r.end):
                assert w.start_ms <= queues[name].times[off - queues[name].min_offset] < w.end_ms


def test_window_must_be_closed_with_grace():
    start = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    w = StoreTimeWindow.from_datetimes(start, start + timedelta(hours=1))
    w.check_closed(now_ms=w.end_ms + 60_000, grace_ms=60_000)
    with pytest.raises(WindowNotClosed, match=r"not closed yet: it closes at 2026-11-01T11:01:00.000Z"):
        w.check_closed(now_ms=w.end_ms + 59_999, grace_ms=60_000)


def test_window_validation():
    with pytest.raises(ValueError, match="ends after it starts"):
        StoreTimeWindow(10, 10)
    with pytest.raises(ValueError, match="no time zone"):
        StoreTimeWindow.from_datetimes(datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="cannot end before it starts"):
        OffsetRange("q", 5, 4)
