"""QueueCursor: the bookkeeping of read_ranges, fed with hand-built pull results (no I/O)."""

from __future__ import annotations

import re

import pytest

from rocketlake.rocketmq.errors import InvalidArgument, RangeUnreadable
from rocketlake.rocketmq.message import Message
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.rocketmq.pull import GetMessageStatus, PullResult, PullStatus
from rocketlake.rocketmq.range_reader import FULL_ANSWERS_BEFORE_GROWING, QueueCursor, read_ranges

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
        (
            PullResult(PullStatus.OFFSET_ILLEGAL, 50, 50, 90, store_status=GetMessageStatus.OFFSET_TOO_SMALL),
            "the broker already deleted these messages",
        ),
        (
            PullResult(PullStatus.NO_NEW_MSG, 20, 0, 20, store_status=GetMessageStatus.OFFSET_OVERFLOW_ONE),
            "the queue ends before the range does",
        ),
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
    for kwargs, needle in (
        ({"batch_size": 0}, "batch_size"),
        ({"pulls_in_flight": 0}, "pulls_in_flight"),
        ({"max_messages_in_flight": 0}, "max_messages_in_flight"),
    ):
        with pytest.raises(InvalidArgument, match=needle):
            next(read_ranges(None, [OffsetRange(MQ, 0, 10)], consumer_group="g", **kwargs))  # type: ignore[arg-type]


def test_empty_ranges_need_no_client() -> None:
    assert list(read_ranges(None, [OffsetRange(MQ, 7, 7)], consumer_group="g")) == []  # type: ignore[arg-type]


def answer_head(cursor: QueueCursor, cap: int) -> int:
    """Answer the head span as a broker capping pulls at ``cap`` messages would; how many it gave."""
    head = cursor.in_flight[0]
    given = min(cap, head.end - head.start)
    cursor.accept(found(*range(head.start, head.start + given), max_offset=cursor.end))
    return given


def test_a_queue_asks_for_what_a_capping_broker_gives_instead_of_waiting_on_each_rest() -> None:
    # pull_batch_size 1024 against a stock broker (32 a pull): each short answer halves the span size, at most.
    cursor = QueueCursor(MQ, 0, 100_000, batch_size=1024)
    cursor.next_span()
    learned = []
    while cursor.in_flight:  # the first span, asked for before anything was known: its rest, 32 at a time
        answer_head(cursor, 32)
        learned.append(cursor.span_size)
    assert learned[:6] == [512, 256, 128, 64, 32, 32] and len(learned) == 1024 // 32
    assert [cursor.next_span().end - cursor.in_flight[-1].start for _ in range(4)] == [32] * 4  # all full answers
    while cursor.in_flight:
        answer_head(cursor, 32)
    # At the cap every answer is full: one probe for twice as many after a run of full answers, back to the cap.
    seen = []
    for _ in range(3 * FULL_ANSWERS_BEFORE_GROWING):
        span = cursor.next_span()
        seen.append(span.end - span.start)
        while cursor.in_flight:
            answer_head(cursor, 32)
    assert set(seen) == {32, 64} and seen.count(64) <= 3


def test_a_short_answer_by_chance_is_not_kept_for_good() -> None:
    # The end of a commit-log file answers 3 messages once; the broker's real cap is 1024.
    cursor = QueueCursor(MQ, 0, 1_000_000, batch_size=1024)
    cursor.next_span()
    answer_head(cursor, 3)
    assert cursor.span_size == 512  # at most halved by one answer
    answers = 0
    while cursor.span_size < 1024:
        if not cursor.in_flight:
            cursor.next_span()
        answer_head(cursor, 1024)
        answers += 1
    assert answers == FULL_ANSWERS_BEFORE_GROWING  # full answers in a row: the batch size again


def test_pulls_in_flight_per_queue_stay_within_the_messages_a_queue_may_hold() -> None:
    from rocketlake.rocketmq.range_reader import DEFAULT_PULLS_IN_FLIGHT

    class Unanswered(Exception):
        pass

    class Recorder:
        """Stands in for the client: records the pulls sent; the first answer awaited ends the read."""

        def __init__(self) -> None:
            self.sizes: list[int] = []

        def reader(self, mq):
            return self

        def pull_stream(self, topic, queue_id, **options):
            return self

        def send(self, offset, max_msgs):
            self.sizes.append(max_msgs)
            return self

        def send_many(self, spans):
            return [self.send(offset, max_msgs) for offset, max_msgs in spans]

        def result(self):
            raise Unanswered()

        def cancel(self) -> None:
            pass

    for batch, threshold, expected in ((1024, 1000, 1), (32, 1000, DEFAULT_PULLS_IN_FLIGHT), (32, 64, 2)):
        recorder = Recorder()
        with pytest.raises(Unanswered):
            next(
                read_ranges(
                    recorder,
                    [OffsetRange(MQ, 0, 10_000)],
                    consumer_group="g",
                    batch_size=batch,
                    max_messages_in_flight=threshold,
                )
            )
        assert recorder.sizes == [batch] * expected, (batch, threshold, recorder.sizes)


class _Pending:
    def __init__(self, client: _Answering, offset: int, count: int) -> None:
        self.client, self.offset, self.count = client, offset, count

    def result(self) -> PullResult:
        return self.client.answered(self.offset, self.count)


class _Answering:
    """Stands in for the client and its pull streams (no I/O): ``writes`` holds the pulls of each write, in order;
    a pull of ``count`` from ``offset`` brings ``answer(offset, count)`` records, and ``outstanding`` counts the
    messages of the pulls sent and not yet answered (``most_outstanding`` its peak)."""

    def __init__(self, answer=lambda offset, count: count) -> None:
        self.answer = answer
        self.writes: list[int] = []
        self.outstanding = self.most_outstanding = 0

    def reader(self, mq):
        return self

    def pull_stream(self, topic, queue_id, **options):
        return self

    def send_many(self, spans: list[tuple[int, int]]) -> list[_Pending]:
        self.writes.append(len(spans))
        return [self._sent(offset, count) for offset, count in spans]

    def pulled(self, mq, result) -> bool:
        return False

    def _sent(self, offset: int, count: int) -> _Pending:
        self.outstanding += count
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        return _Pending(self, offset, count)

    def answered(self, offset: int, count: int) -> PullResult:
        self.outstanding -= count
        return found(*range(offset, offset + self.answer(offset, count)), max_offset=100_000)


def test_a_queue_is_refilled_by_halves_each_in_one_write() -> None:
    """Several pulls written at once cost one send; refilling at half keeps the other half on the wire while the
    caller works on what came."""
    from rocketlake.rocketmq.range_reader import DEFAULT_PULLS_IN_FLIGHT as depth

    client = _Answering()
    total = 32 * depth * 3
    read = [
        m.queue_offset for _, ms in read_ranges(client, [OffsetRange(MQ, 0, total)], consumer_group="g") for m in ms
    ]
    assert read == list(range(total))
    half = depth // 2
    # The whole depth at once, then a half each time half came.
    assert client.writes == [depth] + [half] * ((total // 32 - depth) // half), client.writes


def test_pulls_sent_before_a_short_answer_count_toward_the_messages_a_queue_may_hold() -> None:
    """A short answer shrinks the pulls asked for after it, not those already on the wire: the room left is counted
    from the spans outstanding (pulls of 128, threshold 1000, the first answer cut short by a commit-log file's end)."""
    client = _Answering(answer=lambda offset, count: 3 if offset == 0 else count)
    total = 20_000
    read = read_ranges(
        client, [OffsetRange(MQ, 0, total)], consumer_group="g", batch_size=128, max_messages_in_flight=1000
    )
    assert sum(len(ms) for _, ms in read) == total
    assert 896 <= client.most_outstanding <= 1000, client.most_outstanding


@pytest.mark.parametrize(
    "offsets, missing",
    [((3, 4, 5), None), ((4, 5, 6), "[3, 4)"), ((3, 5, 6), "[4, 5)"), ((3, 4, 6), "[5, 6)")],
)
def test_indexed_records_are_placed_by_their_offsets_with_or_without_a_gap(offsets, missing) -> None:
    """A broker's records as ``scan_records`` indexes them: consecutive ones are placed by their first offset alone,
    the others offset by offset, and a hole fails either way."""
    from rocketlake.rocketmq.columnar import scan_records
    from tests.unit.record_encoder import encode_message_record

    def record(offset: int) -> bytes:
        message = Message(
            "orders",
            queue_id=0,
            queue_offset=offset,
            born_host="127.0.0.1:5555",
            store_host="127.0.0.1:10911",
            body=b"x",
            properties={"UNIQ_KEY": f"{offset:032X}"},
        )
        return encode_message_record(message)

    records = scan_records(b"".join(record(offset) for offset in offsets))
    consecutive = offsets[-1] - offsets[0] == len(offsets) - 1  # placed by the first offset alone
    assert (records.first_offset is not None) == consecutive
    assert (records[1:].first_offset is not None) == consecutive and records[::2].first_offset is None
    cursor = QueueCursor(MQ, 3, 6, batch_size=3)
    cursor.next_span()
    answer = PullResult(PullStatus.FOUND, offsets[-1] + 1, 0, 100, messages=records)
    if missing is None:
        delivered, rest = cursor.accept(answer)
        assert delivered.queue_offsets.tolist() == [3, 4, 5] and rest is None and cursor.finished
    else:
        with pytest.raises(RangeUnreadable, match=rf"offsets {re.escape(missing)} are missing"):
            cursor.accept(answer)
