"""Task splitting and the watermark rule, as tables of cases."""

from __future__ import annotations

import pytest

from rocketlake.engine.planning import advance_watermark, split_ranges, watermarks
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

A0, B0, A1 = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-b", 0), MessageQueue("t", "broker-a", 1)


@pytest.mark.parametrize(
    ("ranges", "limit", "chunks"),
    [
        ([OffsetRange(A0, 0, 10)], 4, [(A0, 0, 4), (A0, 4, 8), (A0, 8, 10)]),
        ([OffsetRange(A0, 0, 8)], 4, [(A0, 0, 4), (A0, 4, 8)]),
        ([OffsetRange(A0, 5, 5)], 4, []),  # empty ranges are dropped
        ([OffsetRange(B0, 0, 2), OffsetRange(A0, 3, 4)], 1000, [(A0, 3, 4), (B0, 0, 2)]),  # queue order
        ([OffsetRange(A0, 0, 3)], 1, [(A0, 0, 1), (A0, 1, 2), (A0, 2, 3)]),
    ],
)
def test_split_ranges(ranges, limit, chunks):
    assert [(c.queue, c.start, c.end) for c in split_ranges(ranges, limit)] == chunks


def test_split_never_loses_or_repeats_an_offset():
    ranges = [OffsetRange(A0, 17, 10_017), OffsetRange(B0, 0, 999)]
    chunks = split_ranges(ranges, 333)
    assert all(c.size <= 333 for c in chunks)
    for r in ranges:
        offsets = [o for c in chunks if c.queue == r.queue for o in range(c.start, c.end)]
        assert offsets == list(range(r.start, r.end))


def test_split_rejects_a_zero_limit():
    with pytest.raises(ValueError, match="max_messages must be >= 1"):
        split_ranges([OffsetRange(A0, 0, 1)], 0)


@pytest.mark.parametrize(
    ("committed", "materialized", "expected"),
    [
        (0, [(0, 10), (10, 20)], 20),
        (0, [(10, 20), (0, 10)], 20),  # order of materialization does not matter
        (0, [(0, 10), (15, 20)], 10),  # never past a gap
        (0, [(5, 10)], 0),  # a gap right at the start
        (30, [(0, 10), (10, 20)], 30),  # never backward
        (10, [(0, 20), (20, 20), (20, 25)], 25),  # overlapping and empty windows
        (7, [(7, 7), (7, 9)], 9),
    ],
)
def test_advance_watermark(committed, materialized, expected):
    assert advance_watermark(committed, materialized) == expected


def test_watermarks_report_only_queues_that_move():
    moved = watermarks({A0: 0, B0: 5}, {}, {A0: [(0, 3)], B0: [(6, 9)], A1: [(0, 4)]})
    assert moved == {A0: (0, 3)}  # B0 has a gap at 5; A1 is not a queue of the group


def test_watermarks_start_a_queue_without_offset_at_its_origin():
    committed = {A0: None, B0: None, A1: None}
    moved = watermarks(committed, {A0: 10, B0: 4}, {A0: [(10, 12)], B0: [(0, 3)], A1: [(0, 4)]})
    # A0 moves from its origin; B0 is committed at its origin though no range passes it (the broker
    # learns where the group starts); A1 has no origin: nothing is known, nothing moves.
    assert moved == {A0: (None, 12), B0: (None, 4)}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("CONSUME_FROM_LAST_OFFSET", 90),
        ("CONSUME_FROM_FIRST_OFFSET", 25),  # min 10, but the first window starts at offset 25
        ("CONSUME_FROM_TIMESTAMP", 40),
    ],
)
def test_start_position_of_a_group_without_offsets(where, expected):
    from rocketlake.engine.config import parse_config
    from rocketlake.engine.offsets import start_position
    from tests.unit.support import with_ingestion

    cfg = parse_config(with_ingestion(consume_from_where=where)).ingestions["orders"]
    assert start_position(cfg, min_offset=10, max_offset=90, floor=25, timestamp_offset=40) == expected


def test_timestamp_before_the_first_window_starts_at_the_first_window():
    from rocketlake.engine.config import parse_config
    from rocketlake.engine.offsets import start_position
    from tests.unit.support import with_ingestion

    cfg = parse_config(with_ingestion(consume_from_where="CONSUME_FROM_TIMESTAMP")).ingestions["orders"]
    assert start_position(cfg, min_offset=0, max_offset=90, floor=25, timestamp_offset=3) == 25
