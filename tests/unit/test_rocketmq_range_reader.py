"""QueueCursor: the bookkeeping of read_ranges, fed with hand-built pull results (no I/O)."""

from __future__ import annotations

import pytest

from rocketlake.resources.rocketmq.errors import InvalidArgument, RangeUnreadable
from rocketlake.resources.rocketmq.message import Message
from rocketlake.resources.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.resources.rocketmq.pull import GetMessageStatus, PullResult, PullStatus
from rocketlake.resources.rocketmq.range_reader import QueueCursor, read_ranges

MQ = MessageQueue("T", "broker-a", 3)


def found(*offsets: int, max_offset: int = 1000) -> PullResult:
    messages = [Message("T", queue_id=3, queue_offset=o, body=str(o).encode()) for o in offsets]
    next_offset = offsets[-1] + 1 if offsets else 0
    return PullResult(PullStatus.FOUND, next_offset, 0, max_offset, messages=messages)


def spans(cursor: QueueCursor) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in cursor.in_flight]


def test_spans_tile_the_range_in_batches_and_stop_at_its_end() -> None:
    cursor = QueueCursor(MQ, 10, 75, batch_size=32)
    while cursor.next_span() is not None:
        pass
    assert spans(cursor) == [(10, 42), (42, 74), (74, 75)]
    assert cursor.next_span() is None and not cursor.finished


def test_full_answers_deliver_in_order_and_finish() -> None:
    cursor = QueueCursor(MQ, 0, 5, batch_size=3)
    cursor.next_span(), cursor.next_span()
    messages, rest = cursor.accept(found(0, 1, 2))
    assert [m.queue_offset for m in messages] == [0, 1, 2] and rest is None
    messages, rest = cursor.accept(found(3, 4))
    assert [m.queue_offset for m in messages] == [3, 4] and rest is None
    assert cursor.finished and cursor.delivered == 5


def test_a_short_answer_puts_the_rest_of_its_span_first() -> None:
    cursor = QueueCursor(MQ, 0, 64, batch_size=32)
    cursor.next_span(), cursor.next_span()
    messages, rest = cursor.accept(found(0, 1, 2, 3))  # e.g. the 256 KiB transfer cap
    assert [m.queue_offset for m in messages] == [0, 1, 2, 3]
    assert rest is not None and (rest.start, rest.end) == (4, 32)
    assert spans(cursor) == [(4, 32), (32, 64)]  # asked again before the later span is delivered
    messages, rest = cursor.accept(found(*range(4, 32)))
    assert rest is None and messages[0].queue_offset == 4 and cursor.delivered == 32


def test_an_answer_longer_than_its_span_is_cut_to_it() -> None:
    cursor = QueueCursor(MQ, 0, 2, batch_size=2)
    cursor.next_span()
    messages, _ = cursor.accept(found(0, 1, 2, 3))
    assert [m.queue_offset for m in messages] == [0, 1] and cursor.finished


@pytest.mark.parametrize("offsets, missing", [((1, 2), "[0, 1)"), ((0, 2), "[1, 2)")])
def test_a_hole_fails_naming_the_missing_offsets(offsets: tuple[int, ...], missing: str) -> None:
    cursor = QueueCursor(MQ, 0, 10, batch_size=10)
    cursor.next_span()
    with pytest.raises(RangeUnreadable) as caught:
        cursor.accept(found(*offsets))
    assert str(MQ) in str(caught.value) and f"offsets {missing} are missing" in str(caught.value)


@pytest.mark.parametrize(
    "result, why",
    [
        (PullResult(PullStatus.OFFSET_ILLEGAL, 50, 50, 90, store_status=GetMessageStatus.OFFSET_TOO_SMALL),
         "the broker already deleted these messages"),
        (PullResult(PullStatus.NO_NEW_MSG, 20, 0, 20, store_status=GetMessageStatus.OFFSET_OVERFLOW_ONE),
         "the queue ends before the range does"),
        (PullResult(PullStatus.NO_MATCHED_MSG, 21, 0, 90), "the broker returned no message for it"),
    ],
)
def test_an_empty_answer_fails_saying_why(result: PullResult, why: str) -> None:
    cursor = QueueCursor(MQ, 20, 40, batch_size=32)
    cursor.next_span()
    with pytest.raises(RangeUnreadable) as caught:
        cursor.accept(result)
    text = str(caught.value)
    assert why in text and "offset 20 of the range [20, 40)" in text and result.status.value in text


def test_bad_ranges_and_settings_are_refused_before_any_request() -> None:
    with pytest.raises(InvalidArgument, match=r"bad offset range \[5, 4\)"):
        QueueCursor(MQ, 5, 4, batch_size=32)
    for kwargs, needle in (({"batch_size": 0}, "batch_size"), ({"pulls_in_flight": 0}, "pulls_in_flight")):
        with pytest.raises(InvalidArgument, match=needle):
            next(read_ranges(None, [OffsetRange(MQ, 0, 10)], consumer_group="g", **kwargs))  # type: ignore[arg-type]


def test_empty_ranges_need_no_client() -> None:
    assert list(read_ranges(None, [OffsetRange(MQ, 7, 7)], consumer_group="g")) == []  # type: ignore[arg-type]
