"""Exact offset ranges, read with several pulls in flight per queue.

A push consumer pulls one batch per queue and waits a round trip for it before asking for the
next (``PullMessageService``). A batch read knows its ranges in advance, so the next batches of
a queue can already be on the wire while the first is decoded: each queue keeps up to
``pulls_in_flight`` PULL_MESSAGE requests outstanding on its broker's one multiplexed connection
(a ``PullStream`` of ``BrokerClient.pull_stream``), all driven from the calling thread. No thread per queue and no
hand-off between them: in one Python process that is what keeps the GIL busy with decoding
rather than with switching. A queue is refilled when half of its pulls are answered, that half in one socket write,
and the connection reads whatever answers have arrived at once: a stock broker's answers of 32 records cost a
system call or two per several answers instead of three each.

A broker answers at most ``maxTransferCountOnMessageInMemory`` messages and
``maxTransferBytesOnMessageInMemory`` bytes a pull (32 and 256 KiB by default), whatever the batch
asks for. A queue learns that from short answers and asks for what the broker gives, so that its
pulls in flight each bring a full answer instead of one span waiting on its rest
(:class:`QueueCursor`).

Every range is pulled with the subscription ``*``, so the broker skips nothing and each offset
of ``[start, end)`` comes back exactly once, in order. A pull may return fewer messages than
asked (a commit-log file ends, the 256 KiB transfer cap); the rest of its span is asked for
again before the queue's later spans are delivered. An offset that cannot be read at all
(deleted, past the queue's end, skipped by the broker) raises :class:`RangeUnreadable`.
Tag or SQL filtering is the caller's: :meth:`Subscription.matches` on each message.

Pulls that fail, or cannot even be sent, for a reason worth repeating (a broken connection, a
timeout, a busy broker) are repeated one at a time through :meth:`RocketMQClient.pull`, which
refreshes the route and backs off; the pipelining resumes after that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from .columnar import RawRecords
from .errors import InvalidArgument, RangeUnreadable
from .filter import Subscription
from .message import Message
from .message_queue import MessageQueue, OffsetRange
from .pull import PullResult, ask_again
from .retry import is_retriable

if TYPE_CHECKING:
    from .broker import PendingPull, PullStream
    from .client import RocketMQClient

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "DEFAULT_PULLS_IN_FLIGHT", "QueueCursor", "read_ranges"]

#: Pulls kept outstanding per queue: enough to hide a round trip behind decoding on loopback and on a LAN
#: (benchmarks/pull_throughput.py), and to answer a stock broker's pulls of 32 several at a time
#: (benchmarks/pull_cost.py). A queue's pulls are refilled by halves, each half in one send, so at least half of them
#: stay on the wire while the caller works. ``max_messages_in_flight`` bounds the messages they may bring.
DEFAULT_PULLS_IN_FLIGHT = 16
#: Pulls outstanding over all queues at once; with hundreds of queues each gets fewer.
DEFAULT_MAX_IN_FLIGHT = 64
#: Full answers in a row after which a queue whose pulls were capped asks for twice as many again (see
#: ``QueueCursor``). At the broker's real cap, one probe in this many pulls comes back short and its rest costs a
#: round trip; after a commit-log file's end, the span is back to the batch within a few such rounds.
FULL_ANSWERS_BEFORE_GROWING = 8


class _Span:
    """Offsets ``[start, end)`` asked for by one pull (``pending`` until its answer is taken)."""

    __slots__ = ("end", "pending", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.pending: PendingPull | None = None


class QueueCursor:
    """One queue's range: which spans are asked for, which offsets were delivered (no I/O here).

    Spans are handed out in offset order by :meth:`next_span` and must be answered in that order
    by :meth:`accept`, which checks the answer covers the span's first offsets without a hole and
    returns what to deliver. A short answer puts the rest of its span back at the head.

    Spans are ``span_size`` long: ``batch_size`` at first. A short answer is usually the broker's
    transfer cap, so ``span_size`` comes down to it, but by half at most per answer: the end of a
    commit-log file also answers short, once. After ``FULL_ANSWERS_BEFORE_GROWING`` full answers in
    a row it doubles again (up to ``batch_size``), so a cap met by chance is not kept for good.
    """

    __slots__ = ("batch_size", "delivered", "end", "full_answers", "in_flight", "mq", "requested", "span_size", "start")

    def __init__(self, mq: MessageQueue, start: int, end: int, batch_size: int) -> None:
        if not 0 <= start <= end:
            raise InvalidArgument(f"{mq}: bad offset range [{start}, {end})")
        self.mq = mq
        self.start = start
        self.end = end
        self.batch_size = batch_size
        self.span_size = batch_size  # what one pull is expected to bring back (see the class text)
        self.full_answers = 0  # in a row, at the current span_size
        self.delivered = start  # every offset below has been returned by accept()
        self.requested = start  # every offset below is delivered or in a span of in_flight
        self.in_flight: deque[_Span] = deque()

    @property
    def finished(self) -> bool:
        return self.delivered >= self.end

    def next_span(self) -> _Span | None:
        """The next span to ask for (appended to :attr:`in_flight`), or None when all are asked."""
        if self.requested >= self.end:
            return None
        span = _Span(self.requested, min(self.requested + self.span_size, self.end))
        self.requested = span.end
        self.in_flight.append(span)
        return span

    def accept(self, result: PullResult) -> tuple[list[Message] | RawRecords, _Span | None]:
        """Take the answer to the head span: its messages, and a span for what it lacked (already
        placed at the head of :attr:`in_flight`, to be asked for before anything else)."""
        span = self.in_flight.popleft()
        start = span.start
        messages = result.messages
        if not messages:
            raise RangeUnreadable(self._describe_empty(start, result))
        if len(messages) > span.end - start:  # more than asked: never from a broker, cut to the span
            messages = messages[: span.end - start]
        gap = _first_gap(messages, start)
        if gap is not None:
            index, found = gap
            raise RangeUnreadable(
                f"{self.mq}: expected offset {start + index} of the range [{self.start}, {self.end}), "
                f"the broker returned {found}; offsets [{start + index}, {found}) are missing (likely a compaction "
                "topic, cleanup.policy=COMPACTION, which keeps only each key's last message and cannot be landed by "
                "offset windows; one read through a proxy, which does not tell a topic's attributes, shows it only "
                "here)"
            )
        self.delivered = start + len(messages)
        self._learn(len(messages), span.end - start)
        rest = None
        if self.delivered < span.end:
            rest = _Span(self.delivered, span.end)
            self.in_flight.appendleft(rest)
        return messages, rest

    def _learn(self, got: int, asked: int) -> None:
        if got < asked:
            self.span_size = max(got, self.span_size // 2, 1)
            self.full_answers = 0
        elif asked >= self.span_size and self.span_size < self.batch_size:
            self.full_answers += 1
            if self.full_answers >= FULL_ANSWERS_BEFORE_GROWING:
                self.span_size = min(self.batch_size, self.span_size * 2)
                self.full_answers = 0

    def _describe_empty(self, offset: int, result: PullResult) -> str:
        if offset < result.min_offset:
            why = "the broker already deleted these messages"
        elif offset >= result.max_offset:
            why = "the queue ends before the range does"
        else:
            why = "the broker returned no message for it"
        return (
            f"{self.mq}: pulling offset {offset} of the range [{self.start}, {self.end}) gave "
            f"{result.status.value} ({result.store_status.value if result.store_status else 'no store status'}; "
            f"queue min {result.min_offset}, max {result.max_offset}): {why}"
        )


def _first_gap(messages: list[Message] | RawRecords, start: int) -> tuple[int, int] | None:
    """(index, offset found there) of the first message not at ``start + index``, or None."""
    if isinstance(messages, RawRecords):
        first = messages.first_offset
        if first is not None:  # every offset from the first on: the first places them all
            return None if first == start else (0, first)
        wrong = np.flatnonzero(messages.queue_offsets != np.arange(start, start + len(messages)))
        return (int(wrong[0]), int(messages.queue_offsets[wrong[0]])) if len(wrong) else None
    for index, message in enumerate(messages):
        if message.queue_offset != start + index:
            return index, message.queue_offset
    return None


def read_ranges(
    client: RocketMQClient,
    ranges: Iterable[OffsetRange],
    *,
    consumer_group: str,
    batch_size: int = 32,
    pulls_in_flight: int = DEFAULT_PULLS_IN_FLIGHT,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    max_messages_in_flight: int | None = None,
    timeout: float | None = None,
    columnar: bool = False,
) -> Iterator[tuple[MessageQueue, list[Message] | RawRecords]]:
    """Every message of ``ranges``, as ``(queue, consecutive messages)`` in offset order per queue.

    With ``columnar``, an answer whose records :mod:`.columnar` can read comes as
    :class:`RawRecords` (indexed, not decoded), any other as decoded messages.

    Queues are served in turn, one pull's answer each. At most ``pulls_in_flight`` pulls of
    ``batch_size`` messages (or the fewer a broker gives, once learned) are outstanding per queue,
    about ``max_in_flight`` in all, and no more per queue than ``max_messages_in_flight`` messages
    can answer (each queue keeps at least one pull), so what waits in memory is bounded like the
    push consumer's process queue. Closing the iterator early abandons the outstanding pulls.
    """
    if not 1 <= batch_size <= 1024:  # pullBatchSize range of checkConfig
        raise InvalidArgument(f"batch_size must be within [1, 1024], got {batch_size}")
    if pulls_in_flight < 1 or max_in_flight < 1 or (max_messages_in_flight is not None and max_messages_in_flight < 1):
        raise InvalidArgument(
            f"pulls_in_flight, max_in_flight and max_messages_in_flight must be >= 1, got "
            f"{pulls_in_flight}, {max_in_flight}, {max_messages_in_flight}"
        )
    cursors = deque(QueueCursor(r.queue, r.start, r.end, batch_size) for r in ranges if r.end > r.start)
    if not cursors:
        return
    depth = max(1, min(pulls_in_flight, max_in_flight // len(cursors)))

    subscriptions = {topic: Subscription.parse(topic, "*") for topic in {c.mq.topic for c in cursors}}
    # Per queue: its pulls, to the broker they go to (``client.reader``: the one its last answer suggested, the
    # master, or while the master is down its slave); set up again after a retry or a new suggestion.
    streams: dict[MessageQueue, PullStream] = {}

    def send(cursor: QueueCursor, spans: list[_Span]) -> None:
        """The pulls of ``spans``, in one write (``PullStream.send_many``: all or none)."""
        mq = cursor.mq
        try:
            stream = streams.get(mq)
            if stream is None:
                stream = streams[mq] = client.reader(mq).pull_stream(
                    mq.topic,
                    mq.queue_id,
                    consumer_group=consumer_group,
                    subscription=subscriptions[mq.topic],
                    timeout=timeout,
                    columnar=columnar,
                )
            for span, pending in zip(spans, stream.send_many([(s.start, s.end - s.start) for s in spans])):
                span.pending = pending
        except Exception as exc:
            if not is_retriable(exc):
                raise
            for span in spans:  # not sent (e.g. the broker is restarting): answer() pulls each with retries
                span.pending = None

    def top_up(cursor: QueueCursor) -> None:
        """Refill the queue's pulls once half of them are answered, that half in one write: no more than ``depth``
        pulls and (one pull at least) no more messages than ``max_messages_in_flight`` can answer."""
        span_size = cursor.span_size
        most = depth if max_messages_in_flight is None else max(1, min(depth, max_messages_in_flight // span_size))
        have = len(cursor.in_flight)
        if have > most // 2:
            return
        # Counted from the spans outstanding, not from span_size: those sent before a short answer shrank it are
        # longer than the ones sent now.
        room = (
            None
            if max_messages_in_flight is None
            else max_messages_in_flight - sum(span.end - span.start for span in cursor.in_flight)
        )
        spans = []
        while have < most and (room is None or room >= span_size or not have):
            span = cursor.next_span()
            if span is None:
                break
            spans.append(span)
            have += 1
            if room is not None:
                room -= span.end - span.start
        if spans:
            send(cursor, spans)

    def answer(cursor: QueueCursor, span: _Span) -> PullResult:
        if span.pending is not None:
            try:
                result = span.pending.result()
            except Exception as exc:
                if not is_retriable(exc):
                    raise
            else:
                moved = client.pulled(cursor.mq, result)
                if moved:
                    streams.pop(cursor.mq, None)  # the next spans go where the broker suggested
                if not ask_again(moved, result):
                    return result  # else asked again below, one at a time
        # One at a time through the client's retries (route refresh, back-off), then pipelined again.
        streams.clear()
        return client.pull(
            cursor.mq,
            span.start,
            span.end - span.start,
            consumer_group=consumer_group,
            timeout=timeout,
            columnar=columnar,
        )

    try:
        for cursor in cursors:
            top_up(cursor)
        while cursors:
            cursor = cursors[0]
            result = answer(cursor, cursor.in_flight[0])
            messages, rest = cursor.accept(result)
            if rest is not None:
                send(cursor, [rest])
            top_up(cursor)  # before yielding: the broker works while the caller does
            if cursor.finished:
                cursors.popleft()
            else:
                cursors.rotate(-1)
            yield cursor.mq, messages
    finally:
        for cursor in cursors:
            for span in cursor.in_flight:
                if span.pending is not None:
                    span.pending.cancel()
